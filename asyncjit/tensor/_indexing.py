"""``Tensor.__getitem__``: numpy basic indexing over symbolic dims, as shrink/gather/reshape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsIndex

from .. import dtypes as dt
from ..errors import ArgumentTypeError, TensorError
from ..graph import make_node
from ..symbolic import Dim, as_dim, bounds, is_dim, smax, smin
from . import _dynamic

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["getitem"]


def getitem(x: Tensor, index: Any) -> Tensor:
    if isinstance(index, type(x)) and index.dtype == dt.bool_:
        return _dynamic.masked(x, index)  # a boolean mask: data-dependent row count
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise TensorError("an index can only have a single ellipsis")
    if sum(1 for i in items if isinstance(i, type(x))) > 1:
        raise TensorError(
            "only one Tensor index is supported (numpy would pair several element-wise); "
            "use gather once per axis"
        )
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise TensorError(f"too many indices ({used}) for a tensor of rank {x.ndim}")
    if any(i is Ellipsis for i in items):  # not ``in``: that would call Tensor.__eq__
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - used)
    else:
        items += [slice(None)] * (x.ndim - used)

    slices: list[tuple[Dim, Dim, int]] = []
    gathers: list[tuple[int, Tensor]] = []
    stops: list[tuple[int, Dim, Dim, Tensor]] = []  # computed slice stops: axis, start, size, stop
    # the output, in order: ("new",) for None, ("keep", axis) for a kept axis; ints drop theirs
    layout: list[tuple[str, int]] = []
    axis = 0
    for it in items:
        if it is None:
            layout.append(("new", -1))
            continue
        d = x.shape[axis]
        if isinstance(it, type(x)) and it.dtype == dt.bool_:
            raise TensorError("a boolean mask index must be the only index (x[mask])")
        if isinstance(it, slice) and isinstance(it.stop, type(x)):
            if it.step not in (None, 1) or isinstance(it.start, type(x)):
                raise TensorError("a computed slice stop needs a static start and step 1 (x[a:count])")
            start = _slice_bounds(slice(it.start, None), d)[0]
            slices.append((start, d, 1))
            stops.append((axis, start, d, it.stop))
            layout.append(("keep", axis))
        elif isinstance(it, type(x)):
            slices.append((0, d, 1))
            gathers.append((axis, it))
            layout.append(("keep", axis))
        elif isinstance(it, slice):
            slices.append(_slice_bounds(it, d))
            layout.append(("keep", axis))
        elif is_dim(it) or isinstance(it, SupportsIndex):
            i = _from_end(it, d, "index")
            if bounds(i)[0] < 0 or bounds(d - i - 1)[0] < 0:
                raise TensorError(f"index {it} is out of range for axis {axis} of size {d}")
            slices.append((i, i + 1, 1))
        else:
            raise ArgumentTypeError(f"unsupported index {it!r} (type {type(it).__name__})")
        axis += 1

    y = x
    if any(s != (0, d, 1) for s, d in zip(slices, x.shape, strict=True)):
        y = type(x)(make_node("shrink", (y.node,), slices=tuple(slices)))
    for ax, start, size, stop in stops:
        y = _dynamic.slice_stop(y, start, size, stop, ax)
    for ax, idx in gathers:
        y = y.gather(ax, idx)
    out = [1 if kind == "new" else y.shape[ax] for kind, ax in layout]
    return y.reshape(*out) if tuple(out) != y.shape else y


def _from_end(value: Any, d: Dim, what: str) -> Dim:
    """numpy's negative indices over a possibly symbolic dim: a value that is negative for every
    binding counts from the end; one whose sign depends on the binding is ambiguous."""
    v = as_dim(value)
    lo, hi = bounds(v)
    if hi < 0:
        return d + v
    if lo < 0:
        raise TensorError(
            f"{what} {v} is negative for some bindings and not for others; numpy counts from the "
            f"end only when negative, so spell it out (for example d - k)"
        )
    return v


def _slice_bounds(s: slice, d: Dim) -> tuple[Dim, Dim, int]:
    """numpy's slice normalisation over a possibly symbolic dim: negatives count from the end,
    both ends clamp into ``[0, d]`` and ``stop`` is at least ``start``."""
    step = 1 if s.step is None else s.step
    if not isinstance(step, int) or step < 1:
        raise TensorError(f"slice step must be an int >= 1, got {s.step!r}")

    if s.start is None and s.stop is None:  # the whole axis: nothing to clamp or prove
        return 0, d, step

    def norm(given: Any, default: Dim) -> Dim:
        if given is None:
            return default
        return smin(smax(_from_end(given, d, "slice bound"), 0), d)

    start = norm(s.start, 0)
    # stop as start + a length >= 0 keeps ``start <= stop <= d`` provable from bounds alone
    stop = start + smax(norm(s.stop, d) - start, 0)
    return start, stop, step
