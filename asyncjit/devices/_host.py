"""``HostExecutable``: a plan whose body is a Python function over numpy views of its buffers.

Useful for custom host ops, for testing the runtime before compiled plans exist, and as a
yardstick in benchmarks. The launcher views device memory at the given addresses (no copy), so
the function sees exactly the bytes compiled code would; results are copied into the outputs,
whose shapes are checked by numpy (a wrong shape fails the command, it never overflows).
"""

from __future__ import annotations

import ctypes
import math
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..compiler._executable import ArgSpec, Executable, Launcher, Signature
from ..symbolic import Var

__all__ = ["HostExecutable"]

HostFunction = Callable[..., Any]


class HostExecutable(Executable):
    """``fn(*inputs) -> output | tuple[outputs]`` run by the device on numpy views.

    ``serialize()`` pickles ``fn`` by reference (a module-level function); deserializing runs
    pickle, so load only bytes you trust, as with any native code.
    """

    kind = "host"

    def __init__(self, name: str, signature: Signature, fn: HostFunction, *, flops: int = 0) -> None:
        self.name = name
        self.signature = signature
        self.fn = fn
        self._flops = flops

    @classmethod
    def build(
        cls,
        name: str,
        fn: HostFunction,
        inputs: Sequence[ArgSpec],
        outputs: Sequence[ArgSpec],
        vars: Sequence[Var] = (),
        *,
        flops: int = 0,
    ) -> HostExecutable:
        return cls(name, Signature(tuple(inputs), tuple(outputs), tuple(vars)), fn, flops=flops)

    def __repr__(self) -> str:
        return f"<HostExecutable {self.name!r} fn={getattr(self.fn, '__qualname__', self.fn)!r}>"

    @property
    def flops_estimate(self) -> int:
        return self._flops

    def launcher(self) -> Launcher:
        return _HostLauncher(self.signature, self.fn)

    def serialize(self) -> bytes:
        sig = self.signature
        return pickle.dumps((self.name, sig.inputs, sig.outputs, sig.vars, self.fn, self._flops))

    @classmethod
    def deserialize(cls, data: bytes) -> HostExecutable:
        name, inputs, outputs, vars_, fn, flops = pickle.loads(data)  # trusted bytes only: see the class doc
        return cls(name, Signature(inputs, outputs, vars_), fn, flops=flops)


class _HostLauncher:
    """Views are cached by (address, shape): allocator blocks are reused, so replays hit."""

    __slots__ = ("_fn", "_in_dtypes", "_n_in", "_out_dtypes", "_sig", "_views")

    def __init__(self, sig: Signature, fn: HostFunction) -> None:
        self._sig = sig
        self._fn = fn
        self._n_in = len(sig.inputs)
        self._in_dtypes = [a.dtype.np for a in sig.inputs]
        self._out_dtypes = [a.dtype.np for a in sig.outputs]
        self._views: dict[tuple[int, tuple[int, ...], np.dtype[Any]], npt.NDArray[Any]] = {}

    def _view(self, addr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        key = (addr, shape, dtype)
        view = self._views.get(key)
        if view is None:
            count = math.prod(shape)
            if count == 0:
                return np.empty(shape, dtype)
            raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(addr)
            view = np.frombuffer(memoryview(raw), dtype=dtype, count=count).reshape(shape)
            if len(self._views) >= 256:
                self._views.clear()
            self._views[key] = view
        return view

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        n = self._n_in
        ins = [
            self._view(a, s, d)
            for a, s, d in zip(addrs[:n], self._sig.input_shapes(values), self._in_dtypes, strict=True)
        ]
        outs = [
            self._view(a, s, d)
            for a, s, d in zip(addrs[n:], self._sig.output_shapes(values), self._out_dtypes, strict=True)
        ]
        result = self._fn(*ins)
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(outs):
            raise ValueError(f"host function returned {len(results)} outputs, the plan declares {len(outs)}")
        for out, res in zip(outs, results, strict=True):
            np.copyto(out, res, casting="same_kind")
