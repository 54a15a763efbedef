"""``ReferenceExecutable``: the numpy interpreter behind the ``Executable`` contract.

The runtime's ``reference`` device runs plans through it: its launcher views the memory at the
given addresses as numpy arrays (shapes from the checked var values), evaluates the graph with
``asyncjit.reference`` and writes the results into the output memory.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CompileError
from ..passes import Graph
from ..reference import run_nodes
from ..symbolic import Var
from ._api import as_node
from ._executable import Executable, Launcher
from ._lower import signature_of

__all__ = ["ReferenceExecutable"]


def _view(addr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    buf = (ctypes.c_char * nbytes).from_address(addr)
    arr: np.ndarray = np.frombuffer(memoryview(buf), dtype=dtype)
    return arr.reshape(shape)


class _ReferenceLauncher:
    def __init__(self, exe: ReferenceExecutable) -> None:
        self._exe = exe
        self._sizes: tuple[int, ...] = tuple(v.max for v in exe.signature.data_vars)

    def data_sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The data-dependent sizes of the last run (checked by the interpreter already)."""
        return self._sizes, self._sizes

    def __call__(self, addrs: Sequence[int], values: Sequence[int]) -> None:
        sig = self._exe.signature
        bindings = dict(zip(sig.var_names, values, strict=True))
        in_shapes, out_shapes = sig.input_shapes(values), sig.output_shapes(values)
        n = len(sig.inputs)
        feed = {
            node: _view(addr, shape, spec.dtype.np)
            for node, addr, shape, spec in zip(
                self._exe.graph.inputs, addrs[:n], in_shapes, sig.inputs, strict=True
            )
        }
        sizes: dict[str, int] = {}
        results = run_nodes(self._exe.graph.outputs, feed, bindings, sizes)
        self._sizes = tuple(sizes.get(v.name, 0) for v in sig.data_vars)
        for addr, shape, spec, value in zip(addrs[n:], out_shapes, sig.outputs, results, strict=True):
            # a computed size: the actual shape, written from the start of the bound's buffer
            _view(addr, value.shape if sig.data_vars else shape, spec.dtype.np)[...] = value


class ReferenceExecutable(Executable):
    """Runs a graph with the numpy reference interpreter; same signature as the compiled plan."""

    def __init__(
        self,
        outputs: Sequence[Any],
        inputs: Sequence[Any],
        vars: Sequence[Var] | None = None,
        *,
        name: str = "plan",
    ) -> None:
        self.graph = Graph.of([as_node(o) for o in outputs], [as_node(i) for i in inputs], vars)
        self.name = name
        self.signature = signature_of(self.graph)

    def launcher(self) -> Launcher:
        return _ReferenceLauncher(self)

    def serialize(self) -> bytes:
        """Not supported: a reference plan is rebuilt from its graph, which holds Python objects.

        Raises:
            CompileError: always.
        """
        raise CompileError("ReferenceExecutable cannot be serialized; rebuild it from the graph")
