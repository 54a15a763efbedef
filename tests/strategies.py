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
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st
from oracle import (
    ANY_UNARY_ORACLE,
    BINARY_NAMES,
    FLOAT_UNARY_ORACLE,
    NP_TYPES,
    binary_tensor,
    oracle_binary,
    oracle_cast,
    oracle_conv1d,
    oracle_gather,
    oracle_matmul,
    oracle_nonzero,
    oracle_reduce,
    oracle_scatter,
    oracle_unary,
    promote,
    round_to,
    unary_tensor,
    weak_dtype,
)

from asyncjit import Tensor, Var
from asyncjit import dtypes as dt
from asyncjit.graph import graph_vars, toposort
from asyncjit.symbolic import DataVar, Dim, prod, smax, smin

__all__ = [
    "ALL_KINDS",
    "DimChoice",
    "GraphCase",
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
# input values

VALUE_PROFILES = ("quarter", "wide", "extreme", "big")
"""How inputs are drawn: ``quarter`` steps in [-4, 4] (exact in every dtype); ``wide``: random
bit patterns over the dtype's whole range (denormals, inf and NaN included); ``extreme``: mostly
special values (+-0, +-inf, NaN, +-max, +-min normal, denormals, huge trig arguments, int
min/max); ``big``: magnitudes near the dtype's max (overflow-edge sums and products)."""

_F_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e18, -1e18, 3.6e17, 1e30, 2.0**21, 1e-40, -1e-45]


def _float_values(
    rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...], profile: str
) -> np.ndarray:
    info = np.finfo(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    quarter = rng.integers(-16, 17, size=n) / 4
    if profile == "quarter":
        return quarter.astype(dtype).reshape(shape)
    if profile == "wide":
        bits = rng.integers(0, 2 ** (8 * dtype.itemsize), size=n, dtype=np.uint64)
        return bits.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype).reshape(shape)
    if profile == "big":
        mags = float(info.max) * rng.uniform(0.25, 1.0, size=n)
        return (rng.choice([-1.0, 1.0], size=n) * mags).astype(dtype).reshape(shape)
    specials = [*_F_SPECIALS, float(info.max), -float(info.max), float(info.tiny), -float(info.tiny)]
    pick = rng.integers(0, len(specials), size=n)
    with np.errstate(over="ignore"):
        vals = np.where(rng.random(n) < 0.6, np.array(specials)[pick], quarter)
        return vals.astype(dtype).reshape(shape)


def input_values(
    rng: np.random.Generator, spec: _PlaceholderSpec, shape: tuple[int, ...], profile: str
) -> np.ndarray:
    """One placeholder's array under a value profile (int index placeholders keep their range)."""
    if spec.dtype.kind == "f":
        return _float_values(rng, spec.dtype, shape, profile)
    if spec.dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    arr = rng.integers(spec.low, spec.high + 1, size=shape).astype(spec.dtype)
    if profile in ("quarter", "wide") or spec.indices:
        return arr
    info = np.iinfo(spec.dtype)
    edges = {int(info.min), int(info.max), int(info.min) + 1, int(info.max) - 1, 0, 1, -1}
    edge = np.array(sorted(e for e in edges if info.min <= e <= info.max), spec.dtype)
    return np.where(rng.random(shape) < 0.5, edge[rng.integers(0, len(edge), size=shape)], arr)


# ---------------------------------------------------------------------------------------------
# random graphs

DimValue = Callable[[Mapping[str, int]], int]


@attrs.frozen
class DimChoice:
    """A dim for a drawn shape: the symbolic ``dim`` and an independent way to compute its value."""

    dim: Dim
    value: DimValue


def _dim_choices(variables: Sequence[Var], allow_zero: bool) -> list[DimChoice]:
    out = [DimChoice(n, lambda b, n=n: n) for n in (1, 2, 3, 4)]
    if allow_zero:
        out.append(DimChoice(0, lambda b: 0))
    for v in variables:
        name = v.name
        out.append(DimChoice(v, lambda b, name=name: b[name]))
        out.append(DimChoice(v + 1, lambda b, name=name: b[name] + 1))
        out.append(DimChoice(2 * v, lambda b, name=name: 2 * b[name]))
        if allow_zero or v.min >= 2:
            out.append(DimChoice(v - 1, lambda b, name=name: b[name] - 1))
        if allow_zero or v.min >= 2:
            out.append(DimChoice(v // 2, lambda b, name=name: b[name] // 2))
        if allow_zero:
            out.append(DimChoice(v % 3, lambda b, name=name: b[name] % 3))
    if len(variables) == 2:
        a, c = variables
        out.append(DimChoice(a * c, lambda b, x=a.name, y=c.name: b[x] * b[y]))
        if allow_zero:  # products of non-var atoms: the bounds prover must factor them out
            out.append(DimChoice((a % 3) * c, lambda b, x=a.name, y=c.name: (b[x] % 3) * b[y]))
            if c.min >= 1:  # canonically (a%3)*c - (a%3): provably >= 0 only by factoring
                out.append(
                    DimChoice((a % 3) * (c - 1), lambda b, x=a.name, y=c.name: (b[x] % 3) * (b[y] - 1))
                )
    return out


Oracle = Callable[[list[np.ndarray], Mapping[str, int]], np.ndarray]


@attrs.frozen
class _Step:
    """One program value: a description, its argument value ids and its numpy oracle."""

    what: str
    args: tuple[int, ...]
    oracle: Oracle | None  # None for placeholders (fed from inputs)


@attrs.frozen
class _PlaceholderSpec:
    tensor: Tensor
    shape: tuple[DimChoice, ...]
    dtype: np.dtype[Any]
    low: int
    high: int  # int data is drawn from [low, high]; may depend on nothing else
    indices: bool = False  # an index tensor: its range matters more than its extremes


@attrs.define(eq=False)
class GraphCase:
    """A random graph with an independent numpy oracle.

    ``outputs`` and ``placeholders`` are ``Tensor``s; ``inputs`` feeds every placeholder at
    ``bindings``; ``expected()`` is the oracle's answer for (by default) the same feed.
    """

    variables: tuple[Var, ...]
    bindings: dict[str, int]
    outputs: list[Tensor]
    placeholders: list[Tensor]
    inputs: dict[Tensor, np.ndarray]
    seed: int
    program: list[_Step]
    output_ids: list[int]
    specs: list[_PlaceholderSpec]
    profile: str = "quarter"

    @property
    def var_bounds(self) -> dict[str, tuple[int, int]]:
        return {v.name: (v.min, v.max) for v in self.variables}

    @property
    def graph_vars(self) -> tuple[Var, ...]:
        """The vars the recorded graph still uses (simplification may drop some drawn ones);
        data-dependent sizes are the plan's, never bound by a caller."""
        used = graph_vars(toposort([t.node for t in self.outputs]))
        return tuple(v for v in used if not isinstance(v, DataVar))

    def var_values(self, bindings: Mapping[str, int] | None = None) -> dict[str, int]:
        """``bindings`` (default: the case's) restricted to ``graph_vars``: what to pass to a run."""
        b = self.bindings if bindings is None else bindings
        return {v.name: b[v.name] for v in self.graph_vars}

    def describe(self) -> str:
        return "; ".join(
            f"v{i}={s.what}({','.join(f'v{a}' for a in s.args)})" for i, s in enumerate(self.program)
        )

    def make_inputs(
        self, bindings: Mapping[str, int], seed: int | None = None, profile: str | None = None
    ) -> dict[Tensor, np.ndarray]:
        """Arrays for every placeholder at ``bindings`` (deterministic for a seed), with values
        drawn by ``profile`` (default: the case's; see ``VALUE_PROFILES``)."""
        rng = np.random.default_rng(self.seed if seed is None else seed)
        feed: dict[Tensor, np.ndarray] = {}
        for spec in self.specs:
            shape = tuple(d.value(bindings) for d in spec.shape)
            feed[spec.tensor] = input_values(rng, spec, shape, profile or self.profile)
        return feed

    def expected(
        self, inputs: Mapping[Tensor, np.ndarray] | None = None, bindings: Mapping[str, int] | None = None
    ) -> list[np.ndarray]:
        """The oracle's outputs for a feed and binding (default: the case's own)."""
        feed = self.inputs if inputs is None else inputs
        b = self.bindings if bindings is None else bindings
        by_tensor = {id(t): a for t, a in feed.items()}
        values: list[np.ndarray] = []
        spec_iter = iter(self.specs)
        for step in self.program:
            if step.oracle is None:
                values.append(np.asarray(by_tensor[id(next(spec_iter).tensor)]))
            else:
                values.append(np.asarray(step.oracle([values[a] for a in step.args], b)))
        return [values[i] for i in self.output_ids]


ALL_KINDS = (
    "unary", "binary", "scalar_binary", "where", "cast", "reduce", "matmul", "conv1d", "reshape",
    "permute", "expand", "slice", "shrink", "pad", "cat", "gather", "scatter", "nonzero", "arange",
    "const",
)  # fmt: skip
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
ALL_DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, np.dtype(np.bool_))


class _Builder:
    """Grows a program: every step records a Tensor op and its numpy oracle side by side."""

    def __init__(
        self,
        draw: st.DrawFn,
        variables: tuple[Var, ...],
        bindings: dict[str, int],
        dtypes: Sequence[np.dtype[Any]],
    ) -> None:
        self.draw = draw
        self.variables = variables
        self.bindings = bindings
        self.dtypes = list(dtypes)
        self.tensors: list[Tensor] = []
        self.program: list[_Step] = []
        self.specs: list[_PlaceholderSpec] = []
        self.choices = _dim_choices(variables, allow_zero=True)
        self.nonzero_choices = _dim_choices(variables, allow_zero=False)
        self._dim_value: dict[str, DimValue] = {}  # by repr: equal dims have equal reprs
        for c in self.choices:
            self._dim_value[repr(c.dim)] = c.value

    # -- values
    def add(self, tensor: Tensor, what: str, args: Sequence[int], oracle: Oracle) -> int:
        self.tensors.append(tensor)
        self.program.append(_Step(what, tuple(args), oracle))
        return len(self.tensors) - 1

    def placeholder(
        self,
        shape: Sequence[DimChoice],
        dtype: np.dtype[Any],
        low: int = -6,
        high: int = 6,
        indices: bool = False,
    ) -> int:
        t = Tensor.placeholder(tuple(d.dim for d in shape), dt.from_numpy(dtype), name=f"p{len(self.specs)}")
        self.specs.append(_PlaceholderSpec(t, tuple(shape), np.dtype(dtype), low, high, indices))
        for d in shape:
            self._dim_value.setdefault(repr(d.dim), d.value)
        self.tensors.append(t)
        self.program.append(_Step("placeholder", (), None))
        return len(self.tensors) - 1

    def const(self, arr: np.ndarray) -> int:
        frozen = np.array(arr)
        return self.add(Tensor.const(frozen), "const", (), lambda a, b, v=frozen: v)

    def dim_value(self, d: Dim) -> DimValue:
        """How to compute a dim that came from a drawn shape (or an int)."""
        if isinstance(d, int):
            return lambda b, d=d: d
        return self._dim_value[repr(d)]

    # -- draws
    def draw_dim(self, nonzero: bool = False) -> DimChoice:
        return self.draw(st.sampled_from(self.nonzero_choices if nonzero else self.choices))

    def draw_shape(self, min_rank: int = 0, max_rank: int = 3, nonzero: bool = False) -> list[DimChoice]:
        rank = self.draw(st.integers(min_rank, max_rank))
        return [self.draw_dim(nonzero) for _ in range(rank)]

    def draw_dtype(self, kinds: str = "fib") -> np.dtype[Any]:
        options = [d for d in self.dtypes if d.kind in kinds]
        return self.draw(st.sampled_from(options or [np.dtype(np.float32)]))

    def pick(self, accept: Callable[[Tensor], bool] = lambda t: True) -> int | None:
        ids = [i for i, t in enumerate(self.tensors) if accept(t)]
        return self.draw(st.sampled_from(ids)) if ids else None

    def shape_choices(self, i: int) -> list[DimChoice]:
        return [DimChoice(d, self.dim_value(d)) for d in self.tensors[i].shape]

    def is_drawn(self, i: int) -> bool:
        """True when every dim of value ``i`` is a drawn dim (or an int), so we can recreate it."""
        return all(isinstance(d, int) or repr(d) in self._dim_value for d in self.tensors[i].shape)


# -- one function per op kind; each returns without adding a step when no operand fits


def _k_unary(b: _Builder) -> None:
    name = b.draw(st.sampled_from([*FLOAT_UNARY_ORACLE, *ANY_UNARY_ORACLE]))
    need_nonbool = name in ANY_UNARY_ORACLE or name in ("floor", "ceil")
    i = b.pick(lambda t: not (need_nonbool and t.dtype.is_bool))
    if i is None:
        return
    b.add(unary_tensor(name, b.tensors[i]), name, (i,), lambda a, _b, n=name: oracle_unary(n, a[0]))


def _broadcast_partner(b: _Builder, i: int, kinds: str) -> int:
    """A fresh placeholder whose shape broadcasts against value ``i`` (drops/1s some dims)."""
    shape = b.shape_choices(i) if b.is_drawn(i) else []
    if shape:
        drop = b.draw(st.integers(0, len(shape)))
        shape = shape[drop:]
        shape = [DimChoice(1, lambda _b: 1) if b.draw(st.booleans()) else d for d in shape]
        if drop == 0 and b.draw(st.booleans()):
            shape = [b.draw_dim(), *shape]  # the partner may also add a leading dim
    return b.placeholder(shape, b.draw_dtype(kinds))


def _k_binary(b: _Builder) -> None:
    name = b.draw(st.sampled_from(BINARY_NAMES))
    logical = name in ("and", "or", "xor")
    kinds = "ib" if logical else "fi"
    i = b.pick(lambda t: (not t.dtype.is_float) if logical else (not t.dtype.is_bool))
    if i is None:
        i = b.placeholder(b.draw_shape(), b.draw_dtype(kinds))
    x = b.tensors[i]
    candidates = [
        j for j, t in enumerate(b.tensors)
        if (not t.dtype.is_float if logical else not t.dtype.is_bool) and _broadcastable(x.shape, t.shape)
    ]  # fmt: skip
    if candidates and b.draw(st.booleans()):
        j = b.draw(st.sampled_from(candidates))
    else:
        j = _broadcast_partner(b, i, kinds)
    if b.draw(st.booleans()):
        i, j = j, i
    out = binary_tensor(name, b.tensors[i], b.tensors[j])
    b.add(out, name, (i, j), lambda a, _b, n=name: oracle_binary(n, a[0], a[1]))


def _broadcastable(a: Sequence[Dim], c: Sequence[Dim]) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(c), strict=False))


def _k_scalar_binary(b: _Builder) -> None:
    name = b.draw(st.sampled_from([n for n in BINARY_NAMES if n not in ("and", "or", "xor")]))
    i = b.pick(lambda t: not t.dtype.is_bool)
    if i is None:
        return
    reverse = b.draw(st.booleans())
    x = b.tensors[i]
    if b.draw(st.integers(0, 3)) == 0:  # a symbolic dim used as a value, on either side
        d = b.draw(st.sampled_from([c for c in b.choices if not isinstance(c.dim, int)] or b.choices))
        out = binary_tensor(name, d.dim, x) if reverse else binary_tensor(name, x, d.dim)  # type: ignore[arg-type]

        def dim_oracle(
            a: list[np.ndarray],
            bb: Mapping[str, int],
            n: str = name,
            f: DimValue = d.value,
            r: bool = reverse,
            static: bool = isinstance(d.dim, int),
        ) -> np.ndarray:
            # a symbolic dim takes the tensor's dtype (weak); a dim that is a plain int is a
            # Python int to the Tensor API (``x ** 2`` is ``x * x``, keeping an int dtype)
            v: Any = f(bb) if static else np.array(f(bb)).astype(a[0].dtype)
            return oracle_binary(n, v, a[0]) if r else oracle_binary(n, a[0], v)

        b.add(out, f"{name}{'_r' if reverse else ''}[{d.dim}]", (i,), dim_oracle)
        return
    # a Python int outside an int tensor's range is refused at graph build (ScalarOverflowError)
    ints = [2, 3, 0] if x.dtype.np.kind == "u" else [2, 3, -1, 0]
    scalar = b.draw(st.sampled_from([*ints, 0.5, -1.5, 2.0, 1e10, -3e38, math.inf, math.nan]))
    out = binary_tensor(name, scalar, x) if reverse else binary_tensor(name, x, scalar)

    def oracle(
        a: list[np.ndarray], _b: Mapping[str, int], n: str = name, s: Any = scalar, r: bool = reverse
    ) -> np.ndarray:
        return oracle_binary(n, s, a[0]) if r else oracle_binary(n, a[0], s)

    b.add(out, f"{name}{'_r' if reverse else ''}[{scalar}]", (i,), oracle)


_CONST_VALUES = [0, 1, -1, 3, 2.5, -0.0, 1e10, 65504.0, 3e38, -3e38, math.inf, -math.inf, math.nan, 1e-40]


def _k_const(b: _Builder) -> None:
    """A rank-0 (or tiny) constant of any dtype, combined with a value or another constant (so
    constant folding sees rank-0 operands)."""
    dtype = b.draw(st.sampled_from(b.dtypes))
    vals = b.draw(st.lists(st.sampled_from(_CONST_VALUES), min_size=1, max_size=3))
    with np.errstate(all="ignore"):
        arr = (
            oracle_cast(np.array(vals, np.float64), dtype)
            if dtype.kind != "f"
            else np.array(vals).astype(dtype)
        )
    arr = arr[:1].reshape(()) if b.draw(st.booleans()) else arr
    c = b.const(arr)
    name = b.draw(st.sampled_from(BINARY_NAMES))
    logical = name in ("and", "or", "xor")
    ok = [
        j for j, t in enumerate(b.tensors)
        if j != c and _broadcastable(t.shape, arr.shape) and _binary_ok(name, t.dtype, b.tensors[c].dtype)
    ]  # fmt: skip
    if not ok or (logical and dtype.kind == "f"):
        return
    j = b.draw(st.sampled_from(ok))
    i, k = (c, j) if b.draw(st.booleans()) else (j, c)
    out = binary_tensor(name, b.tensors[i], b.tensors[k])
    b.add(out, f"{name}[const]", (i, k), lambda a, _b, n=name: oracle_binary(n, a[0], a[1]))


def _binary_ok(name: str, x: dt.DType, y: dt.DType) -> bool:
    if name in ("and", "or", "xor"):
        return not x.is_float and not y.is_float
    return not (x.is_bool or y.is_bool)


def _k_where(b: _Builder) -> None:
    i = b.pick(lambda t: not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    cond = b.add(x > 0, "gt0", (i,), lambda a, _b: oracle_binary("gt", a[0], 0))
    j = _broadcast_partner(b, i, "fi")
    if b.draw(st.booleans()):
        other: Any = b.draw(st.sampled_from([0, -2, 1.5]))
        out = Tensor.select(b.tensors[cond], b.tensors[j], other)

        def oracle(a: list[np.ndarray], _b: Mapping[str, int], o: Any = other) -> np.ndarray:
            y = np.array(o, weak_dtype(o, a[1].dtype))
            common = promote(a[1].dtype, y.dtype)
            c, xx, yy = np.broadcast_arrays(a[0], oracle_cast(a[1], common), oracle_cast(y, common))
            return np.where(c, xx, yy)

        b.add(out, "where_scalar", (cond, j), oracle)
        return
    out = Tensor.select(b.tensors[cond], b.tensors[i], b.tensors[j])

    def oracle2(a: list[np.ndarray], _b: Mapping[str, int]) -> np.ndarray:
        common = promote(a[1].dtype, a[2].dtype)
        c, xx, yy = np.broadcast_arrays(a[0], oracle_cast(a[1], common), oracle_cast(a[2], common))
        return np.where(c, xx, yy)

    b.add(out, "where", (cond, i, j), oracle2)


def _k_cast(b: _Builder) -> None:
    i = b.pick()
    if i is None:
        return
    to = b.draw(st.sampled_from(b.dtypes))
    src = b.tensors[i]
    if src.dtype.is_float and b.draw(st.booleans()):
        # make saturation reachable: scale far outside the int range first
        i = b.add(src * 1e9, "mul[1e9]", (i,), lambda a, _b: oracle_binary("mul", a[0], 1e9))
    b.add(
        b.tensors[i].cast(dt.from_numpy(to)), f"cast[{to}]", (i,), lambda a, _b, to=to: oracle_cast(a[0], to)
    )


def _k_reduce(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None:
        return
    x = b.tensors[i]
    op = b.draw(st.sampled_from(["sum", "max", "min", "mean", "prod"]))
    axes = tuple(sorted(b.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1))))
    keepdims = b.draw(st.booleans())
    as_none = len(axes) == x.ndim and b.draw(st.booleans())
    axis_arg: Any = None if as_none else (axes[0] if len(axes) == 1 and b.draw(st.booleans()) else axes)
    if op == "prod" and x.dtype.is_bool:
        op = "sum"
    out = getattr(x, op)(axis_arg, keepdims=keepdims)
    b.add(
        out,
        f"{op}{axes}{'k' if keepdims else ''}",
        (i,),
        lambda a, _b, o=op, ax=axes, k=keepdims: oracle_reduce(o, a[0], ax, k),
    )


def _k_matmul(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None or not b.is_drawn(i):
        i = b.placeholder(b.draw_shape(1, 3), b.draw_dtype("fi"))
    x = b.tensors[i]
    k = DimChoice(x.shape[-1], b.dim_value(x.shape[-1]))
    if x.ndim == 1:
        shape = [k] if b.draw(st.booleans()) else [*b.draw_shape(0, 1), k, b.draw_dim()]
    else:
        batch = [DimChoice(1, lambda _b: 1) if b.draw(st.booleans()) else d for d in b.shape_choices(i)[:-2]]
        if b.draw(st.booleans()):
            batch = batch[b.draw(st.integers(0, len(batch))) :]
        shape = [*batch, k, b.draw_dim()]
    j = b.placeholder(shape, b.draw_dtype("fi"))
    if b.draw(st.booleans()):
        i, j = j, i  # also exercise y @ x when shapes allow it
        if not _matmul_ok(b.tensors[i].shape, b.tensors[j].shape):
            i, j = j, i
    b.add(b.tensors[i] @ b.tensors[j], "matmul", (i, j), lambda a, _b: oracle_matmul(a[0], a[1]))


def _matmul_ok(a: Sequence[Dim], c: Sequence[Dim]) -> bool:
    ka = a[-1]
    kc = c[0] if len(c) == 1 else c[-2]
    if ka != kc:
        return False
    return _broadcastable(a[:-2], c[:-2])


def _k_conv1d(b: _Builder) -> None:
    k = b.draw(st.one_of(st.integers(1, 3), st.integers(9, 12)))  # long kernels loop over taps
    dilation = b.draw(st.integers(1, 2))
    stride = b.draw(st.integers(1, 2))
    groups = b.draw(st.sampled_from([1, 2]))
    cg = b.draw(st.integers(1, 2))
    og = b.draw(st.sampled_from([1, 2, 9]))  # 8+ outputs per group: im2col even with one input channel
    padding = (b.draw(st.integers(0, 2)), b.draw(st.integers(0, 2)))
    span = dilation * (k - 1) + 1
    extra = max(span - 1 - padding[0] - padding[1], 0)
    if b.variables:
        v = b.draw(st.sampled_from(b.variables))
        length = DimChoice(v + extra, lambda bb, n=v.name, e=extra: bb[n] + e)
    else:
        length = DimChoice(3 + extra, lambda _b, e=3 + extra: e)
    n = b.draw_dim(nonzero=True)
    xi = b.placeholder([n, DimChoice(cg * groups, lambda _b, c=cg * groups: c), length], b.draw_dtype("f"))
    rng = np.random.default_rng(b.draw(st.integers(0, 2**16)))
    w = (rng.integers(-8, 9, size=(og * groups, cg, k)) / 4).astype(np.float32)
    x = b.tensors[xi]
    pad_arg: Any = padding[0] if padding[0] == padding[1] and b.draw(st.booleans()) else padding
    out = x.conv1d(Tensor.const(w), stride=stride, padding=pad_arg, dilation=dilation, groups=groups)

    def oracle(a: list[np.ndarray], _b: Mapping[str, int]) -> np.ndarray:
        return oracle_conv1d(a[0], oracle_cast(w, a[0].dtype), stride, padding, dilation, groups)

    b.add(out, f"conv1d[k{k},s{stride},d{dilation},g{groups},p{padding}]", (xi,), oracle)


def _k_reshape(b: _Builder) -> None:
    i = b.pick()
    if i is None:
        return
    x = b.tensors[i]
    how = b.draw(st.sampled_from(["flatten", "unsqueeze", "squeeze", "merge", "split"]))
    if how == "flatten":
        b.add(x.reshape(-1), "flatten", (i,), lambda a, _b: a[0].reshape(-1))
    elif how == "unsqueeze":
        ax = b.draw(st.integers(0, x.ndim))
        b.add(x.unsqueeze(ax), f"unsqueeze{ax}", (i,), lambda a, _b, ax=ax: np.expand_dims(a[0], ax))
    elif how == "squeeze" and any(d == 1 for d in x.shape):
        ax = b.draw(st.sampled_from([k for k, d in enumerate(x.shape) if d == 1]))
        b.add(x.squeeze(ax), f"squeeze{ax}", (i,), lambda a, _b, ax=ax: np.squeeze(a[0], ax))
    elif how == "merge" and x.ndim >= 2:
        ax = b.draw(st.integers(0, x.ndim - 2))
        out = x.reshape(*x.shape[:ax], x.shape[ax] * x.shape[ax + 1], *x.shape[ax + 2 :])

        def merge(a: list[np.ndarray], _b: Mapping[str, int], ax: int = ax) -> np.ndarray:
            s = a[0].shape
            return a[0].reshape(*s[:ax], s[ax] * s[ax + 1], *s[ax + 2 :])

        b.add(out, f"merge{ax}", (i,), merge)
    else:
        even = [k for k, d in enumerate(x.shape) if isinstance(d, int) and d % 2 == 0 and d > 0]
        if not even:
            b.add(x.reshape(*x.shape, 1), "append1", (i,), lambda a, _b: a[0][..., None])
            return
        ax = b.draw(st.sampled_from(even))
        d = x.shape[ax]
        assert isinstance(d, int)
        out = x.reshape(*x.shape[:ax], 2, d // 2, *x.shape[ax + 1 :])
        b.add(
            out,
            f"split{ax}",
            (i,),
            lambda a, _b, ax=ax, h=d // 2: a[0].reshape(*a[0].shape[:ax], 2, h, *a[0].shape[ax + 1 :]),
        )


def _k_permute(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 2)
    if i is None:
        return
    order = b.draw(st.permutations(list(range(b.tensors[i].ndim))))
    b.add(
        b.tensors[i].permute(*order),
        f"permute{order}",
        (i,),
        lambda a, _b, o=tuple(order): np.transpose(a[0], o),
    )


def _k_expand(b: _Builder) -> None:
    i = b.pick()
    if i is None:
        return
    x = b.tensors[i]
    lead = b.draw_dim()
    target = [lead] + [b.draw_dim() if d == 1 else DimChoice(d, lambda _b: -1) for d in x.shape]
    out = x.expand(*(c.dim for c in target))

    def oracle(a: list[np.ndarray], bb: Mapping[str, int], target: list[DimChoice] = target) -> np.ndarray:
        shape = [
            c.value(bb) if c.value(bb) != -1 else s for c, s in zip(target, (1, *a[0].shape), strict=True)
        ]
        return np.broadcast_to(a[0][None], shape)

    b.add(out, "expand", (i,), oracle)


_SLICES = [
    slice(None),
    slice(1, None),
    slice(None, -1),
    slice(None, 2),
    slice(-2, None),
    slice(None, None, 2),
    slice(1, None, 2),
    slice(3, 1),
]


def _k_slice(b: _Builder) -> None:
    """numpy basic indexing: int slices, symbolic stops, ints, None and Ellipsis."""
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None:
        return
    x = b.tensors[i]
    items: list[Any] = []
    oracle_items: list[Callable[[Mapping[str, int]], Any]] = []
    for d in x.shape:
        choice = b.draw(st.integers(0, 3))
        if choice == 0 and bounds_lo(d) >= 1:
            k = b.draw(st.sampled_from([0, -1]))
            items.append(k)
            oracle_items.append(lambda _b, k=k: k)
        elif choice == 1 and b.variables:
            v = b.draw(st.sampled_from(b.variables))
            sl = b.draw(st.sampled_from(["stop", "start", "neg"]))
            if sl == "stop":
                items.append(slice(None, v))
                oracle_items.append(lambda bb, n=v.name: slice(None, bb[n]))
            elif sl == "start":
                items.append(slice(v // 2, None))
                oracle_items.append(lambda bb, n=v.name: slice(bb[n] // 2, None))
            else:
                items.append(slice(None, -v))
                oracle_items.append(lambda bb, n=v.name: slice(None, -bb[n]))
        else:
            s = b.draw(st.sampled_from(_SLICES))
            items.append(s)
            oracle_items.append(lambda _b, s=s: s)
    if b.draw(st.booleans()):
        at = b.draw(st.integers(0, len(items)))
        items.insert(at, None)
        oracle_items.insert(at, lambda _b: None)
    if items and b.draw(st.booleans()) and all(it is not None for it in items[-1:]):
        items[-1:] = [Ellipsis]
        oracle_items[-1:] = [lambda _b: Ellipsis]
    out = x[tuple(items)]

    def oracle(a: list[np.ndarray], bb: Mapping[str, int], its: list[Any] = oracle_items) -> np.ndarray:
        return np.array(a[0][tuple(f(bb) for f in its)])

    b.add(out, f"getitem{tuple(items)}", (i,), oracle)


def bounds_lo(d: Dim) -> int:
    from asyncjit.symbolic import bounds

    return bounds(d)[0]


def _k_shrink(b: _Builder) -> None:
    """``Tensor.shrink`` with symbolic starts/stops that are provably in range."""
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None:
        return
    x = b.tensors[i]
    if not b.is_drawn(i):
        return
    pairs: list[tuple[Dim, Dim] | None] = []
    funcs: list[Callable[[Mapping[str, int]], slice]] = []
    for d in x.shape:
        value = b.dim_value(d)
        opts = ["all", "head"]
        if bounds_lo(d) >= 1:
            opts.append("tail1")
        if bounds_lo(d) >= 2:
            opts.append("mid")
        how = b.draw(st.sampled_from(opts))
        if how == "all":
            pairs.append(None)
            funcs.append(lambda _b: slice(None))
        elif how == "head":
            pairs.append((0, d // 2))
            funcs.append(lambda bb, f=value: slice(0, f(bb) // 2))
        elif how == "tail1":
            pairs.append((1, d))
            funcs.append(lambda bb, f=value: slice(1, f(bb)))
        else:
            pairs.append((1, d - 1))
            funcs.append(lambda bb, f=value: slice(1, f(bb) - 1))
    out = x.shrink(pairs)
    b.add(out, "shrink", (i,), lambda a, bb, fs=funcs: np.array(a[0][tuple(f(bb) for f in fs)]))


def _k_pad(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None:
        return
    x = b.tensors[i]
    mode = b.draw(st.sampled_from(["constant", "reflect", "edge"]))
    pads: list[tuple[Dim, Dim] | None] = []
    widths: list[Callable[[Mapping[str, int]], tuple[int, int]]] = []
    for d in x.shape:
        lo_d = bounds_lo(d)
        if mode == "constant":
            opts: list[Any] = [0, 1, 2, *b.variables]
        elif mode == "reflect":
            opts = list(range(0, max(lo_d, 1)))
        else:
            opts = [0, 1, 2] if lo_d >= 1 else [0]
        lo = b.draw(st.sampled_from(opts))
        hi = b.draw(st.sampled_from(opts))
        pads.append((lo, hi))
        widths.append(lambda bb, lo=lo, hi=hi: (_val(lo, bb), _val(hi, bb)))
    pad_values = [0, 1, -2.5, math.nan, math.inf, -math.inf, 1e10, 1e19, -1e19, 2**31 + 5, 70000.0, True]
    value: Any = b.draw(st.sampled_from(pad_values)) if mode == "constant" else 0
    out = x.pad(pads, mode=mode, value=value)

    def oracle(
        a: list[np.ndarray], bb: Mapping[str, int], ws: list[Any] = widths, m: str = mode, v: Any = value
    ) -> np.ndarray:
        w = [f(bb) for f in ws]
        if m == "constant":
            fill = oracle_cast(np.array(v, np.float64 if isinstance(v, float) else np.int64), a[0].dtype)
            if a[0].dtype.kind == "f":  # float -> float16 via float64 (1e10 -> inf), as cast does
                with np.errstate(over="ignore"):
                    fill = np.array(v, np.float64).astype(a[0].dtype)
            return np.pad(a[0], w, mode="constant", constant_values=fill)
        return np.pad(a[0], w, mode=m)

    b.add(out, f"pad[{mode}]", (i,), oracle)


def _val(x: Any, bb: Mapping[str, int]) -> int:
    return x if isinstance(x, int) else bb[x.name]


def _k_cat(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    if b.is_drawn(i) and b.draw(st.booleans()):
        shape = b.shape_choices(i)
        shape[ax] = b.draw_dim()
        j = b.placeholder(shape, b.draw_dtype())
    else:
        j = i
    order = [i, j] if b.draw(st.booleans()) else [j, i]
    out = Tensor.cat([b.tensors[k] for k in order], axis=ax - x.ndim if b.draw(st.booleans()) else ax)

    def oracle(a: list[np.ndarray], _b: Mapping[str, int], ax: int = ax) -> np.ndarray:
        common = promote(*(v.dtype for v in a))
        return np.concatenate([oracle_cast(v, common) for v in a], axis=ax)

    b.add(out, f"cat{ax}", tuple(order), oracle)


def _k_gather(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and any(bounds_lo(d) >= 1 for d in t.shape))
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.sampled_from([k for k, d in enumerate(x.shape) if bounds_lo(d) >= 1]))
    hi_d = max(_upper(x.shape[ax]), 1)
    if b.draw(st.booleans()):
        m = b.draw(st.integers(0, 5))
        idx = np.array(b.draw(st.lists(st.integers(-2, hi_d + 2), min_size=m, max_size=m)), dtype=np.int64)
        j = b.const(idx.astype(b.draw(st.sampled_from([np.int32, np.int64]))))
    else:
        j = b.placeholder(
            [b.draw_dim()], b.draw(st.sampled_from(INT_DTYPES)), low=-2, high=hi_d + 2, indices=True
        )
    out = x[(slice(None),) * ax + (b.tensors[j],)] if b.draw(st.booleans()) else x.gather(ax, b.tensors[j])
    b.add(out, f"gather{ax}", (i, j), lambda a, _b, ax=ax: oracle_gather(a[0], ax, a[1]))


def _upper(d: Dim) -> int:
    from asyncjit.symbolic import upper

    return upper(d)


def _k_scatter(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None or not b.is_drawn(i):
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    hi_d = _upper(x.shape[ax])
    m = b.draw(st.integers(0, 5))
    idx = np.array(b.draw(st.lists(st.integers(-2, hi_d + 1), min_size=m, max_size=m)), dtype=np.int32)
    j = b.const(idx)
    shape = b.shape_choices(i)
    shape[ax] = DimChoice(m, lambda _b, m=m: m)
    k = b.placeholder(shape, np.dtype(x.dtype.np))
    out = x.scatter(ax, b.tensors[j], b.tensors[k])
    b.add(out, f"scatter{ax}", (i, j, k), lambda a, _b, ax=ax: oracle_scatter(a[0], ax, a[1], a[2]))


def _k_nonzero(b: _Builder) -> None:
    i = b.pick()
    if i is None:
        return
    size = b.draw(st.integers(0, 6))
    fill = b.draw(st.sampled_from([0, -1]))
    idx, count = b.tensors[i].nonzero(size, fill_value=fill)
    b.add(idx, f"nonzero[{size}]", (i,), lambda a, _b, s=size, f=fill: oracle_nonzero(a[0], s, f)[0])
    b.add(count, "nonzero_count", (i,), lambda a, _b: oracle_nonzero(a[0], 0, 0)[1])


def _k_arange(b: _Builder) -> None:
    d = b.draw_dim()
    dtype = b.draw(st.sampled_from((*INT_DTYPES, np.dtype(np.float32))))
    if b.draw(st.booleans()):
        out = Tensor.arange(d.dim, dt.from_numpy(dtype))
        b.add(out, "arange", (), lambda a, bb, f=d.value, t=dtype: np.arange(f(bb)).astype(t))
    else:
        out = Tensor.from_dim(d.dim, dt.from_numpy(dtype))
        b.add(out, "from_dim", (), lambda a, bb, f=d.value, t=dtype: np.array(f(bb)).astype(t))


KIND_BUILDERS: dict[str, Callable[[_Builder], None]] = {
    "unary": _k_unary,
    "binary": _k_binary,
    "scalar_binary": _k_scalar_binary,
    "where": _k_where,
    "cast": _k_cast,
    "reduce": _k_reduce,
    "matmul": _k_matmul,
    "conv1d": _k_conv1d,
    "reshape": _k_reshape,
    "permute": _k_permute,
    "expand": _k_expand,
    "slice": _k_slice,
    "shrink": _k_shrink,
    "pad": _k_pad,
    "cat": _k_cat,
    "gather": _k_gather,
    "scatter": _k_scatter,
    "nonzero": _k_nonzero,
    "arange": _k_arange,
    "const": _k_const,
}


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


# -- neural-network ops (conv, pool, cumsum, argmax/argmin, topk, take_along_axis) and the
#    wider int dtypes: independent loop oracles, kept apart from the core kinds above


def oracle_conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    groups: int,
    dilations: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Direct loops over every output element (ONNX Conv; pads in ONNX order)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    dh, dw = dilations
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, max(oh, 0), max(ow, 0)))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(max(oh, 0)):
            for j in range(max(ow, 0)):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * strides[0] : i * strides[0] + dh * (kh - 1) + 1 : dh,
                    j * strides[1] : j * strides[1] + dw * (kw - 1) + 1 : dw,
                ]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return round_to(out, x.dtype)


def oracle_pool1d(
    x: np.ndarray, mode: str, k: int, s: int, pad: tuple[int, int], ceil: bool, include: bool
) -> np.ndarray:
    """ONNX MaxPool/AveragePool on x[N, C, L], one window at a time."""
    length = x.shape[2]
    span = length + pad[0] + pad[1] - k
    out_len = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out_len - 1) * s >= length + pad[0]:
        out_len -= 1
    out = np.zeros((*x.shape[:2], max(out_len, 0)), np.float64 if x.dtype.kind == "f" else x.dtype)
    for o in range(max(out_len, 0)):
        taps = [o * s + t - pad[0] for t in range(k)]
        inside = [p for p in taps if 0 <= p < length]
        if mode == "max":
            ident = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            out[:, :, o] = x[:, :, inside].max(axis=2, initial=ident) if inside else ident
        else:
            count = sum(1 for p in taps if p < length + pad[1]) if include else len(inside)
            total = x[:, :, inside].astype(np.float64).sum(axis=2)
            out[:, :, o] = total / count if count else 0.0
    return round_to(out, x.dtype)


def oracle_cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    v = np.flip(x, axis) if reverse else x
    work = np.float32 if x.dtype.kind == "f" else x.dtype
    out = np.zeros(v.shape, work)
    acc = np.zeros(np.delete(np.array(v.shape), axis), work)
    with np.errstate(all="ignore"):
        for i in range(v.shape[axis]):
            cur = np.take(v, i, axis=axis).astype(work)
            if exclusive:
                np.moveaxis(out, axis, 0)[i] = acc
                acc = (acc + cur).astype(work)
            else:
                acc = (acc + cur).astype(work)
                np.moveaxis(out, axis, 0)[i] = acc
    out = np.flip(out, axis) if reverse else out
    return out.astype(x.dtype)


def oracle_argext(x: np.ndarray, op: str, axis: int, last: bool) -> np.ndarray:
    """First (or last) index of the extreme along ``axis``; NaN is the extreme."""
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1], np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = [float(v) if x.dtype.kind == "f" else int(v) for v in moved[pos]]
        nan = [k for k, v in enumerate(row) if v != v]
        if nan:
            out[pos] = nan[-1] if last else nan[0]
            continue
        best = max(row) if op == "max" else min(row)
        hits = [k for k, v in enumerate(row) if v == best]
        out[pos] = hits[-1] if last else hits[0]
    return np.expand_dims(out, axis)


def oracle_topk(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    """Indices of the k best along ``axis`` by a stable sort (ties: lower index first)."""
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros((*moved.shape[:-1], k), np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = list(moved[pos])

        def key(i: int, row: list[Any] = row) -> tuple[int, Any]:
            v = row[i]
            nan = v != v
            if largest:
                return (0 if nan else 1, 0 if nan else -v if x.dtype.kind == "f" else -int(v))
            return (1 if nan else 0, 0 if nan else v if x.dtype.kind == "f" else int(v))

        out[pos] = sorted(range(len(row)), key=key)[:k]
    return np.moveaxis(out, -1, axis)


def _long_enough(b: _Builder, extra: int) -> DimChoice:
    """A length of at least ``extra + 1``: a drawn var plus ``extra``, or a static one."""
    if b.variables:
        v = b.draw(st.sampled_from(b.variables))
        return DimChoice(v + extra, lambda bb, n=v.name, e=extra: bb[n] + e)
    n = b.draw(st.integers(1, 5)) + extra
    return DimChoice(n, lambda _b, n=n: n)


def _k_conv2d(b: _Builder) -> None:
    # One group of up to 6 channels and up to 8 outputs per group: stride-1 layers with 16+
    # products per output take the padded-input kernel (``codegen._convtaps``), with row tiles
    # of 4/2/1 output channels beside the full ones; symbolic widths move its padded frame.
    kh, kw = b.draw(st.integers(1, 3)), b.draw(st.integers(1, 3))
    strides = (b.draw(st.integers(1, 3)), b.draw(st.integers(1, 2)))
    dilations = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    groups = b.draw(st.sampled_from([1, 2]))
    cg, og = b.draw(st.integers(1, 6 if groups == 1 else 2)), b.draw(st.integers(1, 8))
    pads = tuple(b.draw(st.integers(0, 3)) for _ in range(4))
    extra_h = max(dilations[0] * (kh - 1) - pads[0] - pads[2], 0)
    extra_w = max(dilations[1] * (kw - 1) - pads[1] - pads[3], 0)
    height = _long_enough(b, extra_h)
    width = _long_enough(b, extra_w + 2)
    n = b.draw_dim(nonzero=True)
    chans = DimChoice(cg * groups, lambda _b, c=cg * groups: c)
    xi = b.placeholder([n, chans, height, width], b.draw_dtype("f"))
    rng = np.random.default_rng(b.draw(st.integers(0, 2**16)))
    w = (rng.integers(-8, 9, size=(og * groups, cg, kh, kw)) / 4).astype(np.float32)
    x = b.tensors[xi]
    wt = Tensor.const(w).cast(x.dtype)
    out = x.conv(wt, strides=strides, pads=pads, dilations=dilations, groups=groups)

    def oracle(a: list[np.ndarray], _b: Mapping[str, int]) -> np.ndarray:
        w64 = oracle_cast(w, a[0].dtype).astype(np.float64)
        return oracle_conv2d(a[0], w64, strides, pads, groups, dilations)

    b.add(out, f"conv2d[k{kh}x{kw},s{strides},d{dilations},g{groups},p{pads}]", (xi,), oracle)


def _k_pool(b: _Builder) -> None:
    mode = b.draw(st.sampled_from(["max", "avg"]))
    # windows past the codegen's unroll limit (8 taps) loop over their taps at run time
    k, s = b.draw(st.one_of(st.integers(1, 3), st.integers(9, 12))), b.draw(st.integers(1, 3))
    pad = (b.draw(st.integers(0, 2)), b.draw(st.integers(0, 2)))
    ceil, include = b.draw(st.booleans()), b.draw(st.booleans())
    extra = max(k - 1 - pad[0] - pad[1], 0)
    length = _long_enough(b, extra)
    xi = b.placeholder(
        [b.draw_dim(nonzero=True), b.draw_dim(), length], b.draw_dtype("f" if mode == "avg" else "fi")
    )
    x = b.tensors[xi]
    out = (
        x.max_pool(k, s, pad, ceil_mode=ceil)
        if mode == "max"
        else x.avg_pool(k, s, pad, ceil_mode=ceil, count_include_pad=include)
    )
    b.add(
        out,
        f"{mode}_pool[k{k},s{s},p{pad},{'ceil' if ceil else 'floor'}{',incl' if include else ''}]",
        (xi,),
        lambda a, _b, m=mode, k=k, s=s, p=pad, c=ceil, i=include: oracle_pool1d(a[0], m, k, s, p, c, i),
    )


def _k_cumsum(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    ex, rev = b.draw(st.booleans()), b.draw(st.booleans())
    b.add(x.cumsum(ax, ex, rev), f"cumsum{ax}{'x' if ex else ''}{'r' if rev else ''}", (i,),
          lambda a, _b, ax=ax, ex=ex, rev=rev: oracle_cumsum(a[0], ax, ex, rev))  # fmt: skip


def _k_argext(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None or not b.is_drawn(i):
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    if _lower(x.shape[ax]) < 1:
        return
    op, last = b.draw(st.sampled_from(["max", "min"])), b.draw(st.booleans())
    out = (x.argmax if op == "max" else x.argmin)(ax, keepdims=True, last=last)
    b.add(
        out,
        f"arg{op}{ax}{'L' if last else ''}",
        (i,),
        lambda a, _b, o=op, ax=ax, la=last: oracle_argext(a[0], o, ax, la),
    )


def _k_topk(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    k = b.draw(st.integers(0, max(_lower(x.shape[ax]), 0)))
    largest = b.draw(st.booleans())
    vals, idx = x.topk(k, ax, largest)
    j = b.add(idx, f"topk{ax}[{k}{'' if largest else ',min'}]", (i,),
              lambda a, _b, k=k, ax=ax, la=largest: oracle_topk(a[0], k, ax, la))  # fmt: skip
    b.add(vals, "topk_values", (i, j), lambda a, _b, ax=ax: np.take_along_axis(a[0], a[1], axis=ax))


def _k_take_along_axis(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None or not b.is_drawn(i):
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    if _lower(x.shape[ax]) < 1:
        return
    shape = b.shape_choices(i)
    m = b.draw(st.integers(0, 4))
    shape[ax] = DimChoice(m, lambda _b, m=m: m)
    hi = _upper(x.shape[ax])
    j = b.placeholder(
        shape, b.draw(st.sampled_from([np.dtype(np.int32), np.dtype(np.int64)])), low=-2, high=hi + 1
    )

    def oracle(a: list[np.ndarray], _b: Mapping[str, int], ax: int = ax) -> np.ndarray:
        return np.take_along_axis(a[0], np.clip(a[1].astype(np.int64), 0, a[0].shape[ax] - 1), axis=ax)

    b.add(x.take_along_axis(b.tensors[j], ax), f"take_along{ax}", (i, j), oracle)


def _lower(d: Dim) -> int:
    from asyncjit.symbolic import bounds

    return bounds(d)[0]


NN_KIND_BUILDERS: dict[str, Callable[[_Builder], None]] = {
    "conv2d": _k_conv2d,
    "pool": _k_pool,
    "cumsum": _k_cumsum,
    "argext": _k_argext,
    "topk": _k_topk,
    "take_along_axis": _k_take_along_axis,
}
KIND_BUILDERS.update(NN_KIND_BUILDERS)
NN_KINDS = tuple(NN_KIND_BUILDERS)
# The wider ints, each drawn on its own (with bool) by ``graph_cases(dtypes=...)``; index
# placeholders (int32/int64) still meet them, which the oracle's ``promote`` handles.
WIDE_INT_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64))
for _d in WIDE_INT_DTYPES:
    NP_TYPES.setdefault(_d.name, _d.type)


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
