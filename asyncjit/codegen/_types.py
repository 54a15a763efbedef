"""How asyncjit dtypes look in LLVM: storage types in memory, compute types in registers.

bool is ``i8`` in memory and ``i1`` in registers; float16 is ``half`` in both but every op
extends to ``float``, computes, and rounds back once (the semantics in ``graph._ops``).
"""

from __future__ import annotations

from llvmlite import ir

from ..dtypes import DType

__all__ = ["F16", "F32", "I1", "I8", "I32", "I64", "PTR", "VOID", "compute_type", "const", "storage_type"]

F32 = ir.FloatType()
F16 = ir.HalfType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_STORAGE = {"float32": F32, "float16": F16, "int32": I32, "int64": I64, "bool": I8}
_COMPUTE = {"float32": F32, "float16": F16, "int32": I32, "int64": I64, "bool": I1}


def storage_type(dtype: DType) -> ir.Type:
    """The element type of a buffer of ``dtype``."""
    return _STORAGE[dtype.name]


def compute_type(dtype: DType) -> ir.Type:
    """The register type a value of ``dtype`` has between ops."""
    return _COMPUTE[dtype.name]


def const(dtype: DType, value: float | int | bool) -> ir.Constant:
    """An immediate of ``dtype`` in its compute type (bool -> i1)."""
    ty = compute_type(dtype)
    if dtype.is_bool:
        return ir.Constant(ty, int(bool(value)))
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    return ir.Constant(ty, int(value))
