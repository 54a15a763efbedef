"""Signal ops: DFT, STFT and MelWeightMatrix.

A DFT of static length L is a matmul with cos/sin basis matrices made at load time (in float64,
rounded once). It computes in float32 (float64 for float64 signals), as numpy's FFT, ONNX's
reference, does for complex64, with a rounding error of the FFT's order. The one-sided DFT of a
real float32 signal of a power-of-two length, and the one-sided ``STFT`` of one with a constant
window (or none) and a power-of-two frame, are instead a ``conv1d`` with the (windowed) basis,
which the compiler runs by FFT (``codegen/_convfft.py``).
``MelWeightMatrix`` folds to a constant at load time.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._registry import NodeCtx, op
from ._values import Value, np_dtype

__all__ = ["dft_last"]


def _basis(n_in: int, n_out: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``2 pi j k / length`` for ``j < n_in``, ``k < n_out``: ``[n_in, n_out]``."""
    j = np.arange(n_in).reshape(-1, 1)
    k = np.arange(n_out).reshape(1, -1)
    theta = 2.0 * np.pi * ((j * k) % length) / length
    return np.cos(theta), np.sin(theta)


def _compute_dtype(x: Tensor) -> dt.DType:
    return dt.float64 if x.dtype == dt.float64 else dt.float32


def _mm(x: Tensor, m: np.ndarray) -> Tensor:
    """``x[..., a] @ m[a, b]`` as one 2-D matmul over all leading rows."""
    lead = x.shape[:-1]
    basis = Tensor.const(m.astype(x.dtype.np))
    return (x.reshape(-1, x.shape[-1]) @ basis).reshape(*lead, m.shape[1])


def _fit(x: Tensor, length: int) -> Tensor:
    """Truncate or zero-pad the last axis to ``length`` (numpy ``fft``'s ``n``)."""
    have = int(x.shape[-1])
    if have > length:
        return x[..., :length]
    if have < length:
        return x.pad([None] * (x.ndim - 1) + [(0, length - have)])
    return x


def dft_last(
    re: Tensor, im: Tensor | None, length: int, inverse: bool, onesided: bool
) -> tuple[Tensor, Tensor | None]:
    """The DFT along the last axis of ``re + i im`` (in their dtype): its real and imaginary parts.

    ``onesided`` keeps the ``length // 2 + 1`` non-negative frequencies of a forward transform;
    an inverse one-sided transform (``irfft``) reads those and returns a real signal (im None).
    """
    if inverse and onesided:
        half = length // 2 + 1
        re = _fit(re, half)
        cos, sin = _basis(half, length, length)
        weight = np.full((half, 1), 2.0)
        weight[0] = 1.0
        if length % 2 == 0:
            weight[-1] = 1.0
        out = _mm(re, weight * cos / length)
        if im is not None:
            out = out - _mm(_fit(im, half), weight * sin / length)
        return out, None
    re = _fit(re, length)
    if im is None and onesided and not inverse and (fft := _rfft_by_conv(re, length)) is not None:
        return fft
    n_out = length // 2 + 1 if onesided and not inverse else length
    cos, sin = _basis(length, n_out, length)
    if inverse:
        cos, sin = cos / length, -sin / length  # e^{+i theta} / L
    real = _mm(re, cos)
    imag = -_mm(re, sin)
    if im is not None:
        im = _fit(im, length)
        real = real + _mm(im, sin)
        imag = imag + _mm(im, cos)
    return real, imag


def _dft(n: NodeCtx, x: Tensor, length_in: Value | None, axis: int) -> Value:
    inverse, onesided = n.flag("inverse", 0), n.flag("onesided", 0)
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise n.fail("axis must be a signal axis, not the last (real/imaginary) one")
    size = x.shape[axis]
    if length_in is not None:
        length = int(n.const(length_in, "dft_length").reshape(-1)[0])
    elif isinstance(size, int):
        length = 2 * (size - 1) if inverse and onesided else size
    else:
        raise n.fail("the DFT length must be static (give dft_length or a static axis)")
    if length < 1:
        raise n.fail(f"dft_length must be positive, got {length}")
    parts = int(x.shape[-1])
    if parts not in (1, 2):
        raise n.fail(f"the last axis holds real (1) or real and imaginary (2) parts, got {parts}")
    xf = x.cast(_compute_dtype(x))
    order = [a for a in range(x.ndim - 1) if a != axis] + [axis]
    back = list(np.argsort(order))
    re = xf[..., 0].permute(*order)
    im = xf[..., 1].permute(*order) if parts == 2 else None
    real, imag = dft_last(re, im, length, inverse, onesided)
    real = real.permute(*back)
    if imag is None:
        return real.unsqueeze(-1).cast(x.dtype)
    return Tensor.stack([real, imag.permute(*back)], -1).cast(x.dtype)


@op("DFT", since=17)
def _dft_17(n: NodeCtx, ins: list[Value | None]) -> Value:
    return _dft(n, n.t(ins[0]), ins[1] if len(ins) > 1 else None, int(n.attr("axis", 1)))


@op("DFT", since=20)
def _dft_20(n: NodeCtx, ins: list[Value | None]) -> Value:
    axis = int(n.const(ins[2], "axis").reshape(-1)[0]) if len(ins) > 2 and ins[2] is not None else -2
    return _dft(n, n.t(ins[0]), ins[1] if len(ins) > 1 else None, axis)


@op("STFT", since=17)
def _stft(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    step = int(n.const(ins[1], "frame_step").reshape(-1)[0])
    window = n.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if len(ins) > 3 and ins[3] is not None:
        length = int(n.const(ins[3], "frame_length").reshape(-1)[0])
    elif window is not None and isinstance(window.shape[0], int):
        length = window.shape[0]
    else:
        raise n.fail("STFT needs frame_length or a window of static length")
    total = x.shape[1]
    if not isinstance(total, int) or x.ndim != 3 or int(x.shape[2]) not in (1, 2):
        raise n.fail("the signal must be [batch, static length, 1 or 2]")
    if step < 1 or length < 1 or length > total:
        raise n.fail(f"frame_step {step} and frame_length {length} do not fit a signal of {total}")
    frames = (total - length) // step + 1
    onesided = n.flag("onesided", 1)
    if (fft := _stft_by_fft(x, step, window, length, onesided)) is not None:
        return fft
    index = (np.arange(frames).reshape(-1, 1) * step + np.arange(length)).reshape(-1)
    taps = Tensor.const(index.astype(np.int64))
    xf = x.cast(_compute_dtype(x))
    b = x.shape[0]

    def framed(part: Tensor) -> Tensor:
        out = part.gather(1, taps).reshape(b, frames, length)
        return out * window.cast(xf.dtype) if window is not None else out

    re = framed(xf[:, :, 0])
    im = framed(xf[:, :, 1]) if int(x.shape[2]) == 2 else None
    real, imag = dft_last(re, im, length, False, onesided)
    assert imag is not None
    return Tensor.stack([real, imag], -1).cast(x.dtype)


def _fft_basis(length: int, win: np.ndarray) -> np.ndarray | None:
    """The conv1d weight ``[win cos ; -win sin]`` (``[2F, 1, length]``, float64 rounded once) that
    the compiler runs by FFT (``codegen._convfft.dft_sign``), or None for a length it does not take."""
    from ..codegen._convfft import dft_sign, fft_length

    if not fft_length(length):
        return None
    cos, sin = _basis(length, length // 2 + 1, length)  # [length, F]
    basis = np.concatenate([(cos * win[:, None]).T, (-sin * win[:, None]).T]).astype(np.float32)[:, None, :]
    return basis if dft_sign(basis) is not None else None


def _rfft_by_conv(re: Tensor, length: int) -> tuple[Tensor, Tensor] | None:
    """The one-sided DFT of real float32 rows ``re [..., length]`` as a ``conv1d`` of stride
    ``length`` over them with the basis ``[cos ; -sin]``, which the compiler runs by FFT
    (``codegen._convfft``), when ``length`` is a power of two it takes; None otherwise."""
    basis = _fft_basis(length, np.ones(length)) if re.dtype == dt.float32 else None
    if basis is None:
        return None
    f = length // 2 + 1
    lead = re.shape[:-1]
    y = re.reshape(-1, 1, length).conv1d(Tensor.const(basis), stride=length)  # [rows, 2F, 1]
    y = y.reshape(*lead, 2 * f)
    return y[..., :f], y[..., f:]


def _stft_by_fft(x: Tensor, step: int, window: Tensor | None, length: int, onesided: bool) -> Tensor | None:
    """The one-sided STFT of a real float32 signal ``[batch, total, 1]`` with a constant window
    (or none) as a ``conv1d`` of stride ``step`` with the windowed basis ``[win cos ; -win sin]``
    (``F = length/2 + 1`` rows each, float64 rounded once), which the compiler runs by FFT when
    ``length`` is a power of two it takes (``codegen._convfft.dft_sign``); its ``[batch, 2F,
    frames]`` output as ``[batch, frames, F, 2]``. None: the frames and matmuls instead."""
    if x.dtype != dt.float32 or int(x.shape[2]) != 1 or not onesided:
        return None
    if window is None:
        win = np.ones(length)
    elif window.node.op == "const" and tuple(window.shape) == (length,):
        win = np.asarray(window.node.attrs["value"], dtype=np.float64)
    else:
        return None
    basis = _fft_basis(length, win)
    if basis is None:
        return None
    f = length // 2 + 1
    y = x.permute(0, 2, 1).conv1d(Tensor.const(basis), stride=step)  # [batch, 2F, frames]
    return Tensor.stack([y[:, :f], y[:, f:]], -1).permute(0, 2, 1, 3)


@op("MelWeightMatrix", since=17)
def _mel_weight_matrix(n: NodeCtx, ins: list[Value | None]) -> Value:
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    bins, dft_length, rate = (int(n.const(ins[i], names[i]).reshape(-1)[0]) for i in range(3))
    low, high = (float(n.const(ins[i], names[i]).reshape(-1)[0]) for i in (3, 4))
    if bins < 1 or dft_length < 1 or rate < 1 or not 0 <= low < high:
        raise n.fail(f"bad mel parameters: {bins} bins, dft {dft_length}, rate {rate}, {low}..{high} Hz")
    # the triangle edges on the mel scale, in FFT bins (the spec's integer rounding included)
    mel_lo, mel_hi = (2595.0 * np.log1p(f / 700.0) / np.log(10.0) for f in (low, high))
    mels = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    hz = 700.0 * np.expm1(mels / 2595.0 * np.log(10.0))
    edge = (((dft_length + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = edge[i], edge[i + 1], edge[i + 2]
        if centre == left:
            out[centre, i] = 1.0
        else:
            j = np.arange(left, centre + 1)
            out[j, i] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, i] = (right - j) / (right - centre)
    dtype = n.attr("output_datatype")
    return out.astype(np_dtype(dtype) if dtype is not None else np.float32)
