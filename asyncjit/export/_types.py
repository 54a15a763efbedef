"""Tensor types as text, shared by ``Graph.dump()`` and the StableHLO writer.

A dim prints as its size when static and ``?`` otherwise; the bounds list gives each dynamic
dim's upper bound (``-`` for static dims, ``?`` for an unbounded one), StableHLO's
``#stablehlo.bounds`` in a form that diffs well: ``tensor<?x512xf32, bounds=[4096, -]>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dtypes import DType
from ..errors import CompileError
from ..symbolic import Dim, is_bounded, upper

__all__ = ["element_type", "tensor_type"]

_ELEMENT = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
}


def element_type(dtype: DType) -> str:
    """The MLIR element type of ``dtype`` (``f32``, ``i64``, ``ui8``, ``i1``)."""
    try:
        return _ELEMENT[dtype.name]
    except KeyError:
        raise CompileError(f"no MLIR element type for dtype {dtype.name}") from None


def _bound(d: Dim) -> str:
    return str(upper(d)) if is_bounded(d) else "?"


def tensor_type(shape: Sequence[Dim], dtype: DType, *, stablehlo: bool = False) -> str:
    """``tensor<?x512xf32, bounds=[4096, -]>`` (``stablehlo``: ``#stablehlo.bounds<4096, ?>``;
    StableHLO marks static dims ``?`` in its bounds list, and drops it when nothing is bounded)."""
    dims = "".join(f"{d}x" if isinstance(d, int) else "?x" for d in shape)
    body = f"{dims}{element_type(dtype)}"
    if all(isinstance(d, int) for d in shape):
        return f"tensor<{body}>"
    if stablehlo:
        if not any(not isinstance(d, int) and is_bounded(d) for d in shape):
            return f"tensor<{body}>"  # unbounded only: no encoding
        marks = ", ".join("?" if isinstance(d, int) else _bound(d) for d in shape)
        return f"tensor<{body}, #stablehlo.bounds<{marks}>>"
    marks = ", ".join("-" if isinstance(d, int) else _bound(d) for d in shape)
    return f"tensor<{body}, bounds=[{marks}]>"
