"""The contract between compilers and the runtime: ``ArgSpec``, ``Signature``, ``Executable``.

An ``Executable`` is device-independent compiled code plus the metadata the host needs to call it
safely. The runtime never looks inside it: it validates arguments through ``Signature.validate``
(invariant 2: native code never sees an unchecked size), allocates output buffers of
``Signature.output_capacity`` bytes, and calls a ``Launcher`` with raw addresses kept as ints.
"""

from __future__ import annotations

import abc
import ctypes
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from ..dtypes import DType
from ..errors import (
    ArgumentCountError,
    ArgumentTypeError,
    CompileError,
    DTypeMismatchError,
    ShapeMismatchError,
    VarBoundsError,
)
from ..graph._dynamic import index_error, is_index_check
from ..symbolic import DataVar, Dim, Var, check_bindings, compile_dims, free_vars, is_planned, render, upper

__all__ = ["ArgSpec", "Executable", "Launcher", "Signature"]


@attrs.frozen
class ArgSpec:
    """One input or output: its name, shape (ints and symbolic dims) and dtype."""

    name: str
    shape: tuple[Dim, ...]
    dtype: DType

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape at the upper bound of every var."""
        return tuple(upper(d) for d in self.shape)

    @property
    def bounded(self) -> bool:
        """Whether the shape has a capacity planned ahead (``symbolic.is_planned``): else it is
        sized per run."""
        return is_planned(self.shape)

    @property
    def capacity(self) -> int:
        """Bytes needed to hold this argument at the upper bound of every var."""
        return math.prod(self.max_shape) * self.dtype.itemsize


@attrs.define(eq=False)
class Signature:
    """Inputs, outputs and vars of a plan, with the host-side checks done before every call.

    Var values travel as a tuple of ints in ``vars`` order; shapes are evaluated from them by
    functions compiled once (``symbolic.compile_dims``), so a replay does not walk expressions.
    ``fixed`` holds the vars the compiler specialised away (``compile(fixed=...)`` and vars with
    ``min == max``): callers may still pass them, with exactly the value they were fixed to, so
    every entry point accepts the bindings the reference interpreter accepts.
    """

    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    vars: tuple[Var, ...]
    fixed: Mapping[str, int] = attrs.field(factory=dict, kw_only=True)
    # sizes the plan computes (``DataVar``): output shapes use them; callers never bind them
    data_vars: tuple[Var, ...] = attrs.field(default=(), kw_only=True)
    # (output j, input i): the plan writes output j over input i (``compile(donate=...)``); a
    # caller passing two different buffers gets input i copied into output j first
    aliases: tuple[tuple[int, int], ...] = attrs.field(default=(), kw_only=True)
    _in_shapes: object = attrs.field(init=False, repr=False)
    _out_shapes: object = attrs.field(init=False, repr=False)
    _checks: tuple[tuple[str, int, int], ...] = attrs.field(init=False, repr=False)
    _all_in_shapes: object = attrs.field(init=False, repr=False)
    _in_dtypes: list[DType] = attrs.field(init=False, repr=False)
    _maxes: tuple[int, ...] = attrs.field(init=False, repr=False)
    _data_maxes: tuple[int, ...] = attrs.field(init=False, repr=False)
    _unbounded: bool = attrs.field(init=False, repr=False)
    # whether an output's shape uses a data-dependent size (an index check's count is a data
    # var no shape uses: its runs are checked, their outputs keep the shapes known before)
    sized_outputs: bool = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._in_shapes = [compile_dims(a.shape, self.vars) for a in self.inputs]
        every = (*self.vars, *self.data_vars)
        self._out_shapes = [compile_dims(a.shape, every) for a in self.outputs]
        self._data_maxes = tuple(v.max for v in self.data_vars)
        self.sized_outputs = any(
            isinstance(v, DataVar) for a in self.outputs for d in a.shape for v in free_vars(d)
        )
        # hot-path helpers (replays run these before every native call; keep them allocation-light)
        self._checks = tuple((v.name, v.min, v.max) for v in self.vars)
        self._maxes = tuple(v.max for v in self.vars)
        self._unbounded = any(v.unbounded for v in self.vars)
        self._all_in_shapes = _compile_shape_list([a.shape for a in self.inputs], self.vars)
        self._in_dtypes = [a.dtype for a in self.inputs]
        self._check_aliases()

    def _check_aliases(self) -> None:
        """Raises: CompileError: an alias pairs arguments that do not exist or do not match
        (a damaged serialized plan must never make the launcher copy a wrong size)."""
        outs = set()
        for pair in self.aliases:
            j, i = pair
            if not (0 <= j < len(self.outputs) and 0 <= i < len(self.inputs)) or j in outs:
                raise CompileError(f"alias {pair} does not pair an output with an input once")
            a, b = self.outputs[j], self.inputs[i]
            if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
                raise CompileError(f"output {a.name!r} cannot be written over input {b.name!r}")
            outs.add(j)

    def copy_aliased(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        """Before a run: copy input ``i`` into output ``j`` for every alias the caller passed as
        two buffers (not donated), since the plan then writes only part of output ``j``."""
        n = len(self.inputs)
        for j, i in self.aliases:
            dst, src = addrs[n + j], addrs[i]
            if dst != src:
                shape = self.input_shapes(values)[i]
                ctypes.memmove(dst, src, math.prod(shape) * self.inputs[i].dtype.itemsize)

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.vars)

    @property
    def output_capacity(self) -> tuple[int, ...]:
        """Bytes to allocate for each output (upper bounds of every var)."""
        return tuple(a.capacity for a in self.outputs)

    def var_values(self, bindings: Mapping[str, int] | None) -> tuple[int, ...]:
        """Check ``bindings`` against the vars' bounds and order them.

        Vars missing from ``bindings`` take their upper bound. Unknown names are an error.

        Raises:
            VarBoundsError: a value out of bounds, not an int, or a name the plan does not have.
        """
        if not bindings and not self._unbounded:
            return self._maxes
        if bindings and len(bindings) == len(self._checks):
            try:
                out = tuple([bindings[name] for name, _, _ in self._checks])
            except (KeyError, TypeError):
                pass
            else:
                for value, (_, lo, hi) in zip(out, self._checks):  # noqa: B905 - equal lengths
                    if type(value) is not int or not lo <= value <= hi:
                        break
                else:
                    return out
        if bindings is not None and not isinstance(bindings, Mapping):
            raise ArgumentTypeError(
                f"var values must be a mapping of name to int, got {type(bindings).__name__}"
            )
        bindings = dict(bindings or {})
        for name, value in self.fixed.items():
            if name in bindings and bindings.pop(name) != value:
                raise VarBoundsError(
                    f"var {name!r} was fixed to {value} when this plan was compiled; got another value"
                )
        unknown = set(bindings) - set(self.var_names)
        if unknown:
            raise VarBoundsError(
                f"unknown var(s) {sorted(unknown)}; this plan has {list(self.var_names)}"
                + (f" (and fixed {dict(self.fixed)})" if self.fixed else "")
            )
        missing = [v.name for v in self.vars if v.unbounded and v.name not in bindings]
        if missing:
            raise VarBoundsError(
                f"unbounded var(s) {missing} need a value (there is no upper bound to default to); "
                "pass them in vars or let an input's shape give them"
            )
        full = {v.name: bindings.get(v.name, v.max) for v in self.vars}
        check_bindings(self.vars, full)
        return tuple(int(full[v.name]) for v in self.vars)

    def infer_vars(self, shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
        """Var values read from input shapes, where an input's dim is a var itself.

        Inputs of the wrong rank are skipped (``validate`` names them later).

        Raises:
            ShapeMismatchError: two inputs give one var different values.
        """
        found: dict[str, tuple[int, str]] = {}
        for spec, shape in zip(self.inputs, shapes):  # noqa: B905 - a count mismatch is reported later
            if len(shape) != len(spec.shape):
                continue
            for axis, (dim, size) in enumerate(zip(spec.shape, shape, strict=True)):
                if not isinstance(dim, Var):
                    continue
                where = f"input {spec.name!r} dim {axis}"
                seen = found.setdefault(dim.name, (int(size), where))
                if seen[0] != size:
                    raise ShapeMismatchError(
                        f"var {dim.name!r} is {seen[0]} from {seen[1]} and {size} from {where}"
                    )
        return {name: value for name, (value, _) in found.items()}

    def input_shapes(self, values: Sequence[int]) -> list[tuple[int, ...]]:
        return [f(values) for f in self._in_shapes]  # type: ignore[attr-defined]

    def output_shapes(self, values: Sequence[int]) -> list[tuple[int, ...]]:
        """Output shapes at ``values`` (vars, then data-dependent sizes; sizes left out take
        their bound: the capacity to allocate before a run)."""
        if self._data_maxes and len(values) == len(self.vars):
            values = (*values, *self._data_maxes)
        return [f(values) for f in self._out_shapes]  # type: ignore[attr-defined]

    def check_data(self, values: Sequence[int], raw: Sequence[int]) -> None:
        """Check the data-dependent sizes a run computed (``raw``) against what its kernels used
        (``values``, clamped into their bounds); they differ only when a size was out of bounds.

        Raises:
            VarBoundsError: naming the op that computed the size, the size and its bound.
            IndexOutOfRangeError: an ``index_check`` counted indices outside their axis.
        """
        for var, used, got in zip(self.data_vars, values, raw, strict=True):
            if used != got:
                if isinstance(var, DataVar) and is_index_check(var):
                    raise index_error(var, got)
                op = getattr(var, "op", "") or "an op"
                if got < 0:
                    raise VarBoundsError(f"{op} computed a negative size {got} for {var.name!r}")
                raise VarBoundsError(
                    f"{op} computed size {got} for {var.name!r}, above {used} (its bound is "
                    f"{var.max}, and it cannot exceed the axis it takes from); give a larger bound "
                    "where the size is made"
                )

    def validate(
        self,
        shapes: Sequence[tuple[int, ...]],
        dtypes: Sequence[DType],
        values: Sequence[int],
    ) -> None:
        """Check argument shapes and dtypes against the specs at the given (checked) var values.

        Raises:
            ShapeMismatchError / DTypeMismatchError: naming the input, expected and given.
        """
        # fast path: lists compare item by item in C, identity first (DTypes are singletons)
        if shapes == self._all_in_shapes(values) and dtypes == self._in_dtypes:  # type: ignore[operator]
            return
        if len(shapes) != len(self.inputs) or len(dtypes) != len(self.inputs):
            raise ArgumentCountError(
                f"expected {len(self.inputs)} inputs ({[a.name for a in self.inputs]}), got {len(shapes)}"
            )
        expected = self.input_shapes(values)
        for spec, want, shape, dtype in zip(self.inputs, expected, shapes, dtypes, strict=True):
            if dtype != spec.dtype:
                raise DTypeMismatchError(
                    f"input {spec.name!r}: expected dtype {spec.dtype.name}, got {dtype.name}"
                )
            if tuple(shape) != want:
                binding = dict(zip(self.var_names, values, strict=True))
                raise ShapeMismatchError(
                    f"input {spec.name!r}: expected shape {want} (spec {_fmt(spec.shape)} at "
                    f"{binding}), got {tuple(shape)}"
                )


def _compile_shape_list(shapes: Sequence[Sequence[Dim]], variables: Sequence[Var]) -> object:
    """One compiled function: var values -> the list of every input's shape (one call per check)."""
    index = {v.name: i for i, v in enumerate(variables)}
    items = []
    for shape in shapes:
        body = ", ".join(render(d, lambda v: f"_v[{index[v.name]}]") for d in shape)
        items.append(f"({body}{',' if len(shape) == 1 else ''})")
    src = f"lambda _v: [{', '.join(items)}]"
    return eval(src, {"min": min, "max": max})


def _fmt(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class Launcher(Protocol):
    """Calls compiled code once: ``addrs`` = input addresses then output addresses.

    Unchecked: callers validate first (``Signature.validate``). Not thread-safe: a launcher owns
    scratch memory, so each concurrent caller (each device queue) holds its own.
    """

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None: ...


class Executable(abc.ABC):
    """Compiled code for one plan, independent of any device; load it to run it."""

    name: str
    signature: Signature

    @abc.abstractmethod
    def launcher(self) -> Launcher:
        """A fresh launcher with its own scratch memory."""

    @abc.abstractmethod
    def serialize(self) -> bytes:
        """Bytes that ``deserialize`` of the same executable kind turns back into an equal plan."""

    @property
    def flops_estimate(self) -> int:
        """Rough work at the upper bounds, for the runtime's inline-vs-queue choice (0 if unknown)."""
        return 0
