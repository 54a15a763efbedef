"""Dead-code elimination: keep only nodes an output needs (placeholders stay: they are the ABI)."""

from __future__ import annotations

from ..graph import Node, toposort
from ._graph import Graph

__all__ = ["dce", "live_nodes"]


def live_nodes(graph: Graph) -> list[Node]:
    """Nodes some output depends on, inputs before users; unused placeholders are not listed."""
    return toposort(graph.outputs)


def dce(graph: Graph) -> Graph:
    """The same graph; its ``nodes`` no longer include anything dead.

    Nodes are immutable and only reachable through outputs, so dropping dead code means not
    walking to it; this pass exists so pipelines say where that happens.
    """
    return Graph(graph.inputs, graph.outputs, graph.vars, graph.pending)
