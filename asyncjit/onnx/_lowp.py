"""Low-precision ONNX element types, carried as their storage bits and converted exactly.

asyncjit computes in bool, ints and float16/32/64. ONNX also has bfloat16, the float8 family
(e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu), float4 e2m1 and 4- and 2-bit ints, which numpy
holds through ``ml_dtypes``. The importer carries a tensor of such a type as a ``LowP``: the
bytes ``ml_dtypes`` stores (``uint16`` for bfloat16, ``uint8`` for the rest, so a feed is
``arr.view(np.uint8)``) and its dtype. No compiler support is needed:

* **decode**: bfloat16 is its bits shifted into a float32; every 1-byte type is a lookup in a
  256-entry table built from ``ml_dtypes`` itself (NaN, subnormals and all), to float32 for the
  float types and int8/uint8 for the ints. Both are exact.
* **encode**: float32 -> the type by integer bit arithmetic on the float's bits (round to
  nearest even; NaN, infinity and overflow mapped as ``ml_dtypes`` maps them), checked bit for
  bit against ``ml_dtypes`` on every bfloat16/float16 pattern and every rounding boundary;
  float64 rounds to float32 first, as ``ml_dtypes`` does. ONNX's ``saturate``
  clips to the largest finite value first (``numpy_helper.saturate_cast``).
* **ops**: an op with low-precision inputs sees them decoded and its results of that type
  are encoded again, so every op rounds once as ``ml_dtypes`` arithmetic does; data movement
  (reshape, transpose, gather, concat...) runs on the bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Final

import attrs
import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..tensor import Tensor

if TYPE_CHECKING:
    from ._registry import NodeCtx, OpDef
    from ._values import Value

__all__ = [
    "LowP",
    "decode",
    "decode_array",
    "encode",
    "encode_e8m0",
    "is_lowp",
    "is_lowp_dtype",
    "lowp_value",
    "run_with_lowp",
    "storage_dtype",
]

_FLOATS: Final = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_SMALL_FLOATS: Final = ("float8_e8m0fnu", "float4_e2m1fn")
_INTS: Final = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
NAMES: Final = (*_FLOATS, *_SMALL_FLOATS, *_INTS)
FLOAT8_SATURATING: Final = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
"""The types ONNX's ``saturate`` attribute applies to (Cast, QuantizeLinear)."""


@attrs.frozen
class _Format:
    """A small float format: mantissa bits, exponent bias, total bits and its special codes."""

    width: int
    mant: int
    bias: int
    max_code: int  # the largest finite magnitude
    overflow: str  # "inf" (e5m2), "nan" (e4m3fn), "nan_unsigned" (fnuz), "saturate" (float4)
    nan_code: int


_FORMATS: Final = {
    "float8_e4m3fn": _Format(8, 3, 7, 0x7E, "nan", 0x7F),
    "float8_e4m3fnuz": _Format(8, 3, 8, 0x7F, "nan_unsigned", 0x80),
    "float8_e5m2": _Format(8, 2, 15, 0x7B, "inf", 0x7E),
    "float8_e5m2fnuz": _Format(8, 2, 16, 0x7F, "nan_unsigned", 0x80),
    "float4_e2m1fn": _Format(4, 1, 1, 0x7, "saturate", 0x8),
}


@attrs.frozen(eq=False)
class LowP:
    """A tensor of a low-precision ONNX type: its storage bits and its ``ml_dtypes`` dtype."""

    bits: Tensor
    dtype: np.dtype[Any]

    @property
    def shape(self) -> tuple[Any, ...]:
        return self.bits.shape


def is_lowp_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is one of the low-precision types carried as bits."""
    return isinstance(dtype, np.dtype) and dtype.name in NAMES


def is_lowp(v: object) -> bool:
    """A ``LowP`` or a constant array of a low-precision type."""
    return isinstance(v, LowP) or (isinstance(v, np.ndarray) and is_lowp_dtype(v.dtype))


def storage_dtype(dtype: np.dtype[Any]) -> DType:
    """The dtype of the bits: uint16 for bfloat16, uint8 for the 1-byte types."""
    return dt.uint16 if dtype.itemsize == 2 else dt.uint8


def compute_dtype(dtype: np.dtype[Any]) -> DType:
    """What an op computes a low-precision value in: float32, or int8/uint8 for the ints."""
    if dtype.name in _INTS:
        return dt.int8 if dtype.name.startswith("int") else dt.uint8
    return dt.float32


def lowp_value(v: Value | LowP) -> LowP:
    """A low-precision constant array as a ``LowP`` over constant bits (a ``LowP`` as is)."""
    if isinstance(v, LowP):
        return v
    assert isinstance(v, np.ndarray) and is_lowp_dtype(v.dtype)
    st = storage_dtype(v.dtype)
    return LowP(Tensor.const(np.asarray(v, order="C").view(st.np), st), v.dtype)


def bits_array(arr: np.ndarray) -> np.ndarray:
    """A low-precision array's storage bits (a view)."""
    return np.asarray(arr, order="C").view(storage_dtype(arr.dtype).np)


@cache
def _table(name: str) -> np.ndarray:
    import ml_dtypes

    dtype = np.dtype(getattr(ml_dtypes, name))
    with np.errstate(all="ignore"):
        table: np.ndarray = np.arange(256, dtype=np.uint8).view(dtype).astype(compute_dtype(dtype).np)
    return table


def decode_array(arr: np.ndarray) -> np.ndarray:
    """A low-precision constant array in its compute dtype (exact, as ``decode``)."""
    if arr.dtype.name == "bfloat16":
        return np.asarray(bits_array(arr).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(_table(arr.dtype.name)[bits_array(arr)])


def decode(v: LowP) -> Tensor:
    """A low-precision tensor in its compute dtype, exactly (float32, int8 or uint8)."""
    if v.dtype.name == "bfloat16":
        return (v.bits.cast(dt.uint32) * 65536).bitcast(dt.float32)
    shape = v.bits.shape
    table = Tensor.const(_table(v.dtype.name))
    return table.gather(0, v.bits.cast(dt.int32).reshape(-1)).reshape(*shape)


def to_float32(x: Tensor) -> Tensor:
    """``x`` as float32, the first step of every conversion to a low-precision float: float64
    rounds to float32 first and then again, as ``ml_dtypes`` (and so ONNX's reference) does."""
    return x.cast(dt.float32)


def _u32(value: int) -> Tensor:
    return Tensor.const(np.array(value, np.uint32))


def _encode_bf16(x: Tensor) -> Tensor:
    u = x.bitcast(dt.uint32)
    hi = u // 65536
    rounded = (u + 0x7FFF + (hi & 1)) // 65536
    nan = (u & 0x7FFFFFFF) > _u32(0x7F800000)
    return Tensor.select(nan, (hi & 0x8000) | 0x7FC0, rounded).cast(dt.uint16)


def _encode_small_float(x: Tensor, fmt: _Format) -> Tensor:
    # all in uint32 bit arithmetic (no float->int conversion): it vectorizes
    u = x.bitcast(dt.uint32)
    sign_bit = (u // (1 << 31)) * (1 << (fmt.width - 1))
    a = u & 0x7FFFFFFF
    shift = 23 - fmt.mant
    # normal range: round the float's bits at the target's last mantissa bit, then rebias
    q = (a + ((1 << (shift - 1)) - 1) + ((a // (1 << shift)) & 1)) // (1 << shift)
    normal = q - ((127 - fmt.bias) << fmt.mant)  # wraps below the normal range: not selected there
    # below it: scale onto the subnormal grid (exact); adding 2**23 rounds to an integer, which
    # is then the float's low mantissa bits
    scaled = a.bitcast(dt.float32) * float(2.0 ** (fmt.bias - 1 + fmt.mant))
    sub = (scaled + 8388608.0).bitcast(dt.uint32) & 0x7FFFFF
    code = Tensor.select(a >= _u32((128 - fmt.bias) << 23), normal, sub)
    nan = a > _u32(0x7F800000)
    over = code > _u32(fmt.max_code)
    if fmt.overflow == "inf":
        code = Tensor.select(over, _u32(0x7C), code) | sign_bit
        code = Tensor.select(nan, sign_bit | fmt.nan_code, code)
    elif fmt.overflow == "nan":
        code = Tensor.select(over | nan, _u32(fmt.nan_code), code) | sign_bit
    elif fmt.overflow == "nan_unsigned":
        code = Tensor.select(code == 0, _u32(0), code | sign_bit)  # no negative zero
        code = Tensor.select(over | nan, _u32(fmt.nan_code), code)
    else:  # float4: no inf or NaN; ml_dtypes saturates and maps NaN to the zero of the other sign
        code = Tensor.select(over, _u32(fmt.max_code), code) | sign_bit
        code = Tensor.select(nan, sign_bit ^ fmt.nan_code, code)
    return code.cast(dt.uint8)


def _encode_int(x: Tensor, name: str) -> Tensor:
    mask = (1 << _INTS[name]) - 1
    if x.dtype.is_bool:
        return x.cast(dt.uint8)
    if x.dtype.is_float:  # ml_dtypes: truncate to an int32 (0 if outside it or NaN), then wrap
        f = x if x.dtype == dt.float64 else x.cast(dt.float32)
        inside = f.abs() < 2147483648.0
        x = Tensor.select(inside, f, Tensor.zeros(f.shape, f.dtype)).cast(dt.int32)
    return (x & mask).cast(dt.uint8)  # two's complement: the low bits of any int width


def encode(x: Tensor, dtype: np.dtype[Any], *, saturate: bool = False) -> LowP:
    """``x`` converted to low-precision ``dtype`` as ``ml_dtypes``' ``astype`` converts it.

    ``saturate`` (the float8 types only, ONNX's Cast/QuantizeLinear attribute) first clips to
    the largest finite magnitude, so infinities and overflow become it; NaN stays NaN.
    """
    name = dtype.name
    if name in _INTS:
        return LowP(_encode_int(x, name), dtype)
    if name == "float8_e8m0fnu":  # ml_dtypes: nearest (ties up), zero and negatives are NaN
        out = encode_e8m0(x, dtype, saturate=False, round_mode="nearest")
        positive = to_float32(x) > 0.0
        return LowP(Tensor.select(positive, out.bits, Tensor.full(out.bits.shape, 0xFF, dt.uint8)), dtype)
    f = to_float32(x if not x.dtype.is_bool else x.cast(dt.float32))
    if saturate and name in FLOAT8_SATURATING:
        import ml_dtypes

        biggest = float(ml_dtypes.finfo(dtype).max)  # type: ignore[no-untyped-call]
        f = f.maximum(-biggest).minimum(biggest)
    if name == "bfloat16":
        return LowP(_encode_bf16(f), dtype)
    return LowP(_encode_small_float(f, _FORMATS[name]), dtype)


def encode_e8m0(x: Tensor, dtype: np.dtype[Any], *, saturate: bool, round_mode: str) -> LowP:
    """float8 e8m0 (a power of two, no sign) as ONNX converts to it: the float32 exponent,
    rounded ``up``, ``down`` or to ``nearest`` on the mantissa; NaN and inf give NaN (0xFF)."""
    u = to_float32(x).bitcast(dt.uint32)
    exponent = (u // (1 << 23)) & 0xFF
    special = exponent == 0xFF
    if round_mode == "nearest":
        g = (u & 0x400000) != 0
        r = (u & 0x200000) != 0
        s = (u & 0x1FFFFF) != 0
        up = g & (r | s | (exponent > 0))
    elif round_mode == "up":
        up = (u & 0x7FFFFF) != 0
    elif round_mode == "down":
        up = Tensor.zeros(u.shape, dt.bool_)
    else:
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    if saturate:
        up = up & (exponent != 0xFE)
    out = Tensor.select(special, 0xFF, exponent + up.cast(dt.uint32))
    return LowP(out.cast(dt.uint8), dtype)


def encode_array(arr: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """A constant converted as ``encode`` converts (``ml_dtypes``' ``astype``)."""
    with np.errstate(all="ignore"):
        return arr.astype(dtype)


# -- the tracer's hook: ops on low-precision values -------------------------------------------

AWARE: Final = frozenset({"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "BitCast"})
"""Ops whose lowerings take low-precision values themselves."""
MOVEMENT: Final = frozenset(
    {
        "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Slice",
        "Gather", "GatherElements", "GatherND", "Expand", "Split", "Tile", "ReverseSequence",
        "DepthToSpace", "SpaceToDepth", "Compress",
    }
)  # fmt: skip
"""Ops that only move elements: they run on the bits, exactly."""


def _unwrap(v: Any, bits: bool) -> Any:
    if isinstance(v, LowP):
        return v.bits if bits else decode(v)
    if isinstance(v, np.ndarray) and is_lowp_dtype(v.dtype):
        return bits_array(v) if bits else decode_array(v)
    return v


def run_with_lowp(definition: OpDef, ctx: NodeCtx, ins: Sequence[Value | None]) -> Any:
    """Run a lowering on inputs that may be low-precision: movement ops on the bits, the rest
    on decoded values with their results of the type encoded again (one rounding per op)."""
    kinds: set[np.dtype[Any]] = {v.dtype for v in ins if isinstance(v, LowP | np.ndarray) and is_lowp(v)}
    if ctx.op_type in AWARE or not kinds:
        return definition.fn(ctx, list(ins))
    if len(kinds) > 1:
        names = ", ".join(sorted(k.name for k in kinds))
        raise ctx.fail(f"mixes low-precision types {names}; cast them to one first")
    (dtype,) = kinds
    movement = ctx.op_type in MOVEMENT
    result = definition.fn(ctx, [_unwrap(v, movement) for v in ins])
    outs = list(result) if isinstance(result, list | tuple) else [result]
    return [_rewrap(v, dtype, movement) for v in outs]


def _rewrap(v: Any, dtype: np.dtype[Any], movement: bool) -> Any:
    """An op's result back in the low-precision type when it is of the carrier dtype."""
    carrier = storage_dtype(dtype) if movement else compute_dtype(dtype)
    if isinstance(v, Tensor) and v.dtype == carrier:
        return LowP(v, dtype) if movement else encode(v, dtype)
    if isinstance(v, np.ndarray) and v.dtype == carrier.np:
        return v.view(dtype) if movement else encode_array(v, dtype)
    return v
