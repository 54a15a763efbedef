"""``Resize``/``Upsample`` and ``Attention``.

Resize is separable: along each resized axis every output element is a fixed weighted sum of
input elements, whatever the mode (nearest, linear, cubic, antialiased). The weights are computed
at load time (the spatial sizes are static) into a matrix per axis, applied as a matmul along
that axis; ``tf_crop_and_resize`` rows outside the input take the extrapolation value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._ops_shape import axis_of
from ._registry import NodeCtx, op
from ._values import Value, const_tensor, np_dtype

__all__: list[str] = []


def _source_coordinate(
    x: int, n_in: int, n_out: int, scale: float, mode: str, roi: tuple[float, float]
) -> float:
    """Where output index ``x`` samples the input (ONNX's coordinate_transformation_mode)."""
    width = scale * n_in
    if mode == "align_corners":
        return 0.0 if width == 1 else x * (n_in - 1) / (width - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            return (hi - lo) * (n_in - 1) / 2 + lo * (n_in - 1)
        return x * (hi - lo) * (n_in - 1) / (width - 1) + lo * (n_in - 1)
    if mode == "pytorch_half_pixel":
        return -0.5 if width == 1 else (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    raise ValueError(f"coordinate_transformation_mode {mode!r} is not supported")


def _coefficients(
    n: NodeCtx, mode: str, ratio: float, scale: float, antialias: bool
) -> tuple[np.ndarray, int]:
    """Tap weights and the offset of the first tap from ``floor``'s pixel (ratio in (0, 1])."""
    if mode == "nearest":
        if ratio == 1.0:
            return np.array([0.0, 1.0]), 0
        nm = n.attr("nearest_mode", "floor" if n.op_type == "Upsample" else "round_prefer_floor")
        if nm == "round_prefer_floor":
            pick = ratio > 0.5
        elif nm == "round_prefer_ceil":
            pick = ratio >= 0.5
        elif nm == "floor":
            pick = False
        else:
            pick = True
        return np.array([0.0, 1.0] if pick else [1.0, 0.0]), 0
    if mode == "linear":
        if antialias and scale < 1:
            start = math.floor(-1 / scale) + 1
            taps = np.arange(start, 2 - start)
            c = np.clip(1 - np.abs((taps - ratio) * scale), 0, 1)
            return c / c.sum(), start
        return np.array([1 - ratio, ratio]), 0
    a = n.attr("cubic_coeff_a", -0.75)
    if antialias and scale < 1:
        start = math.floor(-2 / scale) + 1
        taps = np.arange(start, 2 - start)

        def kernel(v: float) -> float:
            v = abs(v)
            if v <= 1:
                return float((a + 2) * v**3 - (a + 3) * v**2 + 1)
            if v < 2:
                return float(a * v**3 - 5 * a * v**2 + 8 * a * v - 4 * a)
            return 0.0

        c = np.array([kernel(scale * (t - ratio)) for t in taps])
        return c / c.sum(), start
    r = ratio
    c = np.array(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a,
        ]
    )
    return c, -1


def _axis_weights(
    n: NodeCtx, n_in: int, n_out: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """``W [n_out, n_in]`` of one axis, and which output rows are extrapolated."""
    mode = n.attr("mode", "nearest")
    ctm = n.attr(
        "coordinate_transformation_mode",
        "half_pixel" if n.op_type == "Resize" and n.opset >= 11 else "asymmetric",
    )
    antialias = n.flag("antialias", 0)
    exclude = n.flag("exclude_outside", 0)
    w = np.zeros((n_out, n_in))
    outside = np.zeros(n_out, bool)
    for x in range(n_out):
        src = _source_coordinate(x, n_in, n_out, scale, ctm, roi)
        if ctm == "tf_crop_and_resize" and (src < 0 or src > n_in - 1):
            outside[x] = True
            continue
        base = math.floor(src)
        ratio = src - base
        if ratio == 0:  # an exact pixel counts as the right end of the interval left of it
            base, ratio = base - 1, 1.0
        coeffs, first = _coefficients(n, mode, ratio, scale, antialias)
        idx = base + first + np.arange(len(coeffs))
        if exclude:
            coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
            coeffs = coeffs / coeffs.sum()
        for i, c in zip(np.clip(idx, 0, n_in - 1), coeffs, strict=True):
            w[x, i] += c
    return w, outside


def _resize(
    n: NodeCtx,
    x: Tensor,
    scales: list[float] | None,
    sizes: list[int] | None,
    roi: np.ndarray | None,
    axes: list[int],
) -> Tensor:
    shape = x.shape
    spatial = [shape[a] for a in axes]
    if not all(isinstance(d, int) for d in spatial):
        raise n.fail("Resize needs static sizes on the resized axes")
    ins = [int(d) for d in spatial]
    if sizes is not None:
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            outs = list(sizes)
            scales = [o / i for o, i in zip(outs, ins, strict=True)]
        else:
            ratios = [o / i for o, i in zip(sizes, ins, strict=True)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            scales = [s] * len(ins)
            outs = [int(np.round(s * i)) for i in ins]
    else:
        assert scales is not None
        outs = [math.floor(i * s) for i, s in zip(ins, scales, strict=True)]
    rank = x.ndim
    out = x if x.dtype.is_float else x.cast(dt.float32)
    extrap = float(n.attr("extrapolation_value", 0.0))
    for k in reversed(range(len(axes))):
        a = axes[k]
        r = (0.0, 1.0)
        if roi is not None and roi.size:
            r = (float(roi[k]), float(roi[k + len(axes)]))
        if (
            ins[k] == outs[k]
            and scales[k] == 1.0
            and n.attr("coordinate_transformation_mode") != "tf_crop_and_resize"
        ):
            continue
        w, outside = _axis_weights(n, ins[k], outs[k], float(scales[k]), r)
        moved = out.transpose(a, -1) if a != rank - 1 else out
        res = moved @ const_tensor(w.T.astype(out.dtype.np))
        if outside.any():
            mask = const_tensor(outside)
            res = Tensor.select(mask, Tensor.full(res.shape, extrap, res.dtype), res)
        out = res.transpose(a, -1) if a != rank - 1 else res
    if not x.dtype.is_float:
        out = (out + 0.5).floor()
    return out.cast(x.dtype)


@op("Resize", since=10)
def _resize_op(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    if n.opset < 11:
        scales_v, sizes_v, roi = ins[1], None, None
    else:
        roi_v = ins[1] if len(ins) > 1 else None
        scales_v = ins[2] if len(ins) > 2 else None
        sizes_v = ins[3] if len(ins) > 3 else None
        roi = n.const(roi_v, "roi").astype(np.float64) if roi_v is not None else None
    axes = [axis_of(a, x.ndim, n) for a in n.attr("axes", list(range(x.ndim)))]
    scales = None
    sizes = None
    if sizes_v is not None and not (isinstance(sizes_v, np.ndarray) and sizes_v.size == 0):
        sizes = [int(v) for v in n.const(sizes_v, "sizes")]
    elif scales_v is not None:
        scales = [float(v) for v in n.const(scales_v, "scales")]
    else:
        raise n.fail("Resize needs scales or sizes")
    return _resize(n, x, scales, sizes, roi, axes)


@op("Upsample")
def _upsample(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    scales = list(n.attr("scales")) if n.opset < 9 else [float(v) for v in n.const(ins[1], "scales")]
    return _resize(n, x, scales, None, None, list(range(x.ndim)))


@op("Attention", since=23)
def _attention(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    q, k, v = n.t(ins[0]), n.t(ins[1]), n.t(ins[2])
    mask = ins[3] if len(ins) > 3 else None
    past_k = ins[4] if len(ins) > 4 else None
    past_v = ins[5] if len(ins) > 5 else None
    three_d = q.ndim == 3
    if three_d:
        hq, hkv = n.attr("q_num_heads"), n.attr("kv_num_heads")
        b, s = q.shape[0], q.shape[1]
        q = q.reshape(b, s, hq, -1).permute(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], hkv, -1).permute(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], hkv, -1).permute(0, 2, 1, 3)
    if past_k is not None:
        k = Tensor.cat([n.t(past_k).cast(k.dtype), k], 2)
    if past_v is not None:
        v = Tensor.cat([n.t(past_v).cast(v.dtype), v], 2)
    present_k, present_v = k, v
    hq_n, hkv_n = q.shape[1], k.shape[1]
    if hq_n != hkv_n:
        g = int(hq_n) // int(hkv_n)
        k = (
            k.unsqueeze(2)
            .expand(k.shape[0], hkv_n, g, k.shape[2], k.shape[3])
            .reshape(k.shape[0], hq_n, k.shape[2], k.shape[3])
        )
        v = (
            v.unsqueeze(2)
            .expand(v.shape[0], hkv_n, g, v.shape[2], v.shape[3])
            .reshape(v.shape[0], hq_n, v.shape[2], v.shape[3])
        )
    d = q.shape[-1]
    scale = n.attr("scale")
    scale = 1.0 / math.sqrt(int(d)) if scale is None else float(scale)
    qf, kf, vf = q.cast(dt.float32), k.cast(dt.float32), v.cast(dt.float32)
    scores = (qf * math.sqrt(scale)) @ (kf * math.sqrt(scale)).transpose(-1, -2)
    sq, sk = scores.shape[-2], scores.shape[-1]
    bias: Tensor | None = None
    nonpad = n.t(ins[6]).cast(dt.int64) if len(ins) > 6 and ins[6] is not None else None
    past = n.t(past_k).shape[2] if past_k is not None else 0
    rows = Tensor.arange(sq, dt.int64).reshape(sq, 1)
    cols = Tensor.arange(sk, dt.int64).reshape(1, sk)
    # the causal/window frontier: bottom-right of the cache, or per batch of its valid length
    shift: Any = past if nonpad is None else (nonpad - sq).reshape(-1, 1, 1, 1)
    if mask is not None:
        m = n.t(mask)
        if m.shape[-1] != sk:  # a mask over the new keys only: the rest is masked out
            pad = [None] * (m.ndim - 1) + [(0, sk - m.shape[-1])]
            m = (
                m.pad(pad, "constant", False)
                if m.dtype.is_bool
                else m.cast(dt.float32).pad(pad, "constant", float("-inf"))
            )
        bias = Tensor.select(m, 0.0, float("-inf")) if m.dtype.is_bool else m.cast(dt.float32)
    if n.flag("is_causal", 0):
        causal = Tensor.select(cols <= rows + shift, 0.0, float("-inf"))
        bias = causal if bias is None else bias + causal
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    if left >= 0 or right >= 0:
        at = rows + shift
        allowed = Tensor.ones(list((at - cols).shape), dt.bool_)
        if left >= 0:
            allowed = allowed & (at - cols <= left)
        if right >= 0:
            allowed = allowed & (cols - at <= right)
        window = Tensor.select(allowed, 0.0, float("-inf"))
        bias = window if bias is None else bias + window
    if nonpad is not None:
        padding = Tensor.select(cols.reshape(1, 1, 1, sk) < nonpad.reshape(-1, 1, 1, 1), 0.0, float("-inf"))
        bias = padding if bias is None else bias + padding
    cap = n.attr("softcap")
    if cap is not None and float(cap) > 0:
        scores = (scores / float(cap)).tanh() * float(cap)
    qk_out = scores  # modes 0 and 1: the (soft-capped) product
    if bias is not None:
        scores = scores + bias
    mode = n.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise n.fail(f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode!r}")
    if mode == 2:
        qk_out = scores
    precision = n.attr("softmax_precision")
    if precision is not None:
        scores = scores.cast(np_dtype(precision))
    probs = scores.softmax(-1)
    if bias is not None:
        # a row that the mask hides entirely attends to nothing: its weights are 0, not NaN
        hidden = bias.max(-1, keepdims=True) == float("-inf")
        probs = Tensor.select(hidden, 0.0, probs)
    if mode == 3:
        qk_out = probs
    y = probs.cast(dt.float32) @ vf
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return [y.cast(q.dtype), present_k, present_v, qk_out.cast(q.dtype)]
