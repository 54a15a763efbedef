"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, casts.

Int arithmetic on load-time values (``np.ndarray``/``Sym``) is evaluated here, so the shape
sub-graphs of exported models fold into symbolic dims; everything else records ``Tensor`` ops.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..symbolic import Expr, bounds, smax, smin
from ..tensor import Tensor
from ._registry import NodeCtx, op
from ._values import Sym, Value, make_int_array

__all__ = ["round_half_even"]


def _sym_binary(fn: Callable[[Any, Any], Any], a: Value, b: Value) -> Value | None:
    """``fn`` over two load-time int arrays, one at least symbolic; None if it cannot fold."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return None
    if not (isinstance(a, Sym) or isinstance(b, Sym)):
        return None
    va = a.values if isinstance(a, Sym) else a.astype(object)
    vb = b.values if isinstance(b, Sym) else b.astype(object)
    if va.dtype.kind != "O" and va.dtype.kind not in "iu":
        return None
    try:
        out = np.frompyfunc(fn, 2, 1)(va, vb)
    except (TypeError, ZeroDivisionError):
        return None
    out = np.asarray(out, dtype=object)
    dtype = a.dtype if isinstance(a, Sym) else b.dtype
    if any(isinstance(e, bool | np.bool_) for e in out.reshape(-1)):
        return np.asarray(out, dtype=bool)
    return make_int_array(out, dtype)


def _sym_eq(x: Any, y: Any) -> bool:
    if isinstance(x, Expr) or isinstance(y, Expr):
        if x == y:
            return True
        lo, hi = bounds(x - y)
        if lo > 0 or hi < 0:
            return False
        raise TypeError("undecidable")
    return bool(x == y)


def _sym_cmp(fn: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def cmp(x: Any, y: Any) -> bool:
        if isinstance(x, Expr) or isinstance(y, Expr):
            lo, hi = bounds(x - y)
            if fn(lo, 0) == fn(hi, 0):
                return fn(lo, 0)
            raise TypeError("undecidable")
        return bool(fn(x, y))

    return cmp


def _trunc_div(x: Any, y: Any) -> Any:
    if isinstance(x, Expr) or isinstance(y, Expr):
        if bounds(x)[0] >= 0 and isinstance(y, int) and y > 0:
            return x // y
        raise TypeError("undecidable")
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


def _promote(n: NodeCtx, a: Value | None, b: Value | None) -> tuple[Tensor, Tensor]:
    x, y = n.t(a), n.t(b)
    if x.dtype != y.dtype:  # ONNX requires equal types; mixed ones come from our own folding
        target = dt.result_type(x.dtype, y.dtype)
        x, y = x.cast(target), y.cast(target)
    return x, y


def _binary(name: str, sym: Callable[[Any, Any], Any] | None, fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    def lower(n: NodeCtx, ins: list[Value | None]) -> Value:
        a, b = ins[0], ins[1]
        if sym is not None and a is not None and b is not None:
            folded = _sym_binary(sym, a, b)
            if folded is not None:
                return folded
        if n.opset < 7 and n.attr("broadcast", 0) and n.attr("axis") is not None:
            x, y = _promote(n, a, b)
            axis = n.attr("axis") % x.ndim
            y = y.reshape(*y.shape, *([1] * (x.ndim - axis - y.ndim)))
            return fn(x, y)
        x, y = _promote(n, a, b)
        return fn(x, y)

    op(name)(lower)


def _int_div(x: Tensor, y: Tensor) -> Tensor:
    if not x.dtype.is_int:
        return x / y
    q = x // y  # floor; ONNX truncates toward zero
    if x.dtype.is_unsigned:
        return q
    zero = Tensor.const(np.zeros((), x.dtype.np))
    fix = ((x % y) != zero) & ((x < zero) ^ (y < zero))
    return Tensor.select(fix, q + Tensor.const(np.ones((), x.dtype.np)), q)


def _pow(x: Tensor, y: Tensor) -> Tensor:
    return x.pow(y)


_binary("Add", operator.add, lambda x, y: x + y)
_binary("Sub", operator.sub, lambda x, y: x - y)
_binary("Mul", operator.mul, lambda x, y: x * y)
_binary("Div", _trunc_div, _int_div)
_binary("Equal", _sym_eq, lambda x, y: x == y)
_binary("Less", _sym_cmp(operator.lt), lambda x, y: x < y)
_binary("LessOrEqual", _sym_cmp(operator.le), lambda x, y: x <= y)
_binary("Greater", _sym_cmp(operator.gt), lambda x, y: x > y)
_binary("GreaterOrEqual", _sym_cmp(operator.ge), lambda x, y: x >= y)
_binary("And", None, lambda x, y: x & y)
_binary("Or", None, lambda x, y: x | y)
_binary("Xor", None, lambda x, y: x ^ y)
_binary("BitwiseAnd", None, lambda x, y: x & y)
_binary("BitwiseOr", None, lambda x, y: x | y)
_binary("BitwiseXor", None, lambda x, y: x ^ y)


@op("Pow")
def _pow_op(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, y = n.t(ins[0]), n.t(ins[1])
    if x.dtype.is_float:
        if isinstance(ins[1], np.ndarray) and ins[1].size == 1 and float(ins[1].reshape(-1)[0]) == 2.0:
            return x * x
        return x.pow(y.cast(x.dtype))
    # integer base: compute in float and round back (exact for the small values tests use)
    return x.cast(dt.float32).pow(y.cast(dt.float32)).cast(x.dtype)


@op("Mod")
def _mod(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, y = _promote(n, ins[0], ins[1])
    if n.attr("fmod", 0):
        if x.dtype.is_int:
            r = x % y  # floor mod -> C fmod: sign of the dividend
            return Tensor.select((r != 0) & ((r < 0) ^ (x < 0)), r - y, r)
        q = x / y
        q = Tensor.select(q < 0, q.ceil(), q.floor())
        return x - q * y
    return x % y


def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[NodeCtx, list[Value | None]], Value]:
    def lower(n: NodeCtx, ins: list[Value | None]) -> Value:
        vals = [v for v in ins if v is not None]
        if all(isinstance(v, np.ndarray | Sym) for v in vals) and any(isinstance(v, Sym) for v in vals):
            pick = smax if n.op_type == "Max" else smin if n.op_type == "Min" else None
            if pick is not None:
                out: Value | None = vals[0]
                for v in vals[1:]:
                    out = _sym_binary(lambda p, q: pick(p, q), out, v) if out is not None else None
                if out is not None:
                    return out
        acc = n.t(vals[0])
        for v in vals[1:]:
            acc, other = _promote(n, acc, v)
            acc = fn(acc, other)
        return acc

    return lower


op("Max")(_variadic(lambda x, y: x.maximum(y)))
op("Min")(_variadic(lambda x, y: x.minimum(y)))
op("Sum")(_variadic(lambda x, y: x + y))


@op("Mean")
def _mean(n: NodeCtx, ins: list[Value | None]) -> Value:
    total = _variadic(lambda x, y: x + y)(n, ins)
    return n.t(total) / float(len([v for v in ins if v is not None]))


def _unary(name: str, fn: Callable[[Tensor], Tensor], since: int = 1) -> None:
    op(name, since=since)(lambda n, ins: fn(n.t(ins[0])))


def _keep(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """Compute in float, return the input dtype (float16 stays float16)."""
    return lambda x: fn(x).cast(x.dtype)


_unary("Neg", lambda x: -x)
_unary("Abs", lambda x: x.abs())
_unary("Exp", _keep(lambda x: x.exp()))
_unary("Log", _keep(lambda x: x.log()))
_unary("Sqrt", _keep(lambda x: x.sqrt()))
_unary("Reciprocal", _keep(lambda x: x.reciprocal()))
_unary("Tanh", _keep(lambda x: x.tanh()))
_unary("Sigmoid", _keep(lambda x: x.sigmoid()))
_unary("Relu", lambda x: x.relu())
_unary("Sin", _keep(lambda x: x.sin()))
_unary("Cos", _keep(lambda x: x.cos()))
_unary("Tan", _keep(lambda x: x.sin() / x.cos()))
_unary("Erf", _keep(lambda x: x.erf()))
_unary("Floor", lambda x: x.floor())
_unary("Ceil", lambda x: x.ceil())
_unary("Not", lambda x: x.logical_not())
_unary("Sign", lambda x: (x > 0).cast(x.dtype) - (x < 0).cast(x.dtype))
_unary("Softsign", lambda x: x / (x.abs() + 1.0))
_unary("Softplus", _keep(lambda x: softplus(_wide(x))))
_unary("IsNaN", lambda x: x != x)
_unary("Sinh", _keep(lambda x: (x.exp() - (-x).exp()) * 0.5))
_unary("Cosh", _keep(lambda x: (x.exp() + (-x).exp()) * 0.5))


def log1p(u: Tensor) -> Tensor:
    """``log(1 + u)`` without losing a small ``u``: ``log(w) * u / (w - 1)`` with ``w = 1 + u``
    rounded (Goldberg's correction), and ``u`` itself where ``w`` rounds to 1 or ``u`` is inf."""
    w = u + 1.0
    d = w - 1.0
    return Tensor.select((d == 0.0) | (u == math.inf), u, w.log() * (u / d))


def _wide(x: Tensor) -> Tensor:
    """``x`` in float32 unless it is float32 or float64: a float16 square overflows from 256."""
    return x if x.dtype in (dt.float32, dt.float64) else x.cast(dt.float32)


def _far(x: Tensor) -> float:
    """Where ``log(2|x|)`` is the inverse hyperbolic function to the dtype's precision: the next
    term, ``1 / (4 x^2)``, is below half an ulp of it."""
    return float(2**28) if x.dtype == dt.float64 else 4096.0


def _odd(x: Tensor, magnitude: Tensor) -> Tensor:
    """``magnitude`` with ``x``'s sign; ``x`` itself at zero (so -0.0 stays -0.0) and NaN."""
    return Tensor.select(x == 0.0, x, Tensor.select(x < 0.0, -magnitude, magnitude))


def _asinh(x: Tensor) -> Tensor:
    """``log(|x| + sqrt(x^2 + 1))`` as ``log1p(a + a^2 / (1 + sqrt(1 + a^2)))`` (exact for small
    ``a``, no cancellation for negative ``x``), ``log(a) + ln 2`` for large ``a`` (no overflow)."""
    xf = _wide(x)
    a = xf.abs()
    far = _far(xf)
    s = a.minimum(far)  # the near form's argument: its square stays finite
    near = log1p(s + s * s / ((s * s + 1.0).sqrt() + 1.0))
    return _odd(xf, Tensor.select(a > far, a.log() + math.log(2.0), near)).cast(x.dtype)


def _acosh(x: Tensor) -> Tensor:
    """``log1p(t + sqrt(t (t + 2)))`` with ``t = x - 1`` near 1, ``log(x) + ln 2`` far out;
    NaN below 1."""
    xf = _wide(x)
    far = _far(xf)
    t = xf.minimum(far) - 1.0
    near = log1p(t + (t * (t + 2.0)).sqrt())
    return Tensor.select(xf > far, xf.log() + math.log(2.0), near).cast(x.dtype)


def _atanh(x: Tensor) -> Tensor:
    """``0.5 log1p(2a / (1 - a))`` of ``a = |x|`` with ``x``'s sign, the argument written
    ``2a + 2a^2 / (1 - a)`` below one half: ``2a`` is exact and the rounded division lands only
    in the small second term (the one-division form was 3 ulps off near 1e-8)."""
    xf = _wide(x)
    a = xf.abs()
    t = a + a
    u = Tensor.select(a < 0.5, t + t * a / (1.0 - a), t / (1.0 - a))
    return _odd(xf, log1p(u) * 0.5).cast(x.dtype)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``: no overflow, and ``exp(x)``
    itself far below 0 (where ``log(1 + tiny)`` rounds to 0)."""
    return x.maximum(0.0) + log1p((-x.abs()).exp())


_unary("Asinh", _asinh)
_unary("Acosh", _acosh)
_unary("Atanh", _atanh)
_unary(
    "BitwiseNot",
    lambda x: x ^ Tensor.const(np.invert(np.zeros((), x.dtype.np))) if x.dtype.is_int else x.logical_not(),
)


def _atan(x: Tensor) -> Tensor:
    """arctan by argument reduction to |x| <= tan(pi/12) and a short odd series (float32 exact)."""
    s = (x > 0).cast(x.dtype) - (x < 0).cast(x.dtype)
    a = x.abs()
    big = a > 1.0
    a = Tensor.select(big, 1.0 / a.maximum(1e-30), a)
    t = math.tan(math.pi / 12)
    mid = a > t
    r = Tensor.select(mid, (a - t) / (a * t + 1.0), a)
    r2 = r * r
    series = r * (1.0 + r2 * (-1.0 / 3 + r2 * (1.0 / 5 + r2 * (-1.0 / 7 + r2 * (1.0 / 9)))))
    series = Tensor.select(mid, series + math.pi / 12, series)
    series = Tensor.select(big, math.pi / 2 - series, series)
    return s * series


_unary("Atan", _keep(_atan))
_unary("Asin", _keep(lambda x: _atan(x / (1.0 - x * x).maximum(0.0).sqrt().maximum(1e-30))))
_unary("Acos", _keep(lambda x: math.pi / 2 - _atan(x / (1.0 - x * x).maximum(0.0).sqrt().maximum(1e-30))))


@op("Round")
def _round(n: NodeCtx, ins: list[Value | None]) -> Value:
    return round_half_even(n.t(ins[0]))


def round_half_even(x: Tensor) -> Tensor:
    """numpy's ``rint``: halves round to the even neighbour."""
    f = x.floor()
    diff = x - f
    even = (f - (f / 2.0).floor() * 2.0) == 0.0
    up = (diff > 0.5) | ((diff == 0.5) & ~even)
    return Tensor.select(up, f + 1.0, f)


@op("IsInf")
def _isinf(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    pos, neg = n.flag("detect_positive", 1), n.flag("detect_negative", 1)
    out = Tensor.zeros(x.shape, dt.bool_)
    if pos:
        out = out | (x == float("inf"))
    if neg:
        out = out | (x == float("-inf"))
    return out


@op("Identity", "Dropout")
def _identity(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x = ins[0]
    if n.op_type == "Dropout" and len(n.proto.output) > 1:
        return [x, Tensor.ones(n.t(x).shape, dt.bool_)]
    return [x]


@op("Clip")
def _clip6(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x.maximum(n.attr("min", -3.4028234663852886e38)).minimum(n.attr("max", 3.4028234663852886e38))


@op("Clip", since=11)
def _clip(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    if len(ins) > 1 and ins[1] is not None:
        x = x.maximum(n.t(ins[1]).cast(x.dtype))
    if len(ins) > 2 and ins[2] is not None:
        x = x.minimum(n.t(ins[2]).cast(x.dtype))
    return x


@op("Where")
def _where(n: NodeCtx, ins: list[Value | None]) -> Value:
    c, a, b = ins[0], ins[1], ins[2]
    if (
        isinstance(c, np.ndarray)
        and c.size == 1
        and c.ndim == 0
        and not isinstance(a, Tensor)
        and not isinstance(b, Tensor)
    ):
        return a if bool(c) else b  # type: ignore[return-value]
    x, y = _promote(n, a, b)
    return Tensor.select(n.t(c).cast(dt.bool_), x, y)


# -- activations ---------------------------------------------------------------------------------
@op("LeakyRelu")
def _leaky(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return Tensor.select(x < 0, x * n.attr("alpha", 0.01), x)


@op("PRelu")
def _prelu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, slope = _promote(n, ins[0], ins[1])
    if n.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        slope = slope.reshape(slope.shape[0], *([1] * (x.ndim - 2)))  # one slope per channel
    return Tensor.select(x < 0, x * slope, x)


@op("Elu")
def _elu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return Tensor.select(x < 0, (x.exp() - 1.0) * n.attr("alpha", 1.0), x)


@op("Celu")
def _celu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    alpha = n.attr("alpha", 1.0)
    # alpha inside the minimum, as the spec writes it: the same for alpha > 0, but a negative
    # alpha flips the sign before the minimum, and alpha = 0 gives 0 * inf = NaN there
    return x.maximum(0.0) + (((x / alpha).exp() - 1.0) * alpha).minimum(0.0)  # type: ignore[no-any-return]


@op("Selu")
def _selu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    alpha, gamma = n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    return Tensor.select(x <= 0, (x.exp() * alpha - alpha) * gamma, x * gamma)


@op("ThresholdedRelu")
def _thresholded(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return Tensor.select(x > n.attr("alpha", 1.0), x, 0.0)


@op("HardSigmoid")
def _hard_sigmoid(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return (x * n.attr("alpha", 0.2) + n.attr("beta", 0.5)).clip(0.0, 1.0)  # type: ignore[no-any-return]


@op("HardSwish")
def _hard_swish(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x * (x * (1.0 / 6.0) + 0.5).clip(0.0, 1.0)


@op("Mish")
def _mish(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x * softplus(x).tanh()


@op("Gelu", since=20)
def _gelu(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x.gelu(approximate=n.attr("approximate", "none")).cast(x.dtype)


@op("Shrink")
def _shrink(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    lambd, bias = n.attr("lambd", 0.5), n.attr("bias", 0.0)
    return Tensor.select(
        x < -lambd, x + bias, Tensor.select(x > lambd, x - bias, Tensor.zeros(x.shape, x.dtype))
    )


def _scalar(value: int, dtype: dt.DType) -> Tensor:
    """``value`` modulo 2**bits, as a constant of the int ``dtype`` (two's complement)."""
    bits = 8 * dtype.itemsize
    unsigned = np.array(value % (1 << bits), dtype=f"u{dtype.itemsize}")
    return Tensor.const(unsigned.view(dtype.np))


def _pow2(y: Tensor) -> Tensor:
    """``2**y`` modulo 2**bits for ``0 <= y < bits``: a product over the bits of ``y``."""
    bits = 8 * y.dtype.itemsize
    one = _scalar(1, y.dtype)
    factor: Tensor | None = None
    for k in range(bits.bit_length() - 1):
        term = Tensor.select(
            (y & _scalar(1 << k, y.dtype)) != _scalar(0, y.dtype), _scalar(1 << (1 << k), y.dtype), one
        )
        factor = term if factor is None else factor * term
    assert factor is not None
    return factor


@op("BitShift")
def _bitshift(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, y = _promote(n, ins[0], ins[1])
    if not x.dtype.is_int:
        raise n.fail(f"BitShift needs integer operands, got {x.dtype.name}")
    bits = 8 * x.dtype.itemsize
    zero = _scalar(0, x.dtype)
    signed = not x.dtype.is_unsigned
    # shifting by a negative amount or by the width or more: every bit is shifted out
    valid = ((y >= zero) & (y < _scalar(bits, x.dtype))) if signed else y < _scalar(bits, x.dtype)
    factor = _pow2(Tensor.select(valid, y, zero))
    if n.attr("direction") in ("LEFT", b"LEFT"):
        return Tensor.select(valid, x * factor, zero)  # wraps modulo 2**bits, as a shift does
    if not signed:
        return Tensor.select(valid, x // factor, zero)
    # an arithmetic shift is a floor division; by bits - 1 or more only the sign is left
    spread = Tensor.select(x < zero, _scalar(-1, x.dtype), zero)
    return Tensor.select(valid & (y < _scalar(bits - 1, x.dtype)), x // factor, spread)
