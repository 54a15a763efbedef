"""Codegen and the CPU executable: one compile per plan, checks before native code, semantics corners."""

from __future__ import annotations

import re

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.codegen._target import emit_assembly
from asyncjit.compiler import ReferenceExecutable, compile, compile_stats, deserialize
from asyncjit.errors import CompileError, DTypeMismatchError, ShapeMismatchError, VarBoundsError


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def _chain(t: Var) -> tuple[Tensor, Tensor]:
    x = Tensor.placeholder((t, 16), name="x")
    return x, ((x * 1.5 + 0.25).tanh() - x.abs()).maximum(x * 0.5)


def test_one_compile_serves_fifty_bindings() -> None:
    """A var bound to 50 values: exactly one cold compile, every result equals the reference."""
    t = Var("t", 1, 200)
    x, y = _chain(t)
    compile_stats(reset=True)
    exe = compile(y, [x])
    rng = np.random.default_rng(0)
    for tv in range(1, 200, 4):
        xv = rng.standard_normal((tv, 16)).astype(np.float32)
        (got,) = exe.run([xv], {"t": tv})
        np.testing.assert_allclose(got, reference.evaluate(y, {x: xv}, {"t": tv}), rtol=1e-5, atol=1e-5)
    assert compile_stats().cold_compiles == 1
    assert compile(y, [x]) is exe  # same plan key -> same executable, a memory hit
    assert compile_stats().memory_hits >= 1


def test_bad_inputs_raise_typed_errors() -> None:
    """Vars out of bounds or unknown, wrong shapes, dtypes or counts: typed errors, no native call."""
    t = Var("t", 2, 8)
    x, y = _chain(t)
    exe = compile(y, [x])
    good = np.ones((4, 16), np.float32)
    with pytest.raises(VarBoundsError):
        exe.run([np.ones((1, 16), np.float32)], {"t": 1})
    with pytest.raises(VarBoundsError):
        exe.run([np.ones((9, 16), np.float32)], {"t": 9})
    with pytest.raises(VarBoundsError):
        exe.run([good], {"t": 4, "nope": 1})
    with pytest.raises(ShapeMismatchError):
        exe.run([good], {"t": 5})
    with pytest.raises(ShapeMismatchError):
        exe.run([np.ones((4, 15), np.float32)], {"t": 4})
    with pytest.raises(DTypeMismatchError):
        exe.run([good.astype(np.float64)], {"t": 4})
    with pytest.raises(DTypeMismatchError):
        exe.run([good.astype(np.int32)], {"t": 4})
    with pytest.raises(ShapeMismatchError):
        exe.run([good, good], {"t": 4})


def test_non_contiguous_inputs_are_copied() -> None:
    """Strided and transposed numpy views give the same result as their contiguous copies."""
    t = Var("t", 1, 32)
    x, y = _chain(t)
    exe = compile(y, [x])
    base = np.random.default_rng(1).standard_normal((16, 20)).astype(np.float32)
    view = base.T[::2]  # (10, 16), non-contiguous
    (got,) = exe.run([view], {"t": 10})
    (want,) = exe.run([np.ascontiguousarray(view)], {"t": 10})
    np.testing.assert_array_equal(got, want)


def test_kernel_names_ir_and_vectorized_loop() -> None:
    """Kernels have recognisable names, the IR is kept, and the fused loop uses packed SIMD."""
    t = Var("t", 1, 4096)
    x = Tensor.placeholder((t,), name="x")
    y = ((x * 2.0 + 1.0) * x - 3.0).sum()
    exe = compile(y, [x], name="chain")
    assert any(re.fullmatch(r"k\d+_reduce_\w*sum", k) for k in exe.kernel_names), exe.kernel_names
    assert "define void @plan(ptr" in exe.ir_text
    asm = emit_assembly(exe.ir_text)
    assert re.search(r"\bv?(add|mul|fmadd\w*)ps\b", asm)


def test_integer_division_and_casts_never_trap() -> None:
    """idiv/mod by zero give 0, INT_MIN // -1 wraps, float->int casts saturate: like the reference."""
    a = Tensor.placeholder((6,), "int32", name="a")
    b = Tensor.placeholder((6,), "int32", name="b")
    f = Tensor.placeholder((4,), "float32", name="f")
    outs = [a // b, a % b, f.cast("int32")]
    exe = compile(outs, [a, b, f])
    av = np.array([7, -7, 5, np.iinfo(np.int32).min, 0, 3], np.int32)
    bv = np.array([2, 2, 0, -1, 0, -2], np.int32)
    fv = np.array([np.nan, 1e20, -1e20, -2.5], np.float32)
    got = exe.run([av, bv, fv])
    want = reference.evaluate(outs, {a: av, b: bv, f: fv})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_gather_clamps_and_scatter_drops_out_of_range() -> None:
    """Data-steered indices never leave the buffer."""
    x = Tensor.placeholder((5, 3), name="x")
    idx = Tensor.placeholder((4,), "int64", name="idx")
    src = Tensor.placeholder((5, 4), name="src")
    outs = [x.gather(0, idx), Tensor.zeros((5, 8)).scatter(1, idx, src)]
    exe = compile(outs, [x, idx, src])
    xv = np.arange(15, dtype=np.float32).reshape(5, 3)
    iv = np.array([-100, 2, 99, 7], np.int64)
    sv = np.arange(20, dtype=np.float32).reshape(5, 4)
    got = exe.run([xv, iv, sv])
    want = reference.evaluate(outs, {x: xv, idx: iv, src: sv})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("reduce", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "bool"])
def test_scatter_reductions_combine_repeated_indices(reduce: str, dtype: str) -> None:
    """A reducing scatter folds every write into its target in index order, as np.<ufunc>.at does."""
    x = Tensor.placeholder((5, 3), dtype, name="x")
    idx = Tensor.placeholder((6,), "int64", name="idx")
    src = Tensor.placeholder((6, 3), dtype, name="src")
    out = x.scatter(0, idx, src, reduce)
    exe = compile(out, [x, idx, src])
    rng = np.random.default_rng(3)
    xv = rng.integers(0, 4, (5, 3)).astype(dtype)
    sv = rng.integers(0, 4, (6, 3)).astype(dtype)
    iv = np.array([1, 3, 1, 9, -1, 1], np.int64)  # repeats; 9 and -1 are dropped
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduce]
    want = xv.copy()
    ufunc.at(want, iv[:4][iv[:4] < 5], sv[[0, 1, 2]])
    ufunc.at(want, [1], sv[[5]])
    (got,) = exe.run([xv, iv, sv])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(reference.evaluate(out, {x: xv, idx: iv, src: sv}), want)


def test_scatter_rejects_an_unknown_reduction() -> None:
    """The reduction is checked when the node is made."""
    with pytest.raises(ValueError, match="scatter: reduce must be one of"):
        Tensor.zeros((3,)).scatter(0, Tensor.const(np.array([0], np.int64)), Tensor.ones((1,)), "mean")


def test_fixed_vars_are_refined_away() -> None:
    """``fixed`` specialises a var; run accepts the fixed value and rejects any other."""
    t = Var("t", 1, 64)
    x, y = _chain(t)
    exe = compile(y, [x], fixed={"t": 5})
    assert exe.signature.var_names == ()
    xv = np.ones((5, 16), np.float32)
    (got,) = exe.run([xv], {"t": 5})
    np.testing.assert_allclose(got, reference.evaluate(y, {x: xv}, {"t": 5}), rtol=1e-6)
    with pytest.raises(VarBoundsError):
        exe.run([xv], {"t": 6})
    with pytest.raises(VarBoundsError):
        compile(y, [x], fixed={"t": 65})


def test_serialize_roundtrip_and_corruption() -> None:
    """``deserialize(serialize())`` runs the same; a flipped byte or truncation is a CompileError."""
    t = Var("t", 1, 16)
    x = Tensor.placeholder((t, 4), name="x")
    w = Tensor.const(np.arange(12, dtype=np.float32).reshape(4, 3))
    y = (x @ w).relu()
    exe = compile(y, [x])
    data = exe.serialize()
    back = deserialize(data)
    xv = np.random.default_rng(2).standard_normal((7, 4)).astype(np.float32)
    np.testing.assert_array_equal(back.run([xv], {"t": 7})[0], exe.run([xv], {"t": 7})[0])
    assert back.signature.inputs == exe.signature.inputs
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF
    with pytest.raises(CompileError):
        deserialize(bytes(corrupt))
    with pytest.raises(CompileError):
        deserialize(data[:-10])
    with pytest.raises(CompileError):
        deserialize(b"not an executable at all, clearly")


def test_reference_executable_launcher_uses_raw_addresses() -> None:
    """The reference device's executable reads and writes memory through addresses."""
    t = Var("t", 1, 8)
    x, y = _chain(t)
    exe = ReferenceExecutable([y], [x])
    xv = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    out = np.zeros((3, 16), np.float32)
    values = exe.signature.var_values({"t": 3})
    exe.signature.validate([xv.shape], [exe.signature.inputs[0].dtype], values)
    exe.launcher()([xv.ctypes.data, out.ctypes.data], values)
    np.testing.assert_array_equal(out, reference.evaluate(y, {x: xv}, {"t": 3}))


def test_launcher_replays_with_changed_slots() -> None:
    """The bare launcher: new addresses and var values take effect on the next call."""
    t = Var("t", 1, 8)
    x, y = _chain(t)
    exe = compile(y, [x])
    lau = exe.launcher()
    for tv in (2, 5, 5, 3):
        xv = np.full((tv, 16), float(tv), np.float32)
        out = np.empty((tv, 16), np.float32)
        lau([xv.ctypes.data, out.ctypes.data], (tv,))
        np.testing.assert_allclose(out, reference.evaluate(y, {x: xv}, {"t": tv}), rtol=1e-6)


def test_ir_is_deterministic_across_compile_history() -> None:
    """The same graph gives the same IR (and code key) whatever was compiled before it."""
    t = Var("t", 1, 9)

    def build() -> tuple[Tensor, Tensor]:
        x = Tensor.placeholder((t, 4), name="x")
        return x, x.reshape(4, t).permute(1, 0).pad(((1, 2), (0, 1))) * 2.0

    xa, ya = build()
    first = compile(ya, [xa], name="a")
    z = Tensor.placeholder((t, 3), name="z")
    compile((z.reshape(3, t).T + 1.0).sum(), [z])
    xb, yb = build()
    second = compile(yb, [xb], name="b")
    assert second is not first
    assert second.ir_text == first.ir_text and second.code_key == first.code_key


@pytest.mark.parametrize("offset", [0, 4, 60, 2])
def test_streaming_store_path_matches_plain_loop(offset: int) -> None:
    """Big outputs take the non-temporal path (aligned head, 16-lane blocks, tail); small ones don't.

    ``offset`` shifts the output address: 4 and 60 exercise the scalar head, 2 (not float-aligned)
    must fall back to the plain loop.
    """
    from asyncjit.codegen._stream import STREAM_BYTES

    big = STREAM_BYTES // 4 + 1237
    t = Var("t", 1, big)
    x = Tensor.placeholder((t,), name="x")
    y = ((x * 1.5 + 0.5).maximum(x) - 0.25).abs()
    exe = compile(y, [x])
    lau = exe.launcher()
    for n in (big, big - 3, 1000):
        xv = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        raw = np.zeros(n * 4 + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + offset
        lau([xv.ctypes.data, raw.ctypes.data + start], (n,))
        got = (
            raw[start : start + 4 * n].view(np.float32)
            if offset % 4 == 0
            else np.frombuffer(raw[start : start + 4 * n].tobytes(), np.float32)
        )
        np.testing.assert_allclose(got, np.abs(np.maximum(xv * 1.5 + 0.5, xv) - 0.25), rtol=1e-6, atol=1e-6)
        assert not raw[:start].any() and not raw[start + 4 * n :].any()  # nothing written outside


@pytest.mark.parametrize("m", [1, 5, 8, 40])
def test_matmul_reads_transposed_operands_in_place(m: int) -> None:
    """``a @ w.T`` and batched ``x @ y.transpose()`` read the untransposed buffers through
    strides: no transposed copy is made, and the results equal numpy's."""
    import asyncjit

    rng = np.random.default_rng(m)
    b = Var("b", 1, 64)
    a = Tensor.placeholder((b, 24), asyncjit.float32, name="a")
    w = Tensor.placeholder((33, 24), asyncjit.float32, name="w")
    exe = compile(a @ w.T, [a, w], [b], name="mm_t")
    assert not any("permute" in k for k in exe.kernel_names), exe.kernel_names
    av = rng.standard_normal((m, 24)).astype(np.float32)
    wv = rng.standard_normal((33, 24)).astype(np.float32)
    np.testing.assert_allclose(exe.run([av, wv], {"b": m})[0], av @ wv.T, rtol=1e-5, atol=1e-5)

    x = Tensor.placeholder((3, 20, m), asyncjit.float32, name="x")
    y = Tensor.placeholder((3, 17, 20), asyncjit.float32, name="y")
    exe2 = compile(x.transpose() @ y.transpose(), [x, y], name="mm_tt")
    assert not any("permute" in k for k in exe2.kernel_names), exe2.kernel_names
    xv = rng.standard_normal((3, 20, m)).astype(np.float32)
    yv = rng.standard_normal((3, 17, 20)).astype(np.float32)
    want = np.swapaxes(xv, 1, 2) @ np.swapaxes(yv, 1, 2)
    np.testing.assert_allclose(exe2.run([xv, yv])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bsz", [1, 3, 40])
def test_matmul_reads_batch_broadcast_operands_in_place(bsz: int) -> None:
    """A matrix broadcast over the batch (``x[B, M, K] @ w[K, N]``, ``w.T``, ``a[M, K] @ y[B, K, N]``,
    several batch axes) is read with batch stride 0: the ``B`` copies of it are never written,
    and the results equal numpy's at every batch size of one compile."""
    import asyncjit

    rng = np.random.default_rng(bsz)
    b = Var("b", 1, 64)
    x = Tensor.placeholder((b, 7, 24), asyncjit.float32, name="x")
    w = Tensor.placeholder((24, 33), asyncjit.float32, name="w")
    wt = Tensor.placeholder((33, 24), asyncjit.float32, name="wt")
    y = Tensor.placeholder((b, 24, 5), asyncjit.float32, name="y")
    a = Tensor.placeholder((7, 24), asyncjit.float32, name="a")
    x4 = Tensor.placeholder((2, b, 3, 24), asyncjit.float32, name="x4")
    outs = [(x @ w).relu(), x @ wt.T, a @ y, x4 @ w]
    exe = compile(outs, [x, w, wt, y, a, x4], [b], name="mm_bcast")
    assert not any("expand" in k or "permute" in k for k in exe.kernel_names), exe.kernel_names
    assert sum("matmul" in k for k in exe.kernel_names) == 4, exe.kernel_names
    vals = [
        rng.standard_normal(s).astype(np.float32)
        for s in ((bsz, 7, 24), (24, 33), (33, 24), (bsz, 24, 5), (7, 24), (2, bsz, 3, 24))
    ]
    xv, wv, wtv, yv, av, x4v = vals
    wants = [np.maximum(xv @ wv, 0), xv @ wtv.T, av @ yv, x4v @ wv]
    for got, want in zip(exe.run(vals, {"b": bsz}), wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5])
def test_matmul_operand_that_is_also_an_output(rows: int) -> None:
    """An operand read through strides (a transpose, a batch broadcast of a reshaped matrix) that
    is itself an output, or has a materialized step in between, has a buffer of its own; the
    matmul still reads the source it was made from (a [1, 1] transpose that was also returned
    once failed to compile: the matmul looked for the source among the operand's buffers)."""
    import asyncjit

    rng = np.random.default_rng(rows)
    a = Tensor.placeholder((rows, rows), asyncjit.float32, name="a")
    c = Tensor.placeholder((rows, 3), asyncjit.float32, name="c")
    x = Tensor.placeholder((2, 4, 6), asyncjit.float32, name="x")
    w = Tensor.placeholder((12,), asyncjit.float32, name="w")
    t = a.permute(1, 0)
    w2 = w.reshape(6, 2)
    wb = w2.reshape(1, 6, 2).expand(2, 6, 2)
    outs = [t, t @ c, w2, wb, x @ wb]
    exe = compile(outs, [a, c, x, w], name="mm_operand_outputs")
    av, cv, xv, wv = (
        rng.standard_normal(s).astype(np.float32) for s in ((rows, rows), (rows, 3), (2, 4, 6), (12,))
    )
    wants = [
        av.T,
        av.T @ cv,
        wv.reshape(6, 2),
        np.broadcast_to(wv.reshape(6, 2), (2, 6, 2)),
        xv @ wv.reshape(6, 2),
    ]
    for got, want in zip(exe.run([av, cv, xv, wv]), wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "axes", "op"),
    [
        ((37, 1000), (0,), "sum"),
        ((5, 7, 40), (0, 1), "max"),
        ((6, 9, 33), (1,), "min"),
        ((3, 4, 517), (0,), "prod"),
        ((64, 16), (0,), "sum"),
        ((3, 4100), (0,), "sum"),  # two accumulator blocks, the second partial
        ((9, 20), (0,), "sum"),  # rows combined four at a time, then one left over
        ((7, 3, 20), (0, 1), "prod"),  # the innermost reduced axis shorter than four
        ((2, 8, 3, 24), (1, 2), "sum"),  # an outer kept axis, two reduced ones
    ],
)
def test_reductions_keeping_the_last_axis_read_rows(
    shape: tuple[int, ...], axes: tuple[int, ...], op: str
) -> None:
    """A reduction over leading axes accumulates row blocks (``_reduce_rows``): equal to numpy,
    with the same per-element order as the plain loop, for static and bounded shapes and ints."""
    rng = np.random.default_rng(len(shape) + sum(shape))
    t = Var("t", 1, shape[0] + 3)
    for dims, bind in ((shape, {}), ((t, *shape[1:]), {"t": shape[0]})):
        x = Tensor.placeholder(dims, name="x")
        y = getattr(x, op)(axis=axes)
        exe = compile(y, [x])
        xv = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        (got,) = exe.run([xv], bind)
        np.testing.assert_allclose(got, getattr(np, op)(xv, axis=axes), rtol=1e-5)
        if op in ("sum", "prod"):  # float64 accumulators, combined in the reduced axes' order
            kept = [d for i, d in enumerate(shape) if i not in axes]
            rows = np.moveaxis(xv, axes, range(len(axes))).reshape(-1, *kept)
            acc = np.full(rows.shape[1:], 0.0 if op == "sum" else 1.0)
            for r in rows:
                acc = acc + r if op == "sum" else acc * r
            np.testing.assert_array_equal(got.reshape(acc.shape), acc.astype(np.float32))
    xi = Tensor.placeholder(shape, dtype="int32", name="xi")
    exe = compile(xi.sum(axis=axes), [xi])
    iv = rng.integers(-1000, 1000, shape).astype(np.int32)
    (got,) = exe.run([iv], {})
    np.testing.assert_array_equal(got, iv.sum(axis=axes, dtype=np.int32))
    asm = emit_assembly(exe.ir_text() if callable(exe.ir_text) else exe.ir_text)
    assert re.search(r"vpadd[dq]\s+.*[yz]mm", asm), "the row loop is not vectorised"


@pytest.mark.parametrize(
    ("shape", "axes", "op", "dtype"),
    [
        ((2, 1000, 13, 13), (2, 3), "sum", "float32"),  # a global average pool's sum
        ((3, 5, 7, 9), (3, 1, 2), "max", "float32"),  # unordered axes, three of them
        ((4, 6, 1, 11), (2, 3), "min", "float16"),  # an axis of extent 1 in the run
        ((2, 3, 5, 4), (1, 2, 3), "prod", "float64"),
        ((3, 8, 5, 6), (2, 3), "sum", "int32"),
        ((2, 3, 0, 4), (2, 3), "sum", "float32"),  # an empty run: the identity
    ],
)
def test_reductions_over_the_trailing_axes_of_a_buffer(
    shape: tuple[int, ...], axes: tuple[int, ...], op: str, dtype: str
) -> None:
    """Reduced trailing axes of a buffer are one contiguous run per output element, read in one
    loop: equal to numpy and to the reference interpreter (exactly, but for float64 products
    within 1e-12), for static and bounded shapes, kept dims or not, and an empty run."""
    rng = np.random.default_rng(sum(shape))
    t = Var("t", 1, shape[-1] + 3)
    for dims, bind in ((shape, {}), ((*shape[:-1], t), {"t": shape[-1]})):
        if shape[-1] == 0 and bind:
            continue
        x = Tensor.placeholder(dims, dtype=dtype, name="x")
        y = getattr(x, op)(axis=axes, keepdims=op == "sum")
        exe = compile(y, [x])
        xv = (rng.uniform(0.5, 1.5, shape) * (9 if dtype == "int32" else 1)).astype(dtype)
        (got,) = exe.run([xv], bind)
        ref = getattr(np, op)(xv.astype(np.float64), axis=axes, keepdims=op == "sum")
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3 if dtype == "float16" else 1e-6)
        if not bind:  # the reference interpreter's float64 accumulation, rounded once
            (want,) = reference.evaluate([y], {x: xv})
            np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == "float64" else 0)
