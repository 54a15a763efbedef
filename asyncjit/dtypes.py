"""``DType``: the element types asyncjit computes with, their numpy mapping and promotion.

Promotion follows one table (``_RANK`` below), stated here once:

    bool < int32 < int64 < float16 < bfloat16? (not supported) < float32

* Two dtypes promote to the higher one in that order, so an integer meeting a float becomes that
  float (``int64 + float16 -> float16``, as in JAX; numpy would widen to float64).
* Python scalars are *weak*: ``x + 1`` keeps ``x``'s dtype; ``int_tensor + 0.5`` becomes float32.
* There is no float64: graphs run in float32 at most, which is what the models we serve use.
"""

from __future__ import annotations

from typing import Final

import attrs
import numpy as np

from .errors import DTypeMismatchError

__all__ = [
    "DType",
    "check_array_dtype",
    "bool_",
    "float16",
    "float32",
    "int32",
    "int64",
    "from_numpy",
    "result_type",
    "scalar_dtype",
    "DTYPES",
]


@attrs.frozen(repr=False)
class DType:
    """An element type: its name, numpy dtype, size in bytes and kind (``f``, ``i`` or ``b``)."""

    name: str
    np: np.dtype[np.generic] = attrs.field(eq=False)
    itemsize: int = attrs.field(eq=False)
    kind: str = attrs.field(eq=False)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"asyncjit.{self.name}"


float32: Final = DType("float32", np.dtype(np.float32), 4, "f")
float16: Final = DType("float16", np.dtype(np.float16), 2, "f")
int32: Final = DType("int32", np.dtype(np.int32), 4, "i")
int64: Final = DType("int64", np.dtype(np.int64), 8, "i")
bool_: Final = DType("bool", np.dtype(np.bool_), 1, "b")

DTYPES: Final[tuple[DType, ...]] = (bool_, int32, int64, float16, float32)
_RANK: Final[dict[DType, int]] = {d: i for i, d in enumerate(DTYPES)}
_BY_NUMPY: Final[dict[np.dtype[np.generic], DType]] = {d.np: d for d in DTYPES}
_BY_NAME: Final[dict[str, DType]] = {d.name: d for d in DTYPES}


def from_numpy(dtype: object) -> DType:
    """Map a numpy dtype (or anything ``np.dtype`` accepts, or a ``DType``) to a ``DType``.

    Raises:
        DTypeMismatchError: (a ``TypeError``) for dtypes asyncjit does not compute with
            (float64, complex, uint8, ...).
    """
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        npd = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise DTypeMismatchError(f"not a dtype: {dtype!r}") from exc
    found = _BY_NUMPY.get(npd)
    if found is None:
        names = ", ".join(d.name for d in DTYPES)
        raise DTypeMismatchError(f"asyncjit does not support dtype {npd} (supported: {names}); cast it first")
    return found


def result_type(*dtypes: DType) -> DType:
    """The promoted dtype of non-weak operands, by the table in this module's docstring."""
    if not dtypes:
        raise ValueError("result_type needs at least one dtype")
    return max(dtypes, key=_RANK.__getitem__)


def scalar_dtype(value: object, other: DType) -> DType:
    """The dtype a weak Python scalar takes next to a tensor of dtype ``other``."""
    if isinstance(value, bool | np.bool_):
        return other
    if isinstance(value, int | np.integer):
        return other if not other.is_bool else int32
    if isinstance(value, float | np.floating):
        return other if other.is_float else float32
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as a tensor scalar")


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
