"""The StableHLO writer's shared pieces: ``_Writer`` (SSA names, types, generic-form ops) and
the helpers that several op lowerings use (scalar broadcasts, compares, reshapes, windows)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..dtypes import DType, bool_, int64
from ..errors import CompileError
from ..graph import Node
from ..symbolic import Dim, FloorDiv, Max, Min, Mod, Prod, Sum, Var
from ._types import element_type, tensor_type

__all__ = ["ExportError"]


class ExportError(CompileError):
    """A graph (or one op of it) has no StableHLO form in this exporter; the message names it."""


def _arr(values: Sequence[int]) -> str:
    return "array<i64" + (": " + ", ".join(str(int(v)) for v in values) if len(values) else "") + ">"


class _Writer:
    """Emits one function; ``name(node)`` is its SSA value, ``ty(node)`` its type."""

    def __init__(self, graph_inputs: Sequence[Node]) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self._fresh = 0
        # where each var can be read at run time: (argument, axis)
        self.var_at: dict[str, tuple[str, int]] = {}
        for k, n in enumerate(graph_inputs):
            self.names[n.id] = f"%arg{k}"
            for axis, d in enumerate(n.shape):
                if isinstance(d, Var):
                    self.var_at.setdefault(d.name, (f"%arg{k}", axis))

    def fresh(self) -> str:
        self._fresh += 1
        return f"%t{self._fresh}"

    def ty(self, node: Node) -> str:
        return tensor_type(node.shape, node.dtype, stablehlo=True)

    def op(
        self, result: str, name: str, args: Sequence[str], types: Sequence[str], out: str, attrs: str = ""
    ) -> str:
        attr = f" {{{attrs}}}" if attrs else ""
        self.lines.append(
            f'    {result} = "stablehlo.{name}"({", ".join(args)}){attr} : ({", ".join(types)}) -> {out}'
        )
        return result

    def constant(self, value: np.ndarray, out: str) -> str:
        name = self.fresh()
        self.lines.append(f"    {name} = stablehlo.constant {_dense(value)} : {out}")
        return name

    def shape_of(self, shape: Sequence[Dim], what: str) -> str:
        """A ``tensor<rank x i32>`` with ``shape``'s run-time value: ints, and expressions (sums,
        products, floor divisions, remainders, min/max) over vars an argument carries."""
        parts = []
        for d in shape:
            if isinstance(d, int):
                parts.append(self.constant(np.array([d], np.int32), "tensor<1xi32>"))
                continue
            size = self.op(self.fresh(), "convert", [self.dim_value(d, what)], ["tensor<i64>"], "tensor<i32>")
            parts.append(self.op(self.fresh(), "reshape", [size], ["tensor<i32>"], "tensor<1xi32>"))
        if len(parts) == 1:
            return parts[0]
        out = f"tensor<{len(parts)}xi32>"
        return self.op(
            self.fresh(), "concatenate", parts, ["tensor<1xi32>"] * len(parts), out, "dimension = 0 : i64"
        )

    def dim_value(self, d: Dim, what: str) -> str:
        """``d``'s run-time value as a ``tensor<i64>`` (int64 and floor semantics, as asyncjit
        evaluates dims).

        Raises:
            ExportError: ``d`` reads a var no argument carries (or an index or data-dependent
                size), or holds an int outside int64.
        """
        i64 = "tensor<i64>"

        def const(v: int) -> str:
            if not -(1 << 63) <= v < 1 << 63:
                raise ExportError(f"{what}: dim {d} holds {v}, outside int64")
            return self.constant(np.array(v, np.int64), i64)

        def binary(name: str, a: str, b: str) -> str:
            return self.op(self.fresh(), name, [a, b], [i64, i64], i64)

        if isinstance(d, int):
            return const(d)
        if isinstance(d, Var) and d.name in self.var_at:
            arg, axis = self.var_at[d.name]
            size = self.fresh()
            self.lines.append(
                f"    {size} = stablehlo.get_dimension_size {arg}, dim = {axis} : "
                f"({self.arg_type(arg)}) -> tensor<i32>"
            )
            return self.op(self.fresh(), "convert", [size], ["tensor<i32>"], i64)
        if isinstance(d, Sum):
            acc = const(d.const)
            for atom, coeff in d.terms:
                term = self.dim_value(atom, what)
                if coeff != 1:
                    term = binary("multiply", term, const(coeff))
                acc = binary("add", acc, term)
            return acc
        if isinstance(d, Prod):
            acc = self.dim_value(d.factors[0], what)
            for f in d.factors[1:]:
                acc = binary("multiply", acc, self.dim_value(f, what))
            return acc
        if isinstance(d, FloorDiv | Mod):
            # floor remainder r = rem + den where rem < 0 (den > 0); floor quotient (num - r) / den
            num, den = self.dim_value(d.num, what), const(d.den)
            rem = binary("remainder", num, den)
            negative = self.op(
                self.fresh(), "compare", [rem, const(0)], [i64, i64], "tensor<i1>",
                "comparison_direction = #stablehlo<comparison_direction LT>",
            )  # fmt: skip
            fixed = binary("add", rem, den)
            r = self.op(self.fresh(), "select", [negative, fixed, rem], ["tensor<i1>", i64, i64], i64)
            return r if isinstance(d, Mod) else binary("divide", binary("subtract", num, r), den)
        if isinstance(d, Min | Max):
            name = "minimum" if isinstance(d, Min) else "maximum"
            acc = self.dim_value(d.args[0], what)
            for a in d.args[1:]:
                acc = binary(name, acc, self.dim_value(a, what))
            return acc
        raise ExportError(f"{what}: dim {d} is not an expression over vars an argument carries")

    arg_types: dict[str, str]

    def arg_type(self, arg: str) -> str:
        return self.arg_types[arg]


def _dense(value: np.ndarray) -> str:
    v = np.asarray(value)
    if v.dtype == np.bool_:
        flat = ", ".join("true" if x else "false" for x in v.reshape(-1))
        return f"dense<{flat}>" if v.ndim == 0 else f"dense<[{flat}]>" if v.ndim == 1 else _nested_bool(v)
    return (
        'dense<"0x' + np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")).tobytes().hex().upper() + '">'
    )


def _nested_bool(v: np.ndarray) -> str:
    def rec(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "[" + ", ".join("true" if x else "false" for x in a) + "]"
        return "[" + ", ".join(rec(s) for s in a) + "]"

    return f"dense<{rec(v)}>"


Lower = Callable[[_Writer, Node], str]


def _name(w: _Writer, n: Node) -> str:
    return w.names[n.id]


def _scalar(w: _Writer, value: float, like: Node) -> str:
    """A constant ``value`` of ``like``'s dtype, broadcast to its shape."""
    st = f"tensor<{element_type(like.dtype)}>"
    return _broadcast_scalar(w, w.constant(np.array(value, like.dtype.np), st), like)


def _broadcast_scalar(w: _Writer, scalar: str, like: Node) -> str:
    st = f"tensor<{element_type(like.dtype)}>"
    if not like.shape:
        return scalar
    if all(isinstance(d, int) for d in like.shape):
        return w.op(
            w.fresh(), "broadcast_in_dim", [scalar], [st], w.ty(like), "broadcast_dimensions = array<i64>"
        )
    shape = w.shape_of(like.shape, like.op)
    return w.op(
        w.fresh(),
        "dynamic_broadcast_in_dim",
        [scalar, shape],
        [st, f"tensor<{like.ndim}xi32>"],
        w.ty(like),
        "broadcast_dimensions = array<i64>",
    )


def _compare_attrs(direction: str, kind: str) -> str:
    return (
        f"comparison_direction = #stablehlo<comparison_direction {direction}>, "
        f"compare_type = #stablehlo<comparison_type {kind}>"
    )


def _reshape_to(w: _Writer, value: str, value_ty: str, n: Node) -> str:
    if all(isinstance(d, int) for d in n.shape):
        return w.op(w.fresh(), "reshape", [value], [value_ty], w.ty(n))
    shape = w.shape_of(n.shape, n.op)
    return w.op(w.fresh(), "dynamic_reshape", [value, shape], [value_ty, f"tensor<{n.ndim}xi32>"], w.ty(n))


def _static(values: Sequence[Dim], n: Node) -> list[int]:
    if not all(isinstance(v, int) for v in values):
        raise ExportError(f"op {n.op!r}: symbolic bounds {list(values)} (refine the graph first)")
    return [int(v) for v in values]


def _padding(pairs: Sequence[tuple[int, int]]) -> str:
    body = ", ".join(f"[{lo}, {hi}]" for lo, hi in pairs)
    return f"dense<[{body}]> : tensor<{len(pairs)}x2xi64>"


def _reduce_window(
    w: _Writer,
    x: str,
    dtype: DType,
    shapes: tuple[Sequence[Dim], Sequence[Dim]],
    op: str,
    init: float,
    window: Sequence[int],
    **geo: Sequence[int],
) -> str:
    """``reduce_window`` of ``x`` (``dtype``; ``shapes`` in and out) with ``op`` (a region),
    padding with ``init``."""
    et = f"tensor<{element_type(dtype)}>"
    iv = w.constant(np.array(init, dtype.np), et)
    strides = geo.get("strides", [1] * len(window))
    dil = geo.get("dilations", [1] * len(window))
    pads = list(zip(geo.get("lo", [0] * len(window)), geo.get("hi", [0] * len(window)), strict=True))
    x_ty, out_ty = (tensor_type(s, dtype, stablehlo=True) for s in shapes)
    body, res = w.fresh(), w.fresh()
    w.lines.append(f'    {res} = "stablehlo.reduce_window"({x}, {iv}) ({{')
    w.lines.append(f"      ^bb0(%lhs: {et}, %rhs: {et}):")
    w.lines.append(f'        {body} = "stablehlo.{op}"(%lhs, %rhs) : ({et}, {et}) -> {et}')
    w.lines.append(f'        "stablehlo.return"({body}) : ({et}) -> ()')
    w.lines.append(
        f"    }}) {{window_dimensions = {_arr(window)}, window_strides = {_arr(strides)}, "
        f"window_dilations = {_arr(dil)}, padding = {_padding(pads)}}} : ({x_ty}, {et}) -> {out_ty}"
    )
    return res


def _convert(w: _Writer, v: str, shape: Sequence[Dim], src: DType, dst: DType) -> str:
    """``v`` converted from ``src`` to ``dst`` (itself when they are one dtype)."""
    if src == dst:
        return v
    ty = (tensor_type(shape, t, stablehlo=True) for t in (src, dst))
    return w.op(w.fresh(), "convert", [v], [next(ty)], next(ty))


def _index64(w: _Writer, v: str, shape: Sequence[Dim], src: DType) -> str:
    """An integer index ``v`` as int64 the way asyncjit reads indices: every int dtype by value,
    but uint64 by its bits (``bitcast_convert``: a value past ``2**63 - 1`` is negative, which
    StableHLO's ``convert`` leaves undefined)."""
    if src.np == np.uint64:
        ty = (tensor_type(shape, t, stablehlo=True) for t in (src, int64))
        return w.op(w.fresh(), "bitcast_convert", [v], [next(ty)], next(ty))
    return _convert(w, v, shape, src, int64)


def _kind(dtype: DType) -> str:
    """StableHLO's comparison type for ``dtype`` (bools compare as unsigned)."""
    return "FLOAT" if dtype.is_float else "UNSIGNED" if dtype.is_unsigned or dtype.is_bool else "SIGNED"


class _Same:
    """Elementwise ops on values of one shape and dtype (``bin``, ``cmp``, ``sel``, ``un``), so a
    lowering that composes several reads as the formula it implements."""

    def __init__(self, w: _Writer, shape: Sequence[Dim], dtype: DType) -> None:
        self.w, self.dtype = w, dtype
        self.t = tensor_type(shape, dtype, stablehlo=True)
        self.b = tensor_type(shape, bool_, stablehlo=True)

    def bin(self, op: str, a: str, b: str) -> str:
        return self.w.op(self.w.fresh(), op, [a, b], [self.t, self.t], self.t)

    def un(self, op: str, a: str) -> str:
        return self.w.op(self.w.fresh(), op, [a], [self.t], self.t)

    def cmp(self, direction: str, a: str, b: str) -> str:
        attrs = _compare_attrs(direction, _kind(self.dtype))
        return self.w.op(self.w.fresh(), "compare", [a, b], [self.t, self.t], self.b, attrs)

    def sel(self, c: str, a: str, b: str) -> str:
        return self.w.op(self.w.fresh(), "select", [c, a, b], [self.b, self.t, self.t], self.t)

    def logic(self, op: str, a: str, b: str) -> str:
        """``and``/``or``/``xor`` of two bool values of this shape."""
        return self.w.op(self.w.fresh(), op, [a, b], [self.b, self.b], self.b)


def _slice_axis(
    w: _Writer, v: str, shape: Sequence[int], dtype: DType, axis: int, start: int, stop: int
) -> tuple[str, list[int]]:
    """``v[start:stop]`` along ``axis`` of a static ``shape``: the value and its shape."""
    out = [stop - start if a == axis else d for a, d in enumerate(shape)]
    attrs = (
        f"start_indices = {_arr([start if a == axis else 0 for a in range(len(shape))])}, "
        f"limit_indices = {_arr([stop if a == axis else d for a, d in enumerate(shape)])}, "
        f"strides = {_arr([1] * len(shape))}"
    )
    ty = tensor_type(shape, dtype, stablehlo=True)
    return w.op(w.fresh(), "slice", [v], [ty], tensor_type(out, dtype, stablehlo=True), attrs), out


def _region_op(
    w: _Writer,
    name: str,
    operands: Sequence[tuple[str, str]],
    results: Sequence[str],
    body: tuple[Sequence[str], Callable[[list[str]], Sequence[str]], Sequence[str]],
    attrs: str,
) -> str:
    """An op with one region (``reduce``, ``sort``, ``scatter``): ``operands`` are (value,
    type) pairs and ``results`` the result types; ``body`` is (block argument types, a function
    from the block's arguments to the values it yields, their types). Returns the result's name
    (``name#k`` reads result ``k`` of several)."""
    res = w.fresh()
    head = res if len(results) == 1 else f"{res}:{len(results)}"
    block, build, yields = body
    w.lines.append(f'    {head} = "stablehlo.{name}"({", ".join(v for v, _ in operands)}) ({{')
    params = [w.fresh() for _ in block]
    w.lines.append(f"      ^bb0({', '.join(f'{p}: {t}' for p, t in zip(params, block, strict=True))}):")
    outs = build(params)
    w.lines.append(f'        "stablehlo.return"({", ".join(outs)}) : ({", ".join(yields)}) -> ()')
    out = results[0] if len(results) == 1 else f"({', '.join(results)})"
    w.lines.append(f"    }}) {{{attrs}}} : ({', '.join(t for _, t in operands)}) -> {out}")
    return res


def _fill(w: _Writer, value: float, dtype: DType, like: Node) -> str:
    """A constant ``value`` of ``dtype`` at ``like``'s shape (static, or read from the arguments)."""
    st = f"tensor<{element_type(dtype)}>"
    scalar = w.constant(np.array(value, dtype.np), st)
    if not like.shape:
        return scalar
    ty, dims = tensor_type(like.shape, dtype, stablehlo=True), "broadcast_dimensions = array<i64>"
    if all(isinstance(d, int) for d in like.shape):
        return w.op(w.fresh(), "broadcast_in_dim", [scalar], [st], ty, dims)
    shape = w.shape_of(like.shape, like.op)
    return w.op(
        w.fresh(), "dynamic_broadcast_in_dim", [scalar, shape], [st, f"tensor<{like.ndim}xi32>"], ty, dims
    )


def _broadcast_to(
    w: _Writer, v: str, v_ty: str, shape: Sequence[Dim], dtype: DType, dims: Iterable[int], what: str
) -> str:
    """``v`` broadcast to ``shape`` (its dims land on ``dims``); a symbolic ``shape`` is read
    from the arguments (``dynamic_broadcast_in_dim``)."""
    ty, attrs = tensor_type(shape, dtype, stablehlo=True), f"broadcast_dimensions = {_arr(list(dims))}"
    if all(isinstance(d, int) for d in shape):
        return w.op(w.fresh(), "broadcast_in_dim", [v], [v_ty], ty, attrs)
    size = w.shape_of(shape, what)
    return w.op(
        w.fresh(), "dynamic_broadcast_in_dim", [v, size], [v_ty, f"tensor<{len(shape)}xi32>"], ty, attrs
    )
