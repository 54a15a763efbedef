"""The standard pass order: refine (fixed vars and pending argument refinements, through
``refine_shapes``), then simplify/fold/CSE/canonicalize-dynamism to a fixed point, then DCE."""

from __future__ import annotations

from collections.abc import Mapping

from ._cse import cse
from ._dce import dce
from ._fold import fold_constants, fold_conv_affine
from ._graph import Graph
from ._refine import canonicalize_dynamism, refine
from ._simplify import simplify

__all__ = ["optimize_graph"]


def optimize_graph(graph: Graph, fixed: Mapping[str, int] | None = None, rounds: int = 3) -> Graph:
    """Run the graph passes; stops early once a round changes nothing."""
    graph = refine(graph, fixed)
    for _ in range(rounds):
        before = [n.id for n in graph.nodes]
        graph = canonicalize_dynamism(cse(fold_constants(fold_conv_affine(simplify(graph)))))
        if [n.id for n in graph.nodes] == before:
            break
    return dce(graph)
