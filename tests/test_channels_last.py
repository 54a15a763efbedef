"""The channels-last layout pass (``passes.channels_last``): convs the panels kernel computes pass
their activations ``[N, H, W, C]`` to each other, and the ops between them run on that layout.

Every case compiles one graph with the pass and without it: the results must be the same bits
(the products and the order of every sum are unchanged) and match the reference interpreter.
Which convs got which layout is read from the rewritten graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, reference
from asyncjit.compiler import compile
from asyncjit.graph import make_node
from asyncjit.graph._nn import conv_layout
from asyncjit.passes import Graph, channels_last, channels_last_enabled, optimize_graph, set_channels_last
from asyncjit.passes._fusion import conv_panel_weight, conv_takes_panels

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = channels_last_enabled()
    yield
    set_channels_last(before)


def _w(cout: int, cin: int, k: int) -> Tensor:
    return Tensor.const((RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))


def _b(c: int) -> Tensor:
    return Tensor.const(RNG.standard_normal(c).astype(np.float32))


def _both(outs: list[Tensor], ins: list[Tensor], values: list[np.ndarray]) -> list[np.ndarray]:
    """Compile with and without the pass; assert the same bits and the reference's values."""
    got = {}
    for on in (False, True):
        set_channels_last(on)
        got[on] = compile(outs, ins).run(values)
    want = reference.evaluate(outs, dict(zip(ins, values, strict=True)))
    for a, b, w in zip(got[False], got[True], want, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(b, w, rtol=1e-4, atol=1e-4)
    return got[True]


def _convs_after_pass(outs: list[Tensor], ins: list[Tensor], on: bool = True) -> list[Any]:
    """Every conv of the graph after the pass (on or off), in graph order."""
    set_channels_last(on)
    g = channels_last(optimize_graph(Graph.of([o.node for o in outs], [i.node for i in ins])))
    return [n for n in g.nodes if n.op == "conv"]


def _layouts(outs: list[Tensor], ins: list[Tensor]) -> list[tuple[bool, bool]]:
    """The layout of every conv after the pass, in graph order."""
    return [conv_layout(n.attrs) for n in _convs_after_pass(outs, ins)]


def _bottleneck(c: int = 256, mid: int = 160, hw: int = 7) -> tuple[Tensor, Tensor]:
    """ResNet's block at a late stage (narrower): 1x1 down, 3x3, 1x1 up, the input added, relu;
    every conv one the panels kernel takes."""
    x = Tensor.placeholder((1, c, hw, hw), np.float32, "x")
    y = x.conv(_w(mid, c, 1), _b(mid)).relu()
    y = y.conv(_w(mid, mid, 3), _b(mid), pads=1).relu()
    return x, (y.conv(_w(c, mid, 1), _b(c)) + x).relu()


def test_a_stage_keeps_its_activations_channels_last() -> None:
    """A stage's first block (its residual a downsampling conv) and a second block: the two convs
    reading the NCHW input transpose it themselves, every conv after them takes its input
    channels-last, the residual adds and relus run on channels-last values, and only the last
    conv gives NCHW back (its sum is the graph's output). Same bits as the NCHW plan."""
    x = Tensor.placeholder((1, 256, 7, 7), np.float32, "x")
    y = x.conv(_w(160, 256, 1), _b(160)).relu().conv(_w(160, 160, 3), _b(160), pads=1).relu()
    y = (y.conv(_w(512, 160, 1), _b(512)) + x.conv(_w(512, 256, 1), _b(512))).relu()
    out = (y.conv(_w(96, 512, 1), _b(96)).relu().conv(_w(512, 96, 1), _b(512)) + y).relu()
    layouts = _layouts([out], [x])
    assert sorted(layouts) == [(False, True)] * 2 + [(True, False)] + [(True, True)] * 3
    _both([out], [x], [RNG.standard_normal((1, 256, 7, 7)).astype(np.float32)])


def _panels_after_pass(outs: list[Tensor], ins: list[Tensor], on: bool) -> list[bool]:
    """Per conv after the pass (on or off), in graph order: whether it reads its weight in panels."""
    return [conv_panel_weight(n) is not None for n in _convs_after_pass(outs, ins, on)]


def test_wide_1x1_convs_over_many_positions_are_panels_convs_only_inside_a_region() -> None:
    """At 56x56 a 1x1 conv with 256 channels on a side is a panels conv when its output feeds
    another one untransposed (ResNet's first stage), and is given back to the in-place NCHW
    kernel when it stands alone or the pass is off (two transposes of 3 MB activations for
    nothing); the same bits either way."""
    x = Tensor.placeholder((1, 64, 56, 56), np.float32, "x")
    chain = x.conv(_w(256, 64, 1), _b(256)).relu().conv(_w(64, 256, 1), _b(64)).relu()
    assert _layouts([chain], [x]) == [(False, True), (True, False)]
    assert _panels_after_pass([chain], [x], True) == [True, True]
    assert _panels_after_pass([chain], [x], False) == [False, False]
    xv = RNG.standard_normal((1, 64, 56, 56)).astype(np.float32)
    _both([chain], [x], [xv])
    lone = x.conv(_w(256, 64, 1), _b(256)).relu()
    assert _panels_after_pass([lone], [x], True) == [False]
    assert _layouts([lone], [x]) == [(False, False)]
    _both([lone], [x], [xv])


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "hw"),
    [
        (256, 64, 1, 1, 14),  # 1x1: the input is the product's operand itself
        (160, 160, 3, 1, 14),  # 3x3 with pads: the receptive fields copied from [S, cin]
        (512, 512, 3, 1, 7),  # rows of 512 floats: the product writes scratch rows, then copies
        (256, 512, 1, 2, 14),  # a 1x1 of stride 2
    ],
)
@pytest.mark.parametrize("layout", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("epilogue", ["residual"])
def test_each_layout_of_the_panels_conv(
    cin: int, cout: int, k: int, stride: int, hw: int, layout: tuple[bool, bool], epilogue: str
) -> None:
    """A conv given each layout by hand (as the pass would) computes the NCHW conv's bits, with
    the bias, a fused relu, or a fused residual add and relu; the kernel reads and writes only
    inside its operands (the results are compared whole)."""
    last_in, last_out = layout
    pad = k // 2
    shape = (1, hw, hw, cin) if last_in else (1, cin, hw, hw)
    xt = Tensor.placeholder(shape, np.float32, "x")
    w, b = _w(cout, cin, k), _b(cout)
    attrs: dict[str, Any] = dict(
        strides=(stride, stride), pads=((pad, pad), (pad, pad)), dilations=(1, 1), groups=1
    )
    if last_in:
        attrs["channels_last_in"] = True
    if last_out:
        attrs["channels_last_out"] = True
    conv = Tensor(make_node("conv", (xt.node, w.node, b.node), **attrs))
    oh = (hw + 2 * pad - k) // stride + 1
    out_shape = (1, oh, oh, cout) if last_out else (1, cout, oh, oh)
    r = Tensor.placeholder(out_shape, np.float32, "r")
    y = {"bias": conv, "relu": conv.relu(), "residual": (conv + r).relu()}[epilogue]
    x = RNG.standard_normal(shape).astype(np.float32)
    rv = RNG.standard_normal(out_shape).astype(np.float32)
    assert conv_takes_panels(conv.node)
    got = compile([y], [xt, r]).run([x, rv])[0]
    # the NCHW conv on the NCHW input, laid out as this one's output
    x_first = np.ascontiguousarray(np.moveaxis(x, -1, 1)) if last_in else x
    xf = Tensor.placeholder(x_first.shape, np.float32, "x")
    plain = xf.conv(w, b, strides=stride, pads=pad)
    r_first = np.ascontiguousarray(np.moveaxis(rv, -1, 1)) if last_out else rv
    rf = Tensor.placeholder(r_first.shape, np.float32, "r")
    yf = {"bias": plain, "relu": plain.relu(), "residual": (plain + rf).relu()}[epilogue]
    want = compile([yf], [xf, rf]).run([x_first, r_first])[0]
    np.testing.assert_array_equal(got, np.moveaxis(want, 1, -1) if last_out else want)
    np.testing.assert_allclose(got, reference.evaluate([y], {xt: x, r: rv})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("epilogue", ["bias", "relu"])
def test_each_epilogue_of_a_channels_last_conv(epilogue: str) -> None:
    """The other epilogues (the residual's is in every case above), on the 2 KiB-row layer."""
    test_each_layout_of_the_panels_conv(512, 512, 3, 1, 7, (True, True), epilogue)


def test_ops_between_convs_run_channels_last() -> None:
    """A per-channel scale after a relu (not folded into a weight), a sigmoid and a sum of two
    branches stay inside the region: both convs after them take channels-last inputs."""
    xt = Tensor.placeholder((1, 160, 14, 14), np.float32, "x")
    s = Tensor.const(RNG.uniform(0.5, 2.0, (1, 160, 1, 1)).astype(np.float32))
    a = xt.conv(_w(160, 160, 1), _b(160)).relu() * s
    b = xt.conv(_w(160, 160, 3), _b(160), pads=1).sigmoid()
    y = (a + b).conv(_w(192, 160, 3), _b(192), pads=1)
    assert _layouts([y], [xt]) == [(False, True), (False, True), (True, False)]
    _both([y], [xt], [RNG.standard_normal((1, 160, 14, 14)).astype(np.float32)])


def test_a_value_read_in_both_layouts() -> None:
    """A channels-last value that an op outside the region also reads (a pool, and the graph's
    outputs) is given to it through one transposing copy; every output is right."""
    x, y = _bottleneck()
    nxt = y.conv(_w(256, 256, 1), _b(256)).relu()
    pooled = y.max_pool([2, 2], strides=[2, 2])
    assert (True, True) in _layouts([nxt, pooled, y], [x])
    _both([nxt, pooled, y], [x], [RNG.standard_normal((1, 256, 7, 7)).astype(np.float32)])


@pytest.mark.parametrize(
    "make",
    [
        # many positions: the 1x1 reads x in place as NCHW and no panels conv is near
        lambda x: x.conv(_w(64, 32, 1), _b(64)).relu().conv(_w(64, 64, 1), _b(64)),
        # a weight computed at run time is never laid out in panels
        lambda x: x.conv(_w(64, 32, 1) * 1.0, _b(64)).relu().conv(_w(64, 64, 1) + x.sum() * 0.0, _b(64)),
    ],
)
def test_convs_the_panels_kernel_does_not_compute_keep_nchw(make: Callable[[Tensor], Tensor]) -> None:
    xt = Tensor.placeholder((1, 32, 56, 56), np.float32, "x")
    y = make(xt)
    assert all(layout == (False, False) for layout in _layouts([y], [xt]))
    _both([y], [xt], [RNG.standard_normal((1, 32, 56, 56)).astype(np.float32)])


def test_a_channels_last_conv_no_kernel_takes_is_computed_as_nchw() -> None:
    """A graph built by hand may give any conv channels-last operands: one the panels kernel
    does not take (groups, here) is rewritten as permutes around the NCHW conv, with or without
    the pass."""
    xt, y = _hand_built()
    assert tuple(y.shape) == (1, 9, 8, 6)
    _both([y], [xt], [RNG.standard_normal((1, 9, 8, 4)).astype(np.float32)])


def test_the_switch_is_part_of_the_plan_key() -> None:
    """A plan compiled with the pass is not served when it is off (and back): two executables."""
    x, y = _bottleneck()
    set_channels_last(True)
    on = compile([y], [x])
    set_channels_last(False)
    off = compile([y], [x])
    assert on is not off
    ir = [e.ir_text() if callable(e.ir_text) else e.ir_text for e in (on, off)]
    assert ir[0] != ir[1]


def _hand_built(groups: int = 2) -> tuple[Tensor, Tensor]:
    xt = Tensor.placeholder((1, 9, 8, 4), np.float32, "x")
    w = Tensor.const(RNG.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32))
    node = make_node(
        "conv", (xt.node, w.node), strides=(1, 1), pads=((1, 1), (1, 1)), dilations=(1, 1), groups=groups,
        channels_last_in=True, channels_last_out=True,
    )  # fmt: skip
    return xt, Tensor(node)


def test_a_hand_built_layout_conv_beside_a_plugin_partition() -> None:
    """With a plugin claiming part of the graph (the region pass then stays off), a conv given
    channels-last operands that no kernel takes still runs as permutes around the NCHW conv."""
    from test_partition import NumpyDispatch

    xt, y = _hand_built()
    out = y.sin()
    x = RNG.standard_normal((1, 9, 8, 4)).astype(np.float32)
    plugin = NumpyDispatch(ops=["sin"])
    got = compile([out], [xt], plugins=[plugin]).run([x])[0]
    assert plugin.programs  # the sin ran in the plugin's partition
    np.testing.assert_allclose(got, reference.evaluate([out], {xt: x})[0], rtol=1e-4, atol=1e-4)


def test_a_scale_after_a_channels_last_conv_is_not_folded_as_per_channel() -> None:
    """``conv * s`` with ``s`` along an axis that would be the channels in NCHW (here H, as long
    as C) is not folded into the weight of a conv whose channels are last; a scale of another
    length along that axis compiles too."""
    xt = Tensor.placeholder((1, 6, 6, 4), np.float32, "x")
    w = Tensor.const(RNG.standard_normal((6, 4, 3, 3)).astype(np.float32))
    attrs = {"strides": (1, 1), "pads": ((1, 1), (1, 1)), "dilations": (1, 1), "groups": 1}
    conv = Tensor(
        make_node("conv", (xt.node, w.node), **attrs, channels_last_in=True, channels_last_out=True)
    )
    x = RNG.standard_normal((1, 6, 6, 4)).astype(np.float32)
    for s in (np.arange(1.0, 7.0).reshape(1, 6, 1, 1), np.arange(1.0, 7.0).reshape(1, 1, 6, 1)):
        y = conv * Tensor.const(s.astype(np.float32))
        got = compile([y], [xt]).run([x])[0]
        np.testing.assert_allclose(got, reference.evaluate([y], {xt: x})[0], rtol=1e-4, atol=1e-4)
