"""Plans with dispatched partitions: CPU segments and plugin dispatch calls, in plan order.

A plugin that compiles to opaque bytecode runs it through its dispatch runtime:
``load(bytecode) -> handle`` once per executable, then ``invoke(handle, entry, inputs, outputs,
vars)`` per call, where ``inputs``/``outputs`` are numpy views of the plan's own buffers (caller
memory, constants or the arena) at the call's shapes, and ``vars`` maps var names to values. The
``SegmentedLauncher`` calls the CPU segments (one foreign call each) and the dispatch runtime in
order on the calling thread, which for a device is its actor thread, so dispatch runs in queue
order with the CPU kernels of the same plan. Views are rebuilt only when the addresses or var
values change; every view is bounded by the buffer it aliases (shapes come from checked var
values, buffers are sized for every var's upper bound).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..dtypes import DType
from ..errors import DeviceError, KernelRuntimeError
from ..symbolic import Dim, Var, compile_dims

if TYPE_CHECKING:
    from ._cpu import CpuExecutable

__all__ = ["BufferRef", "DispatchCall", "Payload", "SegmentedLauncher"]

_SEGMENT_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PROFILED_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_TICKS_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64)


@attrs.frozen
class BufferRef:
    """Where a dispatch argument lives: ``input``/``output``/``const`` slot ``index`` or the arena
    at ``offset``; its shape (symbolic) and dtype."""

    kind: str
    index: int
    offset: int
    shape: tuple[Dim, ...]
    dtype: DType


@attrs.frozen
class DispatchCall:
    """One dispatched partition: plan kernel ``kernel`` runs ``entry`` of payload ``payload``."""

    kernel: int
    payload: int
    entry: str
    inputs: tuple[BufferRef, ...]
    outputs: tuple[BufferRef, ...]


@attrs.frozen
class Payload:
    """A plugin's bytecode inside an executable, with the identity of the plugin that made it."""

    plugin: str
    identity: tuple[Any, ...]
    bytecode: bytes
    entries: tuple[str, ...]
    options: Mapping[str, Any] = attrs.field(factory=dict, eq=False)


class _Step:
    """One dispatch call bound to a launcher's buffers (views rebuilt by ``bind``)."""

    __slots__ = ("_arena", "_consts", "_shapes", "call", "entry", "handle", "ins", "invoke", "outs", "vars")

    def __init__(
        self,
        call: DispatchCall,
        invoke: Callable[..., Any],
        handle: Any,
        consts: Sequence[np.ndarray],
        variables: Sequence[Var],
    ) -> None:
        self.call = call
        self.invoke = invoke
        self.handle = handle
        self.entry = call.entry
        self._consts = consts
        self._shapes = [compile_dims(r.shape, variables) for r in (*call.inputs, *call.outputs)]
        self.ins: list[np.ndarray] = []
        self.outs: list[np.ndarray] = []
        self.vars: dict[str, int] = {}

    def bind(
        self,
        addrs: Sequence[int],
        n_in: int,
        arena: int,
        values: Sequence[int],
        names: Sequence[str],
        fixed: Mapping[str, int],
    ) -> None:
        views = []
        for ref, shape_of in zip((*self.call.inputs, *self.call.outputs), self._shapes, strict=True):
            shape = shape_of(values)
            if ref.kind == "const":
                views.append(self._consts[ref.index])
                continue
            if ref.kind == "input":
                addr = addrs[ref.index]
            elif ref.kind == "output":
                addr = addrs[n_in + ref.index]
            else:
                addr = arena + ref.offset
            views.append(_view(addr, shape, ref.dtype))
        n = len(self.call.inputs)
        self.ins, self.outs = views[:n], views[n:]
        self.vars = {**dict(zip(names, values, strict=True)), **fixed}

    def __call__(self) -> None:
        self.invoke(self.handle, self.entry, self.ins, self.outs, self.vars)


def _view(addr: int, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    count = 1
    for d in shape:
        count *= d
    if count <= 0:
        return np.empty(shape, dtype.np)
    raw = memoryview((ctypes.c_char * (count * dtype.itemsize)).from_address(addr)).cast("B")
    out: np.ndarray = np.frombuffer(raw, dtype=dtype.np, count=count).reshape(shape)
    return out


class SegmentedLauncher:
    """Calls a plan made of CPU segments and dispatch calls: ``launcher(addrs, values)``.

    Unchecked like ``CpuLauncher`` (callers validate through ``Signature``); one per thread.
    """

    def __init__(self, exe: CpuExecutable) -> None:
        from ._cpu import CpuLauncher

        self._base = CpuLauncher(exe)
        self._exe = self.exe = exe
        self._names = exe.signature.var_names
        self._n_in = exe.layout.n_inputs
        steps: list[tuple[str, Any]] = []
        dispatch = {c.kernel: c for c in exe.dispatch}
        segments = list(exe.segments)
        addrs = list(exe.segment_addresses)
        k = 0
        n_kernels = len(exe.kernel_names)
        while k < n_kernels:
            call = dispatch.get(k)
            if call is not None:
                plugin, handle = exe.dispatch_runtime(call.payload)
                steps.append(("dispatch", _Step(call, plugin.invoke, handle, exe.consts, exe.signature.vars)))
                k += 1
                continue
            i = next(j for j, (start, _) in enumerate(segments) if start == k)
            entry, profiled = addrs[i]
            steps.append(("cpu", (_SEGMENT_TYPE(entry), _PROFILED_TYPE(profiled) if profiled else None, k)))
            k = segments[i][1]
        self._steps = steps
        self._cpu_calls = {
            i: functools.partial(step[0], self._base._args_addr)
            for i, (kind, step) in enumerate(steps)
            if kind == "cpu"
        }
        self._calls: list[Callable[[], None]] = []
        self._addrs: Sequence[int] | None = None
        self._values: Sequence[int] | None = None

    def data_sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The data-dependent sizes of the last run (see ``CpuLauncher.data_sizes``)."""
        return self._base.data_sizes()

    def _rebind(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        """Write the argument block and rebuild every dispatch call's views (new addresses or
        var values); copies of both are kept, so a caller mutating its list is still seen."""
        base = self._base
        base._args[0 : base._n_addr] = addrs  # type: ignore[call-overload]
        base._args[base._var_slot : base._var_slot + len(values)] = values  # type: ignore[call-overload]
        arena = int(base._args[self._exe.layout.arena_slot])
        calls: list[Callable[[], None]] = []
        for i, (kind, step) in enumerate(self._steps):
            if kind == "cpu":
                calls.append(self._cpu_calls[i])
                continue
            step.bind(addrs, self._n_in, arena, values, self._names, self._exe.fixed)
            calls.append(
                functools.partial(step.invoke, step.handle, step.entry, step.ins, step.outs, step.vars)
            )
        self._calls = calls
        self._addrs, self._values = addrs[:], values[:]

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        if addrs != self._addrs or values != self._values:
            self._rebind(addrs, values)
        if self._base._dyn is not None:  # CPU segments' buffers sized by unbounded vars
            self._base._size_dynamic(values)
        if self._base._aliases:
            self._exe.signature.copy_aliased(addrs, values)
        try:
            for call in self._calls:
                call()
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: Exception) -> KernelRuntimeError:
        """A dispatch runtime's exception as a ``KernelRuntimeError`` naming the plugin."""
        names = sorted({self._exe.payloads[c.payload].plugin for c in self._exe.dispatch})
        return KernelRuntimeError(
            f"plan {self._exe.name!r}: a dispatched partition failed (plugins {names}): "
            f"{type(exc).__name__}: {exc}"
        )

    def profile(self, addrs: Sequence[int], values: Sequence[int], ticks: np.ndarray) -> None:
        """One replay recording the cycle counter around every kernel (dispatch calls included)."""
        if addrs != self._addrs or values != self._values:
            self._rebind(addrs, values)
        if not self._exe._ticks_address:
            raise DeviceError("this executable was compiled without the profiled entry point")
        if self._base._dyn is not None:
            self._base._size_dynamic(values)
        if self._base._aliases:
            self._exe.signature.copy_aliased(addrs, values)
        counter = _TICKS_TYPE(self._exe._ticks_address)
        for kind, step in self._steps:
            if kind == "cpu":
                _, profiled, start = step
                if profiled is None:
                    raise DeviceError("this executable was compiled without the profiled entry point")
                profiled(self._base._args_addr, ticks.ctypes.data + 8 * start)
            else:
                k = step.call.kernel
                ticks[k] = counter()
                try:
                    step()
                except Exception as exc:
                    raise self._failed(exc) from exc
                ticks[k + 1] = counter()
