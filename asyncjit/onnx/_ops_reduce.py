"""Reductions and index ops: Reduce*, ArgMax/ArgMin, TopK, CumSum, gathers and scatters.

The gathers and scatters work on flattened data with a computed linear index, using the one
1-D ``gather``/``scatter`` the compiler has; indices are wrapped from the end as ONNX says.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import dtypes as dt
from ..symbolic import Dim, prod
from ..tensor import Tensor
from ._ops_shape import axis_of, reverse_axis
from ._registry import NodeCtx, checked, op
from ._values import Value

__all__: list[str] = []


def _reduce_axes(
    n: NodeCtx, ins: list[Value | None], ndim: int, axes_input_since: int
) -> tuple[int, ...] | None:
    if n.opset >= axes_input_since:
        if len(ins) > 1 and ins[1] is not None:
            axes = [int(a) for a in n.const(ins[1], "axes").reshape(-1)]
        else:
            axes = []
        if not axes:
            return None if n.flag("noop_with_empty_axes", 0) else tuple(range(ndim))
    else:
        given = n.attr("axes")
        if given is not None and not list(given):
            raise n.fail("an empty axes attribute reduces every axis in ONNX Runtime and none in ONNX's "
                         "reference implementation; leave it out to reduce every axis")  # fmt: skip
        axes = list(given) if given is not None else list(range(ndim))
    return tuple(sorted({axis_of(a, ndim, n) for a in axes}))


def _reduction(name: str, fn: Callable[[Tensor, tuple[int, ...], bool], Tensor], since: int = 18) -> None:
    def lower(n: NodeCtx, ins: list[Value | None]) -> Value:
        x = n.t(ins[0])
        axes = _reduce_axes(n, ins, x.ndim, since)
        if axes is None:
            return x
        keep = n.flag("keepdims", 1)
        if not axes:
            return x
        return fn(x, axes, keep)

    op(name)(lower)


def _mean(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    if x.dtype.is_int:
        return x.sum(axes, keep) // prod(x.shape[a] for a in axes)
    return x.mean(axes, keep).cast(x.dtype)


def _f32(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    return lambda x: fn(x.cast(dt.float32) if x.dtype == dt.float16 else x)


_reduction("ReduceSum", lambda x, a, k: x.sum(a, k), since=13)
_reduction("ReduceMean", _mean)
_reduction(
    "ReduceMax", lambda x, a, k: x.cast(dt.uint8).max(a, k).cast(dt.bool_) if x.dtype.is_bool else x.max(a, k)
)
_reduction(
    "ReduceMin", lambda x, a, k: x.cast(dt.uint8).min(a, k).cast(dt.bool_) if x.dtype.is_bool else x.min(a, k)
)
_reduction("ReduceProd", lambda x, a, k: x.prod(a, k))
_reduction("ReduceSumSquare", lambda x, a, k: (x * x).sum(a, k))
_reduction("ReduceL1", lambda x, a, k: x.abs().sum(a, k))
_reduction("ReduceL2", lambda x, a, k: (x * x).sum(a, k).cast(dt.float32).sqrt().cast(x.dtype))
_reduction("ReduceLogSum", lambda x, a, k: x.sum(a, k).log())


def _logsumexp(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    m = x.max(axes, keepdims=True)
    m = Tensor.select(m.abs() == float("inf"), Tensor.zeros(m.shape, m.dtype), m)
    out = (x - m).exp().sum(axes, keepdims=True).log() + m
    return out if keep else out.reshape(*(d for i, d in enumerate(out.shape) if i not in axes))


_reduction("ReduceLogSumExp", _logsumexp)


def _arg(n: NodeCtx, ins: list[Value | None], largest: bool) -> Value:
    x = n.t(ins[0])
    axis = axis_of(n.attr("axis", 0), x.ndim, n)
    keep, last = n.flag("keepdims", 1), n.flag("select_last_index", 0)
    return x.argmax(axis, keep, last) if largest else x.argmin(axis, keep, last)


op("ArgMax")(lambda n, ins: _arg(n, ins, True))
op("ArgMin")(lambda n, ins: _arg(n, ins, False))


@op("TopK")
def _topk(n: NodeCtx, ins: list[Value | None]) -> list[Value]:
    x = n.t(ins[0])
    k = int(n.const(ins[1], "K").reshape(-1)[0]) if n.opset >= 10 else int(n.attr("k"))
    axis = axis_of(n.attr("axis", -1), x.ndim, n)
    values, indices = x.topk(k, axis, n.flag("largest", 1))
    return [values, indices]


def _linear_index(shape: tuple[Dim, ...], index: Tensor, axis: int) -> Tensor:
    """Flat offsets into ``shape`` of every element of ``index`` read along ``axis``."""
    strides: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    strides.reverse()
    total: Tensor | None = None
    for a in range(len(shape)):
        if a == axis:
            coord = index
        else:
            d = index.shape[a]
            coord = (
                Tensor.arange(d, dt.int64)
                .reshape(*([1] * a), d, *([1] * (index.ndim - a - 1)))
                .expand(*index.shape)
            )
        term = coord * strides[a] if strides[a] != 1 else coord
        total = term if total is None else total + term
    assert total is not None
    return total


def _gather_elements(x: Tensor, index: Tensor, axis: int, n: NodeCtx | None = None) -> Tensor:
    """``x`` at ``index`` along ``axis`` (negative indices from the end); with ``n``, an index
    outside the axis fails the run naming the node (ONNX semantics), else it is clamped."""
    index = index.cast(dt.int64)
    index = Tensor.select(index < 0, index + x.shape[axis], index)
    if n is not None:
        index = checked(n, index, x.shape[axis])
    return x.take_along_axis(index, axis)


@op("GatherElements")
def _gather_elements_op(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return _gather_elements(x, n.t(ins[1]), axis_of(n.attr("axis", 0), x.ndim, n), n)


def _reduction_of(n: NodeCtx) -> str:
    """A scatter's ``reduction`` attribute: none (replace), add, mul, max or min."""
    reduce = n.attr("reduction", "none")
    reduce = reduce.decode() if isinstance(reduce, bytes) else str(reduce)
    if reduce not in ("none", "add", "mul", "max", "min"):
        raise n.fail(f"reduction {reduce!r} is not one of none, add, mul, max, min")
    return reduce


@op("ScatterElements", "Scatter")
def _scatter_elements(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    reduce = _reduction_of(n)
    axis = axis_of(n.attr("axis", 0), x.ndim, n)
    index = n.t(ins[1]).cast(dt.int64)
    index = checked(n, Tensor.select(index < 0, index + x.shape[axis], index), x.shape[axis])
    flat = _linear_index(x.shape, index, axis).reshape(-1)
    upd = n.t(ins[2]).cast(x.dtype).reshape(-1)
    return x.reshape(-1).scatter(0, flat, upd, reduce).reshape(*x.shape)


@op("GatherND")
def _gather_nd(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, index = n.t(ins[0]), n.t(ins[1]).cast(dt.int64)
    b = n.attr("batch_dims", 0)
    k = index.shape[-1]
    if not isinstance(k, int):
        raise n.fail("GatherND needs a static last index dim")
    batch = x.shape[:b]
    inner = x.shape[b + k :]
    nb = prod(batch)
    xs = x.reshape(nb, prod(x.shape[b : b + k]), prod(inner) if inner else 1)
    idx = index.reshape(nb, -1, k)
    lin: Tensor | None = None
    stride: Dim = 1
    for j in reversed(range(k)):
        d = x.shape[b + j]
        c = idx[:, :, j]
        c = checked(n, Tensor.select(c < 0, c + d, c), d)
        lin = c * stride if lin is None else lin + c * stride
        stride = stride * d
    assert lin is not None
    m = idx.shape[1]
    base = Tensor.arange(nb, dt.int64).reshape(nb, 1) * xs.shape[1]
    rows = (lin + base).reshape(-1)
    out = xs.reshape(nb * xs.shape[1], xs.shape[2]).gather(0, rows)
    return (
        out.reshape(*batch, *index.shape[b:-1], *inner).reshape(*index.shape[:-1], *inner)
        if m is not None
        else out
    )


@op("ScatterND")
def _scatter_nd(n: NodeCtx, ins: list[Value | None]) -> Value:
    reduce = _reduction_of(n)
    x, index = n.t(ins[0]), n.t(ins[1]).cast(dt.int64)
    k = index.shape[-1]
    if not isinstance(k, int):
        raise n.fail("ScatterND needs a static last index dim")
    inner = x.shape[k:]
    rows = x.reshape(prod(x.shape[:k]), prod(inner) if inner else 1)
    idx = index.reshape(-1, k)
    lin: Tensor | None = None
    stride: Dim = 1
    for j in reversed(range(k)):
        c = idx[:, j]
        c = checked(n, Tensor.select(c < 0, c + x.shape[j], c), x.shape[j])
        lin = c * stride if lin is None else lin + c * stride
        stride = stride * x.shape[j]
    assert lin is not None
    upd = n.t(ins[2]).cast(x.dtype).reshape(lin.shape[0], rows.shape[1])
    return rows.scatter(0, lin, upd, reduce).reshape(*x.shape)


@op("CumSum")
def _cumsum(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axis = axis_of(int(n.const(ins[1], "axis").reshape(-1)[0]), x.ndim, n)
    return x.cumsum(axis, n.flag("exclusive", 0), n.flag("reverse", 0))


@op("OneHot")
def _one_hot(n: NodeCtx, ins: list[Value | None]) -> Value:
    index = n.t(ins[0])
    depth = int(n.const(ins[1], "depth").reshape(-1)[0])
    values = n.t(ins[2])
    axis = n.attr("axis", -1)
    out_rank = index.ndim + 1
    axis = axis % out_rank
    idx = index.cast(dt.int64)
    idx = Tensor.select(idx < 0, idx + depth, idx).unsqueeze(axis)
    rng = Tensor.arange(depth, dt.int64).reshape(*([1] * axis), depth, *([1] * (out_rank - axis - 1)))
    hit = idx == rng
    off, on = values[0], values[1]
    return Tensor.select(hit, on, off)


@op("ReverseSequence")
def _reverse_sequence(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    lens = n.t(ins[1]).cast(dt.int64)
    b_ax, t_ax = n.attr("batch_axis", 1), n.attr("time_axis", 0)
    T = x.shape[t_ax]
    B = x.shape[b_ax]
    t = Tensor.arange(T, dt.int64).reshape(T, 1)
    src = Tensor.select(t < lens.reshape(1, B), lens.reshape(1, B) - 1 - t, t)  # [T, B]
    if t_ax == 0:
        index = src.reshape(T, B, *([1] * (x.ndim - 2))).expand(*x.shape)
    else:
        index = src.permute(1, 0).reshape(B, T, *([1] * (x.ndim - 2))).expand(*x.shape)
    return _gather_elements(x, index, t_ax)


@op("CumProd")
def _cumprod(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axis = axis_of(int(n.const(ins[1], "axis").reshape(-1)[0]), x.ndim, n)
    d = x.shape[axis]
    if not isinstance(d, int):
        raise n.fail("CumProd needs a static axis length")
    exclusive, rev = n.flag("exclusive", 0), n.flag("reverse", 0)
    x = reverse_axis(x, axis) if rev else x
    parts: list[Tensor] = []
    acc: Tensor | None = None
    for i in range(d):
        col = x[(slice(None),) * axis + (slice(i, i + 1),)]
        if exclusive:
            parts.append(acc if acc is not None else Tensor.ones(col.shape, x.dtype))
        acc = col if acc is None else acc * col
        if not exclusive:
            parts.append(acc)
    out = Tensor.cat(parts, axis) if parts else x
    return reverse_axis(out, axis) if rev else out
