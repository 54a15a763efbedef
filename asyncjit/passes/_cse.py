"""Common-subexpression elimination by ``structural_key`` (same op, inputs, dtype, shape, attrs)."""

from __future__ import annotations

from collections.abc import Hashable

from ..graph import Node, structural_key
from ._graph import Graph, rebuild, remake

__all__ = ["cse"]


def cse(graph: Graph) -> Graph:
    """Merge nodes that compute the same value; placeholders are never merged (distinct inputs)."""
    seen: dict[Hashable, Node] = {}

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        new = remake(node, inputs)
        if new.op == "placeholder":
            return new
        key = structural_key(new, (i.id for i in new.inputs))
        return seen.setdefault(key, new)

    return rebuild(graph, rewrite)
