"""``DType``: the element types asyncjit computes with, their numpy mapping and promotion.

Types: ``bool``; signed ``int8/16/32/64``; unsigned ``uint8/16/32/64``; ``float16/32/64``
(no bfloat16). Promotion of two tensors' dtypes (``result_type``), stated here once:

* equal dtypes stay; ``bool`` with anything gives the other;
* two floats, or two ints of the same signedness, give the wider;
* an int meeting a float becomes that float (``int64 + float16 -> float16``, as in JAX; numpy
  would widen to float64);
* a signed and an unsigned int give the narrowest signed int holding both (``uint8 + int8 ->
  int16``, ``uint32 + int32 -> int64``); ``uint64`` with a signed int gives ``int64``, where
  values past ``2**63 - 1`` wrap (numpy would go to float64).

Python scalars are *weak*: ``x + 1`` keeps ``x``'s dtype; ``int_tensor + 0.5`` becomes float32.
"""

from __future__ import annotations

from typing import Final

import attrs
import numpy as np

from .errors import ArgumentTypeError, DTypeMismatchError, UnsupportedDTypeError

__all__ = [
    "DType",
    "check_array_dtype",
    "bool_",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "from_numpy",
    "result_type",
    "scalar_dtype",
    "DTYPES",
]


@attrs.frozen(repr=False)
class DType:
    """An element type: its name, numpy dtype, size in bytes and kind (``f``, ``i``, ``u`` or ``b``)."""

    name: str
    np: np.dtype[np.generic] = attrs.field(eq=False)
    itemsize: int = attrs.field(eq=False)
    kind: str = attrs.field(eq=False)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer."""
        return self.kind in ("i", "u")

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"asyncjit.{self.name}"


float64: Final = DType("float64", np.dtype(np.float64), 8, "f")
float32: Final = DType("float32", np.dtype(np.float32), 4, "f")
float16: Final = DType("float16", np.dtype(np.float16), 2, "f")
int8: Final = DType("int8", np.dtype(np.int8), 1, "i")
int16: Final = DType("int16", np.dtype(np.int16), 2, "i")
int32: Final = DType("int32", np.dtype(np.int32), 4, "i")
int64: Final = DType("int64", np.dtype(np.int64), 8, "i")
uint8: Final = DType("uint8", np.dtype(np.uint8), 1, "u")
uint16: Final = DType("uint16", np.dtype(np.uint16), 2, "u")
uint32: Final = DType("uint32", np.dtype(np.uint32), 4, "u")
uint64: Final = DType("uint64", np.dtype(np.uint64), 8, "u")
bool_: Final = DType("bool", np.dtype(np.bool_), 1, "b")

DTYPES: Final[tuple[DType, ...]] = (
    bool_,
    uint8,
    uint16,
    uint32,
    uint64,
    int8,
    int16,
    int32,
    int64,
    float16,
    float32,
    float64,
)
_SIGNED_BY_SIZE: Final[dict[int, DType]] = {1: int8, 2: int16, 4: int32, 8: int64}
_BY_NUMPY: Final[dict[np.dtype[np.generic], DType]] = {d.np: d for d in DTYPES}
_BY_NAME: Final[dict[str, DType]] = {d.name: d for d in DTYPES}


def from_numpy(dtype: object) -> DType:
    """Map a numpy dtype (or anything ``np.dtype`` accepts, or a ``DType``) to a ``DType``.

    Raises:
        UnsupportedDTypeError: (a ``TypeError``) for dtypes asyncjit does not compute with
            (complex, bfloat16, strings, ...).
    """
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        npd = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise UnsupportedDTypeError(f"not a dtype: {dtype!r}") from exc
    found = _BY_NUMPY.get(npd)
    if found is None:
        names = ", ".join(d.name for d in DTYPES)
        raise UnsupportedDTypeError(
            f"asyncjit does not support dtype {npd} (supported: {names}); cast it first"
        )
    return found


def _promote(a: DType, b: DType) -> DType:
    if a == b or b.is_bool:
        return a
    if a.is_bool:
        return b
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            return a if a.itemsize >= b.itemsize else b
        return a if a.is_float else b
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _SIGNED_BY_SIZE[min(2 * unsigned.itemsize, 8)]


def result_type(*dtypes: DType) -> DType:
    """The promoted dtype of non-weak operands, by the rules in this module's docstring."""
    if not dtypes:
        raise ValueError("result_type needs at least one dtype")
    out = dtypes[0]
    for d in dtypes[1:]:
        out = _promote(out, d)
    return out


def scalar_dtype(value: object, other: DType) -> DType:
    """The dtype a weak Python scalar takes next to a tensor of dtype ``other``."""
    if isinstance(value, bool | np.bool_):
        return other
    if isinstance(value, int | np.integer):
        return other if not other.is_bool else int32
    if isinstance(value, float | np.floating):
        return other if other.is_float else float32
    raise ArgumentTypeError(f"cannot use {type(value).__name__} {value!r} as a tensor scalar")


def check_array_dtype(array: np.ndarray, want: DType, what: str) -> None:
    """Check that ``array`` holds ``want`` exactly (no silent conversion of inputs).

    Raises:
        DTypeMismatchError: naming ``what`` (e.g. ``input 'x'``), the dtypes, and the fix.
    """
    try:
        got = from_numpy(array.dtype)
    except TypeError as exc:
        raise DTypeMismatchError(f"{what}: {exc}") from None
    if got != want:
        raise DTypeMismatchError(
            f"{what}: expected dtype {want.name}, got {array.dtype} (convert with .astype(np.{want.np}))"
        )
