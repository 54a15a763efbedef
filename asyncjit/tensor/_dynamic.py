"""Data-dependent shapes on ``Tensor``: ``prefix``, ``x[:count]``, ``nonzero()``, masks, ``unique``.

Each is built from the padded form plus one ``prefix`` node (``asyncjit.graph._dynamic``): the
output's size is a ``DataVar`` bounded by the input's shape (or by a ``bound`` the caller gives),
set when the plan runs. Later ops see an ordinary symbolic dim; compiled kernels loop over its
actual value and outputs come back with their actual shapes.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

from .. import dtypes as dt
from ..errors import TensorError
from ..graph import Node, make_node, new_data_var
from ..graph._dynamic import INDEX_CHECK
from ..symbolic import DataVar, Dim, as_dim, bounds, free_vars, is_bounded, prod, smin, upper

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["DynamicShapes", "checked_index", "compress", "definers", "masked", "nonzero", "prefix", "unique"]

# the node that sets each data-dependent size, so a value made from the dim (``from_dim``) is
# ordered after it; weak: a graph that is dropped takes its entries with it
_DEFINERS: weakref.WeakValueDictionary[str, Node] = weakref.WeakValueDictionary()


def definers(expr: Dim) -> tuple[Node, ...]:
    """The nodes setting the data-dependent sizes ``expr`` uses (inputs that order a ``dim``)."""
    out = []
    for v in sorted(free_vars(expr), key=lambda v: v.name):
        if isinstance(v, DataVar):
            node = _DEFINERS.get(v.name)
            if node is None:
                raise TensorError(f"data-dependent size {v.name!r} has no op that sets it in this graph")
            out.append(node)
    return tuple(out)


def _check_bound(bound: Any, limit: Dim, what: str) -> int:
    cap = upper(limit)
    if bound is None:
        if not is_bounded(limit):
            raise TensorError(
                f"{what}: the size it takes from ({limit}) is unbounded; give bound= (the most "
                "entries the result may have)"
            )
        return cap
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
        raise TensorError(f"{what}: bound must be an int >= 0, got {bound!r}")
    return min(bound, cap)


def prefix(x: Tensor, count: Any, axis: int = 0, *, bound: int | None = None, label: str = "") -> Tensor:
    """The first ``count`` entries of ``x`` along ``axis``; ``count`` is a 0-d int tensor.

    The result's size there is data-dependent, bounded by ``bound`` (default: the axis's upper
    bound). A count below 0, above the bound or above the axis's actual size raises
    ``VarBoundsError`` from the run, naming the op.
    """
    from ._tensor import Tensor, _axis

    ax = _axis(axis, x.ndim)
    c = count if isinstance(count, Tensor) else Tensor.const(_as_int_array(count))
    if c.ndim != 0 or not (c.dtype.is_int or c.dtype == dt.bool_):
        raise TensorError(f"prefix: count must be a 0-d integer tensor, got {c.dtype.name}{list(c.shape)}")
    var = new_data_var(label or "prefix", _check_bound(bound, x.shape[ax], "prefix"))
    node = make_node("prefix", (x.node, c.node), axis=ax, size_var=var)
    _DEFINERS[var.name] = node
    return Tensor(node)


def checked_index(index: Tensor, size: Any, what: str = "an index", when: Tensor | None = None) -> Tensor:
    """``index`` itself, with a run of the plan failing if any value is outside ``[0, size)``.

    For the reads whose indices come from data (a token id, a computed position): a gather or
    scatter clamps or drops an index out of range (native code never reads past an axis), which
    hides a caller's bug; through this, the run raises ``IndexOutOfRangeError`` naming ``what``
    instead and returns nothing. Negative indices counting from the end must be wrapped first
    (``Tensor.select(i < 0, i + size, i)``). Constant indices into an axis of static size are
    checked when the plan compiles (against a symbolic size, by each run). ``when``: a 0-d bool
    tensor; while it is false nothing is checked (indices of a branch whose result is discarded).
    """
    from ._tensor import Tensor

    if not index.dtype.is_int:
        raise TensorError(f"checked_index: indices must be an integer tensor, got {index.dtype.name}")
    var = new_data_var(INDEX_CHECK + what, 0)
    ins = (index.node,) if when is None else (index.node, index._wrap(when).cast(dt.bool_).node)
    node = make_node("index_check", ins, size=as_dim(size), size_var=var)
    _DEFINERS[var.name] = node
    return Tensor(node)


def _as_int_array(value: Any) -> Any:
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TensorError(f"prefix: count must be an int or a 0-d integer Tensor, got {value!r}")
    return np.array(value, dtype=np.int64)


def slice_stop(y: Tensor, start: Dim, d: Dim, stop: Tensor, axis: int) -> Tensor:
    """The rest of ``x[start:stop]`` along ``axis`` with a computed ``stop``, where ``y`` is
    ``x[start:]`` and ``d`` the axis's size: numpy's rules (a negative stop counts from the end,
    clamped into the axis) decide the count, and ``prefix`` makes it a dim."""
    from ._tensor import Tensor

    if stop.ndim != 0 or not stop.dtype.is_int:
        raise TensorError(
            f"a computed slice stop must be a 0-d integer Tensor, got {stop.dtype.name}{list(stop.shape)}"
        )
    c = stop.cast(dt.int64)
    length = Tensor.from_dim(d, dt.int64)
    end = (c < 0).where(c + length, c).clip(0, length)
    n = end if _zero(start) else (end - Tensor.from_dim(start, dt.int64)).maximum(0)
    return prefix(y, n, axis, label="x[:count]")


def _zero(d: Dim) -> bool:
    return isinstance(d, int) and d == 0


def nonzero(x: Tensor, bound: int | None = None) -> Tensor:
    """Indices of the non-zero elements, ``[n, max(ndim, 1)]`` int64 in row-major order; ``n`` is
    data-dependent, bounded by ``bound`` (default: the number of elements)."""
    numel = prod(x.shape)
    cap = _check_bound(bound, numel, "nonzero")
    # the padded scan writes at most ``cap`` rows; the count may be larger and then fails the run
    padded = type(x)(make_node("nonzero", (x.node,), size=cap, fill=0))
    count = (x != 0).cast(dt.int64).sum()
    return prefix(padded, count, 0, bound=cap, label="nonzero")


def _take_rows(x: Tensor, axis: int, idx: Tensor) -> Tensor:
    """``x`` gathered along ``axis`` by in-range indices; an axis that can be empty gets one
    padding entry first (gather clamps into the axis, so it needs one; no index reaches it)."""
    if bounds(x.shape[axis])[0] < 1:
        x = x.pad([(0, 1) if a == axis else (0, 0) for a in range(x.ndim)])
    return x.gather(axis, idx.reshape(idx.shape[0]))


def masked(x: Tensor, mask: Tensor, bound: int | None = None) -> Tensor:
    """``x[mask]`` for a boolean ``mask`` over ``x``'s leading dims: the selected rows, flattened."""
    k = mask.ndim
    if k == 0 or k > x.ndim or any(a != b for a, b in zip(mask.shape, x.shape[:k], strict=False)):
        raise TensorError(
            f"boolean mask of shape {list(mask.shape)} does not match the leading dims of {list(x.shape)}"
        )
    rows = x.reshape(prod(x.shape[:k]), *x.shape[k:])
    return _take_rows(rows, 0, nonzero(mask.reshape(prod(mask.shape)), bound))


def compress(x: Tensor, condition: Tensor, axis: int | None = None, bound: int | None = None) -> Tensor:
    """numpy's ``compress``: the slices of ``x`` along ``axis`` where the 1-D ``condition`` is
    true (``axis=None`` works on the flattened tensor). A condition shorter than the axis
    selects among the first entries only, as numpy does; the entries of a longer one past the
    axis are ignored, as ONNX's ``Compress`` says (numpy raises; they once selected the last
    entry again, or the padding of an empty axis)."""
    from ._tensor import _axis

    if condition.ndim != 1:
        raise TensorError(f"compress: condition must be 1-D, got shape {list(condition.shape)}")
    if axis is None:
        x, ax = x.reshape(prod(x.shape)), 0
    else:
        ax = _axis(axis, x.ndim)
    n_cond, n_axis = condition.shape[0], x.shape[ax]
    if bounds(n_cond - n_axis)[1] > 0:  # can be longer than the axis
        condition = condition[: smin(n_cond, n_axis)]
    return _take_rows(x, ax, nonzero(condition, bound))


def unique(x: Tensor, bound: int | None = None) -> Tensor:
    """The sorted distinct values of ``x`` (flattened); their number is data-dependent. NaNs
    count as one value, sorted last (numpy's ``equal_nan=True``).

    The element count must be static (the sort is ``topk`` over every element, O(n^2)).
    """
    flat = x.reshape(prod(x.shape))
    n = flat.shape[0]
    if not isinstance(n, int):
        raise TensorError(f"unique needs a static number of elements, got {n}")
    cap = _check_bound(bound, n, "unique")
    s, _ = flat.topk(n, 0, largest=False)
    if n <= 1:
        return prefix(s, min(n, cap), 0, bound=cap, label="unique")
    same = s[1:] == s[:-1]
    if s.dtype.is_float:
        same = same | ((s[1:] != s[1:]) & (s[:-1] != s[:-1]))
    keep = same.logical_not().pad([(1, 0)], value=True)
    return compress(s, keep, 0, cap)


class DynamicShapes:
    """``Tensor``'s methods with data-dependent results (a base class, to keep ``_tensor.py`` small)."""

    __slots__ = ()

    def nonzero(self, size: int | None = None, fill_value: int = 0, *, bound: int | None = None) -> Any:
        """Indices of non-zero elements. ``size=None``: ``[n, ndim]`` int64 with a data-dependent
        ``n`` (at most ``bound``, default the element count). ``size=k``: padded to ``k`` rows
        (rest ``fill_value``) as ``(indices, count)``; ``count > size`` means ``size`` was short.
        """
        x = cast("Tensor", self)
        if size is None:
            return nonzero(x, bound)
        idx = type(x)(make_node("nonzero", (x.node,), size=size, fill=fill_value))
        return idx, (x != 0).cast(dt.int64).sum()

    def prefix(self, count: Any, axis: int = 0, *, bound: int | None = None) -> Tensor:
        """The first ``count`` (a 0-d int tensor) entries along ``axis``: a data-dependent dim."""
        return prefix(cast("Tensor", self), count, axis, bound=bound)

    def checked_index(self, size: Any, what: str = "an index", *, when: Tensor | None = None) -> Tensor:
        """These indices, with the run raising ``IndexOutOfRangeError`` (naming ``what``) if any
        is outside ``[0, size)`` (``size``: an int or a symbolic dim), instead of the gather or
        scatter reading them clamping or dropping it; with ``when`` (0-d bool), only where it
        holds."""
        return checked_index(cast("Tensor", self), size, what, when)

    def compress(self, condition: Tensor, axis: int | None = None, *, bound: int | None = None) -> Tensor:
        """numpy ``compress``: slices along ``axis`` where ``condition`` holds (data-dependent)."""
        return compress(cast("Tensor", self), condition, axis, bound)

    def unique(self, *, bound: int | None = None) -> Tensor:
        """Sorted distinct values (flattened, data-dependent count; static element count)."""
        return unique(cast("Tensor", self), bound)
