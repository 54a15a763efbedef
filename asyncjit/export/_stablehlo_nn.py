"""StableHLO lowerings of the neural-network and index ops, registered into the exporter's
table: convolutions; pools and cumulative sums as ``reduce_window``; argmax/argmin and topk as a
``reduce``/``sort`` over (value, position) in asyncjit's total order, so ties and NaNs land
where asyncjit puts them whatever order XLA combines in; take_along_axis as ``gather``; scatter
as ``scatter`` with a spare row that takes what asyncjit drops."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..dtypes import DType, bool_, float16, float32, float64, int64
from ..graph import Node, reduce_identity
from ..graph._nn import conv_layout
from ._types import element_type, tensor_type
from ._writer import (
    Lower,
    _arr,
    _broadcast_to,
    _convert,
    _index64,
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
    pads = [(lo, hi) for lo, hi in (_static(list(p), n) for p in n.attrs["pads"])]
    k, s, d = (list(n.attrs[a]) for a in ("kernel", "strides", "dilations"))
    over = [0] * len(k)
    if n.attrs["ceil_mode"] or n.attrs["mode"] == "avg":  # spatial sizes needed: static
        size, spatial = _static(list(x.shape[2:]), n), _static(list(n.shape[2:]), n)
        over = [
            max(0, ss * (o - 1) + dd * (kk - 1) + 1 - (length + lo + hi))
            for ss, o, dd, kk, length, (lo, hi) in zip(s, spatial, d, k, size, pads, strict=True)
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
        return _reduce_window(w, _name(w, x), n.dtype, (x.shape, n.shape), "maximum", ident, window, **geo)
    xv = _convert(w, _name(w, x), x.shape, x.dtype, float64)
    total = _reduce_window(w, xv, float64, (x.shape, n.shape), "add", 0.0, window, **geo)
    counts = np.maximum(_pool_counts(n, _static(list(x.shape[2:]), n), pads), 1.0)  # empty: sum 0
    c_ty = tensor_type(counts.shape, float64, stablehlo=True)
    out_ty = tensor_type(n.shape, float64, stablehlo=True)
    c = _broadcast_to(w, w.constant(counts, c_ty), c_ty, n.shape, float64, range(2, n.ndim), n.op)
    avg = w.op(w.fresh(), "divide", [total, c], [out_ty, out_ty], out_ty)
    return _convert(w, avg, n.shape, float64, n.dtype)


def _lower_cumsum(w: _Writer, n: Node) -> str:
    """Running sums as a ``reduce_window`` as long as the axis, padded before it (after it when
    reversed); exclusive sums pad one more and drop the element's own end. float16 sums in
    float32, as asyncjit does."""
    (x,) = n.inputs
    axis = int(n.attrs["axis"])
    exclusive, reverse = bool(n.attrs.get("exclusive", False)), bool(n.attrs.get("reverse", False))
    shape = _static(list(x.shape), n) if exclusive else list(x.shape)  # exclusive slices
    size = _static([shape[axis]], n)[0]
    if size == 0:
        return _name(w, x)
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
        sums, _ = _slice_axis(w, sums, _static(out, n), acc, axis, int(reverse), size + int(reverse))
    return _convert(w, sums, shape, acc, n.dtype)


def _lower_conv(w: _Writer, n: Node) -> str:
    """N-d convolution (ONNX layout, or channels-last operands as the layout pass gives them),
    groups and dilations; a bias is broadcast and added."""
    x, wt = n.inputs[0], n.inputs[1]
    r = n.ndim - 2
    sp = ", ".join(str(i) for i in range(r))
    last_in, last_out = conv_layout(n.attrs)
    lhs = f"[b, {sp}, f]" if last_in else f"[b, f, {sp}]"
    out_dims = f"[b, {sp}, f]" if last_out else f"[b, f, {sp}]"
    pads = [(int(lo), int(hi)) for lo, hi in (_static(list(p), n) for p in n.attrs["pads"])]
    attrs = (
        f"dimension_numbers = #stablehlo.conv<{lhs}x[o, i, {sp}]->{out_dims}>, "
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
            f"broadcast_dimensions = array<i64: {n.ndim - 1 if last_out else 1}>",
        )
        out = w.op(w.fresh(), "add", [out, b], [w.ty(n), w.ty(n)], w.ty(n))
    return out


def _const(w: _Writer, value: float, dtype: DType, shape: Sequence[int]) -> str:
    """``value`` as ``dtype`` at a static ``shape``."""
    st = f"tensor<{element_type(dtype)}>"
    return _broadcast_to(w, w.constant(np.array(value, dtype.np), st), st, shape, dtype, (), "const")


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


def _lower_take(w: _Writer, n: Node) -> str:
    """``x`` read at ``index`` along the axis and at each element's own position elsewhere: the
    index read as asyncjit reads it (``_index64``: uint64 by its bits) and clamped into the
    axis, iotas for the other axes, one full index vector per element for ``gather``."""
    x, idx = n.inputs
    axis = int(n.attrs["axis"])
    xs, ishape = _static(list(x.shape), n), _static(list(idx.shape), n)
    r = len(xs)
    st, i64 = "tensor<i64>", tensor_type(ishape, int64, stablehlo=True)
    lo, hi = (w.constant(np.array(v, np.int64), st) for v in (0, max(xs[axis] - 1, 0)))
    wide = _index64(w, _name(w, idx), ishape, idx.dtype)
    at = w.op(w.fresh(), "clamp", [lo, wide, hi], [st, i64, st], i64)
    col = [*ishape, 1]
    col_ty = tensor_type(col, int64, stablehlo=True)
    cols = [w.op(w.fresh(), "reshape", [at], [tensor_type(ishape, int64, stablehlo=True)], col_ty)]
    cols = [cols[0] if a == axis else _iota(w, col, a) for a in range(r)]
    full_ty = tensor_type([*ishape, r], int64, stablehlo=True)
    full = w.op(w.fresh(), "concatenate", cols, [col_ty] * r, full_ty, f"dimension = {r} : i64")
    every = ", ".join(map(str, range(r)))
    attrs = (
        f"dimension_numbers = #stablehlo.gather<offset_dims = [], collapsed_slice_dims = [{every}], "
        f"start_index_map = [{every}], index_vector_dim = {r}>, "
        f"slice_sizes = {_arr([1] * r)}, indices_are_sorted = false"
    )
    return w.op(w.fresh(), "gather", [_name(w, x), full], [w.ty(x), full_ty], w.ty(n), attrs)


_COMBINE = {"none": "", "add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


def _lower_scatter(w: _Writer, n: Node) -> str:
    """asyncjit's scatter: indices out of range (negative ones too) are dropped, and repeated
    ones apply in index order (a plain write: the last wins). ``x`` gets one spare row along
    the axis; dropped updates, and plain writes a later one overwrites, are sent there, and the
    row is sliced off after. So the cases StableHLO leaves to the implementation (an update
    out of bounds, the order of repeated indices with a non-commutative update) never arise.
    Reductions combine repeated indices in an order XLA picks: exact for ints, max and min;
    float sums and products may round differently from asyncjit's index order."""
    x, idx, src = n.inputs
    axis, how = int(n.attrs["axis"]), n.attrs.get("reduce", "none")
    xs = _static(list(x.shape), n)
    size, (m,) = xs[axis], _static(list(idx.shape), n)
    i = _Same(w, (m,), int64)
    at = _index64(w, _name(w, idx), (m,), idx.dtype)  # a huge uint64 one turns negative
    spare = _const(w, size, int64, (m,))
    at = i.sel(i.logic("and", i.cmp("GE", at, _const(w, 0, int64, (m,))), i.cmp("LT", at, spare)), at, spare)
    if how == "none" and m > 1:  # overwritten: a later update has the same index
        sq, sq_b = (tensor_type((m, m), t, stablehlo=True) for t in (int64, bool_))
        rows, cols = (
            w.op(w.fresh(), "broadcast_in_dim", [at], [i.t], sq, f"broadcast_dimensions = {_arr([d])}")
            for d in (0, 1)
        )
        later = _Same(w, (m, m), int64)
        dup = later.logic(
            "and", later.cmp("EQ", rows, cols), later.cmp("GT", _iota(w, (m, m), 1), _iota(w, (m, m), 0))
        )
        b = _Same(w, (), bool_)
        no = w.constant(np.array(False), "tensor<i1>")
        over = _region_op(
            w, "reduce", [(dup, sq_b), (no, "tensor<i1>")], [i.b],
            ([b.t, b.t], lambda a: [b.logic("or", *a)], [b.t]), "dimensions = array<i64: 1>",
        )  # fmt: skip
        at = i.sel(over, spare, at)
    grown = [size + 1 if a == axis else d for a, d in enumerate(xs)]
    et = f"tensor<{element_type(n.dtype)}>"
    zero = w.constant(np.zeros((), n.dtype.np), et)
    pads = (
        f"edge_padding_low = {_arr([0] * len(xs))}, "
        f"edge_padding_high = {_arr([int(a == axis) for a in range(len(xs))])}, "
        f"interior_padding = {_arr([0] * len(xs))}"
    )
    g_ty = tensor_type(grown, n.dtype, stablehlo=True)
    xg = w.op(w.fresh(), "pad", [_name(w, x), zero], [w.ty(x), et], g_ty, pads)
    at_ty = tensor_type((m, 1), int64, stablehlo=True)
    at_col = w.op(w.fresh(), "reshape", [at], [i.t], at_ty)
    window = ", ".join(str(a) for a in range(len(xs)) if a != axis)
    attrs = (
        f"scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [{window}], "
        f"inserted_window_dims = [{axis}], scatter_dims_to_operand_dims = [{axis}], "
        "index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false"
    )
    v = _Same(w, (), n.dtype)
    combine = _COMBINE[how]
    body = ([v.t, v.t], lambda a: [v.bin(combine, *a) if combine else a[1]], [v.t])
    res = _region_op(
        w, "scatter", [(xg, g_ty), (at_col, at_ty), (_name(w, src), w.ty(src))], [g_ty], body, attrs
    )
    return _slice_axis(w, res, grown, n.dtype, axis, 0, size)[0]


def _lower_nonzero(w: _Writer, n: Node) -> str:
    """The first ``size`` nonzero positions in row-major order, rows past the count ``fill``:
    each nonzero element's row is the count of nonzeros before it (an exclusive running sum);
    ``scatter`` writes its coordinates there, into a spare row once the rows are full or for a
    zero element, and the spare row is sliced off."""
    (x,) = n.inputs
    size, nd = _static(list(n.shape), n)
    xs = _static(list(x.shape), n) or [1]
    count = int(np.prod(xs))
    rows_ty = tensor_type((size + 1, nd), int64, stablehlo=True)
    rows = _const(w, n.attrs.get("fill", 0), int64, (size + 1, nd))
    if size == 0 or count == 0:
        return _slice_axis(w, rows, (size + 1, nd), int64, 0, 0, size)[0]
    flat_x = w.op(
        w.fresh(), "reshape", [_name(w, x)], [w.ty(x)], tensor_type((count,), x.dtype, stablehlo=True)
    )
    xe, i = _Same(w, (count,), x.dtype), _Same(w, (count,), int64)
    nonzero = xe.cmp("NE", flat_x, _const(w, 0, x.dtype, (count,)))
    ones = w.op(w.fresh(), "convert", [nonzero], [i.b], i.t)
    before = _reduce_window(w, ones, int64, ((count,), (count + 1,)), "add", 0.0, [count], lo=[count], hi=[0])
    before, _ = _slice_axis(w, before, (count + 1,), int64, 0, 0, count)
    spare = _const(w, size, int64, (count,))
    at = i.sel(i.logic("and", nonzero, i.cmp("LT", before, spare)), before, spare)
    flat = _iota(w, (count,), 0)
    col_ty = tensor_type((count, 1), int64, stablehlo=True)
    cols = []
    for axis in range(nd):
        stride = int(np.prod(xs[axis + 1 :]))
        coord = i.bin("divide", flat, _const(w, stride, int64, (count,)))
        coord = i.bin("remainder", coord, _const(w, xs[axis], int64, (count,)))
        cols.append(w.op(w.fresh(), "reshape", [coord], [i.t], col_ty))
    coords_ty = tensor_type((count, nd), int64, stablehlo=True)
    coords = w.op(w.fresh(), "concatenate", cols, [col_ty] * nd, coords_ty, "dimension = 1 : i64")
    at_col = w.op(w.fresh(), "reshape", [at], [i.t], col_ty)
    attrs = (
        "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], "
        "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
        "indices_are_sorted = false, unique_indices = false"
    )
    v = _Same(w, (), int64)
    res = _region_op(
        w, "scatter", [(rows, rows_ty), (at_col, col_ty), (coords, coords_ty)], [rows_ty],
        ([v.t, v.t], lambda a: [a[1]], [v.t]), attrs,
    )  # fmt: skip
    return _slice_axis(w, res, (size + 1, nd), int64, 0, 0, size)[0]


NN_LOWERINGS: dict[str, Lower] = {
    "pool": _lower_pool,
    "cumsum": _lower_cumsum,
    "conv": _lower_conv,
    "argext": _lower_argext,
    "topk": _lower_topk,
    "take_along_axis": _lower_take,
    "scatter": _lower_scatter,
    "nonzero": _lower_nonzero,
}
