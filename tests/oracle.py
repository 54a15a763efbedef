"""The numpy oracle of ``tests/strategies.py``'s random graphs, written independently of
``asyncjit.graph._ops``: dtype promotion, rounding, casts and every op kind's meaning."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncjit import Tensor

NP_TYPES = {
    "bool": np.bool_,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.float16,
    "float32": np.float32,
}


def _promote2(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    """numpy's promotion, but an int meeting a float takes the float (as JAX) and uint64 with a
    signed int gives int64 (numpy goes to float64): the two places the spec parts from numpy."""
    if a.kind == "f" and b.kind in "biu":
        return a
    if b.kind == "f" and a.kind in "biu":
        return b
    if {a.kind, b.kind} == {"i", "u"} and np.dtype(np.uint64) in (a, b):
        return np.dtype(np.int64)
    return np.promote_types(a, b)


def promote(*dtypes: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of a binary op on arrays of ``dtypes`` (every dtype, any mix)."""
    out = np.dtype(dtypes[0])
    for d in dtypes[1:]:
        out = _promote2(out, np.dtype(d))
    return out


def weak_dtype(value: object, other: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a Python scalar takes next to an array of dtype ``other``."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return np.dtype(np.int32) if other == np.bool_ else other
    return other if other.kind == "f" else np.dtype(np.float32)


def round_to(value: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Round a float64 result to ``dtype`` (floats go through float32, as the spec says)."""
    with np.errstate(all="ignore"):
        if dtype.kind == "f":
            return np.asarray(value).astype(np.float32).astype(dtype)
        return np.asarray(value).astype(dtype)


def oracle_cast(x: np.ndarray, to: np.dtype[Any]) -> np.ndarray:
    """Saturating float->int (NaN -> 0), ``!= 0`` to bool, wrapping int->int."""
    to = np.dtype(to)
    if to == np.bool_:
        return np.asarray(x != 0)
    with np.errstate(all="ignore"):
        if to.kind in "iu" and x.dtype.kind == "f":
            bits = to.itemsize * 8 - (1 if to.kind == "i" else 0)  # value bits
            y = np.trunc(x.astype(np.float64))
            y = np.where(np.isnan(y), 0.0, y)
            least = -(2.0**bits) if to.kind == "i" else 0.0
            big, small = y >= 2.0**bits, y < least
            inside = np.where(big | small, 0.0, y).astype(to)
            top, bottom = np.array(2**bits - 1, to), np.array(int(least), to)
            return np.where(big, top, np.where(small, bottom, inside)).astype(to)
        return x.astype(to)


def _erf(x: np.ndarray) -> np.ndarray:
    flat = [math.erf(float(v)) for v in x.ravel()]
    return np.array(flat, dtype=np.float64).reshape(x.shape)


def _erfc(x: np.ndarray) -> np.ndarray:
    flat = [math.erfc(float(v)) for v in x.ravel()]
    return np.array(flat, dtype=np.float64).reshape(x.shape)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _at_neg_inf(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """gelu's limit at -inf is -0.0 (the formula gives -inf * 0 = NaN)."""
    return np.where(x == -np.inf, -0.0, y)


FLOAT_UNARY_ORACLE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "sin": np.sin,
    "cos": np.cos,
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    # gelu without cancellation for negative x: 1 + erf(z) = erfc(-z), (1 + tanh(u))/2 = 1/(1 + e^-2u)
    "gelu": lambda x: _at_neg_inf(x, 0.5 * x * _erfc(-x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: _at_neg_inf(
        x, x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
}
ANY_UNARY_ORACLE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "abs": np.abs,
    "relu": lambda x: np.where((x > 0) | (x != x), x, np.zeros((), x.dtype)),  # NaN stays NaN
}


def unary_tensor(name: str, x: Tensor) -> Tensor:
    """Apply the ``Tensor`` method for an oracle unary name."""
    if name == "gelu_tanh":
        return x.gelu(approximate="tanh")
    if name == "neg":
        return -x
    return getattr(x, name)()  # type: ignore[no-any-return]


def oracle_unary(name: str, x: np.ndarray) -> np.ndarray:
    """The numpy meaning of ``unary_tensor(name, x)``."""
    with np.errstate(all="ignore"):
        if name in ANY_UNARY_ORACLE:
            return np.asarray(ANY_UNARY_ORACLE[name](x)).astype(x.dtype)
        if name in ("floor", "ceil") and x.dtype.kind != "f":
            return x
        xf = x if x.dtype.kind == "f" else oracle_cast(x, np.dtype(np.float32))
        return round_to(FLOAT_UNARY_ORACLE[name](xf.astype(np.float64)), xf.dtype)


def _int_floordiv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, np.ones((), y.dtype), y)
        return np.where(y == 0, np.zeros((), x.dtype), np.floor_divide(x, safe)).astype(x.dtype)


def _int_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, np.ones((), y.dtype), y)
        return np.where(y == 0, np.zeros((), x.dtype), np.mod(x, safe)).astype(x.dtype)


def _arith(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One primitive op on same-dtype arrays, rounded once."""
    dtype = x.dtype
    with np.errstate(all="ignore"):
        if dtype.kind == "f":
            a, b = x.astype(np.float64), y.astype(np.float64)
            fns: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
                "add": np.add,
                "sub": np.subtract,
                "mul": np.multiply,
                "div": np.true_divide,
                "pow": np.power,
                "maximum": np.maximum,
                "minimum": np.minimum,
            }
            return round_to(fns[op](a, b), dtype)
        ifns: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
            "add": np.add,
            "sub": np.subtract,
            "mul": np.multiply,
            "maximum": np.maximum,
            "minimum": np.minimum,
            "idiv": _int_floordiv,
            "mod": _int_mod,
        }
        return np.asarray(ifns[op](x, y)).astype(dtype)


def _float_divmod(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Python's float ``//`` and ``%`` (numpy's ``divmod``: the remainder is exact, so it is
    computed in the dtype itself; float16 through float32, rounded once)."""
    wide = np.float32 if x.dtype == np.float16 else x.dtype
    fn = np.floor_divide if name == "floordiv" else np.mod
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(wide), y.astype(wide))).astype(x.dtype)


BINARY_NAMES = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum",
    "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "xor",
)  # fmt: skip
_CMP = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}
_LOGIC = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def binary_tensor(name: str, x: Tensor | float | int, y: Tensor | float | int) -> Tensor:
    """Apply the Python operator (or method) for a binary name; one side may be a scalar."""
    import operator

    ops: dict[str, Callable[[Any, Any], Tensor]] = {
        "add": operator.add,
        "sub": operator.sub,
        "mul": operator.mul,
        "truediv": operator.truediv,
        "floordiv": operator.floordiv,
        "mod": operator.mod,
        "pow": operator.pow,
        "lt": operator.lt,
        "le": operator.le,
        "gt": operator.gt,
        "ge": operator.ge,
        "eq": operator.eq,
        "ne": operator.ne,
        "and": operator.and_,
        "or": operator.or_,
        "xor": operator.xor,
    }
    if name in ("maximum", "minimum"):
        if isinstance(x, Tensor):
            return getattr(x, name)(y)  # type: ignore[no-any-return]
        assert isinstance(y, Tensor)
        return getattr(y, name)(x)  # type: ignore[no-any-return]  # symmetric
    return ops[name](x, y)


def oracle_binary(name: str, x: np.ndarray | float | int, y: np.ndarray | float | int) -> np.ndarray:
    """The numpy meaning of ``binary_tensor(name, x, y)`` under asyncjit's promotion rules."""
    with np.errstate(over="ignore"):  # a weak 1e9 next to float16 is inf
        if not isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray)
            xa, ya = np.array(x, weak_dtype(x, y.dtype)), y
        elif not isinstance(y, np.ndarray):
            xa, ya = x, np.array(y, weak_dtype(y, x.dtype))
        else:
            xa, ya = x, y
    if name == "pow" and isinstance(y, int) and not isinstance(y, bool) and y == 2:
        return _arith("mul", xa, xa)
    if name in ("truediv", "pow"):
        # Tensor makes the tensor side float first, then promotes
        if isinstance(x, np.ndarray) and x.dtype.kind != "f":
            xa = oracle_cast(xa, np.dtype(np.float32))
            if not isinstance(y, np.ndarray):
                ya = np.array(y, weak_dtype(y, xa.dtype))
        if isinstance(y, np.ndarray) and not isinstance(x, np.ndarray) and y.dtype.kind != "f":
            ya = oracle_cast(ya, np.dtype(np.float32))
            xa = np.array(x, weak_dtype(x, ya.dtype))
    common = promote(xa.dtype, ya.dtype)
    xa, ya = oracle_cast(xa, common), oracle_cast(ya, common)
    xa, ya = np.broadcast_arrays(xa, ya)
    if name in _CMP:
        with np.errstate(all="ignore"):
            return np.asarray(_CMP[name](xa, ya))
    if name in _LOGIC:
        return np.asarray(_LOGIC[name](xa, ya)).astype(common)
    if name == "truediv":
        return _arith("div", xa, ya)
    if name == "pow":
        return _arith("pow", xa, ya)
    if name in ("floordiv", "mod"):
        if common.kind in "iu":
            return _arith("idiv" if name == "floordiv" else "mod", xa, ya)
        return _float_divmod(name, xa, ya)
    return _arith(name, xa, ya)


def oracle_reduce(op: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """sum/prod/max/min/mean with asyncjit's identities (bool sums as int32)."""
    if x.dtype == np.bool_:
        x = x.astype(np.int32)
    if op == "mean":
        xf = x if x.dtype.kind == "f" else oracle_cast(x, np.dtype(np.float32))
        total = oracle_reduce("sum", xf, axes, keepdims)
        count = math.prod(x.shape[a] for a in axes)
        with np.errstate(all="ignore"):
            return round_to(total.astype(np.float64) / count, xf.dtype)
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f":
            work = x.astype(np.float64)
            ident = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}[op]
        else:
            work = x
            info = np.iinfo(x.dtype)
            ident = {"sum": 0, "prod": 1, "max": int(info.min), "min": int(info.max)}[op]
        if op in ("sum", "prod"):
            fn = np.sum if op == "sum" else np.prod
            y = fn(work, axis=axes, keepdims=keepdims, dtype=work.dtype)
        else:
            fn2 = np.max if op == "max" else np.min
            y = fn2(work, axis=axes, keepdims=keepdims, initial=ident)
    return round_to(np.asarray(y), x.dtype)


def oracle_matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    common = promote(x.dtype, y.dtype)
    x, y = oracle_cast(x, common), oracle_cast(y, common)
    with np.errstate(all="ignore"):
        if common.kind == "f":
            return round_to(np.matmul(x.astype(np.float64), y.astype(np.float64)), common)
        return np.asarray(np.matmul(x, y)).astype(common)


def oracle_conv1d(
    x: np.ndarray, w: np.ndarray, stride: int, padding: tuple[int, int], dilation: int, groups: int
) -> np.ndarray:
    """Cross-correlation by explicit window indices (not the reference's per-tap loop)."""
    n, c, length = x.shape
    o, cg, k = w.shape
    xp = np.zeros((n, c, length + padding[0] + padding[1]))
    xp[:, :, padding[0] : padding[0] + length] = x
    span = dilation * (k - 1) + 1
    lout = (xp.shape[2] - span) // stride + 1
    lout = max(lout, 0)
    out = np.zeros((n, o, lout))
    og = o // groups
    if lout:
        taps = np.arange(lout)[:, None] * stride + np.arange(k)[None, :] * dilation  # [Lout, K]
        for g in range(groups):
            windows = xp[:, g * cg : (g + 1) * cg, :][:, :, taps]  # [N, cg, Lout, K]
            with np.errstate(all="ignore"):
                out[:, g * og : (g + 1) * og] = np.einsum(
                    "nclk,ock->nol", windows, w[g * og : (g + 1) * og].astype(np.float64)
                )
    return round_to(out, x.dtype)


def oracle_gather(x: np.ndarray, axis: int, idx: np.ndarray) -> np.ndarray:
    clamped = np.minimum(np.maximum(idx.astype(np.int64), 0), x.shape[axis] - 1)
    return np.take(x, clamped, axis=axis)


def oracle_scatter(x: np.ndarray, axis: int, idx: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = np.array(x, copy=True)
    moved_out, moved_src = np.moveaxis(out, axis, 0), np.moveaxis(src, axis, 0)
    for i, j in enumerate(idx.tolist()):
        if 0 <= j < out.shape[axis]:
            moved_out[j] = moved_src[i]
    return out


def oracle_nonzero(x: np.ndarray, size: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
    flat = np.atleast_1d(x)
    hits = [list(ix) for ix in np.ndindex(*flat.shape) if flat[ix] != 0]
    out = np.full((size, max(x.ndim, 1)), fill, np.int64)
    for row, ix in enumerate(hits[:size]):
        out[row] = ix
    return out, np.array(len(hits), np.int64)
