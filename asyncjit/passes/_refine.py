"""Removing dynamism, as StableHLO's passes do: ``refine_arguments``, ``refine_shapes``,
``canonicalize_dynamism``, and ``refine`` (fixed var values) built from them.

* ``refine_arguments(graph, {input: shape})`` narrows argument types: each dim of an input may
  be given as an int, a ``(lo, hi)`` range or a ``Var``; what that says about the input's vars
  (``t`` is 16, ``t`` is in ``[1, 64]``) is checked against the graph and recorded on the graph
  as *pending* refinements. Nothing else changes yet (StableHLO's wrapper custom call).
* ``refine_shapes(graph)`` propagates pending refinements (and vars with ``min == max``) into
  every shape and symbolic attr, re-running each op's shape rule, until nothing changes.
* ``canonicalize_dynamism(graph)`` turns dynamic ops whose size operands became constants into
  static ones: a ``prefix`` with a constant count becomes a ``shrink`` (its data-dependent size
  an int everywhere), a ``dim`` with a constant value a ``const``.

Each is a pure function from graph to graph; ``optimize_graph`` runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ShapeMismatchError, VarBoundsError
from ..graph import Node, as_node, make_node
from ..graph._dynamic import setters as dynamic_setters
from ..graph._dynamic import var_stem
from ..symbolic import UNBOUNDED, DataVar, Dim, Expr, Var, as_dim, bounds, substitute
from ._graph import Graph, rebuild, remake

__all__ = [
    "canonical_sizes",
    "canonicalize_dynamism",
    "fixed_values",
    "refine",
    "refine_arguments",
    "refine_shapes",
]


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
            raise VarBoundsError(f"fixed value {name}={value} is out of bounds {var.bounds_text}")
        out[name] = int(value)
    return out


def _subst_attr(value: Any, mapping: Mapping[Var | str, Dim]) -> Any:
    if isinstance(value, Expr):
        return substitute(value, mapping)
    if isinstance(value, tuple | list):
        return type(value)(_subst_attr(v, mapping) for v in value)
    return value


def _substituted(graph: Graph, mapping: Mapping[str, Dim], vars: Sequence[Var]) -> Graph:
    """Every shape and symbolic attr with ``mapping`` applied, each op's rule re-run."""
    if not mapping:
        return graph
    m: dict[Var | str, Dim] = {k: v for k, v in mapping.items()}

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        if node.op == "prefix":  # a data-dependent size is at most its (now smaller) axis
            var: DataVar = node.attrs["size_var"]
            cap = bounds(inputs[0].shape[node.attrs["axis"]])[1]
            if cap < var.max:
                m[var.name] = DataVar(var.name, min(var.min, cap), cap, var.op)
        changed = {k: new for k, v in node.attrs.items() if (new := _subst_attr(v, m)) is not v and new != v}
        return remake(node, inputs, **changed)

    return rebuild(graph, rewrite, vars=vars)


def refine(graph: Graph, fixed: Mapping[str, int] | None = None) -> Graph:
    """Substitute fixed var values everywhere and drop those vars from the graph's var list
    (``refine_shapes`` of the graph with ``fixed`` as its pending refinements)."""
    values = fixed_values(graph, fixed)
    if not values and not graph.pending:
        return graph
    return refine_shapes(Graph(graph.inputs, graph.outputs, graph.vars, {**graph.pending, **values}))


# ---------------------------------------------------------------------------------------------
# refine_arguments


def _narrow(var: Var, given: Any, where: str) -> Dim:
    """What ``given`` (an int, a ``(lo, hi)`` range, a ``Var``) says about ``var``: an int or a
    narrower ``Var`` of the same name.

    Raises:
        VarBoundsError: the refinement leaves no value of ``var`` (or is not an int or a range).
    """
    if isinstance(given, Var):
        lo, hi = given.min, given.max
    elif isinstance(given, tuple) and len(given) == 2:
        lo, hi = given[0], UNBOUNDED if given[1] is None else given[1]
    else:
        value = as_dim(given)
        if not isinstance(value, int):
            raise VarBoundsError(
                f"{where}: refine a dim with an int, a (lo, hi) range or a Var, got {given!r}"
            )
        lo = hi = value
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise VarBoundsError(f"{where}: range ends must be ints, got {given!r}")
    lo, hi = max(int(lo), var.min), min(int(hi), var.max)
    if lo > hi:
        raise VarBoundsError(
            f"{where}: refined to {given!r}, which leaves no value of var {var.name!r} {var.bounds_text}"
        )
    return lo if lo == hi else Var(var.name, lo, None if hi >= UNBOUNDED else hi)


def _admits(given: Any, size: int) -> bool:
    """Whether a refinement (int, range or ``Var``) allows the static ``size``."""
    if isinstance(given, Var):
        return given.min <= size <= given.max
    if isinstance(given, tuple) and len(given) == 2:
        lo, hi = given
        return bool(lo <= size and (hi is None or size <= hi))
    return bool(not isinstance(given, bool) and isinstance(given, int | np.integer) and given == size)


def _merge(old: Dim, new: Dim, name: str, where: str) -> Dim:
    """Two refinements of one var: their intersection."""
    if isinstance(old, int) or isinstance(new, int):
        a, b = (old, new) if isinstance(old, int) else (new, old)
        assert isinstance(a, int)
        if (isinstance(b, int) and a != b) or (isinstance(b, Var) and not b.min <= a <= b.max):
            raise VarBoundsError(f"{where}: var {name!r} is refined to both {old} and {new}")
        return a
    assert isinstance(old, Var) and isinstance(new, Var)
    lo, hi = max(old.min, new.min), min(old.max, new.max)
    if lo > hi:
        raise VarBoundsError(f"{where}: var {name!r} refined to disjoint ranges {old!r} and {new!r}")
    return lo if lo == hi else Var(name, lo, None if hi >= UNBOUNDED else hi)


def _input_node(graph: Graph, key: Any) -> Node:
    if isinstance(key, str):
        found = [n for n in graph.inputs if n.attrs["name"] == key]
        if len(found) != 1:
            names = [n.attrs["name"] for n in graph.inputs]
            raise ShapeMismatchError(f"refine_arguments: no single input named {key!r} (inputs {names})")
        return found[0]
    node = as_node(key)
    if not any(node is n for n in graph.inputs):
        raise ShapeMismatchError(f"refine_arguments: {node!r} is not an input of this graph")
    return node


def refine_arguments(graph: Graph, types: Mapping[Any, Sequence[Any]]) -> Graph:
    """Narrow the graph's argument types (StableHLO ``refine-arguments``).

    Args:
        types: input (placeholder ``Tensor``/``Node`` or its name) -> one entry per dim: an int,
            a ``(lo, hi)`` range (``hi`` None: unbounded), a ``Var``, or None to keep the dim.

    Returns:
        The graph with the refinements pending; ``refine_shapes`` propagates them.

    Raises:
        ShapeMismatchError: an unknown input, a rank that differs, or a static dim given
            another size. VarBoundsError: a refinement outside a var's bounds, or one var
            refined two incompatible ways.
    """
    pending: dict[str, Dim] = dict(graph.pending)
    for key, shape in types.items():
        node = _input_node(graph, key)
        name = node.attrs["name"]
        dims = tuple(shape)
        if len(dims) != node.ndim:
            raise ShapeMismatchError(
                f"refine_arguments: input {name!r} has rank {node.ndim} {node.shape}, "
                f"refined to {len(dims)} dims"
            )
        for axis, (dim, given) in enumerate(zip(node.shape, dims, strict=True)):
            if given is None:
                continue
            where = f"refine_arguments: input {name!r} dim {axis}"
            if isinstance(dim, int):
                if not _admits(given, dim):
                    raise ShapeMismatchError(f"{where} is static {dim}, refined to {given!r}")
                continue
            if not isinstance(dim, Var):
                continue  # an expression refines through its vars' own dims
            new = _narrow(dim, given, where)
            pending[dim.name] = (
                _merge(pending[dim.name], new, dim.name, where) if dim.name in pending else new
            )
    return Graph(graph.inputs, graph.outputs, graph.vars, pending)


# ---------------------------------------------------------------------------------------------
# refine_shapes and canonicalize_dynamism


def refine_shapes(graph: Graph, rounds: int = 8) -> Graph:
    """Propagate pending refinements and ``min == max`` vars into every shape and attr, re-running
    each op's shape rule, until nothing changes (StableHLO ``refine-shapes``).

    Vars refined to an int leave ``graph.vars``; vars narrowed to a range are replaced by the
    narrower ``Var`` everywhere.
    """
    for _ in range(rounds):
        mapping: dict[str, Dim] = dict(graph.pending)
        mapping.update({v.name: v.min for v in graph.vars if v.min == v.max and v.name not in mapping})
        if not mapping:
            return graph
        remaining = [
            new if isinstance(new := mapping.get(v.name, v), Var) else v
            for v in graph.vars
            if not isinstance(mapping.get(v.name, v), int)
        ]
        graph = _substituted(Graph(graph.inputs, graph.outputs, graph.vars), mapping, remaining)
    return graph


def canonicalize_dynamism(graph: Graph) -> Graph:
    """Dynamic ops whose size operands are constants become static ops (StableHLO
    ``canonicalize-dynamism``): ``prefix`` by a constant count in range is a ``shrink`` and its
    data-dependent size an int downstream; ``dim`` of a constant is a ``const``. A constant count
    out of range is left as it is: the run raises, naming the op."""
    sizes: dict[str, Dim] = {}

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        if sizes:
            m: dict[Var | str, Dim] = {k: v for k, v in sizes.items()}
            changed = {
                k: new for k, v in node.attrs.items() if (new := _subst_attr(v, m)) is not v and new != v
            }
        else:
            changed = {}
        if node.op == "prefix" and inputs[1].op == "const":
            x, count = inputs
            var: DataVar = node.attrs["size_var"]
            axis = node.attrs["axis"]
            n = int(np.asarray(count.attrs["value"]))
            if 0 <= n <= var.max and bounds(x.shape[axis] - n)[0] >= 0:
                sizes[var.name] = n
                slices = tuple((0, n if a == axis else d, 1) for a, d in enumerate(x.shape))
                return make_node("shrink", (x,), slices=slices)
        if node.op == "dim" and isinstance(expr := changed.get("expr", node.attrs["expr"]), int):
            return make_node("const", (), value=np.array(expr, dtype=node.dtype.np))
        return remake(node, inputs, **changed)

    return rebuild(graph, rewrite)


def canonical_sizes(graph: Graph) -> Graph:
    """Data-dependent sizes renamed by their position in the graph (``nonzero_0``, ...), so two
    builds of one graph key the compile caches alike (fresh names come from a global counter)."""
    setters = dynamic_setters(graph.nodes)
    mapping: dict[str, Dim] = {}
    for k, n in enumerate(setters):
        var: DataVar = n.attrs["size_var"]
        stem = var_stem(var.op)
        name = f"{stem}_{k}"
        if name != var.name:
            mapping[var.name] = DataVar(name, var.min, var.max, var.op)
    return _substituted(graph, mapping, graph.vars) if mapping else graph
