"""Bounded symbolic integers: Var validation, canonical forms, bounds, evaluate, substitute, render."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import bindings_for, build_expr, expr_trees, python_eval, var_sets

from asyncjit.errors import VarBoundsError
from asyncjit.symbolic import (
    Expr,
    FloorDiv,
    Max,
    Min,
    Mod,
    Prod,
    Sum,
    Var,
    as_dim,
    bounds,
    check_bindings,
    compile_dims,
    evaluate,
    free_vars,
    is_dim,
    prod,
    render,
    smax,
    smin,
    substitute,
    upper,
)

PROPS = settings(max_examples=120, deadline=None)

t = Var("t", 1, 10)
s = Var("s", 2, 6)


def _all_bindings(*vs: Var) -> list[dict[str, int]]:
    return [
        dict(zip((v.name for v in vs), vals, strict=True))
        for vals in itertools.product(*(range(v.min, v.max + 1) for v in vs))
    ]


class TestVar:
    def test_fields_and_repr(self) -> None:
        """A Var keeps its name and bounds and shows them."""
        v = Var("frames", 1, 64)
        assert (v.name, v.min, v.max) == ("frames", 1, 64)
        assert repr(v) == "Var('frames', 1, 64)"
        assert str(v) == "frames"

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("t", 0, 3), r"Var 't' needs 1 <= min <= max, got min=0 max=3"),
            (("t", 4, 3), r"Var 't' needs 1 <= min <= max, got min=4 max=3"),
            (("t", -2, -1), r"needs 1 <= min <= max"),
            (("t", 1.0, 3), r"Var 't': min must be an int, got 1.0"),
            (("t", 1, 3.5), r"Var 't': max must be an int, got 3.5"),
            (("t", True, 3), r"Var 't': min must be an int, got True"),
            (("t", 1, np.int64(3)), r"Var 't': max must be an int"),
            (("2t", 1, 3), r"Var name must be an identifier, got '2t'"),
            (("", 1, 3), r"Var name must be an identifier"),
        ],
    )
    def test_validation(self, args: tuple[object, object, object], message: str) -> None:
        """Bad names, non-int bounds and bounds outside 1 <= min <= max raise ValueError."""
        with pytest.raises(ValueError, match=message):
            Var(*args)  # type: ignore[arg-type]

    def test_equal_by_value_and_hashable(self) -> None:
        """Two Vars with equal fields are equal and hash alike; bounds are part of identity."""
        assert Var("t", 1, 10) == t
        assert hash(Var("t", 1, 10)) == hash(t)
        assert Var("t", 1, 11) != t
        assert {t: "x"}[Var("t", 1, 10)] == "x"

    def test_no_truth_value_or_index(self) -> None:
        """A symbolic dim cannot be branched on or used as a Python index."""
        with pytest.raises(TypeError, match=r"the truth value of symbolic dim t is unknown at trace time"):
            bool(t)
        with pytest.raises(
            TypeError, match=r"symbolic dim t \+ 1 has no concrete value; bind its vars first"
        ):
            range(t + 1)  # type: ignore[call-overload]


class TestCanonicalForms:
    @pytest.mark.parametrize(
        ("built", "expected"),
        [
            (t // 2 * 2 + t % 2, t),
            ((4 * t + 2) // 2, 2 * t + 1),
            ((t // 2) // 3, t // 6),
            ((t % 6) % 3, t % 3),
            (2 * t % 2, 0),
            ((2 * t + 1) % 2, 1),
            ((t * 2) // 2, t),
            (t - t, 0),
            (t + 0, t),
            (t * 1, t),
            (t // 1, t),
            (t % 1, 0),
            (t + s - t, s),
            (3 * (t + 1) - 3, 3 * t),
            ((t + 1) * (t + 1), t * t + 2 * t + 1),
            (s * t, t * s),
            ((t + 12) // 4, t // 4 + 3),
            ((t + 1) // 2 * 2 + (t + 1) % 2, t + 1),
            (smin(t, t + 1), t),
            (smax(t, t + 1), t + 1),
            (smin(t, 20), t),
            (smax(t, 0), t),
            (smin(t, s, t), smin(s, t)),
            (smin(smin(t, 5), 3), smin(t, 3)),
            (smax(t, 5, 7), smax(t, 7)),
            (smin(t, t // 2), t // 2),
            (t % 11, t),
            (t // 11, 0),
            ((t - 1) // 10, 0),
            (0 - (0 - t), t),
        ],
    )
    def test_equalities(self, built: object, expected: object) -> None:
        """Provably equal expressions build to the same canonical value."""
        assert built == expected
        assert hash(built) == hash(expected)

    def test_constants_are_ints(self) -> None:
        """An expression that simplifies to a constant is a plain int, not an Expr."""
        for e in (t - t, 2 * t % 2, t // 11, smin(3, 5), prod([2, 3])):
            assert type(e) is int

    def test_readable_forms(self) -> None:
        """Canonical forms stay readable: ``(t + 3)//4`` is kept as written."""
        assert render((t + 3) // 4) == "(t + 3)//4"
        assert repr((t + 3) // 4) == "FloorDiv((t + 3)//4)"
        assert render(2 * t - 1) == "2*t - 1"
        assert render(1 - t) == "-t + 1"
        assert render(-(t // 2)) == "-(t//2)"
        assert render(t * s + 1) == "s*t + 1"
        assert render(smin(t, 5)) == "min(t, 5)"
        assert render(smax(t, s)) == "max(s, t)"
        assert render(2 * (t % 3)) == "2*(t%3)"

    def test_node_kinds(self) -> None:
        """Each operator produces the documented node kind."""
        assert isinstance(t + 1, Sum)
        assert isinstance(t * s, Prod)
        assert isinstance(t // 2, FloorDiv)
        assert isinstance(t % 3, Mod)
        assert isinstance(smin(t, s), Min)
        assert isinstance(smax(t, s), Max)

    def test_division_by_non_positive_or_symbolic(self) -> None:
        """Dividing by zero, a negative int or a symbolic dim is rejected."""
        with pytest.raises(ZeroDivisionError, match=r"// by 0: divisor must be a positive int"):
            t // 0
        with pytest.raises(ZeroDivisionError, match=r"% by -2: divisor must be a positive int"):
            t % -2
        with pytest.raises(
            TypeError, match=r"symbolic divisor in // is not supported \(got s\); divide by an int"
        ):
            t // s
        with pytest.raises(TypeError, match=r"symbolic divisor in % is not supported"):
            7 % t

    def test_bad_operands(self) -> None:
        """Only ints and Exprs combine with Exprs."""
        with pytest.raises(TypeError, match=r"expected an int or symbolic dim, got float 1.5"):
            t + 1.5  # type: ignore[operator]
        with pytest.raises(TypeError, match=r"expected an int or symbolic dim, got bool True"):
            t * True
        with pytest.raises(ValueError, match=r"smin needs at least one argument"):
            smin()
        with pytest.raises(ValueError, match=r"smax needs at least one argument"):
            smax()

    def test_comparisons_are_not_defined(self) -> None:
        """Ordering symbolic dims raises instead of guessing."""
        with pytest.raises(TypeError):
            t < 3  # type: ignore[operator]  # noqa: B015


class TestHelpers:
    def test_is_dim_and_as_dim(self) -> None:
        """Ints (also numpy ints) and Exprs are dims; bools and floats are not."""
        assert is_dim(3) and is_dim(t) and not is_dim(True) and not is_dim(2.0)
        assert as_dim(np.int64(4)) == 4 and type(as_dim(np.int64(4))) is int
        assert as_dim(t) is t
        with pytest.raises(TypeError, match=r"expected an int or symbolic dim, got str 'x'"):
            as_dim("x")

    def test_free_vars(self) -> None:
        """free_vars collects every Var of a dim or a shape."""
        assert free_vars(3) == frozenset()
        assert free_vars(smin(t, s // 2) + 1) == {t, s}
        assert free_vars((2, t, s * t)) == {t, s}

    def test_prod_and_upper(self) -> None:
        """prod multiplies a shape (1 when empty); upper is the bound buffers are sized for."""
        assert prod([]) == 1
        assert prod([2, t, 3]) == 6 * t
        assert upper(2 * t + 1) == 21
        assert upper(smin(t, 4)) == 4

    def test_compile_dims(self) -> None:
        """compile_dims returns a fast function over var values in the listed order."""
        fn = compile_dims([t, 3, (t + 3) // 4, smin(t, s) * 2], [s, t])
        assert fn([5, 7]) == (7, 3, 2, 10)
        assert compile_dims([t], [t])([4]) == (4,)
        assert compile_dims([], [])([]) == ()

    def test_compile_dims_missing_var(self) -> None:
        """Dims that use a var not listed are rejected."""
        with pytest.raises(ValueError, match=r"dims use vars not listed: \['s'\]"):
            compile_dims([t + s], [t])


class TestBindings:
    def test_evaluate_unbound(self) -> None:
        """Evaluating a dim with a var missing from the bindings raises VarBoundsError."""
        with pytest.raises(VarBoundsError, match=r"var 't' is not bound \(bound: \['s'\]\)"):
            evaluate(t + 1, {"s": 3})

    @pytest.mark.parametrize(
        ("bindings", "message"),
        [
            ({"t": 0}, r"var 't' = 0 is out of its bounds \[1, 10\]"),
            ({"t": 11}, r"var 't' = 11 is out of its bounds \[1, 10\]"),
            ({}, r"var 't' \(bounds \[1, 10\]\) is not bound"),
            ({"t": 2.0}, r"var 't' must be bound to an int, got float 2.0"),
            ({"t": "3"}, r"var 't' must be bound to an int, got str '3'"),
            ({"t": True}, r"var 't' must be bound to an int, got bool True"),
        ],
    )
    def test_check_bindings_errors(self, bindings: dict[str, object], message: str) -> None:
        """check_bindings names the var, its bounds and the bad value."""
        with pytest.raises(VarBoundsError, match=message):
            check_bindings([t], bindings)  # type: ignore[arg-type]

    def test_check_bindings_accepts_bounds_and_numpy_ints(self) -> None:
        """Both bounds are inclusive; numpy integers are accepted."""
        check_bindings([t], {"t": 1})
        check_bindings([t], {"t": 10})
        check_bindings([t], {"t": np.int32(5)})  # type: ignore[dict-item]

    def test_substitute(self) -> None:
        """substitute replaces vars by Var or by name and re-simplifies."""
        assert substitute(t // 2 * 2 + 1, {t: 7}) == 7
        assert substitute(smin(t, s), {"s": 20}) == t
        u = Var("u", 1, 4)
        assert substitute(2 * t + 1, {t: u + 1}) == 2 * u + 3
        assert substitute(5, {t: 3}) == 5


class TestBoundsExamples:
    @pytest.mark.parametrize(
        ("e", "expected"),
        [
            (t, (1, 10)),
            (2 * t - 3 * s + 1, (2 - 18 + 1, 20 - 6 + 1)),
            (t % 4, (0, 3)),
            ((t + 3) // 4, (1, 3)),
            (smin(t, 5), (1, 5)),
            (smax(t, s), (2, 10)),
            (t - smin(t, 5), (0, 5)),
            (t - (t + 1) // 2, (0, 5)),
            ((t - 1) * s, (0, 54)),
            ((s % 3) * t - (s % 3), (0, 18)),  # an atom that is not a var factored out too
            ((s % 3) * (10 - t), (0, 18)),
            ((t // 2) * s - (t // 2), (0, 25)),
            (smin(t, 4) * (s - 2), (0, 16)),
            ((s - 2) * (t - 1), (0, 36)),  # bilinear, expanded: exact from its corners
            ((6 - s) * (10 - t) - 2 * s, (-12, 32)),
        ],
    )
    def test_exact_or_tight(self, e: object, expected: tuple[int, int]) -> None:
        """Affine bounds are exact; min/max, floor-division and products keep their correlations."""
        assert bounds(e) == expected  # type: ignore[arg-type]

    def test_bounds_of_non_dim(self) -> None:
        """bounds of something that is not a dim is a TypeError."""
        with pytest.raises(TypeError, match=r"not a symbolic dim"):
            bounds("t")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# properties over random expressions


@st.composite
def _cases(draw: st.DrawFn) -> tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]:
    variables = draw(var_sets())
    tree = draw(expr_trees(variables))
    return variables, tree, draw(bindings_for(variables))


class TestProperties:
    @PROPS
    @given(_cases())
    def test_evaluate_matches_python(
        self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]
    ) -> None:
        """The simplified expression evaluates to what the raw tree computes with Python ints."""
        _, tree, b = case
        assert evaluate(build_expr(tree), b) == python_eval(tree, b)

    @PROPS
    @given(_cases())
    def test_bounds_contain_value(
        self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]
    ) -> None:
        """bounds() contains every value the expression takes within the var bounds."""
        _, tree, b = case
        e = build_expr(tree)
        lo, hi = bounds(e)
        assert lo <= python_eval(tree, b) <= hi

    @PROPS
    @given(_cases())
    def test_render_is_python(self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]) -> None:
        """render() is valid Python that evaluates to the same value."""
        _, tree, b = case
        e = build_expr(tree)
        assert eval(render(e), {"min": min, "max": max}, dict(b)) == python_eval(tree, b)

    @PROPS
    @given(_cases())
    def test_compile_dims_agrees(
        self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]
    ) -> None:
        """compile_dims computes the same values as evaluate."""
        variables, tree, b = case
        e = build_expr(tree)
        fn = compile_dims([e, 1], variables)
        assert fn([b[v.name] for v in variables]) == (evaluate(e, b), 1)

    @PROPS
    @given(_cases())
    def test_substitute_agrees(
        self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]
    ) -> None:
        """Substituting ints gives the evaluated int; renaming vars keeps every value."""
        variables, tree, b = case
        e = build_expr(tree)
        assert substitute(e, {v: b[v.name] for v in variables}) == python_eval(tree, b)
        twins = {v: Var(v.name + "2", v.min, v.max) for v in variables}
        renamed = substitute(e, twins)
        assert evaluate(renamed, {w.name: b[v.name] for v, w in twins.items()}) == python_eval(tree, b)
        partial = substitute(e, {variables[0]: b[variables[0].name]})
        assert evaluate(partial, b) == python_eval(tree, b)

    @PROPS
    @given(_cases())
    def test_algebraic_identities(
        self, case: tuple[tuple[Var, ...], tuple[object, ...], dict[str, int]]
    ) -> None:
        """x - x == 0, x + 0 == x, x*1 == x and x//1 == x hold canonically; results are hashable."""
        _, tree, _b = case
        e = build_expr(tree)
        assert e - e == 0
        assert e + 0 == e and e * 1 == e and e // 1 == e
        assert e % 1 == 0
        assert smin(e, e) == e and smax(e, e) == e
        hash(e)

    @PROPS
    @given(st.data())
    def test_ring_laws(self, data: st.DataObject) -> None:
        """+ and * commute and associate, and * distributes over +: canonically for polynomials,
        in value once floor division, modulo, min or max appear (their recombination rules see
        different terms depending on how a product was distributed)."""
        variables = data.draw(var_sets())
        a, b, c = (build_expr(data.draw(expr_trees(variables, max_leaves=4))) for _ in range(3))
        binding = data.draw(bindings_for(variables))
        polynomial = not any(_has_nonpolynomial(x) for x in (a, b, c))
        for left, right in [
            (a + b, b + a),
            (a * b, b * a),
            ((a + b) + c, a + (b + c)),
            ((a * b) * c, a * (b * c)),
            (a * (b + c), a * b + a * c),
        ]:
            assert evaluate(left, binding) == evaluate(right, binding)
            if polynomial:
                assert left == right

    @PROPS
    @given(st.data())
    def test_floor_mod_identity(self, data: st.DataObject) -> None:
        """``k*(e//k) + e%k`` equals ``e`` in value, and canonically when neither side folded."""
        variables = data.draw(var_sets())
        e = build_expr(data.draw(expr_trees(variables, max_leaves=5)))
        k = data.draw(st.integers(1, 7))
        b = data.draw(bindings_for(variables))
        rebuilt = k * (e // k) + e % k
        assert evaluate(rebuilt, b) == evaluate(e, b)
        if isinstance(e // k, FloorDiv) and isinstance(e % k, Mod):
            # canonical unless bounds already folded one side (e.g. (-a)//2 == -1 for a in [1, 2])
            assert rebuilt == e

    @PROPS
    @given(st.data())
    def test_affine_bounds_are_exact(self, data: st.DataObject) -> None:
        """For affine expressions over distinct vars, both bounds are attained."""
        variables = data.draw(var_sets())
        coeffs = [data.draw(st.integers(-5, 5)) for _ in variables]
        const = data.draw(st.integers(-10, 10))
        e = const + sum((c * v for c, v in zip(coeffs, variables, strict=True)), start=0)
        values = [
            const + sum(c * x for c, x in zip(coeffs, xs, strict=True))
            for xs in itertools.product(*((v.min, v.max) for v in variables))
        ]
        assert bounds(e) == (min(values), max(values))


def test_bounds_tight_on_small_domains() -> None:
    """Over a full small domain, the shape-style expressions' bounds hold and are attained."""
    exprs: list[Expr | int] = [t - smin(t, 5), (t + 3) // 4, t % 3, smax(t - 3, 0), 2 * t - t // 2]
    for e in exprs:
        values = [evaluate(e, b) for b in _all_bindings(t)]
        assert bounds(e) == (min(values), max(values)), render(e)


def _has_nonpolynomial(e: object) -> bool:
    """Whether ``e`` contains a floor division, modulo, min or max atom."""
    if isinstance(e, FloorDiv | Mod | Min | Max):
        return True
    if isinstance(e, Sum):
        return any(_has_nonpolynomial(atom) for atom, _ in e.terms)
    if isinstance(e, Prod):
        return any(_has_nonpolynomial(f) for f in e.factors)
    return False


@pytest.mark.parametrize("lo,hi", [(1, 1), (1, 6), (3, 40), (1, 10**6)])
def test_bounds_of_a_polynomial_in_one_var_are_exact(lo: int, hi: int) -> None:
    """``(s-1)**2``, a cubic and a downward parabola: the squares the corner rule cannot take
    are bounded exactly (``(s-1)**2`` rows are then provably >= 0, so slicing them is accepted)."""
    s = Var("s", lo, hi)
    for expr, f in [
        (s * s - 2 * s + 1, lambda v: (v - 1) ** 2),
        (s * s * s - 6 * s * s + 9 * s + 2, lambda v: v**3 - 6 * v * v + 9 * v + 2),
        (3 - s * s + 4 * s, lambda v: 3 - v * v + 4 * v),
    ]:
        values = [f(v) for v in range(lo, min(hi, 2000) + 1)]
        if hi <= 2000:
            assert bounds(expr) == (min(values), max(values))
        else:
            blo, bhi = bounds(expr)
            assert blo <= min(values) and bhi >= f(hi)


def test_bounds_of_squares_over_several_vars_are_exact() -> None:
    """A square times other vars (``s*(s-1)*(t-3)**2 + 1``, once drawn by the fuzz; expanded it is
    neither multilinear nor in one var) gets exact bounds by evaluating every binding of a small
    box; over a box too large for that, the bounds stay safe."""
    s, t, u = Var("s", 1, 8), Var("t", 1, 9), Var("u", 1, 4)
    cases = [
        (s * (s - 1) * (t - 3) * (t - 3) + 1, lambda a, b, c: a * (a - 1) * (b - 3) ** 2 + 1),
        ((t - 5) * (t - 5) * u - s, lambda a, b, c: (b - 5) ** 2 * c - a),
        ((s - 4) * (s - 4) * (t // 2) + u % 2, lambda a, b, c: (a - 4) ** 2 * (b // 2) + c % 2),
    ]
    for expr, f in cases:
        values = [f(a, b, c) for a in range(1, 9) for b in range(1, 10) for c in range(1, 5)]
        assert bounds(expr) == (min(values), max(values)), render(expr)
    big_s, big_t = Var("s", 1, 5000), Var("t", 1, 5000)
    blo, bhi = bounds(big_s * (big_s - 1) * (big_t - 3) * (big_t - 3) + 1)
    assert blo <= 1 and bhi >= 5000 * 4999 * 4997**2 + 1


def test_a_squared_dim_slices_and_indexes() -> None:
    """``(s-1)*(s-1)`` rows from a reshape (expanded to ``s*s - 2*s + 1``): a full slice of that
    axis, an index along the next and ``[:3]`` are accepted (they raised "not provably within")."""
    from asyncjit import Tensor

    s = Var("s", 1, 6)
    y = Tensor.placeholder((s - 1, s - 1), name="x").reshape((s - 1) * (s - 1), 1)
    i = Tensor.placeholder((2,), np.int32, name="i")
    assert y[:, i].shape == (s * s - 2 * s + 1, 2)
    assert y[:3].shape[1] == 1
