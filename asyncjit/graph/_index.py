"""Index ops of the graph: gather/scatter along an axis with a 1-D index tensor, and nonzero.

Indices are data, so their semantics must never let native code leave a buffer: a gather clamps
an out-of-range index, a scatter drops it, and nonzero writes at most its declared ``size`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..symbolic import bounds
from ._node import Node, shape_str
from ._ops import Shape, _fail, _register

__all__ = ["SCATTER_REDUCTIONS"]

# ---------------------------------------------------------------------------------------------
# gather / scatter along an axis with a 1-D index tensor


def _check_index(idx: Node, op: str) -> None:
    if idx.ndim != 1 or not idx.dtype.is_int:
        raise _fail(f"{op}: index must be a 1-D int tensor, got {idx.dtype.name}{shape_str(idx.shape)}")


def _infer_gather(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, idx = ins
    axis = a["axis"]
    _check_index(idx, "gather")
    if not 0 <= axis < x.ndim:
        raise _fail(f"gather axis {axis} out of range for {shape_str(x.shape)}")
    if bounds(x.shape[axis])[0] < 1:
        raise _fail(f"gather: axis {axis} of {shape_str(x.shape)} can be empty")
    return (*x.shape[:axis], idx.shape[0], *x.shape[axis + 1 :]), x.dtype


def _ref_gather(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    x, idx = args
    axis = node.attrs["axis"]
    safe = np.clip(idx.astype(np.int64), 0, x.shape[axis] - 1)
    return np.take(x, safe, axis=axis)


_register("gather", "index", _infer_gather, _ref_gather)


def _infer_scatter(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, idx, src = ins
    axis = a["axis"]
    _check_index(idx, "scatter")
    if not 0 <= axis < x.ndim:
        raise _fail(f"scatter axis {axis} out of range for {shape_str(x.shape)}")
    want = (*x.shape[:axis], idx.shape[0], *x.shape[axis + 1 :])
    if src.shape != want:
        raise _fail(f"scatter: src shape {shape_str(src.shape)} must be {shape_str(want)}")
    if src.dtype != x.dtype:
        raise _fail(f"scatter: src dtype {src.dtype.name} differs from {x.dtype.name}")
    if a.get("reduce", "none") not in SCATTER_REDUCTIONS:
        raise _fail(f"scatter: reduce must be one of {sorted(SCATTER_REDUCTIONS)}, got {a['reduce']!r}")
    return x.shape, x.dtype


SCATTER_REDUCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray] | None] = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}
"""How ``scatter`` combines a written value with the one already there (``none``: replace)."""


def _ref_scatter(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    x, idx, src = args
    axis = node.attrs["axis"]
    combine = SCATTER_REDUCTIONS[node.attrs.get("reduce", "none")]
    out = x.copy()
    n = x.shape[axis]
    for i, j in enumerate(idx.astype(np.int64).tolist()):
        if 0 <= j < n:
            dst: list[Any] = [slice(None)] * x.ndim
            dst[axis] = j
            srcsl: list[Any] = [slice(None)] * x.ndim
            srcsl[axis] = i
            value = src[tuple(srcsl)]
            out[tuple(dst)] = value if combine is None else combine(out[tuple(dst)], value)
    return out


_register("scatter", "index", _infer_scatter, _ref_scatter)

# ---------------------------------------------------------------------------------------------
# nonzero with a declared maximum size: indices [size, ndim] int64, rows past the count = fill


def _infer_nonzero(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    size = a["size"]
    if not isinstance(size, int) or size < 0:
        raise _fail(f"nonzero size must be an int >= 0, got {size!r}")
    return (size, max(x.ndim, 1)), dt.int64


def _ref_nonzero(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    size = node.attrs["size"]
    found = np.argwhere(np.atleast_1d(x) != 0)[:size]
    out = np.full((size, found.shape[1] if found.ndim == 2 else 1), node.attrs.get("fill", 0), np.int64)
    out[: len(found)] = found
    return out


_register("nonzero", "nonzero", _infer_nonzero, _ref_nonzero)
