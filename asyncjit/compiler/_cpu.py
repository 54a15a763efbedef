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
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..codegen._module import ENTRY, ArgLayout
from ..codegen._target import LoadedObject
from ..dtypes import from_numpy
from ..errors import DTypeMismatchError, ShapeMismatchError, VarBoundsError
from ._executable import Executable, Launcher, Signature

__all__ = ["CpuExecutable", "CpuLauncher"]

_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CpuLauncher:
    """Calls one plan: ``launcher(addrs, values)``; addrs = input then output addresses as ints.

    Unchecked (callers validate through ``Signature``); one per thread (it owns the arena).
    """

    __slots__ = (
        "_arena",
        "_args",
        "_args_addr",
        "_consts",
        "_fn",
        "_last_addrs",
        "_last_values",
        "_n_addr",
        "_var_slot",
    )

    def __init__(self, exe: CpuExecutable) -> None:
        layout = exe.layout
        self._args = (ctypes.c_int64 * max(layout.n_slots, 1))()
        self._args_addr = ctypes.addressof(self._args)
        self._arena = np.zeros(exe.arena_bytes + 64, dtype=np.uint8)
        self._consts = exe.consts  # keep the weights alive while code can read them
        arena_addr = (self._arena.ctypes.data + 63) // 64 * 64
        for i, c in enumerate(exe.consts):
            self._args[layout.const_slot + i] = c.ctypes.data
        self._args[layout.arena_slot] = arena_addr
        self._fn = _ENTRY_TYPE(exe.entry_address)
        self._n_addr = layout.n_inputs + layout.n_outputs
        self._var_slot = layout.var_slot
        self._last_addrs: Sequence[int] = ()
        self._last_values: Sequence[int] = ()

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        if addrs != self._last_addrs:
            self._args[0 : self._n_addr] = addrs  # type: ignore[call-overload]
            self._last_addrs = addrs
        if values != self._last_values:
            self._args[self._var_slot : self._var_slot + len(values)] = values  # type: ignore[call-overload]
            self._last_values = values
        self._fn(self._args_addr)


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
    ) -> None:
        self.name = name
        self.signature = signature
        self.layout = layout
        self.consts = tuple(np.ascontiguousarray(c) for c in consts)
        self.arena_bytes = arena_bytes
        self.kernel_names = tuple(kernel_names)
        self._ir_text = ir_text
        self.code_key = code_key
        self.object_code = object_code
        self.fixed = dict(fixed)
        self._loaded = loaded
        self.entry_address = loaded.address(ENTRY)
        self._flops = flops
        self._local = threading.local()

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
        return CpuLauncher(self)

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
            VarBoundsError: out of bounds, unknown, or contradicting a fixed value.
        """
        given = dict(var_values or {})
        for name, value in self.fixed.items():
            if name in given and given.pop(name) != value:
                raise VarBoundsError(
                    f"var {name!r} was fixed to {value} when {self.name!r} was compiled; got another value"
                )
        return self.signature.var_values(given)

    def run(
        self, inputs: Sequence[np.ndarray], var_values: Mapping[str, int] | None = None
    ) -> list[np.ndarray]:
        """Validate, run once, return outputs as new arrays of their actual shapes.

        Non-contiguous or misaligned inputs are copied first (see the module docstring).

        Raises:
            VarBoundsError, ShapeMismatchError, DTypeMismatchError: before any native code runs.
        """
        values = self.check_vars(var_values)
        if len(inputs) != len(self.signature.inputs):
            raise ShapeMismatchError(
                f"{self.name!r} takes {len(self.signature.inputs)} inputs "
                f"({[a.name for a in self.signature.inputs]}), got {len(inputs)}"
            )
        arrays = []
        for spec, x in zip(self.signature.inputs, inputs, strict=True):
            arr = np.asarray(x)
            try:
                got = from_numpy(arr.dtype)
            except TypeError as exc:
                raise DTypeMismatchError(f"input {spec.name!r}: {exc}") from None
            if got != spec.dtype:
                raise DTypeMismatchError(
                    f"input {spec.name!r}: expected dtype {spec.dtype.name}, got {arr.dtype}"
                )
            if not (arr.flags.c_contiguous and arr.flags.aligned):
                arr = np.ascontiguousarray(arr)
            arrays.append(arr)
        self.signature.validate([a.shape for a in arrays], [s.dtype for s in self.signature.inputs], values)
        outs = [
            np.empty(shape, dtype=spec.dtype.np)
            for spec, shape in zip(self.signature.outputs, self.signature.output_shapes(values), strict=True)
        ]
        addrs = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outs]
        self._thread_launcher()(addrs, values)
        return outs
