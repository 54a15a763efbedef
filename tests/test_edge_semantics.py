"""Edge cases where compiled plans and the reference once disagreed (found by differential
fuzzing): pad values across dtypes, rank-0 constants, vars with min == max, gelu at -inf, huge
trig arguments, reductions at the overflow edge, symbolic dims on the left of a Tensor.

Each test runs the compiled plan and ``asyncjit.reference`` on the same graph and asserts the
value the semantics (``asyncjit.graph._ops``, docs/semantics.md) define.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from asyncjit import Tensor, Var, jit, reference
from asyncjit import dtypes as dt
from asyncjit.compiler import compile as aj_compile
from asyncjit.errors import VarBoundsError

pytestmark = pytest.mark.usefixtures("no_disk_cache")


@pytest.fixture
def no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def both(
    outputs: Sequence[Tensor],
    inputs: Sequence[Tensor],
    feed: Sequence[np.ndarray],
    var_values: dict[str, int],
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    got = aj_compile(list(outputs), list(inputs)).run(list(feed), var_values)
    want = reference.evaluate(list(outputs), dict(zip(inputs, feed, strict=True)), var_values)
    return got, want


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise-equal values (NaN == NaN, -0.0 != 0.0), same dtype and shape."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    ("dtype", "value", "fill"),
    [
        (dt.int32, math.nan, 0),
        (dt.int32, math.inf, 2**31 - 1),
        (dt.int32, -math.inf, -(2**31)),
        (dt.int32, 1e10, 2**31 - 1),
        (dt.int32, 2.7, 2),
        (dt.int32, 2**32 + 5, 5),  # an int wider than the dtype wraps, as an int cast does
        (dt.int64, 1e19, 2**63 - 1),
        (dt.int64, -1e19, -(2**63)),
        (dt.int64, math.nan, 0),
        (dt.float16, 1e10, math.inf),
        (dt.float16, -1e10, -math.inf),
        (dt.float16, math.nan, math.nan),
        (dt.float32, 1e300, math.inf),
        (dt.bool_, 0.5, True),
        (dt.bool_, math.nan, True),
    ],
)
def test_pad_value_converts_like_cast(dtype: dt.DType, value: float, fill: float) -> None:
    x = Tensor.placeholder((2,), dtype, name="x")
    y = x.pad([(1, 1)], value=value)
    a = np.ones(2, dtype.np)
    (got,), (want,) = both([y], [x], [a], {})
    assert same(got, want)
    expected = np.array(fill).astype(dtype.np)
    assert same(got[:1], expected.reshape(1)), (got, expected)


@pytest.mark.parametrize(
    "build",
    [
        lambda p: p / Tensor.const(np.int32(3)),
        lambda p: p ** Tensor.const(np.float32(2)),
        lambda p: p == Tensor.const(np.float32(1.5)),
        lambda p: p > Tensor.const(np.int32(1)),
        lambda p: p // Tensor.const(np.bool_(True)),
        lambda p: (p <= p).where(True, 0),
        lambda p: Tensor.const(np.float32(2)) * Tensor.const(np.float32(3)) + p,
    ],
)
def test_rank0_constants_fold(build: Callable[[Tensor], Tensor]) -> None:
    p = Tensor.placeholder((), dt.float32, name="p")
    y = build(p)
    assert y.shape == ()
    (got,), (want,) = both([y], [p], [np.array(1.5, np.float32)], {})
    assert same(got, want)


def test_folded_rank0_result_keeps_rank() -> None:
    """A graph of constants only: folding leaves a 0-d const, not a 1-d one."""
    y = Tensor.const(np.float32(6)) / Tensor.const(np.int32(3))
    x = Tensor.placeholder((), dt.float32, name="x")
    (got, _), _ = both([y, x + 0], [x], [np.array(0, np.float32)], {})
    assert got.shape == () and got == 2.0


def test_var_with_min_equal_max_everywhere() -> None:
    """A var fixed by its bounds (or by ``fixed=``) is still accepted by name, if equal."""
    t = Var("t", 3, 3)
    x = Tensor.placeholder((t,), dt.float32, name="x")
    exe = aj_compile([x * 2], [x])
    a = np.arange(3, dtype=np.float32)
    assert same(exe.run([a], {"t": 3})[0], a * 2)
    assert same(exe.run([a], {})[0], a * 2)
    with pytest.raises(VarBoundsError):
        exe.run([a], {"t": 4})
    out = jit(dynamic={"x": {0: ("t", 3, 3)}})(lambda x: x * 2)(a)
    assert same(out.to_numpy_blocking(), a * 2)

    s = Var("s", 1, 4)
    y = Tensor.placeholder((s,), dt.float32, name="y")
    fixed = aj_compile([y + 1], [y], fixed={"s": 2})
    assert fixed.signature.fixed == {"s": 2}
    assert same(fixed.run([a[:2]], {"s": 2})[0], a[:2] + 1)
    with pytest.raises(VarBoundsError):
        fixed.run([a[:2]], {"s": 3})


@pytest.mark.anyio
async def test_loaded_executable_accepts_fixed_var() -> None:
    from asyncjit.runtime import Client

    t = Var("t", 3, 3)
    x = Tensor.placeholder((t,), dt.float32, name="x")
    async with Client("cpu") as client:
        loaded = client.load(aj_compile([x * 2], [x]))
        buf = client.buffer_from_host(np.ones(3, np.float32), client.device(0))
        (out,) = await loaded.execute([buf], {"t": 3})
        assert same(await out.to_numpy(), np.full(3, 2, np.float32))
        with pytest.raises(VarBoundsError):
            await loaded.execute([buf], {"t": 2})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [dt.float32, dt.float16])
def test_gelu_limits(approximate: str, dtype: dt.DType) -> None:
    x = Tensor.placeholder((5,), dtype, name="x")
    y = x.gelu(approximate=approximate)
    a = np.array([-np.inf, np.inf, np.nan, -1e30 if dtype == dt.float32 else -6e4, 0.0], dtype.np)
    (got,), (want,) = both([y], [x], [a], {})
    assert same(got, want)
    assert math.copysign(1.0, float(got[0])) == -1.0 and got[0] == 0  # the limit is -0.0
    assert got[1] == np.inf and np.isnan(got[2])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_float64_limits_and_tail(approximate: str) -> None:
    # float64 -inf and values whose cube overflows must give the limit -0.0, not -inf * 0 = NaN;
    # the negative tail keeps its tiny value instead of cancelling 1 + erf(z) to 0
    x = Tensor.placeholder((8,), dt.float64, name="x")
    y = x.gelu(approximate=approximate)
    a = np.array([-np.inf, -1e300, -1e160, -10.0, -3.0, 1e300, np.inf, np.nan])
    (got,), (want,) = both([y], [x], [a], {})
    assert np.array_equal(np.signbit(got[:3]), [True] * 3) and not got[:3].any()
    assert got[3] < 0 and np.allclose(got[3:7], want[3:7], rtol=1e-14, atol=0)
    assert np.isnan(got[7])


def test_sin_cos_huge_arguments_match_reference() -> None:
    x = Tensor.placeholder((8,), dt.float32, name="x")
    a = np.array([1e18, -1e18, 3.6e17, 1e30, 3.4028235e38, -3.4028235e38, 2.0**21, 1e7], np.float32)
    got, want = both([x.sin(), x.cos()], [x], [a], {})
    for g, w in zip(got, want, strict=True):
        assert np.abs(g.astype(np.float64) - w).max() <= np.spacing(np.float32(1.0))
    assert abs(float(got[0][0]) - math.sin(float(np.float32(1e18)))) < 1e-6


def test_float_reductions_accumulate_in_float64() -> None:
    x = Tensor.placeholder((4,), dt.float32, name="x")
    h = Tensor.placeholder((4,), dt.float16, name="h")
    outs = [x.prod(), x.sum(), h.sum(), x.mean()]
    feed = [np.array([1e30, 1e30, 0, 1e30], np.float32), np.array([6e4, 6e4, -6e4, 1], np.float16)]
    got, want = both(outs, [x, h], feed, {})
    assert all(same(g, w) for g, w in zip(got, want, strict=True))
    assert got[0] == 0 and got[2] == np.float16(6e4)
    feed[0] = np.array([3e38, 3e38, -3e38, 1], np.float32)
    got, want = both(outs, [x, h], feed, {})
    assert got[1] == np.float32(3e38) and all(same(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize(
    "build",
    [
        lambda t, x: t * x,
        lambda t, x: t - x,
        lambda t, x: t + x,
        lambda t, x: t / x,
        lambda t, x: t // x,
        lambda t, x: t % x,
        lambda t, x: t**x,
        lambda t, x: t < x,
        lambda t, x: t == x,
        lambda t, x: (t - 1) * x,
        lambda t, x: (t // 2) - x,
    ],
)
@pytest.mark.parametrize("dtype", [dt.float32, dt.int32])
def test_symbolic_dim_on_the_left(build: Callable[[Var, Tensor], Tensor], dtype: dt.DType) -> None:
    t = Var("t", 1, 5)
    x = Tensor.placeholder((t,), dtype, name="x")
    y = build(t, x)
    assert isinstance(y, Tensor)
    a = np.arange(1, 4).astype(dtype.np)
    (got,), (want,) = both([y], [x], [a], {"t": 3})
    assert same(got, want)


def test_symbolic_dims_still_reject_non_dims() -> None:
    t = Var("t", 1, 5)
    with pytest.raises(TypeError, match="expected an int or symbolic dim, got float"):
        t * 0.5
    assert str(t * np.int64(2)) == "2*t"


def test_var_of_an_unused_input_is_accepted_by_every_path() -> None:
    """A plan takes the vars of all its inputs; the reference accepts them for fed placeholders."""
    t = Var("t", 1, 4)
    x = Tensor.placeholder((t,), dt.float32, name="x")
    y = Tensor.placeholder((2,), dt.float32, name="y")
    feed = [np.ones(3, np.float32), np.ones(2, np.float32)]
    (got,), (want,) = both([y + 1], [x, y], feed, {"t": 3})
    assert same(got, want)
    with pytest.raises(VarBoundsError):
        reference.evaluate(y + 1, {x: feed[0], y: feed[1]}, {"t": 9})


def test_float64_to_float16_rounds_once() -> None:
    """float64 -> float16 is rounded once (no libcall, no double rounding through float32): ties
    of float16 nudged by far less than a float32 ulp must round away from the tie, as numpy does."""
    rng = np.random.default_rng(3)
    halves = rng.integers(0, 0x7BFF, 4000, dtype=np.uint16).view(np.float16).astype(np.float64)
    ties = (halves + np.nextafter(halves.astype(np.float16), np.float16(np.inf)).astype(np.float64)) / 2
    a = np.concatenate(
        [
            ties,
            ties * (1 + 2.0**-40),
            ties * (1 - 2.0**-40),
            -ties * (1 + 2.0**-40),
            [1e300, -1e300, np.nan, np.inf, 65520.0, 65519.99, 2.0**-25, 2.0**-25 * (1 + 2.0**-40), 1e-320],
        ]
    )
    x = Tensor.placeholder((a.size,), dt.float64, name="x")
    outs = [x.cast(dt.float16), x.reshape(1, a.size).cast(dt.float16).sum(0)]
    got, want = both(outs, [x], [a], {})
    assert same(got[0], want[0])
    assert same(got[1], want[1])


@pytest.mark.parametrize("dtype", [dt.float16, dt.float32])
def test_pow_of_any_nan_to_zero_is_one(dtype: dt.DType) -> None:
    """pow(x, 0) = 1 and pow(1, y) = 1 even for NaNs, signalling ones (random bit patterns) too."""
    uint = np.uint16 if dtype == dt.float16 else np.uint32
    quiet, signalling = (0x7E00, 0x7D00) if dtype == dt.float16 else (0x7FC00000, 0x7FA00000)
    a = np.array([quiet, signalling, signalling | (1 << (8 * dtype.itemsize - 1))], uint).view(dtype.np)
    x = Tensor.placeholder((3,), dtype, name="x")
    got, want = both([x**0, Tensor.const(np.ones(3, dtype.np)) ** x], [x], [a], {})
    assert all(same(g, w) for g, w in zip(got, want, strict=True))
    assert (got[0] == 1).all() and (got[1] == 1).all()


@pytest.mark.parametrize("dtype", [dt.float16, dt.float32, dt.float64])
def test_float_floordiv_and_mod_are_exact(dtype: dt.DType) -> None:
    """Float ``//`` and ``%`` are Python's (numpy's ``divmod``), bit for bit on random bit
    patterns and special values: the remainder is exact (IEEE fmod moved to the divisor's sign),
    not ``x - floor(x / y) * y``, whose rounding is off by ulps or entirely (a tiny divisor)."""
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    rng = np.random.default_rng(17)
    n = 20000
    bits = rng.integers(0, np.iinfo(uint).max, (2, n), dtype=uint, endpoint=True).view(dtype.np)
    with np.errstate(over="ignore"):
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.1, -0.1, 3.0, 1e-40], dtype.np)
    sa, sb = (g.ravel() for g in np.meshgrid(special, special))
    a = np.concatenate([bits[0], sa, np.array([1.0, -3698.0, -1505.0], dtype.np)])
    b = np.concatenate([bits[1], sb, np.array([0.1, 2.1189347e-23, 1.1131727], dtype.np)])
    x = Tensor.placeholder((a.size,), dtype, name="x")
    y = Tensor.placeholder((a.size,), dtype, name="y")
    got, want = both([x // y, x % y], [x, y], [a, b], {})
    with np.errstate(all="ignore"):
        exact = [np.floor_divide(a, b), np.mod(a, b)]
    for g, w, e in zip(got, want, exact, strict=True):
        for other in (w, e.astype(dtype.np)):  # NaN payloads aside, bit for bit (-0.0 too)
            nan = np.isnan(other)
            assert g.dtype == other.dtype and (np.isnan(g) == nan).all()
            assert same(g[~nan], other[~nan])
    if dtype != dt.float16:  # float16's 0.1 is below 0.1: there 1 // 0.1 is 10
        assert got[0][-3] == 9.0  # 1.0 // 0.1, where floor(1.0 / 0.1) is 10


def test_slice_of_a_product_of_mod_terms_is_proved_in_bounds() -> None:
    """``(s%3)*t - (s%3)`` is ``(s%3)*(t-1) >= 0``: the bounds prover factors out any atom (a mod,
    a floor division, a min), not only a var, so slicing such an axis is accepted."""
    s, t = Var("s", 1, 9), Var("t", 2, 6)
    x = Tensor.placeholder(((s % 3) * t - (s % 3),), dt.float32, name="x")
    y = x[1:] * 2
    for b in ({"s": 5, "t": 4}, {"s": 3, "t": 6}, {"s": 1, "t": 2}):
        a = np.arange((b["s"] % 3) * (b["t"] - 1), dtype=np.float32)
        (got,), (want,) = both([y], [x], [a], b)
        assert same(got, want) and same(got, a[1:] * 2)
    # where s%3 is s - 3 the dim expands to s*t - s - 3*t + 3, bilinear: proved from its corners
    s = Var("s", 3, 5)
    x = Tensor.placeholder(((s % 3) * (t - 1),), dt.float32, name="x")
    a = np.arange(2 * 3, dtype=np.float32)
    (got,), (want,) = both([x[1:] + 1], [x], [a], {"s": 5, "t": 4})
    assert same(got, want) and same(got, a[1:] + 1)


def test_static_conv_that_llvm_slp_miscompiled_compiles_and_matches() -> None:
    """LLVM's SLP vectorizer turned this fully unrolled static conv1d into IR with a use before
    its definition, and code generation aborted the process; optimised modules are verified and
    re-optimised without SLP when invalid (``codegen._target.optimized_module``)."""
    x = Tensor.placeholder((4, 1, 5), dt.float32, name="x")
    w = Tensor.placeholder((2, 1, 3), dt.float32, name="w")
    y = x.conv1d(w, stride=2, padding=(0, 2), dilation=2)
    rng = np.random.default_rng(5)
    feed = [rng.standard_normal(shape).astype(np.float32) for shape in ((4, 1, 5), (2, 1, 3))]
    (got,), (want,) = both([y], [x, w], feed, {})
    assert got.shape == (4, 2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_weak_int_scalar_out_of_the_tensor_int_range_is_refused() -> None:
    """A Python int next to an int tensor must fit its dtype: in range it computes as numpy does,
    out of range it is ``ScalarOverflowError`` (an ``OverflowError``) at graph build, never a wrap."""
    from asyncjit.errors import ScalarOverflowError

    x = Tensor.placeholder((3,), dt.uint8, name="x")
    a = np.array([0, 1, 200], np.uint8)
    got, want = both([x + 1, x * 3, 255 - x], [x], [a], {})
    assert all(same(g, w) for g, w in zip(got, want, strict=True))
    assert got[0].tolist() == [1, 2, 201] and got[2].tolist() == [255, 254, 55]
    for bad in (lambda: x + (-1), lambda: x * 300, lambda: (-1) - x):
        with pytest.raises(ScalarOverflowError, match="does not fit uint8"):
            bad()
    i32 = Tensor.placeholder((2,), dt.int32, name="i")
    with pytest.raises(OverflowError):
        _ = i32 * 2**40
