"""How asyncjit dtypes look in LLVM: storage types in memory, compute types in registers.

bool is ``i8`` in memory and ``i1`` in registers; float16 is ``half`` in both but every op
extends to ``float``, computes, and rounds back once (the semantics in ``graph._ops``); float64
is ``double`` and computes in double. LLVM integers carry no sign: unsigned dtypes share the
signed types' widths and the ops choose ``udiv``/``icmp ult``/``zext`` by the dtype.
"""

from __future__ import annotations

from llvmlite import ir

from ..dtypes import DType

__all__ = [
    "F16",
    "F32",
    "F64",
    "I1",
    "I8",
    "I16",
    "I32",
    "I64",
    "PTR",
    "VOID",
    "compute_type",
    "const",
    "is_float_type",
    "storage_type",
]

F32 = ir.FloatType()
F16 = ir.HalfType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_INTS = {"int8": I8, "int16": I16, "int32": I32, "int64": I64, "uint8": I8, "uint16": I16, "uint32": I32}
_INTS["uint64"] = I64
_STORAGE = {"float64": F64, "float32": F32, "float16": F16, "bool": I8, **_INTS}
_COMPUTE = {"float64": F64, "float32": F32, "float16": F16, "bool": I1, **_INTS}


def storage_type(dtype: DType) -> ir.Type:
    """The element type of a buffer of ``dtype``."""
    return _STORAGE[dtype.name]


def compute_type(dtype: DType) -> ir.Type:
    """The register type a value of ``dtype`` has between ops."""
    return _COMPUTE[dtype.name]


def is_float_type(ty: ir.Type) -> bool:
    """``half``, ``float`` or ``double``."""
    return isinstance(ty, ir.HalfType | ir.FloatType | ir.DoubleType)


def const(dtype: DType, value: float | int | bool) -> ir.Constant:
    """An immediate of ``dtype`` in its compute type (bool -> i1; ints as their bit pattern)."""
    ty = compute_type(dtype)
    if dtype.is_bool:
        return ir.Constant(ty, int(bool(value)))
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    v = int(value)
    if v < 0 and dtype.is_unsigned:
        v &= (1 << ty.width) - 1
    return ir.Constant(ty, v)
