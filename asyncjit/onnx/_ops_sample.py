"""Sampling ops: GridSample and AffineGrid, composed from index arithmetic and gathers.

A sample point reads its 1 (nearest), 2 (linear) or 4 (cubic) neighbours per spatial axis; each
neighbour combination is one ``take_along_axis`` over the flattened spatial data, weighted by the
product of its per-axis weights, so an N-d interpolation is a sum of gathers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._ops_elementwise import round_half_even
from ._registry import NodeCtx, op
from ._values import Value

__all__ = ["take_flat"]

_CUBIC_A = -0.75  # Keys' cubic convolution coefficient, as ONNX and PyTorch use


def _text(n: NodeCtx, name: str, default: str) -> str:
    v = n.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def take_flat(x: Tensor, index: Tensor) -> Tensor:
    """``x[N, C, P]`` read at ``index[N, Q]`` (int, in range) for every channel: ``[N, C, Q]``."""
    nb, c, q = x.shape[0], x.shape[1], index.shape[1]
    return x.take_along_axis(index.reshape(nb, 1, q).expand(nb, c, q), 2)


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """Fold ``x`` back into ``[lo, hi]`` by reflecting at the borders as often as it takes."""
    span = hi - lo
    if span <= 0:
        return Tensor.full(list(x.shape), lo, x.dtype)

    def fold(dx: Tensor) -> tuple[Tensor, Tensor]:
        k = (dx / span).floor()
        return dx - k * span, (k - (k / 2.0).floor() * 2.0) == 1.0

    rb, odd_b = fold((lo - x).maximum(0.0))
    ra, odd_a = fold((x - hi).maximum(0.0))
    below = Tensor.select(odd_b, hi - rb, lo + rb)
    above = Tensor.select(odd_a, lo + ra, hi - ra)
    return Tensor.select(x < lo, below, Tensor.select(x > hi, above, x))


def _cubic_weights(t: Tensor) -> list[Tensor]:
    a = _CUBIC_A

    def near(s: Tensor) -> Tensor:  # |s| <= 1
        return ((a + 2) * s - (a + 3)) * s * s + 1.0

    def far(s: Tensor) -> Tensor:  # 1 < |s| < 2
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def _taps(c: Tensor, mode: str) -> list[tuple[Tensor, Tensor | None]]:
    """The neighbours of coordinate ``c`` along one axis: (integer position as float, weight)."""
    if mode == "nearest":
        return [(c.cast(dt.int64).cast(dt.float32), None)]  # truncation, as the spec's cast
    f = c.floor()
    t = c - f
    if mode == "linear":
        return [(f, 1.0 - t), (f + 1.0, t)]
    return [(f + float(j - 1), w) for j, w in enumerate(_cubic_weights(t))]


def _fix_index(
    i: Tensor, w: Tensor | None, length: int, padding: str, lo: float, hi: float
) -> tuple[Tensor, Tensor | None]:
    """An index inside ``[0, length)`` by the padding mode (zeros: weight 0 outside)."""
    top = float(length - 1)
    if padding == "zeros":
        inside = ((i >= 0.0) & (i <= top)).cast(dt.float32)
        w = inside if w is None else w * inside
    elif padding == "reflection":
        i = _reflect(i, lo, hi).cast(dt.int64).cast(dt.float32)
    return i.clip(0.0, top), w


@op("GridSample", since=16)
def _grid_sample(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, grid = n.t(ins[0]), n.t(ins[1])
    mode = _text(n, "mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # the opset-16 names
    padding = _text(n, "padding_mode", "zeros")
    align = n.flag("align_corners", 0)
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise n.fail(f"mode {mode!r} / padding_mode {padding!r} is not supported")
    r = x.ndim - 2
    dims = [int(d) if isinstance(d, int) else -1 for d in x.shape[2:]]
    if min(dims, default=0) < 1:
        raise n.fail("GridSample needs static, non-empty spatial dims of X")
    nb, ch = x.shape[0], x.shape[1]
    out_spatial = grid.shape[1:-1]
    g = grid.cast(dt.float32).reshape(nb, -1, r)
    taps_per_axis: list[list[tuple[Tensor, Tensor | None]]] = []
    for axis, length in enumerate(dims):
        c = g[:, :, r - 1 - axis]  # the grid lists coordinates innermost axis first (x, y, z)
        c = (c + 1.0) * ((length - 1) / 2.0) if align else ((c + 1.0) * length - 1.0) / 2.0
        lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
        if mode == "nearest":
            c = round_half_even(c)
        if padding == "border":
            c = Tensor.select((c < lo) | (c > hi), c.clip(0.0, length - 1.0), c)
        elif padding == "reflection":
            c = _reflect(c, lo, hi)
        taps_per_axis.append([_fix_index(i, w, length, padding, lo, hi) for i, w in _taps(c, mode)])
    strides = [int(np.prod(dims[a + 1 :])) for a in range(r)]
    flat = x.reshape(nb, ch, -1)
    total: Tensor | None = None
    for combo in itertools.product(*taps_per_axis):
        lin = combo[0][0] * float(strides[0])
        for (i, _), s in zip(combo[1:], strides[1:], strict=True):
            lin = lin + i * float(s)
        value = take_flat(flat, lin.cast(dt.int64)).cast(dt.float32)
        weights = [w for _, w in combo if w is not None]
        if weights:
            weight = weights[0]
            for w in weights[1:]:
                weight = weight * w
            value = value * weight.reshape(nb, 1, -1)
        total = value if total is None else total + value
    assert total is not None
    return total.reshape(nb, ch, *out_spatial).cast(x.dtype)


def _base_grid(spatial: Sequence[int], align: bool) -> np.ndarray:
    """``[prod(spatial), r + 1]``: each point's normalised coordinates, innermost axis first, then 1."""
    axes = []
    for length in spatial:
        if align:
            axes.append(np.linspace(-1.0, 1.0, length) if length > 1 else np.full(1, -1.0))
        else:
            axes.append((2.0 * np.arange(length) + 1.0) / length - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)]
    return np.stack([*cols, np.ones_like(cols[0])], axis=1).astype(np.float32)


@op("AffineGrid", since=20)
def _affine_grid(n: NodeCtx, ins: list[Value | None]) -> Value:
    theta = n.t(ins[0])
    size = [int(v) for v in n.const(ins[1], "size").reshape(-1)]
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.ndim != 3 or theta.shape[1:] != (len(spatial), len(spatial) + 1):
        raise n.fail(f"theta {theta.shape} does not fit size {size} (N x 2 x 3 for 2-D, N x 3 x 4 for 3-D)")
    base = Tensor.const(_base_grid(spatial, n.flag("align_corners", 0)))  # [P, r + 1]
    grid = theta.cast(dt.float32) @ base.T  # [N, r, P]
    return grid.permute(0, 2, 1).reshape(theta.shape[0], *spatial, len(spatial)).cast(theta.dtype)


def _roi_axis(pos: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """RoiAlign's bilinear taps along one axis: (low, high, low weight, high weight, inside)."""
    inside = (pos >= -1.0) & (pos <= float(size))
    p = pos.maximum(0.0)
    low = p.floor()
    edge = low >= float(size - 1)
    low = Tensor.select(edge, float(size - 1), low)
    high = Tensor.select(edge, float(size - 1), low + 1.0)
    frac = Tensor.select(edge, 0.0, p - low)
    return low, high, 1.0 - frac, frac, inside


@op("RoiAlign", since=10)
def _roi_align(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, rois, batch = n.t(ins[0]), n.t(ins[1]).cast(dt.float32), n.t(ins[2]).cast(dt.int64)
    ph, pw = int(n.attr("output_height", 1)), int(n.attr("output_width", 1))
    ratio = int(n.attr("sampling_ratio", 0))
    scale = float(n.attr("spatial_scale", 1.0))
    half = _text(n, "coordinate_transformation_mode", "half_pixel") == "half_pixel" and n.opset >= 16
    if ratio <= 0:
        raise n.fail(
            "sampling_ratio 0 (a sample grid sized by each ROI, from data) is not supported; give it"
        )
    height, width = x.shape[2], x.shape[3]
    if not isinstance(height, int) or not isinstance(width, int):
        raise n.fail("RoiAlign needs static spatial dims")
    nr, ch = rois.shape[0], x.shape[1]
    shift = 0.5 if half else 0.0
    start = rois * scale - shift  # [R, 4]: x0, y0, x1, y1
    extent = start[:, 2:4] - start[:, 0:2]
    if not half:
        extent = extent.maximum(1.0)
    steps = (np.arange(ratio) + 0.5) / ratio

    def samples(origin: Tensor, span: Tensor, bins: int) -> Tensor:  # [R, bins * ratio]
        grid = (np.arange(bins).reshape(-1, 1) + steps.reshape(1, -1)).reshape(1, -1).astype(np.float32)
        return origin.reshape(-1, 1) + span.reshape(-1, 1) / float(bins) * Tensor.const(grid)

    ys = _roi_axis(samples(start[:, 1], extent[:, 1], ph), height)
    xs = _roi_axis(samples(start[:, 0], extent[:, 0], pw), width)
    data = x.gather(0, batch).reshape(nr, ch, height * width)
    qy, qx = ph * ratio, pw * ratio
    corners = []
    for yi, wy in ((ys[0], ys[2]), (ys[1], ys[3])):
        for xi, wx in ((xs[0], xs[2]), (xs[1], xs[3])):
            index = (yi.reshape(nr, qy, 1) * float(width) + xi.reshape(nr, 1, qx)).cast(dt.int64)
            weight = wy.reshape(nr, qy, 1) * wx.reshape(nr, 1, qx)
            weight = weight * (ys[4].reshape(nr, qy, 1) & xs[4].reshape(nr, 1, qx)).cast(dt.float32)
            value = take_flat(data, index.reshape(nr, qy * qx)).cast(dt.float32)
            corners.append(value * weight.reshape(nr, 1, qy * qx))
    if _text(n, "mode", "avg") == "max":
        point = corners[0].maximum(corners[1]).maximum(corners[2]).maximum(corners[3])
        out = point.reshape(nr, ch, ph, ratio, pw, ratio).max((3, 5))
    else:
        point = corners[0] + corners[1] + corners[2] + corners[3]
        out = point.reshape(nr, ch, ph, ratio, pw, ratio).sum((3, 5)) / float(ratio * ratio)
    return out.cast(x.dtype)


@op("DeformConv", since=19)
def _deform_conv(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, w, offset = n.t(ins[0]), n.t(ins[1]), n.t(ins[2]).cast(dt.float32)
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if x.ndim != 4:
        raise n.fail("DeformConv is supported for 2-D images (rank-4 X)")
    nb, ch, height, width = x.shape
    oc, cg, kh, kw = (int(d) for d in w.shape)
    oh, ow = offset.shape[2], offset.shape[3]
    if not all(isinstance(d, int) for d in (nb, ch, height, width, oh, ow)):
        raise n.fail("DeformConv needs static shapes")
    group, og = int(n.attr("group", 1)), int(n.attr("offset_group", 1))
    sh, sw = (list(n.attr("strides")) if n.attr("strides") else [1, 1])[:2]
    dh, dw = (list(n.attr("dilations")) if n.attr("dilations") else [1, 1])[:2]
    pads = list(n.attr("pads")) if n.attr("pads") else [0, 0, 0, 0]
    if int(ch) != cg * group or oc % group or int(ch) % og:
        raise n.fail(f"channels {ch}, weight {w.shape}, group {group}, offset_group {og} do not fit")
    taps, points = kh * kw, int(oh) * int(ow)
    # each tap's sampling position: the regular grid plus its learned offset (pixel units)
    off = offset.reshape(nb, og, taps, 2, points)
    base_y = (np.arange(int(oh)) * sh - pads[0]).reshape(1, -1, 1) + (np.arange(kh) * dh).reshape(-1, 1, 1, 1)
    base_x = (np.arange(int(ow)) * sw - pads[1]).reshape(1, 1, -1) + (np.arange(kw) * dw).reshape(1, -1, 1, 1)
    grid_y = np.broadcast_to(base_y, (kh, kw, int(oh), int(ow))).reshape(1, 1, taps, points)
    grid_x = np.broadcast_to(base_x, (kh, kw, int(oh), int(ow))).reshape(1, 1, taps, points)
    y = off[:, :, :, 0, :] + Tensor.const(grid_y.astype(np.float32))
    xx = off[:, :, :, 1, :] + Tensor.const(grid_x.astype(np.float32))
    m = nb * og
    y, xx = y.reshape(m, taps * points), xx.reshape(m, taps * points)
    data = x.reshape(m, int(ch) // og, height * width)
    y0, x0 = y.floor(), xx.floor()
    sampled: Tensor | None = None
    for yi, wy in ((y0, 1.0 - (y - y0)), (y0 + 1.0, y - y0)):
        for xi, wx in ((x0, 1.0 - (xx - x0)), (x0 + 1.0, xx - x0)):
            inside = (yi >= 0.0) & (yi <= float(height - 1)) & (xi >= 0.0) & (xi <= float(width - 1))
            index = (yi.clip(0.0, float(height - 1)) * float(width) + xi.clip(0.0, float(width - 1))).cast(
                dt.int64
            )
            weight = (wy * wx * inside.cast(dt.float32)).reshape(m, 1, taps * points)
            value = take_flat(data, index).cast(dt.float32) * weight
            sampled = value if sampled is None else sampled + value
    assert sampled is not None
    cols = sampled.reshape(nb, og, int(ch) // og, taps, points)
    if mask is not None:
        cols = cols * n.t(mask).cast(dt.float32).reshape(nb, og, 1, taps, points)
    # a grouped matmul of the weights with the sampled columns
    cols = cols.reshape(nb, group, cg * taps, points)
    wg = w.cast(dt.float32).reshape(group, oc // group, cg * taps)
    out = (wg.unsqueeze(0) @ cols).reshape(nb, oc, int(oh), int(ow))
    if bias is not None:
        out = out + n.t(bias).cast(dt.float32).reshape(oc, 1, 1)
    return out.cast(x.dtype)
