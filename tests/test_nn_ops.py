"""N-d conv, conv_transpose, pools, cumsum, argmax/argmin, topk, take_along_axis: the reference
semantics against ONNX Runtime (the importer's contract), the compiled kernels against the
reference, with symbolic dims and edge cases (empty outputs, pads wider than the kernel,
stride past the kernel, NaN ties)."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_outputs_match, graph_cases
from strategies_case import GraphCase
from strategies_nn import NN_KINDS, WIDE_INT_DTYPES

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import compile
from asyncjit.errors import TensorError

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
helper = onnx.helper


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "")


def run_ort(
    op: str, inputs: list[np.ndarray], attrs: dict[str, Any], outs: list[Any], opset: int = 19
) -> list[np.ndarray]:
    """One ONNX node run by ONNX Runtime on one thread."""
    names = [f"i{k}" for k in range(len(inputs))]
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs, strict=True)
    ]
    out_info = [
        helper.make_tensor_value_info(f"o{k}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
        for k, d in enumerate(outs)
    ]
    node = helper.make_node(op, names, [f"o{k}" for k in range(len(outs))], **attrs)
    model = helper.make_model(
        helper.make_graph([node], "g", ins, out_info), opset_imports=[helper.make_opsetid("", opset)]
    )
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, dict(zip(names, inputs, strict=True))))


def check_compiled(
    outs: Tensor | tuple[Tensor, ...],
    inputs: list[Tensor],
    values: list[np.ndarray],
    bindings: dict[str, int] | None = None,
    tol: float = 1e-4,
) -> list[np.ndarray]:
    """Compile, run, and compare every output with the reference interpreter."""
    outs_t = outs if isinstance(outs, tuple) else (outs,)
    exe = compile(list(outs_t), inputs)
    got = exe.run(values, bindings or {})
    want = reference.evaluate(list(outs_t), dict(zip(inputs, values, strict=True)), bindings or {})
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return want


RNG = np.random.default_rng(7)
CONV_CASES = [  # cin, cout, kernel, strides, dilations, ONNX pads, groups
    (3, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (4, 8, (3, 2), (2, 1), (1, 2), (0, 1, 2, 0), 2),
    (6, 6, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 6),  # depthwise
    (4, 4, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # pointwise: no im2col
    (4, 6, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 2),
    (2, 4, (2, 2), (3, 3), (1, 1), (3, 3, 3, 3), 2),  # stride past the kernel, pads wider than it
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_matches_ort_and_compiles(case: tuple[Any, ...]) -> None:
    cin, cout, k, s, d, p, g = case
    x = RNG.standard_normal((2, cin, 9, 10)).astype(np.float32)
    w = RNG.standard_normal((cout, cin // g, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    y = xt.conv(Tensor.const(w), Tensor.const(b), strides=s, pads=p, dilations=d, groups=g)
    want = check_compiled(y, [xt], [x])[0]
    (ref,) = run_ort("Conv", [x, w, b], dict(strides=s, dilations=d, pads=p, group=g), [np.float32])
    np.testing.assert_allclose(want, ref, rtol=1e-4, atol=1e-4)


TAPS_CASES = [  # cin, cout, kernel, strides, dilations, ONNX pads, bias: one group
    (3, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True),  # a first layer: 27 products per output
    (5, 7, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), False),  # no pads: the frame is the input itself
    (8, 13, (3, 5), (1, 1), (1, 2), (0, 2, 1, 0), True),  # asymmetric pads, dilated columns
    (33, 65, (5, 5), (1, 1), (2, 1), (2, 2, 2, 2), True),  # two channel blocks; 60 + 4 + 1 rows
    (30, 4, (3, 3), (1, 1), (1, 1), (3, 1, 0, 2), False),  # only a 4-row tile; pads past the kernel
    (2, 1, (2, 4), (1, 1), (1, 1), (1, 0, 0, 1), True),  # one output channel
    (3, 16, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), True),  # ResNet's first layer: four phase planes
    (6, 9, (3, 3), (2, 2), (2, 1), (2, 0, 1, 2), True),  # a dilation that skips a row phase
    (4, 5, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), False),  # every tap its own phase plane
    (5, 7, (4, 1), (1, 2), (1, 1), (1, 0, 2, 0), True),  # a column kernel: one column phase read
]


def _taps_kernel(cout: int, ks: Any, strides: Any, dilations: Any, pads: Any) -> str:
    """The name prefix of the micro-kernels a conv ``taps_chosen`` accepts compiles to: those
    reading ``x`` in place (``_convdirect``) where the layer keeps its width at stride 1 with few
    outputs on an AVX-512 host, else those reading a padded copy."""
    from asyncjit.codegen._convdirect import direct_eligible

    direct = direct_eligible(cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads)
    return "asyncjit.conv.direct" if direct else "asyncjit.conv.taps"


@pytest.mark.parametrize("case", TAPS_CASES)
def test_conv2d_reads_a_padded_copy_of_the_input(case: tuple[Any, ...]) -> None:
    """2-D one-group convs run on ``_convtaps`` (micro-tiles reading a zero-padded copy of x, in
    phase planes for strides > 1; no im2col), for bounded height and width: every size up to the
    bounds (the scratch is sized there) equals the reference and ONNX Runtime, down to the
    shortest input the pads allow."""
    from asyncjit.codegen._convtaps import taps_chosen

    cin, cout, k, st, d, p, with_bias = case
    pads = ((p[0], p[2]), (p[1], p[3]))
    assert taps_chosen(cin=cin, cout=cout, ks=k, strides=st, dilations=d, pads=pads, groups=1, s_max=(9, 21))
    # the shortest inputs the graph allows: the kernel's span minus the pads, at least 1
    hmin = max(1, d[0] * (k[0] - 1) + 1 - p[0] - p[2])
    wmin = max(1, d[1] * (k[1] - 1) + 1 - p[1] - p[3])
    h, w_ = Var("h", hmin, 9), Var("w", wmin, 21)
    w = RNG.standard_normal((cout, cin, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    xt = Tensor.placeholder((2, cin, h, w_), np.float32, "x")
    y = xt.conv(Tensor.const(w), Tensor.const(b) if with_bias else None, strides=st, pads=p, dilations=d)
    exe = compile(y, [xt])
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    assert _taps_kernel(cout, k, st, d, pads) in ir_text
    for hv, wv in ((9, 21), (hmin, wmin), (max(hmin, 4), 17), (9, max(wmin, 2))):
        bind = {"h": hv, "w": wv}
        x = RNG.standard_normal((2, cin, hv, wv)).astype(np.float32)
        (got,) = exe.run([x], bind)
        want = reference.evaluate(y, {xt: x}, bind)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if got.size:
            ins = [x, w, b] if with_bias else [x, w]
            (ref,) = run_ort("Conv", ins, dict(strides=st, pads=p, dilations=d), [np.float32])
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [TAPS_CASES[0], TAPS_CASES[3], TAPS_CASES[6], TAPS_CASES[9]])
def test_conv2d_taps_in_runs_of_positions(case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The padded-copy kernel computes its output one run of positions at a time (all channel
    blocks of a run, then its copy-out): with the shortest runs (one panel), output rows straddle
    runs and every run's first and last columns are clipped; the result equals the reference."""
    from asyncjit.codegen import _convtaps

    monkeypatch.setattr(_convtaps, "TAPS_CHUNK_BYTES", 1)  # runs of one NR panel
    cin, cout, k, st, d, p, with_bias = case
    w = RNG.standard_normal((cout, cin, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    hmin = max(1, d[0] * (k[0] - 1) + 1 - p[0] - p[2])
    wmin = max(1, d[1] * (k[1] - 1) + 1 - p[1] - p[3])
    h, w_ = Var("h", hmin, 13), Var("w", wmin, 29)
    xt = Tensor.placeholder((2, cin, h, w_), np.float32, "x")
    y = xt.conv(Tensor.const(w), Tensor.const(b) if with_bias else None, strides=st, pads=p, dilations=d)
    exe = compile(y, [xt], name="taps_in_runs", cache_dir="off")  # not a plan made with long runs
    kernel = _taps_kernel(cout, k, st, d, ((p[0], p[2]), (p[1], p[3])))
    assert kernel in (exe.ir_text() if callable(exe.ir_text) else exe.ir_text)
    for hv, wv in ((13, 29), (11, 23), (9, 17)):
        x = RNG.standard_normal((2, cin, hv, wv)).astype(np.float32)
        bind = {"h": hv, "w": wv}
        (got,) = exe.run([x], bind)
        np.testing.assert_allclose(got, reference.evaluate(y, {xt: x}, bind), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("cout", "hw"), [(96, 56), (128, 57)])
def test_a_strided_conv_with_many_outputs_on_the_padded_copy(cout: int, hw: int) -> None:
    """A stride-2 3x3 with 65-128 outputs over 784 or more positions runs on the padded copy
    (on every host from 16 channels: AVX2 hosts keep it below ``TAPS_STRIDED_NARROW_CIN``), its
    bias, residual add and relu applied as each run is copied out (output rows of 28 and 29
    columns: a whole vector and a masked tail on either host), equal to the reference."""
    from asyncjit.codegen._convtaps import TAPS_STRIDED_MIN_P, taps_chosen

    cin, out_hw = 16, (hw + 2 - 3) // 2 + 1
    assert out_hw * out_hw >= TAPS_STRIDED_MIN_P
    pads = ((1, 1), (1, 1))
    assert taps_chosen(cin=cin, cout=cout, ks=(3, 3), strides=(2, 2), dilations=(1, 1), pads=pads,
                       groups=1, s_max=(hw, hw))  # fmt: skip
    w = (RNG.standard_normal((cout, cin, 3, 3)) / 12).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    x = RNG.standard_normal((1, cin, hw, hw)).astype(np.float32)
    r = RNG.standard_normal((1, cout, out_hw, out_hw)).astype(np.float32)
    xt, rt = Tensor.placeholder(x.shape, np.float32, "x"), Tensor.placeholder(r.shape, np.float32, "r")
    y = (xt.conv(Tensor.const(w), Tensor.const(b), strides=2, pads=1) + rt).relu()
    exe = compile(y, [xt, rt])
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    assert "asyncjit.conv.taps" in ir_text
    check_compiled(y, [xt, rt], [x, r])


@pytest.mark.parametrize(
    ("cin", "cout", "hw", "k", "stride", "chosen"),
    [
        (64, 64, 224, 3, 1, True),  # few outputs: packing im2col's copy costs more than junk columns
        (128, 32, 56, 3, 1, True),
        (256, 256, 56, 3, 1, True),  # many outputs, 4% more tiles
        (512, 512, 7, 3, 1, True),  # as many tiles as im2col's
        (3, 64, 224, 7, 2, True),  # ResNet's stem
        (3, 96, 224, 7, 2, True),  # ZFNet's: stride 2, 96 outputs from 3 channels, on every host
        (384, 384, 13, 3, 1, False),  # 18% more tiles: im2col
        (128, 128, 56, 3, 2, "avx512"),  # stride 2 up to 128 outputs at 28x28: faster inside a
        # model on AVX-512 hosts; on AVX2 ones the panels conv was
        (128, 128, 28, 3, 2, False),  # ... but not at 14x14
        (128, 160, 56, 3, 2, False),  # stride 2 with more outputs: im2col
        (3, 96, 224, 11, 4, False),  # stride 4: im2col
    ],
)
def test_padded_copy_is_chosen_where_it_was_faster(
    cin: int, cout: int, hw: int, k: int, stride: int, chosen: bool | str
) -> None:
    """The 2-D strategy follows the measured rule (``_convtaps.TAPS_SMALL_COUT``/``TAPS_MAX_WASTE``),
    and the kernel compiled for the layer is the one chosen (unless Winograd's ``F(2x2, 3x3)``
    takes the layer, or the weight in matmul panels does better: 512 channels at 7x7; with few
    outputs at stride 1 on AVX-512 the variant that reads ``x`` in place, ``_convdirect``)."""
    from asyncjit.codegen._convtaps import TAPS_STRIDED_MIN_VW, taps_chosen
    from asyncjit.codegen._convwino import wino_chosen
    from asyncjit.codegen._target import vector_width

    if chosen == "avx512":
        chosen = vector_width() >= TAPS_STRIDED_MIN_VW
    pads = ((k // 2, k // 2),) * 2
    kw = dict(cin=cin, cout=cout, ks=(k, k), strides=(stride, stride), dilations=(1, 1), pads=pads, groups=1)
    assert taps_chosen(**kw, s_max=(hw, hw)) is chosen  # type: ignore[arg-type]
    xt = Tensor.placeholder((1, cin, hw, hw), np.float32, "x")
    w = np.zeros((cout, cin, k, k), np.float32)
    exe = compile(xt.conv(Tensor.const(w), strides=stride, pads=k // 2), [xt])
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    panels = _panels_chosen_here(cin, cout, (k, k), (stride, stride), (1, 1), pads, (hw, hw))
    kernel = _taps_kernel(cout, (k, k), (stride, stride), (1, 1), pads)
    wino = wino_chosen(**kw, s_max=(hw, hw))  # type: ignore[arg-type]
    assert (".wino_in" in ir_text) is wino  # Winograd's F(2x2, 3x3) first, where it takes a layer
    assert (kernel in ir_text) is (chosen and not panels and not wino)


PANELS_CASES = [  # cin, cout, kernel, strides, dilations, pads per axis (lo, hi), bias: one group
    (64, 160, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), True),  # stride 2 past the padded copy's 128
    (24, 32, (3, 3), (3, 2), (1, 2), ((2, 0), (1, 3)), False),  # stride 3: no padded copy; dilated
    (80, 64, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), True),  # 1x1: x transposed is X_col^T
    (96, 32, (1, 1), (2, 2), (1, 1), ((0, 0), (0, 0)), False),  # strided 1x1
    (16, 160, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), True),  # above 128 outputs, few positions
    (20, 64, (5,), (2,), (2,), ((3, 1),), True),  # 1-D
    (4, 32, (3, 3, 3), (1, 2, 2), (1, 1, 1), ((1, 1), (0, 1), (1, 0)), False),  # 3-D
]


def _panels_chosen_here(
    cin: int, cout: int, ks: Any, st: Any, d: Any, pads: Any, s_max: Any, alone: bool = False
) -> bool:
    from asyncjit.codegen._convpanels import panels_chosen

    return panels_chosen(
        cin=cin, cout=cout, ks=ks, strides=st, dilations=d, pads=pads, groups=1, s_max=s_max, alone=alone
    )


@pytest.mark.parametrize("case", PANELS_CASES)
def test_conv_on_a_weight_in_matmul_panels(case: tuple[Any, ...]) -> None:
    """One-group convs whose output channels fill whole matmul tiles run as ``Y^T = X_col^T @
    W^T`` on the weight laid out in panels at compile time (``codegen._convpanels``, the
    prepacked matmul driver): with a batch and bounded spatial extents, every size up to the
    bounds (the scratch is sized there) equals the reference and ONNX Runtime, down to the
    shortest input the pads allow, and partial 8x8 blocks of both transposes (rows and columns
    not multiples of 8) are covered."""
    from asyncjit.codegen._matmul_tile import matmul_tiling

    cin, cout, k, st, d, pads, with_bias = case
    if cout % matmul_tiling().nr:
        pytest.skip(f"{cout} output channels are not whole tiles of this host's width")
    r = len(k)
    bounds = [9, 13, 7][:r]
    assert _panels_chosen_here(cin, cout, k, st, d, pads, bounds)
    mins = [max(1, d[i] * (k[i] - 1) + 1 - pads[i][0] - pads[i][1]) for i in range(r)]
    spatial = [Var(f"s{i}", mins[i], bounds[i]) for i in range(r)]
    w = RNG.standard_normal((cout, cin, *k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    onnx_pads = tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads)
    xt = Tensor.placeholder((3, cin, *spatial), np.float32, "x")
    bias = Tensor.const(b) if with_bias else None
    y = xt.conv(Tensor.const(w), bias, strides=st, pads=onnx_pads, dilations=d)
    exe = compile(y, [xt])
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    assert "asyncjit.matmul.prepacked" in ir_text
    for sizes in (bounds, mins, [max(m, b_ - 2) for m, b_ in zip(mins, bounds, strict=True)]):
        bind = {f"s{i}": v for i, v in enumerate(sizes)}
        x = RNG.standard_normal((3, cin, *sizes)).astype(np.float32)
        (got,) = exe.run([x], bind)
        want = reference.evaluate(y, {xt: x}, bind)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        ins = [x, w, b] if with_bias else [x, w]
        (ref,) = run_ort("Conv", ins, dict(strides=st, pads=onnx_pads, dilations=d), [np.float32])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_conv_panels_need_a_constant_weight() -> None:
    """A weight computed at run time is read as it is (no panels: they are laid out by constant
    folding), and a conv the fold laid out keeps its layout through the later folding rounds."""
    x = RNG.standard_normal((1, 64, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((160, 64, 3, 3)).astype(np.float32)
    xt, wt = Tensor.placeholder(x.shape, np.float32, "x"), Tensor.placeholder(w.shape, np.float32, "w")
    y = xt.conv(wt, strides=2, pads=1)
    exe = compile(y, [xt, wt])
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    assert "asyncjit.matmul.prepacked" not in ir_text
    want = reference.evaluate(y, {xt: x, wt: w})
    np.testing.assert_allclose(exe.run([x, w])[0], want, rtol=1e-4, atol=1e-4)
    from asyncjit.passes import Graph, optimize_graph
    from asyncjit.passes._fusion import conv_panel_weight

    yc = xt.conv(Tensor.const(w), strides=2, pads=1)
    g = optimize_graph(Graph.of([yc.node], [xt.node]), rounds=3)
    convs = [n for n in g.nodes if n.op == "conv"]
    assert len(convs) == 1 and conv_panel_weight(convs[0]) is not None


@pytest.mark.parametrize(
    ("cin", "cout", "hw", "k", "stride", "chosen"),
    [
        (512, 512, 7, 3, 1, True),  # above 128 outputs at 7x7: over the padded copy
        (256, 256, 14, 3, 1, True),  # im2col's layer
        (128, 128, 56, 3, 2, "avx2"),  # stride 2, up to 128 outputs: the padded copy on AVX-512
        (128, 160, 56, 3, 2, True),
        (3, 96, 224, 11, 4, True),  # AlexNet's first layer
        (256, 256, 56, 3, 1, False),  # 3,136 positions: the padded copy
        (64, 64, 56, 3, 1, False),  # few outputs: the padded copy
        (512, 2048, 7, 1, 1, True),  # 1x1 at 7x7
        (832, 32, 6, 1, 1, True),  # 1x1 at 6x6, few outputs
        (480, 16, 13, 1, 1, False),  # 1x1 at 13x13, few outputs: x read in place
        (512, 64, 13, 1, 1, True),
        (64, 256, 56, 1, 1, True),  # 1x1 at 56x56 with 256 channels on one side, in a region
        (256, 64, 56, 1, 1, True),
        (128, 128, 56, 1, 1, False),  # ... fewer on both: x read in place
        (256, 256, 112, 1, 1, False),  # 1x1 at 112x112: x read in place
        (128, 128, 28, 1, 1, True),  # 1x1 at 28x28, in a region
        (256, 512, 56, 1, 2, True),  # strided 1x1 from 56x56 (to 28x28), in a region
        (512, 1000, 13, 1, 1, False),  # not whole tiles
        (3, 64, 224, 3, 1, False),  # 27 products per output
    ],
)
def test_panels_are_chosen_where_they_were_faster(
    cin: int, cout: int, hw: int, k: int, stride: int, chosen: bool | str
) -> None:
    """The panels strategy follows the measured rule (``_convpanels.panels_chosen``)."""
    from asyncjit.codegen._convtaps import TAPS_STRIDED_MIN_VW
    from asyncjit.codegen._matmul_tile import matmul_tiling
    from asyncjit.codegen._target import vector_width

    if chosen == "avx2":
        chosen = vector_width() < TAPS_STRIDED_MIN_VW

    if cout % matmul_tiling().nr and chosen:
        pytest.skip(f"{cout} output channels are not whole tiles of this host's width")
    pads = ((k // 2, k // 2),) * 2
    assert _panels_chosen_here(cin, cout, (k, k), (stride, stride), (1, 1), pads, (hw, hw)) is chosen
    if k == 1 and chosen:  # outside every region, only up to 256 positions
        out = (hw - 1) // stride + 1
        alone = _panels_chosen_here(cin, cout, (k, k), (stride, stride), (1, 1), pads, (hw, hw), alone=True)
        assert alone is (out * out <= 256)


def test_conv_float16_and_symbolic_and_3d() -> None:
    """float16 goes through the direct loop; symbolic spatial dims through the fast kernel."""
    h = Var("h", 1, 12)
    x = RNG.standard_normal((2, 3, 7, 10)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xt = Tensor.placeholder((2, 3, h, 10), np.float32, "x")
    y = xt.conv(Tensor.const(w), pads=1, strides=2)
    exe = compile(y, [xt])
    for hv in (1, 7, 12):
        xv = RNG.standard_normal((2, 3, hv, 10)).astype(np.float32)
        np.testing.assert_allclose(
            exe.run([xv], {"h": hv})[0], reference.evaluate(y, {xt: xv}, {"h": hv}), rtol=1e-4, atol=1e-4
        )
    x16 = Tensor.placeholder(x.shape, np.float16, "x16")
    check_compiled(
        x16.conv(Tensor.const(w.astype(np.float16)), pads=(0, 1, 1, 0)),
        [x16],
        [x.astype(np.float16)],
        tol=2e-2,
    )
    x3 = RNG.standard_normal((1, 2, 5, 4, 6)).astype(np.float32)
    w3 = RNG.standard_normal((3, 2, 2, 3, 2)).astype(np.float32)
    t3 = Tensor.placeholder(x3.shape, np.float32, "x3")
    attrs = dict(pads=(1, 0, 1, 0, 1, 1), strides=(1, 2, 1), dilations=(2, 1, 1))
    want = check_compiled(t3.conv(Tensor.const(w3), **attrs), [t3], [x3])[0]  # type: ignore[arg-type]
    np.testing.assert_allclose(want, run_ort("Conv", [x3, w3], attrs, [np.float32])[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case",
    [
        ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, (1, 1)),
        ((3, 2), (1, 2), (2, 1), (0, 0, 0, 0), 2, (0, 1)),
        ((2, 2), (3, 3), (1, 1), (2, 1, 0, 3), 1, (0, 0)),  # pads past dilation*(k-1): cropped
    ],
)
def test_conv_transpose_matches_ort(case: tuple[Any, ...]) -> None:
    k, s, d, p, g, op = case
    x = RNG.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 6 // g, *k)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    y = xt.conv_transpose(
        Tensor.const(w), Tensor.const(b), strides=s, pads=p, dilations=d, groups=g, output_padding=op
    )
    want = check_compiled(y, [xt], [x])[0]
    attrs = dict(strides=s, dilations=d, pads=p, group=g, output_padding=op)
    np.testing.assert_allclose(
        want, run_ort("ConvTranspose", [x, w, b], attrs, [np.float32])[0], rtol=1e-4, atol=1e-4
    )


POOL_CASES = [  # kernel, strides, dilations, pads, ceil_mode, count_include_pad
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 0, 0),
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, 1),
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), 1, 0),
    ((3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 1, 1),
    ((2, 2), (3, 3), (1, 1), (1, 1, 1, 1), 0, 0),
    ((3, 3), (2, 2), (1, 1), (0, 1, 0, 1), 1, 0),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_pools_match_ort_and_compile(case: tuple[Any, ...]) -> None:
    k, s, d, p, ceil, cip = case
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    mx = xt.max_pool(k, s, p, d, bool(ceil))
    want = check_compiled(mx, [xt], [x])[0]
    np.testing.assert_allclose(
        want,
        run_ort(
            "MaxPool", [x], dict(kernel_shape=k, strides=s, dilations=d, pads=p, ceil_mode=ceil), [np.float32]
        )[0],
    )
    av = xt.avg_pool(k, s, p, d, bool(ceil), bool(cip))
    want = check_compiled(av, [xt], [x])[0]
    if d == (1, 1):  # ORT 1.2x rejects dilated average pools
        attrs = dict(kernel_shape=k, strides=s, pads=p, ceil_mode=ceil, count_include_pad=cip)
        np.testing.assert_allclose(
            want, run_ort("AveragePool", [x], attrs, [np.float32])[0], rtol=1e-5, atol=1e-6
        )
    xi = RNG.integers(-9, 9, x.shape).astype(np.int32)
    ti = Tensor.placeholder(x.shape, np.int32, "xi")
    check_compiled(ti.max_pool(k, s, p, d, bool(ceil)), [ti], [xi])


def test_a_large_pool_window_loops_instead_of_unrolling() -> None:
    """A 30x40 window (dilated, strided, padded, as ONNX's MaxPool2d_stride_padding_dilation case
    has 60x80) compiles to loops over its taps: the IR stays the size of a small window's, where
    1,200 unrolled tap loops took LLVM's optimizer many minutes. Results equal ORT's."""
    x = RNG.standard_normal((1, 2, 120, 150)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    attrs = dict(kernel_shape=(30, 40), strides=(5, 5), dilations=(3, 3), pads=(5, 10, 5, 10))
    mx = xt.max_pool((30, 40), (5, 5), (5, 10, 5, 10), (3, 3))
    av = xt.avg_pool((30, 40), (5, 5), (5, 10, 5, 10), (1, 1), False, True)
    got = check_compiled((mx, av), [xt], [x])
    np.testing.assert_array_equal(got[0], run_ort("MaxPool", [x], attrs, [np.float32])[0])
    ort_avg = dict(kernel_shape=(30, 40), strides=(5, 5), pads=(5, 10, 5, 10), count_include_pad=1)
    want_avg = run_ort("AveragePool", [x], ort_avg, [np.float32])[0]
    np.testing.assert_allclose(got[1], want_avg, rtol=1e-5, atol=1e-6)
    small = compile(xt.max_pool((3, 3), (5, 5), (1, 1, 1, 1), (3, 3)), [xt], cache_dir="off")
    large = compile(mx, [xt], cache_dir="off")
    assert len(large.ir_text) < 2 * len(small.ir_text)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
@pytest.mark.parametrize("k", [3, 40])
def test_direct_conv1d_short_and_long_kernels(dtype: Any, k: int) -> None:
    """The direct conv1d (other dtypes than float32) unrolls short kernels and loops over long
    ones: both equal the reference, over a symbolic length too."""
    n = Var("n", 80, 200)
    x = RNG.standard_normal((2, 3, 90)).astype(dtype)
    wv = (RNG.standard_normal((4, 3, k)) / k).astype(dtype)
    xt = Tensor.placeholder((2, 3, n), dtype, "x")
    y = xt.conv1d(Tensor.const(wv), stride=2, padding=k // 2, dilation=2)
    check_compiled(y, [xt], [x], {"n": 90}, tol=1e-2 if dtype == np.float16 else 1e-9)


def test_pool_edges() -> None:
    """A window of padding only: max gives -inf, avg 0; a symbolic length in ceil mode."""
    x = RNG.standard_normal((1, 1, 2)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    mx, av = xt.max_pool(2, 3, pads=(3, 0)), xt.avg_pool(2, 3, pads=(3, 0))
    got = check_compiled((mx, av), [xt], [x])
    assert got[0][0, 0, 0] == -np.inf and got[1][0, 0, 0] == 0.0
    n = Var("n", 1, 20)
    xs = Tensor.placeholder((1, 2, n), np.float32, "xs")
    y = xs.max_pool(3, 2, pads=1, ceil_mode=True)
    exe = compile(y, [xs])
    for nv in (1, 2, 5, 20):
        xv = RNG.standard_normal((1, 2, nv)).astype(np.float32)
        ref = run_ort(
            "MaxPool", [xv], dict(kernel_shape=(3,), strides=(2,), pads=(1, 1), ceil_mode=1), [np.float32]
        )[0]
        np.testing.assert_array_equal(exe.run([xv], {"n": nv})[0], ref)


@pytest.mark.parametrize("exclusive, reverse", list(itertools.product((False, True), repeat=2)))
def test_cumsum(exclusive: bool, reverse: bool) -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    xi = RNG.integers(-9, 9, (4, 3)).astype(np.int64)
    t = Var("t", 1, 6)
    xt, it = Tensor.placeholder((3, t - 1), np.float32, "x"), Tensor.placeholder(xi.shape, np.int64, "i")
    ys = (xt.cumsum(1, exclusive, reverse), it.cumsum(0, exclusive, reverse))
    for tv in (0, 5):  # t - 1 == 0: an empty axis
        check_compiled(ys, [xt, it], [x[:, :tv], xi], {"t": tv + 1})
    attrs = dict(exclusive=int(exclusive), reverse=int(reverse))
    want = reference.evaluate(ys[0], {xt: x}, {"t": 6})
    np.testing.assert_allclose(want, run_ort("CumSum", [x, np.array(1)], attrs, [np.float32])[0], rtol=1e-6)


def test_argmax_argmin_nan_and_ties() -> None:
    x = RNG.integers(0, 4, (3, 7)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, [1, 5]] = np.nan
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    for last in (False, True):
        outs = (xt.argmax(1, False, last), xt.argmin(0, True, last), xt.argmax())
        got = check_compiled(outs, [xt], [x])
        np.testing.assert_array_equal(got[2], np.argmax(x))
        clean = np.nan_to_num(x, nan=9.0)
        ref = run_ort("ArgMax", [clean], dict(axis=1, keepdims=0, select_last_index=int(last)), [np.int64])[0]
        np.testing.assert_array_equal(reference.evaluate(xt.argmax(1, False, last), {xt: clean}), ref)
    with pytest.raises(TensorError, match="empty"):
        Tensor.placeholder((3, Var("e", 1, 4) - 1), np.float32).argmax(1)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_and_take_along_axis(largest: bool) -> None:
    x = RNG.integers(0, 4, (3, 7)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    for k in (0, 1, 3, 7):
        v, i = xt.topk(k, 1, largest)
        got = check_compiled((v, i), [xt], [x])
        rv, ri = run_ort(
            "TopK", [x, np.array([k])], dict(axis=1, largest=int(largest)), [np.float32, np.int64]
        )
        np.testing.assert_array_equal(got[0], rv)
        np.testing.assert_array_equal(got[1], ri)
    xn = x.copy()
    xn[0, [2, 4]] = np.nan
    check_compiled(xt.topk(3, 0, largest), [xt], [xn])
    xi = RNG.integers(-3, 3, (4, 6)).astype(np.int64)
    ti = Tensor.placeholder(xi.shape, np.int64, "xi")
    check_compiled(ti.topk(4, -1, largest), [ti], [xi])
    idx = RNG.integers(-2, 9, (3, 4)).astype(np.int64)  # out of range clamps, like gather
    it = Tensor.placeholder(idx.shape, np.int64, "idx")
    taken = check_compiled(xt.take_along_axis(it, 1), [xt, it], [x, idx])[0]
    np.testing.assert_array_equal(taken, np.take_along_axis(x, np.clip(idx, 0, 6), 1))
    with pytest.raises(TensorError, match="exceed"):
        Tensor.placeholder((3, Var("s", 1, 9)), np.float32).topk(2)


def _fuzz_check(case: GraphCase) -> None:
    """The reference against the strategies' independent loop oracles, then the compiled plan
    against the reference at the drawn binding and every var's bounds."""
    assert_outputs_match(reference.evaluate(case.outputs, case.inputs, case.var_values()), case.expected())
    exe = compile(case.outputs, case.placeholders)
    lows, highs = {v.name: v.min for v in case.variables}, {v.name: v.max for v in case.variables}
    corners = [dict(case.bindings), lows, highs]
    for bindings in corners:
        feed = case.make_inputs(bindings)
        want = reference.evaluate(case.outputs, feed, case.var_values(bindings))
        got = exe.run(
            [feed[p] for p in case.placeholders], {v.name: bindings[v.name] for v in exe.signature.vars}
        )
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            tol = 1e-2 if g.dtype == np.float16 else 1e-4
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=case.describe())


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(graph_cases(kinds=(*NN_KINDS, "unary", "binary", "reduce", "permute"), max_steps=4))
def test_fuzz_nn_ops(case: GraphCase) -> None:
    """Random graphs mixing the new ops with elementwise ops and views, symbolic dims."""
    _fuzz_check(case)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    st.sampled_from(WIDE_INT_DTYPES).flatmap(
        lambda d: graph_cases(
            kinds=(
                "unary",
                "binary",
                "cast",
                "reduce",
                "cumsum",
                "argext",
                "topk",
                "pool",
                "take_along_axis",
            ),
            dtypes=(d, np.dtype(np.bool_)),
            max_steps=4,
        )
    )
)
def test_fuzz_wide_int_dtypes(case: GraphCase) -> None:
    """int8/int16/uint8/uint16/uint32/uint64 graphs (one int dtype each, with bool)."""
    _fuzz_check(case)


def _resize_args(case: Any, inputs: list[np.ndarray]) -> dict[str, Any]:
    """The ONNX node's inputs and attributes as ``Tensor.resize`` arguments (full rank)."""
    node = case.model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    vals = dict(zip([i.name for i in case.model.graph.input], inputs, strict=True))
    x = inputs[0]
    axes = list(attrs.get("axes", range(x.ndim)))

    def full(v: Any, default: Any) -> list[Any] | None:
        if v is None or not len(v):
            return None
        out = [default] * x.ndim
        for i, a in enumerate(axes):
            out[a] = v[i]
        return out

    names = list(node.input) + [""] * 4
    roi, scales, sizes = (vals.get(n) if n else None for n in names[1:4])
    sc, sz = full(scales, 1.0), full(sizes, None)
    if sz is not None:
        sz = [x.shape[i] if s is None else int(s) for i, s in enumerate(sz)]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":  # the importer's job: one scale for the given axes, sizes rounded
            ratios = [sz[a] / x.shape[a] for a in axes]
            common = min(ratios) if policy == "not_larger" else max(ratios)
            sc = [common if a in axes else 1.0 for a in range(x.ndim)]
            sz = [int(common * x.shape[a] + 0.5) if a in axes else x.shape[a] for a in range(x.ndim)]
    spans = None
    if roi is not None and len(roi):
        k = len(roi) // 2
        starts, ends = full(list(roi[:k]), 0.0), full(list(roi[k:]), 1.0)
        assert starts is not None and ends is not None
        spans = list(zip(starts, ends, strict=True))
    return dict(
        sizes=sz,
        scales=sc,
        mode=attrs.get("mode", "nearest"),
        coordinate_transformation_mode=attrs.get("coordinate_transformation_mode", "half_pixel"),
        nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=attrs.get("cubic_coeff_a", -0.75),
        exclude_outside=bool(attrs.get("exclude_outside", 0)),
        extrapolation_value=attrs.get("extrapolation_value", 0.0),
        roi=spans,
    )


def test_resize_matches_onnx_node_cases() -> None:
    """Every ONNX ``Resize`` node test except antialias: the reference and the compiled plan
    against the outputs shipped in the onnx wheel."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the onnx case generators overflow casts on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = [c for c in collect_testcases(None) if c.name.startswith("test_resize")]
    checked = 0
    for case in cases:
        assert case.model is not None and case.data_sets is not None
        attrs = {a.name: helper.get_attribute_value(a) for a in case.model.graph.node[0].attribute}
        if attrs.get("antialias", 0):
            continue  # not supported: Tensor.resize has no antialias filter
        for inputs, outputs in case.data_sets:
            xt = Tensor.placeholder(inputs[0].shape, inputs[0].dtype, "x")
            y = xt.resize(**_resize_args(case, list(inputs)))
            got = check_compiled(y, [xt], [inputs[0]], tol=1e-5)[0]
            np.testing.assert_allclose(got, outputs[0], rtol=1e-4, atol=1e-5, err_msg=case.name)
            checked += 1
    assert checked >= 35


def test_pool_blocks_of_8_and_16_columns_agree_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The float32 pool kernel's blocks take the host's vector width (16 columns with AVX-512);
    8 and 16 give the same bits, edges, masks, strides and pads included."""
    import asyncjit.codegen._nnkernels as nk
    from asyncjit.compiler import _api

    cases = [
        ((1, 3, 23, 37), "max", (3, 3), (2, 2), 0, True),
        ((2, 2, 9, 17), "max", (3, 3), (1, 1), 1, False),
        ((1, 4, 13, 31), "avg", (3, 2), (2, 1), (1, 0, 1, 1), False),
        ((1, 2, 8, 5), "avg", (2, 2), (2, 2), 1, True),
    ]
    for shape, mode, kernel, strides, pads, ceil in cases:
        x = RNG.standard_normal(shape).astype(np.float32)
        x.flat[::7] = np.nan if mode == "max" else 0.5
        xt = Tensor.placeholder(shape, np.float32, "x")
        outs = []
        for lanes in (8, 16):
            monkeypatch.setattr(nk, "POOL_LANES", lanes)
            _api._PLANS.clear()  # the in-memory plan cache would hand back the other width
            if mode == "max":
                y = xt.max_pool(kernel, strides, pads, 1, ceil)
            else:
                y = xt.avg_pool(kernel, strides, pads, 1, ceil, False)
            exe = compile(y, [xt], cache_dir="off")
            assert f"v{lanes}f32" in exe.ir_text
            outs.append(exe.run([x])[0])
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_allclose(outs[0], reference.evaluate(y, {xt: x}), rtol=1e-6, atol=1e-6)
    _api._PLANS.clear()  # no 8-column plan left for a later compile of the same graph
