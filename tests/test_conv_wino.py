"""The 3x3 conv by Winograd's ``F(2x2, 3x3)`` (``codegen._convwino``).

Every case compiles without the disk cache and checks in the IR that the Winograd kernel ran,
then compares with the reference over many sizes of a symbolic input: one pixel (every patch
all padding), odd sizes (half tiles at the right and bottom edges, masked stores), widths that
take several blocks per tile row and heights that take several tile rows per block.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.codegen import _convwino, _parallel
from asyncjit.codegen._convwino import wino_chosen, wino_transform, wino_weight
from asyncjit.compiler import compile

RNG = np.random.default_rng(20261128)


def _ir(exe: Any) -> str:
    return exe.ir_text() if callable(exe.ir_text) else exe.ir_text


def _direct(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The 2x2 outputs of a 3x3 correlation over a 4x4 patch."""
    return np.array([[np.sum(d[i : i + 3, j : j + 3] * g) for j in range(2)] for i in range(2)])


def test_the_transforms_compute_a_3x3_correlation() -> None:
    """``A^T [U * (B^T d B)] A`` with ``U = wino_transform(g)`` is the direct correlation of the
    patch: the matrices the kernel's adds and subtracts spell out."""
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)
    for _ in range(20):
        g = RNG.standard_normal((3, 3))
        d = RNG.standard_normal((4, 4))
        u = wino_transform(g.reshape(1, 1, 3, 3).astype(np.float32)).astype(np.float64).reshape(4, 4)
        got = at @ (u * (bt @ d @ bt.T)) @ at.T
        np.testing.assert_allclose(got, _direct(d, g), rtol=1e-5, atol=1e-5)


def test_the_stored_weight_holds_the_transform_then_the_filters() -> None:
    w = RNG.standard_normal((40, 32, 3, 3)).astype(np.float32)
    stored = wino_weight(w)
    assert stored.dtype == np.float32 and stored.shape == (16 * 40 * 32 + w.size,)
    np.testing.assert_array_equal(stored[16 * 40 * 32 :], w.ravel())
    np.testing.assert_array_equal(stored[: 16 * 40 * 32], wino_transform(w).ravel())


GEOMETRY = dict(ks=(3, 3), strides=(1, 1), dilations=(1, 1), groups=1)


@pytest.mark.parametrize(
    ("layer", "chosen"),
    [
        (dict(cin=64, cout=64, pads=((1, 1), (1, 1)), s_max=(56, 56)), True),
        (dict(cin=32, cout=128, pads=((1, 1), (1, 1)), s_max=(27, 27)), True),  # 196 tiles
        (dict(cin=256, cout=256, pads=((1, 1), (1, 1)), s_max=(14, 14)), False),  # 49 tiles
        (dict(cin=16, cout=64, pads=((1, 1), (1, 1)), s_max=(55, 55)), False),  # few channels in
        (dict(cin=64, cout=16, pads=((1, 1), (1, 1)), s_max=(55, 55)), False),  # few channels out
        (dict(cin=64, cout=64, pads=((1, 1), (1, 1)), s_max=(56, 1 << 30)), False),  # 32-bit lane masks
    ],
)
def test_which_layers_it_takes(layer: dict[str, Any], chosen: bool) -> None:
    assert wino_chosen(**layer, **GEOMETRY) is chosen
    other = {**GEOMETRY, **layer}
    for change in (dict(strides=(2, 2)), dict(dilations=(2, 2)), dict(groups=2), dict(ks=(5, 5))):
        assert not wino_chosen(**{**other, **change})  # type: ignore[arg-type]


# cin, cout, ONNX pads (top, left, bottom, right), bias, epilogue, (h max, w max)
CASES = [
    (64, 64, (1, 1, 1, 1), True, "", (24, 40)),
    (32, 40, (0, 2, 1, 0), False, "relu", (25, 23)),  # pads on one side each; odd outputs
    (48, 32, (2, 1, 2, 1), True, "add_relu", (21, 31)),  # pads past the kernel's reach
    (33, 35, (1, 2, 1, 0), True, "add", (22, 300)),  # several blocks per tile row
]


@pytest.mark.parametrize("case", CASES)
def test_winograd_conv_equals_the_reference(case: tuple[Any, ...]) -> None:
    cin, cout, p, with_bias, epilogue, (hmax, wmax) = case
    monkey_tiles = _convwino.WINO_MIN_TILES
    assert (hmax + p[0] + p[2] - 2) * (wmax + p[1] + p[3] - 2) >= 4 * monkey_tiles
    h, w_ = Var("h", 1, hmax), Var("w", 1, wmax)
    w = RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    w2 = RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    xt = Tensor.placeholder((2, cin, h, w_), np.float32, "x")
    y = xt.conv(Tensor.const(w), Tensor.const(b) if with_bias else None, pads=p)
    if epilogue.startswith("add"):
        y = y + xt.conv(Tensor.const(w2), pads=p)
    if epilogue.endswith("relu"):
        y = y.relu()
    exe = compile(y, [xt], name="conv_wino", cache_dir="off")
    assert ".wino_in" in _ir(exe)
    sizes = {(hmax, wmax), (1, 1), (2, 3), (hmax - 1, wmax - 2), (5, 17), (hmax, 1), (1, wmax), (3, wmax - 1)}
    for hv, wv in sorted(sizes):
        bind = {"h": hv, "w": wv}
        x = RNG.standard_normal((2, cin, hv, wv)).astype(np.float32)
        (got,) = exe.run([x], bind)
        want = reference.evaluate(y, {xt: x}, bind)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(cin))


@pytest.mark.parametrize(("channels", "hw"), [(256, 40), (64, 60)])
def test_winograd_conv_gives_the_same_bits_on_every_thread_count(channels: int, hw: int) -> None:
    """A large layer's blocks are claimed by the intra-op threads, each part in its own scratch
    (up to ``WINO_WIDE_PARTS`` with 256 channels, so three threads share two regions; up to
    ``MAX_THREADS`` with 64), over two samples, with a fused residual. Every output is computed as
    on one thread: the same bits on every count."""
    from asyncjit.codegen._convwino import WINO_WIDE_PARTS, _parts_cap
    from asyncjit.codegen._matmul import PARALLEL_MIN_MACS

    assert _parts_cap(channels, channels) == (_parallel.MAX_THREADS if channels <= 128 else WINO_WIDE_PARTS)
    assert hw * hw * channels * channels * 9 >= PARALLEL_MIN_MACS
    w = (RNG.standard_normal((channels, channels, 3, 3)) / (3 * np.sqrt(channels))).astype(np.float32)
    xt = Tensor.placeholder((2, channels, hw, hw), np.float32, "x")
    rt = Tensor.placeholder((2, channels, hw, hw), np.float32, "r")
    y = (xt.conv(Tensor.const(w), pads=1) + rt).relu()
    exe = compile(y, [xt, rt], name=f"conv_wino_split_{channels}", cache_dir="off")
    assert ".wino_in" in _ir(exe)
    x = RNG.standard_normal((2, channels, hw, hw)).astype(np.float32)
    r = RNG.standard_normal((2, channels, hw, hw)).astype(np.float32)
    old = _parallel.intra_op_threads()
    try:
        outs = {}
        for threads in (1, 2, 3):
            _parallel.set_intra_op_threads(threads)
            (outs[threads],) = exe.run([x, r], {})
    finally:
        _parallel.set_intra_op_threads(old)
    for out in outs.values():
        np.testing.assert_array_equal(out, outs[1])
    np.testing.assert_allclose(outs[1], reference.evaluate(y, {xt: x, rt: r}, {}), rtol=1e-4, atol=1e-4)


def test_outputs_outside_the_documented_range_are_the_only_ones_that_differ() -> None:
    """Inputs near the float32 maximum make Winograd's intermediate sums overflow where a direct
    conv's do not (``docs/semantics.md``): the outputs whose 4x4 patches hold such an input (or an
    inf) may be inf or NaN. Every other output equals the reference, and the fuzzer's bound
    (``fuzzing._winograd_overflow``) flags every one that does not."""
    from fuzzing import _winograd_overflow

    cin, cout, hw = 32, 32, 24
    w = (RNG.integers(-8, 9, size=(cout, cin, 3, 3)) / 4).astype(np.float32)
    x = RNG.standard_normal((1, cin, hw, hw)).astype(np.float32)
    x[0, 3, 5, 7] = 2.0e38  # 4x it overflows in the input transform
    x[0, 9, 17, 2] = -1.5e38
    x[0, 20, 11, 19] = np.inf
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    y = xt.conv(Tensor.const(w), pads=1)
    exe = compile(y, [xt], name="conv_wino_range", cache_dir="off")
    assert ".wino_in" in _ir(exe)
    (got,) = exe.run([x], {})
    want = reference.evaluate(y, {xt: x}, {})
    flagged = _winograd_overflow(y.node, [x, w], want.shape)
    assert 0 < flagged.sum() < flagged.size // 2
    assert not np.all(np.isfinite(got[flagged]))  # the documented case happens
    np.testing.assert_allclose(got[~flagged], want[~flagged], rtol=1e-4, atol=1e-3)
