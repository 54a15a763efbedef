"""``refine``: specialise a graph for fixed var values (StableHLO ``refine_shapes`` + canonicalize).

Vars given in ``fixed`` and vars with ``min == max`` are replaced by ints in every shape and
symbolic attr; the symbolic simplifier then canonicalises the expressions, so later passes and
codegen see static dims wherever possible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import VarBoundsError
from ..graph import Node
from ..symbolic import Dim, Expr, Var, substitute
from ._graph import Graph, rebuild, remake

__all__ = ["refine", "fixed_values"]


def fixed_values(graph: Graph, fixed: Mapping[str, int] | None) -> dict[str, int]:
    """The full map of vars to specialise: ``fixed`` (checked against bounds) plus ``min == max`` vars.

    Raises:
        VarBoundsError: a name the graph does not use, or a value outside the var's bounds.
    """
    by_name = {v.name: v for v in graph.vars}
    out = {v.name: v.min for v in graph.vars if v.min == v.max}
    for name, value in (fixed or {}).items():
        var = by_name.get(name)
        if var is None:
            raise VarBoundsError(f"cannot fix unknown var {name!r}; the graph has {sorted(by_name)}")
        if isinstance(value, bool) or not hasattr(value, "__index__"):  # 2.5 must not become 2
            raise VarBoundsError(f"fixed value {name}={value!r} is not an int")
        value = value.__index__()
        if not var.min <= value <= var.max:
            raise VarBoundsError(f"fixed value {name}={value} is out of bounds [{var.min}, {var.max}]")
        out[name] = int(value)
    return out


def _subst_attr(value: Any, mapping: Mapping[str, int]) -> Any:
    if isinstance(value, Expr):
        by_name: dict[Var | str, Dim] = {k: v for k, v in mapping.items()}
        return substitute(value, by_name)
    if isinstance(value, tuple | list):
        return type(value)(_subst_attr(v, mapping) for v in value)
    return value


def refine(graph: Graph, fixed: Mapping[str, int] | None = None) -> Graph:
    """Substitute fixed var values everywhere and drop those vars from the graph's var list."""
    values = fixed_values(graph, fixed)
    if not values:
        return graph

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        changed = {
            k: new for k, v in node.attrs.items() if (new := _subst_attr(v, values)) is not v and new != v
        }
        return remake(node, inputs, **changed)

    remaining: list[Var] = [v for v in graph.vars if v.name not in values]
    return rebuild(graph, rewrite, vars=remaining)
