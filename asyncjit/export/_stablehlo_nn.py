"""StableHLO lowerings of the neural-network ops (``asyncjit.graph._nn``): convolutions, pools
and cumulative sums as windows, registered into the exporter's table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..dtypes import float16, float32, float64, int64
from ..graph import Node, reduce_identity
from ._types import element_type, tensor_type
from ._writer import (
    Lower,
    _arr,
    _convert,
    _name,
    _padding,
    _reduce_window,
    _region_op,
    _Same,
    _slice_axis,
    _static,
    _Writer,
)


def _pool_counts(n: Node, size: Sequence[int], pads: Sequence[tuple[int, int]]) -> np.ndarray:
    """How many taps of each window an average divides by, as asyncjit counts them: the input
    elements in it, or with ``count_include_pad`` the taps inside the padded input (the
    ceil-mode overhang never counts). A product over the spatial axes, known when exporting."""
    include = n.attrs["count_include_pad"]
    per_axis = []
    for ax, (length, (lo, hi)) in enumerate(zip(size, pads, strict=True)):
        k, s, d = (int(n.attrs[a][ax]) for a in ("kernel", "strides", "dilations"))
        first, stop = (0, length + lo + hi) if include else (lo, lo + length)
        taps = [[o * s + t * d for t in range(k)] for o in range(int(n.shape[2 + ax]))]
        per_axis.append(np.array([sum(first <= p < stop for p in win) for win in taps], np.float64))
    count = per_axis[0]
    for c in per_axis[1:]:
        count = np.multiply.outer(count, c)
    return np.asarray(count)


def _lower_pool(w: _Writer, n: Node) -> str:
    """Max and average pools as ``reduce_window``. Padding is the reduction's identity (never a
    max, nothing in a sum); ceil mode pads the far end up to the last window's end. Averages
    sum in float64 and divide by the counts asyncjit uses (a constant), as the op table does."""
    (x,) = n.inputs
    size = _static(list(x.shape[2:]), n)
    out = _static(list(n.shape), n)
    pads = [(lo, hi) for lo, hi in (_static(list(p), n) for p in n.attrs["pads"])]
    k, s, d = (list(n.attrs[a]) for a in ("kernel", "strides", "dilations"))
    over = [
        max(0, ss * (o - 1) + dd * (kk - 1) + 1 - (length + lo + hi))
        for ss, o, dd, kk, length, (lo, hi) in zip(s, out[2:], d, k, size, pads, strict=True)
    ]
    geo = {
        "strides": [1, 1, *s],
        "dilations": [1, 1, *d],
        "lo": [0, 0, *(lo for lo, _ in pads)],
        "hi": [0, 0, *(hi + e for (_, hi), e in zip(pads, over, strict=True))],
    }
    window = [1, 1, *k]
    if n.attrs["mode"] == "max":
        ident = float(reduce_identity("max", n.dtype))
        return _reduce_window(w, _name(w, x), n.dtype, (x.shape, out), "maximum", ident, window, **geo)
    xv = _convert(w, _name(w, x), x.shape, x.dtype, float64)
    total = _reduce_window(w, xv, float64, (x.shape, out), "add", 0.0, window, **geo)
    counts = np.maximum(_pool_counts(n, size, pads), 1.0)  # an empty window's sum is 0
    c_ty = tensor_type(counts.shape, float64, stablehlo=True)
    out_ty = tensor_type(out, float64, stablehlo=True)
    c = w.op(
        w.fresh(), "broadcast_in_dim", [w.constant(counts, c_ty)], [c_ty], out_ty,
        f"broadcast_dimensions = {_arr(range(2, len(out)))}",
    )  # fmt: skip
    avg = w.op(w.fresh(), "divide", [total, c], [out_ty, out_ty], out_ty)
    return _convert(w, avg, out, float64, n.dtype)


def _lower_cumsum(w: _Writer, n: Node) -> str:
    """Running sums as a ``reduce_window`` as long as the axis, padded before it (after it when
    reversed); exclusive sums pad one more and drop the element's own end. float16 sums in
    float32, as asyncjit does."""
    (x,) = n.inputs
    axis = int(n.attrs["axis"])
    shape = _static(list(x.shape), n)
    size = shape[axis]
    if size == 0:
        return _name(w, x)
    exclusive, reverse = bool(n.attrs.get("exclusive", False)), bool(n.attrs.get("reverse", False))
    acc = float32 if n.dtype == float16 else n.dtype
    pad = size if exclusive else size - 1
    window = [size if a == axis else 1 for a in range(n.ndim)]
    before = [pad if a == axis else 0 for a in range(n.ndim)]
    zero = [0] * n.ndim
    lo, hi = (zero, before) if reverse else (before, zero)
    out = [size + 1 if exclusive and a == axis else d for a, d in enumerate(shape)]
    xv = _convert(w, _name(w, x), shape, n.dtype, acc)
    sums = _reduce_window(w, xv, acc, (shape, out), "add", 0.0, window, lo=lo, hi=hi)
    if exclusive:  # the sum that includes the element itself is the one dropped
        sums, _ = _slice_axis(w, sums, out, acc, axis, int(reverse), size + int(reverse))
    return _convert(w, sums, shape, acc, n.dtype)


def _lower_conv(w: _Writer, n: Node) -> str:
    """N-d convolution (ONNX layout), groups and dilations; a bias is broadcast and added."""
    x, wt = n.inputs[0], n.inputs[1]
    r = n.ndim - 2
    sp = ", ".join(str(i) for i in range(r))
    pads = [(int(lo), int(hi)) for lo, hi in (_static(list(p), n) for p in n.attrs["pads"])]
    attrs = (
        f"dimension_numbers = #stablehlo.conv<[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]>, "
        f"window_strides = {_arr(n.attrs['strides'])}, padding = {_padding(pads)}, "
        f"lhs_dilation = {_arr([1] * r)}, rhs_dilation = {_arr(n.attrs['dilations'])}, "
        f"feature_group_count = {int(n.attrs['groups'])} : i64, batch_group_count = 1 : i64"
    )
    out = w.op(w.fresh(), "convolution", [_name(w, x), _name(w, wt)], [w.ty(x), w.ty(wt)], w.ty(n), attrs)
    if len(n.inputs) == 3:
        bias = n.inputs[2]
        b = w.op(
            w.fresh(),
            "broadcast_in_dim",
            [_name(w, bias)],
            [w.ty(bias)],
            w.ty(n),
            "broadcast_dimensions = array<i64: 1>",
        )
        out = w.op(w.fresh(), "add", [out, b], [w.ty(n), w.ty(n)], w.ty(n))
    return out


def _iota(w: _Writer, shape: Sequence[int], axis: int) -> str:
    """int64 positions along ``axis`` of a static ``shape``."""
    ty = tensor_type(shape, int64, stablehlo=True)
    return w.op(w.fresh(), "iota", [], [], ty, f"iota_dimension = {axis} : i64")


def _ranks_before(e: _Same, a: str, b: str, direction: str, nan_first: bool) -> tuple[str, str]:
    """``(before, same)`` for scalars ``a`` and ``b`` in asyncjit's ranking: ``a`` compares
    ``direction`` (``GT``/``LT``) to ``b``, or only ``a`` is NaN (``nan_first``: argmax,
    argmin and largest topk) or only ``b`` is (smallest topk); two NaNs tie."""
    before = e.cmp(direction, a, b)
    same = e.cmp("EQ", a, b)
    if e.dtype.is_float:
        a_nan, b_nan = e.cmp("NE", a, a), e.cmp("NE", b, b)
        one_nan = (
            e.logic("and", a_nan, e.cmp("EQ", b, b))
            if nan_first
            else e.logic("and", e.cmp("EQ", a, a), b_nan)
        )
        before = e.logic("or", before, one_nan)
        same = e.logic("or", same, e.logic("and", a_nan, b_nan))
    return before, same


def _lower_argext(w: _Writer, n: Node) -> str:
    """Index of the first (``last``: the last) extreme along the axis: a two-operand ``reduce``
    over (value, position) that keeps the more extreme pair (NaN first of all, as numpy's
    argmax/argmin) and on ties the lower (higher) position. That order is total, so the reduce
    may combine in any order; the initial pair loses to every element."""
    (x,) = n.inputs
    axis, op, last = int(n.attrs["axis"]), n.attrs["op"], bool(n.attrs.get("last", False))
    shape = _static(list(x.shape), n)
    kept = [d for a, d in enumerate(shape) if a != axis]
    et, it = f"tensor<{element_type(x.dtype)}>", "tensor<i64>"
    init_v = w.constant(np.array(reduce_identity(op, x.dtype), x.dtype.np), et)
    init_i = w.constant(np.array(-1 if last else np.iinfo(np.int64).max, np.int64), it)
    v, i = _Same(w, (), x.dtype), _Same(w, (), int64)

    def keep(args: list[str]) -> list[str]:
        a, ai, b, bi = args
        better, same = _ranks_before(v, a, b, "GT" if op == "max" else "LT", True)
        pick = v.logic("or", better, v.logic("and", same, i.cmp("GT" if last else "LT", ai, bi)))
        return [v.sel(pick, a, b), i.sel(pick, ai, bi)]

    out_v, out_i = (tensor_type(kept, t, stablehlo=True) for t in (x.dtype, int64))
    res = _region_op(
        w, "reduce",
        [(_name(w, x), w.ty(x)), (_iota(w, shape, axis), tensor_type(shape, int64, stablehlo=True)),
         (init_v, et), (init_i, it)],
        [out_v, out_i], ([et, it, et, it], keep, [et, it]), f"dimensions = {_arr([axis])}",
    )  # fmt: skip
    return w.op(w.fresh(), "reshape", [f"{res}#1"], [out_i], w.ty(n))


def _lower_topk(w: _Writer, n: Node) -> str:
    """Indices of the ``k`` best along the axis: ``sort`` of (value, position) in asyncjit's
    order (largest: descending with NaN first; smallest: ascending with NaN last; ties to the
    lower position, so the order is total), positions sliced to ``k``."""
    (x,) = n.inputs
    axis, k, largest = int(n.attrs["axis"]), int(n.attrs["k"]), bool(n.attrs.get("largest", True))
    shape = _static(list(x.shape), n)
    et, it = f"tensor<{element_type(x.dtype)}>", "tensor<i64>"
    v, i = _Same(w, (), x.dtype), _Same(w, (), int64)

    def before(args: list[str]) -> list[str]:
        a, b, ai, bi = args
        better, same = _ranks_before(v, a, b, "GT" if largest else "LT", largest)
        return [v.logic("or", better, v.logic("and", same, i.cmp("LT", ai, bi)))]

    idx_ty = tensor_type(shape, int64, stablehlo=True)
    res = _region_op(
        w, "sort", [(_name(w, x), w.ty(x)), (_iota(w, shape, axis), idx_ty)], [w.ty(x), idx_ty],
        ([et, et, it, it], before, ["tensor<i1>"]), f"dimension = {axis} : i64, is_stable = true",
    )  # fmt: skip
    return _slice_axis(w, f"{res}#1", shape, int64, axis, 0, k)[0]


NN_LOWERINGS: dict[str, Lower] = {
    "pool": _lower_pool,
    "cumsum": _lower_cumsum,
    "conv": _lower_conv,
    "argext": _lower_argext,
    "topk": _lower_topk,
}
