"""The op registry: each op's shape/dtype rule and its reference numpy semantics.

The reference semantics *define* asyncjit: every compiler must reproduce them. Decisions that
numpy leaves open or that would be undefined behaviour in native code are fixed here:

* Elementwise ops take operands of one shape and dtype (``Tensor`` inserts broadcasts and casts);
  float16 ops compute in float32 and round once per op; float64 ops compute in float64.
* Integer ``idiv``/``mod`` floor like Python; division or modulo by zero gives 0 (no trap).
  Float ``idiv``/``mod`` are Python's (numpy's) ``//`` and ``%``: the remainder is exact (IEEE
  ``fmod`` moved by the divisor when the signs differ, so it takes the divisor's sign) and the
  quotient is the floor of the exact one (``1.0 // 0.1`` is 9); by zero they give ``x / 0``
  and NaN.
  Unsigned ints divide, compare, take max/min and widen as unsigned; ``neg`` wraps (``-1`` as
  uint8 is 255) and ``abs``/``relu`` are the identity.
* ``pow(x, 0)`` and ``pow(1, y)`` are 1 for every x and y, NaNs (signalling ones too) included (C99).
* ``bitcast`` reinterprets the bits of an element as another dtype of the same size (NaN
  payloads and signalling NaNs pass unchanged; no float arithmetic touches them).
* ``cast`` from float to int saturates (NaN -> 0, out-of-range -> the int's min/max), like
  LLVM's ``fptosi.sat``/``fptoui.sat`` (a negative float to an unsigned int is 0); int to
  narrower int, and between signed and unsigned, wraps; anything to bool is ``!= 0``.
* Integer ``add``/``sub``/``mul``/``neg``/``abs`` wrap (two's complement); ``INT_MIN // -1``
  wraps to ``INT_MIN`` and ``INT_MIN % -1`` is 0 (native code must not trap on them).
* ``maximum``/``minimum`` propagate NaN, as numpy does; so does ``relu`` (``max(x, 0)``).
* ``pad``'s constant value is converted to the tensor's dtype as ``cast`` would (2.7 -> 2 in
  int32, NaN -> 0, 1e10 -> int32 max, 1e10 -> float16 inf; ``cast_scalar``); a Python int too
  wide for int64 wraps.
* Transcendentals are defined on every float32, extremes included: ``sin``/``cos`` reduce any
  finite argument exactly (3e38 too), ``gelu(-inf)`` is its limit -0.0 in both forms,
  ``gelu(+inf)`` is inf; NaN in gives NaN out.
* ``gather`` clamps indices into range; ``scatter`` drops out-of-range indices and, for repeated
  indices, the last write wins. Negative indices are out of range too (no wrap-around from the
  end): gather reads row 0 for them, scatter ignores them. Data never steers native code outside
  a buffer. Indices passed through ``index_check`` (``Tensor.checked_index``) fail the run with
  ``IndexOutOfRangeError`` instead (``graph/_dynamic.py``).
* Reductions have identities (sum 0, prod 1, max -inf/int min, min +inf/int max), so an empty
  (zero-length) reduced axis is defined.
* Float ``sum``/``prod`` accumulate in float64 and round once to the output dtype (float16
  through float32). The order of accumulation is unspecified (compiled code vectorizes and
  reassociates); in float64 that moves the result by a few float64 ulps, which rounding to
  float32 hides except at exact rounding ties and under catastrophic cancellation. A float32
  sum cannot overflow midway (``sum([3e38, 3e38, -3e38])`` is 3e38); a product can, in float64,
  only with more than eight factors of extreme magnitude, and then its value depends on the
  order. A float64 sum is within ``n`` float64 units of ``sum(|x|)`` of the exact one for ``n``
  terms, in any order; when ``sum(|x|)`` exceeds float64's range (terms near 1e308) a partial sum
  may overflow in one order and not in another, so the result (finite, inf or NaN) depends on
  the order: that is outside the domain, as for a float32 dot product whose partial sums
  overflow. ``max``/``min`` are exact. Integer reductions wrap like integer ``add``/``mul``.
* ``matmul`` and ``conv1d`` are *not* exactly rounded: the reference evaluates them in float64,
  compiled code accumulates in float32 with FMA in an unspecified order (that is what makes them
  fast and batch-invariant). They agree within the usual dot-product bound (about K float32
  ulps of ``sum(|a*b|)``); a float32 partial sum that overflows while the exact result is
  finite (|terms| near 3e38) is outside their domain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import TensorError
from ..symbolic import Dim, Expr, as_dim, bounds, evaluate, prod
from ._node import Node, shape_str

__all__ = ["OPS", "OpDef", "UNARY_FLOAT", "UNARY_ANY", "BINARY_ARITH", "COMPARISONS", "LOGICAL"]

Shape = tuple[Dim, ...]
Infer = Callable[[tuple[Node, ...], Mapping[str, Any]], tuple[Shape, DType]]
Reference = Callable[[Node, list[np.ndarray], Mapping[str, int]], np.ndarray]


@attrs.frozen
class OpDef:
    """An op: its name, kind (how compilers group it), shape/dtype rule and numpy semantics."""

    name: str
    kind: str
    infer: Infer
    reference: Reference


OPS: dict[str, OpDef] = {}


def _register(name: str, kind: str, infer: Infer, reference: Reference) -> None:
    OPS[name] = OpDef(name, kind, infer, reference)


def _fail(msg: str) -> TensorError:
    return TensorError(msg)


def _nonneg(d: Dim) -> bool:
    return bounds(d)[0] >= 0


def _ev(shape: Sequence[Dim], b: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, b) for d in shape)


def _out(node: Node, value: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # a float64 result beyond float16's range is inf, not a warning
        return np.asarray(value).astype(node.dtype.np, copy=False)


# ---------------------------------------------------------------------------------------------
# sources


def _infer_placeholder(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    shape = tuple(as_dim(d) for d in a["shape"])
    for d in shape:
        if not _nonneg(d) or bounds(d)[1] < 0:
            raise _fail(f"placeholder {a['name']!r}: dim {d} can be negative")
    return shape, a["dtype"]


def _ref_placeholder(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    raise AssertionError("placeholders are bound by the interpreter, not evaluated")


def _infer_const(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    v = a["value"]
    return tuple(int(s) for s in v.shape), dt.from_numpy(v.dtype)


def _infer_arange(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    n = as_dim(a["n"])
    if not _nonneg(n):
        raise _fail(f"arange({n}): length can be negative")
    return (n,), a["dtype"]


def _infer_dim(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    as_dim(a["expr"])
    return (), a["dtype"]


_register("placeholder", "source", _infer_placeholder, _ref_placeholder)
_register("const", "source", _infer_const, lambda n, args, b: n.attrs["value"])
_register(
    "arange",
    "source",
    _infer_arange,
    lambda n, args, b: np.arange(evaluate(n.attrs["n"], b), dtype=n.dtype.np),
)
_register(
    "dim",
    "source",
    _infer_dim,
    lambda n, args, b: np.array(evaluate(n.attrs["expr"], b), dtype=n.dtype.np),
)

# ---------------------------------------------------------------------------------------------
# elementwise


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    out: np.ndarray = np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return out


def _erfc(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erfc, otypes=[np.float64])(x) if x.size else x.astype(np.float64)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    # Written without the cancellation of 1 + tanh(u) / 1 + erf(z) for negative x (which would
    # flush gelu(-8) to -0.0): 0.5*(1 + tanh(u)) = sigmoid(2u), 1 + erf(z) = erfc(-z).
    if approximate == "tanh":
        y = x * _sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
    else:
        y = 0.5 * x * _erfc(-x / math.sqrt(2.0))
    # the formula is -inf * 0 = NaN at -inf; the limit (and what finite x -> -inf approach) is -0.0
    out: np.ndarray = np.where(np.isneginf(x), -0.0, y)
    return out


UNARY_FLOAT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "recip": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "sin": np.sin,
    "cos": np.cos,
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
}
UNARY_ANY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
}


def _infer_unary(name: str, float_only: bool) -> Infer:
    def infer(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
        (x,) = ins
        if x.dtype.is_bool and name != "not":
            raise _fail(f"{name} is not defined on bool tensors; cast first")
        if float_only and not x.dtype.is_float:
            raise _fail(f"{name} needs a float tensor, got {x.dtype.name}; cast first")
        if name == "not" and not x.dtype.is_bool:
            raise _fail(f"logical not needs a bool tensor, got {x.dtype.name}")
        return x.shape, x.dtype

    return infer


def _ref_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Reference:
    def ref(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
        (x,) = args
        with np.errstate(all="ignore"):
            if node.dtype.is_float:
                wide = fn(x.astype(np.float64))
                return _out(node, wide if node.dtype.itemsize == 8 else wide.astype(np.float32))
            return _out(node, fn(x))

    return ref


for _name, _fn in UNARY_FLOAT.items():
    _register(_name, "elementwise", _infer_unary(_name, True), _ref_unary(_fn))
for _name, _fn in UNARY_ANY.items():
    _register(_name, "elementwise", _infer_unary(_name, False), _ref_unary(_fn))
_register("not", "elementwise", _infer_unary("not", False), _ref_unary(np.logical_not))


def _infer_gelu(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    if a.get("approximate", "none") not in ("none", "tanh"):
        raise _fail(f"gelu approximate must be 'none' or 'tanh', got {a['approximate']!r}")
    return _infer_unary("gelu", True)(ins, a)


_register(
    "gelu",
    "elementwise",
    _infer_gelu,
    lambda n, args, b: _ref_unary(lambda x: _gelu(x, n.attrs.get("approximate", "none")))(n, args, b),
)


def _int_safe(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def wrapped(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "iu":
            safe = np.where(y == 0, np.ones((), y.dtype), y)
            return np.where(y == 0, np.zeros((), x.dtype), fn(x, safe))
        return fn(x, y)

    return wrapped


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C99 ``pow``: pow(x, +-0) = 1 and pow(1, y) = 1 for every x and y, NaNs included (numpy's
    array loop gives NaN for a *signalling* NaN there, its scalar path 1; compiled code gives 1)."""
    out = np.power(x, y)
    one: np.ndarray = np.where((y == 0) | (x == 1), np.ones((), out.dtype), out)
    return one


BINARY_ARITH: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "idiv": _int_safe(np.floor_divide),
    "mod": _int_safe(np.mod),
    "pow": _pow,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}
LOGICAL: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}
_FLOAT_ONLY_BINARY = {"div", "pow"}


def _infer_binary(name: str) -> Infer:
    def infer(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
        x, y = ins
        if x.shape != y.shape:
            raise _fail(f"{name}: operand shapes differ: {shape_str(x.shape)} vs {shape_str(y.shape)}")
        if x.dtype != y.dtype:
            raise _fail(f"{name}: operand dtypes differ: {x.dtype.name} vs {y.dtype.name}")
        if name in LOGICAL:
            if x.dtype.is_float:
                raise _fail(f"{name} needs bool or int tensors, got {x.dtype.name}")
            return x.shape, x.dtype
        if name in COMPARISONS:
            return x.shape, dt.bool_
        if x.dtype.is_bool:
            raise _fail(f"{name} is not defined on bool tensors; cast first")
        if name in _FLOAT_ONLY_BINARY and not x.dtype.is_float:
            raise _fail(f"{name} needs float tensors, got {x.dtype.name}")
        return x.shape, x.dtype

    return infer


def _ref_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Reference:
    def ref(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
        x, y = args
        with np.errstate(all="ignore"):
            if x.dtype == np.float16:
                x, y = x.astype(np.float32), y.astype(np.float32)
            return _out(node, fn(x, y))

    return ref


for _name, _bfn in {**BINARY_ARITH, **COMPARISONS, **LOGICAL}.items():
    _register(_name, "elementwise", _infer_binary(_name), _ref_binary(_bfn))


def _infer_where(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    c, x, y = ins
    if not c.dtype.is_bool:
        raise _fail(f"where: condition must be bool, got {c.dtype.name}")
    if not c.shape == x.shape == y.shape:
        raise _fail(f"where: shapes differ: {shape_str(c.shape)}, {shape_str(x.shape)}, {shape_str(y.shape)}")
    if x.dtype != y.dtype:
        raise _fail(f"where: branch dtypes differ: {x.dtype.name} vs {y.dtype.name}")
    return x.shape, x.dtype


_register("where", "elementwise", _infer_where, lambda n, args, b: _out(n, np.where(*args)))


def _infer_cast(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    return x.shape, a["dtype"]


def cast_array(x: np.ndarray, to: DType) -> np.ndarray:
    """Cast with asyncjit's semantics (saturating float->int, ``!= 0`` to bool, wrapping ints)."""
    if to.is_bool:
        return np.asarray(x != 0)
    if to.is_int and x.dtype.kind == "f":
        # Compare before converting: float(int64 max) rounds up to 2**63, which would overflow.
        info = np.iinfo(to.name)
        with np.errstate(all="ignore"):
            y = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
            hi, lo = y >= float(info.max), y <= float(info.min)
            inside = np.where(hi | lo, 0.0, y).astype(to.np)
        return np.where(hi, to.np.type(info.max), np.where(lo, to.np.type(info.min), inside)).astype(to.np)
    with np.errstate(all="ignore"):
        return x.astype(to.np)


_register("cast", "elementwise", _infer_cast, lambda n, args, b: cast_array(args[0], n.dtype))


def _infer_bitcast(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    to: DType = a["dtype"]
    if x.dtype.is_bool or to.is_bool or x.dtype.itemsize != to.itemsize:
        raise _fail(
            f"bitcast: {x.dtype.name} -> {to.name} needs two non-bool dtypes of one size "
            f"({x.dtype.itemsize} and {to.itemsize} bytes)"
        )
    return x.shape, to


def _ref_bitcast(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    return np.array(args[0], order="C").view(node.dtype.np)


_register("bitcast", "elementwise", _infer_bitcast, _ref_bitcast)


def cast_scalar(value: bool | int | float, to: DType) -> bool | int | float:
    """A Python scalar converted to ``to`` as ``cast`` converts an element (NaN -> 0 in an int,
    1e10 -> int32 max, 1e10 -> float16 inf); a Python int too wide for any dtype wraps."""
    if isinstance(value, bool | np.bool_):
        src = np.array(bool(value))
    elif isinstance(value, (int, np.integer)):
        bits = 64
        v = (int(value) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # wrap into int64
        src = np.array(v, np.int64)
    else:
        src = np.array(float(value), np.float64)
    out: bool | int | float = cast_array(src, to).reshape(()).item()
    return out


# ---------------------------------------------------------------------------------------------
# reductions (keepdims: reduced axes stay with size 1; Tensor reshapes them away)

REDUCE_OPS = ("sum", "prod", "max", "min")


def _infer_reduce(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    if a["op"] not in REDUCE_OPS:
        raise _fail(f"reduce op must be one of {REDUCE_OPS}, got {a['op']!r}")
    axes = tuple(a["axes"])
    if sorted(set(axes)) != list(axes) or any(not 0 <= ax < x.ndim for ax in axes):
        raise _fail(f"reduce axes {axes} must be sorted, unique and within rank {x.ndim}")
    if x.dtype.is_bool:
        raise _fail("reductions are not defined on bool tensors; cast first")
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape)), x.dtype


def reduce_identity(op: str, dtype: DType) -> float | int:
    """The value a reduction over zero elements gives."""
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if dtype.is_float:
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(dtype.name)
    return int(info.min) if op == "max" else int(info.max)


def _ref_reduce(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    op, axes = node.attrs["op"], tuple(node.attrs["axes"])
    if not axes:
        return x.copy()
    acc = np.float64 if x.dtype.kind == "f" else x.dtype
    fns: dict[str, Callable[..., Any]] = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
    fn = fns[op]
    init = reduce_identity(op, node.dtype)
    with np.errstate(all="ignore"):
        y = fn(x.astype(acc), axis=axes, keepdims=True, initial=init)
    return _out(node, y)


_register("reduce", "reduce", _infer_reduce, _ref_reduce)

# ---------------------------------------------------------------------------------------------
# matmul: a[..., M, K] @ b[..., K, N], batch dims equal (Tensor expands them)


def _infer_matmul(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, y = ins
    if x.ndim < 2 or x.ndim != y.ndim:
        raise _fail(
            f"matmul needs operands of equal rank >= 2, got {shape_str(x.shape)} and {shape_str(y.shape)}"
        )
    if x.shape[:-2] != y.shape[:-2] or x.shape[-1] != y.shape[-2]:
        raise _fail(f"matmul: shapes {shape_str(x.shape)} and {shape_str(y.shape)} do not line up")
    if x.dtype != y.dtype or x.dtype.is_bool:
        raise _fail(f"matmul needs operands of one numeric dtype, got {x.dtype.name} and {y.dtype.name}")
    return (*x.shape[:-1], y.shape[-1]), x.dtype


def _ref_matmul(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    x, y = args
    with np.errstate(all="ignore"):  # a signalling NaN's conversion sets "invalid"
        if x.dtype.kind == "f":
            x, y = x.astype(np.float64), y.astype(np.float64)
        return _out(node, np.matmul(x, y))


_register("matmul", "matmul", _infer_matmul, _ref_matmul)

# ---------------------------------------------------------------------------------------------
# movement


def _product_of(d: Dim, dims: Sequence[Dim]) -> bool:
    """True when ``d`` is the product of some of ``dims`` (a merge of axes); ranks are small."""
    if len(dims) > 8:
        return False
    return any(
        prod(dims[i] for i in picked) == d
        for r in range(2, len(dims) + 1)
        for picked in itertools.combinations(range(len(dims)), r)
    )


def _infer_reshape(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    shape = tuple(as_dim(d) for d in a["shape"])
    # Bounds of an expanded product such as (s - 1)*(s - 1) == s*s - 2*s + 1 cannot always show
    # it is >= 0, so a dim that is the product of some input dims (all >= 0) counts as proven.
    unproven = [i for i, d in enumerate(shape) if not _nonneg(d) and not _product_of(d, x.shape)]
    # With equal element counts (>= 0), one dim is >= 0 when all others are >= 1.
    others_positive = all(bounds(d)[0] >= 1 for i, d in enumerate(shape) if i not in unproven[:1])
    if unproven and (len(unproven) > 1 or not others_positive):
        raise _fail(f"reshape {shape_str(x.shape)} -> {shape_str(shape)}: a dim can be negative")
    if prod(x.shape) != prod(shape):
        raise _fail(
            f"reshape {shape_str(x.shape)} -> {shape_str(shape)}: element counts "
            f"{prod(x.shape)} and {prod(shape)} are not provably equal"
        )
    return shape, x.dtype


_register(
    "reshape",
    "movement",
    _infer_reshape,
    lambda n, args, b: np.asarray(args[0], order="C").reshape(_ev(n.shape, b)),
)


def _infer_permute(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    order = tuple(a["order"])
    if sorted(order) != list(range(x.ndim)):
        raise _fail(f"permute order {order} is not a permutation of {x.ndim} axes")
    return tuple(x.shape[i] for i in order), x.dtype


_register(
    "permute",
    "movement",
    _infer_permute,
    lambda n, args, b: np.asarray(np.transpose(args[0], n.attrs["order"]), order="C"),
)


def _infer_expand(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    shape = tuple(as_dim(d) for d in a["shape"])
    if len(shape) != x.ndim or any(s != d and s != 1 for s, d in zip(x.shape, shape, strict=True)):
        raise _fail(f"cannot expand {shape_str(x.shape)} to {shape_str(shape)}")
    return shape, x.dtype


_register(
    "expand",
    "movement",
    _infer_expand,
    lambda n, args, b: np.asarray(np.broadcast_to(args[0], _ev(n.shape, b)), order="C"),
)


def slice_length(start: Dim, stop: Dim, step: int) -> Dim:
    """Elements in ``range(start, stop, step)`` for ``start <= stop`` and ``step >= 1``."""
    return (stop - start + (step - 1)) // step


def _infer_shrink(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    slices = tuple(a["slices"])
    if len(slices) != x.ndim:
        raise _fail(f"shrink needs one (start, stop, step) per axis of {shape_str(x.shape)}")
    out: list[Dim] = []
    for axis, ((start, stop, step), d) in enumerate(zip(slices, x.shape, strict=True)):
        if not isinstance(step, int) or step < 1:
            raise _fail(f"shrink axis {axis}: step must be an int >= 1, got {step!r}")
        if not (_nonneg(start) and _nonneg(stop - start) and _nonneg(d - stop)):
            raise _fail(
                f"shrink axis {axis} of {shape_str(x.shape)}: [{start}:{stop}] is not provably "
                f"within [0:{d}] for every binding"
            )
        out.append(slice_length(start, stop, step))
    return tuple(out), x.dtype


def _ref_shrink(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    idx = tuple(slice(evaluate(s, b), evaluate(e, b), step) for s, e, step in node.attrs["slices"])
    return np.asarray(args[0][idx], order="C")


_register("shrink", "movement", _infer_shrink, _ref_shrink)

PAD_MODES = ("constant", "reflect", "edge")


def _infer_pad(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    pads = tuple(a["pads"])
    mode = a.get("mode", "constant")
    if mode not in PAD_MODES:
        raise _fail(f"pad mode must be one of {PAD_MODES}, got {mode!r}")
    if len(pads) != x.ndim:
        raise _fail(f"pad needs one (before, after) per axis of {shape_str(x.shape)}")
    out: list[Dim] = []
    for axis, ((lo, hi), d) in enumerate(zip(pads, x.shape, strict=True)):
        if not (_nonneg(lo) and _nonneg(hi)):
            raise _fail(f"pad axis {axis}: widths ({lo}, {hi}) can be negative")
        if mode == "reflect" and not all(w == 0 or _nonneg(d - 1 - w) for w in (lo, hi)):
            raise _fail(
                f"reflect pad axis {axis}: widths ({lo}, {hi}) must be < the dim {d} for every binding"
            )
        if mode == "edge" and bounds(d)[0] < 1 and (lo != 0 or hi != 0):
            raise _fail(f"edge pad axis {axis}: dim {d} can be empty")
        out.append(d + lo + hi)
    return tuple(out), x.dtype


def _ref_pad(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    widths = [(evaluate(lo, b), evaluate(hi, b)) for lo, hi in node.attrs["pads"]]
    mode = node.attrs.get("mode", "constant")
    if mode == "constant":
        value = cast_scalar(node.attrs.get("value", 0), node.dtype)  # as a cast op would
        return np.pad(args[0], widths, mode="constant", constant_values=value)
    return np.pad(args[0], widths, mode=mode)


_register("pad", "movement", _infer_pad, _ref_pad)


def _infer_cat(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    axis = a["axis"]
    if not ins:
        raise _fail("cat needs at least one tensor")
    first = ins[0]
    if not 0 <= axis < first.ndim:
        raise _fail(f"cat axis {axis} out of range for rank {first.ndim}")
    for x in ins[1:]:
        same = x.ndim == first.ndim and all(
            d == e for i, (d, e) in enumerate(zip(x.shape, first.shape, strict=True)) if i != axis
        )
        if not same:
            raise _fail(
                f"cat along axis {axis}: shapes {shape_str(first.shape)} and {shape_str(x.shape)} differ"
            )
        if x.dtype != first.dtype:
            raise _fail(f"cat: dtypes differ: {first.dtype.name} vs {x.dtype.name}")
    total: Dim = 0
    for x in ins:
        total = total + x.shape[axis]
    return (*first.shape[:axis], total, *first.shape[axis + 1 :]), first.dtype


_register(
    "cat",
    "movement",
    _infer_cat,
    lambda n, args, b: np.concatenate(args, axis=n.attrs["axis"]),
)

# ---------------------------------------------------------------------------------------------
# conv1d: x[N, Cin, L] * w[Cout, Cin/groups, K] -> [N, Cout, Lout]


def conv_out_len(length: Dim, k: int, stride: int, pad: tuple[Dim, Dim], dilation: int) -> Dim:
    return (length + pad[0] + pad[1] - dilation * (k - 1) - 1) // stride + 1


def _infer_conv1d(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, w = ins
    stride, dilation, groups = a["stride"], a["dilation"], a["groups"]
    pad = tuple(a["padding"])
    if x.ndim != 3 or w.ndim != 3:
        raise _fail(
            f"conv1d needs x[N, C, L] and w[O, C/g, K], got {shape_str(x.shape)} and {shape_str(w.shape)}"
        )
    if x.dtype != w.dtype or not x.dtype.is_float:
        raise _fail(f"conv1d needs float operands of one dtype, got {x.dtype.name} and {w.dtype.name}")
    for label, v in (("stride", stride), ("dilation", dilation), ("groups", groups)):
        if not isinstance(v, int) or v < 1:
            raise _fail(f"conv1d {label} must be an int >= 1, got {v!r}")
    cout, cin_g, k = w.shape
    if not all(isinstance(d, int) for d in (cout, cin_g, k)):
        raise _fail(f"conv1d weight shape must be static, got {shape_str(w.shape)}")
    assert isinstance(cout, int) and isinstance(cin_g, int) and isinstance(k, int)
    if min(cout, cin_g, k) < 1:
        raise _fail(
            f"conv1d weight dims (out channels, in channels, kernel) must be >= 1, got {shape_str(w.shape)}"
        )
    if x.shape[1] != cin_g * groups or cout % groups:
        raise _fail(
            f"conv1d: x {shape_str(x.shape)} and w {shape_str(w.shape)} with groups={groups}: "
            f"need C == {cin_g}*{groups} and O divisible by groups"
        )
    if len(pad) != 2 or not all(_nonneg(p) for p in pad):
        raise _fail(f"conv1d padding must be (left, right) >= 0, got {pad}")
    lout = conv_out_len(x.shape[2], k, stride, (pad[0], pad[1]), dilation)
    if bounds(lout)[0] < 0:
        raise _fail(f"conv1d: input length {x.shape[2]} can be shorter than the kernel span")
    return (x.shape[0], cout, lout), x.dtype


def _ref_conv1d(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    with np.errstate(all="ignore"):  # a signalling NaN's conversion sets "invalid"
        x, w = (v.astype(np.float64) for v in args)
    stride, dilation, groups = node.attrs["stride"], node.attrs["dilation"], node.attrs["groups"]
    pl, pr = (evaluate(p, b) for p in node.attrs["padding"])
    n, _, _ = x.shape
    cout, cin_g, k = w.shape
    lout = _ev(node.shape, b)[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pl, pr)))
    out = np.zeros((n, cout, lout))
    if lout == 0 or n == 0:
        return _out(node, out)
    span = dilation * (k - 1) + 1
    # every window at once: [N, C, positions, span] -> taps at the dilation, positions at the stride
    windows = np.lib.stride_tricks.sliding_window_view(xp, span, axis=2)
    windows = windows[:, :, : stride * (lout - 1) + 1 : stride, ::dilation]
    og = cout // groups
    for g in range(groups):
        cols = windows[:, g * cin_g : (g + 1) * cin_g]  # [N, Cg, Lout, K]
        wg = w[g * og : (g + 1) * og]
        with np.errstate(all="ignore"):  # inf * 0 in a window is NaN, as in matmul
            out[:, g * og : (g + 1) * og, :] = np.einsum("nclk,ock->nol", cols, wg, optimize=True)
    return _out(node, out)


_register("conv1d", "conv", _infer_conv1d, _ref_conv1d)


def is_symbolic(value: object) -> bool:
    return isinstance(value, Expr)
