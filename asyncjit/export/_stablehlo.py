"""``stablehlo(graph)``: the graph as StableHLO MLIR text, one small function per op.

``erf`` (and exact ``gelu``) use CHLO's ``chlo.erf``, which XLA lowers. Ops are written in
MLIR's generic form (``"stablehlo.add"(%a, %b) : (...) -> ...``), which every
StableHLO version parses. Bounded dims are ``?`` with ``#stablehlo.bounds``, unbounded ones plain
``?``; ops that build a shape (broadcasts of constants, reshapes, iotas) over a var take it with
``get_dimension_size`` from the argument that carries it (``dynamic_broadcast_in_dim``, as JAX
exports shape-polymorphic code), and sizes that are expressions over vars compute them with
integer ops. Refine a graph (``refine_arguments`` + ``refine_shapes``) to
get static shapes that any XLA compiles.

Semantics follow asyncjit's op table. Where StableHLO's differ or are undefined, a lowering
composes asyncjit's from defined pieces: integer ``//`` and ``%`` floor like Python and give 0
by zero (StableHLO's undefined divisions never run), float ones follow numpy's ``divmod`` step
by step (signed zeros, snapped quotients), float-to-int casts saturate (NaN and out-of-range
values are selected, never converted); argmax/argmin, topk, scatter and ``nonzero(size=)`` fix
their tie and repeat order themselves; take_along_axis clamps indices and scatter drops
out-of-range ones (``_stablehlo_nn`` holds those, pools and cumsums). Only scatter's float
``add``/``mul`` may round repeated indices in another order than asyncjit's. Static shapes are
needed by reflect/edge pads, the select and index ops and exclusive cumsums; average and
ceil-mode pools need static spatial axes, inclusive cumsums a static summed axis (refine first).

Not exported (an ``ExportError`` names it and says why): ``prefix``, the data-dependent dim of
``x[:count]``, ``nonzero()`` without a size, boolean masks and ``unique``: the exporter reads
every dynamic dim from an argument, and a size the graph computes has no such source (its
padded form, ``nonzero(size=)`` and a count, exports).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import float16, float32, float64, int32, int64
from ..graph import Node, reduce_identity
from ._stablehlo_nn import NN_LOWERINGS
from ._types import element_type, tensor_type
from ._writer import (
    ExportError,
    Lower,
    _arr,
    _broadcast_scalar,
    _compare_attrs,
    _convert,
    _fill,
    _name,
    _reshape_to,
    _Same,
    _scalar,
    _slice_axis,
    _static,
    _Writer,
)

__all__ = ["ExportError", "stablehlo"]


_UNARY = {
    "exp": "exponential",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "tanh": "tanh",
    "sigmoid": "logistic",
    "sin": "sine",
    "cos": "cosine",
    "floor": "floor",
    "ceil": "ceil",
    "neg": "negate",
    "abs": "abs",
    "not": "not",
}
_BINARY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "pow": "power",
    "maximum": "maximum",
    "minimum": "minimum",
    "and": "and",
    "or": "or",
    "xor": "xor",
}
_COMPARE = {"lt": "LT", "le": "LE", "gt": "GT", "ge": "GE", "eq": "EQ", "ne": "NE"}
_REDUCER = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


def _lower_const(w: _Writer, n: Node) -> str:
    return w.constant(np.asarray(n.attrs["value"]), w.ty(n))


def _lower_unary(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    if n.op == "relu":
        zero = w.constant(np.zeros((), n.dtype.np), f"tensor<{element_type(n.dtype)}>")
        z = _broadcast_scalar(w, zero, n)
        return w.op(w.fresh(), "maximum", [_name(w, x), z], [w.ty(x), w.ty(n)], w.ty(n))
    if n.op == "recip":
        one = w.constant(np.ones((), n.dtype.np), f"tensor<{element_type(n.dtype)}>")
        o = _broadcast_scalar(w, one, n)
        return w.op(w.fresh(), "divide", [o, _name(w, x)], [w.ty(n), w.ty(x)], w.ty(n))
    if n.op == "abs" and n.dtype.is_unsigned:
        return _name(w, x)
    return w.op(w.fresh(), _UNARY[n.op], [_name(w, x)], [w.ty(x)], w.ty(n))


def _lower_erf(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    t = w.ty(n)
    w.lines.append(f'    {(r := w.fresh())} = "chlo.erf"({_name(w, x)}) : ({w.ty(x)}) -> {t}')
    return r


def _lower_gelu(w: _Writer, n: Node) -> str:
    """``x * sigmoid(2u)`` (tanh form) or ``0.5 x (1 + erf(x / sqrt 2))``, as the op table."""
    (x,) = n.inputs
    t, xv = w.ty(n), _name(w, x)

    def bin(op: str, a: str, b: str) -> str:
        return w.op(w.fresh(), op, [a, b], [t, t], t)

    if n.attrs.get("approximate", "none") == "tanh":
        cube = bin("multiply", bin("multiply", xv, xv), xv)
        inner = bin("add", xv, bin("multiply", _scalar(w, 0.044715, n), cube))
        u2 = bin("multiply", _scalar(w, 2.0 * float(np.sqrt(2.0 / np.pi)), n), inner)
        return bin("multiply", xv, w.op(w.fresh(), "logistic", [u2], [t], t))
    z = bin("multiply", xv, _scalar(w, float(1.0 / np.sqrt(2.0)), n))
    e = w.fresh()
    w.lines.append(f'    {e} = "chlo.erf"({z}) : ({t}) -> {t}')
    half_x = bin("multiply", _scalar(w, 0.5, n), xv)
    return bin("multiply", half_x, bin("add", _scalar(w, 1.0, n), e))


def _lower_binary(w: _Writer, n: Node) -> str:
    a, b = n.inputs
    if n.op in _COMPARE:
        kind = (
            "FLOAT"
            if a.dtype.is_float
            else "UNSIGNED"
            if (a.dtype.is_unsigned or a.dtype.is_bool)
            else "SIGNED"
        )
        attrs = _compare_attrs(_COMPARE[n.op], kind)
        return w.op(w.fresh(), "compare", [_name(w, a), _name(w, b)], [w.ty(a), w.ty(b)], w.ty(n), attrs)
    if n.op in ("idiv", "mod"):
        return _lower_int_divmod(w, n) if n.dtype.is_int else _lower_float_divmod(w, n)
    if n.op == "div" and n.dtype.is_float:
        name = "divide"
    elif n.op in _BINARY and not (n.op == "pow" and not n.dtype.is_float):
        name = _BINARY[n.op]
    else:
        raise ExportError(f"op {n.op!r} on {n.dtype.name} has no StableHLO form with asyncjit's semantics")
    return w.op(w.fresh(), name, [_name(w, a), _name(w, b)], [w.ty(a), w.ty(b)], w.ty(n))


def _lower_int_divmod(w: _Writer, n: Node) -> str:
    """Python's floor ``//`` and ``%`` on ints, as asyncjit defines them where StableHLO does not:
    by zero both give 0, ``INT_MIN // -1`` wraps to ``INT_MIN`` and ``INT_MIN % -1`` is 0. The
    divisor is 1 there (``-x`` is selected for ``// -1``), so ``divide``/``remainder`` never see
    an undefined case; then a remainder whose sign differs from the divisor's moves the
    truncated quotient down by one and the remainder by the divisor."""
    a, b = n.inputs
    e = _Same(w, n.shape, n.dtype)
    x, y = _name(w, a), _name(w, b)
    zero, one = _scalar(w, 0, n), _scalar(w, 1, n)
    by_zero = e.cmp("EQ", y, zero)
    special, by_m1 = by_zero, ""
    if not n.dtype.is_unsigned:
        by_m1 = e.cmp("EQ", y, _scalar(w, -1, n))
        special = e.logic("or", by_zero, by_m1)
    d = e.sel(special, one, y)
    q = e.bin("divide", x, d) if n.op == "idiv" else ""
    r = e.bin("remainder", x, d)  # 0 where the divisor was made 1
    if not n.dtype.is_unsigned:
        signs = w.op(
            w.fresh(), "compare", [e.cmp("LT", r, zero), e.cmp("LT", d, zero)], [e.b, e.b], e.b,
            _compare_attrs("NE", "UNSIGNED"),
        )  # fmt: skip
        fix = e.logic("and", e.cmp("NE", r, zero), signs)
        if n.op == "mod":
            return e.sel(fix, e.bin("add", r, d), r)
        q = e.sel(by_m1, e.un("negate", x), e.sel(fix, e.bin("subtract", q, one), q))
    return e.sel(by_zero, zero, q) if n.op == "idiv" else r


def _lower_float_divmod(w: _Writer, n: Node) -> str:
    """Python's (numpy's) float ``//`` and ``%``, step by step as numpy's ``divmod``: the exact
    ``fmod`` moved by the divisor when the signs differ, the quotient ``(x - mod) / y`` snapped
    to an integer, zeros signed like Python's; by zero ``x / 0`` and NaN. float16 computes in
    float32, as asyncjit does."""
    a, b = n.inputs
    acc = float32 if n.dtype == float16 else n.dtype
    e = _Same(w, n.shape, acc)
    x, y = (_convert(w, _name(w, v), n.shape, n.dtype, acc) for v in (a, b))
    zero = _fill(w, 0, acc, n)
    bits = int32 if acc == float32 else int64
    mask = _fill(w, -(2 ** (8 * bits.np.itemsize - 1)), bits, n)
    i = _Same(w, n.shape, bits)

    def signed_zero(v: str) -> str:  # copysign(0, v)
        sign = i.bin("and", w.op(w.fresh(), "bitcast_convert", [v], [e.t], i.t), mask)
        return w.op(w.fresh(), "bitcast_convert", [sign], [i.t], e.t)

    mod = e.bin("remainder", x, y)
    by_zero, has_mod = e.cmp("EQ", y, zero), e.cmp("NE", mod, zero)  # NaN has a mod
    signs = w.op(
        w.fresh(), "compare", [e.cmp("LT", y, zero), e.cmp("LT", mod, zero)], [e.b, e.b], e.b,
        _compare_attrs("NE", "UNSIGNED"),
    )  # fmt: skip
    move = e.logic("and", has_mod, signs)
    if n.op == "mod":
        out = e.sel(has_mod, e.sel(move, e.bin("add", mod, y), mod), signed_zero(y))
        out = e.sel(by_zero, mod, out)
    else:
        one = _fill(w, 1, acc, n)
        div = e.bin("divide", e.bin("subtract", x, mod), y)
        div = e.sel(move, e.bin("subtract", div, one), div)
        floor = e.un("floor", div)
        up = e.cmp("GT", e.bin("subtract", div, floor), _fill(w, 0.5, acc, n))
        snapped = e.sel(up, e.bin("add", floor, one), floor)
        quotient = e.bin("divide", x, y)
        out = e.sel(by_zero, quotient, e.sel(e.cmp("NE", div, zero), snapped, signed_zero(quotient)))
    return _convert(w, out, n.shape, acc, n.dtype)


def _lower_where(w: _Writer, n: Node) -> str:
    c, a, b = n.inputs
    return w.op(w.fresh(), "select", [_name(w, i) for i in (c, a, b)], [w.ty(i) for i in (c, a, b)], w.ty(n))


def _lower_cast(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    if n.dtype.is_bool and not x.dtype.is_bool:  # != 0, as asyncjit's cast to bool
        zero = _broadcast_scalar(
            w, w.constant(np.zeros((), x.dtype.np), f"tensor<{element_type(x.dtype)}>"), x
        )
        kind = "FLOAT" if x.dtype.is_float else "UNSIGNED" if x.dtype.is_unsigned else "SIGNED"
        attrs = _compare_attrs("NE", kind)
        return w.op(w.fresh(), "compare", [_name(w, x), zero], [w.ty(x), w.ty(x)], w.ty(n), attrs)
    if x.dtype.is_float and n.dtype.is_int:
        return _lower_float_to_int(w, n)
    return w.op(w.fresh(), "convert", [_name(w, x)], [w.ty(x)], w.ty(n))


def _lower_float_to_int(w: _Writer, n: Node) -> str:
    """asyncjit's saturating float-to-int cast (NaN to 0, out of range to the int's min or max,
    as LLVM's ``fptosi.sat``), where StableHLO's ``convert`` is undefined: compared in float64,
    which holds every bound exactly, only in-range values reach ``convert``."""
    (x,) = n.inputs
    bits, signed = 8 * n.dtype.np.itemsize, n.dtype.is_signed
    lo, top = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else (0, 2**bits)
    f = _Same(w, x.shape, float64)
    xv = _convert(w, _name(w, x), x.shape, x.dtype, float64)
    low, high = f.cmp("LT", xv, _fill(w, lo, float64, x)), f.cmp("GE", xv, _fill(w, top, float64, x))
    out = f.logic("or", f.logic("or", low, high), f.cmp("NE", xv, xv))
    safe = f.sel(out, _fill(w, 0, float64, x), xv)
    i = _Same(w, n.shape, n.dtype)
    c = w.op(w.fresh(), "convert", [safe], [f.t], i.t)
    return i.sel(high, _fill(w, top - 1, n.dtype, n), i.sel(low, _fill(w, lo, n.dtype, n), c))


def _lower_bitcast(w: _Writer, n: Node) -> str:
    """The same bits read as another dtype of one size (NaN payloads kept)."""
    (x,) = n.inputs
    return w.op(w.fresh(), "bitcast_convert", [_name(w, x)], [w.ty(x)], w.ty(n))


def _lower_reduce(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    op, axes = n.attrs["op"], tuple(n.attrs["axes"])
    src, src_node_ty, acc = _name(w, x), w.ty(x), x.dtype
    if x.dtype.is_float and op in ("sum", "prod"):  # asyncjit accumulates in float64
        from ..dtypes import float64

        acc = float64
        src_node_ty = tensor_type(x.shape, float64, stablehlo=True)
        src = w.op(w.fresh(), "convert", [src], [w.ty(x)], src_node_ty)
    et = f"tensor<{element_type(acc)}>"
    ident = np.array(reduce_identity(op, x.dtype), dtype=acc.np)
    init = w.constant(ident, et)
    kept = [d for a, d in enumerate(x.shape) if a not in axes]
    reduced_ty = tensor_type(kept, acc, stablehlo=True)
    body = w.fresh()
    res = w.fresh()
    w.lines.append(f'    {res} = "stablehlo.reduce"({src}, {init}) ({{')
    w.lines.append(f"      ^bb0(%lhs: {et}, %rhs: {et}):")
    w.lines.append(f'        {body} = "stablehlo.{_REDUCER[op]}"(%lhs, %rhs) : ({et}, {et}) -> {et}')
    w.lines.append(f'        "stablehlo.return"({body}) : ({et}) -> ()')
    w.lines.append(f"    }}) {{dimensions = {_arr(axes)}}} : ({src_node_ty}, {et}) -> {reduced_ty}")
    out = res
    if acc != x.dtype:
        out = w.op(w.fresh(), "convert", [out], [reduced_ty], tensor_type(kept, n.dtype, stablehlo=True))
    return _reshape_to(w, out, tensor_type(kept, n.dtype, stablehlo=True), n)


def _lower_matmul(w: _Writer, n: Node) -> str:
    a, b = n.inputs
    r = n.ndim
    batch = ", ".join(map(str, range(r - 2)))
    attrs = (
        f"dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{batch}], "
        f"rhs_batching_dimensions = [{batch}], lhs_contracting_dimensions = [{r - 1}], "
        f"rhs_contracting_dimensions = [{r - 2}]>"
    )
    return w.op(w.fresh(), "dot_general", [_name(w, a), _name(w, b)], [w.ty(a), w.ty(b)], w.ty(n), attrs)


def _lower_reshape(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    return _reshape_to(w, _name(w, x), w.ty(x), n)


def _lower_permute(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    return w.op(
        w.fresh(), "transpose", [_name(w, x)], [w.ty(x)], w.ty(n), f"permutation = {_arr(n.attrs['order'])}"
    )


def _lower_expand(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    dims = f"broadcast_dimensions = {_arr(range(x.ndim))}"
    if all(isinstance(d, int) for d in n.shape):
        return w.op(w.fresh(), "broadcast_in_dim", [_name(w, x)], [w.ty(x)], w.ty(n), dims)
    shape = w.shape_of(n.shape, n.op)
    return w.op(
        w.fresh(),
        "dynamic_broadcast_in_dim",
        [_name(w, x), shape],
        [w.ty(x), f"tensor<{n.ndim}xi32>"],
        w.ty(n),
        dims,
    )


def _lower_shrink(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    sl = n.attrs["slices"]
    start = _static([s[0] for s in sl], n)
    stop = _static([s[1] for s in sl], n)
    step = [int(s[2]) for s in sl]
    attrs = f"start_indices = {_arr(start)}, limit_indices = {_arr(stop)}, strides = {_arr(step)}"
    return w.op(w.fresh(), "slice", [_name(w, x)], [w.ty(x)], w.ty(n), attrs)


def _lower_pad(w: _Writer, n: Node) -> str:
    (x,) = n.inputs
    if n.attrs.get("mode", "constant") != "constant":
        return _lower_border_pad(w, n)
    from ..graph import cast_scalar

    value = np.array(cast_scalar(n.attrs.get("value", 0), n.dtype), dtype=n.dtype.np)
    pv = w.constant(value, f"tensor<{element_type(n.dtype)}>")
    lo = _static([p[0] for p in n.attrs["pads"]], n)
    hi = _static([p[1] for p in n.attrs["pads"]], n)
    attrs = (
        f"edge_padding_low = {_arr(lo)}, edge_padding_high = {_arr(hi)}, "
        f"interior_padding = {_arr([0] * n.ndim)}"
    )
    return w.op(
        w.fresh(), "pad", [_name(w, x), pv], [w.ty(x), f"tensor<{element_type(n.dtype)}>"], w.ty(n), attrs
    )


def _lower_border_pad(w: _Writer, n: Node) -> str:
    """Reflect and edge pads, one axis after another as numpy pads them (an axis's border rows
    include the earlier axes' padding): the border rows reversed (reflect: the edge row itself
    left out) or the edge row broadcast (edge), concatenated on either side."""
    (x,) = n.inputs
    reflect = n.attrs["mode"] == "reflect"
    shape = _static(list(x.shape), n)
    cur = _name(w, x)
    for axis, (lo, hi) in enumerate(n.attrs["pads"]):
        lo, hi = _static([lo, hi], n)
        if not (lo or hi):
            continue
        size, cur_ty = shape[axis], tensor_type(shape, n.dtype, stablehlo=True)
        pieces, types = [cur], [cur_ty]
        for width, at_end in ((lo, False), (hi, True)):
            if not width:
                continue
            if reflect:
                start = size - 1 - width if at_end else 1
                part, part_shape = _slice_axis(w, cur, shape, n.dtype, axis, start, start + width)
                part_ty = tensor_type(part_shape, n.dtype, stablehlo=True)
                part = w.op(w.fresh(), "reverse", [part], [part_ty], part_ty, f"dimensions = {_arr([axis])}")
            else:
                start = size - 1 if at_end else 0
                edge, edge_shape = _slice_axis(w, cur, shape, n.dtype, axis, start, start + 1)
                part_shape = [width if a == axis else d for a, d in enumerate(shape)]
                part_ty = tensor_type(part_shape, n.dtype, stablehlo=True)
                part = w.op(
                    w.fresh(), "broadcast_in_dim", [edge], [tensor_type(edge_shape, n.dtype, stablehlo=True)],
                    part_ty, f"broadcast_dimensions = {_arr(range(len(shape)))}",
                )  # fmt: skip
            pieces.insert(len(pieces) if at_end else 0, part)
            types.insert(len(types) if at_end else 0, part_ty)
        shape = [size + lo + hi if a == axis else d for a, d in enumerate(shape)]
        cur = w.op(
            w.fresh(), "concatenate", pieces, types, tensor_type(shape, n.dtype, stablehlo=True),
            f"dimension = {axis} : i64",
        )  # fmt: skip
    return cur


def _lower_cat(w: _Writer, n: Node) -> str:
    return w.op(
        w.fresh(),
        "concatenate",
        [_name(w, i) for i in n.inputs],
        [w.ty(i) for i in n.inputs],
        w.ty(n),
        f"dimension = {int(n.attrs['axis'])} : i64",
    )


def _lower_gather(w: _Writer, n: Node) -> str:
    x, idx = n.inputs
    axis = int(n.attrs["axis"])
    if not all(isinstance(d, int) for d in (*x.shape, *idx.shape)):
        raise ExportError("gather: symbolic shapes (refine the graph first)")
    col_ty = tensor_type((*idx.shape, 1), idx.dtype, stablehlo=True)
    col = w.op(w.fresh(), "reshape", [_name(w, idx)], [w.ty(idx)], col_ty)
    offset = [a for a in range(n.ndim) if a != axis]
    sizes = [1 if a == axis else int(d) for a, d in enumerate(x.shape)]
    attrs = (
        f"dimension_numbers = #stablehlo.gather<offset_dims = [{', '.join(map(str, offset))}], "
        f"collapsed_slice_dims = [{axis}], start_index_map = [{axis}], index_vector_dim = 1>, "
        f"slice_sizes = {_arr(sizes)}, indices_are_sorted = false"
    )
    return w.op(w.fresh(), "gather", [_name(w, x), col], [w.ty(x), col_ty], w.ty(n), attrs)


def _lower_arange(w: _Writer, n: Node) -> str:
    if all(isinstance(d, int) for d in n.shape):
        return w.op(w.fresh(), "iota", [], [], w.ty(n), "iota_dimension = 0 : i64")
    shape = w.shape_of(n.shape, n.op)
    return w.op(w.fresh(), "dynamic_iota", [shape], ["tensor<1xi32>"], w.ty(n), "iota_dimension = 0 : i64")


def _lower_dim(w: _Writer, n: Node) -> str:
    expr = n.attrs["expr"]
    if isinstance(expr, int):
        try:
            return w.constant(np.array(expr, dtype=n.dtype.np), w.ty(n))
        except OverflowError:
            raise ExportError(f"dim {expr} does not fit {n.dtype.name}") from None
    return w.op(w.fresh(), "convert", [w.dim_value(expr, "dim")], ["tensor<i64>"], w.ty(n))


def _lower_conv1d(w: _Writer, n: Node) -> str:
    x, wt = n.inputs[:2]
    if len(n.inputs) != 2:
        raise ExportError("conv1d with a bias input is not exported")
    pads = _static(list(n.attrs["padding"]), n)
    attrs = (
        "dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, "
        f"window_strides = {_arr([n.attrs['stride']])}, "
        f"padding = dense<[[{pads[0]}, {pads[1]}]]> : tensor<1x2xi64>, "
        f"lhs_dilation = {_arr([1])}, rhs_dilation = {_arr([n.attrs['dilation']])}, "
        f"feature_group_count = {int(n.attrs['groups'])} : i64, batch_group_count = 1 : i64"
    )
    return w.op(w.fresh(), "convolution", [_name(w, x), _name(w, wt)], [w.ty(x), w.ty(wt)], w.ty(n), attrs)


LOWERINGS: dict[str, Lower] = {
    **NN_LOWERINGS,
    "const": _lower_const,
    **{op: _lower_unary for op in (*_UNARY, "relu", "recip")},
    **{op: _lower_binary for op in (*_BINARY, *_COMPARE, "div", "idiv", "mod")},
    "erf": _lower_erf,
    "gelu": _lower_gelu,
    "where": _lower_where,
    "cast": _lower_cast,
    "bitcast": _lower_bitcast,
    "reduce": _lower_reduce,
    "matmul": _lower_matmul,
    "reshape": _lower_reshape,
    "permute": _lower_permute,
    "expand": _lower_expand,
    "shrink": _lower_shrink,
    "pad": _lower_pad,
    "cat": _lower_cat,
    "gather": _lower_gather,
    "arange": _lower_arange,
    "dim": _lower_dim,
    "conv1d": _lower_conv1d,
    # an index check fails a run on its data, which a StableHLO function cannot do: the module
    # computes with the indices as they are (its gathers clamp, as XLA's do); see docs/semantics.md
    "index_check": lambda w, n: _name(w, n.inputs[0]),
}


_NOT_EXPORTED = {
    "prefix": (
        "its output dim is data-dependent (a size the graph computes: x[:count], nonzero() "
        "without a size, boolean masks, unique); every dynamic dim of an exported module is read "
        "from an argument, and a computed size has no static or bounded StableHLO form here "
        "(export the padded form instead: nonzero(size=...) and its count)"
    ),
}


def stablehlo(graph: object, name: str = "main") -> str:
    """The graph (a ``passes.Graph``) as a StableHLO module with one public function ``name``.

    Raises:
        ExportError: an op without a StableHLO form here (named), or a symbolic size an op needs
            static (refine the graph first).
    """
    from ..passes import Graph

    if not isinstance(graph, Graph):
        raise ExportError(f"stablehlo() takes a passes.Graph, got {type(graph).__name__}")
    w = _Writer(graph.inputs)
    w.arg_types = {f"%arg{k}": w.ty(n) for k, n in enumerate(graph.inputs)}
    for n in graph.nodes:
        if n.op == "placeholder":
            continue
        lower = LOWERINGS.get(n.op)
        if lower is None:
            why = _NOT_EXPORTED.get(n.op, "it has no StableHLO lowering in asyncjit.export")
            raise ExportError(f"op {n.op!r} is not exported: {why}")
        w.names[n.id] = lower(w, n)
    args = ", ".join(f"%arg{k}: {w.ty(n)}" for k, n in enumerate(graph.inputs))
    outs = ", ".join(w.ty(o) for o in graph.outputs)
    ret = ", ".join(w.names[o.id] for o in graph.outputs)
    head = [f"module @asyncjit_{name} {{", f"  func.func public @{name}({args}) -> ({outs}) {{"]
    tail = [f"    return {ret} : {outs}", "  }", "}"]
    return "\n".join([*head, *w.lines, *tail]) + "\n"
