"""Convolutions rewritten when they are built, each to the same sums at less cost: taps that read
only padding are dropped from a constant weight (``conv1d`` and ``conv``; Silero VAD's last
encoder layers: a 3-tap conv over one frame becomes a 1x1 conv), a conv of one position in and
out is a matmul, and a one-channel conv1d whose constant filters are a DFT basis (an STFT as
models export it) runs on frames folded in half."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import compile

RNG = np.random.default_rng(7)


def _ops(y: Tensor) -> dict[str, Any]:
    found: dict[str, Any] = {}
    stack, seen = [y.node], set()
    while stack:
        node = stack.pop()
        found.setdefault(node.op, node)
        if node.id not in seen:
            seen.add(node.id)
            stack.extend(node.inputs)
    return found


def _taps(y: Tensor) -> tuple[int, ...]:
    """The conv's kernel size; () where it became a matmul (one position in, one out)."""
    ops = _ops(y)
    conv = ops.get("conv1d", ops.get("conv"))
    if conv is None:
        assert "matmul" in ops
        return ()
    return tuple(int(d) for d in conv.inputs[1].shape[2:])


def _numpy_conv1d(x: np.ndarray, w: np.ndarray, stride: int, dil: int, lo: int, hi: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (lo, hi)])
    k = w.shape[2]
    n_out = (xp.shape[2] - dil * (k - 1) - 1) // stride + 1
    cols = np.stack([xp[:, :, t * stride : t * stride + dil * (k - 1) + 1 : dil] for t in range(n_out)], 2)
    return np.einsum("nctk,ock->not", cols, w.astype(np.float64))


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_conv1d_every_geometry_keeps_its_sums(size: int) -> None:
    """Every small geometry: the constant-weight graph (taps dropped where they read nothing)
    equals a direct numpy convolution, output size included."""
    x = RNG.standard_normal((2, 3, size)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    dropped = 0
    for k, stride, dil, lo, hi in itertools.product(
        (1, 2, 3, 4), (1, 2, 3), (1, 2), (0, 1, 2, 3), (0, 1, 2, 3)
    ):
        if (size + lo + hi - dil * (k - 1) - 1) // stride < 0:
            continue
        w = RNG.standard_normal((4, 3, k)).astype(np.float32)
        y = xt.conv1d(Tensor.const(w), stride=stride, padding=(lo, hi), dilation=dil)
        dropped += _taps(y) != (k,)
        got = reference.evaluate(y, {xt: x})
        want = _numpy_conv1d(x, w, stride, dil, lo, hi)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dropped  # every size has geometries with padding-only taps


def test_single_position_convs_are_matmuls() -> None:
    """1x1 kernels over 1x1 inputs (heads over pooled features), with bias, 1-d and 2-d, equal
    the conv with the weight as an input; groups and other dtypes keep the conv."""
    for shape in ((3, 8, 1), (3, 8, 1, 1)):
        r = len(shape) - 2
        x = RNG.standard_normal(shape).astype(np.float32)
        w = RNG.standard_normal((5, 8) + (1,) * r).astype(np.float32)
        bias = RNG.standard_normal(5).astype(np.float32)
        xt = Tensor.placeholder(shape, np.float32, "x")
        wt = Tensor.placeholder(w.shape, np.float32, "w")
        y = xt.conv(Tensor.const(w), Tensor.const(bias))
        assert _taps(y) == ()
        want = reference.evaluate(xt.conv(wt, Tensor.const(bias)), {xt: x, wt: w})
        np.testing.assert_allclose(compile(y, [xt]).run([x])[0], want, rtol=1e-5, atol=1e-5)
    grouped = Tensor.placeholder((1, 8, 1), np.float32, "g").conv1d(
        Tensor.const(np.ones((4, 4, 1), np.float32)), groups=2
    )
    assert _taps(grouped) == (1,)
    half = Tensor.placeholder((1, 8, 1), np.float16, "h").conv1d(Tensor.const(np.ones((4, 8, 1), np.float16)))
    assert _taps(half) == (1,)


def test_conv2d_drops_per_axis_and_compiles() -> None:
    """A 3x3 conv over a 1x5 input keeps only its middle row of taps; compiled, it equals the
    reference of the full weight."""
    x = RNG.standard_normal((2, 4, 1, 5)).astype(np.float32)
    w = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
    xt = Tensor.placeholder(x.shape, np.float32, "x")
    wt = Tensor.placeholder(w.shape, np.float32, "w")
    y = xt.conv(Tensor.const(w), pads=1)
    assert _taps(y) == (1, 3)
    want = reference.evaluate(xt.conv(wt, pads=1), {xt: x, wt: w})
    np.testing.assert_allclose(compile(y, [xt]).run([x])[0], want, rtol=1e-5, atol=1e-5)


def test_silero_like_tail_becomes_pointwise_and_compiles() -> None:
    """Over one frame a 3-tap conv with padding 1 is a 1x1 conv, one position in and one out:
    a matmul; two frames at stride 2 keep two taps. Batch is symbolic."""
    b = Var("b", 1, 8)
    for length, stride, taps in ((1, 1, ()), (2, 2, (2,))):
        w = RNG.standard_normal((5, 6, 3)).astype(np.float32)
        xt = Tensor.placeholder((b, 6, length), np.float32, "x")
        y = xt.conv1d(Tensor.const(w), Tensor.const(np.ones(5, np.float32)), stride=stride, padding=1)
        assert _taps(y) == taps
        exe = compile(y, [xt])
        wt = Tensor.placeholder(w.shape, np.float32, "w")
        y_full = xt.conv1d(wt, Tensor.const(np.ones(5, np.float32)), stride=stride, padding=1)
        for bv in (1, 3, 8):
            x = RNG.standard_normal((bv, 6, length)).astype(np.float32)
            want = reference.evaluate(y_full, {xt: x, wt: w}, {"b": bv})
            np.testing.assert_allclose(exe.run([x], {"b": bv})[0], want, rtol=1e-5, atol=1e-5)


def test_nonfinite_dropped_taps_and_symbolic_sizes_are_kept() -> None:
    """An inf in a padding-only tap makes NaN against the zeros: the weight stays whole. A
    symbolic length may reach every tap: nothing is dropped."""
    w = RNG.standard_normal((2, 1, 3)).astype(np.float32)
    w[0, 0, 0] = np.inf
    xt = Tensor.placeholder((1, 1, 1), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), padding=1)
    assert _taps(y) == (3,)
    assert np.isnan(reference.evaluate(y, {xt: np.ones((1, 1, 1), np.float32)})[0, 0, 0])
    n = Var("n", 1, 9)
    xs = Tensor.placeholder((1, 1, n), np.float32, "xs")
    assert _taps(xs.conv1d(Tensor.const(np.ones((2, 1, 3), np.float32)), padding=1)) == (3,)


def _dft_basis(k: int, bins: int, windowed: bool = True) -> np.ndarray:
    """cos rows then -sin rows, ``[2*bins, 1, k]``, exactly even/odd about ``k/2`` (as
    ``torch.stft``'s real DFT matrix with a symmetric window is)."""
    n, f = np.arange(k), np.arange(bins)[:, None]
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / k) if windowed else np.ones(k)
    basis = np.concatenate([np.cos(2 * np.pi * f * n / k) * win, -np.sin(2 * np.pi * f * n / k) * win])
    basis = basis.astype(np.float32)
    half = k // 2
    mid = np.arange(1, half)
    sign = np.r_[np.ones(bins), -np.ones(bins)][:, None].astype(np.float32)
    basis[:, k - mid] = basis[:, mid] * sign
    basis[bins:, [0, half]] = 0
    return basis[:, None, :]


@pytest.mark.parametrize(
    ("k", "stride", "pads", "length"),
    [
        (256, 128, (0, 0), 640),  # Silero VAD 16 kHz: frames of two hops
        (128, 64, (0, 0), 320),  # Silero VAD 8 kHz
        (64, 16, (32, 32), 200),  # hop of a quarter window, centred: frames in the padding
        (32, 32, (0, 5), 100),  # no overlap
        (16, 40, (0, 0), 100),  # hops longer than the window
        (400, 160, (0, 0), 1200),  # Whisper's 25 ms window at 16 kHz: not a power of two
        (48, 24, (24, 24), 150),  # ... centred
    ],
)
def test_dft_conv_runs_by_fft_or_folded_and_equals_the_conv(
    k: int, stride: int, pads: tuple[int, int], length: int
) -> None:
    """A windowed DFT basis stays a conv1d, which the compiler runs by FFT, when its window is a
    power of two (``codegen._convfft``); other lengths run on folded frames (two matmuls). Either
    equals numpy's direct convolution (float64) at every batch size, the rows in the file's
    order, and a row's result does not depend on the batch."""
    w = _dft_basis(k, k // 2 + 1)
    b = Var("b", 1, 6)
    xt = Tensor.placeholder((b, 1, length), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), stride=stride, padding=pads)
    if k & (k - 1):
        assert "conv1d" not in _ops(y) and "matmul" in _ops(y)
    else:
        assert "conv1d" in _ops(y) and "matmul" not in _ops(y)
    exe = compile(y, [xt])
    for bv in (1, 4, 6):
        x = RNG.standard_normal((bv, 1, length)).astype(np.float32)
        want = _numpy_conv1d(x, w, stride, 1, *pads)
        got = exe.run([x], {"b": bv})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.abs(want).max())
        one = exe.run([x[:1]], {"b": 1})[0]
        np.testing.assert_array_equal(got[:1], one)  # a row's result does not depend on the batch


def test_dft_conv_rows_in_any_order_and_bias() -> None:
    """sin rows before cos rows, interleaved, with a bias: the output keeps the filters' order."""
    w = _dft_basis(64, 33)
    order = RNG.permutation(w.shape[0])
    w = np.ascontiguousarray(w[order])
    bias = RNG.standard_normal(w.shape[0]).astype(np.float32)
    xt = Tensor.placeholder((2, 1, 256), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), Tensor.const(bias), stride=32)
    assert "conv1d" not in _ops(y)
    x = RNG.standard_normal((2, 1, 256)).astype(np.float32)
    want = _numpy_conv1d(x, w, 32, 1, 0, 0) + bias[None, :, None]
    np.testing.assert_allclose(compile(y, [xt]).run([x])[0], want, rtol=1e-5, atol=1e-4)


def test_other_filters_keep_the_conv() -> None:
    """A filter bank with one row neither even nor odd, an odd window, several channels, a
    dilation, a symbolic length, a weight given at run time: the plain conv1d."""
    w = _dft_basis(64, 33)
    broken = w.copy()
    broken[3, 0, 5] += 1.0
    x1 = Tensor.placeholder((1, 1, 256), np.float32, "x")
    assert "conv1d" in _ops(x1.conv1d(Tensor.const(broken), stride=32))
    assert "conv1d" in _ops(x1.conv1d(Tensor.const(_dft_basis(64, 33)[:, :, :63]), stride=32))
    assert "conv1d" in _ops(x1.conv1d(Tensor.const(w), stride=32, dilation=2))
    assert "conv1d" in _ops(x1.conv1d(Tensor.placeholder(w.shape, np.float32, "w"), stride=32))
    x2 = Tensor.placeholder((1, 2, 256), np.float32, "x2")
    assert "conv1d" in _ops(x2.conv1d(Tensor.const(np.repeat(w, 2, axis=1)), stride=32))
    xs = Tensor.placeholder((1, 1, Var("n", 64, 512)), np.float32, "xs")
    assert "conv1d" in _ops(xs.conv1d(Tensor.const(w), stride=32))


def test_arguments_are_checked_before_any_rewrite() -> None:
    """A conv the rewrites would turn into a matmul still gets the op's checks, naming the
    caller's weight: bad strides, dilations, bias, groups."""
    from asyncjit.errors import JitError

    x = Tensor.placeholder((1, 8, 1, 1), np.float32, "x")
    w = Tensor.const(np.ones((5, 8, 1, 1), np.float32))
    for kwargs in (
        {"bias": Tensor.const(np.ones(1, np.float32))},
        {"strides": 0},
        {"dilations": -1},
        {"groups": 3},
    ):
        with pytest.raises(JitError):
            x.conv(w, **kwargs)  # type: ignore[arg-type]
    x1 = Tensor.placeholder((1, 8, 1), np.float32, "x1")
    with pytest.raises(JitError, match="stride"):
        x1.conv1d(Tensor.const(np.ones((5, 8, 1), np.float32)), stride=0)
    with pytest.raises(JitError, match=r"\(4, 6, 3\)|4, 6, 3"):
        x1.conv1d(Tensor.const(np.ones((4, 6, 3), np.float32)), padding=1)  # channels: the given weight
