"""A conv1d whose constant weight is a windowed DFT basis runs by FFT (``codegen._convfft``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var
from asyncjit.codegen._convfft import FFT_MAX_K, dft_sign, emit_conv1d_fft, fft_scratch_bytes
from asyncjit.compiler import compile
from asyncjit.graph import toposort
from asyncjit.passes._fusion import conv1d_fft_sign

RNG = np.random.default_rng(11)


def _basis(k: int, sign: int = -1, window: str = "hann", rows: int | None = None) -> np.ndarray:
    """``[2F, 1, k]`` float32: ``win cos`` rows, then ``sign win sin`` rows (``F = k/2 + 1``)."""
    n = np.arange(k)
    if window == "hann":
        win = 0.5 - 0.5 * np.cos(2 * np.pi * n / k)
    elif window == "ones":
        win = np.ones(k)
    else:
        win = RNG.uniform(0.05, 3.0, k)
    phase = 2 * np.pi * ((np.arange(rows or k // 2 + 1)[:, None] * n) % k) / k
    return np.concatenate([win * np.cos(phase), sign * win * np.sin(phase)])[:, None, :].astype(np.float32)


def _direct(x: np.ndarray, w: np.ndarray, stride: int, pads: tuple[int, int]) -> np.ndarray:
    """The convolution in float64 with the stored weight."""
    xp = np.pad(x[:, 0].astype(np.float64), ((0, 0), pads))
    k = w.shape[2]
    lout = (xp.shape[1] - k) // stride + 1
    frames = np.stack([xp[:, j * stride : j * stride + k] for j in range(lout)], 1)  # [n, lout, k]
    return np.einsum("nlk,ck->ncl", frames, w[:, 0].astype(np.float64))


def _nodes(t: Tensor) -> list[Any]:
    return list(toposort([t.node]))


def _ops(t: Tensor) -> set[str]:
    return {n.op for n in _nodes(t)}


@pytest.mark.parametrize(
    ("k", "stride", "pads", "length", "sign", "window"),
    [
        (256, 128, (0, 0), 640, -1, "hann"),  # Silero VAD at 16 kHz: four frames per chunk
        (128, 64, (0, 0), 320, -1, "hann"),  # ... at 8 kHz
        (512, 160, (256, 256), 1600, -1, "hann"),  # centred frames, 10 ms hop: 11 frames
        (64, 16, (40, 70), 100, 1, "random"),  # frames wholly in the padding
        (16, 1, (0, 0), 40, 1, "ones"),  # every sample a frame start
        (32, 45, (3, 0), 400, -1, "hann"),  # hops longer than the window
        (1024, 512, (0, 0), 1024 * 3, -1, "random"),
        (FFT_MAX_K, 2048, (0, 0), 4096 + 2048 * 2, 1, "hann"),
    ],
)
def test_fft_conv_equals_the_direct_convolution(
    k: int, stride: int, pads: tuple[int, int], length: int, sign: int, window: str
) -> None:
    """Against float64 sums with the stored basis, at several batch sizes (groups of eight
    frames with tails, eight frames of one sample, runs of four, lane by lane), within the
    FFT's rounding: ``(4 log2 k + 4) u sum |win x|`` over the frame (docs/semantics.md)."""
    w = _basis(k, sign, window)
    assert dft_sign(w) == sign
    b = Var("b", 1, 9)
    xt = Tensor.placeholder((b, 1, length), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), stride=stride, padding=pads)
    assert "conv1d" in _ops(y) and "matmul" not in _ops(y)
    assert conv1d_fft_sign(y.node) == sign  # what the kernel selection asks
    exe = compile(y, [xt])
    for bv in (1, 2, 3, 9):
        x = RNG.standard_normal((bv, 1, length)).astype(np.float32)
        want = _direct(x, w, stride, pads)
        got = exe.run([x], {"b": bv})[0]
        assert got.shape == want.shape
        frames = np.abs(np.pad(x[:, 0], ((0, 0), pads))).astype(np.float64)
        scale = max(float(np.convolve(frames[i], np.abs(w[0, 0])[::-1]).max()) for i in range(bv))
        np.testing.assert_allclose(got, want, rtol=0, atol=(4 * np.log2(k) + 4) * 2.0**-24 * scale)
        for i in range(bv):  # a sample's result does not depend on its batch or position
            np.testing.assert_array_equal(got[i : i + 1], exe.run([x[i : i + 1]], {"b": 1})[0])


def test_fft_conv_over_a_symbolic_length_and_every_frame_count() -> None:
    """One plan over a symbolic length: 1 to 20 frames per sample, so every way a group of eight
    frames falls across samples; the kernel reads ``x`` only inside its extents (an input at
    its exact length, no slack)."""
    k, stride = 64, 16
    w = _basis(k)
    n = Var("n", k, k + 19 * stride)
    xt = Tensor.placeholder((3, 1, n), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), stride=stride, padding=(0, 0))
    assert "conv1d" in _ops(y)
    exe = compile(y, [xt])
    for frames in range(1, 21):
        length = k + (frames - 1) * stride
        x = RNG.standard_normal((3, 1, length)).astype(np.float32)
        got = exe.run([x], {"n": length})[0]
        assert got.shape == (3, k + 2, frames)
        np.testing.assert_allclose(got, _direct(x, w, stride, (0, 0)), rtol=0, atol=2e-5 * np.abs(x).sum())


def test_fft_conv_zero_rows_and_bias() -> None:
    """The sine rows of bins 0 and k/2 are exact zeros, as the direct sums are; a bias adds."""
    k = 128
    w = _basis(k)
    bias = RNG.standard_normal(w.shape[0]).astype(np.float32)
    xt = Tensor.placeholder((2, 1, 512), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), Tensor.const(bias), stride=64)
    x = RNG.standard_normal((2, 1, 512)).astype(np.float32)
    got = compile(y, [xt]).run([x])[0]
    f = k // 2 + 1
    assert not (got[:, f] - bias[f]).any() and not (got[:, f + k // 2] - bias[f + k // 2]).any()
    np.testing.assert_allclose(got, _direct(x, w, 64, (0, 0)) + bias[None, :, None], rtol=0, atol=1e-4)


def test_non_finite_inputs_reach_only_their_frames() -> None:
    """An inf or a NaN in one frame makes every output of that frame NaN (a direct conv gives
    inf or NaN in each: the FFT mixes a frame's samples into every row) and leaves every other
    frame and sample as it was."""
    k, stride = 32, 32
    w = _basis(k, window="ones")
    xt = Tensor.placeholder((2, 1, 4 * k), np.float32, "x")
    exe = compile(xt.conv1d(Tensor.const(w), stride=stride), [xt])
    x = RNG.standard_normal((2, 1, 4 * k)).astype(np.float32)
    clean = exe.run([x])[0]
    for bad in (np.inf, -np.inf, np.nan):
        x[1, 0, 2 * k + 5] = bad
        got = exe.run([x])[0]
        assert np.isnan(got[1, :, 2]).all()
        mask = np.ones(got.shape, bool)
        mask[1, :, 2] = False
        np.testing.assert_array_equal(got[mask], clean[mask])


def test_dft_sign_recognises_only_a_windowed_basis() -> None:
    """Within 1.5 ulps of the window: recognised, either sign; anything else: None."""
    w = _basis(64)
    assert dft_sign(w) == -1 and dft_sign(_basis(64, 1)) == 1
    nudged = w.copy()
    nudged[5, 0, 7] = np.nextafter(nudged[5, 0, 7], np.float32(np.inf))  # one ulp: a rounding
    assert dft_sign(nudged) == -1
    broken = w.copy()
    broken[5, 0, 7] += 1e-3
    assert dft_sign(broken) is None
    assert dft_sign(w[::-1].copy()) is None  # rows in another order
    assert dft_sign(w.astype(np.float64)) is None  # float32 only
    assert dft_sign(_basis(48, rows=25)) is None  # not a power of two
    assert dft_sign(_basis(8)) is None  # too short to gain
    assert dft_sign(w[:-1].copy()) is None  # a row missing
    assert dft_sign(np.zeros_like(w)) is None  # a zero window
    nan = w.copy()
    nan[3, 0, 3] = np.nan
    assert dft_sign(nan) is None


def test_the_fft_kernel_is_chosen_only_where_it_applies() -> None:
    """Two input channels, a dilation or a weight given at run time: no FFT."""
    w = _basis(64)
    x1 = Tensor.placeholder((1, 1, 256), np.float32, "x")
    y = x1.conv1d(Tensor.const(w), stride=32)
    assert conv1d_fft_sign(y.node) == -1
    assert conv1d_fft_sign(x1.conv1d(Tensor.const(w), stride=32, dilation=2).node) is None
    assert conv1d_fft_sign(x1.conv1d(Tensor.placeholder(w.shape, np.float32, "w"), stride=32).node) is None
    x2 = Tensor.placeholder((1, 2, 256), np.float32, "x2")
    assert conv1d_fft_sign(x2.conv1d(Tensor.const(np.repeat(w, 2, axis=1)), stride=32).node) is None


def test_emitter_rejects_bad_parameters() -> None:
    from llvmlite import ir

    module = ir.Module("m")
    for bad in ({"k": 48}, {"k": 8}, {"k": 2 * FFT_MAX_K}, {"stride": 0}, {"pad_l": -1}, {"sign": 0}):
        kw = {"k": 64, "stride": 16, "pad_l": 0, "pad_r": 0, "sign": -1, **bad}
        with pytest.raises(ValueError, match="bad parameters"):
            emit_conv1d_fft(module, f"f{len(module.globals)}", **kw)  # type: ignore[arg-type]
    assert fft_scratch_bytes(256) == 64 + (2 * 256 + 1) * 8 * 4


@pytest.mark.parametrize(("window", "step"), [("hann", 160), ("none", 256), ("runtime", 128)])
def test_onnx_stft_by_fft_equals_onnx_runtime(window: str, step: int) -> None:
    """ONNX ``STFT`` of a real signal, one-sided, with a constant Hann window or none and a
    512-sample frame: a conv1d the compiler runs by FFT, equal to ONNX Runtime's within the
    FFT's rounding; with a window given at run time, the frames are gathered and windowed,
    then run by the same FFT (a conv1d with the plain basis over them), equal too."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    import asyncjit.onnx as ao

    k, total = 512, 4000
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(k) / k)).astype(np.float32)
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [step])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", total, 1])]
    names = ["x", "step"]
    if window == "hann":
        inits.append(helper.make_tensor("win", TensorProto.FLOAT, [k], win.tolist()))
        names.append("win")
    elif window == "runtime":
        inputs.append(helper.make_tensor_value_info("win", TensorProto.FLOAT, [k]))
        names.append("win")
    else:
        inits.append(helper.make_tensor("len", TensorProto.INT64, [], [k]))
        names += ["", "len"]
    node = helper.make_node("STFT", names, ["y"], onesided=1)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([node], "stft", inputs, [out], initializer=inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    data = model.SerializeToString()
    traced = ao.load(data, dims={"b": (1, 4)}).outputs_traced.values()
    convs = [n for t in traced if isinstance(t, Tensor) for n in _nodes(t) if n.op == "conv1d"]
    assert [conv1d_fft_sign(c) for c in convs] == [-1]
    sess = ao.InferenceSession(data, dims={"b": (1, 4)})
    x = RNG.standard_normal((3, total, 1)).astype(np.float32)
    feed = {"x": x, **({"win": win} if window == "runtime" else {})}
    got = sess.run(None, feed)[0]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    frames = (total - k) // step + 1
    assert got.shape == want.shape == (3, frames, k // 2 + 1, 2)
    scale = float(np.abs(x).max()) * float(win.sum() if window != "none" else k)
    np.testing.assert_allclose(got, want, rtol=0, atol=(4 * np.log2(k) + 4) * 2.0**-24 * scale)
    del onnx


@pytest.mark.parametrize(("size", "length", "opset"), [(256, None, 17), (200, 256, 17), (64, None, 20)])
def test_onnx_real_dft_by_fft_equals_numpy_and_onnx_runtime(
    size: int, length: int | None, opset: int
) -> None:
    """ONNX ``DFT`` of a real float32 signal, one-sided, of a power-of-two length (a signal
    zero-padded to ``dft_length`` too): a conv1d over the rows, run by FFT; equal to numpy's
    ``rfft`` and to ONNX Runtime within the FFT's rounding."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    import asyncjit.onnx as ao

    n = length or size
    inits, names = [], ["x"]
    if length is not None:
        inits.append(helper.make_tensor("len", TensorProto.INT64, [], [length]))
        names.append("len")
    attrs = {"onesided": 1}
    if opset >= 20:
        names += [""] * (2 - len(names)) + ["axis"]
        inits.append(helper.make_tensor("axis", TensorProto.INT64, [], [1]))
    else:
        attrs["axis"] = 1
    node = helper.make_node("DFT", names, ["y"], **attrs)
    model = helper.make_model(
        helper.make_graph(
            [node],
            "dft",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", size, 1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            initializer=inits,
        ),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    data = model.SerializeToString()
    traced = ao.load(data, dims={"b": (1, 9)}).outputs_traced.values()
    convs = [c for t in traced if isinstance(t, Tensor) for c in _nodes(t) if c.op == "conv1d"]
    assert [conv1d_fft_sign(c) for c in convs] == [-1]
    x = RNG.standard_normal((9, size, 1)).astype(np.float32)
    got = ao.InferenceSession(data, dims={"b": (1, 9)}).run(None, {"x": x})[0]
    ref = np.fft.rfft(x[..., 0].astype(np.float64), n=n, axis=1)
    want = np.stack([ref.real, ref.imag], -1)
    assert got.shape == want.shape == (9, n // 2 + 1, 2)
    atol = (4 * np.log2(n) + 4) * 2.0**-24 * float(np.abs(x).sum(axis=1).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    peer = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, peer, rtol=0, atol=atol)


@pytest.mark.parametrize("length", [0, 1, 5])
def test_frames_of_padding_only(length: int) -> None:
    """An input shorter than a frame, even empty, with pads that make whole frames of them: the
    frames of padding and the few samples there are, as the direct sums give them."""
    w = _basis(16)
    xt = Tensor.placeholder((2, 1, length), np.float32, "x")
    y = xt.conv1d(Tensor.const(w), stride=4, padding=(10, 10))
    assert conv1d_fft_sign(y.node) == -1
    x = RNG.standard_normal((2, 1, length)).astype(np.float32)
    got = compile(y, [xt]).run([x])[0]
    np.testing.assert_allclose(got, _direct(x, w, 4, (10, 10)), rtol=0, atol=1e-6)
