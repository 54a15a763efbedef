"""The 2-D conv that reads its input in place under lane masks (``codegen._convdirect``).

It is chosen only on AVX-512 hosts; every test here forces it on (``DIRECT_MIN_VW`` lowered,
Winograd's conv off, plans compiled without the disk cache), so an AVX2 host runs the same masked
loads, only slower.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.codegen import _convdirect, _convtaps, _convwino, _parallel
from asyncjit.codegen._matmul import PARALLEL_MIN_MACS
from asyncjit.compiler import compile

RNG = np.random.default_rng(20261127)


@pytest.fixture(autouse=True)
def _direct_on_any_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_convdirect, "DIRECT_MIN_VW", 8)
    monkeypatch.setattr(_convwino, "WINO_MIN_TILES", 1 << 30)  # 3x3 layers it would take
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "")


def _ir(exe: Any) -> str:
    return exe.ir_text() if callable(exe.ir_text) else exe.ir_text


DIRECT_CASES = [  # cin, cout, kernel, dilations, ONNX pads (top, left, bottom, right), bias
    (3, 64, (3, 3), (1, 1), (1, 1, 1, 1), True),  # a first layer: 27 products per output
    (16, 13, (3, 3), (1, 1), (1, 2, 1, 0), False),  # columns padded on one side; 8 + 4 + 1 rows
    (8, 24, (5, 5), (2, 1), (4, 2, 0, 2), True),  # dilated rows, all row pads above
    (6, 7, (3, 1), (1, 1), (1, 0, 1, 0), True),  # a column kernel: no column moves, no mask
    (6, 9, (1, 3), (1, 2), (0, 2, 0, 2), False),  # a row kernel with dilated columns
    (40, 64, (3, 3), (1, 1), (3, 1, 0, 1), True),  # two channel blocks (28 + 12); pads past the kernel
]


@pytest.mark.parametrize("case", DIRECT_CASES)
def test_conv2d_reads_its_input_in_place(case: tuple[Any, ...]) -> None:
    """Stride-1 convs that keep the width compute in ``y`` itself, reading ``x`` under masks: every
    size up to the bounds equals the reference, from one column (every panel many rows, every tap
    of a moved column masked) to 70 (panels inside one row, unmasked), and the shortest height
    the pads allow (every tile an edge tile)."""
    cin, cout, k, d, p, with_bias = case
    pads = ((p[0], p[2]), (p[1], p[3]))
    assert _convdirect.direct_eligible(cout=cout, ks=k, strides=(1, 1), dilations=d, pads=pads)
    assert _convtaps.taps_scratch_bytes(cin=cin, cout=cout, ks=k, strides=(1, 1), dilations=d, pads=pads,
                                        s_max=(13, 70)) == 64  # fmt: skip
    hmin = max(1, d[0] * (k[0] - 1) + 1 - p[0] - p[2])
    h, w_ = Var("h", hmin, 13), Var("w", 1, 70)
    w = RNG.standard_normal((cout, cin, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    xt = Tensor.placeholder((2, cin, h, w_), np.float32, "x")
    y = xt.conv(Tensor.const(w), Tensor.const(b) if with_bias else None, pads=p, dilations=d)
    exe = compile(y, [xt], name="conv_direct", cache_dir="off")
    text = _ir(exe)
    assert "asyncjit.conv.direct" in text and "asyncjit.conv.taps" not in text
    for hv, wv in ((13, 70), (hmin, 1), (hmin, 70), (7, 5), (13, 33), (9, 64)):
        bind = {"h": hv, "w": wv}
        x = RNG.standard_normal((2, cin, hv, wv)).astype(np.float32)
        (got,) = exe.run([x], bind)
        want = reference.evaluate(y, {xt: x}, bind)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [DIRECT_CASES[1], DIRECT_CASES[2], DIRECT_CASES[5]])
def test_conv2d_in_place_in_runs_of_one_panel(case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shortest runs (one NR panel), runs start and end inside output rows, and each run
    is finished (bias, residual, relu) in place before the next: equal to the reference."""
    monkeypatch.setattr(_convtaps, "TAPS_CHUNK_BYTES", 1)
    cin, cout, k, d, p, with_bias = case
    w = RNG.standard_normal((cout, cin, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    h, w_ = Var("h", 5, 13), Var("w", 1, 29)
    grow = p[0] + p[2] - d[0] * (k[0] - 1)  # output rows minus input rows
    xt = Tensor.placeholder((2, cin, h, w_), np.float32, "x")
    rt = Tensor.placeholder((2, cout, h + grow, w_), np.float32, "r")
    y = (xt.conv(Tensor.const(w), Tensor.const(b) if with_bias else None, pads=p, dilations=d) + rt).relu()
    exe = compile(y, [xt, rt], name="conv_direct_runs", cache_dir="off")
    assert "asyncjit.conv.direct" in _ir(exe)
    for hv, wv in ((13, 29), (11, 23), (5, 3)):
        bind = {"h": hv, "w": wv}
        x = RNG.standard_normal((2, cin, hv, wv)).astype(np.float32)
        r = RNG.standard_normal((2, cout, hv + grow, wv)).astype(np.float32)
        (got,) = exe.run([x, r], bind)
        np.testing.assert_allclose(got, reference.evaluate(y, {xt: x, rt: r}, bind), rtol=1e-4, atol=1e-4)


def test_conv2d_in_place_splits_its_runs_bit_for_bit() -> None:
    """A layer past ``PARALLEL_MIN_MACS`` hands its runs to the intra-op threads, each writing its
    own positions of ``y``: every thread count gives one thread's bits."""
    cin, cout, hw = 32, 64, 60
    assert hw * hw * cout * cin * 9 >= PARALLEL_MIN_MACS
    w = (RNG.standard_normal((cout, cin, 3, 3)) / 17).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    xt = Tensor.placeholder((2, cin, hw, hw), np.float32, "x")
    rt = Tensor.placeholder((2, cout, hw, hw), np.float32, "r")
    y = (xt.conv(Tensor.const(w), Tensor.const(b), pads=1) + rt).relu()
    exe = compile(y, [xt, rt], name="conv_direct_split", cache_dir="off")
    assert "asyncjit.conv.direct" in _ir(exe)
    x = RNG.standard_normal((2, cin, hw, hw)).astype(np.float32)
    r = RNG.standard_normal((2, cout, hw, hw)).astype(np.float32)
    old = _parallel.intra_op_threads()
    try:
        outs = {}
        for threads in (1, 2, 3, 8):
            _parallel.set_intra_op_threads(threads)
            (outs[threads],) = exe.run([x, r], {})
    finally:
        _parallel.set_intra_op_threads(old)
    for threads, out in outs.items():
        assert np.array_equal(out, outs[1]), threads
    np.testing.assert_allclose(outs[1], reference.evaluate(y, {xt: x, rt: r}, {}), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("cout", "ks", "strides", "pads", "eligible"),
    [
        (64, (3, 3), (1, 1), ((1, 1), (1, 1)), True),
        (65, (3, 3), (1, 1), ((1, 1), (1, 1)), False),  # more outputs: the padded copy does better
        (64, (3, 3), (2, 2), ((1, 1), (1, 1)), False),  # a stride: phase planes need the copy
        (64, (3, 3), (1, 1), ((1, 1), (0, 1)), False),  # the width shrinks: no frame of y's rows
        (32, (5, 1), (1, 1), ((2, 2), (0, 0)), True),
    ],
)
def test_direct_eligibility(cout: int, ks: Any, strides: Any, pads: Any, eligible: bool) -> None:
    """The measured rule: stride 1, the input's width kept, at most ``DIRECT_MAX_COUT`` outputs."""
    got = _convdirect.direct_eligible(cout=cout, ks=ks, strides=strides, dilations=(1, 1), pads=pads)
    assert got is eligible


def test_direct_needs_an_avx512_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``DIRECT_MIN_VW`` lanes (AVX2: a masked load costs more than a plain one) the padded
    copy is kept."""
    monkeypatch.setattr(_convdirect, "vector_width", lambda: 8)
    monkeypatch.setattr(_convdirect, "DIRECT_MIN_VW", 16)
    pads = ((1, 1), (1, 1))
    assert not _convdirect.direct_eligible(cout=64, ks=(3, 3), strides=(1, 1), dilations=(1, 1), pads=pads)


_GUARD_SCRIPT = textwrap.dedent(
    """
    import ctypes, mmap, sys
    import numpy as np
    from llvmlite import ir
    from asyncjit.codegen import _convdirect
    _convdirect.DIRECT_MIN_VW = 8
    from asyncjit.codegen._convtaps import emit_conv_taps
    from asyncjit.codegen._target import compile_to_object, load_object
    sys.path.insert(0, sys.argv[1])
    from test_codegen_kernels import _add_entry
    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    keep = []

    def guarded(arr, at_end):
        # a copy of arr right after a PROT_NONE page (at_end False) or right before one
        pages = (arr.nbytes + PAGE - 1) // PAGE + 2
        mm = mmap.mmap(-1, pages * PAGE)
        keep.append(mm)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        assert libc.mprotect(base, PAGE, 0) == 0
        assert libc.mprotect(base + (pages - 1) * PAGE, PAGE, 0) == 0
        start = (pages - 1) * PAGE - arr.nbytes if at_end else PAGE
        out = np.frombuffer(mm, dtype=np.float32, count=arr.size, offset=start).reshape(arr.shape)
        out[...] = arr
        return out

    rng = np.random.default_rng(3)
    # cin, cout, kernel, dilations, pads ((top, bottom), (left, right))
    for cin, cout, ks, dil, pads in [
        (3, 16, (3, 3), (1, 1), ((1, 1), (1, 1))),
        (4, 9, (5, 5), (1, 1), ((2, 2), (2, 2))),
        (6, 13, (3, 3), (2, 1), ((4, 0), (2, 0))),  # row pads past the kernel on one side, columns too
        (5, 7, (3, 3), (1, 2), ((0, 3), (0, 4))),  # dilated columns, all column pads on the right
    ]:
        (kh, kw), (dh, dw), ((pt, pb), (pl, pr)) = ks, dil, pads
        module = ir.Module("guard")
        kern = emit_conv_taps(module, "conv", cin=cin, cout=cout, ks=ks, strides=(1, 1), dilations=dil,
                              pads=pads, has_bias=True, relu=True, residual=True)
        assert "asyncjit.conv.direct" in str(module)
        _add_entry(module, "entry", kern)
        obj = load_object(compile_to_object(str(module)))
        call = obj.cfunc("entry", None, ctypes.c_void_p)
        # one column; rows of 7 (several per panel); 33 and 64; 70 (panels inside a row: unmasked)
        for h, w in [(1, 1), (2, 7), (5, 1), (9, 33), (4, 64), (6, 70)]:
            oh = h + pt + pb - dh * (kh - 1)
            if oh <= 0:
                continue
            x = rng.standard_normal((2, cin, h, w)).astype(np.float32)
            wt = rng.standard_normal((cout, cin, kh, kw)).astype(np.float32)
            bias = rng.standard_normal(cout).astype(np.float32)
            r = rng.standard_normal((2, cout, oh, w)).astype(np.float32)
            xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))).astype(np.float64)
            span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
            win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))[..., ::dh, ::dw]
            want = np.einsum("ncijhw,ochw->noij", win, wt.astype(np.float64)) + bias[None, :, None, None] + r
            want = np.maximum(want, 0)
            for at_end in (False, True):
                gx, gy, gr = guarded(x, at_end), guarded(np.zeros_like(r), at_end), guarded(r, at_end)
                scratch = np.zeros(64, np.uint8)
                args = [a.ctypes.data for a in (gx, wt, bias, gy, scratch)] + [2, h, w, oh, w, gr.ctypes.data]
                block = np.array(args, dtype=np.int64)
                call(block.ctypes.data)
                assert np.allclose(gy, want, rtol=1e-4, atol=1e-4), (cin, cout, ks, h, w, at_end)
    print("ok")
    """
)


def test_conv2d_in_place_never_touches_memory_past_its_operands() -> None:
    """``x``, ``y`` and the residual end at (or start right after) a PROT_NONE page: a lane outside
    them read unmasked, or a store past ``y``, would fault the process. Pads on one side, past
    the kernel, dilations; widths from one column (every tap of a moved column masked) to 70
    (clean tiles, loaded unmasked, beside inner and edge ones)."""
    tests_dir = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", _GUARD_SCRIPT, tests_dir], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
