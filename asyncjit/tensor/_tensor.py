"""``Tensor``: the lazy, numpy-like front end that records graph nodes.

Every method checks its operands at the call and raises ``TensorError`` (or
``ShapeMismatchError``) naming both shapes, so a bad graph never gets as far as compilation.
Broadcasting follows numpy rules over symbolic dims: two dims match when they are provably equal
or one of them is the int 1. Python scalars are weak (``x + 1`` keeps ``x``'s dtype).

A ``Tensor`` has no value: building a graph never computes anything. Use it with
``asyncjit.reference.evaluate`` or the compilers. Branching on a tensor's value (``if t > 0:``)
is a ``TypeError``: the graph must not depend on data (DESIGN invariant 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import ArgumentTypeError, ScalarOverflowError, ShapeMismatchError, TensorError
from ..graph import Node, aligned_copy, make_node, shape_str
from ..symbolic import Dim, Expr, as_dim, prod
from . import _dynamic, _indexing, _movement, _nn, _resize

__all__ = ["Tensor"]

_placeholder_names = itertools.count()
Scalar = int | float | bool
Operand = "Tensor | int | float | bool | np.ndarray"


def broadcast_shapes(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting over symbolic dims (provably equal, or one side is 1)."""
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise ShapeMismatchError(
                f"cannot broadcast shapes {shape_str(a)} and {shape_str(b)}: dim {da} vs {db}"
            )
    return tuple(reversed(out))


_axis = _nn.norm_axis


def _check_tensors(tensors: object, what: str) -> None:
    """``tensors`` must be a list or tuple of Tensors (a Tensor itself is not a sequence of them)."""
    if not isinstance(tensors, list | tuple):
        raise ArgumentTypeError(f"{what} takes a list or tuple of Tensors, got {type(tensors).__name__}")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"{what} takes Tensors, got a {type(t).__name__} among them")


class Tensor(_movement.Movement, _dynamic.DynamicShapes):
    """A lazy tensor: a graph node with a numpy-like API."""

    __slots__ = ("node",)
    __array_priority__ = 1000  # numpy scalars on the left defer to our reflected operators

    def __init__(self, node: Node) -> None:
        if not isinstance(node, Node):
            raise ArgumentTypeError("Tensor wraps a graph Node; use Tensor.placeholder or Tensor.const")
        self.node = node

    # ------------------------------------------------------------------ construction
    @staticmethod
    def placeholder(shape: Sequence[Dim], dtype: DType | Any = dt.float32, name: str | None = None) -> Tensor:
        """An input of the graph; ``shape`` may use symbolic ``Var`` dims."""
        dtype = dt.from_numpy(dtype)
        if name is None:
            name = f"input{next(_placeholder_names)}"
        elif not isinstance(name, str):
            raise ArgumentTypeError(f"placeholder name must be a str, got {type(name).__name__}")
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise ArgumentTypeError(
                f"placeholder shape must be a sequence of dims, got {type(shape).__name__}"
            )
        dims = tuple(as_dim(d) for d in shape)
        return Tensor(make_node("placeholder", (), name=name, shape=dims, dtype=dtype))

    @staticmethod
    def const(value: Any, dtype: DType | Any | None = None) -> Tensor:
        """A constant (weights); the array is copied and frozen. Without ``dtype``, float64 data
        becomes float32 (as JAX does without x64: Python floats are float64 in numpy) and other
        dtypes are kept; pass ``dtype=asyncjit.float64`` for a float64 constant."""
        arr = np.array(value)
        if dtype is not None:
            arr = arr.astype(dt.from_numpy(dtype).np)
        elif arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        dt.from_numpy(arr.dtype)  # rejects unsupported dtypes with a clear TypeError
        return Tensor(make_node("const", (), value=aligned_copy(arr)))  # a frozen copy

    @staticmethod
    def full(shape: Sequence[Dim], value: Scalar, dtype: DType | Any | None = None) -> Tensor:
        """A tensor filled with ``value`` (a broadcast scalar: no memory for the full shape)."""
        if isinstance(value, bool | int | float | np.bool_ | np.integer | np.floating):
            pass
        else:
            raise ArgumentTypeError(f"full needs a number as its value, got {type(value).__name__}")
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise ArgumentTypeError(f"full needs a sequence of dims as its shape, got {type(shape).__name__}")
        if dtype is None:
            is_float = isinstance(value, float)
            dtype = dt.bool_ if isinstance(value, bool) else dt.float32 if is_float else dt.int32
        target = dt.from_numpy(dtype)
        scalar = Tensor.const(np.array(value, dtype=target.np), target)  # float64 stays float64
        return scalar._broadcast_to(tuple(as_dim(d) for d in shape))

    @staticmethod
    def zeros(shape: Sequence[Dim], dtype: DType | Any = dt.float32) -> Tensor:
        return Tensor.full(shape, 0, dtype)

    @staticmethod
    def ones(shape: Sequence[Dim], dtype: DType | Any = dt.float32) -> Tensor:
        return Tensor.full(shape, 1, dtype)

    @staticmethod
    def arange(n: Dim, dtype: DType | Any = dt.int32) -> Tensor:
        """``[0, 1, ..., n-1]``; ``n`` may be symbolic (e.g. for length masks)."""
        return Tensor(make_node("arange", (), n=as_dim(n), dtype=dt.from_numpy(dtype)))

    @staticmethod
    def from_dim(expr: Dim, dtype: DType | Any = dt.int32) -> Tensor:
        """A scalar tensor whose value is a symbolic dim, known at execution time."""
        e = as_dim(expr)  # a data-dependent size is read after the op that sets it
        return Tensor(make_node("dim", _dynamic.definers(e), expr=e, dtype=dt.from_numpy(dtype)))

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def numel(self) -> Dim:
        return prod(self.shape)

    @property
    def T(self) -> Tensor:
        return self.permute(*reversed(range(self.ndim)))

    def __repr__(self) -> str:
        return f"<Tensor {self.dtype.name}{shape_str(self.shape)} %{self.node.id} {self.node.op}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise ArgumentTypeError(
            "a Tensor has no value while the graph is built; branching on it would bake one "
            "branch into the compiled plan. Use Tensor.where(cond, a, b) instead."
        )

    def __len__(self) -> int:
        if not self.ndim:
            raise ArgumentTypeError("len() of a 0-d tensor")
        d = self.shape[0]
        if isinstance(d, Expr):
            raise ArgumentTypeError(f"len() of a tensor whose first dim {d} is symbolic")
        return d

    def __iter__(self) -> Any:
        raise ArgumentTypeError("iterating a Tensor is not supported; index or slice it instead")

    # ------------------------------------------------------------------ helpers
    def _wrap(self, value: Any) -> Tensor:
        """Turn an operand into a tensor; Python scalars take this tensor's dtype (weak)."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, bool | int | float | np.integer | np.floating | np.bool_):
            target = dt.scalar_dtype(value, self.dtype)
            if type(value) is int and target.is_int:
                info = np.iinfo(target.name)
                if not info.min <= value <= info.max:  # numpy 2's and JAX's rule: no silent wrap
                    raise ScalarOverflowError(
                        f"the Python int {value} does not fit {target.name}, the dtype of the tensor "
                        f"it meets ({shape_str(self.shape)}); cast the tensor to a wider dtype first"
                    )
            with np.errstate(over="ignore"):  # 1e9 as a weak float16 is inf, as in JAX
                # the dtype given, or const() would narrow a float64 scalar to float32 first
                return Tensor.const(np.array(value, dtype=target.np), target)
        if isinstance(value, np.ndarray):
            return Tensor.const(value)
        if isinstance(value, Expr):  # a symbolic dim used as a value, e.g. ``x / x.shape[1]``
            as_int = Tensor.from_dim(value, dt.int64 if self.dtype == dt.int64 else dt.int32)
            if self.dtype.is_int:
                return as_int
            return as_int.cast(self.dtype if self.dtype.is_float else dt.float32)
        raise ArgumentTypeError(f"cannot combine a Tensor with {type(value).__name__} {value!r:.40}")

    def _broadcast_to(self, shape: tuple[Dim, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(shape) < self.ndim:
            raise ShapeMismatchError(f"cannot broadcast {shape_str(self.shape)} to {shape_str(shape)}")
        x = self
        if x.ndim < len(shape):
            x = x.reshape(*((1,) * (len(shape) - x.ndim) + x.shape))
        broadcast_shapes(x.shape, shape)  # raises with both shapes named
        for d, s in zip(x.shape, shape, strict=True):
            if d != s and d != 1:
                raise ShapeMismatchError(f"cannot broadcast {shape_str(self.shape)} to {shape_str(shape)}")
        return Tensor(make_node("expand", (x.node,), shape=shape))

    def _operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        y = self._wrap(other)
        x = self
        if x.dtype != y.dtype:
            # weak scalars already took our dtype; for two tensors promote by the dtype table
            target = dt.result_type(x.dtype, y.dtype)
            x, y = x.cast(target), y.cast(target)
        shape = broadcast_shapes(x.shape, y.shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse)
        return Tensor(make_node(op, (x.node, y.node)))

    def _unary(self, op: str, **kw: Any) -> Tensor:
        return Tensor(make_node(op, (self.node,), **kw))

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dt.float32)

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, o: Any) -> Tensor:
        return self._binary("add", o)

    def __radd__(self, o: Any) -> Tensor:
        return self._binary("add", o, True)

    def __sub__(self, o: Any) -> Tensor:
        return self._binary("sub", o)

    def __rsub__(self, o: Any) -> Tensor:
        return self._binary("sub", o, True)

    def __mul__(self, o: Any) -> Tensor:
        return self._binary("mul", o)

    def __rmul__(self, o: Any) -> Tensor:
        return self._binary("mul", o, True)

    def __truediv__(self, o: Any) -> Tensor:
        return self._float()._binary("div", o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return self._float()._binary("div", o, True)

    def __floordiv__(self, o: Any) -> Tensor:
        """Python's ``//``: for floats the floor of the exact quotient (``1.0 // 0.1`` is 9, where
        ``floor(1.0 / 0.1)`` is 10); bools divide as float32."""
        x, y = self._operands(o)
        if x.dtype.is_bool:
            x, y = x._float(), y._float()
        return x._binary("idiv", y)

    def __rfloordiv__(self, o: Any) -> Tensor:
        left, right = self._operands(o, True)
        return left.__floordiv__(right)

    def __mod__(self, o: Any) -> Tensor:
        """Python's ``%``: the result takes the divisor's sign; for floats it is exact (IEEE
        ``fmod``, moved by the divisor when the signs differ), never ``x - floor(x / y) * y``."""
        x, y = self._operands(o)
        if x.dtype.is_bool:
            x, y = x._float(), y._float()
        return x._binary("mod", y)

    def __rmod__(self, o: Any) -> Tensor:
        left, right = self._operands(o, True)
        return left.__mod__(right)

    def __pow__(self, o: Any) -> Tensor:
        if isinstance(o, int) and not isinstance(o, bool) and o == 2:
            return self * self
        return self._float()._binary("pow", o)

    def __rpow__(self, o: Any) -> Tensor:
        return self._float()._binary("pow", o, True)

    def __neg__(self) -> Tensor:
        return self._unary("neg")

    def __abs__(self) -> Tensor:
        return self._unary("abs")

    def __invert__(self) -> Tensor:
        if self.dtype.is_bool:
            return self._unary("not")
        raise TensorError(f"~ needs a bool tensor, got {self.dtype.name}")

    def __and__(self, o: Any) -> Tensor:
        return self._binary("and", o)

    def __or__(self, o: Any) -> Tensor:
        return self._binary("or", o)

    def __xor__(self, o: Any) -> Tensor:
        return self._binary("xor", o)

    def __lt__(self, o: Any) -> Tensor:
        return self._binary("lt", o)

    def __le__(self, o: Any) -> Tensor:
        return self._binary("le", o)

    def __gt__(self, o: Any) -> Tensor:
        return self._binary("gt", o)

    def __ge__(self, o: Any) -> Tensor:
        return self._binary("ge", o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary("eq", o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary("ne", o)

    def __matmul__(self, o: Any) -> Tensor:
        return self.matmul(o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return self._wrap(o).matmul(self)

    def maximum(self, o: Any) -> Tensor:
        return self._binary("maximum", o)

    def minimum(self, o: Any) -> Tensor:
        return self._binary("minimum", o)

    def pow(self, o: Any) -> Tensor:
        return self.__pow__(o)

    def clip(self, lo: Any, hi: Any) -> Tensor:
        return self.maximum(lo).minimum(hi)

    # ------------------------------------------------------------------ unary
    def exp(self) -> Tensor:
        return self._float()._unary("exp")

    def log(self) -> Tensor:
        return self._float()._unary("log")

    def sqrt(self) -> Tensor:
        return self._float()._unary("sqrt")

    def rsqrt(self) -> Tensor:
        return self._float()._unary("rsqrt")

    def reciprocal(self) -> Tensor:
        return self._float()._unary("recip")

    def tanh(self) -> Tensor:
        return self._float()._unary("tanh")

    def sigmoid(self) -> Tensor:
        return self._float()._unary("sigmoid")

    def relu(self) -> Tensor:
        return self._unary("relu")

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU; ``approximate="tanh"`` for the tanh form, the exact erf form by default."""
        return self._float()._unary("gelu", approximate=approximate)

    def silu(self) -> Tensor:
        return self * self.sigmoid()

    def sin(self) -> Tensor:
        return self._float()._unary("sin")

    def cos(self) -> Tensor:
        return self._float()._unary("cos")

    def erf(self) -> Tensor:
        return self._float()._unary("erf")

    def abs(self) -> Tensor:
        return self._unary("abs")

    def neg(self) -> Tensor:
        return self._unary("neg")

    def floor(self) -> Tensor:
        return self if not self.dtype.is_float else self._unary("floor")

    def ceil(self) -> Tensor:
        return self if not self.dtype.is_float else self._unary("ceil")

    def logical_not(self) -> Tensor:
        return self.cast(dt.bool_)._unary("not")

    def cast(self, dtype: DType | Any) -> Tensor:
        """Convert elements (float->int saturates and truncates toward zero; x->bool is x != 0)."""
        dtype = dt.from_numpy(dtype)
        return self if dtype == self.dtype else self._unary("cast", dtype=dtype)

    astype = cast

    def bitcast(self, dtype: DType | Any) -> Tensor:
        """The same bits read as ``dtype`` of the same size (``float32 <-> int32/uint32``,
        ``float16 <-> int16/uint16``...), as numpy's ``view``; NaN payloads are kept."""
        dtype = dt.from_numpy(dtype)
        return self if dtype == self.dtype else self._unary("bitcast", dtype=dtype)

    def where(self, a: Any, b: Any) -> Tensor:
        """``a`` where this bool tensor is true, else ``b`` (broadcast together)."""
        return Tensor.select(self, a, b)

    @staticmethod
    def select(cond: Tensor, a: Any, b: Any) -> Tensor:
        """numpy's ``where(cond, a, b)``: broadcasts all three, promotes ``a`` and ``b``."""
        if not isinstance(cond, Tensor) or not cond.dtype.is_bool:
            raise TensorError("where: the condition must be a bool Tensor")
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            a = Tensor.const(np.array(a, dtype=np.float32 if isinstance(a, float) else None))
        x, y = a._operands(b) if isinstance(a, Tensor) else b._operands(a, True)
        shape = broadcast_shapes(cond.shape, x.shape)
        c, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        return Tensor(make_node("where", (c.node, x.node, y.node)))

    # ------------------------------------------------------------------ reductions
    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        if isinstance(axis, SupportsIndex) and not isinstance(axis, bool):
            axes: tuple[Any, ...] = (axis,)
        elif isinstance(axis, Sequence) and not isinstance(axis, str):
            axes = tuple(axis)
        else:
            raise ArgumentTypeError(
                f"axis must be an int, a sequence of ints or None, got {type(axis).__name__}"
            )
        norm = sorted({_axis(a, self.ndim) for a in axes})
        if len(norm) != len(axes):
            raise TensorError(f"repeated axis in {axes}")
        return tuple(norm)

    def _reduce(self, op: str, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
        axes = self._axes(axis)
        x = self.cast(dt.int32) if self.dtype.is_bool else self
        out = Tensor(make_node("reduce", (x.node,), op=op, axes=axes))
        if keepdims:
            return out
        return out.reshape(*(d for i, d in enumerate(out.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over ``axis`` (all by default). Floats accumulate in float64 in an unspecified
        order; float64 terms whose magnitudes sum beyond float64's range (near 1e308) may
        overflow midway in one order and not another, so such sums are order dependent
        (docs/semantics.md)."""
        return self._reduce("sum", axis, keepdims)

    def prod(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Product over ``axis``; floats accumulate in float64 in an unspecified order, so a
        product whose partial products can leave float64's range depends on the order."""
        return self._reduce("prod", axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("max", axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("min", axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over ``axis``; a symbolic count divides by its value at execution time."""
        x = self._float()
        count = prod(self.shape[a] for a in self._axes(axis))
        # divide (as numpy does, not multiply by 1/count), in float32 so float16 rounds once
        total = x.sum(axis, keepdims).cast(dt.float32)
        n = float(count) if isinstance(count, int) else Tensor.from_dim(count, dt.float32)
        return (total / n).cast(x.dtype)

    def var(self, axis: int | Sequence[int] | None = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
        ddof = _nn.int_arg(ddof, "ddof")
        x = self._float()
        centered = x - x.mean(axis, keepdims=True)
        if ddof == 0:
            return (centered * centered).mean(axis, keepdims)
        count = prod(self.shape[a] for a in self._axes(axis)) - ddof
        total = (centered * centered).sum(axis, keepdims)
        return total / (count if isinstance(count, int) else Tensor.from_dim(count, x.dtype))

    def std(self, axis: int | Sequence[int] | None = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
        return self.var(axis, keepdims, ddof).sqrt()

    def softmax(self, axis: int = -1) -> Tensor:
        return _nn.softmax(self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return _nn.log_softmax(self, axis)

    def layer_norm(
        self,
        weight: Tensor | None = None,
        bias: Tensor | None = None,
        eps: float = 1e-5,
        axis: int | Sequence[int] = -1,
    ) -> Tensor:
        """Normalise over ``axis`` (the last by default), then scale and shift."""
        return _nn.layer_norm(self, weight, bias, eps, axis)

    # ------------------------------------------------------------------ matmul and conv
    def matmul(self, other: Any) -> Tensor:
        """numpy ``matmul``: 1-D operands are promoted and squeezed, batch dims broadcast."""
        y = self._wrap(other)
        x = self
        if x.dtype != y.dtype:
            target = dt.result_type(x.dtype, y.dtype)
            x, y = x.cast(target), y.cast(target)
        if x.ndim == 0 or y.ndim == 0:
            raise TensorError("matmul needs operands of rank >= 1; use * for scalars")
        squeeze_front, squeeze_back = x.ndim == 1, y.ndim == 1
        other_shape = y.shape
        if squeeze_front:
            x = x.reshape(1, x.shape[0])
        if squeeze_back:
            y = y.reshape(y.shape[0], 1)
        if x.shape[-1] != y.shape[-2]:
            raise ShapeMismatchError(
                f"matmul: {shape_str(self.shape)} @ {shape_str(other_shape)}: "
                f"inner dims {x.shape[-1]} and {y.shape[-2]} differ"
            )
        batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
        x = x._broadcast_to((*batch, *x.shape[-2:]))
        y = y._broadcast_to((*batch, *y.shape[-2:]))
        out = Tensor(make_node("matmul", (x.node, y.node)))
        if squeeze_front:
            out = out.reshape(*out.shape[:-2], out.shape[-1])
        if squeeze_back:
            out = out.reshape(*out.shape[:-1])
        return out

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``self @ weight.T + bias`` with ``weight`` of shape [out, in] (PyTorch layout)."""
        out = self @ _nn.tensor_arg(self, weight, "linear weight").T
        return out + _nn.tensor_arg(self, bias, "linear bias") if bias is not None else out

    def conv1d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: int = 1,
        padding: int | tuple[Dim, Dim] = 0,
        dilation: int = 1,
        groups: int = 1,
    ) -> Tensor:
        """1-D convolution (cross-correlation, PyTorch layout): x[N, C, L], w[O, C/groups, K]."""
        return _nn.conv1d(self, weight, bias, stride, padding, dilation, groups)

    def conv(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        strides: _nn.Ints = 1,
        pads: _nn.Pads = 0,
        dilations: _nn.Ints = 1,
        groups: int = 1,
    ) -> Tensor:
        """N-d convolution (ONNX ``Conv``): x[N, C, *S], w[O, C/groups, *K], bias[O]; ``pads`` an
        int, (lo, hi) per spatial axis, or ONNX's flat order."""
        return _nn.conv(self, weight, bias, strides, pads, dilations, groups)

    def conv_transpose(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        strides: _nn.Ints = 1,
        pads: _nn.Pads = 0,
        dilations: _nn.Ints = 1,
        groups: int = 1,
        output_padding: _nn.Ints = 0,
    ) -> Tensor:
        """ONNX ``ConvTranspose``: x[N, C, *S], w[C, O/groups, *K]; lowered to ``conv``."""
        return _nn.conv_transpose(self, weight, bias, strides, pads, dilations, groups, output_padding)

    def max_pool(
        self,
        kernel: _nn.Ints,
        strides: _nn.Ints | None = None,
        pads: _nn.Pads = 0,
        dilations: _nn.Ints = 1,
        ceil_mode: bool = False,
    ) -> Tensor:
        """ONNX ``MaxPool`` over x[N, C, *S] (strides default to the kernel, as in PyTorch)."""
        return _nn.pool(self, "max", kernel, strides, pads, dilations, ceil_mode, False)

    def avg_pool(
        self,
        kernel: _nn.Ints,
        strides: _nn.Ints | None = None,
        pads: _nn.Pads = 0,
        dilations: _nn.Ints = 1,
        ceil_mode: bool = False,
        count_include_pad: bool = False,
    ) -> Tensor:
        """ONNX ``AveragePool`` over x[N, C, *S]."""
        return _nn.pool(self, "avg", kernel, strides, pads, dilations, ceil_mode, count_include_pad)

    def cumsum(self, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
        """Running sum along ``axis`` (ONNX ``CumSum``: ``exclusive`` leaves the element out)."""
        return _nn.cumsum(self, axis, exclusive, reverse)

    def argmax(self, axis: int | None = None, keepdims: bool = False, last: bool = False) -> Tensor:
        """int64 index of the first (``last``: last) maximum; NaN counts as the maximum."""
        return _nn.argext(self, "max", axis, keepdims, last)

    def argmin(self, axis: int | None = None, keepdims: bool = False, last: bool = False) -> Tensor:
        """int64 index of the first (``last``: last) minimum; NaN counts as the minimum."""
        return _nn.argext(self, "min", axis, keepdims, last)

    def topk(self, k: int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
        """``(values, int64 indices)`` of the ``k`` largest (or smallest) along ``axis``, best
        first, ties to the lower index."""
        return _nn.topk(self, k, axis, largest)

    def take_along_axis(self, index: Tensor, axis: int) -> Tensor:
        """numpy ``take_along_axis`` / ONNX ``GatherElements``; out-of-range indices clamp."""
        return _nn.take_along_axis(self, index, axis)

    def resize(
        self,
        sizes: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        mode: str = "nearest",
        coordinate_transformation_mode: str = "half_pixel",
        nearest_mode: str = "round_prefer_floor",
        cubic_coeff_a: float = -0.75,
        exclude_outside: bool = False,
        extrapolation_value: float = 0.0,
        roi: Sequence[tuple[float, float]] | None = None,
    ) -> Tensor:
        """ONNX ``Resize`` with its attributes: one size or scale per axis (resized axes
        static), ``roi`` as (start, end) per axis for ``tf_crop_and_resize``."""
        return _resize.resize(
            self, sizes, scales, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
            exclude_outside, extrapolation_value, roi,
        )  # fmt: skip

    @staticmethod
    def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
        """Concatenate along ``axis`` (dtypes promote; other dims must be provably equal)."""
        _check_tensors(tensors, "cat")
        if not tensors:
            raise TensorError("cat needs at least one tensor")
        if len(tensors) == 1:
            return tensors[0]
        target = dt.result_type(*(t.dtype for t in tensors))
        ts = [t.cast(target) for t in tensors]
        ax = _axis(axis, ts[0].ndim)
        return Tensor(make_node("cat", tuple(t.node for t in ts), axis=ax))

    @staticmethod
    def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
        _check_tensors(tensors, "stack")
        if not tensors:
            raise TensorError("stack needs at least one tensor")
        ax = _axis(axis, tensors[0].ndim + 1)
        return Tensor.cat([t.unsqueeze(ax) for t in tensors], ax)

    def __getitem__(self, index: Any) -> Tensor:
        """Basic indexing: ints, slices (symbolic start/stop allowed), ``None``, ``...``,
        and one 1-D int ``Tensor`` (a gather along that axis).

        Slice bounds clamp to the axis as in numpy (``x[:5]`` of a ``t``-long axis has
        ``min(t, 5)`` elements); an int index must be provably within the axis.
        """
        return _indexing.getitem(self, index)

    # ------------------------------------------------------------------ gather / scatter / nonzero
    def gather(self, axis: int, index: Tensor) -> Tensor:
        """``index_select``: rows ``index`` (1-D int) of ``axis``; out-of-range indices clamp
        (``index.checked_index(size)`` fails the run on them instead)."""
        ax = _axis(axis, self.ndim)
        return Tensor(make_node("gather", (self.node, self._wrap(index).node), axis=ax))

    index_select = gather

    def scatter(self, axis: int, index: Tensor, src: Tensor, reduce: str = "none") -> Tensor:
        """A copy of this tensor with ``out[..., index[i], ...] = src[..., i, ...]`` along ``axis``.

        Out-of-range indices are dropped. With ``reduce="none"`` the last write to an index wins;
        ``"add"``, ``"mul"``, ``"max"`` or ``"min"`` combine every write with the value there, in
        index order (ONNX ``ScatterElements``/``ScatterND`` reductions, ``np.add.at`` and kin).
        """
        ax = _axis(axis, self.ndim)
        src = self._wrap(src).cast(self.dtype)
        nodes = (self.node, self._wrap(index).node, src.node)
        if reduce == "none":
            return Tensor(make_node("scatter", nodes, axis=ax))
        return Tensor(make_node("scatter", nodes, axis=ax, reduce=reduce))
