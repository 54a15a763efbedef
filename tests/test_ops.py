"""Every registered op, run by the reference interpreter, against direct numpy.

Each op runs at several shapes whose symbolic dims are bound to their minimum (``t = 1``), their
maximum and a value in between, so empty-ish and full-size cases both count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit import dtypes as dt
from asyncjit.graph import graph_vars, make_node, toposort
from asyncjit.symbolic import Dim, evaluate, smin

t = Var("t", 1, 6)
s = Var("s", 2, 4)
BINDINGS = [{"t": 1, "s": 2}, {"t": 6, "s": 4}, {"t": 3, "s": 3}]
BIND_IDS = ["min", "max", "mid"]
SHAPES: list[tuple[Dim, ...]] = [(), (t,), (2, t), (s, t, 3)]
SHAPE_IDS = ["scalar", "t", "2xt", "sxtx3"]

bindings = pytest.mark.parametrize("b", BINDINGS, ids=BIND_IDS)
shapes = pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)


def run(out: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray], b: Mapping[str, int]) -> Any:
    """Evaluate with the bindings the graph actually uses."""
    outs = [out] if isinstance(out, Tensor) else list(out)
    used = {v.name for v in graph_vars(toposort([o.node for o in outs]))}
    result = reference.evaluate(outs, feed, {k: v for k, v in b.items() if k in used})
    return result[0] if isinstance(out, Tensor) else result


def concrete(shape: Sequence[Dim], b: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, b) for d in shape)


def data(shape: Sequence[Dim], b: Mapping[str, int], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    """Reproducible test data: floats in [-3, 3] with exact quarters, small ints, random bools."""
    rng = np.random.default_rng(seed)
    shp = concrete(shape, b)
    npd = np.dtype(dtype)
    if npd.kind == "f":
        return (rng.integers(-12, 13, size=shp) / 4).astype(npd)
    if npd.kind == "b":
        return rng.integers(0, 2, size=shp).astype(bool)
    return rng.integers(-7, 8, size=shp).astype(npd)


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def ph(shape: Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
    return Tensor.placeholder(tuple(shape), dtype)


# ---------------------------------------------------------------------------------------------
# sources


class TestSources:
    @bindings
    def test_const(self, b: dict[str, int]) -> None:
        """const returns its (frozen) array; float64 data becomes float32, Python ints int64."""
        v = np.arange(6, dtype=np.float64).reshape(2, 3)
        close(run(Tensor.const(v), {}, b), v.astype(np.float32))
        assert Tensor.const(3).dtype == dt.int64
        assert Tensor.const(np.int32(3)).dtype == dt.int32
        assert Tensor.const([1.5, 2.5]).shape == (2,)
        assert Tensor.const(np.array(2.0)).shape == ()

    def test_const_copies_and_freezes(self) -> None:
        """Changing the source array later does not change the constant."""
        v = np.zeros(3, np.float32)
        c = Tensor.const(v)
        v[:] = 7
        np.testing.assert_array_equal(run(c, {}, {}), np.zeros(3, np.float32))
        assert not c.node.attrs["value"].flags.writeable

    @bindings
    @pytest.mark.parametrize("dtype", [dt.int32, dt.int64, dt.float32])
    def test_arange(self, b: dict[str, int], dtype: dt.DType) -> None:
        """arange(n) with a symbolic n is [0, n) at the bound value."""
        close(run(Tensor.arange(2 * t - 1, dtype), {}, b), np.arange(2 * b["t"] - 1).astype(dtype.np))

    @bindings
    def test_from_dim(self, b: dict[str, int]) -> None:
        """from_dim gives a 0-d tensor holding the dim's value."""
        close(run(Tensor.from_dim((t + 3) // 2), {}, b), np.array((b["t"] + 3) // 2, np.int32))
        close(run(Tensor.from_dim(s * t, dt.float32), {}, b), np.array(b["s"] * b["t"], np.float32))


# ---------------------------------------------------------------------------------------------
# elementwise

FLOAT_UNARY = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "sin": np.sin,
    "cos": np.cos,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "floor": np.floor,
    "ceil": np.ceil,
}


class TestUnary:
    @bindings
    @shapes
    @pytest.mark.parametrize("name", list(FLOAT_UNARY))
    def test_float(self, b: dict[str, int], shape: tuple[Dim, ...], name: str) -> None:
        """Float unary ops match numpy (log/sqrt of negatives are NaN, 1/0 is inf)."""
        x = ph(shape)
        a = data(shape, b)
        with np.errstate(all="ignore"):
            want = np.asarray(FLOAT_UNARY[name](a.astype(np.float64))).astype(np.float32)
        close(run(getattr(x, name)(), {x: a}, b), want)

    @bindings
    @pytest.mark.parametrize("approximate", ["none", "tanh"])
    def test_gelu(self, b: dict[str, int], approximate: str) -> None:
        """gelu matches the erf form and the tanh approximation."""
        x = ph((2, t))
        a = data((2, t), b).astype(np.float64)
        if approximate == "none":
            want = 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))
        else:
            want = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
        close(run(x.gelu(approximate), {x: a.astype(np.float32)}, b), want.astype(np.float32))

    def test_gelu_bad_mode(self) -> None:
        """An unknown gelu approximation is rejected at the call."""
        with pytest.raises(ValueError, match=r"gelu approximate must be 'none' or 'tanh', got 'fast'"):
            ph((2,)).gelu("fast")

    @bindings
    @shapes
    @pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
    @pytest.mark.parametrize("name", ["neg", "abs", "relu"])
    def test_any(self, b: dict[str, int], shape: tuple[Dim, ...], dtype: Any, name: str) -> None:
        """neg/abs/relu keep the dtype, for floats and ints."""
        x = ph(shape, dtype)
        a = data(shape, b, dtype)
        want = {"neg": -a, "abs": np.abs(a), "relu": np.maximum(a, 0).astype(a.dtype)}[name]
        out = {"neg": -x, "abs": abs(x), "relu": x.relu()}[name]
        close(run(out, {x: a}, b), want)

    def test_int_wraps(self) -> None:
        """Integer neg/abs of the minimum value wrap (two's complement), as in numpy."""
        x = ph((2,), dt.int32)
        a = np.array([np.iinfo(np.int32).min, 5], np.int32)
        np.testing.assert_array_equal(run(-x, {x: a}, {}), np.array([a[0], -5], np.int32))
        np.testing.assert_array_equal(run(abs(x), {x: a}, {}), np.array([a[0], 5], np.int32))

    def test_relu_propagates_nan(self) -> None:
        """relu(NaN) is NaN, as max(x, 0) is in numpy, PyTorch and JAX."""
        x = ph((3,))
        got = run(x.relu(), {x: np.array([np.nan, -1, 2], np.float32)}, {})
        np.testing.assert_array_equal(got, np.array([np.nan, 0, 2], np.float32))

    @bindings
    def test_float16_rounds_once(self, b: dict[str, int]) -> None:
        """float16 ops compute in float32 and round once to float16."""
        x = ph((2, t), dt.float16)
        a = data((2, t), b, np.float16)
        want = np.exp(a.astype(np.float32)).astype(np.float16)
        close(run(x.exp(), {x: a}, b), want, rtol=0)

    @bindings
    def test_not(self, b: dict[str, int]) -> None:
        """~ on a bool tensor is logical not; logical_not casts first."""
        x = ph((2, t), dt.bool_)
        a = data((2, t), b, bool)
        close(run(~x, {x: a}, b), ~a)
        y = ph((2, t), dt.int32)
        ai = data((2, t), b, np.int32)
        close(run(y.logical_not(), {y: ai}, b), ai == 0)

    def test_int_input_to_float_op(self) -> None:
        """Float-only ops on an int tensor cast to float32 first."""
        x = ph((3,), dt.int32)
        out = x.sqrt()
        assert out.dtype == dt.float32
        close(run(out, {x: np.array([1, 4, 9], np.int32)}, {}), np.array([1, 2, 3], np.float32))

    def test_rules(self) -> None:
        """Bool tensors are rejected by arithmetic unary ops; float ops need floats at the op level."""
        with pytest.raises(ValueError, match=r"neg is not defined on bool tensors; cast first"):
            -ph((2,), dt.bool_)
        with pytest.raises(ValueError, match=r"exp needs a float tensor, got int32; cast first"):
            make_node("exp", (ph((2,), dt.int32).node,))
        with pytest.raises(ValueError, match=r"~ needs a bool tensor, got float32"):
            ~ph((2,))


FLOAT_BINARY = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
    "div": (lambda x, y: x / y, np.true_divide),
    "pow": (lambda x, y: x**y, np.power),
    "maximum": (lambda x, y: x.maximum(y), np.maximum),
    "minimum": (lambda x, y: x.minimum(y), np.minimum),
}
COMPARE = {
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x == y, np.equal),
    "ne": (lambda x, y: x != y, np.not_equal),
}


class TestBinary:
    @bindings
    @shapes
    @pytest.mark.parametrize("name", list(FLOAT_BINARY))
    def test_float(self, b: dict[str, int], shape: tuple[Dim, ...], name: str) -> None:
        """Float binary ops match numpy in float32 (x/0 is inf, 0/0 and (-x)**0.5 are NaN)."""
        x, y = ph(shape), ph(shape)
        a, c = data(shape, b, seed=1), data(shape, b, seed=2)
        build, fn = FLOAT_BINARY[name]
        with np.errstate(all="ignore"):
            want = fn(a, c).astype(np.float32)
        close(run(build(x, y), {x: a, y: c}, b), want)

    @bindings
    @shapes
    @pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum"])
    @pytest.mark.parametrize("dtype", [np.int32, np.int64])
    def test_int(self, b: dict[str, int], shape: tuple[Dim, ...], name: str, dtype: Any) -> None:
        """Integer arithmetic matches numpy and keeps the dtype."""
        x, y = ph(shape, dtype), ph(shape, dtype)
        a, c = data(shape, b, dtype, 1), data(shape, b, dtype, 2)
        build, fn = FLOAT_BINARY[name]
        close(run(build(x, y), {x: a, y: c}, b), fn(a, c).astype(dtype))

    @bindings
    @shapes
    @pytest.mark.parametrize("dtype", [np.int32, np.int64])
    def test_int_floordiv_mod(self, b: dict[str, int], shape: tuple[Dim, ...], dtype: Any) -> None:
        """Integer // and % floor like Python; dividing by zero gives 0 instead of trapping."""
        x, y = ph(shape, dtype), ph(shape, dtype)
        a, c = data(shape, b, dtype, 1), data(shape, b, dtype, 2)
        safe = np.where(c == 0, 1, c)
        want_q = np.where(c == 0, 0, np.floor_divide(a, safe)).astype(dtype)
        want_r = np.where(c == 0, 0, np.mod(a, safe)).astype(dtype)
        got_q, got_r = run([x // y, x % y], {x: a, y: c}, b)
        close(got_q, want_q)
        close(got_r, want_r)

    def test_int_division_edge_cases(self) -> None:
        """Python floor semantics with negatives; INT_MIN // -1 wraps and INT_MIN % -1 is 0."""
        x, y = ph((6,), dt.int32), ph((6,), dt.int32)
        lo = np.iinfo(np.int32).min
        a = np.array([7, -7, 7, -7, lo, 5], np.int32)
        c = np.array([2, 2, -2, -2, -1, 0], np.int32)
        q, r = run([x // y, x % y], {x: a, y: c}, {})
        np.testing.assert_array_equal(q, [3, -4, -4, 3, lo, 0])
        np.testing.assert_array_equal(r, [1, 1, -1, -1, 0, 0])

    @bindings
    def test_float_floordiv_mod(self, b: dict[str, int]) -> None:
        """Float // is floor(x / y) and % is x - floor(x / y) * y, matching numpy's signs."""
        x, y = ph((2, t)), ph((2, t))
        a = data((2, t), b, seed=3)
        c = np.where(data((2, t), b, seed=4) == 0, 1.5, data((2, t), b, seed=4)).astype(np.float32)
        q, r = run([x // y, x % y], {x: a, y: c}, b)
        close(q, np.floor_divide(a, c))
        close(r, np.mod(a, c), rtol=1e-5)

    @bindings
    @shapes
    @pytest.mark.parametrize("name", list(COMPARE))
    @pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
    def test_compare(self, b: dict[str, int], shape: tuple[Dim, ...], name: str, dtype: Any) -> None:
        """Comparisons give bool tensors; NaN compares unequal to everything."""
        x, y = ph(shape, dtype), ph(shape, dtype)
        a, c = data(shape, b, dtype, 1), data(shape, b, dtype, 1 if name in ("eq", "le") else 2)
        build, fn = COMPARE[name]
        close(run(build(x, y), {x: a, y: c}, b), np.asarray(fn(a, c)))

    def test_nan_semantics(self) -> None:
        """maximum/minimum propagate NaN; comparisons with NaN are false except !=."""
        x, y = ph((2,)), ph((2,))
        a = np.array([np.nan, 1], np.float32)
        c = np.array([0, np.nan], np.float32)
        mx, mn, eq, ne = run([x.maximum(y), x.minimum(y), x == y, x != y], {x: a, y: c}, {})
        assert np.isnan(mx).all() and np.isnan(mn).all()
        np.testing.assert_array_equal(eq, [False, False])
        np.testing.assert_array_equal(ne, [True, True])

    @bindings
    @shapes
    @pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.int64])
    def test_logical(self, b: dict[str, int], shape: tuple[Dim, ...], dtype: Any) -> None:
        """&, | and ^ are bitwise on ints and logical on bools."""
        x, y = ph(shape, dtype), ph(shape, dtype)
        a, c = data(shape, b, dtype, 1), data(shape, b, dtype, 2)
        got = run([x & y, x | y, x ^ y], {x: a, y: c}, b)
        for g, w in zip(got, [a & c, a | c, a ^ c], strict=True):
            close(g, np.asarray(w).astype(dtype))

    def test_logical_on_float_rejected(self) -> None:
        """Bitwise ops on floats are a TensorError at the call."""
        with pytest.raises(ValueError, match=r"and needs bool or int tensors, got float32"):
            ph((2,)) & ph((2,))

    def test_int_only_and_float_only(self) -> None:
        """div/pow need floats at the op level (idiv floors any number); bools have no arithmetic."""
        xi, xf = ph((2,), dt.int32).node, ph((2,)).node
        assert make_node("idiv", (xf, xf)).dtype == dt.float32
        with pytest.raises(ValueError, match=r"idiv is not defined on bool tensors"):
            make_node("idiv", (ph((2,), dt.bool_).node,) * 2)
        with pytest.raises(ValueError, match=r"div needs float tensors, got int32"):
            make_node("div", (xi, xi))
        with pytest.raises(ValueError, match=r"add is not defined on bool tensors; cast first"):
            ph((2,), dt.bool_) + ph((2,), dt.bool_)

    def test_op_level_dtype_mismatch(self) -> None:
        """The op itself needs one dtype (Tensor inserts casts); mixing is rejected."""
        with pytest.raises(ValueError, match=r"add: operand dtypes differ: float32 vs int32"):
            make_node("add", (ph((2,)).node, ph((2,), dt.int32).node))

    @bindings
    def test_float16_binary(self, b: dict[str, int]) -> None:
        """float16 arithmetic rounds the float32 result once."""
        x, y = ph((2, t), dt.float16), ph((2, t), dt.float16)
        a, c = data((2, t), b, np.float16, 1), data((2, t), b, np.float16, 2)
        want = (a.astype(np.float32) * c.astype(np.float32) + 0).astype(np.float16)
        close(run(x * y, {x: a, y: c}, b), want, rtol=0)


class TestWhere:
    @bindings
    @shapes
    @pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
    def test_where(self, b: dict[str, int], shape: tuple[Dim, ...], dtype: Any) -> None:
        """where picks from a or b by a bool condition."""
        c, x, y = ph(shape, dt.bool_), ph(shape, dtype), ph(shape, dtype)
        ac, ax, ay = data(shape, b, bool, 1), data(shape, b, dtype, 2), data(shape, b, dtype, 3)
        close(run(c.where(x, y), {c: ac, x: ax, y: ay}, b), np.where(ac, ax, ay))
        close(run(Tensor.select(c, x, y), {c: ac, x: ax, y: ay}, b), np.where(ac, ax, ay))

    @bindings
    def test_broadcast_and_scalars(self, b: dict[str, int]) -> None:
        """Condition and branches broadcast together; scalars are weak."""
        c, x = ph((2, t), dt.bool_), ph((t,))
        ac, ax = data((2, t), b, bool), data((t,), b)
        close(run(c.where(x, 0.5), {c: ac, x: ax}, b), np.where(ac, ax, np.float32(0.5)))
        close(run(c.where(1, x), {c: ac, x: ax}, b), np.where(ac, np.float32(1), ax))
        out = c.where(2, 3)
        assert out.dtype == dt.int64
        close(run(out, {c: ac}, b), np.where(ac, 2, 3).astype(np.int64))

    def test_condition_must_be_bool(self) -> None:
        """A non-bool condition is rejected."""
        with pytest.raises(ValueError, match=r"where: the condition must be a bool Tensor"):
            Tensor.select(ph((2,)), 1.0, 2.0)  # type: ignore[arg-type]


CAST_VALUES = np.array(
    [0.0, 1.7, -1.7, 2.5, -0.0, 1e10, -1e10, np.inf, -np.inf, np.nan, 65504.0, 3e9], np.float32
)


class TestCast:
    @pytest.mark.parametrize("to", [np.int32, np.int64])
    @pytest.mark.parametrize("src", [np.float32, np.float16])
    def test_float_to_int_saturates(self, src: Any, to: Any) -> None:
        """float -> int truncates toward zero, saturates out of range and maps NaN to 0."""
        a = (
            CAST_VALUES.astype(src)
            if src is np.float32
            else np.array([0, 1.7, -1.7, np.inf, -np.inf, np.nan, 65504], np.float16)
        )
        x = ph(a.shape, src)
        info = np.iinfo(to)
        f = a.astype(np.float64)
        want = np.where(
            np.isnan(f),
            0,
            np.clip(np.trunc(np.nan_to_num(f, nan=0, posinf=1e300, neginf=-1e300)), -1e300, 1e300),
        )
        expected = np.array(
            [info.max if v >= info.max else info.min if v <= info.min else int(v) for v in want], to
        )
        close(run(x.cast(to), {x: a}, {}), expected)

    def test_float_to_int64_extremes(self) -> None:
        """Saturation reaches exactly int64 max/min (float(2**63-1) would overflow otherwise)."""
        x = ph((4,))
        a = np.array([9.3e18, -9.3e18, 9.2e18, np.inf], np.float32)
        got = run(x.cast(dt.int64), {x: a}, {})
        lim = np.iinfo(np.int64)
        np.testing.assert_array_equal(
            got, np.array([lim.max, lim.min, int(np.float32(9.2e18)), lim.max], np.int64)
        )

    @pytest.mark.parametrize("src", [np.float32, np.float16, np.int32, np.int64])
    def test_to_bool(self, src: Any) -> None:
        """x -> bool is x != 0 (NaN is true)."""
        a = (
            np.array([0, 1, -2, 3], src)
            if np.dtype(src).kind == "i"
            else np.array([0, 0.5, -0.0, np.nan], src)
        )
        x = ph(a.shape, src)
        close(run(x.cast(dt.bool_), {x: a}, {}), a != 0)

    @pytest.mark.parametrize(
        ("src", "to"),
        [
            (np.int64, np.int32),
            (np.int32, np.int64),
            (np.bool_, np.int32),
            (np.int32, np.float16),
            (np.int64, np.float32),
            (np.bool_, np.float32),
            (np.float32, np.float16),
            (np.float16, np.float32),
        ],
    )
    def test_other_casts(self, src: Any, to: Any) -> None:
        """int narrowing wraps; widening, bool -> number and float <-> float follow numpy."""
        a = (
            np.array([0, 1, 2**31 + 5, -(2**33), 70000], np.int64).astype(src)
            if np.dtype(src).kind != "f"
            else np.array([0.1, 6e4, -3.3], src)
        )
        x = ph(a.shape, src)
        with np.errstate(all="ignore"):
            close(run(x.cast(to), {x: a}, {}), a.astype(to), rtol=0)

    def test_same_dtype_is_identity(self) -> None:
        """Casting to the same dtype records nothing."""
        x = ph((2,))
        assert x.cast(dt.float32) is x
        assert x.astype(np.float32) is x


class TestReduce:
    @bindings
    @pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
    @pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2)])
    @pytest.mark.parametrize("keepdims", [False, True])
    def test_float(self, b: dict[str, int], op: str, axis: Any, keepdims: bool) -> None:
        """Reductions over any axes, symbolic ones included, with and without keepdims."""
        shape = (s, t, 3)
        x = ph(shape)
        a = data(shape, b) / 2
        want = getattr(np, op)(a.astype(np.float64), axis=axis, keepdims=keepdims).astype(np.float32)
        close(run(getattr(x, op)(axis, keepdims=keepdims), {x: a}, b), want, rtol=1e-5)

    @bindings
    @pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
    @pytest.mark.parametrize("dtype", [np.int32, np.int64])
    def test_int(self, b: dict[str, int], op: str, dtype: Any) -> None:
        """Integer reductions keep the dtype (sums wrap on overflow)."""
        x = ph((2, t), dtype)
        a = data((2, t), b, dtype)
        want = getattr(np, op)(a, axis=1).astype(dtype)
        close(run(getattr(x, op)(1), {x: a}, b), want)

    @bindings
    def test_bool_sum_counts(self, b: dict[str, int]) -> None:
        """Summing a bool tensor counts trues as int32."""
        x = ph((2, t), dt.bool_)
        a = data((2, t), b, bool)
        out = x.sum(1)
        assert out.dtype == dt.int32
        close(run(out, {x: a}, b), a.sum(1).astype(np.int32))

    @pytest.mark.parametrize(
        ("op", "dtype", "identity"),
        [
            ("sum", np.float32, 0.0),
            ("prod", np.float32, 1.0),
            ("max", np.float32, -np.inf),
            ("min", np.float32, np.inf),
            ("max", np.int32, np.iinfo(np.int32).min),
            ("min", np.int64, np.iinfo(np.int64).max),
        ],
    )
    def test_empty_axis_identity(self, op: str, dtype: Any, identity: float) -> None:
        """Reducing a zero-length axis gives the op's identity."""
        x = ph((2, t - 1), dtype)
        got = run(getattr(x, op)(1), {x: np.zeros((2, 0), dtype)}, {"t": 1})
        np.testing.assert_array_equal(got, np.full(2, identity, dtype))

    def test_mean_of_empty_is_nan(self) -> None:
        """mean over zero elements is NaN, as in numpy."""
        x = ph((t - 1,))
        assert np.isnan(run(x.mean(), {x: np.zeros(0, np.float32)}, {"t": 1}))

    def test_nan_propagates_through_max(self) -> None:
        """max/min reductions propagate NaN."""
        x = ph((3,))
        assert np.isnan(run(x.max(), {x: np.array([1, np.nan, 2], np.float32)}, {}))

    @bindings
    def test_float16_mean_divides(self, b: dict[str, int]) -> None:
        """float16 mean is the rounded sum divided in float32, rounded once."""
        x = ph((3, t), dt.float16)
        a = data((3, t), b, np.float16)
        total = a.astype(np.float64).sum(0).astype(np.float16)
        want = (total.astype(np.float32) / np.float32(3)).astype(np.float16)
        close(run(x.mean(0), {x: a}, b), want, rtol=0)

    def test_bad_axes(self) -> None:
        """Out-of-range and repeated axes are rejected at the call."""
        x = ph((2, 3))
        with pytest.raises(ValueError, match=r"axis 2 is out of range for a tensor of rank 2"):
            x.sum(2)
        with pytest.raises(ValueError, match=r"repeated axis in \(1, -1\)"):
            x.sum((1, -1))
        with pytest.raises(ValueError, match=r"reduce op must be one of"):
            make_node("reduce", (x.node,), op="argmax", axes=(0,))
        with pytest.raises(
            ValueError, match=r"reduce axes \(1, 0\) must be sorted, unique and within rank 2"
        ):
            make_node("reduce", (x.node,), op="sum", axes=(1, 0))


class TestMatmul:
    @bindings
    @pytest.mark.parametrize(
        ("xs", "ys"),
        [
            ((t, 3), (3, s)),
            ((2, t, 3), (3, 4)),
            ((s, 1, t, 3), (2, 3, t)),
            ((3,), (3, t)),
            ((t, 3), (3,)),
            ((t,), (t,)),
            ((1, 2, t), (s, t, 2)),
        ],
    )
    @pytest.mark.parametrize("dtype", [np.float32, np.int32])
    def test_matmul(self, b: dict[str, int], xs: tuple[Dim, ...], ys: tuple[Dim, ...], dtype: Any) -> None:
        """matmul follows numpy: batch dims broadcast, 1-D operands are promoted and squeezed."""
        x, y = ph(xs, dtype), ph(ys, dtype)
        a, c = data(xs, b, dtype, 1), data(ys, b, dtype, 2)
        want = np.matmul(a.astype(np.float64), c.astype(np.float64)).astype(dtype)
        close(run(x @ y, {x: a, y: c}, b), want, rtol=1e-6)

    def test_mixed_dtypes_promote(self) -> None:
        """An int operand meets a float one as float."""
        x, y = ph((2, 3), dt.int32), ph((3, 2))
        assert (x @ y).dtype == dt.float32

    def test_shape_errors(self) -> None:
        """Inner dims that differ, or rank-0 operands, are rejected at the call naming both shapes."""
        with pytest.raises(ValueError, match=r"matmul: \(2, 3\) @ \(4, 5\): inner dims 3 and 4 differ"):
            ph((2, 3)) @ ph((4, 5))
        with pytest.raises(ValueError, match=r"matmul needs operands of rank >= 1; use \* for scalars"):
            ph(()) @ ph((2,))
        with pytest.raises(ValueError, match=r"cannot broadcast shapes \(2,\) and \(3,\)"):
            ph((2, 4, 3)) @ ph((3, 3, 5))


# ---------------------------------------------------------------------------------------------
# movement


class TestMovement:
    @bindings
    @pytest.mark.parametrize(
        ("src", "dst"),
        [
            ((2, t, 3), (2, 3 * t)),
            ((2, t, 3), (6 * t,)),
            ((s, t), (s * t, 1)),
            ((t,), (1, t, 1)),
            ((4, t), (2, 2, t)),
            ((), (1, 1)),
        ],
    )
    def test_reshape(self, b: dict[str, int], src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> None:
        """reshape keeps row-major order for symbolic sizes whose element count is provably equal."""
        x = ph(src)
        a = data(src, b)
        close(run(x.reshape(*dst), {x: a}, b), a.reshape(concrete(dst, b)))

    @bindings
    def test_reshape_infers_minus_one(self, b: dict[str, int]) -> None:
        """One -1 is inferred, also when it is symbolic."""
        x = ph((s, t, 4))
        a = data((s, t, 4), b)
        out = x.reshape(s, -1)
        assert out.shape == (s, 4 * t)
        close(run(out, {x: a}, b), a.reshape(b["s"], -1))
        assert x.reshape(-1, 2).shape == (2 * s * t, 2)

    def test_reshape_errors(self) -> None:
        """Element counts that are not provably equal are rejected naming both shapes."""
        with pytest.raises(
            ValueError,
            match=r"reshape \(2, t\) -> \(t, 3\): element counts 2\*t and 3\*t are not provably equal",
        ):
            ph((2, t)).reshape(t, 3)
        with pytest.raises(ValueError, match=r"at most one -1"):
            ph((4,)).reshape(-1, -1)
        with pytest.raises(ValueError, match=r"cannot reshape \(5,\) to \[2, -1\]"):
            ph((5,)).reshape(2, -1)

    @bindings
    @pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0)])
    def test_permute(self, b: dict[str, int], order: tuple[int, ...]) -> None:
        """permute matches np.transpose; T reverses all axes."""
        x = ph((s, t, 3))
        a = data((s, t, 3), b)
        close(run(x.permute(*order), {x: a}, b), np.transpose(a, order))
        close(run(x.T, {x: a}, b), a.T)
        close(run(x.transpose(0, 2), {x: a}, b), np.swapaxes(a, 0, 2))

    def test_permute_errors(self) -> None:
        """A non-permutation is rejected."""
        with pytest.raises(ValueError, match=r"permute order \(0, 0\) is not a permutation of 2 axes"):
            make_node("permute", (ph((2, 3)).node,), order=(0, 0))

    @bindings
    @pytest.mark.parametrize(
        ("src", "dst"),
        [((1,), (t,)), ((1, 3), (s, 3)), ((t, 1), (2, t, s)), ((), (t, 2)), ((1, 1), (t - 1, 1))],
    )
    def test_expand(self, b: dict[str, int], src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> None:
        """expand broadcasts size-1 dims (and new leading dims) to symbolic sizes."""
        x = ph(src)
        a = data(src, b)
        close(run(x.expand(*dst), {x: a}, b), np.broadcast_to(a, concrete(dst, b)))

    def test_expand_errors(self) -> None:
        """Expanding a dim that is not 1 is rejected naming both shapes."""
        with pytest.raises(ValueError, match=r"cannot broadcast shapes \(2, 3\) and \(2, 4\): dim 3 vs 4"):
            ph((2, 3)).expand(2, 4)
        with pytest.raises(ValueError, match=r"cannot broadcast \(2, 3\) to \(3,\)"):
            ph((2, 3)).expand(3)

    @bindings
    @pytest.mark.parametrize(
        "slices",
        [
            [(0, t), None],
            [(1, t + 1), (1, 3)],
            [(t // 2, t), None],
            [(0, smin(t, 2)), (2, 4)],
        ],
    )
    def test_shrink(self, b: dict[str, int], slices: list[Any]) -> None:
        """shrink keeps [start, stop) per axis with symbolic starts and stops."""
        x = ph((t + 1, 4))
        a = data((t + 1, 4), b)
        idx = tuple(
            slice(None) if sl is None else slice(evaluate(sl[0], b), evaluate(sl[1], b)) for sl in slices
        )
        close(run(x.shrink(slices), {x: a}, b), a[idx])

    def test_shrink_out_of_range(self) -> None:
        """A range not provably inside the axis is rejected at the call."""
        with pytest.raises(
            ValueError, match=r"shrink axis 0 of \(t,\): \[1:t \+ 1\] is not provably within \[0:t\]"
        ):
            ph((t,)).shrink([(1, t + 1)])
        with pytest.raises(ValueError, match=r"shrink needs 2 \(start, stop\) pairs, got 1"):
            ph((2, 3)).shrink([(0, 1)])

    def test_shrink_step(self) -> None:
        """The op supports steps (used by strided slicing)."""
        x = ph((t,))
        node = make_node("shrink", (x.node,), slices=((1, t, 2),))
        assert node.shape == (t // 2,)
        got = reference.evaluate(node, {x: np.arange(6, dtype=np.float32)}, {"t": 6})
        np.testing.assert_array_equal(got, [1, 3, 5])

    @bindings
    @pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
    @pytest.mark.parametrize("pads", [[(1, 2), None], [(0, 1), (2, 0)], [None, (1, 1)]])
    def test_pad(self, b: dict[str, int], mode: str, pads: list[Any]) -> None:
        """pad matches np.pad for constant, reflect and edge modes."""
        shape = (t + 2, 3)
        x = ph(shape)
        a = data(shape, b)
        widths = [(0, 0) if p is None else p for p in pads]
        out = x.pad(pads, mode=mode, value=1.5) if mode == "constant" else x.pad(pads, mode=mode)
        want = (
            np.pad(a, widths, mode=mode, constant_values=1.5)
            if mode == "constant"
            else np.pad(a, widths, mode=mode)
        )
        close(run(out, {x: a}, b), want)

    @bindings
    def test_pad_symbolic_width(self, b: dict[str, int]) -> None:
        """Constant pads may have symbolic widths (pad to a bound)."""
        x = ph((t,))
        a = data((t,), b)
        out = x.pad([(0, 6 - t)])
        assert out.shape == (6,)
        close(run(out, {x: a}, b), np.pad(a, (0, 6 - b["t"])))

    def test_pad_int_value_and_nan(self) -> None:
        """The pad value is cast like a cast op: 2.7 into int32 is 2, NaN into int is 0."""
        x = ph((2,), dt.int32)
        a = np.array([5, 6], np.int32)
        np.testing.assert_array_equal(run(x.pad([(1, 1)], value=2.7), {x: a}, {}), [2, 5, 6, 2])
        np.testing.assert_array_equal(run(x.pad([(1, 0)], value=float("nan")), {x: a}, {}), [0, 5, 6])

    def test_pad_errors(self) -> None:
        """Reflect widths must stay below the dim; modes are checked; widths cannot be negative."""
        with pytest.raises(
            ValueError, match=r"reflect pad axis 0: widths \(2, 0\) must be < the dim t for every binding"
        ):
            ph((t,)).pad([(2, 0)], mode="reflect")
        with pytest.raises(
            ValueError, match=r"pad mode must be one of \('constant', 'reflect', 'edge'\), got 'wrap'"
        ):
            ph((3,)).pad([(1, 0)], mode="wrap")
        with pytest.raises(ValueError, match=r"pad axis 0: widths \(-1, 0\) can be negative"):
            ph((3,)).pad([(-1, 0)])
        with pytest.raises(ValueError, match=r"edge pad axis 0: dim t - 1 can be empty"):
            ph((t - 1,)).pad([(1, 0)], mode="edge")

    @bindings
    @pytest.mark.parametrize("axis", [0, 1, -1])
    def test_cat(self, b: dict[str, int], axis: int) -> None:
        """cat joins along an axis with symbolic sizes; dtypes promote."""
        shapes_: list[tuple[Dim, ...]] = [(t, 2), (t, 2), (t, 2)]
        ax = axis % 2
        shapes_[1] = tuple(s if i == ax else d for i, d in enumerate(shapes_[1]))
        shapes_[2] = tuple(3 if i == ax else d for i, d in enumerate(shapes_[2]))
        xs = [ph(shapes_[0]), ph(shapes_[1], dt.int32), ph(shapes_[2])]
        arrays = [data(shapes_[0], b, seed=1), data(shapes_[1], b, np.int32, 2), data(shapes_[2], b, seed=3)]
        out = Tensor.cat(xs, axis)
        close(
            run(out, dict(zip(xs, arrays, strict=True)), b),
            np.concatenate([a.astype(np.float32) for a in arrays], axis),
        )

    def test_cat_errors(self) -> None:
        """Other dims must be provably equal; an empty list is rejected."""
        with pytest.raises(ValueError, match=r"cat along axis 0: shapes \(2, t\) and \(2, s\) differ"):
            Tensor.cat([ph((2, t)), ph((2, s))])
        with pytest.raises(ValueError, match=r"cat needs at least one tensor"):
            Tensor.cat([])

    @bindings
    def test_stack_split_chunk(self, b: dict[str, int]) -> None:
        """stack, split and chunk are compositions of reshape, cat and shrink."""
        x, y = ph((t, 4)), ph((t, 4))
        a, c = data((t, 4), b, seed=1), data((t, 4), b, seed=2)
        close(run(Tensor.stack([x, y], 1), {x: a, y: c}, b), np.stack([a, c], 1))
        p, q = x.split([1, 3], axis=1)
        close(run(p, {x: a}, b), a[:, :1])
        close(run(q, {x: a}, b), a[:, 1:])
        _, v = x.chunk(2)
        close(run(v, {x: a}, b), a[:, 2:])
        close(
            run(x.glu(), {x: a}, b),
            (a[:, :2] / (1 + np.exp(-a[:, 2:].astype(np.float64)))).astype(np.float32),
            rtol=1e-6,
        )


# ---------------------------------------------------------------------------------------------
# conv1d


def conv1d_numpy(
    x: np.ndarray, w: np.ndarray, stride: int, padding: tuple[int, int], dilation: int, groups: int
) -> np.ndarray:
    """The textbook loop: out[n, o, l] = sum_{c, k} xpad[n, g*C/g + c, l*stride + k*dilation] * w[o, c, k]."""
    n, _, length = x.shape
    cout, cg, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), padding))
    lout = (length + sum(padding) - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, cout, lout))
    og = cout // groups
    for o in range(cout):
        g = o // og
        for pos in range(lout):
            for c in range(cg):
                for kk in range(k):
                    out[:, o, pos] += xp[:, g * cg + c, pos * stride + kk * dilation] * w[o, c, kk]
    return out.astype(np.float32)


class TestConv1d:
    @bindings
    @pytest.mark.parametrize(
        ("cin", "cout", "k", "stride", "padding", "dilation", "groups"),
        [
            (1, 1, 1, 1, 0, 1, 1),
            (2, 3, 3, 1, 1, 1, 1),
            (4, 4, 3, 2, (2, 0), 1, 2),
            (2, 4, 2, 1, (1, 1), 2, 1),
            (4, 2, 3, 3, (2, 2), 2, 2),
            (3, 3, 3, 1, 1, 1, 3),
        ],
    )
    def test_conv1d(
        self,
        b: dict[str, int],
        cin: int,
        cout: int,
        k: int,
        stride: int,
        padding: Any,
        dilation: int,
        groups: int,
    ) -> None:
        """conv1d (PyTorch layout) matches the textbook loop for stride, padding, dilation and groups."""
        length = t + dilation * (k - 1)
        x = ph((s, cin, length))
        a = data((s, cin, length), b)
        w = data((cout, cin // groups, k), b, seed=5)
        bias = data((cout,), b, seed=6)
        out = x.conv1d(
            Tensor.const(w),
            Tensor.const(bias),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )
        pad = (padding, padding) if isinstance(padding, int) else padding
        want = conv1d_numpy(a, w, stride, pad, dilation, groups) + bias[:, None]
        close(run(out, {x: a}, b), want.astype(np.float32), rtol=1e-5)

    @bindings
    def test_symbolic_padding(self, b: dict[str, int]) -> None:
        """Padding may be symbolic (left-pad a stream to a fixed window)."""
        x = ph((1, 1, t))
        a = data((1, 1, t), b)
        w = np.ones((1, 1, 2), np.float32)
        out = x.conv1d(Tensor.const(w), padding=(6 - t, 0))
        assert out.shape == (1, 1, 5)
        close(run(out, {x: a}, b), conv1d_numpy(a, w, 1, (6 - b["t"], 0), 1, 1))

    def test_errors(self) -> None:
        """Channel mismatches and kernels longer than the input are rejected naming the shapes."""
        w = Tensor.const(np.zeros((2, 3, 3), np.float32))
        with pytest.raises(
            ValueError, match=r"conv1d: x \(1, 4, 8\) and w \(2, 3, 3\) with groups=1: need C == 3\*1"
        ):
            ph((1, 4, 8)).conv1d(w)
        with pytest.raises(ValueError, match=r"conv1d: input length t can be shorter than the kernel span"):
            ph((1, 3, t)).conv1d(w)
        with pytest.raises(
            ValueError, match=r"conv1d needs x\[N, C, L\] and w\[O, C/g, K\], got \(3, 8\) and \(2, 3, 3\)"
        ):
            ph((3, 8)).conv1d(w)
        with pytest.raises(ValueError, match=r"conv1d stride must be an int >= 1, got 0"):
            ph((1, 3, 8)).conv1d(w, stride=0)


# ---------------------------------------------------------------------------------------------
# gather / scatter / nonzero


class TestIndexOps:
    @bindings
    @pytest.mark.parametrize("axis", [0, 1])
    @pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
    def test_gather_clamps(self, b: dict[str, int], axis: int, idx_dtype: Any) -> None:
        """gather selects along an axis; out-of-range indices (negative too) clamp into range."""
        x = ph((t, 3))
        a = data((t, 3), b)
        idx = np.array([0, 2, -1, 7, 1], idx_dtype)
        i = ph((5,), idx_dtype)
        n = a.shape[axis]
        want = np.take(a, np.clip(idx, 0, n - 1), axis=axis)
        close(run(x.gather(axis, i), {x: a, i: idx}, b), want)

    @bindings
    def test_gather_symbolic_count(self, b: dict[str, int]) -> None:
        """The index length may be symbolic; index_select is the same op."""
        x = ph((4, 2))
        i = ph((t,), dt.int32)
        a, idx = data((4, 2), b), np.arange(b["t"], dtype=np.int32) % 4
        close(run(x.index_select(0, i), {x: a, i: idx}, b), a[idx])

    @bindings
    @pytest.mark.parametrize("axis", [0, 1])
    def test_scatter(self, b: dict[str, int], axis: int) -> None:
        """scatter writes rows; out-of-range indices are dropped and the last write wins."""
        x = ph((t, 3))
        a = data((t, 3), b)
        idx = np.array([0, -1, 0, 9], np.int32)
        src_shape = (4, 3) if axis == 0 else (t, 4)
        src = ph(src_shape)
        sv = data(src_shape, b, seed=7)
        want = a.copy()
        for j, target in enumerate(idx):
            if 0 <= target < a.shape[axis]:
                if axis == 0:
                    want[target] = sv[j]
                else:
                    want[:, target] = sv[:, j]
        close(run(x.scatter(axis, Tensor.const(idx), src), {x: a, src: sv}, b), want)

    def test_index_errors(self) -> None:
        """Indices must be 1-D ints; src must match; gathering from a possibly empty axis is rejected."""
        with pytest.raises(ValueError, match=r"gather: index must be a 1-D int tensor, got float32\(3,\)"):
            ph((4,)).gather(0, ph((3,)))
        with pytest.raises(ValueError, match=r"scatter: src shape \(2, 2\) must be \(3, 2\)"):
            ph((4, 2)).scatter(0, ph((3,), dt.int32), ph((2, 2)))
        with pytest.raises(ValueError, match=r"gather: axis 0 of \(t - 1,\) can be empty"):
            ph((t - 1,)).gather(0, ph((1,), dt.int32))

    @bindings
    @pytest.mark.parametrize("size", [0, 2, 20])
    @pytest.mark.parametrize("shape", [(), (t,), (2, t)], ids=["scalar", "t", "2xt"])
    def test_nonzero(self, b: dict[str, int], size: int, shape: tuple[Dim, ...]) -> None:
        """nonzero returns the first `size` hits in row-major order, padded with the fill, and the count."""
        x = ph(shape, dt.int32)
        a = data(shape, b, np.int32) % 2
        idx, count = x.nonzero(size, fill_value=-1)
        got_idx, got_count = run([idx, count], {x: a}, b)
        hits = np.argwhere(np.atleast_1d(a))
        want = np.full((size, max(len(shape), 1)), -1, np.int64)
        want[: min(size, len(hits))] = hits[:size]
        close(got_idx, want)
        close(got_count, np.array(len(hits), np.int64))


# ---------------------------------------------------------------------------------------------
# compositions the models use


class TestCompositions:
    @bindings
    @pytest.mark.parametrize("axis", [-1, 0])
    def test_softmax_and_log_softmax(self, b: dict[str, int], axis: int) -> None:
        """softmax and log_softmax over a symbolic axis match the stable numpy formulas."""
        x = ph((t, 5))
        a = data((t, 5), b).astype(np.float64)
        e = np.exp(a - a.max(axis, keepdims=True))
        sm = e / e.sum(axis, keepdims=True)
        got_sm, got_ls = run([x.softmax(axis), x.log_softmax(axis)], {x: a.astype(np.float32)}, b)
        close(got_sm, sm.astype(np.float32), rtol=1e-5)
        close(got_ls, np.log(sm).astype(np.float32), rtol=1e-5)

    @bindings
    def test_layer_norm(self, b: dict[str, int]) -> None:
        """layer_norm normalises the last axis, then scales and shifts."""
        x = ph((t, 4))
        a = data((t, 4), b).astype(np.float64)
        w, bias = np.array([1, 2, 0.5, -1], np.float32), np.array([0, 1, 0, -1], np.float32)
        mu = a.mean(-1, keepdims=True)
        var = ((a - mu) ** 2).mean(-1, keepdims=True)
        want = (a - mu) / np.sqrt(var + 1e-5) * w + bias
        got = run(x.layer_norm(Tensor.const(w), Tensor.const(bias)), {x: a.astype(np.float32)}, b)
        close(got, want.astype(np.float32), rtol=1e-4)

    @bindings
    @pytest.mark.parametrize("ddof", [0, 1])
    def test_var_std(self, b: dict[str, int], ddof: int) -> None:
        """var/std with ddof over a static axis, and with ddof=0 over a symbolic one."""
        x = ph((t, 4))
        a = data((t, 4), b).astype(np.float64)
        got_v, got_s = run([x.var(1, ddof=ddof), x.std(1, ddof=ddof)], {x: a.astype(np.float32)}, b)
        close(got_v, a.var(1, ddof=ddof).astype(np.float32), rtol=1e-5)
        close(got_s, a.std(1, ddof=ddof).astype(np.float32), rtol=1e-5)
        close(run(x.var(0), {x: a.astype(np.float32)}, b), a.var(0).astype(np.float32), rtol=1e-5)

    @bindings
    def test_silu_linear_clip(self, b: dict[str, int]) -> None:
        """silu, linear (PyTorch weight layout) and clip."""
        x = ph((t, 3))
        a = data((t, 3), b)
        w, bias = data((2, 3), b, seed=9), data((2,), b, seed=10)
        got = run([x.silu(), x.linear(Tensor.const(w), Tensor.const(bias)), x.clip(-1, 1)], {x: a}, b)
        a64 = a.astype(np.float64)
        close(got[0], (a64 / (1 + np.exp(-a64))).astype(np.float32), rtol=1e-6)
        close(got[1], (a64 @ w.T + bias).astype(np.float32), rtol=1e-6)
        close(got[2], np.clip(a, -1, 1))
