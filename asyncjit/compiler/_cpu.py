"""``CpuExecutable``: a plan compiled to native code, and its ``CpuLauncher``.

The launcher owns the ``int64_t`` argument block (a ctypes array that never moves), the arena,
and a ``CFUNCTYPE(None, c_void_p)`` for the entry point (ctypes releases the GIL during the call).
A replay writes the slots that changed and makes one foreign call.

``run`` is the checked numpy entry: it validates var values, dtypes and shapes before native code
runs. Non-contiguous or misaligned numpy inputs are **copied** (``np.ascontiguousarray``), never
rejected: the copy is visible only as time, never as a wrong result.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..codegen._module import ENTRY, ENTRY_PROFILED, TICKS, ArgLayout, segment_entries
from ..codegen._target import LoadedObject
from ..dtypes import check_array_dtype
from ..errors import (
    ArgumentCountError,
    ArgumentTypeError,
    DeviceError,
    DTypeMismatchError,
    ShapeMismatchError,
    VarBoundsError,
)
from ..graph._node import CONST_ALIGN, aligned_copy, allocate_array
from ..profiler import _state as _trace
from ..symbolic import Dim, compile_dims
from ._cost import KernelInfo
from ._dispatch import DispatchCall, Payload, SegmentedLauncher
from ._executable import Executable, Launcher, Signature

__all__ = ["BoundCall", "CpuExecutable", "CpuLauncher"]

_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PROFILED_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_TICKS_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64)


@functools.cache
def _seconds_per_tick(ticks_address: int) -> float:
    """Calibrate the cycle counter against ``perf_counter`` once per process (~20 ms)."""
    ticks = _TICKS_TYPE(ticks_address)
    best = 0.0
    for _ in range(2):
        t0, c0 = time.perf_counter(), ticks()
        time.sleep(0.01)
        t1, c1 = time.perf_counter(), ticks()
        if c1 > c0:
            best = max(best, (c1 - c0) / (t1 - t0))
    if best <= 0.0:
        raise DeviceError("the cycle counter does not advance on this host; kernel profiling is unavailable")
    return 1.0 / best


def _address_or_zero(loaded: LoadedObject, symbol: str) -> int:
    try:
        return loaded.address(symbol)
    except KeyError:
        return 0


class CpuLauncher:
    """Calls one plan: ``launcher(addrs, values)``; addrs = input then output addresses as ints.

    Unchecked (callers validate through ``Signature``); one per thread (it owns the arena).
    """

    __slots__ = (
        "_aliases",
        "_arena",
        "_args",
        "_args_addr",
        "_consts",
        "_dyn",
        "_dyn_arena",
        "_fn",
        "_last_addrs",
        "_last_values",
        "_n_addr",
        "_profiled",
        "_var_slot",
        "exe",
    )

    def __init__(self, exe: CpuExecutable) -> None:
        self.exe = exe  # for traces: kernel names and the instrumented entry
        layout = exe.layout
        self._args = (ctypes.c_int64 * max(layout.n_slots, 1))()
        self._args_addr = ctypes.addressof(self._args)
        self._arena = allocate_array(exe.arena_bytes + 64, np.uint8, f"the arena of {exe.name}", zeroed=True)
        self._consts = exe.consts  # keep the weights alive while code can read them
        arena_addr = (self._arena.ctypes.data + 63) // 64 * 64
        for i, c in enumerate(exe.consts):
            self._args[layout.const_slot + i] = c.ctypes.data
        self._args[layout.arena_slot] = arena_addr
        self._fn = _ENTRY_TYPE(exe.entry_address)
        self._profiled = _PROFILED_TYPE(exe.profiled_address) if exe.profiled_address else None
        self._n_addr = layout.n_inputs + layout.n_outputs
        self._aliases = bool(exe.signature.aliases)
        self._var_slot = layout.var_slot
        self._last_addrs: Sequence[int] = ()
        self._last_values: Sequence[int] = ()
        # buffers sized by unbounded vars: one arena, grown on demand before a run, then reused
        self._dyn = compile_dims([exe.dyn_bytes], exe.signature.vars) if layout.dynamic else None
        self._dyn_arena = np.zeros(0, dtype=np.uint8)

    def _size_dynamic(self, values: Sequence[int]) -> None:
        """Make the dynamic arena hold this run's buffers (values are checked var values)."""
        assert self._dyn is not None
        need = int(self._dyn(values)[0]) + 64
        if need > self._dyn_arena.size:
            grown = max(need, self._dyn_arena.size + self._dyn_arena.size // 4)
            self._dyn_arena = allocate_array(grown, np.uint8, f"the data-dependent arena of {self.exe.name}")
            self._args[self.exe.layout.dyn_slot] = (self._dyn_arena.ctypes.data + 63) // 64 * 64

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        if self._dyn is not None:
            self._size_dynamic(values)
        if self._aliases:
            self.exe.signature.copy_aliased(addrs, values)
        if addrs != self._last_addrs:
            self._args[0 : self._n_addr] = addrs  # type: ignore[call-overload]
            self._last_addrs = addrs
        if values != self._last_values:
            self._args[self._var_slot : self._var_slot + len(values)] = values  # type: ignore[call-overload]
            self._last_values = values
        self._fn(self._args_addr)

    def data_sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The data-dependent sizes of the last run: (as kernels used them, as computed)."""
        layout = self.exe.layout
        first = layout.var_slot + layout.n_vars - layout.n_data
        used = tuple(self._args[first : first + layout.n_data])
        raw = tuple(self._args[layout.status_slot : layout.status_slot + layout.n_data])
        return used, raw

    def profile(self, addrs: Sequence[int], values: Sequence[int], ticks: np.ndarray) -> None:
        """One replay through the instrumented entry; ``ticks`` (int64, n_kernels + 1) receives
        the cycle counter before the first kernel and after each one."""
        if self._profiled is None:
            raise DeviceError("this executable was compiled without the profiled entry point")
        if self._dyn is not None:
            self._size_dynamic(values)
        if self._aliases:
            self.exe.signature.copy_aliased(addrs, values)
        self._args[0 : self._n_addr] = addrs  # type: ignore[call-overload]
        self._last_addrs = addrs
        self._args[self._var_slot : self._var_slot + len(values)] = values  # type: ignore[call-overload]
        self._last_values = values
        self._profiled(self._args_addr, ticks.ctypes.data)


def aligned_const(value: Any) -> np.ndarray:
    """``value`` as the kernels read it: C-contiguous at a 64-byte boundary (``aligned_copy``),
    copied only when it is not already (a broadcast weight is written out here)."""
    arr = np.asarray(value)
    if arr.flags.c_contiguous and arr.ctypes.data % CONST_ALIGN == 0:
        return arr
    return aligned_copy(arr)


class CpuExecutable(Executable):
    """Native code for one plan plus the metadata to call it safely. Build with ``compile``."""

    def __init__(
        self,
        *,
        name: str,
        signature: Signature,
        layout: ArgLayout,
        consts: Sequence[np.ndarray],
        arena_bytes: int,
        kernel_names: Sequence[str],
        ir_text: str | Callable[[], str],
        code_key: str,
        object_code: bytes,
        loaded: LoadedObject,
        fixed: Mapping[str, int],
        flops: int = 0,
        kernels: Sequence[KernelInfo] | Callable[[], Sequence[KernelInfo]] | None = None,
        segments: Sequence[tuple[int, int]] = (),
        dispatch: Sequence[DispatchCall] = (),
        payloads: Sequence[Payload] = (),
        plugins: Mapping[str, Any] | None = None,
        dyn_bytes: Dim = 0,
    ) -> None:
        self.name = name
        self.dyn_bytes = dyn_bytes  # the dynamic arena's size over the vars (0: none)
        self.signature = signature
        self.layout = layout
        # as given (a broadcast weight stays a view: serialized as its core) and written out
        # for the kernels, 64-byte aligned
        self.const_sources = tuple(consts)
        self.consts = tuple(aligned_const(c) for c in consts)
        self.arena_bytes = arena_bytes
        self.kernel_names = tuple(kernel_names)
        self._ir_text = ir_text
        self.code_key = code_key
        self.object_code = object_code
        self.fixed = dict(fixed)
        self._loaded = loaded
        self.dispatch = tuple(dispatch)
        self.payloads = tuple(payloads)
        self.segments = tuple(segments) if self.dispatch else ((0, len(self.kernel_names)),)
        self._plugins = dict(plugins or {})
        self._runtimes: dict[int, tuple[Any, Any]] = {}
        self._runtime_lock = threading.Lock()
        names = segment_entries(len(self.segments), bool(self.dispatch))
        self.segment_addresses = tuple((loaded.address(e), _address_or_zero(loaded, p)) for e, p in names)
        self.entry_address = 0 if self.dispatch else loaded.address(ENTRY)
        try:
            self.profiled_address = loaded.address(ENTRY_PROFILED)  # segmented: profile() handles it
            self._ticks_address = loaded.address(TICKS)
        except KeyError:  # object code from before the profiled entry existed
            self.profiled_address = self._ticks_address = 0
        # kernel records (names, costs) serve profiles only: a callable defers them (building
        # them is a tenth of loading a cached plan)
        self._kernels: tuple[KernelInfo, ...] | None = None
        self._kernels_from = kernels if callable(kernels) else None
        if not callable(kernels):
            self._kernels = self._checked_kernels(kernels)
        self._flops = flops
        self._local = threading.local()
        self.chosen_payload = ""  # the CPU payload a bundle load picked ("on-device": compiled here)

    def _checked_kernels(self, kernels: Sequence[KernelInfo] | None) -> tuple[KernelInfo, ...]:
        out = (
            tuple(kernels)
            if kernels is not None
            else tuple(KernelInfo(n, "", 0, 0) for n in self.kernel_names)
        )
        if len(out) != len(self.kernel_names):
            raise ValueError(f"{len(out)} kernel records for {len(self.kernel_names)} kernels")
        return out

    @property
    def kernels(self) -> tuple[KernelInfo, ...]:
        """One record per kernel, in execution order: name, kind, bytes and flops over the vars."""
        kernels = self._kernels
        if kernels is None:  # two threads may both build them: the same records either way
            assert self._kernels_from is not None
            kernels = self._kernels = self._checked_kernels(self._kernels_from())
        return kernels

    def __repr__(self) -> str:
        return (
            f"<CpuExecutable {self.name!r} kernels={len(self.kernel_names)} "
            f"vars={list(self.signature.var_names)} arena={self.arena_bytes}B>"
        )

    @property
    def ir_text(self) -> str:
        """The plan's LLVM IR (regenerated on first access after a warm disk-cache load)."""
        if not isinstance(self._ir_text, str):
            self._ir_text = self._ir_text()
        return self._ir_text

    @property
    def flops_estimate(self) -> int:
        return self._flops

    def launcher(self) -> Launcher:
        return SegmentedLauncher(self) if self.dispatch else CpuLauncher(self)

    def dispatch_runtime(self, payload: int) -> tuple[Any, Any]:
        """``(plugin, handle)`` for a payload: the plugin's ``load(bytecode)``, once per executable."""
        with self._runtime_lock:
            hit = self._runtimes.get(payload)
            if hit is None:
                p = self.payloads[payload]
                plugin = self._plugins.get(p.plugin)
                if plugin is None:
                    raise DeviceError(
                        f"executable {self.name!r} needs plugin {p.plugin!r}, which is not loaded"
                    )
                hit = self._runtimes[payload] = (plugin, plugin.load(p.bytecode))
        return hit

    def serialize(self) -> bytes:
        from ._serialize import serialize_cpu

        return serialize_cpu(self)

    def _thread_launcher(self) -> Launcher:
        lau: Launcher | None = getattr(self._local, "launcher", None)
        if lau is None:
            lau = self._local.launcher = self.launcher()
        return lau

    def check_vars(self, var_values: Mapping[str, int] | None) -> tuple[int, ...]:
        """Var values in signature order; values for ``fixed`` vars must equal what they were fixed to.

        Raises:
            VarBoundsError: out of bounds, unknown, not an int, or contradicting a fixed value.
            ArgumentTypeError: ``var_values`` is not a mapping.
        """
        if var_values is not None and not isinstance(var_values, Mapping):
            raise ArgumentTypeError(
                f"{self.name!r}: var values must be a mapping of name to int, got {type(var_values).__name__}"
            )
        given = dict(var_values or {})
        for name, value in self.fixed.items():
            if name in given:
                got = given.pop(name)
                if isinstance(got, bool) or not isinstance(got, int | np.integer) or got != value:
                    raise VarBoundsError(
                        f"var {name!r} was fixed to {value} when {self.name!r} was compiled; got {got!r}"
                    )
        return self.signature.var_values(given)

    def _checked_call(
        self, inputs: Sequence[np.ndarray], var_values: Mapping[str, int] | None
    ) -> tuple[tuple[int, ...], list[np.ndarray], list[np.ndarray]]:
        """Validate inputs and vars; return (var values, input arrays, fresh output arrays).

        Vars not given are read from the inputs' shapes where a dim is the var itself (as ``jit``
        binds them); the others take their upper bound."""
        sig = self.signature
        if var_values is None or len(var_values) < len(sig.vars):
            var_values = {**sig.infer_vars([np.shape(x) for x in inputs]), **(var_values or {})}
        values = self.check_vars(var_values)
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            raise ArgumentTypeError(
                f"{self.name!r} takes a sequence of input arrays (one per input), got {type(inputs).__name__}"
            )
        if len(inputs) != len(self.signature.inputs):
            raise ArgumentCountError(
                f"{self.name!r} takes {len(self.signature.inputs)} inputs "
                f"({[a.name for a in self.signature.inputs]}), got {len(inputs)}"
            )
        arrays = []
        for spec, x in zip(self.signature.inputs, inputs, strict=True):
            arr = np.asarray(x)
            check_array_dtype(arr, spec.dtype, f"input {spec.name!r}")
            if not (arr.flags.c_contiguous and arr.flags.aligned):
                arr = np.array(arr, order="C")  # a 0-d array stays 0-d
            arrays.append(arr)
        self.signature.validate([a.shape for a in arrays], [s.dtype for s in self.signature.inputs], values)
        outs = [
            allocate_array(shape, spec.dtype.np, f"output {spec.name!r} of {self.name!r}")
            for spec, shape in zip(self.signature.outputs, self.signature.output_shapes(values), strict=True)
        ]
        return values, arrays, outs

    def bind(
        self,
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        var_values: Mapping[str, int] | None = None,
    ) -> BoundCall:
        """A ``BoundCall`` replaying this plan on fixed arrays (validated now, once), at
        ``var_values`` (default: every var at its upper bound)."""
        return BoundCall(self, inputs, outputs, var_values)

    def run(
        self, inputs: Sequence[np.ndarray], var_values: Mapping[str, int] | None = None
    ) -> list[np.ndarray]:
        """Validate, run once, return outputs as new arrays of their actual shapes.

        Non-contiguous or misaligned inputs are copied first (see the module docstring).

        Raises:
            VarBoundsError, ShapeMismatchError, DTypeMismatchError: before any native code runs.
        """
        values, arrays, outs = self._checked_call(inputs, var_values)
        addrs = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outs]
        launcher = self._thread_launcher()
        if _trace.active is None:
            launcher(addrs, values)
        else:
            _trace.active.launch(launcher, addrs, values)
        return self._actual(launcher, values, outs)

    def _actual(
        self, launcher: Launcher, values: tuple[int, ...], outs: list[np.ndarray]
    ) -> list[np.ndarray]:
        """Outputs cut to their actual shapes when the plan computes sizes (they were allocated
        at the bounds; kernels wrote the actual shape contiguously from the start).

        Raises:
            VarBoundsError: a computed size was out of bounds (naming the op).
        """
        sig = self.signature
        if not sig.data_vars:
            return outs
        used, raw = launcher.data_sizes()  # type: ignore[attr-defined]
        sig.check_data(used, raw)
        if not sig.sized_outputs:  # only index checks: the outputs have their shapes already
            return outs
        shapes = sig.output_shapes((*values, *used))
        return [o.reshape(-1)[: math.prod(s)].reshape(s) for o, s in zip(outs, shapes, strict=True)]

    def profile(
        self, inputs: Sequence[np.ndarray], var_values: Mapping[str, int] | None = None
    ) -> tuple[list[np.ndarray], list[tuple[str, float, int, int]]]:
        """``run`` once through the instrumented entry point.

        Returns:
            ``(outputs, [(kernel name, seconds, bytes, flops), ...])`` in execution order; bytes
            and flops are the lowering-time estimates evaluated at these var values.

        Raises:
            The errors of ``run``; DeviceError: no cycle counter or no profiled entry.
        """
        values, arrays, outs = self._checked_call(inputs, var_values)
        if not (self.profiled_address or (self.dispatch and self._ticks_address)):
            raise DeviceError(f"executable {self.name!r} has no profiled entry point (recompile it)")
        per_tick = _seconds_per_tick(self._ticks_address)
        ticks = np.zeros(len(self.kernels) + 1, dtype=np.int64)
        addrs = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outs]
        launcher = self._thread_launcher()
        assert isinstance(launcher, CpuLauncher | SegmentedLauncher)
        launcher.profile(addrs, values, ticks)
        outs = self._actual(launcher, values, outs)
        bindings = dict(zip(self.signature.var_names, values, strict=True))
        bindings.update(self.fixed)
        if self.signature.data_vars:
            used = launcher.data_sizes()[0]
            bindings.update(zip((v.name for v in self.signature.data_vars), used, strict=True))
        records = []
        for i, info in enumerate(self.kernels):
            nbytes, flops = info.cost(bindings)
            records.append((info.name, max(int(ticks[i + 1] - ticks[i]), 0) * per_tick, nbytes, flops))
        return outs, records


class BoundCall:
    """A replay of a ``CpuExecutable`` bound to fixed numpy arrays, validated once at bind time.

    For per-stream loops (``SileroVad``) where the host cost of a replay matters: the arrays are
    checked (dtype, contiguity, alignment, shapes at the vars' bounds, no input overlapping an
    output) when binding; each call checks only the var values, then makes one native call on
    this thread's launcher. Keep the arrays alive and never resize them (the object holds
    references, so they stay valid).
    """

    __slots__ = ("_addrs", "_arrays", "_exe", "_last", "_no_vars", "_values")

    def __init__(
        self,
        exe: CpuExecutable,
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        var_values: Mapping[str, int] | None = None,
    ) -> None:
        sig = exe.signature
        if len(inputs) != len(sig.inputs) or len(outputs) != len(sig.outputs):
            raise ArgumentCountError(
                f"{exe.name!r} binds {len(sig.inputs)} inputs and {len(sig.outputs)} outputs, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        values = exe.check_vars(var_values)
        for spec, arr in zip((*sig.inputs, *sig.outputs), (*inputs, *outputs), strict=True):
            if not isinstance(arr, np.ndarray) or arr.dtype != spec.dtype.np:
                raise DTypeMismatchError(f"{spec.name!r}: expected a {spec.dtype.name} numpy array")
            if not (arr.flags.c_contiguous and arr.flags.aligned):
                raise ShapeMismatchError(f"{spec.name!r}: bound arrays must be C-contiguous and aligned")
        sig.validate([a.shape for a in inputs], [s.dtype for s in sig.inputs], values)
        for spec, shape, arr in zip(sig.outputs, sig.output_shapes(values), outputs, strict=True):
            if tuple(arr.shape) != tuple(shape):
                raise ShapeMismatchError(f"{spec.name!r}: expected shape {tuple(shape)}, got {arr.shape}")
            if not arr.flags.writeable:
                raise ShapeMismatchError(f"{spec.name!r}: output arrays must be writable")
        for o in outputs:
            for i in (*inputs, *(p for p in outputs if p is not o)):
                if np.may_share_memory(o, i):
                    raise ShapeMismatchError("a bound output overlaps another bound array")
        self._exe = exe
        self._arrays = (*inputs, *outputs)  # keep them alive
        self._addrs = [a.ctypes.data for a in self._arrays]
        self._values = values
        self._no_vars = not sig.vars
        self._last = list(outputs)

    def outputs(self) -> list[np.ndarray]:
        """The bound outputs as the last call left them: views of their actual shapes when the
        plan computes sizes (data-dependent dims), else the bound arrays themselves."""
        return self._last

    def _sized(self, values: tuple[int, ...]) -> None:
        """After a run of a plan that computes sizes: check them, take the actual shapes.

        Raises:
            VarBoundsError: a computed size was out of bounds (naming the op).
        """
        launcher = self._exe._thread_launcher()
        n_in = len(self._exe.signature.inputs)
        self._last = self._exe._actual(launcher, values, list(self._arrays[n_in:]))

    def __call__(self, var_values: Mapping[str, int] | None = None) -> None:
        """One replay (blocking, on this thread).

        Raises:
            VarBoundsError: a var out of bounds (with vars, shapes are re-checked for them), or
                a size the plan computed is out of its bounds.
        """
        if var_values is None or self._no_vars:
            if var_values:
                self._exe.check_vars(var_values)
            if _trace.active is None:
                self._exe._thread_launcher()(self._addrs, self._values)
            else:
                _trace.active.launch(self._exe._thread_launcher(), self._addrs, self._values)
            if self._exe.signature.data_vars:
                self._sized(self._values)
            return
        values = self._exe.check_vars(var_values)
        n_in = len(self._exe.signature.inputs)
        self._exe.signature.validate(
            [a.shape for a in self._arrays[:n_in]], [s.dtype for s in self._exe.signature.inputs], values
        )
        for shape, arr in zip(self._exe.signature.output_shapes(values), self._arrays[n_in:], strict=True):
            if tuple(arr.shape) != tuple(shape):
                raise ShapeMismatchError(
                    f"bound output has shape {arr.shape}, the plan writes {tuple(shape)}"
                )
        if _trace.active is None:
            self._exe._thread_launcher()(self._addrs, values)
        else:
            _trace.active.launch(self._exe._thread_launcher(), self._addrs, values)
        if self._exe.signature.data_vars:
            self._sized(values)
