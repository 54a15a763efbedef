"""Differential tests of the matmul and conv1d emitters against numpy (float64 references).

Compiling is the expensive part (~0.5 s per module with a matmul), so kernels are compiled once
per session: one dynamic matmul, a few static specialisations, and one module holding a fixed
set of conv1d configurations that hypothesis then drives with random N and L.  Writes outside
the output extents are caught with NaN canaries around every output; reads outside the input
extents are caught by guard pages in a subprocess (a fault there fails that test, not pytest).
"""

from __future__ import annotations

import ctypes
import functools
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llvmlite import ir

from asyncjit.codegen._conv import _use_direct, conv1d_output_length, conv1d_scratch_bytes, emit_conv1d
from asyncjit.codegen._matmul import emit_matmul, matmul_scratch_bytes
from asyncjit.codegen._target import (
    I64,
    PTR,
    LoadedObject,
    compile_to_object,
    load_object,
    new_function,
)

F32Array = npt.NDArray[np.float32]
CANARY = 16  # elements of NaN before and after every output buffer


def _add_entry(module: ir.Module, entry: str, kernel: ir.Function) -> None:
    """External ``void entry(i64* args)`` that unpacks one slot per kernel argument."""
    fn, b = new_function(module, entry, [("args", PTR)], linkage="external")
    vals = []
    for i, arg in enumerate(kernel.args):
        v = b.load(b.gep(fn.args[0], [ir.Constant(I64, i)], source_etype=I64), typ=I64)
        vals.append(b.inttoptr(v, PTR) if arg.type == PTR else v)
    b.call(kernel, vals)
    b.ret_void()


class Compiled:
    """A loaded module and one-pointer callables for its entry points."""

    def __init__(self, module: ir.Module) -> None:
        self.ir = str(module)
        self.obj: LoadedObject = load_object(compile_to_object(self.ir))

    def call(self, entry: str, args: list[int]) -> None:
        fn = self.obj.cfunc(entry, None, ctypes.c_void_p)
        block = np.array(args, dtype=np.int64)
        fn(block.ctypes.data)


@functools.cache
def matmul_module(m: int | None = None, n: int | None = None, k: int | None = None) -> Compiled:
    module = ir.Module(f"test_matmul_{m}_{n}_{k}")
    _add_entry(module, "entry", emit_matmul(module, "asyncjit.test.matmul", m=m, n=n, k=k))
    return Compiled(module)


def _with_canary(shape: tuple[int, ...]) -> tuple[F32Array, F32Array]:
    size = int(np.prod(shape))
    buf = np.full(size + 2 * CANARY, np.nan, dtype=np.float32)
    return buf, buf[CANARY : CANARY + size].reshape(shape)


def _assert_canary(buf: F32Array) -> None:
    assert np.isnan(buf[:CANARY]).all() and np.isnan(buf[-CANARY:]).all(), "kernel wrote outside C"


def run_matmul(
    compiled: Compiled,
    a: F32Array,
    b: F32Array,
    *,
    batch: int,
    m: int,
    n: int,
    k: int,
    a_strides: tuple[int, int, int],
    b_strides: tuple[int, int, int],
) -> F32Array:
    cbuf, c = _with_canary((batch, m, n))
    scratch = np.zeros(matmul_scratch_bytes(m, n, k), dtype=np.uint8)
    compiled.call(
        "entry",
        [
            a.ctypes.data,
            b.ctypes.data,
            c.ctypes.data,
            scratch.ctypes.data,
            batch,
            m,
            n,
            k,
            *a_strides,
            *b_strides,
            m * n,
            n,
        ],
    )
    _assert_canary(cbuf)
    return c


def reference_matmul(
    a: F32Array,
    b: F32Array,
    *,
    batch: int,
    m: int,
    n: int,
    k: int,
    a_strides: tuple[int, int, int],
    b_strides: tuple[int, int, int],
) -> npt.NDArray[np.float64]:
    av = np.lib.stride_tricks.as_strided(a, (batch, m, k), tuple(s * 4 for s in a_strides), writeable=False)
    bv = np.lib.stride_tricks.as_strided(b, (batch, k, n), tuple(s * 4 for s in b_strides), writeable=False)
    return np.asarray(np.matmul(av.astype(np.float64), bv.astype(np.float64)), dtype=np.float64)


LAYOUTS = ["nn", "nt", "tn", "tt", "bcast_a", "bcast_b", "padded"]


def make_operands(
    rng: np.random.Generator, layout: str, batch: int, m: int, n: int, k: int
) -> tuple[F32Array, F32Array, tuple[int, int, int], tuple[int, int, int]]:
    """Operands of one layout; strides are in elements (batch, row, column)."""

    def buf(size: int) -> F32Array:
        return rng.standard_normal(max(size, 1)).astype(np.float32)

    a_t = layout in ("tn", "tt")
    b_t = layout in ("nt", "tt")
    if layout == "padded":  # row strides larger than the row length
        a = buf(batch * m * (k + 3))
        b = buf(batch * k * (n + 5))
        return a, b, (m * (k + 3), k + 3, 1), (k * (n + 5), n + 5, 1)
    a = buf((1 if layout == "bcast_a" else batch) * m * k)
    b = buf((1 if layout == "bcast_b" else batch) * k * n)
    a_bs = 0 if layout == "bcast_a" else m * k
    b_bs = 0 if layout == "bcast_b" else k * n
    a_s = (a_bs, 1, m) if a_t else (a_bs, k, 1)
    b_s = (b_bs, 1, k) if b_t else (b_bs, n, 1)
    return a, b, a_s, b_s


def check_matmul(compiled: Compiled, layout: str, batch: int, m: int, n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b, a_s, b_s = make_operands(rng, layout, batch, m, n, k)
    got = run_matmul(compiled, a, b, batch=batch, m=m, n=n, k=k, a_strides=a_s, b_strides=b_s)
    ref = reference_matmul(a, b, batch=batch, m=m, n=n, k=k, a_strides=a_s, b_strides=b_s)
    tol = 2e-6 * k + 1e-6
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.sqrt(k))


SIZES = st.one_of(st.integers(1, 40), st.sampled_from([1, 2, 3, 7, 8, 9, 13, 16, 17, 31, 32, 33, 61, 67, 97]))


class TestMatmul:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        layout=st.sampled_from(LAYOUTS),
        batch=st.integers(1, 3),
        m=SIZES,
        n=SIZES,
        k=SIZES,
        seed=st.integers(0, 2**31),
    )
    def test_random_shapes_and_strides(
        self, layout: str, batch: int, m: int, n: int, k: int, seed: int
    ) -> None:
        """Every layout (transposed, broadcast batch, padded rows) matches float64 numpy."""
        check_matmul(matmul_module(), layout, batch, m, n, k, seed)

    @pytest.mark.parametrize(
        ("m", "n", "k"),
        [
            (1, 1, 1),
            (1, 512, 300),
            (13, 530, 200),
            (40, 700, 200),
            (40, 700, 600),
            (33, 90, 20),
            (130, 128, 40),
            (17, 40, 300),
            (70, 45, 600),
            (130, 37, 9),
            (64, 2100, 3),
            (9, 33, 1),
            (200, 49, 300),
            (100, 57, 40),
            (70, 8, 50),
            (65, 16, 300),
            (1, 1025, 1024),  # a few rows over a large B: K blocks of GEMV_KC rows
            (3, 1000, 1100),
            (6, 37, 70),  # "nt": the dot driver's 4x4 tiles, then 2x4 for two rows left
            (7, 37, 70),  # ... then a 4x4 tile for three rows left
        ],
    )
    @pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
    def test_block_boundaries(self, layout: str, m: int, n: int, k: int) -> None:
        """Shapes that cross the KC/MC/NC cache blocks, the direct driver's column and K blocks
        (both loop orders, and the few-row K blocks over a large B), every driver (direct, dot,
        packed) and the packed driver's last panels of at most NR/2 columns (half-width tiles)
        and of more."""
        check_matmul(matmul_module(), layout, 2, m, n, k, seed=m * n + k)

    @pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 64), (5, 33, 17), (24, 128, 96)])
    def test_static_specialisation_matches_dynamic(self, m: int, n: int, k: int) -> None:
        """Static m/n/k give the same numbers as the dynamic kernel."""
        static = matmul_module(m, n, k)
        partial = matmul_module(None, n, k)
        for layout in ("nn", "nt"):
            rng = np.random.default_rng(0)
            a, b, a_s, b_s = make_operands(rng, layout, 2, m, n, k)
            outs = [
                run_matmul(c, a, b, batch=2, m=m, n=n, k=k, a_strides=a_s, b_strides=b_s)
                for c in (static, partial, matmul_module())
            ]
            np.testing.assert_allclose(outs[0], outs[2], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(outs[1], outs[2], rtol=1e-5, atol=1e-5)

    def test_k_zero_overwrites_with_zeros(self) -> None:
        """K = 0 is an empty sum: C is overwritten with zeros, nothing else is touched."""
        a = np.zeros(1, np.float32)
        got = run_matmul(
            matmul_module(), a, a, batch=2, m=3, n=5, k=0, a_strides=(0, 0, 1), b_strides=(0, 5, 1)
        )
        assert (got == 0).all()

    def test_empty_extents_write_nothing(self) -> None:
        """M = 0 or N = 0 or batch = 0 leave C untouched."""
        cbuf = np.full(8, np.nan, np.float32)
        a = np.ones(8, np.float32)
        for batch, m, n in ((1, 0, 4), (1, 4, 0), (0, 2, 2)):
            matmul_module().call(
                "entry",
                [a.ctypes.data, a.ctypes.data, cbuf.ctypes.data, 0, batch, m, n, 2, 0, 2, 1, 0, 2, 1, 0, 2],
            )
            assert np.isnan(cbuf).all()

    def test_ir_is_inspectable(self) -> None:
        """The kernel and its helpers carry recognisable names in the IR text."""
        text = matmul_module().ir
        assert "asyncjit.test.matmul" in text
        assert "asyncjit.matmul.micro" in text and "asyncjit.matmul.pack_b" in text

    def test_bad_static_size_rejected(self) -> None:
        with pytest.raises(ValueError, match="static m"):
            emit_matmul(ir.Module(), "x", m=-1)


_GUARD_SCRIPT = textwrap.dedent(
    """
    import mmap, ctypes, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_codegen_kernels import matmul_module, make_operands, reference_matmul
    from asyncjit.codegen._matmul import matmul_scratch_bytes
    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    keep = []
    def guarded(arr):
        # copy arr so that its last element ends exactly where a PROT_NONE page begins
        nbytes = arr.nbytes
        pages = (nbytes + PAGE - 1) // PAGE + 1
        mm = mmap.mmap(-1, pages * PAGE)
        keep.append(mm)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        assert libc.mprotect(base + (pages - 1) * PAGE, PAGE, 0) == 0
        start = (pages - 1) * PAGE - nbytes
        out = np.frombuffer(mm, dtype=np.float32, count=arr.size, offset=start)
        out[:] = arr
        return out
    c = matmul_module()
    rng = np.random.default_rng(1)
    for layout in ("nn", "nt", "tn", "tt", "bcast_b"):
        shapes = [(1, 1, 1), (3, 37, 5), (9, 33, 17), (17, 45, 300), (70, 50, 40), (5, 1, 64)]
        shapes += [(5, 300, 300), (40, 700, 27)]  # the direct driver's column blocks
        shapes += [(70, 49, 40), (130, 8, 20)]  # packed, a half-width last panel
        shapes += [(2, 1030, 1021)]  # direct, K blocks of GEMV_KC rows spanning every column
        shapes += [(6, 33, 17), (7, 35, 19)]  # dot ("nt"): two and three rows after the 4x4 tiles
        for (m, n, k) in shapes:
            a, b, a_s, b_s = make_operands(rng, layout, 2, m, n, k)
            ga, gb = guarded(a), guarded(b)
            cbuf = guarded(np.zeros(2 * m * n, np.float32))
            scratch = np.zeros(matmul_scratch_bytes(m, n, k), np.uint8)
            ptrs = [ga.ctypes.data, gb.ctypes.data, cbuf.ctypes.data, scratch.ctypes.data]
            c.call("entry", [*ptrs, 2, m, n, k, *a_s, *b_s, m * n, n])
            ref = reference_matmul(a, b, batch=2, m=m, n=n, k=k, a_strides=a_s, b_strides=b_s)
            assert np.allclose(cbuf.reshape(2, m, n), ref, rtol=1e-4, atol=1e-4), (layout, m, n, k)
    print("ok")
    """
)


def test_matmul_never_reads_past_the_end() -> None:
    """Inputs and outputs end at a PROT_NONE page: any read/write past the extents faults."""
    tests_dir = str(__import__("pathlib").Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", _GUARD_SCRIPT.format(tests=tests_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


# --------------------------------------------------------------------------------------------
# conv1d
# --------------------------------------------------------------------------------------------

# (cin, cout, k, stride, dilation, groups, pad_l, pad_r); the Silero VAD layers come first.
CONV_CONFIGS: list[tuple[int, int, int, int, int, int, int, int]] = [
    (1, 258, 256, 128, 1, 1, 0, 0),
    (129, 128, 3, 1, 1, 1, 1, 1),
    (128, 64, 3, 2, 1, 1, 1, 1),
    (64, 64, 3, 2, 1, 1, 1, 1),
    (64, 128, 3, 1, 1, 1, 1, 1),
    (8, 8, 5, 1, 1, 8, 2, 2),  # depthwise
    (6, 12, 3, 1, 2, 6, 2, 2),  # depthwise, multiplier 2, dilated
    (8, 12, 3, 2, 3, 2, 4, 1),  # grouped, dilated, strided, asymmetric padding
    (12, 6, 1, 1, 1, 3, 0, 0),  # pointwise grouped (no im2col)
    (5, 7, 4, 3, 2, 1, 0, 5),
    (3, 16, 7, 1, 1, 1, 3, 3),
    (16, 16, 31, 1, 1, 16, 15, 15),  # conformer-style depthwise
    (4, 32, 2, 2, 1, 2, 0, 0),
    (2, 2, 1, 2, 1, 1, 1, 0),
]


def _im2col_config(index: int) -> bool:
    cin, cout, _k, _s, _d, groups, _pl, _pr = CONV_CONFIGS[index]
    return not _use_direct(cin // groups, cout // groups)


@functools.cache
def conv_module(kn: bool = False) -> Compiled:
    """Every configuration; ``kn``: those on the im2col path, reading ``w`` stored
    ``[cin/groups, k, cout]`` (the layout constant weights of short outputs get)."""
    module = ir.Module("test_conv1d_kn" if kn else "test_conv1d")
    for i, (cin, cout, k, stride, dilation, groups, pad_l, pad_r) in enumerate(CONV_CONFIGS):
        if kn and not _im2col_config(i):
            continue
        kern = emit_conv1d(
            module,
            f"asyncjit.test.conv{i}",
            cin=cin,
            cout=cout,
            k=k,
            stride=stride,
            dilation=dilation,
            groups=groups,
            pad_l=pad_l,
            pad_r=pad_r,
            w_kn=kn,
        )
        _add_entry(module, f"conv{i}", kern)
    return Compiled(module)


def reference_conv1d(
    x: F32Array, w: F32Array, *, stride: int, dilation: int, groups: int, pad_l: int, pad_r: int
) -> npt.NDArray[np.float64]:
    n, _cin, length = x.shape
    cout, cin_g, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad_l, pad_r)))
    lout = conv1d_output_length(length, k=k, stride=stride, dilation=dilation, pad_l=pad_l, pad_r=pad_r)
    y = np.zeros((n, cout, max(lout, 0)))
    if lout <= 0:
        return y
    cout_g = cout // groups
    for co in range(cout):
        g = co // cout_g
        for t in range(k):
            seg = xp[
                :, g * cin_g : (g + 1) * cin_g, t * dilation : t * dilation + (lout - 1) * stride + 1 : stride
            ]
            y[:, co, :] += np.einsum("ncl,c->nl", seg, w[co, :, t].astype(np.float64))
    return y


def run_conv(
    index: int, n: int, length: int, seed: int, kn: bool = False
) -> tuple[F32Array, npt.NDArray[np.float64]]:
    cin, cout, k, stride, dilation, groups, pad_l, pad_r = CONV_CONFIGS[index]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin, length)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, k)).astype(np.float32)
    lout = conv1d_output_length(length, k=k, stride=stride, dilation=dilation, pad_l=pad_l, pad_r=pad_r)
    ybuf, y = _with_canary((n, cout, max(lout, 0)))
    scratch = np.zeros(
        conv1d_scratch_bytes(
            cin=cin,
            cout=cout,
            k=k,
            stride=stride,
            dilation=dilation,
            groups=groups,
            n_max=n,
            l_max=length,
            pad_l=pad_l,
            pad_r=pad_r,
        ),
        dtype=np.uint8,
    )
    stored = np.ascontiguousarray(w.transpose(1, 2, 0)) if kn else w
    conv_module(kn).call(
        f"conv{index}",
        [x.ctypes.data, stored.ctypes.data, y.ctypes.data, scratch.ctypes.data, n, length, lout],
    )
    _assert_canary(ybuf)
    ref = reference_conv1d(x, w, stride=stride, dilation=dilation, groups=groups, pad_l=pad_l, pad_r=pad_r)
    return y, ref


def _conv_case() -> Callable[[Any], Any]:
    return given(
        index=st.integers(0, len(CONV_CONFIGS) - 1),
        n=st.integers(1, 6),
        length=st.integers(1, 300),
        seed=st.integers(0, 2**31),
    )


class TestConv1d:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @_conv_case()
    def test_random_against_reference(self, index: int, n: int, length: int, seed: int) -> None:
        """Random N, L (including outputs of length <= 0) for every configuration."""
        y, ref = run_conv(index, n, length, seed)
        k_total = CONV_CONFIGS[index][0] // CONV_CONFIGS[index][5] * CONV_CONFIGS[index][2]
        tol = 2e-6 * k_total + 1e-6
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.sqrt(k_total))

    @pytest.mark.parametrize("n", [1, 8, 64])
    @pytest.mark.parametrize(("index", "length"), [(0, 640), (1, 4), (2, 4), (3, 2), (4, 1)])
    def test_silero_vad_layers(self, index: int, length: int, n: int) -> None:
        """The VAD shapes, through both the per-sample and the concatenated matmul layouts."""
        y, ref = run_conv(index, n, length, seed=n)
        np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        index=st.sampled_from([i for i in range(len(CONV_CONFIGS)) if _im2col_config(i)]),
        n=st.integers(1, 40),
        length=st.integers(1, 300),
        seed=st.integers(0, 2**31),
    )
    def test_weight_stored_k_by_n(self, index: int, n: int, length: int, seed: int) -> None:
        """The ``[cin/groups, k, cout]`` weight (``w_kn``): the transposed product at every
        batch and length, grouped, strided, dilated, padded."""
        y, ref = run_conv(index, n, length, seed, kn=True)
        k_total = CONV_CONFIGS[index][0] // CONV_CONFIGS[index][5] * CONV_CONFIGS[index][2]
        tol = 2e-6 * k_total + 1e-6
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.sqrt(k_total))

    def test_long_output_uses_per_sample_layout(self) -> None:
        """Lout >= 32 with N > 1 goes down the batched branch."""
        y, ref = run_conv(1, 3, 100, seed=3)
        np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3)

    @pytest.mark.parametrize(
        "kwargs",
        [
            dict(cin=3, cout=4, k=3, stride=1, dilation=1, groups=2, pad_l=0, pad_r=0),
            dict(cin=4, cout=4, k=0, stride=1, dilation=1, groups=1, pad_l=0, pad_r=0),
            dict(cin=4, cout=4, k=3, stride=1, dilation=1, groups=1, pad_l=-1, pad_r=0),
        ],
    )
    def test_invalid_parameters_rejected(self, kwargs: dict[str, int]) -> None:
        with pytest.raises(ValueError, match="conv1d"):
            emit_conv1d(ir.Module(), "bad", **kwargs)

    def test_depthwise_takes_no_stored_k_by_n_weight(self) -> None:
        with pytest.raises(ValueError, match="im2col"):
            emit_conv1d(
                ir.Module(),
                "bad",
                cin=8,
                cout=8,
                k=3,
                stride=1,
                dilation=1,
                groups=8,
                pad_l=1,
                pad_r=1,
                w_kn=True,
            )


def test_elementwise_math_loops_are_interleaved_without_changing_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flat loop calling a math function carries LLVM's interleave hint (``MATH_INTERLEAVE``
    vectors per iteration); a cheap loop does not. The hint changes speed only: at every size
    (vector remainders included) the results equal the unhinted plan's bit for bit."""
    from asyncjit import Tensor, Var
    from asyncjit.codegen import _kernels
    from asyncjit.compiler import compile

    x = Tensor.placeholder((Var("n", 1, 4096),), np.float32, "x")
    graphs = {"math": lambda: ((x * 2.0).tanh() + x.sigmoid(), True), "cheap": lambda: (x * 2.0 + 1.0, False)}
    rng = np.random.default_rng(9)
    for name, make in graphs.items():
        y, hinted = make()
        exe = compile([y], [x], name=f"interleave_{name}", cache_dir="off")
        hint = f'!"llvm.loop.interleave.count", i32 {_kernels.MATH_INTERLEAVE}'
        assert (hint in exe.ir_text) is hinted, name
        monkeypatch.setattr(_kernels, "MATH_INTERLEAVE", 0)
        plain = compile([y], [x], name=f"interleave_{name}_plain", cache_dir="off")
        monkeypatch.undo()
        assert "llvm.loop.interleave" not in plain.ir_text
        for n in (1, 15, 16, 17, 63, 64, 65, 129, 4096):
            xv = rng.uniform(-9, 9, n).astype(np.float32)
            (got,) = exe.run([xv], {"n": n})
            (want,) = plain.run([xv], {"n": n})
            np.testing.assert_array_equal(got, want)
            x64 = xv.astype(np.float64)
            ref = np.tanh(2 * x64) + 1 / (1 + np.exp(-x64)) if hinted else 2 * x64 + 1
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_a_big_math_kernel_keeps_the_plain_interleaved_loop() -> None:
    """Over outputs big enough for streaming stores, a kernel calling a math function still runs
    the plain loop with the interleave hint (it is bound by arithmetic; the streaming path's lanes
    written one by one were not widened), a cheap kernel streams; both compute the right values."""
    from asyncjit import Tensor, Var
    from asyncjit.codegen._stream import STREAM_BYTES
    from asyncjit.compiler import compile

    big = STREAM_BYTES // 4 + 1237
    x = Tensor.placeholder((Var("t", 1, big),), np.float32, "x")
    math = compile([x.sigmoid() * 2.0], [x], name="big_math", cache_dir="off")
    cheap = compile([x * 2.0 + 1.0], [x], name="big_cheap", cache_dir="off")
    assert "nontemporal" not in math.ir_text and "llvm.loop.interleave.count" in math.ir_text
    assert "nontemporal" in cheap.ir_text and "llvm.loop.interleave.count" not in cheap.ir_text
    xv = np.random.default_rng(4).uniform(-20, 20, big - 3).astype(np.float32)
    (got,) = math.run([xv], {"t": xv.size})
    np.testing.assert_allclose(got, 2 / (1 + np.exp(-xv.astype(np.float64))), rtol=1e-6, atol=1e-30)
