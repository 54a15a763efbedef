"""One elementwise op on register values, with exactly the semantics ``graph._ops`` fixes.

Values arrive and leave in their compute types (``_types.compute_type``). float16 ops extend to
float, compute and round once. Float arithmetic carries only the ``contract`` flag (FMA
formation); nothing that could change NaN/inf behaviour. Integer division and modulo are floor
operations guarded against zero and ``INT_MIN / -1`` (both trap on x86).
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ..dtypes import DType
from ..errors import CompileError
from ..graph import Node
from . import _mathfn
from ._types import F16, F32, I1, compute_type

__all__ = ["cast_value", "emit_elementwise", "intrinsic"]

_FLAGS = ("contract",)
_TRANSCENDENTAL = {"exp", "log", "tanh", "sigmoid", "sin", "cos", "erf"}


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
    return f"i{ty.width}"


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
        return b.fpext(v, dty) if dty == F32 else b.fptrunc(v, dty)
    if src.is_float:
        name = f"llvm.fptosi.sat.{_suffix(dty)}.{_suffix(sty)}"
        return intrinsic(b, name, dty, [v])
    if dst.is_float:
        return b.uitofp(v, dty) if src.is_bool else b.sitofp(v, dty)
    if src.is_bool:
        return b.zext(v, dty)
    if sty.width > dty.width:
        return b.trunc(v, dty)
    return b.sext(v, dty)


def _float_unary(b: ir.IRBuilder, node: Node, x: ir.Value) -> ir.Value:
    op = node.op
    one = ir.Constant(F32, 1.0)
    if op in _TRANSCENDENTAL:
        return _mathfn.emit_unary(b, op, x)
    if op == "gelu":
        name = "gelu_tanh" if node.attrs.get("approximate", "none") == "tanh" else "gelu"
        return _mathfn.emit_unary(b, name, x)
    if op in ("sqrt", "floor", "ceil"):
        return intrinsic(b, f"llvm.{op}.f32", F32, [x])
    if op == "rsqrt":
        return b.fdiv(one, intrinsic(b, "llvm.sqrt.f32", F32, [x]))
    if op == "recip":
        return b.fdiv(one, x)
    if op == "neg":
        return b.fneg(x)
    if op == "abs":
        return intrinsic(b, "llvm.fabs.f32", F32, [x])
    if op == "relu":
        return intrinsic(b, "llvm.maximum.f32", F32, [x, ir.Constant(F32, 0.0)])
    raise CompileError(f"unsupported by codegen (an asyncjit bug): float unary op {op!r}")


def _int_unary(b: ir.IRBuilder, op: str, x: ir.Value) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    if op == "neg":
        return b.sub(zero, x)
    if op == "abs":
        return intrinsic(b, f"llvm.abs.{_suffix(x.type)}", x.type, [x, ir.Constant(I1, 0)])
    if op == "relu":
        return b.select(b.icmp_signed(">", x, zero), x, zero)
    if op == "not":
        return b.xor(x, ir.Constant(x.type, 1))
    raise CompileError(f"unsupported by codegen (an asyncjit bug): int unary op {op!r}")


def _float_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    if op == "add":
        return b.fadd(x, y, flags=_FLAGS)
    if op == "sub":
        return b.fsub(x, y, flags=_FLAGS)
    if op == "mul":
        return b.fmul(x, y, flags=_FLAGS)
    if op == "div":
        return b.fdiv(x, y)
    if op == "pow":
        return _mathfn.emit_pow(b, x, y)
    if op in ("maximum", "minimum"):
        return intrinsic(b, f"llvm.{op}.f32", F32, [x, y])
    if op == "mod":
        return _float_mod(b, x, y)
    if op in ("lt", "le", "gt", "ge", "eq"):
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}[op]
        return b.fcmp_ordered(sym, x, y)
    if op == "ne":
        return b.fcmp_unordered("!=", x, y)
    raise CompileError(f"unsupported by codegen (an asyncjit bug): float binary op {op!r}")


def _float_mod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """numpy's float ``mod``: ``fmod`` moved to the divisor's sign; a zero result takes its sign."""
    zero = ir.Constant(F32, 0.0)
    r = b.frem(x, y)
    differ = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
    moved = b.select(b.and_(b.fcmp_unordered("!=", r, zero), differ), b.fadd(r, y), r)
    signed_zero = intrinsic(b, "llvm.copysign.f32", F32, [zero, y])
    return b.select(b.fcmp_ordered("==", moved, zero), signed_zero, moved)


def _int_divmod(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    ty = x.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    int_min = ir.Constant(ty, -(1 << (ty.width - 1)))
    by_zero = b.icmp_signed("==", y, zero)
    overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, ir.Constant(ty, -1)))
    safe = b.select(b.or_(by_zero, overflow), one, y)
    q, r = b.sdiv(x, safe), b.srem(x, safe)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
    out = b.select(adjust, b.sub(q, one), q) if op == "idiv" else b.select(adjust, b.add(r, safe), r)
    return b.select(by_zero, zero, out)


def _int_binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "and": b.and_, "or": b.or_, "xor": b.xor}
    if op in simple:
        return simple[op](x, y)
    if op in ("idiv", "mod"):
        return _int_divmod(b, op, x, y)
    if op in ("maximum", "minimum"):
        pick = ">" if op == "maximum" else "<"
        return b.select(b.icmp_signed(pick, x, y), x, y)
    sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
    if op in sym:
        if x.type == I1:
            return b.icmp_unsigned(sym[op], x, y)
        return b.icmp_signed(sym[op], x, y)
    raise CompileError(f"unsupported by codegen (an asyncjit bug): int binary op {op!r}")


def emit_elementwise(b: ir.IRBuilder, node: Node, args: Sequence[ir.Value]) -> ir.Value:
    """The value of elementwise ``node`` given its inputs' values."""
    op = node.op
    if op == "cast":
        return cast_value(b, args[0], node.inputs[0].dtype, node.dtype)
    if op == "where":
        return b.select(args[0], args[1], args[2])
    src = node.inputs[0].dtype
    if src.is_float:
        wide = [b.fpext(a, F32) if a.type == F16 else a for a in args]
        out = _float_unary(b, node, wide[0]) if len(args) == 1 else _float_binary(b, op, wide[0], wide[1])
        if node.dtype == src and src.name == "float16":
            return b.fptrunc(out, F16)
        return out
    if len(args) == 1:
        return _int_unary(b, op, args[0])
    return _int_binary(b, op, args[0], args[1])
