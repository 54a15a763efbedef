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
    align = bool(n.attr("align_corners", 0))
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
    base = Tensor.const(_base_grid(spatial, bool(n.attr("align_corners", 0))))  # [P, r + 1]
    grid = theta.cast(dt.float32) @ base.T  # [N, r, P]
    return grid.permute(0, 2, 1).reshape(theta.shape[0], *spatial, len(spatial)).cast(theta.dtype)
