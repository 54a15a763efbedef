"""Accuracy and special values of the vectorisable math functions against numpy float64.

One module holds a loop kernel per function, in a scalar and an 8-wide vector variant (vector
main loop + scalar tail), compiled once per session.  Errors are in float32 ulps of the
correctly rounded result (``np.spacing``, with 2**-149 for denormals), or absolute where the
issue asks for absolute bounds (erf, gelu).
"""

from __future__ import annotations

import ctypes
import functools
import math
import re
import zlib

import numpy as np
import numpy.typing as npt
import pytest
from llvmlite import ir

from asyncjit.codegen._mathfn import UNARY_OPS, emit_pow, emit_unary
from asyncjit.codegen._mathlut import lut_chosen
from asyncjit.codegen._target import (
    F32,
    I64,
    PTR,
    compile_to_object,
    for_range,
    i64,
    load_object,
    new_function,
)

F32Array = npt.NDArray[np.float32]
F64Array = npt.NDArray[np.float64]
WIDTHS = (1, 8, 16)
OPS = [*UNARY_OPS, "pow"]

# Max error bounds asserted here; the measured values are in each function's docstring.
ULP_BOUND = {"exp": 1.0, "log": 1.0, "tanh": 2.0, "sigmoid": 3.0, "sin": 1.0, "cos": 1.0, "pow": 1.0}
ABS_BOUND = {"erf": 2e-7, "gelu": 1e-6, "gelu_tanh": 1e-6}


class Kernels:
    def __init__(self) -> None:
        module = ir.Module("test_mathfn")
        for width in WIDTHS:
            vt = ir.VectorType(F32, width) if width > 1 else F32
            for op in OPS:
                fn, b = new_function(
                    module,
                    f"{op}_w{width}",
                    [("x", PTR), ("y", PTR), ("out", PTR), ("n", I64)],
                    linkage="external",
                    noalias=("x", "y", "out"),
                )
                x, y, out, n = fn.args
                n_vec = b.mul(b.sdiv(n, i64(width)), i64(width))
                for lo, hi, step, ty in ((i64(0), n_vec, width, vt), (n_vec, n, 1, F32)):
                    with for_range(b, lo, hi, step) as i:
                        xv = b.load(b.gep(x, [i], source_etype=F32), typ=ty, align=4)
                        if op == "pow":
                            yv = b.load(b.gep(y, [i], source_etype=F32), typ=ty, align=4)
                            r = emit_pow(b, xv, yv)
                        else:
                            r = emit_unary(b, op, xv)
                        b.store(r, b.gep(out, [i], source_etype=F32), align=4)
                b.ret_void()
        self.ir = str(module)
        self.obj = load_object(compile_to_object(self.ir))

    def __call__(self, op: str, width: int, x: F32Array, y: F32Array | None = None) -> F32Array:
        fn = self.obj.cfunc(
            f"{op}_w{width}", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
        )
        x = np.ascontiguousarray(x, dtype=np.float32)
        yy = x if y is None else np.ascontiguousarray(y, dtype=np.float32)
        out = np.empty_like(x)
        fn(x.ctypes.data, yy.ctypes.data, out.ctypes.data, x.size)
        return out


@functools.cache
def kernels() -> Kernels:
    return Kernels()


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def reference(op: str, x32: F32Array, y32: F32Array | None = None) -> F64Array:
    """float64 references; gelu forms use erfc / sigmoid so the reference has no cancellation."""
    x = x32.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "exp":
            return np.exp(x)
        if op == "log":
            return np.log(x)
        if op == "tanh":
            return np.tanh(x)
        if op == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if op == "sin":
            return np.sin(x)
        if op == "cos":
            return np.cos(x)
        if op == "erf":
            return np.asarray(_erf(x), dtype=np.float64)
        if op == "gelu":
            r = np.where(x >= 0, x * (1 - 0.5 * _erfc(x / np.sqrt(2))), 0.5 * x * _erfc(-x / np.sqrt(2)))
            return np.where(x == -np.inf, -0.0, r)
        if op == "gelu_tanh":
            u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
            return np.where(x == -np.inf, -0.0, x / (1 + np.exp(-2 * u)))
        if op == "pow":
            assert y32 is not None
            return np.power(x, y32.astype(np.float64))
    raise KeyError(op)


def ulp_error(got: F32Array, ref: F64Array) -> F64Array:
    """Error in float32 ulps of the reference; inf where one is NaN/inf and the other is not."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref.astype(np.float32)
        same = (got == ref32) | (np.isnan(got) & np.isnan(ref))
        finite = np.isfinite(ref32) & np.isfinite(got) & ~same
        spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), 2.0**-149)
        err = np.zeros(got.shape)
        err[finite] = np.abs(got[finite].astype(np.float64) - ref[finite]) / spacing[finite]
        err[~same & ~finite] = np.inf
    return err


def abs_error(got: F32Array, ref: F64Array) -> F64Array:
    with np.errstate(invalid="ignore"):
        same = (got == ref) | (np.isnan(got) & np.isnan(ref))
        err = np.where(same, 0.0, np.abs(got.astype(np.float64) - ref))
    return np.where(np.isnan(err), np.inf, err)


SPECIALS = np.array(
    [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1e-45,
        -1e-45,
        1e-40,
        -1e-40,
        1.17e-38,
        3.4e38,
        -3.4e38,
        88.72,
        88.73,
        -87.3,
        -103.9,
        -104.0,
        1.0,
        -1.0,
        0.5,
        0.625,
        -0.625,
        1e-7,
        20.0,
        -20.0,
    ],
    dtype=np.float32,
)


def inputs(op: str) -> F32Array:
    rng = np.random.default_rng(zlib.crc32(op.encode()))  # hash() of a str changes per process
    sign = rng.choice([-1.0, 1.0], 60000)
    parts = [
        rng.uniform(-1, 1, 50000),
        rng.uniform(-10, 10, 50000),
        sign * np.exp(rng.uniform(-103, 88, 60000)),  # all magnitudes incl. denormals
        rng.uniform(-1e-38, 1e-38, 5000),  # denormal inputs
        SPECIALS.astype(np.float64),
    ]
    extra = {
        "exp": [rng.uniform(-104, 89, 100000)],
        "log": [np.exp(rng.uniform(-103, 88, 100000)), rng.uniform(0.5, 2.0, 50000)],
        "sin": [rng.uniform(-1e4, 1e4, 100000), rng.uniform(-1e6, 1e6, 50000)],
        "cos": [rng.uniform(-1e4, 1e4, 100000), rng.uniform(-1e6, 1e6, 50000)],
        "tanh": [rng.uniform(-12, 12, 100000)],
        "sigmoid": [rng.uniform(-110, 110, 100000)],
        "erf": [rng.uniform(-6, 6, 100000)],
        "gelu": [rng.uniform(-20, 20, 100000)],
        "gelu_tanh": [rng.uniform(-20, 20, 100000)],
    }
    x = np.concatenate(parts + extra.get(op, []))
    return x.astype(np.float32)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", list(UNARY_OPS))
def test_unary_accuracy(op: str, width: int) -> None:
    """Max error over wide ranges (near 0, all magnitudes, denormals, specials) within bound."""
    x = inputs(op)
    got = kernels()(op, width, x)
    ref = reference(op, x)
    if op in ABS_BOUND:
        err = abs_error(got, ref)
        worst = int(np.argmax(err))
        assert err[worst] <= ABS_BOUND[op], (op, x[worst], got[worst], ref[worst])
    else:
        err = ulp_error(got, ref)
        worst = int(np.argmax(err))
        assert err[worst] <= ULP_BOUND[op], (op, x[worst], got[worst], ref[worst], err[worst])


@pytest.mark.parametrize("width", WIDTHS)
def test_special_values(width: int) -> None:
    """numpy's special values: exp/log/tanh/sigmoid/erf at 0, +-inf, NaN and out of range."""
    k = kernels()
    inf, nan = np.inf, np.nan

    def f(op: str, *xs: float) -> list[float]:
        return [float(v) for v in k(op, width, np.array(xs, dtype=np.float32))]

    assert f("exp", -inf, inf, 100.0, -200.0, 0.0) == [0.0, inf, inf, 0.0, 1.0]
    assert math.isnan(f("exp", nan)[0])
    assert f("log", 0.0, -0.0, inf, 1.0) == [-inf, -inf, inf, 0.0]
    assert all(math.isnan(v) for v in f("log", -1.0, -inf, nan, -1e-45))
    assert f("tanh", inf, -inf, 0.0) == [1.0, -1.0, 0.0]
    assert f("sigmoid", inf, -inf, 0.0) == [1.0, 0.0, 0.5]
    assert f("erf", inf, -inf, 0.0) == [1.0, -1.0, 0.0]
    assert f("gelu", inf, 0.0) == [inf, 0.0] and f("gelu", -inf)[0] == 0.0
    assert f("gelu_tanh", inf, 0.0) == [inf, 0.0] and f("gelu_tanh", -inf)[0] == 0.0
    for op in UNARY_OPS:
        assert math.isnan(f(op, nan)[0]), op
    assert all(math.isnan(v) for v in f("sin", inf, -inf) + f("cos", inf, -inf))
    # signs of zero are kept where numpy keeps them
    assert math.copysign(1.0, f("tanh", -0.0)[0]) == -1.0
    assert math.copysign(1.0, f("sin", -0.0)[0]) == -1.0
    assert math.copysign(1.0, f("erf", -0.0)[0]) == -1.0


@pytest.mark.parametrize("width", WIDTHS)
def test_denormal_results(width: int) -> None:
    """exp and sigmoid produce denormal results, not zero, where numpy does."""
    x = np.array([-88.0, -95.0, -100.0, -103.0], dtype=np.float32)
    for op in ("exp", "sigmoid"):
        got = kernels()(op, width, x)
        assert (got > 0).all(), op
        assert ulp_error(got, reference(op, x)).max() <= ULP_BOUND[op]


@pytest.mark.parametrize("width", WIDTHS)
def test_sin_cos_huge_arguments(width: int) -> None:
    """Every magnitude up to float32's max is reduced exactly (within 1 ulp of numpy's float64),
    across the switch from the Cody-Waite to the table reduction at 2**21 and at x = k*pi/2."""
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.choice([-1.0, 1.0], 40000) * np.exp(rng.uniform(14, 88.7, 40000)),
            rng.uniform(2.0**21 - 64, 2.0**21 + 64, 2000),
            np.arange(1, 4000) * (np.pi / 2),  # near multiples of pi/2: the worst cancellation
            [1e18, 3.6e17, 1e30, 3.4028235e38, -3.4028235e38, 2.0**21, -(2.0**21)],
        ]
    ).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(0)), -np.nextafter(x, np.float32(0))])
    for op in ("sin", "cos"):
        got = kernels()(op, width, x)
        assert ulp_error(got, reference(op, x)).max() <= 1.0, op


@pytest.mark.parametrize("width", WIDTHS)
def test_pow_accuracy_and_special_cases(width: int) -> None:
    """pow over random operands within 1 ulp, and the C99/numpy special-case table exactly."""
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [rng.uniform(0, 10, 50000), rng.uniform(-10, 10, 50000), np.exp(rng.uniform(-100, 88, 50000))]
    )
    y = np.concatenate(
        [rng.uniform(-10, 10, 50000), np.round(rng.uniform(-30, 30, 50000)), rng.uniform(-1, 1, 50000)]
    )
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -8.0, 1e-45, 3e38])
    sx, sy = np.meshgrid(
        specials,
        np.array(
            [
                0.0,
                -0.0,
                np.inf,
                -np.inf,
                np.nan,
                1.0,
                -1.0,
                2.0,
                3.0,
                -3.0,
                0.5,
                -0.5,
                1 / 3,
                1e10,
                -1e10,
                2.0**24 + 2,
            ]
        ),
    )
    x32 = np.concatenate([x, sx.ravel()]).astype(np.float32)
    y32 = np.concatenate([y, sy.ravel()]).astype(np.float32)
    got = kernels()("pow", width, x32, y32)
    ref = reference("pow", x32, y32)
    err = ulp_error(got, ref)
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUND["pow"], (x32[worst], y32[worst], got[worst], ref[worst])
    # signed zeros and infinities must match exactly
    with np.errstate(all="ignore"):
        ref32 = ref.astype(np.float32)
    zero_or_inf = (ref32 == 0) | np.isinf(ref32)
    assert (np.signbit(got[zero_or_inf]) == np.signbit(ref32[zero_or_inf])).all()


def test_emitters_reject_bad_input() -> None:
    """Unknown ops and non-float32 operands are errors at emission time."""
    module = ir.Module()
    fn, b = new_function(module, "f", [("x", I64)])
    with pytest.raises(TypeError, match="float"):
        emit_unary(b, "exp", fn.args[0])
    fval = ir.Constant(F32, 1.0)
    with pytest.raises(KeyError, match="unknown op"):
        emit_unary(b, "nope", fval)
    with pytest.raises(TypeError, match="differ"):
        emit_pow(b, fval, ir.Constant(ir.VectorType(F32, 4), [1.0] * 4))


def test_loops_vectorize() -> None:
    """The scalar loop of every op is widened by LLVM's loop vectorizer, with no call left in a
    widened block (the AVX-512 ``tanh``'s vector variant is inlined there; its scalar function is
    called only by the scalar remainder)."""
    from asyncjit.codegen._target import emit_assembly

    module = ir.Module("vec_check")
    for op in ("exp", "tanh", "sin"):
        fn, b = new_function(
            module,
            f"v_{op}",
            [("x", PTR), ("out", PTR), ("n", I64)],
            linkage="external",
            noalias=("x", "out"),
        )
        x, out, n = fn.args
        with for_range(b, i64(0), n) as i:
            v = b.load(b.gep(x, [i], source_etype=F32), typ=F32, align=4)
            b.store(emit_unary(b, op, v), b.gep(out, [i], source_etype=F32), align=4)
        b.ret_void()
    asm = emit_assembly(str(module))
    assert "ymm" in asm or "zmm" in asm
    blocks = re.split(r"\n(?=[.\w$]+:)", asm)
    widened = [blk for blk in blocks if re.search(r"v\w+ps\s.*%[yz]mm", blk)]
    assert widened
    assert not [blk for blk in widened if "call" in blk]
    if not lut_chosen():
        assert "call" not in asm


def _lut_numpy(table: npt.NDArray[np.float32], x: F32Array) -> F32Array:
    """``_mathlut``'s evaluation in numpy (each FMA exact in float64, rounded once)."""
    from asyncjit.codegen._mathlut import LUT_BASE

    a = np.minimum(np.abs(x), np.float32(16.0))
    j = np.clip((a.view(np.uint32).astype(np.int64) >> 22) - LUT_BASE, 0, 31)
    t = (a - table[0][j]).astype(np.float32)
    acc = table[-1][j]
    for k in range(table.shape[0] - 2, 0, -1):
        acc = (acc.astype(np.float64) * t + table[k][j]).astype(np.float32)
    return np.copysign(acc, x).astype(np.float32)


@pytest.mark.parametrize(("op", "bound"), [("tanh", ("ulp", 1.5)), ("erf", ("abs", 1e-7))])
def test_lut_table_is_what_its_procedure_fits_and_every_path_gives_the_same_bits(
    op: str, bound: tuple[str, float]
) -> None:
    """The shipped table and a fresh ``fit_table()`` both evaluate within the bound (numpy, 200k
    points), with the same interval centres; on an AVX-512 host the scalar function, the 16-lane
    variant, 8 lanes through the scalar function and a widened loop with its scalar remainder all
    give the same bits for the same input, equal to the numpy evaluation."""
    from asyncjit.codegen._mathlut import fit_table, lut_table

    shipped, fitted = lut_table(op), fit_table(op)
    np.testing.assert_array_equal(fitted[0], shipped[0])
    rng = np.random.default_rng(21)
    x = np.concatenate([rng.uniform(-12, 12, 150000), np.exp(rng.uniform(-30, 2.6, 50000))]).astype(
        np.float32
    )
    ref = reference(op, x)
    kind, limit = bound
    for table in (shipped, fitted):
        got = _lut_numpy(table, x)
        err = ulp_error(got, ref) if kind == "ulp" else abs_error(got, ref)
        assert err.max() <= limit
    if not lut_chosen():
        pytest.skip("the table-driven functions are chosen on AVX-512 hosts only")
    k = kernels()
    want = _lut_numpy(shipped, x)
    for width in WIDTHS:
        np.testing.assert_array_equal(k(op, width, x), want)
    for n in (1, 7, 16, 17, 63, 64, 65, 100):  # remainders of the widened loop
        np.testing.assert_array_equal(k(op, 1, x[:n]), want[:n])


def test_a_plan_with_the_tables_compiles_for_cpus_without_avx512() -> None:
    """An AOT bundle of a plan using ``tanh``/``erf`` compiled here for older CPUs: the tables'
    AVX-512 permute (which LLVM cannot select for them: it aborted the process) becomes plain
    IR, and every payload computes the same functions (within an ulp: FMA contraction differs
    without FMA). A CPU named otherwise than a psABI level gets the plain IR too."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile
    from asyncjit.compiler._bundle import build_bundle, bundle_info, host_cpu, load_bundle, without_cpu

    x = Tensor.placeholder((300,), np.float32, "x")
    exe = compile(x.tanh() * 3.0 + x.erf(), [x], cache_dir="off")
    cpus = ["x86-64-v2", "x86-64", "x86-64-v4"]
    data = build_bundle(exe, ["native", *cpus, "haswell"])  # haswell runs on no host but its own
    assert bundle_info(data).cpus == (host_cpu(), *cpus, "haswell")
    xv = np.concatenate([np.linspace(-13, 13, 280), [0.0, -0.0, 1e-30, 6.0, np.inf, -np.inf]]).astype(
        np.float32
    )
    xv = np.concatenate([xv, np.zeros(300 - xv.size, np.float32)])
    ref = 3.0 * reference("tanh", xv) + reference("erf", xv)
    host = exe.run([xv])[0]
    dropped: list[str] = [host_cpu()]
    for cpu in cpus:
        if cpu == "x86-64-v4" and not lut_chosen():
            continue  # this host cannot run an AVX-512 payload
        loaded = load_bundle(without_cpu(data, dropped))
        assert loaded.chosen_payload == cpu
        got = loaded.run([xv])[0]
        np.testing.assert_allclose(got, ref, rtol=3e-7, atol=3e-7)
        np.testing.assert_allclose(got, host, rtol=2.5e-7, atol=2.5e-7)
        dropped.append(cpu)


def test_a_bundle_compiled_on_a_device_without_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle whose payloads do not run on this host is compiled on it from the building
    host's IR: on a host without AVX-512 (simulated: its features as x86-64-v3's) the tables'
    permute is made plain IR first, as for a payload of such a CPU."""
    from asyncjit import Tensor
    from asyncjit.compiler import _bundle, _cache, compile
    from asyncjit.compiler._bundle import PSABI, build_bundle, load_bundle

    x = Tensor.placeholder((64,), np.float32, "x")
    exe = compile(x.tanh(), [x], cache_dir="off")
    data = build_bundle(exe, ["native"])
    compiled: list[str] = []
    real = _cache.get_code

    def spy(ir_text: str, name: str) -> object:
        compiled.append(ir_text)
        return real(ir_text, name)

    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")
    monkeypatch.setattr(_bundle, "host_cpu", lambda: "an-older-cpu")
    monkeypatch.setattr(_bundle, "_host_features", lambda: set(PSABI["x86-64-v3"]) | {"sse", "sse2"})
    monkeypatch.setattr(_cache, "get_code", spy)
    loaded = load_bundle(data)
    assert loaded.chosen_payload == "on-device"
    (ir_text,) = compiled
    from asyncjit.codegen._mathlut import PERMUTE

    assert PERMUTE not in ir_text or not lut_chosen()
    xv = np.linspace(-9, 9, 64).astype(np.float32)
    np.testing.assert_allclose(loaded.run([xv])[0], np.tanh(xv), rtol=3e-7, atol=3e-7)
