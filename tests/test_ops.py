"""Every registered op, run by the reference interpreter, against direct numpy.

Each op runs at several shapes whose symbolic dims are bound to their minimum (``t = 1``), their
maximum and a value in between, so empty-ish and full-size cases both count.

The shared bindings, shapes and helpers are in ``ops_helpers.py``. This module covers sources,
elementwise ops, casts, reductions and matmul; ``test_ops_movement.py`` the movement and index
ops; ``test_ops_models.py`` conv1d and the compositions the models use.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from ops_helpers import bindings, close, data, ph, run, s, shapes, t

from asyncjit import Tensor
from asyncjit import dtypes as dt
from asyncjit.graph import make_node
from asyncjit.symbolic import Dim

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
