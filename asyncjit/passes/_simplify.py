"""Algebraic simplification: rewrite rules that are exact under asyncjit's semantics.

Only rules that give bit-identical results are applied (``x*1``, ``x/1``, int ``x+0``, double
negation, no-op movement/casts, fused movement chains). ``x+0.0`` is *not* removed for floats
(``-0.0 + 0.0`` is ``+0.0``), and ``x*0`` never is (``nan*0`` is ``nan``).
"""

from __future__ import annotations

from typing import Any

from ..graph import Node
from ._graph import Graph, rebuild, remake

__all__ = ["simplify", "scalar_value"]


def scalar_value(node: Node) -> Any | None:
    """The value of a node that is one constant broadcast/reshaped everywhere, else ``None``."""
    while node.op in ("expand", "reshape"):
        node = node.inputs[0]
    if node.op == "const" and node.attrs["value"].size == 1:
        return node.attrs["value"].reshape(()).item()
    return None


def _is(node: Node, value: float) -> bool:
    v = scalar_value(node)
    return v is not None and not isinstance(v, bool) and v == value


def _movement(node: Node) -> Node | None:
    x = node.inputs[0] if node.inputs else None
    if node.op == "cast" and x is not None and x.dtype == node.dtype:
        return x
    if node.op in ("reshape", "expand") and x is not None and x.shape == node.shape:
        return x
    if node.op == "reshape" and x is not None and x.op == "reshape":
        return remake(node, (x.inputs[0],))
    if node.op == "expand" and x is not None and x.op == "expand":
        return remake(node, (x.inputs[0],))
    if node.op == "permute" and x is not None:
        order = tuple(node.attrs["order"])
        if order == tuple(range(len(order))):
            return x
        if x.op == "permute":
            inner = tuple(x.attrs["order"])
            return remake(node, (x.inputs[0],), order=tuple(inner[i] for i in order))
    if node.op == "shrink" and x is not None:
        full = all(
            s == 0 and e == d and st == 1 for (s, e, st), d in zip(node.attrs["slices"], x.shape, strict=True)
        )
        return x if full else None
    if node.op == "pad" and x is not None and all(lo == 0 and hi == 0 for lo, hi in node.attrs["pads"]):
        return x
    if node.op == "reduce" and x is not None and not tuple(node.attrs["axes"]):
        return x
    if node.op == "cat" and len(node.inputs) == 1:
        return node.inputs[0]
    return None


def _arith(node: Node) -> Node | None:
    if node.op in ("neg", "not") and node.inputs[0].op == node.op:
        return node.inputs[0].inputs[0]
    if len(node.inputs) != 2:
        return None
    x, y = node.inputs
    if node.op == "mul" and _is(y, 1):
        return x
    if node.op == "mul" and _is(x, 1):
        return y
    if node.op == "div" and _is(y, 1):
        return x
    if node.dtype.is_int and node.op in ("add", "sub") and _is(y, 0):
        return x
    if node.dtype.is_int and node.op == "add" and _is(x, 0):
        return y
    return None


def simplify(graph: Graph) -> Graph:
    """Apply the rules bottom-up until no rule fires on a node (each rule shrinks the graph)."""

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        new = remake(node, inputs)
        for _ in range(8):
            if new.op in ("placeholder", "const"):
                return new
            better = _movement(new) or _arith(new)
            if better is None or better.shape != new.shape or better.dtype != new.dtype:
                return new
            new = better
        return new

    return rebuild(graph, rewrite)
