"""Data-dependent sizes: the ``prefix`` op, which turns a count computed in the graph into a dim.

``prefix(x, count, axis, size_var)`` keeps the first ``count`` entries of ``x`` along ``axis``;
its output's dim there is ``size_var``, a ``DataVar`` the run sets. Every data-dependent shape
(``x[:count]``, ``nonzero()`` without a size, boolean masks, ``unique``) is built from it: the
padded form computes a bounded result and a count, ``prefix`` makes the count a dim, and later
kernels loop over the actual size (invariant 3) while buffers keep the bound's capacity.

A count outside ``[0, bound]`` is a ``VarBoundsError`` naming the op and its label: the run never
writes past the bound (native code clamps what it copies and the host checks the count after).

``index_check(index[, when], size, size_var)`` rides on the same path to make a run fail on data:
it passes ``index`` through and counts its values outside ``[0, size)`` (none while a 0-d bool
``when`` is false: an ONNX branch not taken) into ``size_var``, a
``DataVar`` bounded to ``[0, 0]`` whose label starts with ``INDEX_CHECK``. A count above 0 is
then out of bounds, and the host raises ``IndexOutOfRangeError`` (not ``VarBoundsError``) for it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import IndexOutOfRangeError, TensorError, VarBoundsError
from ..symbolic import DataVar, Dim, bounds, evaluate
from ._node import Node
from ._ops import _register

__all__ = [
    "INDEX_CHECK",
    "check_size",
    "defined_var",
    "index_error",
    "is_index_check",
    "new_data_var",
    "setters",
    "var_stem",
]

INDEX_CHECK = "index check: "
"""The label prefix of an ``index_check``'s ``DataVar`` (the rest names what the index reads)."""

_counter = itertools.count()


def new_data_var(label: str, bound: int, min: int = 0) -> DataVar:
    """A fresh ``DataVar`` for an op labelled ``label`` (``nonzero``, ``x[:count]``, ...)."""
    if isinstance(bound, bool) or not isinstance(bound, int | np.integer) or bound < 0:
        raise VarBoundsError(
            f"{label}: the bound of a data-dependent size must be an int >= 0, got {bound!r}"
        )
    stem = var_stem(label)
    return DataVar(f"{stem}_{next(_counter)}", int(min), int(bound), label)


def var_stem(label: str) -> str:
    """An identifier made from an op's label (ASCII only: ``\\w`` keeps characters such as
    ``²`` that Python identifiers refuse, and an ONNX node's name may hold any)."""
    stem = re.sub(r"[^0-9A-Za-z_]+", "_", label).strip("_") or "size"
    return f"v_{stem}" if stem[0].isdigit() else stem


def defined_var(node: Node) -> tuple[DataVar, int] | None:
    """``(var, axis)`` when ``node`` sets a data-dependent size (its output dim ``axis``)."""
    if node.op != "prefix":
        return None
    var = node.attrs["size_var"]
    return var, int(node.attrs["axis"])


def is_index_check(var: DataVar) -> bool:
    """Whether ``var`` is the out-of-range count of an ``index_check`` (not a size)."""
    return var.op.startswith(INDEX_CHECK)


def index_error(var: DataVar, count: int) -> IndexOutOfRangeError:
    """The error for ``count`` out-of-range values found by the ``index_check`` of ``var``."""
    what = var.op[len(INDEX_CHECK) :] or "an index"
    values = (
        "1 index is outside the axis it indexes"
        if count == 1
        else f"{count} indices are outside the axis they index"
    )
    return IndexOutOfRangeError(f"{what}: {values}; the run returned nothing")


def setters(nodes: list[Node]) -> list[Node]:
    """The nodes that set a ``DataVar`` (a size or an index check), in order."""
    return [n for n in nodes if n.op in ("prefix", "index_check")]


def check_size(node: Node, value: int, axis_len: int) -> int:
    """``value`` if it is a valid size for the ``DataVar`` ``node`` sets (at most its bound and
    the ``axis_len`` entries it takes from).

    Raises:
        VarBoundsError: out of range, naming the op and what to change.
    """
    var: DataVar = node.attrs["size_var"]
    limit = min(var.max, axis_len)
    if value < 0:
        raise VarBoundsError(f"{var.op or node.op} computed a negative size {value} for {var.name!r}")
    if value > limit:
        raise VarBoundsError(
            f"{var.op or node.op} computed size {value} for {var.name!r}, above {limit} (its "
            f"bound is {var.max}, and it cannot exceed the axis it takes from); give a larger "
            "bound where the size is made"
        )
    return value


def _infer_prefix(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[tuple[Dim, ...], DType]:
    x, count = ins
    axis, var = a["axis"], a["size_var"]
    if not isinstance(var, DataVar):
        raise TensorError(f"prefix: size_var must be a DataVar, got {var!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.ndim:
        raise TensorError(f"prefix: axis {axis!r} is out of range for rank {x.ndim}")
    if count.ndim != 0 or not (count.dtype.is_int or count.dtype == dt.bool_):
        raise TensorError(
            f"prefix: the count must be a 0-d integer tensor, got {count.dtype.name}{list(count.shape)}"
        )
    if var.max > bounds(x.shape[axis])[1]:  # the run also checks the axis's actual size
        raise TensorError(
            f"prefix: bound {var.max} of {var.name!r} exceeds axis {axis} of size {x.shape[axis]}"
        )
    return (*x.shape[:axis], var, *x.shape[axis + 1 :]), x.dtype


def _ref_prefix(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    x, count = args
    axis = node.attrs["axis"]
    n = check_size(node, int(count), x.shape[axis])
    return np.ascontiguousarray(x[(slice(None),) * axis + (slice(0, n),)])


_register("prefix", "prefix", _infer_prefix, _ref_prefix)


def _infer_index_check(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[tuple[Dim, ...], DType]:
    index = ins[0]
    if len(ins) > 2 or (len(ins) == 2 and (ins[1].ndim != 0 or ins[1].dtype != dt.bool_)):
        raise TensorError("index_check: its second input (when to check) must be a 0-d bool tensor")
    var = a["size_var"]
    if not isinstance(var, DataVar) or not is_index_check(var) or var.max != 0:
        raise TensorError(f"index_check: size_var must be an index check's DataVar, got {var!r}")
    if not index.dtype.is_int:
        raise TensorError(f"index_check: indices must be an integer tensor, got {index.dtype.name}")
    size = a["size"]
    if bounds(size)[0] < 0:
        raise TensorError(f"index_check: the axis size {size} may be negative")
    return index.shape, index.dtype


def _ref_index_check(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    index = args[0]
    if len(args) == 2 and not bool(args[1]):
        return index
    size = evaluate(node.attrs["size"], b)
    wide = index.astype(np.int64) if index.dtype != np.uint64 else index
    bad = int(np.count_nonzero((wide < 0) | (wide >= size)))
    if bad:
        raise index_error(node.attrs["size_var"], bad)
    return index


_register("index_check", "prefix", _infer_index_check, _ref_index_check)
