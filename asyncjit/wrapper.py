"""``JitWrapper``: build a model's graph once, prepare it once, execute it many times.

A subclass declares its inputs and bounded vars as class attributes and a ``build`` method::

    class EncoderJit(asyncjit.JitWrapper[Encoder]):
        mel = asyncjit.Input()
        lengths = asyncjit.Input()
        b = asyncjit.VarSpec(1, lambda model: model.config.max_batch_size)
        t = asyncjit.VarSpec(1, lambda model: model.config.max_mel_frames)

        def build(self, model, mel, lengths, b, t):
            return model.encoder.forward_batch(mel, lengths, b, t)

    jit = EncoderJit(model).with_t_bound(1500)
    jit.prepare(InputSpec.f32((8, 80, 1500)), InputSpec.i32((8,)))
    jit.mel_mut()[:] = features            # write inputs in place (zero-copy views)
    jit.execute_with_vars({"b": 3, "t": 120})
    out = jit.output().to_numpy_blocking()

Life cycle: construction resolves each ``VarSpec`` against the model into a ``symbolic.Var``;
``with_<var>_bound`` / ``with_<var>_min_bound`` / ``with_<var>_fixed`` narrow a var before
``prepare``; ``prepare`` builds the graph on placeholders of the ``InputSpec`` shapes (the maximum
input sizes), compiles it once, and allocates the input buffers; each step writes inputs through
``<input>_mut()`` and replays. ``build`` runs once, so it must not branch on data: per-step
variation flows only through input buffers and var values (DESIGN invariant 1).

``execute*`` are blocking calls for scripts (tiny plans run inline on the calling thread);
``await execute_async(...)`` is the event-loop form and never blocks the loop.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs
import numpy as np

from . import dtypes as dt
from ._log import get_logger
from .dtypes import DType
from .errors import (
    ArgumentCountError,
    ArgumentTypeError,
    BufferDeletedError,
    BuildError,
    DeviceError,
    DuplicateInputBufferError,
    InputBufferNotFoundError,
    InvalidArgumentError,
    JitError,
    NotPreparedError,
    ShapeMismatchError,
    TensorError,
    VarBoundsError,
)
from .symbolic import Var
from .tensor import Tensor

__all__ = [
    "Input",
    "InputSpec",
    "JitWrapper",
    "KernelProfile",
    "PrepareConfig",
    "VarSpec",
]

_log = get_logger("asyncjit.wrapper")
M = TypeVar("M")
Bound = int | Callable[[Any], int]


class Input:
    """Declares one input of a ``JitWrapper``; its name is the attribute's name."""

    name: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Input({self.name!r})"


class VarSpec:
    """Declares a bounded symbolic var; ``min``/``max`` are ints or callables of the model."""

    name: str = ""

    def __init__(self, min: Bound, max: Bound) -> None:
        self.min = min
        self.max = max

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def resolve(self, model: Any) -> Var:
        """The ``Var`` for this model (bounds evaluated now, once)."""
        lo = self.min(model) if callable(self.min) else self.min
        hi = self.max(model) if callable(self.max) else self.max
        return Var(self.name, int(lo), int(hi))

    def __repr__(self) -> str:
        return f"VarSpec({self.name!r}, {self.min!r}, {self.max!r})"


def _int_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Dims as ints >= 0: ``2.5`` or ``-2`` is an ``InvalidArgumentError``, never truncated."""
    out = []
    for d in shape:
        if isinstance(d, bool) or not hasattr(d, "__index__") or d.__index__() < 0:
            raise InvalidArgumentError(f"InputSpec dims must be ints >= 0, got {d!r} in {tuple(shape)!r}")
        out.append(d.__index__())
    return tuple(out)


@attrs.frozen
class InputSpec:
    """The maximum shape and dtype of one input; ``prepare`` allocates buffers of this size."""

    shape: tuple[int, ...] = attrs.field(converter=_int_shape)
    dtype: DType = attrs.field(converter=dt.from_numpy)

    @classmethod
    def f32(cls, shape: Sequence[int]) -> InputSpec:
        return cls(tuple(shape), dt.float32)

    @classmethod
    def i32(cls, shape: Sequence[int]) -> InputSpec:
        return cls(tuple(shape), dt.int32)

    @classmethod
    def i64(cls, shape: Sequence[int]) -> InputSpec:
        return cls(tuple(shape), dt.int64)


@attrs.frozen
class PrepareConfig:
    """How ``prepare`` compiles and where it runs.

    Attributes:
        device: a ``Device``, an index into the default client's devices, or None (the first).
        opt_level: LLVM optimisation level 0-3 (part of the compile-cache key).
        cache_dir: compile cache directory for this prepare, ``"off"`` to disable, None for the
            default (``ASYNCJIT_CACHE_DIR`` or the user cache directory).
        profiling: allow ``execute_profiled`` (every plan carries its instrumented entry point,
            which costs nothing until called; False makes ``execute_profiled`` refuse).
    """

    device: Any = None
    opt_level: int = 3
    cache_dir: str | None = None
    profiling: bool = True

    @classmethod
    def from_env(cls) -> PrepareConfig:
        """Read ``ASYNCJIT_DEVICE`` (an index), ``ASYNCJIT_OPT_LEVEL``, ``ASYNCJIT_CACHE_DIR``,
        ``ASYNCJIT_PROFILE`` (default on; ``0``/``false`` make ``execute_profiled`` refuse).

        Raises:
            InvalidArgumentError: (a ``ValueError``) a variable that is set but malformed, naming it.
        """
        env = os.environ
        device: Any = None
        if env.get("ASYNCJIT_DEVICE"):
            try:
                device = int(env["ASYNCJIT_DEVICE"])
            except ValueError:
                raise InvalidArgumentError(
                    f"ASYNCJIT_DEVICE must be a device index, got {env['ASYNCJIT_DEVICE']!r}"
                ) from None
        level = env.get("ASYNCJIT_OPT_LEVEL", "3")
        if level not in {"0", "1", "2", "3"}:
            raise InvalidArgumentError(f"ASYNCJIT_OPT_LEVEL must be 0-3, got {level!r}")
        flag = env.get("ASYNCJIT_PROFILE", "1").strip().lower()
        if flag not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            raise InvalidArgumentError(
                f"ASYNCJIT_PROFILE must be 1/true/yes/on or 0/false/no/off, got {flag!r}"
            )
        profiling = flag in {"1", "true", "yes", "on"}
        return cls(
            device=device, opt_level=int(level), cache_dir=env.get("ASYNCJIT_CACHE_DIR"), profiling=profiling
        )


@attrs.frozen
class KernelProfile:
    """One kernel of one profiled execution."""

    name: str
    duration: float  # seconds
    bytes: int
    flops: int


@attrs.define(eq=False)
class _Prepared:
    loaded: Any  # runtime.LoadedExecutable
    inputs: dict[str, Any]  # name -> Buffer
    views: dict[str, np.ndarray]
    prepared_values: dict[str, int]
    output: Any  # Buffer of the last execution (or the zero buffer made at prepare)
    var_names: tuple[str, ...]
    profiling: bool = True
    in_flight: int = 0


class JitWrapper(Generic[M]):
    """Base class of declarative jit wrappers; see the module docstring."""

    _inputs: ClassVar[tuple[str, ...]] = ()
    _var_specs: ClassVar[dict[str, VarSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        inputs: list[str] = []
        var_specs: dict[str, VarSpec] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Input) and name not in inputs:
                    inputs.append(name)
                elif isinstance(value, VarSpec):
                    var_specs[name] = value
        cls._inputs = tuple(inputs)
        cls._var_specs = var_specs
        build = cls.__dict__.get("build")
        if build is not None:
            params = list(inspect.signature(build).parameters.values())[2:]  # self, model
            known = set(inputs) | set(var_specs)
            for p in params:
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    continue
                if p.name not in known:
                    raise ArgumentTypeError(
                        f"{cls.__qualname__}.build parameter {p.name!r} names neither an input "
                        f"({', '.join(inputs) or 'none'}) nor a var ({', '.join(var_specs) or 'none'})"
                    )
        for name in var_specs:
            for suffix, method in (
                ("bound", _with_bound),
                ("min_bound", _with_min_bound),
                ("fixed", _with_fixed),
            ):
                attr = f"with_{name}_{suffix}"
                if attr not in cls.__dict__:
                    setattr(cls, attr, _bind_var_setter(method, name, attr))
        for name in inputs:
            attr = f"{name}_mut"
            if attr not in cls.__dict__:
                setattr(cls, attr, _bind_input_mut(name, attr))

    if TYPE_CHECKING:
        # The with_<var>_* setters and <input>_mut accessors are generated per subclass; this
        # lets type checkers accept them (there is no __getattr__ at run time).
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, model: M, *, device: Any = None) -> None:
        self.model = model
        self._device = device
        self._vars: dict[str, Var] = {n: spec.resolve(model) for n, spec in self._var_specs.items()}
        self._prepared: _Prepared | None = None
        self.last_timing: float | None = None

    def __repr__(self) -> str:
        state = "prepared" if self._prepared else "not prepared"
        vs = ", ".join(f"{v.name}∈[{v.min},{v.max}]" for v in self._vars.values())
        return f"<{type(self).__qualname__} {state} inputs=({', '.join(self._inputs)}) vars=({vs})>"

    # -- to be written by subclasses -------------------------------------------------------------
    def build(self, model: M, *args: Any, **kwargs: Any) -> Tensor:
        """Build the output from input tensors and vars; override in the subclass."""
        raise BuildError(f"{type(self).__qualname__} does not define build()")

    # -- configuration (before prepare) ----------------------------------------------------------
    @property
    def vars(self) -> dict[str, Var]:
        """The vars with their current bounds."""
        return dict(self._vars)

    def _set_var(self, name: str, lo: int, hi: int, setter: str) -> None:
        if self._prepared is not None:
            raise InvalidArgumentError(
                f"{setter}() must be called before prepare(): the plan is already compiled"
            )
        self._vars[name] = Var(name, lo, hi)

    # -- prepare -----------------------------------------------------------------------------------
    def prepare(self, *specs: InputSpec) -> JitWrapper[M]:
        """Build, compile and allocate with ``PrepareConfig.from_env()``; returns ``self``."""
        return self.prepare_with_config(*specs, config=PrepareConfig.from_env())

    def prepare_with_config(self, *specs: InputSpec, config: PrepareConfig) -> JitWrapper[M]:
        """``prepare`` with an explicit config.

        Raises:
            TypeError: wrong number of specs. BuildError: ``build`` raised (cause kept).
            TensorError: a tensor op in ``build`` rejected its operands.
            DeviceError: the device could not be reached or allocation failed.
        """
        if len(specs) != len(self._inputs):
            raise ArgumentCountError(
                f"{type(self).__qualname__}.prepare takes one InputSpec per input "
                f"({', '.join(self._inputs)}), got {len(specs)}"
            )
        for spec in specs:
            if not isinstance(spec, InputSpec):
                raise ArgumentTypeError(f"prepare takes InputSpec values, got {type(spec).__qualname__}")
        started = time.perf_counter()
        placeholders = {
            name: Tensor.placeholder(spec.shape, spec.dtype, name=name)
            for name, spec in zip(self._inputs, specs, strict=True)
        }
        output = self._run_build(placeholders)
        from .compiler import compile as compile_graph

        fixed = {v.name: v.min for v in self._vars.values() if v.min == v.max}
        executable = compile_graph(
            [output],
            list(placeholders.values()),
            name=type(self).__qualname__,
            fixed=fixed or None,
            opt_level=config.opt_level,
            cache_dir=config.cache_dir,
        )
        device = _resolve_device(config.device if config.device is not None else self._device)
        loaded = device.client.load(executable, device)
        inputs: dict[str, Any] = {}
        views: dict[str, np.ndarray] = {}
        for name, spec in zip(self._inputs, specs, strict=True):
            buf = device.client.buffer_from_host(np.zeros(spec.shape, spec.dtype.np), device=device)
            buf.block_until_ready()
            inputs[name] = buf
            views[name] = buf.numpy_view(writable=True)
        names = loaded.signature.var_names
        values = {n: self._vars[n].max for n in names if n in self._vars}
        out_shape = loaded.signature.output_shapes(loaded.signature.var_values(values))[0]
        zero = device.client.buffer_from_host(np.zeros(out_shape, output.dtype.np), device=device)
        self._prepared = _Prepared(loaded, inputs, views, values, zero, names, config.profiling)
        _log.info(
            "wrapper.prepare",
            plan=type(self).__qualname__,
            device=device.id,
            vars={n: (v.min, v.max) for n, v in self._vars.items()},
            seconds=round(time.perf_counter() - started, 4),
        )
        return self

    def _run_build(self, placeholders: Mapping[str, Tensor]) -> Tensor:
        kwargs: dict[str, Any] = dict(placeholders)
        kwargs.update(self._vars)
        params = list(inspect.signature(self.build).parameters)
        try:
            out = self.build(self.model, **{k: v for k, v in kwargs.items() if k in params})
        except TensorError:
            raise
        except JitError:
            raise
        except Exception as exc:
            raise BuildError(f"{type(self).__qualname__}.build raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, Tensor):
            raise BuildError(
                f"{type(self).__qualname__}.build must return a Tensor, got {type(out).__qualname__}"
            )
        return out

    def _ready(self) -> _Prepared:
        if self._prepared is None:
            raise NotPreparedError(
                f"{type(self).__qualname__}: call prepare() before executing or reading buffers"
            )
        return self._prepared

    @property
    def is_prepared(self) -> bool:
        return self._prepared is not None

    # -- per step ----------------------------------------------------------------------------------
    def _values(self, given: Mapping[str, int] | Iterable[tuple[str, int]] | None) -> dict[str, int]:
        p = self._ready()
        values = dict(p.prepared_values)  # unlisted vars: their prepare-time value, never a leftover
        if given is not None:
            pairs = given.items() if isinstance(given, Mapping) else given
            if isinstance(pairs, str | bytes) or not isinstance(pairs, Iterable):
                raise ArgumentTypeError(
                    f"var values must be a mapping or (name, value) pairs, got {type(given).__name__}"
                )
            for pair in pairs:
                if not isinstance(pair, tuple | list) or len(pair) != 2:
                    raise ArgumentTypeError(f"var values must be (name, value) pairs, got {pair!r}")
                name, value = pair
                if name not in self._vars:
                    raise VarBoundsError(
                        f"{type(self).__qualname__} has no var {name!r} (vars: {', '.join(self._vars)})"
                    )
                if name in values:
                    values[name] = value
                else:  # fixed (or unused) vars are constants of the plan: only their value is accepted
                    var = self._vars[name]
                    if isinstance(value, bool) or not isinstance(value, int | np.integer):
                        raise VarBoundsError(f"var {name!r} must be bound to an int, got {value!r}")
                    if not var.min <= value <= var.max:
                        raise VarBoundsError(
                            f"var {name!r} = {value} is out of its bounds [{var.min}, {var.max}]"
                        )
        return values

    def _submit(self, values: dict[str, int]) -> list[Any]:
        p = self._ready()
        args = [p.inputs[n] for n in self._inputs]
        from .errors import WouldBlock

        # The caller blocks until the result is ready anyway, so a thread hop buys no overlap:
        # run on this thread whenever the device is idle.
        try:
            return list(p.loaded.execute_nowait(args, values, inline=True))
        except WouldBlock:
            return list(p.loaded.execute_blocking(args, values, inline=True))

    def execute(self) -> None:
        """Replay with the current input buffers and the prepare-time var values (blocking)."""
        self.execute_with_vars(None)

    def execute_with_vars(self, values: Mapping[str, int] | Iterable[tuple[str, int]] | None) -> None:
        """Replay binding the listed vars; unlisted vars take their prepare-time value (blocking).

        Raises:
            NotPreparedError, VarBoundsError, and the original error of a failed kernel.
        """
        started = time.perf_counter()
        outs = self._submit(self._values(values))
        outs[0].block_until_ready()
        self._ready().output = outs[0]
        self.last_timing = time.perf_counter() - started

    async def execute_async(self) -> None:
        """``execute`` for event-loop callers: awaits completion without blocking the loop."""
        await self.execute_with_vars_async(None)

    async def execute_with_vars_async(
        self, values: Mapping[str, int] | Iterable[tuple[str, int]] | None
    ) -> None:
        """``execute_with_vars`` for event-loop callers."""
        p = self._ready()
        resolved = self._values(values)
        started = time.perf_counter()
        args = [p.inputs[n] for n in self._inputs]
        p.in_flight += 1
        try:
            outs = await p.loaded.execute(args, resolved)
            await outs[0].ready()
        finally:
            p.in_flight -= 1
        p.output = outs[0]
        self.last_timing = time.perf_counter() - started

    def execute_profiled(self) -> list[KernelProfile]:
        """``execute`` and return per-kernel timings of this replay."""
        return self.execute_with_vars_profiled(None)

    def execute_with_vars_profiled(
        self, values: Mapping[str, int] | Iterable[tuple[str, int]] | None
    ) -> list[KernelProfile]:
        """``execute_with_vars`` through the plan's instrumented entry point, on this thread.

        Runs the real plan once on the wrapper's input buffers (waiting for them first), makes
        its result the new ``output()``, and returns one ``KernelProfile`` per kernel in
        execution order: seconds from the cycle counter around each call, bytes and flops from
        the lowering-time estimates at these var values. Blocking.

        Raises:
            NotPreparedError, VarBoundsError; DeviceError: the device's executable cannot be
            profiled (e.g. the reference device).
        """
        p = self._ready()
        if not p.profiling:
            raise NotPreparedError(
                f"{type(self).__qualname__} was prepared with profiling=False (ASYNCJIT_PROFILE=0); "
                "prepare with PrepareConfig(profiling=True) to profile it"
            )
        resolved = self._values(values)
        profile = getattr(p.loaded.executable, "profile", None)
        if profile is None:
            raise DeviceError(f"executable {p.loaded.name!r} does not support kernel profiling")
        args = [p.inputs[n] for n in self._inputs]
        for b in args:
            b.block_until_ready()
        started = time.perf_counter()
        outs, timings = profile([b.numpy_view() for b in args], resolved)
        self.last_timing = time.perf_counter() - started
        ref = p.inputs[self._inputs[0]] if self._inputs else p.output
        p.output = ref.client.buffer_from_host(outs[0], device=ref.device)
        return [KernelProfile(*t) for t in timings]

    # -- buffers -----------------------------------------------------------------------------------
    def output(self) -> Any:
        """The output ``Buffer`` of the last execution (zeros, allocated at prepare, before it)."""
        return self._ready().output

    def output_buffer(self) -> Any:
        """``RecurrentJit``: the output buffer (``output()``)."""
        return self.output()

    def execute_step(self) -> None:
        """``RecurrentJit``: one replay (``execute()``)."""
        self.execute()

    async def execute_step_async(self) -> None:
        """``RecurrentJit``: one replay from an event loop."""
        await self.execute_async()

    def buffers(self) -> list[Any]:
        """Every buffer the prepared plan owns: inputs, then the current output."""
        p = self._ready()
        return [*p.inputs.values(), p.output]

    def output_buffers(self) -> list[Any]:
        """The plan's declared output buffers (one)."""
        return [self._ready().output]

    def input_buffer_ids(self) -> list[int]:
        """The ids of the device buffers the wrapper writes inputs into, in input order."""
        p = self._ready()
        return [p.inputs[n].id for n in self._inputs]

    def prepared_kernels(self) -> list[Any]:
        """The compiled kernels of the plan in execution order: ``compiler.KernelInfo`` records
        (``name``, ``kind``, ``bytes``/``flops`` at the vars' upper bounds) on CPU devices,
        bare names where the executable has no cost records."""
        exe = self._ready().loaded.executable
        kernels = getattr(exe, "kernels", None)
        if kernels is not None:
            return list(kernels)
        return list(getattr(exe, "kernel_names", ()))

    def input_buffer(self, name: str) -> Any:
        """The device buffer behind input ``name``.

        Raises:
            InputBufferNotFoundError: no such input.
        """
        p = self._ready()
        if name not in p.inputs:
            raise InputBufferNotFoundError(
                f"{type(self).__qualname__} has no input {name!r} (inputs: {', '.join(self._inputs)})"
            )
        return p.inputs[name]

    def bind_input_buffer(self, name: str, buffer: Any) -> None:
        """Use ``buffer`` (e.g. an output of another plan or device) as input ``name`` from now on.

        Raises:
            InputBufferNotFoundError: no such input. ShapeMismatchError/DTypeMismatchError: the
            buffer does not match the input's prepared spec. DuplicateInputBufferError: the buffer
            already backs another input.
        """
        from .runtime import Buffer

        p = self._ready()
        current = self.input_buffer(name)
        if not isinstance(buffer, Buffer):
            raise ArgumentTypeError(
                f"input {name!r} binds a Buffer (client.buffer_from_host(array)), got {type(buffer).__name__}"
            )
        if buffer.is_deleted():
            raise BufferDeletedError(f"cannot bind {buffer!r} to input {name!r}: it was deleted or donated")
        if buffer.client is not current.client:
            raise DeviceError(f"cannot bind {buffer!r} to input {name!r}: it belongs to another client")
        for other, buf in p.inputs.items():
            if other != name and buf is buffer:
                raise DuplicateInputBufferError(
                    f"buffer {buffer!r} already backs input {other!r}; inputs need distinct buffers"
                )
        if tuple(buffer.shape) != tuple(current.shape) or buffer.dtype != current.dtype:
            raise ShapeMismatchError(
                f"input {name!r} is {current.dtype.name}{tuple(current.shape)}, "
                f"got {buffer.dtype.name}{tuple(buffer.shape)}"
            )
        p.inputs[name] = buffer
        p.views.pop(name, None)

    def _input_view(self, name: str) -> np.ndarray:
        p = self._ready()
        if p.in_flight:
            raise DeviceError(
                f"input {name!r} is being read by an in-flight execute_async(); "
                "await it before writing inputs"
            )
        view = p.views.get(name)
        if view is None:
            buf = p.inputs[name]
            buf.block_until_ready()
            view = p.views[name] = buf.numpy_view(writable=True)
        return view


def _resolve_device(device: Any) -> Any:
    from .runtime import Device, default_client

    if isinstance(device, Device):
        return device
    client = default_client()
    return client.device(0 if device is None else device)  # an index; a typed error otherwise


def _declared(self: JitWrapper[Any], name: str) -> Var:
    """The var as its ``VarSpec`` declares it for this model: setters narrow within it, never beyond."""
    return self._var_specs[name].resolve(self.model)


def _with_bound(self: JitWrapper[Any], name: str, value: int, setter: str) -> None:
    v, declared = self._vars[name], _declared(self, name)
    if value > declared.max:
        raise VarBoundsError(
            f"{setter}({value}): var {name!r} is declared with max {declared.max} for this model; "
            "a plan cannot be sized beyond what the model supports"
        )
    if value < v.min:
        raise VarBoundsError(f"{setter}({value}): max < min ({v.min}) for var {name!r}")
    self._set_var(name, v.min, value, setter)


def _with_min_bound(self: JitWrapper[Any], name: str, value: int, setter: str) -> None:
    v, declared = self._vars[name], _declared(self, name)
    if value > v.max:
        raise VarBoundsError(f"{setter}({value}): min > max ({v.max}) for var {name!r}")
    if value < max(1, declared.min):
        raise VarBoundsError(f"{setter}({value}): var {name!r} is declared with min {max(1, declared.min)}")
    self._set_var(name, value, v.max, setter)


def _with_fixed(self: JitWrapper[Any], name: str, value: int, setter: str) -> None:
    declared = _declared(self, name)
    if not max(1, declared.min) <= value <= declared.max:
        raise VarBoundsError(
            f"{setter}({value}): var {name!r} is declared in [{max(1, declared.min)}, {declared.max}] "
            "for this model"
        )
    self._set_var(name, value, value, setter)


def _bind_var_setter(method: Callable[..., None], name: str, attr: str) -> Callable[..., Any]:
    def setter(self: JitWrapper[Any], value: int) -> JitWrapper[Any]:
        if isinstance(value, bool) or not hasattr(value, "__index__"):  # 2.5 must not become 2
            raise VarBoundsError(f"{attr}({value!r}): var bounds are ints, got {type(value).__name__}")
        method(self, name, value.__index__(), attr)
        return self

    setter.__name__ = attr
    setter.__doc__ = (
        f"Builder: narrow var ``{name}`` before ``prepare`` "
        "(InvalidArgumentError after it, VarBoundsError if invalid)."
    )
    return setter


def _bind_input_mut(name: str, attr: str) -> Callable[..., np.ndarray]:
    def mut(self: JitWrapper[Any]) -> np.ndarray:
        return self._input_view(name)

    mut.__name__ = attr
    mut.__doc__ = (
        f"A writable zero-copy numpy view of input ``{name}``'s device buffer (its prepared maximum "
        "shape). Write the step's data here before ``execute``."
    )
    return mut
