"""The values an ONNX graph carries while it is imported: tensors, constants and symbolic ints.

Exported models compute their shapes at run time (``Shape`` -> ``Gather`` -> ``Concat`` ->
``Reshape``). The importer evaluates those sub-graphs while it traces, so that each value is one of:

* ``np.ndarray``: fully known at load time (initializers, constants, folded arithmetic);
* ``Sym``: a small int array whose elements are ints or symbolic ``Expr`` over the dims' ``Var``s
  (the shape of an input with a bounded dim, and anything computed from it);
* ``Tensor``: known only when the plan runs.

Shape arguments (``Reshape``'s shape, ``Slice``'s starts, ``Expand``'s shape ...) must be ``np.ndarray``
or ``Sym``: a shape that depends on data cannot be compiled into one plan, and is refused at load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from .. import dtypes as dt
from ..errors import OnnxImportError
from ..graph import aligned_copy, broadcast_core, make_node
from ..symbolic import Dim, Expr
from ..tensor import Tensor

__all__ = ["Sym", "Value", "as_tensor", "dims_of", "is_known", "make_int_array", "np_dtype", "const_tensor"]


@attrs.frozen(eq=False)
class Sym:
    """An int array with symbolic elements: ``values`` is an object array of ``int | Expr``."""

    values: np.ndarray
    dtype: np.dtype[Any]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


Value = Tensor | np.ndarray | Sym


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """The numpy dtype of an ONNX ``TensorProto`` element type."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):  # 0 (UNDEFINED), or a number no version defines
        raise OnnxImportError(f"element type {elem_type} is not an ONNX tensor type") from None


def make_int_array(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray | Sym:
    """An object array of dims as a plain array when every element is an int, else a ``Sym``."""
    flat = list(values.reshape(-1))
    if all(not isinstance(v, Expr) for v in flat):
        return np.array([int(v) for v in flat], dtype=dtype).reshape(values.shape)
    return Sym(values.astype(object), np.dtype(dtype))


def is_known(v: Value | None) -> bool:
    return isinstance(v, np.ndarray | Sym)


BROADCAST_CONST_MIN = 1 << 16
"""Elements from which a constant that repeats one smaller array (a ``ConstantOfShape`` fill,
an ``Expand`` of a constant) stays a broadcast view in the graph instead of being written out:
its digest then hashes the small array, and the compiler writes it out once, in the layout
its consumer reads (conv panels) or when the executable is built."""


def const_tensor(arr: np.ndarray) -> Tensor:
    """A constant tensor holding ``arr`` exactly in its dtype (no float64 -> float32 narrowing
    unless asyncjit has no such dtype, which ``Tensor.const`` reports)."""
    try:
        dt.from_numpy(arr.dtype)
        if arr.size >= BROADCAST_CONST_MIN and (core := broadcast_core(arr)) is not None:
            view = np.broadcast_to(aligned_copy(core), arr.shape)  # read-only
            return Tensor(make_node("const", (), value=view))
        return Tensor.const(arr, arr.dtype)
    except TypeError:
        if arr.dtype == np.float64:
            return Tensor.const(arr.astype(np.float32))
        if arr.dtype.kind in "iu":
            return Tensor.const(arr.astype(np.int64))
        raise


def as_tensor(v: Value) -> Tensor:
    """Any value as a ``Tensor``: symbolic elements become run-time dim scalars."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, np.ndarray):
        return const_tensor(v)
    target = dt.from_numpy(v.dtype) if v.dtype in (np.int32, np.int64) else dt.int64
    flat = [
        Tensor.from_dim(e, target) if isinstance(e, Expr) else Tensor.const(np.array(e, target.np))
        for e in v.values.reshape(-1)
    ]
    out = Tensor.stack(flat) if flat else Tensor.const(np.zeros(0, target.np))
    return out.reshape(*v.shape)


def dims_of(v: np.ndarray | Sym) -> list[Dim]:
    """A known 0-d or 1-d int value as a list of dims."""
    values = v.values if isinstance(v, Sym) else v
    out: list[Dim] = []
    for e in values.reshape(-1):
        out.append(e if isinstance(e, Expr) else int(e))
    return out


def dims_array(dims: Sequence[Dim]) -> np.ndarray:
    """An object array of dims (ints stay Python ints)."""
    arr = np.empty(len(dims), dtype=object)
    for i, d in enumerate(dims):
        arr[i] = d
    return arr
