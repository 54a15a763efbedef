"""Ops whose output size depends on the data: NonZero, Compress, Unique, NonMaxSuppression.

Each is computed in a padded form of the largest possible size, then cut with ``Tensor.prefix``
(or ``nonzero``/``compress``, built on it): the result has a data-dependent dim bounded by the
input's size, which later ops treat as any symbolic dim and which outputs report at its actual
value. Nothing is sized from the data at load time, so one plan serves every input.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..tensor import Tensor
from ._ops_shape import axis_of
from ._registry import NodeCtx, op
from ._values import Value

__all__: list[str] = []


@op("NonZero", since=9)
def _nonzero(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    if x.ndim == 0:
        x = x.reshape(1)
    found: Tensor = x.nonzero()
    return found.permute(1, 0)  # ONNX lists one row per axis: [ndim, count]


@op("Compress", since=9)
def _compress(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, cond = n.t(ins[0]), n.t(ins[1]).cast(dt.bool_)
    axis = n.attr("axis")
    if cond.ndim != 1:
        raise n.fail(f"the condition must be 1-D, got rank {cond.ndim}")
    return x.compress(cond, None if axis is None else axis_of(axis, x.ndim, n))


def _extent(boxes: Tensor, center: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x_min, x_max, y_min, y_max)`` of ``boxes[..., 4]`` (corners in any order, or centre + size)."""
    a, b, c, d = (boxes[..., i] for i in range(4))
    if center:  # [x_centre, y_centre, width, height]
        return a - c / 2.0, a + c / 2.0, b - d / 2.0, b + d / 2.0
    # [y1, x1, y2, x2], either corner first
    return b.minimum(d), b.maximum(d), a.minimum(c), a.maximum(c)


@op("NonMaxSuppression", since=10)
def _non_max_suppression(n: NodeCtx, ins: list[Value | None]) -> Value:
    boxes, scores = n.t(ins[0]).cast(dt.float32), n.t(ins[1]).cast(dt.float32)

    def scalar(i: int, what: str, default: float | None) -> float | None:
        v = ins[i] if len(ins) > i else None
        return default if v is None or n.const(v, what).size == 0 else float(n.const(v, what).reshape(-1)[0])

    limit = int(scalar(2, "max_output_boxes_per_class", 0.0) or 0)
    iou_limit = scalar(3, "iou_threshold", 0.0) or 0.0
    score_min = scalar(4, "score_threshold", None)
    nb, nc, nbox = scores.shape
    if (
        not isinstance(nbox, int)
        or not isinstance(nb, int)
        or not isinstance(nc, int)
        or boxes.shape != (nb, nbox, 4)
    ):
        raise n.fail(f"boxes {boxes.shape} and scores {scores.shape} must be static [B, N, 4] and [B, C, N]")
    # pairwise suppression between boxes of a batch: IoU above the threshold (ONNX's strict tests)
    x0, x1, y0, y1 = _extent(boxes, n.flag("center_point_box", 0))
    area = (x1 - x0) * (y1 - y0)
    iw = x1.unsqueeze(2).minimum(x1.unsqueeze(1)) - x0.unsqueeze(2).maximum(x0.unsqueeze(1))
    ih = y1.unsqueeze(2).minimum(y1.unsqueeze(1)) - y0.unsqueeze(2).maximum(y0.unsqueeze(1))
    inter = iw.maximum(0.0) * ih.maximum(0.0)
    union = area.unsqueeze(2) + area.unsqueeze(1) - inter
    valid = (iw > 0.0) & (ih > 0.0) & (area.unsqueeze(2) > 0.0) & (area.unsqueeze(1) > 0.0) & (union > 0.0)
    suppress = valid & (inter / Tensor.select(valid, union, 1.0) > iou_limit)  # [B, N, N]
    # candidates best score first (ties: lower box index first), per batch and class
    ranked, order = scores.topk(nbox, -1, largest=True)  # [B, C, N]
    rows = order.reshape(nb, nc * nbox)
    pairs = suppress.cast(dt.uint8).take_along_axis(rows.unsqueeze(2).expand(nb, nc * nbox, nbox), 1)
    pairs = pairs.reshape(nb, nc, nbox, nbox).take_along_axis(
        order.unsqueeze(2).expand(nb, nc, nbox, nbox), 3
    )
    pairs = pairs != 0  # [B, C, k, m]: the k-th ranked box suppresses the m-th
    blocked = Tensor.zeros([nb, nc, nbox], dt.bool_)
    count = Tensor.zeros([nb, nc], dt.int64)
    picked: list[Tensor] = []
    for k in range(nbox):  # the greedy pass: one recorded step per box
        take = blocked[:, :, k].logical_not() & (count < limit)
        if score_min is not None:
            take = take & (ranked[:, :, k] > score_min)
        picked.append(take)
        blocked = blocked | (take.unsqueeze(2) & pairs[:, :, k, :])
        count = count + take.cast(dt.int64)
    kept = Tensor.stack(picked, 2).reshape(nb * nc * nbox)
    at: Tensor = kept.nonzero()
    at = at.reshape(-1)  # flat (batch, class, rank) positions, in output order
    box = order.reshape(nb * nc * nbox).gather(0, at)
    return Tensor.stack([at // (nc * nbox), (at // nbox) % nc, box], 1)


@op("Unique", since=11)
def _unique(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x = n.t(ins[0])
    axis = n.attr("axis")
    if axis is None:
        rows, ax = x.reshape(-1, 1), None
    else:
        ax = axis_of(axis, x.ndim, n)
        moved = x.permute(ax, *[a for a in range(x.ndim) if a != ax])
        rows = moved.reshape(moved.shape[0], -1)
    count, width = rows.shape
    if not isinstance(count, int) or not isinstance(width, int):
        raise n.fail("Unique compares every pair of entries: their number and size must be static")
    # pairwise: equal entries, and the first differing element deciding the lexicographic order
    a, b = rows.unsqueeze(1).expand(count, count, width), rows.unsqueeze(0).expand(count, count, width)
    differ = a != b
    same = differ.cast(dt.int32).max(2) == 0  # [j, k]
    first_diff = differ.cast(dt.int32).argmax(2, keepdims=True)
    before = (a.take_along_axis(first_diff, 2) < b.take_along_axis(first_diff, 2)).reshape(count, count)
    first = same.cast(dt.int32).argmax(1)  # each entry's first occurrence
    is_first = first == Tensor.arange(count, dt.int64)
    if n.flag("sorted", 1):  # slot = how many distinct entries sort before it
        slot = (is_first.unsqueeze(1) & before & ~same).cast(dt.int64).sum(0)
    else:  # slot = order of first occurrence
        slot = (is_first.cast(dt.int64).cumsum(0) - 1).gather(0, first)
    distinct = is_first.cast(dt.int64).sum()
    # the slot of each first occurrence receives its index and count; the rest are padding
    target = Tensor.select(is_first, slot, count)
    zeros = Tensor.zeros([count], dt.int64)
    index = zeros.scatter(0, target, Tensor.arange(count, dt.int64))
    counts = zeros.scatter(0, target, same.cast(dt.int64).sum(1))
    values = rows.gather(0, index)
    index, counts, values = (v.prefix(distinct, 0, bound=count) for v in (index, counts, values))
    if ax is None:
        y = values.reshape(-1)
    else:
        rest = [x.shape[i] for i in range(x.ndim) if i != ax]
        y = values.reshape(values.shape[0], *rest)
        others = list(range(1, x.ndim))
        y = y.permute(*others[:ax], 0, *others[ax:])  # the unique axis back in its place
    return [y, index, slot, counts]
