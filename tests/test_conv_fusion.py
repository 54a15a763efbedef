"""What the compiler folds and fuses around a conv: a per-channel scale and shift (an inference
BatchNormalization, the ONNX importer's bias add) into its weight and bias, and a ``relu`` and a
residual ``add`` after it into its kernel; each checked against the reference interpreter, and
where the rewrite must not apply (shared outputs, graph outputs, values that vary along other
axes, non-finite scales, a broadcast residual).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, reference
from asyncjit.compiler import compile
from asyncjit.passes import Graph, optimize_graph

RNG = np.random.default_rng(11)


def _ops(outs: list[Tensor], ins: list[Tensor]) -> list[str]:
    g = optimize_graph(Graph.of([o.node for o in outs], [i.node for i in ins]))
    return [n.op for n in g.nodes]


def _kernels(exe: Any) -> list[str]:
    ir_text = exe.ir_text() if callable(exe.ir_text) else exe.ir_text
    return [
        line.split("@")[1].split("(")[0].strip('"')
        for line in ir_text.splitlines()
        if line.startswith("define")
    ]


def _check(outs: list[Tensor], ins: list[Tensor], values: list[np.ndarray]) -> Any:
    exe = compile(outs, ins)
    got = exe.run(values)
    want = reference.evaluate(outs, dict(zip(ins, values, strict=True)))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)
    return exe


def _layer(cin: int = 8, cout: int = 12) -> tuple[Tensor, np.ndarray, np.ndarray]:
    xt = Tensor.placeholder((2, cin, 9, 10), np.float32, "x")
    return (
        xt,
        RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32),
        RNG.standard_normal((2, cin, 9, 10)).astype(np.float32),
    )


def test_batch_norm_and_bias_fold_into_the_conv() -> None:
    """``conv * s + t`` (per channel, as ``[C, 1, 1]`` or ``[1, C, 1, 1]``) and a scalar shift
    leave a single conv with a bias; the result equals the unfolded graph's."""
    xt, w, x = _layer()
    s = RNG.uniform(0.5, 2.0, (12, 1, 1)).astype(np.float32)
    t = RNG.standard_normal((1, 12, 1, 1)).astype(np.float32)
    y = (xt.conv(Tensor.const(w), pads=1) * Tensor.const(s) + Tensor.const(t)) + 0.25
    assert "mul" not in _ops([y], [xt]) and "add" not in _ops([y], [xt])
    convs = [
        n
        for n in optimize_graph(Graph.of([y.node], [xt.node])).nodes
        if n.op == "conv"  # the folded conv carries the bias
    ]
    assert len(convs) == 1 and len(convs[0].inputs) == 3
    _check([y], [xt], [x])


@pytest.mark.parametrize(
    "case",
    ["shared", "output", "spatial", "inf", "runtime"],
)
def test_conv_affine_is_left_alone_where_it_would_change_the_graph(case: str) -> None:
    """Not folded: a conv another node also reads (its value is needed unscaled), a conv that is
    a graph output, a factor that varies along a spatial axis, an infinite factor (0 * inf in
    the weight), a factor computed at run time. Every case still computes the right values."""
    xt, w, x = _layer()
    conv = xt.conv(Tensor.const(w), pads=1)
    s = RNG.uniform(0.5, 2.0, (12, 1, 1)).astype(np.float32)
    ins, vals = [xt], [x]
    if case == "spatial":
        s = RNG.uniform(0.5, 2.0, (12, 9, 1)).astype(np.float32)
    if case == "inf":
        s[3] = np.inf
    if case == "runtime":
        st = Tensor.placeholder(s.shape, np.float32, "s")
        ins, vals = [xt, st], [x, s]
        outs = [conv * st]
    else:
        outs = [conv * Tensor.const(s)]
    if case == "shared":
        outs.append(conv + 1.0)
    if case == "output":
        outs.append(conv)
    assert "mul" in _ops(outs, ins)
    _check(outs, ins, vals)


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "groups", "what"),
    [
        (64, 96, 3, 2, 1, "weight in matmul panels"),
        (8, 16, 3, 1, 1, "padded copy"),
        (8, 12, 3, 3, 1, "im2col"),
        (8, 12, 1, 1, 1, "1x1 reading x in place"),
        (6, 6, 3, 1, 6, "depthwise"),
    ],
)
def test_relu_after_a_conv_is_fused_into_its_kernel(
    cin: int, cout: int, k: int, stride: int, groups: int, what: str
) -> None:
    """Every tuned conv strategy stores ``max(y, 0)`` itself (one ``conv_relu`` kernel, no
    kernel of the relu's own), with the bias folded in; a NaN stays NaN as in ``relu``."""
    xt = Tensor.placeholder((2, cin, 9, 11), np.float32, "x")
    w = RNG.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    y = (
        xt.conv(Tensor.const(w), strides=stride, pads=k // 2, groups=groups)
        + Tensor.const(b).reshape(cout, 1, 1)
    ).relu()
    x = RNG.standard_normal((2, cin, 9, 11)).astype(np.float32)
    x[0, 0, 4, :5] = np.nan
    exe = _check([y], [xt], [x])
    entries = [k for k in _kernels(exe) if k.startswith("k")]
    assert any("conv_conv_relu" in k for k in entries), (what, entries)
    assert not any("relu" in k and "conv" not in k for k in entries), (what, entries)


def test_relu_is_not_fused_where_the_conv_value_is_needed() -> None:
    """A conv whose value another node reads, or which is a graph output, keeps its own buffer
    and the relu its own kernel."""
    xt, w, x = _layer()
    conv = xt.conv(Tensor.const(w), pads=1)
    for outs in ([conv.relu(), conv * 2.0], [conv.relu(), conv]):
        exe = _check(outs, [xt], [x])
        assert not any("conv_relu" in k for k in _kernels(exe))


STRATEGIES = [
    (64, 96, 3, 2, 1, "weight in matmul panels"),
    (8, 16, 3, 1, 1, "padded copy"),
    (8, 12, 3, 3, 1, "im2col"),
    (8, 12, 1, 1, 1, "1x1 reading x in place"),
    (6, 6, 3, 1, 6, "depthwise"),
]


def _conv_layer(cin: int, cout: int, k: int, stride: int, groups: int) -> tuple[Tensor, Tensor, np.ndarray]:
    """A conv with a bias over a placeholder ``x [2, cin, 9, 11]``, and an input for it."""
    xt = Tensor.placeholder((2, cin, 9, 11), np.float32, "x")
    w = RNG.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    conv = xt.conv(Tensor.const(w), strides=stride, pads=k // 2, groups=groups) + Tensor.const(b).reshape(
        cout, 1, 1
    )
    return xt, conv, RNG.standard_normal((2, cin, 9, 11)).astype(np.float32)


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "groups", "what"), STRATEGIES)
@pytest.mark.parametrize("form", ["conv + r", "r + conv", "relu(conv + r)", "relu(r + conv)"])
def test_residual_add_after_a_conv_is_fused_into_its_kernel(
    cin: int, cout: int, k: int, stride: int, groups: int, what: str, form: str
) -> None:
    """Every tuned conv strategy adds a residual of its own shape where it stores (then the
    relu): one ``conv_add`` kernel, no kernel of the add's or the relu's own, and the same bits
    as the unfused graph (whose conv is also an output, so it keeps its buffer)."""
    xt, conv, x = _conv_layer(cin, cout, k, stride, groups)
    rt = Tensor.placeholder(conv.shape, np.float32, "r")
    r = RNG.standard_normal(tuple(int(d) for d in conv.shape)).astype(np.float32)
    r.flat[::7] = np.nan if "relu" in form else r.flat[::7]  # a NaN stays NaN through the relu
    y = conv + rt if form.replace("relu(", "").startswith("conv") else rt + conv
    y = y.relu() if form.startswith("relu") else y
    exe = _check([y], [xt, rt], [x, r])
    entries = [k for k in _kernels(exe) if k.startswith("k") and "." not in k]
    assert entries == [f"k0_conv_conv_add{'_relu' if 'relu' in form else ''}"], (what, entries)
    unfused = compile([y, conv], [xt, rt])
    assert len([k for k in _kernels(unfused) if k.startswith("k") and "." not in k]) == 2
    got, want = exe.run([x, r])[0], unfused.run([x, r])[0]
    if what == "depthwise":  # its taps may contract to FMAs as LLVM chooses per kernel: 1 ulp
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_residual_add_variants() -> None:
    """The identity shortcut (``r`` is the conv's own input), a sum of two convs (a projection
    shortcut: one conv takes the other's value as its residual) and an add that is itself a graph
    output (its relu then runs as a kernel of its own) all fuse and compute the right values."""
    xt, conv, x = _conv_layer(8, 8, 3, 1, 1)
    identity = (conv + xt).relu()
    exe = _check([identity], [xt], [x])
    assert [k for k in _kernels(exe) if "." not in k and k.startswith("k")] == ["k0_conv_conv_add_relu"]

    w2 = RNG.standard_normal((8, 8, 1, 1)).astype(np.float32)
    projection = (conv + xt.conv(Tensor.const(w2))).relu()
    exe = _check([projection], [xt], [x])
    entries = [k for k in _kernels(exe) if "." not in k and k.startswith("k")]
    assert len(entries) == 2 and entries[-1].endswith("conv_add_relu"), entries

    total = conv + xt
    exe = _check([total.relu(), total], [xt], [x])
    entries = [k for k in _kernels(exe) if "." not in k and k.startswith("k")]
    assert any(k.endswith("conv_conv_add") for k in entries) and not any("add_relu" in k for k in entries)


def test_residual_add_is_not_fused_where_it_would_change_the_values() -> None:
    """A residual that broadcasts (one value per channel computed at run time), a conv whose
    value another node reads, and a conv that is a graph output keep their own ``add``."""
    xt, conv, x = _conv_layer(8, 12, 3, 1, 1)
    chan = Tensor.placeholder((1, 12, 1, 1), np.float32, "c")
    c = RNG.standard_normal((1, 12, 1, 1)).astype(np.float32)
    for outs in ([(conv + chan).relu()], [conv + chan, conv * 2.0], [(conv + chan), conv]):
        exe = _check(outs, [xt, chan], [x, c])
        assert not any("conv_add" in k for k in _kernels(exe)), outs


def test_a_donated_residual_keeps_its_add() -> None:
    """A residual that is a donated input is not fused: the add's own kernel writes the output
    over the donated memory (a conv kernel writes ``y`` before it reads ``r``, so it may not);
    the identity shortcut with ``x`` donated likewise. Undonated, the same graph fuses."""
    xt, conv, x = _conv_layer(8, 8, 3, 1, 1)
    rt = Tensor.placeholder(conv.shape, np.float32, "r")
    r = RNG.standard_normal(tuple(int(d) for d in conv.shape)).astype(np.float32)
    for outs, ins, vals, donate in (
        ([(conv + rt).relu()], [xt, rt], [x, r], [1]),
        ([(conv + xt).relu()], [xt], [x], [0]),
    ):
        want = reference.evaluate(outs, dict(zip(ins, vals, strict=True)))
        exe = compile(outs, ins, donate=donate)
        assert not any("conv_add" in k for k in _kernels(exe))
        np.testing.assert_allclose(exe.run([v.copy() for v in vals])[0], want[0], rtol=1e-4, atol=1e-4)
        assert any("conv_conv_add" in k for k in _kernels(compile(outs, ins)))


@pytest.mark.parametrize("groups", [1, 2])
def test_a_pointwise_conv_finishes_its_outputs_in_runs_of_positions(
    groups: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1x1 conv over many positions (read in place) adds its bias and residual and applies the
    relu one run of positions at a time, right after the run's product; a product split over
    threads runs whole and then that pass. Several runs and a short last one, batch 2, with and
    without groups: the reference's values, and the same bits both ways."""
    from asyncjit.codegen import _convnd, _convtaps, _parallel

    cin, cout, h, w = 16, 256, 23, 29  # 667 positions: runs of 256 (one thread)
    assert _convtaps._chunk(cout, 32) < h * w or _convtaps._chunk(cout, 16) < h * w
    xt = Tensor.placeholder((2, cin, h, w), np.float32, "x")
    rt = Tensor.placeholder((2, cout, h, w), np.float32, "r")
    wt = RNG.standard_normal((cout, cin // groups, 1, 1)).astype(np.float32)
    bias = RNG.standard_normal(cout).astype(np.float32)
    conv = xt.conv(Tensor.const(wt), groups=groups) + Tensor.const(bias).reshape(cout, 1, 1)
    y = (conv + rt).relu()
    x = RNG.standard_normal((2, cin, h, w)).astype(np.float32)
    r = RNG.standard_normal((2, cout, h, w)).astype(np.float32)
    runs = _check([y], [xt, rt], [x, r])
    assert [k for k in _kernels(runs) if "." not in k and k.startswith("k")] == ["k0_conv_conv_add_relu"]
    monkeypatch.setattr(_convnd, "PARALLEL_MIN_MACS", 0)
    whole = compile([y], [xt, rt], name="pointwise_whole", cache_dir="off")
    monkeypatch.undo()
    before = _parallel.set_intra_op_threads(2)
    try:
        split = whole.run([x, r])[0]
    finally:
        _parallel.set_intra_op_threads(before)
    np.testing.assert_array_equal(runs.run([x, r])[0], split)
