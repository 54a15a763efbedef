"""Shape and data-movement ONNX ops, folded at load time when their inputs are known.

``Shape`` of a tensor with bounded dims gives a ``Sym`` (an int vector of symbolic dims);
``Gather``/``Concat``/``Slice``/``Unsqueeze``/... of known values are computed here with numpy on
object arrays, so the shape chains exported models are full of end as plain dims.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..symbolic import Dim, Expr, bounds, prod, smax, smin
from ..tensor import Tensor, broadcast_shapes
from ._registry import NodeCtx, checked, op
from ._values import Sym, Value, const_tensor, dims_array, make_int_array

__all__ = ["axis_of", "reverse_axis"]

INT64 = np.dtype(np.int64)


def axis_of(axis: int, ndim: int, n: NodeCtx) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise n.fail(f"axis {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)


def _known(v: Value | None) -> np.ndarray | None:
    """A load-time value as an object array (Sym) or its own array; None for tensors."""
    if isinstance(v, Sym):
        return v.values
    if isinstance(v, np.ndarray):
        return v
    return None


def _rewrap(arr: np.ndarray, like: Value) -> Value:
    arr = np.asarray(arr)
    if isinstance(like, Sym) or arr.dtype == object:
        return make_int_array(
            np.asarray(arr, dtype=object), like.dtype if isinstance(like, Sym | np.ndarray) else INT64
        )
    return arr


def _shape_of(v: Value) -> tuple[Dim, ...]:
    if isinstance(v, Tensor):
        return v.shape
    return tuple(v.shape)


@op("Shape")
def _shape(n: NodeCtx, ins: list[Value | None]) -> Value:
    shape = list(_shape_of(n.t(ins[0]) if ins[0] is None else ins[0]))
    rank = len(shape)
    start, end = n.attr("start", 0), n.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return make_int_array(dims_array(shape[start:end]), INT64)


@op("Size")
def _size(n: NodeCtx, ins: list[Value | None]) -> Value:
    assert ins[0] is not None
    return make_int_array(dims_array([prod(_shape_of(ins[0]))]).reshape(()), INT64)


@op("Constant")
def _constant(n: NodeCtx, ins: list[Value | None]) -> Value:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in n.attrs:
            v = n.attrs[key]
            if key.startswith("value_float"):
                return np.array(v, np.float32)
            if key.startswith("value_int"):
                return np.array(v, np.int64)
            return np.asarray(v)
    raise n.fail(f"Constant without a supported value attribute (has {sorted(n.attrs)})")


@op("ConstantOfShape")
def _constant_of_shape(n: NodeCtx, ins: list[Value | None]) -> Value:
    dims = n.ints(ins[0], "shape")
    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if all(isinstance(d, int) for d in dims) and prod(dims) <= 1 << 16:  # type: ignore[operator]
        return np.full(dims, fill[0], fill.dtype)
    return const_tensor(fill.reshape(())).expand(*dims)


def _axes_input(n: NodeCtx, ins: list[Value | None], since: int) -> list[int] | None:
    if n.opset >= since:
        if len(ins) > 1 and ins[1] is not None:
            return [int(a) for a in n.const(ins[1], "axes").reshape(-1)]
        return None
    axes = n.attr("axes")
    return None if axes is None else list(axes)


@op("Unsqueeze")
def _unsqueeze(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    axes = _axes_input(n, ins, 13) or []
    shape = list(_shape_of(x))
    rank = len(shape) + len(axes)
    for a in sorted(axis_of(a, rank, n) for a in axes):
        shape.insert(a, 1)
    return _reshape_value(n, x, shape)


@op("Squeeze")
def _squeeze(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    shape = list(_shape_of(x))
    axes = _axes_input(n, ins, 13)
    if not axes:  # absent or empty: every single dim (as ONNX Runtime and ONNX's reference read it)
        keep = [d for d in shape if d != 1]
    else:
        drop = {axis_of(a, len(shape), n) for a in axes}
        keep = [d for i, d in enumerate(shape) if i not in drop]
    return _reshape_value(n, x, keep)


def _reshape_value(n: NodeCtx, x: Value, shape: list[Dim]) -> Value:
    known = _known(x)
    if known is not None and all(isinstance(d, int) for d in shape):
        return _rewrap(known.reshape(shape), x)
    return n.t(x).reshape(*shape)


@op("Reshape")
def _reshape(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    in_shape = _shape_of(x)
    dims = n.ints(ins[1], "shape") if n.opset >= 5 else list(n.attr("shape"))
    allow_zero = n.attr("allowzero", 0)
    out: list[Dim] = []
    for i, d in enumerate(dims):
        if isinstance(d, int) and d == 0 and not allow_zero:
            out.append(in_shape[i])
        else:
            out.append(d)
    return _reshape_value(n, x, out)


@op("Flatten")
def _flatten(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    shape = _shape_of(x)
    axis = n.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    return _reshape_value(n, x, [prod(shape[:axis]), prod(shape[axis:])])


@op("Transpose")
def _transpose(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    rank = len(_shape_of(x))
    perm = n.attr("perm") or list(reversed(range(rank)))
    known = _known(x)
    if known is not None:
        return _rewrap(np.transpose(known, perm), x)
    return n.t(x).permute(*perm)


@op("Concat")
def _concat(n: NodeCtx, ins: list[Value | None]) -> Value:
    vals = [v for v in ins if v is not None]
    axis = n.attr("axis", 0)
    knowns = [_known(v) for v in vals]
    if all(k is not None for k in knowns):
        sym = any(isinstance(v, Sym) for v in vals)
        arrays = [np.asarray(k, dtype=object) if sym else k for k in knowns]
        out = np.concatenate(arrays, axis=axis)  # type: ignore[arg-type,var-annotated]
        return make_int_array(out, next(v.dtype for v in vals if isinstance(v, Sym))) if sym else out
    tensors = [n.t(v) for v in vals]
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    ax = axis_of(axis, tensors[0].ndim, n)
    target = tensors[0].dtype
    return Tensor.cat([t.cast(target) for t in tensors], ax)


@op("Gather")
def _gather(n: NodeCtx, ins: list[Value | None]) -> Value:
    data, idx = ins[0], ins[1]
    assert data is not None and idx is not None
    shape = _shape_of(data)
    axis = axis_of(n.attr("axis", 0), len(shape), n)
    known, kidx = _known(data), _known(idx)
    bad = False  # a constant index outside a static axis
    if isinstance(idx, np.ndarray) and isinstance(shape[axis], int):
        d = shape[axis]
        bad = bool(idx.size) and bool(idx.min() < -d or idx.max() >= d)
        if bad and n.tracer.guard is None:  # ONNX Runtime fails any run of it
            raise n.fail(f"a constant index is outside [-{d}, {d - 1}] (axis {axis} has size {d})")
    if known is not None and isinstance(idx, np.ndarray) and not bad:
        d = known.shape[axis]
        return _rewrap(np.take(known, np.where(idx < 0, idx + d, idx), axis=axis), data)
    x, ind = n.t(data), n.t(idx)
    if kidx is not None and isinstance(idx, np.ndarray) and isinstance(shape[axis], int) and not bad:
        ind = const_tensor(np.where(idx < 0, idx + shape[axis], idx).astype(np.int64))
    else:  # from data: a value outside the axis fails the run, as in ONNX Runtime
        ind = checked(n, Tensor.select(ind < 0, ind + shape[axis], ind), shape[axis])
    flat = ind.reshape(-1) if ind.ndim != 1 else ind
    out = x.gather(axis, flat)
    return out.reshape(*shape[:axis], *ind.shape, *shape[axis + 1 :])


def _slice_axis(d: Dim, start: Dim, end: Dim, step: int) -> tuple[Dim, Dim]:
    """ONNX/numpy slice normalisation for a positive step over a possibly symbolic dim."""

    def norm(v: Dim) -> Dim:
        if isinstance(v, int):
            if v < 0:
                v = d + v
            return smin(smax(v, 0), d)
        if bounds(v)[1] < 0:
            return smin(smax(d + v, 0), d)
        return smin(smax(v, 0), d)

    s = norm(start)
    e = norm(end)
    return s, s + smax(e - s, 0)


def reverse_axis(x: Tensor, axis: int) -> Tensor:
    """``x`` with ``axis`` reversed (a gather with descending indices)."""
    d = x.shape[axis]
    idx = Tensor.arange(d, dt.int32)
    return x.gather(axis, (idx * -1) + (d - 1) if isinstance(d, int) else Tensor.from_dim(d - 1) - idx)


@op("Slice")
def _slice(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = ins[0]
    assert x is not None
    shape = _shape_of(x)
    rank = len(shape)
    if n.opset < 10:
        starts, ends = list(n.attr("starts")), list(n.attr("ends"))
        axes = list(n.attr("axes", list(range(len(starts)))))
        steps: list[Any] = [1] * len(starts)
    else:
        starts, ends = n.ints(ins[1], "starts"), n.ints(ins[2], "ends")
        axes = (
            [int(a) for a in n.const(ins[3], "axes")]
            if len(ins) > 3 and ins[3] is not None
            else list(range(len(starts)))
        )
        steps = n.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    known = _known(x)
    if known is not None and all(isinstance(v, int) for v in (*starts, *ends, *steps)):
        index = [slice(None)] * rank
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            index[axis_of(a, rank, n)] = slice(s, e, st)
        return _rewrap(known[tuple(index)], x)
    t = n.t(x)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        ax = axis_of(int(a), rank, n)
        d = t.shape[ax]
        if not isinstance(st, int) or st == 0:
            raise n.fail(f"slice step {st} must be a nonzero constant")
        if st < 0:
            if not (isinstance(d, int) and isinstance(s, int) and isinstance(e, int)):
                raise n.fail("a negative slice step needs a static dim and static bounds")
            lo, hi, step = slice(s, e, st).indices(d)
            count = len(range(lo, hi, step))
            t = reverse_axis(t, ax)
            begin = d - 1 - lo
            sl: list[tuple[Dim, Dim] | None] = [None] * t.ndim
            index = [slice(None)] * t.ndim
            index[ax] = slice(begin, begin + (count - 1) * (-step) + 1 if count else begin, -step)
            t = t[tuple(index)]
            del sl
            continue
        lo_d, hi_d = _slice_axis(d, s, e, st)
        index = [slice(None)] * t.ndim
        index[ax] = slice(lo_d, hi_d, st) if st != 1 else slice(lo_d, hi_d)
        t = (
            t.shrink([None if i != ax else (lo_d, hi_d) for i in range(t.ndim)])
            if st == 1
            else t[tuple(index)]
        )
    return t


@op("Expand")
def _expand(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    dims = n.ints(ins[1], "shape")
    out = broadcast_shapes(x.shape, dims)
    return x.expand(*out)


@op("Tile")
def _tile(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    reps = n.ints(ins[1], "repeats")
    inter: list[Dim] = []
    big: list[Dim] = []
    final: list[Dim] = []
    for d, r in zip(x.shape, reps, strict=True):
        inter += [1, d]
        big += [r, d]
        final.append(r * d)
    return x.reshape(*inter).expand(*big).reshape(*final)


@op("Range")
def _range(n: NodeCtx, ins: list[Value | None]) -> Value:
    start, limit, delta = ins[0], ins[1], ins[2]
    if all(isinstance(v, np.ndarray) for v in (start, limit, delta)):
        s, lim, dl = (np.asarray(v).reshape(()) for v in (start, limit, delta))
        return np.arange(s, lim, dl, dtype=s.dtype)  # type: ignore[call-overload,no-any-return]
    (s0,), (l0,), (d0,) = n.ints(start, "start"), n.ints(limit, "limit"), n.ints(delta, "delta")
    if not isinstance(d0, int) or d0 == 0:
        raise n.fail("Range needs a constant nonzero delta")
    count = smax((l0 - s0 + d0 - 1) // d0, 0) if d0 > 0 else smax((s0 - l0 - d0 - 1) // (-d0), 0)
    dtype = dt.from_numpy(start.dtype)  # type: ignore[union-attr]
    return Tensor.arange(count, dtype) * d0 + s0  # type: ignore[no-any-return]


@op("Split")
def _split(n: NodeCtx, ins: list[Value | None]) -> list[Value]:
    x = n.t(ins[0])
    axis = axis_of(n.attr("axis", 0), x.ndim, n)
    outs = len(n.proto.output)
    if n.opset >= 13 and len(ins) > 1 and ins[1] is not None:
        sizes = n.ints(ins[1], "split")
    elif n.opset < 13 and n.attr("split") is not None:
        sizes = list(n.attr("split"))
    else:
        d = x.shape[axis]
        count = n.attr("num_outputs", outs)
        if count != outs:  # 2^31 would build as many tensors before anything checked it
            raise n.fail(f"num_outputs must equal the node's {outs} outputs, got {count!r}")
        if isinstance(d, Expr):
            if count == 1:
                return [x]
            raise n.fail(f"cannot split symbolic dim {d} evenly")
        chunk = -(-d // count)
        sizes = [min(chunk, d - i * chunk) for i in range(count)]
    return x.split(sizes, axis)  # type: ignore[return-value]


@op("Pad")
def _pad(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    mode = n.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    run_time_value: Tensor | None = None
    if n.opset < 11:
        pads: list[Dim] = list(n.attr("pads", n.attr("paddings")))
        value: Any = n.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = n.ints(ins[1], "pads")
        value = 0
        cv_in = ins[2] if len(ins) > 2 else None
        if isinstance(cv_in, Tensor):
            run_time_value = cv_in  # computed in the graph (an expanded function's Where, say)
        elif cv_in is not None:
            cv = n.const(cv_in, "constant_value")
            value = cv.reshape(-1)[0].item() if cv.size else 0
        axes = list(range(x.ndim))
        if len(ins) > 3 and ins[3] is not None:
            axes = [axis_of(int(a), x.ndim, n) for a in n.const(ins[3], "axes")]
    k = len(axes)
    full: list[tuple[Dim, Dim] | None] = [None] * x.ndim
    crops: list[tuple[Dim, Dim] | None] = [None] * x.ndim
    for i, a in enumerate(axes):
        lo, hi = pads[i], pads[i + k]
        if (isinstance(lo, int) and lo < 0) or (isinstance(hi, int) and hi < 0):
            d = x.shape[a]
            crops[a] = (
                max(-lo, 0) if isinstance(lo, int) else 0,
                d - (max(-hi, 0) if isinstance(hi, int) else 0),
            )
            lo = max(lo, 0) if isinstance(lo, int) else lo
            hi = max(hi, 0) if isinstance(hi, int) else hi
        full[a] = (lo, hi)
    if any(c is not None for c in crops):
        x = x.shrink(crops)
    if mode == "wrap":
        for a, p in enumerate(full):
            if p is None:
                continue
            lo, hi = p
            d = x.shape[a]
            parts = []
            if lo:
                parts.append(x.shrink([None if i != a else (d - lo, d) for i in range(x.ndim)]))
            parts.append(x)
            if hi:
                parts.append(x.shrink([None if i != a else (0, hi) for i in range(x.ndim)]))
            x = Tensor.cat(parts, a)
        return x
    if mode not in ("constant", "reflect", "edge"):
        raise n.fail(f"pad mode {mode!r} is not supported")
    if run_time_value is not None and mode == "constant":
        # pad with zeros, then put the run-time value wherever a pad marker says so
        inside = Tensor.ones(list(x.shape), dt.bool_).cast(dt.int32).pad(full, mode, 0).cast(dt.bool_)
        fill = run_time_value.reshape(-1)[0] if run_time_value.ndim else run_time_value
        padded = (
            x.cast(dt.int32).pad(full, mode, 0).cast(dt.bool_) if x.dtype.is_bool else x.pad(full, mode, 0)
        )
        return Tensor.select(inside, padded, fill.cast(x.dtype))
    if x.dtype.is_bool and mode == "constant":
        return x.cast(dt.int32).pad(full, mode, int(value)).cast(dt.bool_)
    return x.pad(full, mode, value)


@op("EyeLike")
def _eye_like(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    rows, cols = x.shape
    if not isinstance(rows, int) or not isinstance(cols, int):
        raise n.fail("EyeLike needs a static shape")
    to = n.attr("dtype")
    from ._values import np_dtype

    dtype = np_dtype(to) if to is not None else x.dtype.np
    return np.eye(rows, cols, n.attr("k", 0), dtype=dtype)


@op("Trilu")
def _trilu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    k: Dim = 0
    if len(ins) > 1 and ins[1] is not None:
        k = n.ints(ins[1], "k")[0]
    rows, cols = x.shape[-2], x.shape[-1]
    r = Tensor.arange(rows, dt.int64).reshape(rows, 1)
    c = Tensor.arange(cols, dt.int64).reshape(1, cols)
    keep = (c - r >= k) if n.attr("upper", 1) else (c - r <= k)
    return Tensor.select(keep, x, Tensor.zeros(x.shape, x.dtype))


def _blocksize(n: NodeCtx, x: Tensor, what: str, dims: tuple[Dim, ...], per: int) -> int:
    """The ``blocksize`` of a DepthToSpace/SpaceToDepth node on a 4-D ``x``: an int >= 1 whose
    ``per``-th power divides each static dim of ``dims`` (ONNX requires it; unchecked, a block
    larger than the tensor made dims of 2^80 for an empty one)."""
    b = n.attr("blocksize")
    if x.ndim != 4:
        raise n.fail(f"needs a 4-D input [N, C, H, W], got rank {x.ndim}")
    if not isinstance(b, int) or isinstance(b, bool) or b < 1:
        raise n.fail(f"blocksize must be an int >= 1, got {b!r}")
    for d in dims:
        if isinstance(d, int) and d % b**per:
            raise n.fail(f"blocksize {b} does not divide the {what} of input {list(x.shape)}")
    return b


@op("DepthToSpace")
def _depth_to_space(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    b = _blocksize(n, x, "channels (squared)", x.shape[1:2], 2)
    N, C, H, W = x.shape
    if n.attr("mode", "DCR") in ("CRD", b"CRD"):
        y = x.reshape(N, C // (b * b), b, b, H, W).permute(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(N, b, b, C // (b * b), H, W).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(N, C // (b * b), H * b, W * b)


@op("SpaceToDepth")
def _space_to_depth(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    b = _blocksize(n, x, "height and width", tuple(x.shape[2:]), 1)
    N, C, H, W = x.shape
    if n.attr("mode", "DCR") == "CRD":
        y = x.reshape(N, C, H // b, b, W // b, b).permute(0, 1, 3, 5, 2, 4)
    else:
        y = x.reshape(N, C, H // b, b, W // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(N, C * b * b, H // b, W // b)


@op("CenterCropPad")
def _center_crop_pad(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    target = [int(v) for v in n.const(ins[1], "shape")]
    axes = [axis_of(a, x.ndim, n) for a in n.attr("axes", list(range(x.ndim)))]
    for a, want in zip(axes, target, strict=True):
        d = x.shape[a]
        if not isinstance(d, int):
            raise n.fail("CenterCropPad needs static dims on the cropped axes")
        if d > want:
            start = (d - want) // 2
            x = x.shrink([None if i != a else (start, start + want) for i in range(x.ndim)])
        elif d < want:
            before = (want - d) // 2
            x = x.pad([None if i != a else (before, want - d - before) for i in range(x.ndim)])
    return x
