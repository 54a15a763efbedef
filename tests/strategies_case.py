"""The record a random graph is drawn into: ``GraphCase``, the ``_Builder`` that grows one, input values.

A case's program is a list of steps, each a ``Tensor`` op recorded beside its numpy oracle. Its
placeholders have ``DimChoice`` dims (a symbolic dim and an independent way to compute its
value) and are fed by ``input_values`` under one of the ``VALUE_PROFILES``. The op kinds that
grow a program are in ``strategies_kinds`` and ``strategies_nn``; ``strategies.graph_cases``
draws whole cases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st

from asyncjit import Tensor, Var
from asyncjit import dtypes as dt
from asyncjit.graph import graph_vars, toposort
from asyncjit.symbolic import DataVar, Dim

__all__ = ["VALUE_PROFILES", "DimChoice", "GraphCase", "input_values"]

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
