"""Shared hypothesis strategies: symbolic expressions and random small graphs with a numpy oracle.

Two families, both meant for reuse by later differential tests (the LLVM compiler against the
reference interpreter):

* ``expr_trees(variables)`` draws a *raw* expression tree (nested tuples). ``build_expr`` turns
  it into a symbolic ``Dim`` through the operators; ``python_eval`` evaluates the raw tree with
  plain Python ints, independently of ``asyncjit.symbolic``.
* ``graph_cases()`` draws a ``GraphCase``: a random program over every op kind, recorded both as
  a ``Tensor`` graph (``outputs``, ``placeholders``) and as a numpy oracle written here, without
  the op registry's reference functions. ``case.expected(inputs, bindings)`` replays the oracle
  for any binding of the case's vars; ``case.make_inputs(bindings)`` makes matching arrays.

The graph machinery is split by topic: ``strategies_case`` holds ``GraphCase`` and the builder
that grows one, ``strategies_kinds`` the core op kinds, ``strategies_nn`` the neural-network
kinds and the wider ints. This module draws whole cases (``graph_cases``, over every kind
registered in ``KIND_BUILDERS``), compares outputs, and adds the data-dependent kinds and
``unbounded_case``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st
from strategies_case import GraphCase, _Builder
from strategies_kinds import ALL_DTYPES, ALL_KINDS, KIND_BUILDERS
from strategies_nn import NN_KIND_BUILDERS

from asyncjit import Tensor, Var
from asyncjit import dtypes as dt
from asyncjit.symbolic import Dim, prod, smax, smin

__all__ = [
    "assert_outputs_match",
    "bindings_for",
    "build_expr",
    "expr_trees",
    "graph_cases",
    "python_eval",
    "var_sets",
]

# ---------------------------------------------------------------------------------------------
# symbolic expressions

Tree = tuple[Any, ...]
BINARY_TREE_OPS = ("add", "sub", "mul", "min", "max")
DIV_TREE_OPS = ("floordiv", "mod")


@st.composite
def var_sets(draw: st.DrawFn, names: Sequence[str] = ("a", "b", "t"), max_hi: int = 20) -> tuple[Var, ...]:
    """One ``Var`` per name with random bounds ``1 <= min <= max <= max_hi``."""
    out = []
    for name in names:
        lo = draw(st.integers(1, max_hi))
        hi = draw(st.integers(lo, max_hi))
        out.append(Var(name, lo, hi))
    return tuple(out)


def _int_leaf(i: int) -> Tree:
    return ("int", i)


def _var_leaf(v: Var) -> Tree:
    return ("var", v)


def _extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    return st.one_of(
        st.tuples(st.sampled_from(BINARY_TREE_OPS), children, children),
        st.tuples(st.sampled_from(DIV_TREE_OPS), children, st.integers(1, 6)),
    )


@functools.lru_cache(maxsize=256)
def _expr_trees(variables: tuple[Var, ...], max_leaves: int) -> st.SearchStrategy[Tree]:
    # named functions, not lambdas: hypothesis reads a lambda's source to describe it (slow)
    leaves = st.one_of(st.integers(-6, 6).map(_int_leaf), st.sampled_from(variables).map(_var_leaf))
    return st.recursive(leaves, _extend, max_leaves=max_leaves)


def expr_trees(variables: Sequence[Var], max_leaves: int = 8) -> st.SearchStrategy[Tree]:
    """Raw trees: ``("int", n)``, ``("var", v)``, ``(op, left, right)`` with ``op`` in
    + - * min max, and ``("floordiv" | "mod", child, k)`` with an int ``k >= 1``."""
    return _expr_trees(tuple(variables), max_leaves)


def build_expr(tree: Tree) -> Dim:
    """The symbolic dim for ``tree``, built with the ``Expr`` operators and ``smin``/``smax``."""
    kind = tree[0]
    if kind == "int":
        return int(tree[1])
    if kind == "var":
        v: Var = tree[1]
        return v
    if kind in DIV_TREE_OPS:
        num = build_expr(tree[1])
        return num // tree[2] if kind == "floordiv" else num % tree[2]
    a, b = build_expr(tree[1]), build_expr(tree[2])
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    return smin(a, b) if kind == "min" else smax(a, b)


def python_eval(tree: Tree, bindings: Mapping[str, int]) -> int:
    """The value of a raw tree with Python ints (floor division and modulo)."""
    kind = tree[0]
    if kind == "int":
        return int(tree[1])
    if kind == "var":
        return bindings[tree[1].name]
    if kind in DIV_TREE_OPS:
        num = python_eval(tree[1], bindings)
        return num // tree[2] if kind == "floordiv" else num % tree[2]
    a, b = python_eval(tree[1], bindings), python_eval(tree[2], bindings)
    return {
        "add": a + b,
        "sub": a - b,
        "mul": a * b,
        "min": min(a, b),
        "max": max(a, b),
    }[kind]


def bindings_for(variables: Sequence[Var]) -> st.SearchStrategy[dict[str, int]]:
    """A value per var within its bounds, biased towards the bounds themselves."""
    return st.fixed_dictionaries(
        {v.name: st.one_of(st.just(v.min), st.just(v.max), st.integers(v.min, v.max)) for v in variables}
    )


# ---------------------------------------------------------------------------------------------
# random graphs (their kinds: strategies_kinds, strategies_nn and the dynamic ones below)

KIND_BUILDERS.update(NN_KIND_BUILDERS)


@st.composite
def graph_cases(
    draw: st.DrawFn,
    kinds: Sequence[str] = ALL_KINDS,
    dtypes: Sequence[np.dtype[Any]] = ALL_DTYPES,
    max_steps: int = 6,
    max_vars: int = 2,
    profiles: Sequence[str] = ("quarter",),
    max_bound: int = 7,
) -> GraphCase:
    """A random small graph over ``kinds`` (every op kind by default) with inputs, vars and bindings.

    Vars have ``1 <= min <= max <= max_bound`` (``min == max`` too); ``profiles`` are the
    ``VALUE_PROFILES`` the inputs may be drawn from."""
    names = ("t", "s")[: draw(st.integers(0, max_vars))]
    variables = []
    for name in names:
        lo = draw(st.integers(1, 3))
        hi = lo + draw(st.integers(0, 4))
        if max_bound > hi and draw(st.integers(0, 3)) == 0:
            hi = draw(st.integers(hi, max_bound))
        variables.append(Var(name, lo, min(hi, max(max_bound, lo))))
    bindings = draw(bindings_for(variables))
    b = _Builder(draw, tuple(variables), bindings, [np.dtype(d) for d in dtypes])
    b.placeholder(b.draw_shape(), b.draw_dtype())
    for _ in range(draw(st.integers(1, max_steps))):
        KIND_BUILDERS[draw(st.sampled_from(list(kinds)))](b)
    last = len(b.tensors) - 1
    extra = draw(st.lists(st.integers(0, last), max_size=2, unique=True))
    output_ids = sorted({last, *extra})
    seed = draw(st.integers(0, 2**32 - 1))
    case = GraphCase(
        variables=tuple(variables),
        bindings=bindings,
        outputs=[b.tensors[k] for k in output_ids],
        placeholders=[s.tensor for s in b.specs],
        inputs={},
        seed=seed,
        program=b.program,
        output_ids=output_ids,
        specs=b.specs,
        profile=draw(st.sampled_from(list(profiles))),
    )
    case.inputs = case.make_inputs(bindings)
    return case


def assert_outputs_match(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], what: str = ""
) -> None:
    """Same shapes and dtypes; ints and bools exactly, floats to a few ulps (NaNs match NaNs)."""
    assert len(actual) == len(expected)
    for k, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.shape == want.shape, f"output {k} {what}: shape {got.shape} != {want.shape}"
        assert got.dtype == want.dtype, f"output {k} {what}: dtype {got.dtype} != {want.dtype}"
        if got.dtype.kind == "f":
            rtol = 2e-3 if got.dtype == np.float16 else 2e-5
            np.testing.assert_allclose(
                got, want, rtol=rtol, atol=rtol, equal_nan=True, err_msg=f"output {k} {what}"
            )
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"output {k} {what}")


# ---------------------------------------------------------------------------------------------
# dynamism: data-dependent sizes (kinds ``mask``, ``take``) and unbounded vars (``unbounded_case``)
#
# The dynamic kinds are not in ALL_KINDS: graphs with them run through ``DYNAMIC_KINDS`` only,
# whose other kinds use a picked tensor's own shape (never a placeholder made from it, which a
# data-dependent dim cannot be). Oracles compute data-dependent results from the arrays alone.

DYNAMIC_KINDS = ("unary", "scalar_binary", "cast", "reduce", "mask", "take")


def _k_mask(b: _Builder) -> None:
    """``x[x > 0]`` (a boolean mask over the leading axis, or over every axis)."""
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    whole = x.ndim == 1 or b.draw(st.booleans())
    if not whole and x.dtype.is_float and x.dtype != dt.float64:
        return  # a float32 row sum's rounding would decide the mask: only exact sums here
    if whole:
        out = x[x > 0]
        b.add(out, "mask[all]", (i,), lambda a, _b: np.ascontiguousarray(a[0][a[0] > 0]))
        return
    flat = x.reshape(x.shape[0], prod(x.shape[1:])) if x.ndim > 2 else x
    row = flat.sum(1) > 0 if x.dtype.is_float else flat.max(1) > 0
    out = x[row]

    def oracle(a: list[np.ndarray], _b: Mapping[str, int]) -> np.ndarray:
        v = a[0].reshape(a[0].shape[0], -1)
        keep = v.astype(np.float64).sum(1) > 0 if v.dtype.kind == "f" else v.max(1, initial=0) > 0
        return np.ascontiguousarray(a[0][keep])

    b.add(out, "mask[rows]", (i,), oracle)


def _k_take(b: _Builder) -> None:
    """``x[:count]`` with ``count`` computed in the graph (the number of positive entries,
    shifted, maybe negative: numpy's rules), optionally with an explicit bound."""
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    shift = b.draw(st.integers(-3, 2))
    count = (x > 0).cast(dt.int64).sum() + shift
    out = x[:count]

    def oracle(a: list[np.ndarray], _b: Mapping[str, int], s: int = shift) -> np.ndarray:
        n = int((a[0] > 0).sum()) + s
        return np.ascontiguousarray(a[0][:n])

    b.add(out, f"take[count{shift:+d}]", (i,), oracle)


KIND_BUILDERS.update({"mask": _k_mask, "take": _k_take})


def unbounded_case(case: GraphCase) -> GraphCase:
    """``case`` with every var declared unbounded (``Var(name, min, None)``) in its graph, the
    same oracle, and its finite bounds kept in ``variables`` (bindings are drawn from them)."""
    from hypothesis import reject

    from asyncjit.errors import TensorError
    from asyncjit.passes import Graph
    from asyncjit.passes._refine import _substituted

    graph = Graph.of([t.node for t in case.outputs], [p.node for p in case.placeholders])
    mapping: dict[str, Dim] = {v.name: Var(v.name, v.min, None) for v in graph.vars}
    try:
        new = _substituted(graph, mapping, [Var(v.name, v.min, None) for v in graph.vars])
    except TensorError:
        # the graph was valid only because a var's bounds pinned it (``t`` in [1, 1] makes
        # ``(t+1)//2`` equal a placeholder's 1): without them it is another, invalid program
        reject()
    by_id = {p.node.id: Tensor(n) for p, n in zip(case.placeholders, new.inputs, strict=True)}
    placeholders = [by_id[p.node.id] for p in case.placeholders]
    specs = [attrs.evolve(s, tensor=by_id[s.tensor.node.id]) for s in case.specs]
    out = GraphCase(
        variables=case.variables,
        bindings=case.bindings,
        outputs=[Tensor(n) for n in new.outputs],
        placeholders=placeholders,
        inputs={},
        seed=case.seed,
        program=case.program,
        output_ids=case.output_ids,
        specs=specs,
        profile=case.profile,
    )
    out.inputs = out.make_inputs(case.bindings)
    return out
