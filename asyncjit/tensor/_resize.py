"""``Tensor.resize``: ONNX ``Resize`` (nearest, linear, cubic; every coordinate transformation)
as per-axis gathers and weighted sums, which fuse into one loop kernel.

Resizing is separable: each resized axis is handled on its own. For static sizes the source
indices and weights of every output position are computed here, in float64 as ONNX's reference
does, and enter the graph as constants, so the kernel does no coordinate arithmetic. Neighbours
outside the input take the edge value (ONNX's edge padding); ``exclude_outside`` drops them and
renormalises; ``tf_crop_and_resize`` puts ``extrapolation_value`` where the source coordinate
falls outside the input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TensorError

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["resize"]

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source(
    x: np.ndarray, n_in: int, n_out: int, scale: float, how: str, roi: tuple[float, float]
) -> np.ndarray:
    """ONNX's source coordinate of each output position ``x`` (float64)."""
    width = scale * n_in  # ONNX uses the float output width here, not the int one
    if how == "align_corners":
        return np.zeros_like(x) if width == 1 else x * (n_in - 1) / (width - 1)
    if how == "asymmetric":
        return x / scale
    if how == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            return np.full_like(x, (end - start) * (n_in - 1) / 2 + start * (n_in - 1))
        return x * (end - start) * (n_in - 1) / (width - 1) + start * (n_in - 1)
    if how == "pytorch_half_pixel":
        return np.full_like(x, -0.5) if width == 1 else (x + 0.5) / scale - 0.5
    if how == "half_pixel":
        return (x + 0.5) / scale - 0.5
    adjustment = n_out / width  # half_pixel_symmetric
    return n_in / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5


def _cubic(r: np.ndarray, a: float) -> np.ndarray:
    s = 1 - r
    return np.stack(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ],
        axis=1,
    )


def _taps(
    n_in: int,
    n_out: int,
    scale: float,
    mode: str,
    how: str,
    nearest: str,
    a: float,
    exclude: bool,
    roi: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices [n_out, taps] clamped into the axis, weights [n_out, taps], outside [n_out])."""
    src = _source(np.arange(n_out, dtype=np.float64), n_in, n_out, scale, how, roi)
    outside = (src < 0) | (src > n_in - 1) if how == "tf_crop_and_resize" else np.zeros(n_out, bool)
    # the reference's convention: the base index is the one left of src, ratio in (0, 1]
    base = np.ceil(src).astype(np.int64) - 1
    r = src - base
    if mode == "nearest":
        if nearest == "round_prefer_floor":
            up = r > 0.5
        elif nearest == "round_prefer_ceil":
            up = r >= 0.5
        else:
            up = np.full(n_out, nearest == "ceil")
        up = up | (r == 1.0)  # an integral source coordinate picks itself
        idx = (base + up)[:, None]
        weights = np.ones((n_out, 1))
    elif mode == "linear":
        idx = np.stack([base, base + 1], axis=1)
        weights = np.stack([1 - r, r], axis=1)
    else:
        idx = np.stack([base - 1, base, base + 1, base + 2], axis=1)
        weights = _cubic(r, a)
    if exclude:
        weights = np.where((idx >= 0) & (idx < n_in), weights, 0.0)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), weights, outside


def resize(
    x: Tensor,
    sizes: Sequence[int] | None,
    scales: Sequence[float] | None,
    mode: str,
    coordinate_transformation_mode: str,
    nearest_mode: str,
    cubic_coeff_a: float,
    exclude_outside: bool,
    extrapolation_value: float,
    roi: Sequence[tuple[float, float]] | None,
) -> Tensor:
    if (
        mode not in MODES
        or coordinate_transformation_mode not in TRANSFORMS
        or nearest_mode not in NEAREST_MODES
    ):
        raise TensorError(
            f"resize: mode {mode!r} (one of {MODES}), coordinate_transformation_mode "
            f"{coordinate_transformation_mode!r} (one of {TRANSFORMS}), nearest_mode {nearest_mode!r} "
            f"(one of {NEAREST_MODES})"
        )
    if sizes is None and scales is None:
        raise TensorError("resize needs sizes or scales (one value per axis)")
    for given in (sizes, scales):
        if given is not None and len(given) != x.ndim:
            raise TensorError(f"resize needs one size or scale per axis of {x.shape}, got {list(given)}")
    if mode != "nearest" and not x.dtype.is_float:
        raise TensorError(f"{mode} resize needs a float tensor, got {x.dtype.name}; cast first")
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    rois = list(roi) if roi is not None else [(0.0, 1.0)] * x.ndim
    if len(rois) != x.ndim:
        raise TensorError(f"resize roi needs one (start, end) per axis, got {rois}")
    out = x
    for ax in range(x.ndim):
        n_in = x.shape[ax]
        if scales is not None:
            scale = float(scales[ax])
            if scale <= 0 or not math.isfinite(scale):
                raise TensorError(f"resize scale on axis {ax} must be > 0, got {scale}")
            if scale == 1.0 and not crop and (sizes is None or sizes[ax] == n_in):
                continue
            if not isinstance(n_in, int):
                raise TensorError(f"resize: axis {ax} ({n_in}) must be static to scale it")
            n_out = math.floor(n_in * scale) if sizes is None else int(sizes[ax])
        else:
            assert sizes is not None
            n_out = int(sizes[ax])
            if n_out == n_in and not crop:
                continue
            if not isinstance(n_in, int) or n_in < 1 or n_out < 0:
                raise TensorError(
                    f"resize: axis {ax} ({n_in}) must be static and non-empty to resize it to {n_out}"
                )
            scale = n_out / n_in
        if not isinstance(n_in, int) or n_in < 1:
            raise TensorError(f"resize: axis {ax} of {x.shape} is empty")
        span = (float(rois[ax][0]), float(rois[ax][1]))
        how = coordinate_transformation_mode
        idx, weights, outside = _taps(
            n_in, n_out, scale, mode, how, nearest_mode, cubic_coeff_a, exclude_outside, span
        )
        bcast = [1] * x.ndim
        bcast[ax] = n_out
        acc: Tensor | None = None
        for t in range(idx.shape[1]):
            picked = out.gather(ax, type(x).const(idx[:, t].copy()))
            if mode == "nearest":
                acc = picked
                break
            w = type(x).const(weights[:, t].reshape(bcast).astype(x.dtype.np))
            term = picked * w
            acc = term if acc is None else acc + term
        assert acc is not None
        if outside.any():
            mask = type(x).const(outside.reshape(bcast))
            acc = mask.where(type(x).const(np.array(extrapolation_value, x.dtype.np)), acc)
        out = acc
    return out
