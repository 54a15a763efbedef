"""Every dtype through the compiler: elementwise arithmetic, comparisons, ``where``, casts to and
from every dtype (saturating float -> int, wrapping int -> int), reductions, matmul, gather,
cumsum, argmax, topk and max pool, compiled and compared with the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit import dtypes as dt
from asyncjit.compiler import compile

NEW = [dt.int8, dt.int16, dt.uint8, dt.uint16, dt.uint32, dt.uint64, dt.float64]


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "")


def values(dtype: dt.DType, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Extremes included: min, max, 0, 1 for ints; inf, nan, -0.0, huge for floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype.is_float:
        v = rng.standard_normal(n) * 4
        v[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e300, -3e9][:n] if n >= 6 else v[:6]
        with np.errstate(over="ignore"):  # 1e300 as float32 is inf
            return v.astype(dtype.np).reshape(shape)
    info = np.iinfo(dtype.np)
    v = rng.integers(info.min, info.max, n, dtype=dtype.np, endpoint=True)
    edge = np.array([info.min, info.max, 0, 1, 2, info.max // 2], dtype=dtype.np)
    v[: min(n, 6)] = edge[: min(n, 6)]
    return v.reshape(shape)


def run_both(
    outs: list[Tensor], inputs: list[Tensor], vals: list[np.ndarray], bindings: dict[str, int]
) -> None:
    exe = compile(outs, inputs)
    got = exe.run(vals, bindings)
    want = reference.evaluate(outs, dict(zip(inputs, vals, strict=True)), bindings)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype, k
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", NEW, ids=lambda d: d.name)
def test_elementwise_compare_where_reduce(dtype: dt.DType) -> None:
    t = Var("t", 1, 16)
    x = Tensor.placeholder((3, t), dtype, "x")
    y = Tensor.placeholder((3, t), dtype, "y")
    outs = [x + y, x - y, x * y, -x, abs(x), x.maximum(y), x.minimum(y), x < y, x >= y, x == y]
    outs += [(x > y).where(x, y), x.sum(1), x.max(0), x.min(), x.relu()]
    if dtype.is_int:
        outs += [x // y, x % y, x & y, x ^ y]
    else:
        outs += [x / y]
    for tv in (1, 9):
        run_both(outs, [x, y], [values(dtype, (3, tv), 1), values(dtype, (3, tv), 2)], {"t": tv})


@pytest.mark.parametrize("src", [*NEW, dt.float32, dt.float16, dt.int32, dt.bool_], ids=lambda d: d.name)
def test_casts_to_every_dtype(src: dt.DType) -> None:
    """Every cast from ``src``, extremes included (NaN, infinities, -0.0 and out-of-range floats
    saturate as ``docs/ops.md`` says), in a vector body and its remainder (17 elements)."""
    x = Tensor.placeholder((17,), src, "x")
    outs = [x.cast(d) for d in dt.DTYPES if d != dt.float16]  # float16 rounding is its own test
    run_both(outs, [x], [values(src, (17,), 3) if not src.is_bool else np.arange(17) % 3 == 0], {})


@pytest.mark.parametrize("dtype", [dt.float64, dt.int8, dt.uint8, dt.uint32, dt.int16], ids=lambda d: d.name)
def test_matmul_gather_scan_select_pool(dtype: dt.DType) -> None:
    a = Tensor.placeholder((4, 5), dtype, "a")
    b = Tensor.placeholder((5, 3), dtype, "b")
    idx = Tensor.placeholder((4,), dt.uint8, "idx")
    img = Tensor.placeholder((1, 2, 5, 6), dtype, "img")
    outs = [a @ b, a.gather(1, idx), a.cumsum(1), a.argmax(1), a.topk(2, 1)[1], img.max_pool(2, 1, pads=1)]
    if dtype.is_float:
        outs += [img.avg_pool(3, 2, pads=1), img.conv(Tensor.const(np.ones((3, 2, 2, 2), dtype.np)))]
    small = dtype.is_float or dtype.itemsize > 1
    av = values(dtype, (4, 5), 4) if small else (np.arange(20) % 5).astype(dtype.np).reshape(4, 5)
    bv = values(dtype, (5, 3), 5) if small else (np.arange(15) % 3).astype(dtype.np).reshape(5, 3)
    if dtype.is_float:  # finite values for products and sums
        av, bv = (
            np.nan_to_num(av, posinf=3.0, neginf=-3.0) % 7,
            np.nan_to_num(bv, posinf=1.0, neginf=-1.0) % 5,
        )
    iv = np.array([0, 4, 250, 2], np.uint8)  # 250 clamps to the last column
    run_both(outs, [a, b, idx, img], [av, bv, iv, values(dtype, (1, 2, 5, 6), 6)], {})


def test_float64_math_in_double() -> None:
    """float64 transcendentals run in double (libm), not through float32."""
    x = Tensor.placeholder((64,), dt.float64, "x")
    v = np.linspace(-30, 30, 64)
    outs = [
        x.exp(),
        x.tanh(),
        x.erf(),
        x.sigmoid(),
        x.gelu(),
        x.gelu("tanh"),
        x.sin(),
        x.cos(),
        x.abs().log(),
    ]
    outs += [x.abs().sqrt(), x.abs() ** 0.37, x.floor()]
    run_both(outs, [x], [v], {})
    got = compile(x.exp(), [x]).run([np.array([1e-3] * 64)])[0]
    assert got[0] == np.exp(1e-3)  # a float32 detour would lose this
