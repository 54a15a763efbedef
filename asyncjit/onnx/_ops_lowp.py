"""Casts, bit casts and (de)quantization across every ONNX element type.

These lowerings take low-precision values (``_lowp.LowP``: bfloat16, float8, float4, int4/2)
themselves; the conversions are ``_lowp``'s, exact against ``ml_dtypes`` and so against ONNX's
reference. ``QuantizeLinear``/``DequantizeLinear`` follow the reference implementation step for
step (its numpy type promotion included): per-tensor, per-axis and blocked scales, every output
type, ``saturate``, ``output_dtype`` and ``precision``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._lowp import (
    FLOAT8_SATURATING,
    LowP,
    compute_dtype,
    decode,
    encode,
    encode_e8m0,
    is_lowp,
    is_lowp_dtype,
    lowp_value,
    storage_dtype,
)
from ._registry import NodeCtx, op
from ._values import Sym, Value, as_tensor, np_dtype

_INT_RANGES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}


def dtype_of(v: Value | LowP) -> np.dtype[Any]:
    """The numpy (or ``ml_dtypes``) dtype of any value."""
    if isinstance(v, LowP | np.ndarray | Sym):
        return v.dtype
    return v.dtype.np


def _decoded(n: NodeCtx, v: Value | LowP | None) -> Tensor:
    """A value as a tensor that asyncjit computes with (low precision decoded exactly)."""
    if v is None:
        raise n.fail("a required input is missing")
    return decode(lowp_value(v)) if is_lowp(v) else as_tensor(v)  # type: ignore[arg-type]


def convert(
    n: NodeCtx, v: Value | LowP | None, to: np.dtype[Any], *, saturate: bool, round_mode: str = "up"
) -> Value | LowP:
    """``v`` converted to ``to`` as ONNX's ``Cast`` converts (its reference, bit for bit)."""
    if v is None:
        raise n.fail("a required input is missing")
    if not is_lowp(v) and not is_lowp_dtype(to):
        if isinstance(v, Sym) and to.kind in "iu":
            return Sym(v.values, to)
        if isinstance(v, np.ndarray) and to.kind in "iufb" and v.dtype.kind in "iufb":
            with np.errstate(all="ignore"):
                if v.dtype.kind == "f" and to.kind in "iu":
                    return np.trunc(np.nan_to_num(v)).astype(to)  # type: ignore[no-any-return]
                return v.astype(to)
        return n.t(v).cast(dt.from_numpy(to))  # type: ignore[arg-type]
    if dtype_of(v) == to:
        return lowp_value(v)
    x = _decoded(n, v)
    if to.name == "float8_e8m0fnu":
        return encode_e8m0(x, to, saturate=saturate, round_mode=round_mode)
    if is_lowp_dtype(to):
        return encode(x, to, saturate=saturate)
    return x.cast(dt.from_numpy(to))


@op("Cast")
def _cast(n: NodeCtx, ins: list[Value | None]) -> Value:
    to = np_dtype(n.attr("to"))
    out = convert(n, ins[0], to, saturate=n.flag("saturate", 1), round_mode=n.attr("round_mode", "up"))
    return out  # type: ignore[return-value]


@op("CastLike")
def _cast_like(n: NodeCtx, ins: list[Value | None]) -> Value:
    if ins[1] is None:
        raise n.fail("target_type is missing")
    to = dtype_of(ins[1])
    out = _folded(
        convert(n, ins[0], to, saturate=n.flag("saturate", 1), round_mode=n.attr("round_mode", "up")),
        ins[0],
    )
    return out  # type: ignore[return-value]


def _folded(out: Value | LowP, source: Value | None) -> Value | LowP:
    """A conversion of a constant, computed now: ``CastLike``'s target is often a run-time
    tensor (the tracer folds only nodes whose inputs are all constants), and a later
    ``Pad``/``Clip`` may need the value at load time."""
    if not isinstance(source, np.ndarray):
        return out
    from ..reference import evaluate

    if isinstance(out, LowP):
        return evaluate(out.bits).view(out.dtype)
    return evaluate(out) if isinstance(out, Tensor) else out


@op("BitCast")
def _bitcast(n: NodeCtx, ins: list[Value | None]) -> Value:
    v = ins[0]
    if v is None:
        raise n.fail("a required input is missing")
    to, src = np_dtype(n.attr("to")), dtype_of(v)
    if to.itemsize != src.itemsize:
        raise n.fail(
            f"BitCast needs types of one width: {src} is {src.itemsize * 8} bits, {to} {to.itemsize * 8}"
        )
    bits = lowp_value(v).bits if is_lowp(v) else as_tensor(v)
    if bits.dtype.is_bool:
        bits = bits.cast(dt.uint8)
    if is_lowp_dtype(to):
        return LowP(bits.bitcast(storage_dtype(to)), to)  # type: ignore[return-value]
    target = dt.from_numpy(to)
    return bits.cast(target) if target.is_bool else bits.bitcast(target)


# -- quantization -----------------------------------------------------------------------------


def _param(n: NodeCtx, v: Tensor, shape: tuple[Any, ...], block: int) -> Tensor:
    """A scale or zero point broadcastable against ``x``: per tensor, per axis or blocked
    (each element repeated ``block`` times along ``axis``, the last block cut short)."""
    if v.ndim == 0:
        return v
    if all(isinstance(d, int) and d == 1 for d in v.shape):
        return v.reshape(())
    axis = _axis(n, len(shape))
    if not block:
        if v.ndim != 1:
            raise n.fail(f"a per-axis scale or zero point must be 1-D, got shape {v.shape}")
        dims: list[Any] = [1] * len(shape)
        dims[axis] = v.shape[0]
        return v.reshape(*dims)
    if block < 0 or v.ndim != len(shape):
        raise n.fail(f"blocked quantization needs block_size > 0 and a rank-{len(shape)} scale")
    nb = v.shape[axis]
    grown = v.unsqueeze(axis + 1).expand(*v.shape[: axis + 1], block, *v.shape[axis + 1 :])
    grown = grown.reshape(*v.shape[:axis], nb * block, *v.shape[axis + 1 :])
    index = (slice(None),) * axis + (slice(0, shape[axis]),)
    out: Tensor = grown[index]
    if out.shape != tuple(shape):
        raise n.fail(f"blocked scale shape {v.shape} does not fit input shape {tuple(shape)}")
    return out


def _axis(n: NodeCtx, ndim: int) -> int:
    """The quantization axis, checked only where a per-axis or blocked parameter uses it."""
    axis = int(n.attr("axis", 1))
    if not -ndim <= axis < ndim:
        raise n.fail(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


@op("QuantizeLinear")
def _quantize(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, scale = ins[0], ins[1] if len(ins) > 1 else None
    zp = ins[2] if len(ins) > 2 else None
    if x is None or scale is None:
        raise n.fail("x and y_scale are required")
    shape = tuple(x.shape)
    block = int(n.attr("block_size", 0))
    out_attr = n.attr("output_dtype", 0)
    if zp is not None:
        target = dtype_of(zp)
        if out_attr and np_dtype(out_attr) != target:
            raise n.fail(f"output_dtype {np_dtype(out_attr)} differs from the zero point's type {target}")
    else:
        target = np_dtype(out_attr) if out_attr else np.dtype(np.uint8)
    scale_b = _param(n, _decoded(n, scale), shape, block)
    xt = _decoded(n, x)
    q = _quantize_div(n, x, xt, scale, scale_b)
    if target.name in _INT_RANGES:
        lo, hi = _INT_RANGES[target.name]
        qi = rint(q).cast(dt.int32)
        if zp is not None:
            qi = qi + _param(n, _decoded(n, zp).cast(dt.int32), shape, block)
        qi = qi.clip(lo, hi)
        return encode(qi, target) if is_lowp_dtype(target) else qi.cast(dt.from_numpy(target))  # type: ignore[return-value]
    if target.name in FLOAT8_SATURATING:  # the zero point is ignored (it must be 0)
        return encode(q, target, saturate=n.flag("saturate", 1))  # type: ignore[return-value]
    if target.name == "float4_e2m1fn":
        if zp is not None:
            q = q.cast(dt.float32) + _param(n, _decoded(n, zp), shape, block)
        return encode(q, target)  # type: ignore[return-value]
    raise n.fail(f"cannot quantize to {target}")


def _quantize_div(n: NodeCtx, x: Value, xt: Tensor, scale: Value, scale_b: Tensor) -> Tensor:
    """``x / scale`` (scale broadcast) in the type the reference computes it in."""
    precision = n.attr("precision", 0)
    if precision:
        want = np_dtype(precision)
        if is_lowp_dtype(want):
            raise n.fail(f"precision {want} is not supported; use float32")
        target = dt.from_numpy(want)
        return xt.cast(target) / scale_b.cast(target)
    xd, sd = dtype_of(x), dtype_of(scale)
    if is_lowp(x) or is_lowp(scale):
        wide = dt.float64 if dt.float64 in (xt.dtype, scale_b.dtype) else dt.float32
        q = xt.cast(wide) / scale_b.cast(wide)
        return decode(encode(q, xd)) if xd == sd else q  # one low-precision type: rounded to it
    return xt / scale_b


def rint(x: Tensor) -> Tensor:
    """numpy's ``rint``: to the nearest integer, ties to even. Adding 2**23 (2**52 in float64) to
    a smaller magnitude leaves no fraction bits, so the float addition itself rounds; larger
    magnitudes are integers already. float16 computes in float32 (exact)."""
    x = x.cast(dt.float32) if x.dtype == dt.float16 else x
    big = 2.0**52 if x.dtype == dt.float64 else 2.0**23
    mag = x.abs()
    rounded = (mag + big) - big
    signed = Tensor.select(x < 0.0, -rounded, rounded)
    return Tensor.select((mag < big) & (x != 0.0), signed, x)  # +-0 and the rest stay as they are


@op("DequantizeLinear")
def _dequantize(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, scale = ins[0], ins[1] if len(ins) > 1 else None
    zp = ins[2] if len(ins) > 2 else None
    if x is None or scale is None:
        raise n.fail("x and x_scale are required")
    shape = tuple(x.shape)
    block = int(n.attr("block_size", 0))
    xd = dtype_of(x)
    xt = _decoded(n, x)
    if is_lowp_dtype(xd) and compute_dtype(xd) == dt.float32:  # float8/float4: no zero point
        dx = xt
    elif zp is not None:
        zt = _param(n, _decoded(n, zp), shape, block)
        # numpy: float32 minus an int32 zero point is float64
        wide = dt.float64 if zt.dtype.itemsize >= 4 and zt.dtype.is_int else dt.float32
        dx = xt.cast(dt.float32).cast(wide) - zt.cast(wide)
    else:
        dx = xt.cast(dt.float32)
    s = _param(n, _decoded(n, scale), shape, block)
    wide = dt.float64 if dt.float64 in (dx.dtype, s.dtype) else dt.float32
    y = dx.cast(wide) * s.cast(wide)
    out_attr = n.attr("output_dtype", 0)
    out = np_dtype(out_attr) if out_attr else dtype_of(scale)
    return encode(y, out) if is_lowp_dtype(out) else y.cast(dt.from_numpy(out))  # type: ignore[return-value]
