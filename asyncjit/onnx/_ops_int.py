"""Integer ops: MatMulInteger, ConvInteger and QLinearConv.

Integer matmuls run on the compiler's int32 matmul, so they wrap exactly as ONNX's int32
accumulators do. The conv kernel computes in floats, so integer convolutions run in float64, exact
for every sum below 2**53 (8-bit operands: any window of fewer than ~10**11 taps). QLinearConv
rescales in float64, as numpy promotes the int32 result against a float32 scale in ONNX's reference.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._ops_elementwise import round_half_even
from ._ops_nn import conv_node
from ._registry import NodeCtx, op
from ._values import Value

__all__: list[str] = []


def _minus_zero_point(q: Tensor, zp: Tensor | None, channel_axis: int | None = None) -> Tensor:
    """``q - zero_point`` in int32; a 1-D zero point runs along ``channel_axis`` of ``q``."""
    out = q.cast(dt.int32)
    if zp is None:
        return out
    z = zp.cast(dt.int32)
    if z.ndim == 1 and z.shape[0] != 1 and channel_axis is not None:
        z = z.reshape(*[z.shape[0] if a == channel_axis else 1 for a in range(q.ndim)])
    return out - z


def _opt(n: NodeCtx, ins: list[Value | None], i: int) -> Tensor | None:
    return n.t(ins[i]) if len(ins) > i and ins[i] is not None else None


@op("MatMulInteger", since=10)
def _matmul_integer(n: NodeCtx, ins: list[Value | None]) -> Value:
    a, b = n.t(ins[0]), n.t(ins[1])
    # a's zero point is per row (its second-to-last axis), b's per column (its last axis)
    a32 = _minus_zero_point(a, _opt(n, ins, 2), a.ndim - 2 if a.ndim >= 2 else None)
    b32 = _minus_zero_point(b, _opt(n, ins, 3), b.ndim - 1)
    return a32 @ b32


def _int_conv(n: NodeCtx, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """An integer convolution, exact (in float64, see the module docstring), as int32."""
    f64 = dt.float64
    return conv_node(n, x.cast(f64), w.cast(f64), bias.cast(f64) if bias is not None else None).cast(dt.int32)


@op("ConvInteger", since=10)
def _conv_integer(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, w = n.t(ins[0]), n.t(ins[1])
    x32 = _minus_zero_point(x, _opt(n, ins, 2))
    w32 = _minus_zero_point(w, _opt(n, ins, 3), 0)
    return _int_conv(n, x32, w32, None)


@op("QLinearConv", since=10)
def _qlinear_conv(n: NodeCtx, ins: list[Value | None]) -> Value:
    xt, wt = n.t(ins[0]), n.t(ins[3])
    x_scale, w_scale, y_scale = ins[1], ins[4], ins[6]
    y_zp = _opt(n, ins, 7)
    x32, w32 = _minus_zero_point(xt, _opt(n, ins, 2)), _minus_zero_point(wt, _opt(n, ins, 5), 0)
    acc = _int_conv(n, x32, w32, _opt(n, ins, 8))
    ws = n.t(w_scale).cast(dt.float64)
    if ws.ndim == 1 and ws.shape[0] != 1:
        ws = ws.reshape(1, ws.shape[0], *([1] * (acc.ndim - 2)))
    scale = n.t(x_scale).cast(dt.float64) * ws / n.t(y_scale).cast(dt.float64)
    out = acc.cast(dt.float64) * scale
    target = y_zp.dtype if y_zp is not None else xt.dtype
    if y_zp is not None:
        out = out + y_zp.cast(dt.float64)
    info = np.iinfo(target.np)  # type: ignore[type-var]
    return round_half_even(out.clip(float(info.min), float(info.max))).cast(target)
