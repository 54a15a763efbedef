"""``Graph``: the unit every pass maps to a new one — placeholders in, outputs out, vars.

Nodes are immutable, so a pass never edits a graph: it rebuilds the nodes it changes and keeps
the rest (``rebuild``). A node no output reaches is simply not in ``nodes``, which is why dead-code
elimination (``dce``) only has to drop unreachable *inputs* from a node list, never unlink them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..graph import Node, graph_vars, make_node, toposort
from ..symbolic import DataVar, Dim, Var

__all__ = ["Graph", "Rewrite", "rebuild", "remake"]


@attrs.frozen
class Graph:
    """Placeholders (in signature order), outputs, and the vars the plan is compiled for.

    ``pending`` holds argument refinements not yet propagated (``refine_arguments`` records
    them, ``refine_shapes`` applies them): var name -> its value or a narrower ``Var``.
    """

    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    vars: tuple[Var, ...]
    pending: Mapping[str, Dim] = attrs.field(factory=dict, eq=False)

    @staticmethod
    def of(outputs: Sequence[Node], inputs: Sequence[Node], vars: Sequence[Var] | None = None) -> Graph:
        """A graph with ``vars`` defaulting to every var its nodes use."""
        ins, outs = tuple(inputs), tuple(outputs)
        if vars is None:  # data-dependent sizes are set by the plan, never bound by callers
            vars = [v for v in graph_vars(toposort([*ins, *outs])) if not isinstance(v, DataVar)]
        return Graph(ins, outs, tuple(vars))

    @property
    def data_vars(self) -> tuple[DataVar, ...]:
        """The data-dependent sizes the graph's ops set, sorted by name."""
        return tuple(v for v in graph_vars(self.nodes) if isinstance(v, DataVar))

    def dump(self) -> str:
        """Stable, diff-able text: one op per line, types with bounds (``asyncjit.export.dump``)."""
        from ..export import dump

        return dump(self)

    @property
    def nodes(self) -> list[Node]:
        """Every node an input or output reaches, inputs before users."""
        return toposort([*self.inputs, *self.outputs])


Rewrite = Callable[[Node, tuple[Node, ...]], Node]


def remake(node: Node, inputs: tuple[Node, ...], **overrides: Any) -> Node:
    """``node`` with new inputs/attrs; the same object when nothing changed (keeps identity)."""
    if not overrides and all(a is b for a, b in zip(inputs, node.inputs, strict=True)):
        return node
    return make_node(node.op, inputs, **{**dict(node.attrs), **overrides})


def rebuild(graph: Graph, rewrite: Rewrite, vars: Sequence[Var] | None = None) -> Graph:
    """Apply ``rewrite(node, new_inputs)`` to every node, inputs first; returns the new graph."""
    memo: dict[int, Node] = {}
    for node in graph.nodes:
        new_inputs = tuple(memo[i.id] for i in node.inputs)
        memo[node.id] = rewrite(node, new_inputs)
    return Graph(
        tuple(memo[n.id] for n in graph.inputs),
        tuple(memo[n.id] for n in graph.outputs),
        graph.vars if vars is None else tuple(vars),
        graph.pending,
    )
