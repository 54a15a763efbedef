"""``Tensor``'s movement methods: reshape, permute, expand, squeeze, shrink, pad, split.

A base class of ``Tensor`` (as ``_dynamic.DynamicShapes``), to keep ``_tensor.py`` small. Each
method checks its arguments at the call, so a bad shape never reaches compilation.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from ..errors import ArgumentTypeError, ShapeMismatchError, TensorError
from ..graph import make_node, shape_str
from ..symbolic import Dim, Expr, as_dim, is_dim, prod
from . import _nn

if TYPE_CHECKING:
    from ._tensor import Scalar, Tensor

__all__ = ["Movement"]

_axis = _nn.norm_axis


class Movement:
    """Movement methods of ``Tensor`` (index arithmetic when compiled: no data is copied)."""

    __slots__ = ()

    def reshape(self, *shape: Dim | Sequence[Dim]) -> Tensor:
        """numpy reshape; one ``-1`` is inferred when the division is exact."""
        x = cast("Tensor", self)
        dims: list[Dim] = list(shape[0]) if len(shape) == 1 and not is_dim(shape[0]) else list(shape)  # type: ignore[arg-type]
        dims = [as_dim(d) for d in dims]
        if sum(1 for d in dims if isinstance(d, int) and d == -1) > 1:
            raise TensorError(f"reshape {dims}: at most one -1")
        if -1 in [d for d in dims if isinstance(d, int)]:
            known = prod(d for d in dims if not (isinstance(d, int) and d == -1))
            total = x.numel
            if isinstance(known, int) and known and isinstance(total, int):
                if total % known:
                    raise ShapeMismatchError(f"cannot reshape {shape_str(x.shape)} to {dims}")
                inferred: Dim = total // known
            else:
                inferred = _exact_div(total, known, x.shape, dims)
            dims = [inferred if isinstance(d, int) and d == -1 else d for d in dims]
        if tuple(dims) == x.shape:
            return x
        try:
            return type(x)(make_node("reshape", (x.node,), shape=tuple(dims)))
        except TensorError as exc:
            raise ShapeMismatchError(str(exc)) from None

    def permute(self, *order: int | Sequence[int]) -> Tensor:
        x = cast("Tensor", self)
        axes = list(order[0]) if len(order) == 1 and not isinstance(order[0], int) else list(order)
        norm = tuple(_axis(a, x.ndim) for a in axes)
        if norm == tuple(range(x.ndim)):
            return x
        return type(x)(make_node("permute", (x.node,), order=norm))

    def transpose(self, a: int = -2, b: int = -1) -> Tensor:
        x = cast("Tensor", self)
        order = list(range(x.ndim))
        ia, ib = _axis(a, x.ndim), _axis(b, x.ndim)
        order[ia], order[ib] = order[ib], order[ia]
        return x.permute(*order)

    def expand(self, *shape: Dim | Sequence[Dim]) -> Tensor:
        x = cast("Tensor", self)
        dims = tuple(shape[0]) if len(shape) == 1 and not is_dim(shape[0]) else shape  # type: ignore[arg-type]
        return x._broadcast_to(tuple(as_dim(d) for d in dims))

    broadcast_to = expand

    def unsqueeze(self, axis: int) -> Tensor:
        x = cast("Tensor", self)
        axis = _axis(axis, x.ndim + 1)
        return x.reshape(*x.shape[:axis], 1, *x.shape[axis:])

    def squeeze(self, axis: int | None = None) -> Tensor:
        x = cast("Tensor", self)
        if axis is None:
            return x.reshape(*(d for d in x.shape if d != 1))
        axis = _axis(axis, x.ndim)
        if x.shape[axis] != 1:
            raise ShapeMismatchError(f"cannot squeeze axis {axis} of {shape_str(x.shape)}: not 1")
        return x.reshape(*x.shape[:axis], *x.shape[axis + 1 :])

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        x = cast("Tensor", self)
        if not x.ndim:
            return x.reshape(1)
        s, e = _axis(start, x.ndim), _axis(end, x.ndim)
        return x.reshape(*x.shape[:s], prod(x.shape[s : e + 1]), *x.shape[e + 1 :])

    def shrink(self, slices: Sequence[tuple[Dim, Dim] | None]) -> Tensor:
        """Keep ``[start, stop)`` of each axis (``None`` keeps the whole axis); dims may be symbolic."""
        x = cast("Tensor", self)
        if len(slices) != x.ndim:
            raise TensorError(f"shrink needs {x.ndim} (start, stop) pairs, got {len(slices)}")
        full = tuple(
            (0, d, 1) if s is None else (as_dim(s[0]), as_dim(s[1]), 1)
            for s, d in zip(slices, x.shape, strict=True)
        )
        if all(s == 0 and e == d for (s, e, _), d in zip(full, x.shape, strict=True)):
            return x
        return type(x)(make_node("shrink", (x.node,), slices=full))

    def pad(
        self,
        pads: Sequence[tuple[Dim, Dim] | None],
        mode: str = "constant",
        value: Scalar = 0,
    ) -> Tensor:
        """Pad each axis by ``(before, after)``: ``constant`` (with ``value``), ``reflect`` or ``edge``."""
        x = cast("Tensor", self)
        if isinstance(value, str | bytes) or not isinstance(
            value, bool | int | float | np.bool_ | np.integer | np.floating
        ):
            raise ArgumentTypeError(f"pad value must be a number, got {type(value).__name__}")
        if len(pads) != x.ndim:
            raise TensorError(f"pad needs {x.ndim} (before, after) pairs, got {len(pads)}")
        full = tuple((0, 0) if p is None else (as_dim(p[0]), as_dim(p[1])) for p in pads)
        if all(lo == 0 and hi == 0 for lo, hi in full):
            return x
        return type(x)(make_node("pad", (x.node,), pads=full, mode=mode, value=value))

    def split(self, sizes: Sequence[Dim], axis: int = 0) -> list[Tensor]:
        """Split along ``axis`` into pieces of the given sizes (which must add up to the dim)."""
        x = cast("Tensor", self)
        ax = _axis(axis, x.ndim)
        if not isinstance(sizes, Sequence) or isinstance(sizes, str):
            raise ArgumentTypeError(f"split sizes must be a sequence of dims, got {type(sizes).__name__}")
        sizes = [as_dim(s) for s in sizes]
        total: Dim = 0
        out: list[Tensor] = []
        for s in sizes:
            sl: list[tuple[Dim, Dim] | None] = [None] * x.ndim
            sl[ax] = (total, total + s)
            out.append(x.shrink(sl))
            total = total + s
        if total != x.shape[ax]:
            raise ShapeMismatchError(f"split sizes {list(sizes)} do not add up to dim {x.shape[ax]}")
        return out

    def chunk(self, n: int, axis: int = -1) -> list[Tensor]:
        x = cast("Tensor", self)
        n = _nn.int_arg(n, "chunk count")
        if n < 1:
            raise TensorError(f"chunk count must be >= 1, got {n}")
        ax = _axis(axis, x.ndim)
        d = x.shape[ax]
        if not isinstance(d, int) or d % n:
            raise ShapeMismatchError(f"cannot chunk dim {d} into {n} equal parts")
        return x.split([d // n] * n, ax)

    def glu(self, axis: int = -1) -> Tensor:
        x = cast("Tensor", self)
        a, b = x.chunk(2, axis)
        return a * b.sigmoid()


def _exact_div(total: Dim, known: Dim, shape: Sequence[Dim], dims: Sequence[Dim]) -> Dim:
    """``total / known`` when it is provably exact (an int divisor, or a product of other dims)."""
    if isinstance(known, int) and known:
        q = total // known
        if q * known == total:
            return q
    if isinstance(known, Expr):
        # total = known * rest: find dims of the shape whose product is `known` (ranks are small)
        for r in range(1, len(shape)):
            for picked in itertools.combinations(range(len(shape)), r):
                if prod(shape[i] for i in picked) == known:
                    return prod(d for i, d in enumerate(shape) if i not in picked)
    raise ShapeMismatchError(f"cannot infer -1 when reshaping {shape_str(shape)} to {list(dims)}")
