"""Bounded symbolic integers: ``Var(name, min, max)`` and expressions over vars and ints.

Shapes in asyncjit are tuples of ``Dim = int | Expr``. An expression is a hashable value object
kept in one canonical form, built by the operators (``+ - * // %``) and ``smin``/``smax``:

* a linear combination ``c0 + c1*a1 + c2*a2 + ...`` (``Sum``) over *atoms*;
* atoms are ``Var``, products of atoms (``Prod``), ``FloorDiv``/``Mod`` by a positive int, and
  ``Min``/``Max``.

Simplification happens at construction, so two expressions that are provably equal by these
rules compare equal: ``t//2*2 + t%2 == t``, ``(4*t + 2)//2 == 2*t + 1``, ``(t + 3)//4`` stays as
written. An expression that simplifies to a constant *is* an ``int``. Division and modulo follow
Python's floor semantics, which the generated native code reproduces.

``bounds(e)`` gives exact ``(lo, hi)`` for affine expressions over distinct vars and safe (possibly
loose) bounds otherwise. ``evaluate(e, bindings)`` computes a value; ``substitute`` replaces vars.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import attrs
import numpy as np

from .errors import ArgumentTypeError, DimDivisionError, InvalidArgumentError, VarBoundsError

__all__ = [
    "DataVar",
    "Dim",
    "Expr",
    "FloorDiv",
    "Index",
    "Max",
    "Min",
    "Mod",
    "Prod",
    "Sum",
    "Var",
    "as_dim",
    "bounds",
    "check_bindings",
    "compile_dims",
    "evaluate",
    "free_vars",
    "from_json",
    "is_bounded",
    "is_planned",
    "is_dim",
    "prod",
    "render",
    "smax",
    "smin",
    "substitute",
    "to_json",
    "MAX_PLANNED_ELEMENTS",
    "UNBOUNDED",
    "upper",
]


class Expr:
    """Base class of symbolic integer expressions; use the operators to build them."""

    __slots__ = ()

    # -- arithmetic (each returns ``int`` when the result simplifies to a constant) --
    # Non-scalar operands (a Tensor) give NotImplemented, so Python tries the other side's
    # reflected operator: ``t * x`` for a Tensor ``x`` is ``x.__rmul__(t)``.
    def __add__(self, other: Dim) -> Dim:
        return _add(self, other) if not _defers(other) else NotImplemented

    def __radd__(self, other: Dim) -> Dim:
        return _add(other, self) if not _defers(other) else NotImplemented

    def __sub__(self, other: Dim) -> Dim:
        return _add(self, _mul(other, -1)) if not _defers(other) else NotImplemented

    def __rsub__(self, other: Dim) -> Dim:
        return _add(other, _mul(self, -1)) if not _defers(other) else NotImplemented

    def __neg__(self) -> Dim:
        return _mul(self, -1)

    def __mul__(self, other: Dim) -> Dim:
        return _mul(self, other) if not _defers(other) else NotImplemented

    def __rmul__(self, other: Dim) -> Dim:
        return _mul(other, self) if not _defers(other) else NotImplemented

    def __floordiv__(self, other: Dim) -> Dim:
        return _floordiv(self, other) if not _defers(other) else NotImplemented

    def __rfloordiv__(self, other: Dim) -> Dim:
        return _floordiv(other, self) if not _defers(other) else NotImplemented

    def __mod__(self, other: Dim) -> Dim:
        return _mod(self, other) if not _defers(other) else NotImplemented

    def __rmod__(self, other: Dim) -> Dim:
        return _mod(other, self) if not _defers(other) else NotImplemented

    def __index__(self) -> int:
        raise ArgumentTypeError(f"symbolic dim {self} has no concrete value; bind its vars first")

    def __bool__(self) -> bool:
        raise ArgumentTypeError(f"the truth value of symbolic dim {self} is unknown at trace time")

    def __str__(self) -> str:
        return render(self)


Dim: TypeAlias = "int | Expr"


UNBOUNDED = 1 << 62
"""The ``max`` of a var declared without one (``Var("n", 1, None)``): larger than any real size,
so interval arithmetic stays plain ints. Memory planning never sizes a buffer from it."""


def _max_or_unbounded(value: object) -> object:
    return UNBOUNDED if value is None else value


@attrs.frozen(repr=False)
class Var(Expr):
    """A named integer known only at execution time, with inclusive bounds ``1 <= min <= max``.

    ``max=None`` declares an *unbounded* var (``Var("n", 1, None)``): one plan serves every size,
    and buffers whose size depends on it are allocated per run (``unbounded``).
    """

    name: str
    min: int
    max: int = attrs.field(converter=_max_or_unbounded)

    @property
    def unbounded(self) -> bool:
        """Declared without a maximum."""
        return self.max >= UNBOUNDED

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise VarBoundsError(f"Var name must be an identifier, got {self.name!r}")
        for label, v in (("min", self.min), ("max", self.max)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise VarBoundsError(f"Var {self.name!r}: {label} must be an int, got {v!r}")
        if not 1 <= self.min <= self.max or self.max > UNBOUNDED:
            raise VarBoundsError(
                f"Var {self.name!r} needs 1 <= min <= max, got min={self.min} max={self.max} "
                "(max=None declares an unbounded var)"
            )

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.min}, {None if self.unbounded else self.max})"

    @property
    def bounds_text(self) -> str:
        """``[min, max]`` for messages (``[1, unbounded]`` without a maximum)."""
        return f"[{self.min}, {'unbounded' if self.unbounded else self.max}]"


@attrs.frozen(repr=False)
class DataVar(Var):
    """A data-dependent dim: a size the plan itself computes (``nonzero()``, ``x[:count]``, a
    boolean mask), with inclusive bounds ``0 <= min <= max``.

    Callers never bind it: the op named ``op`` sets it during a run (checked against ``max``,
    the bound derived from shapes or given), and outputs come back with its actual value.
    """

    op: str = attrs.field(default="", eq=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise VarBoundsError(f"DataVar name must be an identifier, got {self.name!r}")
        for label, v in (("min", self.min), ("max", self.max)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise VarBoundsError(f"DataVar {self.name!r}: {label} must be an int, got {v!r}")
        if not 0 <= self.min <= self.max or self.max >= UNBOUNDED:
            raise VarBoundsError(
                f"data-dependent size {self.name!r} needs 0 <= min <= bound, got min={self.min} "
                f"bound={self.max}"
            )

    def __repr__(self) -> str:
        return f"DataVar({self.name!r}, {self.min}, {self.max})"


@attrs.frozen(repr=False)
class Index(Expr):
    """A loop index ``0 <= name < extent`` used by compilers for index arithmetic (not a user var).

    ``extent`` may be symbolic; the index's bounds are ``(0, upper(extent) - 1)``.
    """

    name: str
    extent: Dim

    def __repr__(self) -> str:
        return f"Index({self.name!r}, {self.extent})"


@attrs.frozen(repr=False)
class Sum(Expr):
    """``const + sum(coeff * atom)``, terms sorted, no zero coefficients."""

    terms: tuple[tuple[Expr, int], ...]
    const: int

    def __repr__(self) -> str:
        return f"Sum({render(self)})"


@attrs.frozen(repr=False)
class Prod(Expr):
    """A product of two or more atoms, sorted (``b*t``)."""

    factors: tuple[Expr, ...]

    def __repr__(self) -> str:
        return f"Prod({render(self)})"


@attrs.frozen(repr=False)
class FloorDiv(Expr):
    """``num // den`` with an int ``den >= 2`` (Python floor semantics)."""

    num: Expr
    den: int

    def __repr__(self) -> str:
        return f"FloorDiv({render(self)})"


@attrs.frozen(repr=False)
class Mod(Expr):
    """``num % den`` with an int ``den >= 2``; the result lies in ``[0, den)``."""

    num: Expr
    den: int

    def __repr__(self) -> str:
        return f"Mod({render(self)})"


@attrs.frozen(repr=False)
class Min(Expr):
    """The minimum of two or more expressions (at most one int among them)."""

    args: tuple[Dim, ...]

    def __repr__(self) -> str:
        return f"Min({render(self)})"


@attrs.frozen(repr=False)
class Max(Expr):
    """The maximum of two or more expressions (at most one int among them)."""

    args: tuple[Dim, ...]

    def __repr__(self) -> str:
        return f"Max({render(self)})"


# ---------------------------------------------------------------------------------------------
# canonical construction


def is_dim(value: object) -> bool:
    """True for an ``int`` (not ``bool``) or an ``Expr``."""
    return isinstance(value, Expr) or (isinstance(value, int) and not isinstance(value, bool))


def _defers(value: object) -> bool:
    """Whether an operator on a dim should leave ``value`` to its own reflected operator: true
    for objects that are not scalars (a Tensor: ``t * x`` is ``x.__rmul__(t)``); ints, floats,
    bools and numpy scalars stay here, where ``as_dim`` accepts or names what is wrong."""
    return value is not None and not isinstance(
        value, Expr | int | float | complex | str | bytes | np.generic
    )


def as_dim(value: object) -> Dim:
    """Accept ints (including numpy integers) and ``Expr``; reject anything else with TypeError."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        raise ArgumentTypeError(f"expected an int or symbolic dim, got bool {value!r}")
    try:
        import operator

        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ArgumentTypeError(
            f"expected an int or symbolic dim, got {type(value).__name__} {value!r}"
        ) from None


def _key(e: Expr) -> str:
    return render(e)


def _linear(x: Dim) -> tuple[dict[Expr, int], int]:
    """Split ``x`` into ({atom: coeff}, const)."""
    if isinstance(x, int):
        return {}, x
    if isinstance(x, Sum):
        return dict(x.terms), x.const
    return {x: 1}, 0


def _from_linear(terms: Mapping[Expr, int], const: int) -> Dim:
    """Build the canonical expression for a linear form, recombining ``c*(n//c) + n%c -> n``."""
    work = {a: c for a, c in terms.items() if c != 0}
    changed = True
    while changed:
        changed = False
        for atom, coeff in list(work.items()):
            if isinstance(atom, Mod) and isinstance(atom.num, FloorDiv):
                # k*c*(n//(d*c)) + k*((n//d)%c) -> k*(n//d): nested floors are flattened, so the
                # plain n//c + n%c rule below cannot see this pair
                inner = atom.num
                outer = FloorDiv(inner.num, inner.den * atom.den)
                if work.get(outer) == coeff * atom.den:
                    del work[atom], work[outer]
                    work[inner] = work.get(inner, 0) + coeff
                    if work[inner] == 0:
                        del work[inner]
                    changed = True
                    break
            if not isinstance(atom, FloorDiv):
                continue
            # k*n - k*c*(n//c) -> k*(n%c): keeps `t - 4*(t//4)` provably in [0, 4). A larger
            # multiple of n's terms also folds (2*t - 2*(t//2) -> t + t%2), so that the result does
            # not depend on the order in which the terms were added.
            num_terms, num_const = _linear(atom.num)
            k, rem = divmod(-coeff, atom.den)
            covered = all(
                (w := work.get(a, 0)) * (k * c) > 0 and abs(w) >= abs(k * c) for a, c in num_terms.items()
            )
            if rem == 0 and k and num_terms and covered:
                for a, c in num_terms.items():
                    work[a] -= k * c
                    if work[a] == 0:
                        del work[a]
                del work[atom]
                const -= k * num_const
                # the canonical n%c (``(-a)%2`` is ``a%2``), so the pair rule below still finds it
                mod_terms, mod_const = _linear(_mul(_mod(atom.num, atom.den), k))
                for a, c in mod_terms.items():
                    work[a] = work.get(a, 0) + c
                    if work[a] == 0:
                        del work[a]
                const += mod_const
                changed = True
                break
            canon = _mod(atom.num, atom.den)  # canonical: (-a)%2 is a%2
            if not isinstance(canon, Mod):
                continue
            mod_coeff = work.get(canon)
            if mod_coeff is None or coeff != mod_coeff * atom.den:
                continue
            del work[atom], work[canon]
            add_terms, add_const = _linear(_mul(atom.num, mod_coeff))
            for a, c in add_terms.items():
                work[a] = work.get(a, 0) + c
                if work[a] == 0:
                    del work[a]
            const += add_const
            changed = True
            break
    if not work:
        return const
    if len(work) == 1 and const == 0:
        ((atom, coeff),) = work.items()
        if coeff == 1:
            return atom
    return Sum(tuple(sorted(work.items(), key=lambda kv: _key(kv[0]))), const)


def _add(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    ta, ca = _linear(a)
    tb, cb = _linear(b)
    for atom, coeff in tb.items():
        ta[atom] = ta.get(atom, 0) + coeff
    return _from_linear(ta, ca + cb)


def _mul_atoms(a: Expr, b: Expr) -> Expr:
    fa = a.factors if isinstance(a, Prod) else (a,)
    fb = b.factors if isinstance(b, Prod) else (b,)
    return Prod(tuple(sorted(fa + fb, key=_key)))


def _mul(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(b, int):
        a, b = b, a
    if isinstance(a, int):
        terms, const = _linear(b)
        return _from_linear({atom: coeff * a for atom, coeff in terms.items()}, const * a)
    # distribute (sum) * (sum)
    ta, ca = _linear(a)
    tb, cb = _linear(b)
    out: dict[Expr, int] = {}
    for atom, coeff in ta.items():
        out[atom] = out.get(atom, 0) + coeff * cb
    for atom, coeff in tb.items():
        out[atom] = out.get(atom, 0) + coeff * ca
    for atom_a, coeff_a in ta.items():
        for atom_b, coeff_b in tb.items():
            p = _mul_atoms(atom_a, atom_b)
            out[p] = out.get(p, 0) + coeff_a * coeff_b
    return _from_linear(out, ca * cb)


def _int_divisor(den: Dim, op: str) -> int:
    if not isinstance(den, int):
        raise ArgumentTypeError(f"symbolic divisor in {op} is not supported (got {den}); divide by an int")
    if den <= 0:
        raise DimDivisionError(f"{op} by {den}: divisor must be a positive int")
    return den


def _floordiv(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    den = _int_divisor(b, "//")
    if isinstance(a, int):
        return a // den
    if den == 1:
        return a
    terms, const = _linear(a)
    g = math.gcd(den, const, *terms.values())
    if g > 1:
        terms = {atom: c // g for atom, c in terms.items()}
        const //= g
        den //= g
        if den == 1:
            return _from_linear(terms, const)
    q_const, r_const = divmod(const, den)
    whole = {atom: c // den for atom, c in terms.items() if c % den == 0}
    rest_terms = {atom: c for atom, c in terms.items() if c % den != 0}
    rest = _from_linear(rest_terms, r_const)
    quotient = _from_linear(whole, q_const)
    if isinstance(rest, int):
        return _add(quotient, rest // den)
    lo, hi = bounds(rest)
    if lo // den == hi // den:
        return _add(quotient, lo // den)
    if isinstance(rest, FloorDiv):
        return _add(quotient, FloorDiv(rest.num, rest.den * den))
    return _add(quotient, FloorDiv(rest, den))


def _mod(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    den = _int_divisor(b, "%")
    if isinstance(a, int):
        return a % den
    if den == 1:
        return 0
    terms, const = _linear(a)
    terms = {atom: c % den for atom, c in terms.items() if c % den}
    const %= den
    g = math.gcd(den, const, *terms.values())
    if g > 1:
        inner = _mod(_from_linear({atom: c // g for atom, c in terms.items()}, const // g), den // g)
        return _mul(inner, g)
    rest = _from_linear(terms, const)
    if isinstance(rest, int):
        return rest % den
    lo, hi = bounds(rest)
    if lo // den == hi // den:
        return _add(rest, -(lo // den) * den)
    if isinstance(rest, Mod) and rest.den % den == 0:
        return _mod(rest.num, den)
    return Mod(rest, den)


def _minmax(args: Iterable[Dim], is_min: bool) -> Dim:
    flat: list[Dim] = []
    cls = Min if is_min else Max
    for a in args:
        a = as_dim(a)
        flat.extend(a.args if isinstance(a, cls) else (a,))
    # drop args dominated by another (provable from bounds or from a shared non-constant part)
    keep: list[Dim] = []
    for i, a in enumerate(flat):
        dominated = False
        for j, b in enumerate(flat):
            if i == j:
                continue
            diff = _add(a, _mul(b, -1))  # a - b
            lo, hi = bounds(diff)
            tie_keeps_a = lo == hi == 0 and j > i
            if is_min and lo >= 0 and not tie_keeps_a:
                dominated = True
            if not is_min and hi <= 0 and not tie_keeps_a:
                dominated = True
            if dominated:
                break
        if not dominated:
            keep.append(a)
    ints = [a for a in keep if isinstance(a, int)]
    exprs = sorted({a for a in keep if isinstance(a, Expr)}, key=_key)
    if ints:
        exprs_or_int: list[Dim] = [*exprs, (min if is_min else max)(ints)]
    else:
        exprs_or_int = list(exprs)
    if len(exprs_or_int) == 1:
        return exprs_or_int[0]
    return cls(tuple(exprs_or_int))


def smin(*args: Dim) -> Dim:
    """Symbolic ``min``; reduces to one argument where bounds decide it."""
    if not args:
        raise InvalidArgumentError("smin needs at least one argument")
    return _minmax(args, True)


def smax(*args: Dim) -> Dim:
    """Symbolic ``max``; reduces to one argument where bounds decide it."""
    if not args:
        raise InvalidArgumentError("smax needs at least one argument")
    return _minmax(args, False)


def prod(dims: Iterable[Dim]) -> Dim:
    """The product of a sequence of dims (1 for an empty one)."""
    out: Dim = 1
    for d in dims:
        out = _mul(out, d)
    return out


# ---------------------------------------------------------------------------------------------
# queries


def free_vars(e: Dim | Iterable[Dim]) -> frozenset[Var]:
    """Every ``Var`` that ``e`` (or any dim of a shape) depends on."""
    if isinstance(e, int):
        return frozenset()
    if not isinstance(e, Expr):
        out: frozenset[Var] = frozenset()
        for d in e:
            out |= free_vars(d)
        return out
    if isinstance(e, Var):
        return frozenset((e,))
    if isinstance(e, Index):
        return free_vars(e.extent)
    if isinstance(e, Sum):
        return free_vars(a for a, _ in e.terms)
    if isinstance(e, Prod):
        return free_vars(e.factors)
    if isinstance(e, FloorDiv | Mod):
        return free_vars(e.num)
    if isinstance(e, Min | Max):
        return free_vars(e.args)
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def evaluate(e: Dim, bindings: Mapping[str, int]) -> int:
    """The value of ``e`` with each var replaced by ``bindings[var.name]``.

    Raises:
        VarBoundsError: if a var that ``e`` uses has no binding. Bounds are checked by
            ``check_bindings``, not here.
    """
    if isinstance(e, int):
        return e
    if isinstance(e, Var | Index):
        try:
            return int(bindings[e.name])
        except KeyError:
            raise VarBoundsError(f"var {e.name!r} is not bound (bound: {sorted(bindings)})") from None
    if isinstance(e, Sum):
        return e.const + sum(c * evaluate(a, bindings) for a, c in e.terms)
    if isinstance(e, Prod):
        return math.prod(evaluate(f, bindings) for f in e.factors)
    if isinstance(e, FloorDiv):
        return evaluate(e.num, bindings) // e.den
    if isinstance(e, Mod):
        return evaluate(e.num, bindings) % e.den
    if isinstance(e, Min):
        return min(evaluate(a, bindings) for a in e.args)
    if isinstance(e, Max):
        return max(evaluate(a, bindings) for a in e.args)
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def substitute(e: Dim, mapping: Mapping[Var | str, Dim]) -> Dim:
    """Replace vars (by ``Var`` or by name) with dims, re-simplifying the result."""
    by_name = {(k.name if isinstance(k, Var) else k): v for k, v in mapping.items()}
    return _subst(e, by_name)


def _subst(e: Dim, m: Mapping[str, Dim]) -> Dim:
    if isinstance(e, int):
        return e
    if isinstance(e, Var):
        return m.get(e.name, e)
    if isinstance(e, Index):
        return m.get(e.name, Index(e.name, _subst(e.extent, m)))
    if isinstance(e, Sum):
        out: Dim = e.const
        for atom, coeff in e.terms:
            out = _add(out, _mul(_subst(atom, m), coeff))
        return out
    if isinstance(e, Prod):
        return prod(_subst(f, m) for f in e.factors)
    if isinstance(e, FloorDiv):
        return _floordiv(_subst(e.num, m), e.den)
    if isinstance(e, Mod):
        return _mod(_subst(e.num, m), e.den)
    if isinstance(e, Min):
        return smin(*(_subst(a, m) for a in e.args))
    if isinstance(e, Max):
        return smax(*(_subst(a, m) for a in e.args))
    raise ArgumentTypeError(f"not a symbolic dim: {e!r}")


def check_bindings(variables: Iterable[Var], bindings: Mapping[str, int]) -> None:
    """Check that every var is bound to an int within its bounds.

    Raises:
        VarBoundsError: naming the var, its bounds and the value given.
    """
    for v in variables:
        if v.name not in bindings:
            raise VarBoundsError(f"var {v.name!r} (bounds {v.bounds_text}) is not bound")
        value = bindings[v.name]
        if not isinstance(value, int) or isinstance(value, bool):
            try:
                if isinstance(value, bool):  # operator.index(True) would give 1
                    raise ArgumentTypeError
                value = operator.index(value)
            except TypeError:
                raise VarBoundsError(
                    f"var {v.name!r} must be bound to an int, got {type(value).__name__} {value!r}"
                ) from None
        if not v.min <= value <= v.max:
            raise VarBoundsError(f"var {v.name!r} = {value} is out of its bounds {v.bounds_text}")


# the bounds and text functions live in their own modules (this one was too long); imported
# last, as they build on everything above, and re-exported here
from ._symbolic_bounds import MAX_PLANNED_ELEMENTS, bounds, is_bounded, is_planned, upper  # noqa: E402
from ._symbolic_text import compile_dims, from_json, render, to_json  # noqa: E402
