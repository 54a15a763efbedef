"""Bounds of symbolic dims: ``bounds``, ``upper``, ``is_bounded``, ``is_planned`` (re-exported by
``symbolic``).

Exact for affine expressions over distinct vars; safe (containing every value, possibly loose)
otherwise, which is what buffer sizes and the bounds checks of generated code need.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable

import numpy as np

from .errors import ArgumentTypeError
from .symbolic import (
    Dim,
    Expr,
    FloorDiv,
    Index,
    Max,
    Min,
    Mod,
    Prod,
    Sum,
    Var,
    _add,
    _from_linear,
    _key,
    _mul,
    free_vars,
)

__all__ = ["MAX_PLANNED_ELEMENTS", "bounds", "is_bounded", "is_planned", "upper"]


def bounds(e: Dim) -> tuple[int, int]:
    """Inclusive ``(lo, hi)`` of ``e`` over every binding of its vars within their bounds.

    Exact for affine expressions over distinct vars; safe (containing every value) otherwise.
    """
    if isinstance(e, int):
        return e, e
    if isinstance(e, Var):
        return e.min, e.max
    if isinstance(e, Index):
        return 0, max(bounds(e.extent)[1] - 1, 0)
    if isinstance(e, Sum):
        lo = hi = e.const
        for atom, coeff in e.terms:
            alo, ahi = bounds(atom)
            if coeff >= 0:
                lo, hi = lo + coeff * alo, hi + coeff * ahi
            else:
                lo, hi = lo + coeff * ahi, hi + coeff * alo
        refiners = (
            _split_minmax,
            _split_floordiv,
            _split_factor,
            _split_multilinear,
            _split_polynomial,
            _split_enumerate,
        )
        for refined in (f(e) for f in refiners):
            if refined is not None:  # each is safe on its own, so their intersection is too
                lo, hi = max(lo, refined[0]), min(hi, refined[1])
        return lo, hi
    if isinstance(e, Prod):
        lo, hi = 1, 1
        for f in e.factors:
            flo, fhi = bounds(f)
            corners = (lo * flo, lo * fhi, hi * flo, hi * fhi)
            lo, hi = min(corners), max(corners)
        return lo, hi
    if isinstance(e, FloorDiv):
        nlo, nhi = bounds(e.num)
        return nlo // e.den, nhi // e.den
    if isinstance(e, Mod):
        nlo, nhi = bounds(e.num)
        if nlo // e.den == nhi // e.den:
            return nlo % e.den, nhi % e.den
        return 0, e.den - 1
    if isinstance(e, Min | Max):
        bs = [bounds(a) for a in e.args]
        pick = min if isinstance(e, Min) else max
        return pick(b[0] for b in bs), pick(b[1] for b in bs)
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def _split_minmax(e: Sum) -> tuple[int, int] | None:
    """Bounds of ``rest + k*min(a, b, ...)`` as the min/max over ``rest + k*a``, ``rest + k*b``, ...

    Distributing keeps shared vars together, so ``t - min(t, 5)`` gets ``(0, t.max - 5)`` instead
    of the loose interval sum; this is what proves ``x[:5]`` stays within a symbolic axis. Each
    min/max term gives safe bounds; with a few such terms, all are tried and intersected.
    """
    found = [i for i, (atom, _) in enumerate(e.terms) if isinstance(atom, Min | Max)]
    if not found:
        return None
    lo, hi = -math.inf, math.inf
    for i in found if len(found) <= 3 else found[:1]:
        atom, coeff = e.terms[i]
        assert isinstance(atom, Min | Max)
        rest = _from_linear(dict(e.terms[:i] + e.terms[i + 1 :]), e.const)
        parts = [bounds(_add(rest, _mul(arg, coeff))) for arg in atom.args]
        # k*min(...) is the min of the k*arg when k > 0 and their max when k < 0 (and vice versa).
        pick = min if isinstance(atom, Min) == (coeff > 0) else max
        lo, hi = max(lo, pick(p[0] for p in parts)), min(hi, pick(p[1] for p in parts))
    return int(lo), int(hi)


def _split_floordiv(e: Sum) -> tuple[int, int] | None:
    """Bounds of ``rest + k*(n//d)`` when ``n`` shares vars with ``rest``, through
    ``d*(rest + k*(n//d)) == d*rest + k*n - k*(n%d)`` with ``n%d`` in ``[0, d)``.

    Keeps the correlation that interval sums lose: ``t - (t + 1)//2`` gets ``lo >= 0``.
    """
    for i, (atom, k) in enumerate(e.terms):
        if not isinstance(atom, FloorDiv):
            continue
        others = dict(e.terms[:i] + e.terms[i + 1 :])
        if not free_vars(atom.num) & free_vars(others):
            continue
        d = atom.den
        scaled = _from_linear({a: c * d for a, c in others.items()}, e.const * d)
        llo, lhi = bounds(_add(scaled, _mul(atom.num, k)))
        mlo, mhi = (0, k * (d - 1)) if k > 0 else (k * (d - 1), 0)  # the range of k*(n%d)
        return -((mhi - llo) // d), (lhi - mlo) // d  # ceil and floor of the divided range
    return None


def _split_factor(e: Sum) -> tuple[int, int] | None:
    """Bounds of ``v*A + B`` for an atom ``v`` that is a factor of several terms: products are
    expanded canonically, so ``(t - 1)*s`` is ``s*t - s`` and needs refactoring to stay >= 0.
    ``v`` may be any atom (a var, ``s%3``, ``t//2``, a min/max): ``v*A`` lies within the corner
    products of their bounds whatever the correlation, so ``(s%3)*t - (s%3)`` is >= 0 too."""
    if not any(isinstance(atom, Prod) for atom, _ in e.terms):
        return None
    counts: dict[Expr, int] = {}
    for atom, _ in e.terms:
        for f in set(atom.factors if isinstance(atom, Prod) else (atom,)):
            counts[f] = counts.get(f, 0) + 1
    lo, hi = -math.inf, math.inf
    for v, n in sorted(counts.items(), key=lambda kv: _key(kv[0])):
        if n < 2:
            continue
        inner: dict[Expr, int] = {}
        outer: dict[Expr, int] = {}
        inner_const = 0
        for atom, coeff in e.terms:
            factors = list(atom.factors) if isinstance(atom, Prod) else [atom]
            if v not in factors:
                outer[atom] = coeff
                continue
            factors.remove(v)
            if not factors:
                inner_const += coeff
            else:
                rest_atom = factors[0] if len(factors) == 1 else Prod(tuple(factors))
                inner[rest_atom] = inner.get(rest_atom, 0) + coeff
        alo, ahi = bounds(_from_linear(inner, inner_const))
        vlo, vhi = bounds(v)
        corners = (vlo * alo, vlo * ahi, vhi * alo, vhi * ahi)
        blo, bhi = bounds(_from_linear(outer, e.const))
        lo, hi = max(lo, min(corners) + blo), min(hi, max(corners) + bhi)
    return None if lo == -math.inf else (int(lo), int(hi))


def is_bounded(e: Dim | Iterable[Dim]) -> bool:
    """Whether every var ``e`` uses has a declared maximum (so ``upper(e)`` sizes a buffer)."""
    return not any(v.unbounded for v in free_vars(e))


MAX_PLANNED_ELEMENTS = 1 << 48
"""Most elements a buffer is sized for ahead of a run (1 PiB of float32, beyond x86-64's 128 TiB
of user address space: such a plan fails to load with an ``OutOfMemoryError``): a shape whose
upper bounds multiply to more is sized per run from the var values given, like one over an
unbounded var. Byte counts of such shapes, taken in 64-bit integers, wrapped: two vars bounded
by 2^31 and 2^33 planned a 128-byte arena that a 64x64 run wrote past."""


def is_planned(shape: Iterable[Dim]) -> bool:
    """Whether a buffer of ``shape`` is sized once, for the upper bounds of its vars: every var
    bounded and at most ``MAX_PLANNED_ELEMENTS`` elements there (exact integers)."""
    dims = list(shape)
    return is_bounded(dims) and math.prod(max(upper(d), 0) for d in dims) <= MAX_PLANNED_ELEMENTS


_MULTILINEAR_MAX_ATOMS = 6


def _split_multilinear(e: Sum) -> tuple[int, int] | None:
    """Bounds of a sum of products in which no atom is squared, by its values at the corners.

    Such a form is linear in each atom separately, so over a box of independent atoms its
    extremes are at corners: exact for vars (``s*t - 3*s - t + 3``, which is ``(s-3)*(t-1)``,
    gets ``lo = 0``) and safe for other atoms (``s%3`` taken as any value in its bounds). Up to
    ``_MULTILINEAR_MAX_ATOMS`` atoms (64 corners)."""
    if not any(isinstance(atom, Prod) for atom, _ in e.terms):
        return None
    leaves: dict[Expr, tuple[int, int]] = {}
    terms: list[tuple[tuple[Expr, ...], int]] = []
    for atom, coeff in e.terms:
        factors = atom.factors if isinstance(atom, Prod) else (atom,)
        if len(set(factors)) != len(factors):
            return None  # a square: not linear in that atom
        for f in factors:
            if f not in leaves:
                leaves[f] = bounds(f)
        terms.append((factors, coeff))
    if len(leaves) > _MULTILINEAR_MAX_ATOMS:
        return None
    order = list(leaves)
    values = []
    for corner in itertools.product(*(leaves[a] for a in order)):
        at = dict(zip(order, corner, strict=True))
        values.append(e.const + sum(c * math.prod(at[f] for f in fs) for fs, c in terms))
    return min(values), max(values)


def _split_polynomial(e: Sum) -> tuple[int, int] | None:
    """Exact bounds of a polynomial of degree 2 or 3 in one var (``s*s - 2*s + 1``, a square,
    which the multilinear corners cannot take): over the integers in the var's bounds its
    extremes are at the ends or next to a root of its derivative."""
    var: Var | None = None
    coeffs = [e.const, 0, 0, 0]
    for atom, c in e.terms:
        factors = atom.factors if isinstance(atom, Prod) else (atom,)
        v = factors[0]
        if not isinstance(v, Var) or any(f != v for f in factors) or len(factors) > 3 or var not in (None, v):
            return None
        var = v
        coeffs[len(factors)] += c
    if var is None or not (coeffs[2] or coeffs[3]):
        return None
    lo, hi = var.min, var.max
    c0, c1, c2, c3 = coeffs
    # p'(s) = 3*c3*s^2 + 2*c2*s + c1
    a, b, c = 3 * c3, 2 * c2, c1
    roots: list[float] = []
    if a == 0:
        roots = [-c / b] if b else []
    else:
        disc = b * b - 4 * a * c
        if disc >= 0:
            r = math.sqrt(disc)
            roots = [(-b - r) / (2 * a), (-b + r) / (2 * a)]
    points = {lo, hi}
    for root in roots:
        for p in (math.floor(root), math.ceil(root)):
            if lo <= p <= hi:
                points.add(p)
    values = [((c3 * p + c2) * p + c1) * p + c0 for p in points]
    return min(values), max(values)


_ENUMERATE_MAX_POINTS = 1 << 16


def _split_enumerate(e: Sum) -> tuple[int, int] | None:
    """Exact bounds of a sum with a squared factor over several vars (``s*(s-1)*(t-3)**2 + 1``,
    expanded: neither the corners nor the one-var rule apply, and the interval sum is loose
    enough to refuse valid slices) by evaluating it at every binding, when the vars' box holds
    at most ``_ENUMERATE_MAX_POINTS`` points."""
    if not any(isinstance(a, Prod) and len(set(a.factors)) != len(a.factors) for a, _ in e.terms):
        return None
    return _enumerated(e)


@functools.lru_cache(maxsize=1024)
def _enumerated(e: Sum) -> tuple[int, int] | None:
    vs = sorted(free_vars(e), key=lambda v: v.name)
    if not vs or any(v.unbounded for v in vs):
        return None
    if math.prod(v.max - v.min + 1 for v in vs) > _ENUMERATE_MAX_POINTS:
        return None
    magnitude = abs(e.const)  # every partial sum and product stays within int64
    for atom, c in e.terms:
        factors = atom.factors if isinstance(atom, Prod) else (atom,)
        magnitude += abs(c) * math.prod(max(abs(x) for x in bounds(f)) for f in factors)
    if magnitude >= 1 << 62:
        return None
    # each var along its own axis; numpy broadcasts the expression over the whole box
    grid = {
        v: np.arange(v.min, v.max + 1, dtype=np.int64).reshape([-1 if i == j else 1 for j in range(len(vs))])
        for i, v in enumerate(vs)
    }
    try:
        values = np.broadcast_to(_np_value(e, grid), [v.max - v.min + 1 for v in vs])
    except _NotEnumerable:
        return None
    return int(values.min()), int(values.max())


class _NotEnumerable(Exception):
    pass


def _np_value(e: Dim, grid: dict[Var, np.ndarray]) -> np.ndarray | int:
    """``e`` over the box (``symbolic.evaluate``'s semantics: floor division and a modulus with
    the divisor's sign, as numpy's integer ``//`` and ``%`` have)."""
    if isinstance(e, int):
        return e
    if isinstance(e, Var):
        return grid[e]
    if isinstance(e, Sum):
        out: np.ndarray | int = e.const
        for atom, c in e.terms:
            out = out + c * _np_value(atom, grid)
        return out
    if isinstance(e, Prod):
        acc: np.ndarray | int = 1
        for f in e.factors:
            acc = acc * _np_value(f, grid)
        return acc
    if isinstance(e, FloorDiv):
        return _np_value(e.num, grid) // e.den
    if isinstance(e, Mod):
        return _np_value(e.num, grid) % e.den
    if isinstance(e, Min | Max):
        pick = np.minimum if isinstance(e, Min) else np.maximum
        return functools.reduce(pick, (_np_value(a, grid) for a in e.args))
    raise _NotEnumerable(repr(e))  # an Index: a compiler's loop index, not a user var


def upper(e: Dim) -> int:
    """The upper bound of ``e``: what buffers are sized for."""
    return bounds(e)[1]
