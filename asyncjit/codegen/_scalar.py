"""One elementwise op on register values, with exactly the semantics ``graph._ops`` fixes.

Values arrive and leave in their compute types (``_types.compute_type``). float16 ops extend to
float, compute and round once. Float arithmetic carries only the ``contract`` flag (FMA
formation); nothing that could change NaN/inf behaviour. Integer division and modulo are floor
operations guarded against zero and ``INT_MIN / -1`` (both trap on x86); unsigned dtypes use the
unsigned division, comparisons and extensions. float64 computes in double: its transcendental
functions call libm (``exp``, ``tanh``, ``erf``...), which numpy's float64 reference also uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from ..dtypes import DType
from ..errors import CompileError
from ..graph import Node
from . import _mathfn
from ._types import F16, F32, F64, I1, I32, compute_type

__all__ = ["TRANSCENDENTAL", "cast_value", "double_to_half", "emit_elementwise", "intrinsic"]

_FLAGS = ("contract",)
TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid", "sin", "cos", "erf"})
"""The float math functions ``_mathfn`` computes (``gelu`` too, by name)."""


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    """Call LLVM intrinsic ``name`` (declared once per module with the argument types given)."""
    fn = b.module.globals.get(name)
    if not isinstance(fn, ir.Function):
        fn = ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, list(args))


def _suffix(ty: ir.Type) -> str:
    if ty == F32:
        return "f32"
    if ty == F16:
        return "f16"
    if ty == F64:
        return "f64"
    return f"i{ty.width}"


def _float_width(ty: ir.Type) -> int:
    return 64 if ty == F64 else 32 if ty == F32 else 16


def double_to_half(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """double -> half rounded once, without the ``__truncdfhf2`` libcall LLVM would emit for a
    direct ``fptrunc`` (the JIT does not link it: the call would jump to address 0). Goes through
    float rounded *to odd* (truncate, then set the last bit when inexact): with 13 more bits than
    half, the second rounding then gives exactly the correctly rounded half."""
    near = b.fptrunc(v, F32)
    back = b.fpext(near, F64)
    bits = b.bitcast(near, I32)
    fabs_d = intrinsic(b, "llvm.fabs.f64", F64, [v])
    fabs_b = intrinsic(b, "llvm.fabs.f64", F64, [back])
    over = b.fcmp_ordered(">", fabs_b, fabs_d)  # rounded away from zero: step back toward it
    bits = b.select(over, b.sub(bits, ir.Constant(I32, 1)), bits)
    inexact = b.fcmp_ordered("!=", back, v)
    bits = b.select(inexact, b.or_(bits, ir.Constant(I32, 1)), bits)
    return b.fptrunc(b.bitcast(bits, F32), F16)


def cast_value(b: ir.IRBuilder, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """``cast`` semantics: saturating float->int, ``!= 0`` to bool, wrapping int->int."""
    sty, dty = compute_type(src), compute_type(dst)
    if src == dst:
        return v
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("!=", v, ir.Constant(sty, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(sty, 0))
    if src.is_float and dst.is_float:
        wider = _float_width(dty) > _float_width(sty)
        if sty == F64 and dty == F16:
            return double_to_half(b, v)
        return b.fpext(v, dty) if wider else b.fptrunc(v, dty)
    if src.is_float:
        if sty == F16:
            # LLVM 20 lowers the saturating conversion from half to a narrow int (i16 seen) with NaN
            # giving the int's min, not 0; from float it is right, and half -> float is exact
            v, sty = b.fpext(v, F32), F32
        kind = "fptoui" if dst.is_unsigned else "fptosi"
        return intrinsic(b, f"llvm.{kind}.sat.{_suffix(dty)}.{_suffix(sty)}", dty, [v])
    if dst.is_float:
        return b.uitofp(v, dty) if src.is_bool or src.is_unsigned else b.sitofp(v, dty)
    if sty.width == dty.width:
        return v  # signed <-> unsigned of one width: the same bits
    if sty.width > dty.width:
        return b.trunc(v, dty)
    return b.zext(v, dty) if src.is_bool or src.is_unsigned else b.sext(v, dty)


def _float_unary(b: ir.IRBuilder, node: Node, x: ir.Value) -> ir.Value:
    op = node.op
    ty = x.type
    one = ir.Constant(ty, 1.0)
    sfx = _suffix(ty)
    if ty == F64 and (op in TRANSCENDENTAL or op == "gelu"):
        return _f64_unary(b, node, x)
    if op in TRANSCENDENTAL:
        return _mathfn.emit_unary(b, op, x)
    if op == "gelu":
        name = "gelu_tanh" if node.attrs.get("approximate", "none") == "tanh" else "gelu"
        return _mathfn.emit_unary(b, name, x)
    if op in ("sqrt", "floor", "ceil"):
        return intrinsic(b, f"llvm.{op}.{sfx}", ty, [x])
    if op == "rsqrt":
        return b.fdiv(one, intrinsic(b, f"llvm.sqrt.{sfx}", ty, [x]))
    if op == "recip":
        return b.fdiv(one, x)
    if op == "neg":
        return b.fneg(x)
    if op == "abs":
        return intrinsic(b, f"llvm.fabs.{sfx}", ty, [x])
    if op == "relu":
        return intrinsic(b, f"llvm.maximum.{sfx}", ty, [x, ir.Constant(ty, 0.0)])
    raise CompileError(f"unsupported by codegen (an asyncjit bug): float unary op {op!r}")


def _libm(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    fn = b.module.globals.get(name)
    if not isinstance(fn, ir.Function):
        fn = ir.Function(b.module, ir.FunctionType(F64, [F64]), name)
    return b.call(fn, [x])


def _f64_sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The reference's form: exp of -|x| only, so no overflow."""
    one = ir.Constant(F64, 1.0)
    e = intrinsic(b, "llvm.exp.f64", F64, [b.fneg(intrinsic(b, "llvm.fabs.f64", F64, [x]))])
    d = b.fadd(one, e)
    return b.select(b.fcmp_ordered(">=", x, ir.Constant(F64, 0.0)), b.fdiv(one, d), b.fdiv(e, d))


def _f64_unary(b: ir.IRBuilder, node: Node, x: ir.Value) -> ir.Value:
    """float64 transcendentals through libm (the reference's own functions)."""
    op = node.op
    half = ir.Constant(F64, 0.5)
    if op in ("exp", "log", "sin", "cos"):
        return intrinsic(b, f"llvm.{op}.f64", F64, [x])
    if op in ("tanh", "erf"):
        return _libm(b, op, x)
    if op == "sigmoid":
        return _f64_sigmoid(b, x)
    if op == "gelu":
        # the reference's forms, free of the cancellation in 1 + tanh / 1 + erf for x < 0:
        # x*sigmoid(2u) and 0.5*x*erfc(-x/sqrt 2); -inf is the limit -0.0, not -inf*0 = NaN
        if node.attrs.get("approximate", "none") == "tanh":
            cube = b.fmul(ir.Constant(F64, 0.044715), b.fmul(b.fmul(x, x), x))
            u = b.fmul(ir.Constant(F64, 2.0 * math.sqrt(2.0 / math.pi)), b.fadd(x, cube))
            y = b.fmul(x, _f64_sigmoid(b, u))
        else:
            e = _libm(b, "erfc", b.fdiv(b.fneg(x), ir.Constant(F64, math.sqrt(2.0))))
            y = b.fmul(b.fmul(half, x), e)
        return b.select(b.fcmp_ordered("==", x, ir.Constant(F64, -math.inf)), ir.Constant(F64, -0.0), y)
    raise CompileError(f"unsupported by codegen (an asyncjit bug): float64 op {op!r}")


def _int_unary(b: ir.IRBuilder, op: str, x: ir.Value, unsigned: bool = False) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    if op == "neg":
        return b.sub(zero, x)
    if op == "abs":
        if unsigned:
            return x
        return intrinsic(b, f"llvm.abs.{_suffix(x.type)}", x.type, [x, ir.Constant(I1, 0)])
    if op == "relu":
        if unsigned:
            return x
        return b.select(b.icmp_signed(">", x, zero), x, zero)
    if op == "not":
        return b.xor(x, ir.Constant(x.type, 1))
    raise CompileError(f"unsupported by codegen (an asyncjit bug): int unary op {op!r}")


def _float_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    sfx = _suffix(x.type)
    if op == "add":
        return b.fadd(x, y, flags=_FLAGS)
    if op == "sub":
        return b.fsub(x, y, flags=_FLAGS)
    if op == "mul":
        return b.fmul(x, y, flags=_FLAGS)
    if op == "div":
        return b.fdiv(x, y)
    if op == "pow":
        if x.type == F64:
            return intrinsic(b, "llvm.pow.f64", F64, [x, y])
        return _mathfn.emit_pow(b, x, y)
    if op in ("maximum", "minimum"):
        return intrinsic(b, f"llvm.{op}.{sfx}", x.type, [x, y])
    if op == "mod":
        return _float_mod(b, x, y)
    if op == "idiv":
        return _float_floordiv(b, x, y)
    if op in ("lt", "le", "gt", "ge", "eq"):
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}[op]
        return b.fcmp_ordered(sym, x, y)
    if op == "ne":
        return b.fcmp_unordered("!=", x, y)
    raise CompileError(f"unsupported by codegen (an asyncjit bug): float binary op {op!r}")


def _float_mod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """numpy's float ``mod``: ``fmod`` moved to the divisor's sign; a zero result takes its sign."""
    zero = ir.Constant(x.type, 0.0)
    r = b.frem(x, y)
    differ = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
    moved = b.select(b.and_(b.fcmp_unordered("!=", r, zero), differ), b.fadd(r, y), r)
    signed_zero = intrinsic(b, f"llvm.copysign.{_suffix(x.type)}", x.type, [zero, y])
    return b.select(b.fcmp_ordered("==", moved, zero), signed_zero, moved)


def _float_floordiv(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """numpy's (and Python's) float ``//``: the exact quotient ``(x - fmod(x, y)) / y``, one less
    when the remainder moves to the divisor's sign, snapped to the nearest integer (``floor(x / y)``
    is off by one where ``x / y`` rounds up to an integer: ``1 // 0.1`` is 9); ``x / y`` for y == 0."""
    ty = x.type
    sfx = _suffix(ty)
    zero, one, half = (ir.Constant(ty, v) for v in (0.0, 1.0, 0.5))
    quotient = b.fdiv(x, y)
    r = b.frem(x, y)
    div = b.fdiv(b.fsub(x, r), y)
    differ = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
    div = b.select(b.and_(b.fcmp_unordered("!=", r, zero), differ), b.fsub(div, one), div)
    fl = intrinsic(b, f"llvm.floor.{sfx}", ty, [div])
    fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), half), b.fadd(fl, one), fl)
    signed_zero = intrinsic(b, f"llvm.copysign.{sfx}", ty, [zero, quotient])
    out = b.select(b.fcmp_ordered("==", div, zero), signed_zero, fl)
    return b.select(b.fcmp_ordered("==", y, zero), quotient, out)


def _int_divmod(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, unsigned: bool = False) -> ir.Value:
    ty = x.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    if unsigned:  # floor == truncation; only division by zero needs a guard
        by_zero = b.icmp_unsigned("==", y, zero)
        safe = b.select(by_zero, one, y)
        out = b.udiv(x, safe) if op == "idiv" else b.urem(x, safe)
        return b.select(by_zero, zero, out)
    int_min = ir.Constant(ty, -(1 << (ty.width - 1)))
    by_zero = b.icmp_signed("==", y, zero)
    overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, ir.Constant(ty, -1)))
    safe = b.select(b.or_(by_zero, overflow), one, y)
    q, r = b.sdiv(x, safe), b.srem(x, safe)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
    out = b.select(adjust, b.sub(q, one), q) if op == "idiv" else b.select(adjust, b.add(r, safe), r)
    return b.select(by_zero, zero, out)


def _int_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, unsigned: bool = False) -> ir.Value:
    simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "and": b.and_, "or": b.or_, "xor": b.xor}
    if op in simple:
        return simple[op](x, y)
    if op in ("idiv", "mod"):
        return _int_divmod(b, op, x, y, unsigned)
    cmp = b.icmp_unsigned if unsigned or x.type == I1 else b.icmp_signed
    if op in ("maximum", "minimum"):
        pick = ">" if op == "maximum" else "<"
        return b.select(cmp(pick, x, y), x, y)
    sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
    if op in sym:
        return cmp(sym[op], x, y)
    raise CompileError(f"unsupported by codegen (an asyncjit bug): int binary op {op!r}")


def combine(b: ir.IRBuilder, reduce: str, x: ir.Value, y: ir.Value, dtype: DType) -> ir.Value:
    """``x (+ * max min) y`` for a scatter reduction, in ``dtype`` (float16 rounds once)."""
    if dtype.is_bool:  # numpy's bool add/max is or, mul/min is and
        return b.or_(x, y) if reduce in ("add", "max") else b.and_(x, y)
    op = {"add": "add", "mul": "mul", "max": "maximum", "min": "minimum"}[reduce]
    if not dtype.is_float:
        return _int_binary(b, op, x, y, dtype.is_unsigned)
    if x.type == F16:
        return b.fptrunc(_float_binary(b, op, b.fpext(x, F32), b.fpext(y, F32)), F16)
    return _float_binary(b, op, x, y)


def emit_elementwise(b: ir.IRBuilder, node: Node, args: Sequence[ir.Value]) -> ir.Value:
    """The value of elementwise ``node`` given its inputs' values."""
    op = node.op
    if op == "cast":
        return cast_value(b, args[0], node.inputs[0].dtype, node.dtype)
    if op == "bitcast":
        return b.bitcast(args[0], compute_type(node.dtype))
    if op == "where":
        return b.select(args[0], args[1], args[2])
    src = node.inputs[0].dtype
    if src.is_float:
        wide = [b.fpext(a, F32) if a.type == F16 else a for a in args]
        out = _float_unary(b, node, wide[0]) if len(args) == 1 else _float_binary(b, op, wide[0], wide[1])
        if node.dtype == src and src.name == "float16":
            return b.fptrunc(out, F16)
        return out
    unsigned = src.is_unsigned
    if len(args) == 1:
        return _int_unary(b, op, args[0], unsigned)
    return _int_binary(b, op, args[0], args[1], unsigned)
