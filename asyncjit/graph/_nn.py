"""Neural-network ops of the registry: N-d convolution, pooling, cumulative sums, arg-reductions,
top-k selection and ``take_along_axis``, each with its shape/dtype rule and numpy semantics.

Semantics fixed here (``graph._ops`` states the general rules):

* ``conv`` is cross-correlation (PyTorch/ONNX) over ``x[N, C, *S]`` and ``w[O, C/groups, *K]``
  with an optional ``bias[O]``; zero padding ``(lo, hi)`` per spatial axis; float only, computed
  in float32 (float64 for float64) and rounded once. ``channels_last_in`` / ``channels_last_out``
  (attrs present only when true) take ``x`` as ``[N, *S, C]`` / give ``[N, *Sout, O]``: the
  compiler's layout pass (``passes.channels_last``) sets them, never a model.
* ``pool`` (``mode`` ``max`` or ``avg``) follows ONNX ``MaxPool``/``AveragePool``: windows at
  ``o*stride + t*dilation - lo``; ``ceil_mode`` adds a last window only if it starts inside the
  input or the left padding. Padding never wins a max; a window with no input element gives the
  max identity (-inf, int min). ``avg`` divides by the number of input elements in the window,
  or with ``count_include_pad`` by the taps inside the padded input (ceil-mode overhang never
  counts); an empty count gives 0.
* ``cumsum`` sums along ``axis`` (``exclusive``: the element itself left out; ``reverse``: from
  the end), accumulating in the op's dtype (ints wrap), float16 in float32.
* ``argext`` (``op`` ``max``/``min``) gives the int64 index of the first extreme along ``axis``
  (``last``: the last); NaN counts as the extreme, as numpy's ``argmax`` does. The axis keeps
  size 1.
* ``topk`` gives the int64 indices of the ``k`` largest (or smallest) along ``axis``, sorted
  best first; ties go to the lower index; NaN ranks above +inf for largest (below -inf for
  smallest is not promised: it ranks as largest there too, so it comes last).
* ``take_along_axis`` reads ``x`` at ``index`` along ``axis`` (other axes as in ``index``,
  which must equal ``x``'s there); indices are clamped into range like ``gather``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import TensorError
from ..symbolic import Dim, as_dim, bounds, evaluate, prod, smax, smin, upper
from ._node import Node, shape_str
from ._ops import _ev, _nonneg, _out, _register, conv_out_len, reduce_identity

__all__ = ["conv_layout", "pool_out_len"]

Shape = tuple[Dim, ...]


def _fail(msg: str) -> TensorError:
    return TensorError(msg)


def _ints(label: str, op: str, values: Sequence[Any], n: int, least: int) -> tuple[int, ...]:
    vals = tuple(values)
    if len(vals) != n or not all(isinstance(v, int) and v >= least for v in vals):
        raise _fail(f"{op} {label} must be {n} ints >= {least}, got {vals}")
    return vals


def _pads(op: str, pads: Sequence[Any], n: int) -> tuple[tuple[Dim, Dim], ...]:
    out = tuple((as_dim(lo), as_dim(hi)) for lo, hi in pads)
    if len(out) != n or not all(_nonneg(lo) and _nonneg(hi) for lo, hi in out):
        raise _fail(f"{op} pads must be {n} (lo, hi) pairs >= 0, got {tuple(pads)}")
    return out


# ---------------------------------------------------------------------------------------------
# conv: x[N, C, *S] * w[O, C/groups, *K] (+ bias[O]) -> [N, O, *Sout]


def conv_layout(a: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether a conv's input, and its output, have their channels on the last axis."""
    return bool(a.get("channels_last_in", False)), bool(a.get("channels_last_out", False))


def _first(shape: Shape) -> Shape:
    """``[N, *S, C]`` as ``[N, C, *S]``."""
    return (shape[0], shape[-1], *shape[1:-1])


def _infer_conv(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, w = ins[0], ins[1]
    last_in, last_out = conv_layout(a)
    xs = _first(x.shape) if last_in and x.ndim >= 3 else x.shape
    r = x.ndim - 2
    if r < 1 or w.ndim != x.ndim:
        raise _fail(
            f"conv needs x[N, C, *S] and w[O, C/g, *K] of one rank >= 3, got "
            f"{shape_str(x.shape)} and {shape_str(w.shape)}"
        )
    if x.dtype != w.dtype or not x.dtype.is_float:
        raise _fail(f"conv needs float operands of one dtype, got {x.dtype.name} and {w.dtype.name}")
    strides = _ints("strides", "conv", a["strides"], r, 1)
    dilations = _ints("dilations", "conv", a["dilations"], r, 1)
    groups = a["groups"]
    if not isinstance(groups, int) or groups < 1:
        raise _fail(f"conv groups must be an int >= 1, got {groups!r}")
    pads = _pads("conv", a["pads"], r)
    if not all(isinstance(d, int) for d in w.shape):
        raise _fail(f"conv weight shape must be static, got {shape_str(w.shape)}")
    cout, cin_g = int(w.shape[0]), int(w.shape[1])
    if min(int(d) for d in w.shape) < 1:
        raise _fail(
            f"conv weight dims (out channels, in channels, kernel) must be >= 1, got {shape_str(w.shape)}"
        )
    if xs[1] != cin_g * groups or cout % groups:
        raise _fail(
            f"conv: x {shape_str(x.shape)} and w {shape_str(w.shape)} with groups={groups}: "
            f"need C == {cin_g}*{groups} and O divisible by groups"
        )
    if len(ins) == 3:
        bias = ins[2]
        if bias.shape != (cout,) or bias.dtype != x.dtype:
            raise _fail(
                f"conv bias must be {x.dtype.name}[{cout}], got {bias.dtype.name}{shape_str(bias.shape)}"
            )
    elif len(ins) != 2:
        raise _fail("conv takes x, w and an optional bias")
    out: list[Dim] = [x.shape[0], cout]
    for ax in range(r):
        o = conv_out_len(xs[2 + ax], int(w.shape[2 + ax]), strides[ax], pads[ax], dilations[ax])
        if bounds(o)[0] < 0:
            raise _fail(
                f"conv: spatial axis {ax} of {shape_str(x.shape)} can be shorter than the kernel span"
            )
        out.append(o)
    if last_out:
        out = [out[0], *out[2:], cout]
    return tuple(out), x.dtype


def _windows(
    xp: np.ndarray, k: Sequence[int], s: Sequence[int], d: Sequence[int], out: Sequence[int]
) -> np.ndarray:
    """``[N, C, *out, *k]`` view of the (padded) ``xp``: each output's taps."""
    r = len(k)
    spans = [dd * (kk - 1) + 1 for kk, dd in zip(k, d, strict=True)]
    win = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(2, 2 + r)))
    sl = tuple(slice(0, ss * (o - 1) + 1, ss) for ss, o in zip(s, out, strict=True))
    taps = tuple(slice(None, None, dd) for dd in d)
    return win[(slice(None), slice(None), *sl, *taps)]


def _ref_conv(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    acc = np.float64
    x, w = args[0].astype(acc), args[1].astype(acc)
    r = x.ndim - 2
    last_in, last_out = conv_layout(node.attrs)
    if last_in:
        x = np.moveaxis(x, -1, 1)
    groups = node.attrs["groups"]
    pads = [(evaluate(lo, b), evaluate(hi, b)) for lo, hi in node.attrs["pads"]]
    shape = _ev(_first(node.shape) if last_out else node.shape, b)
    out = np.zeros(shape, acc)
    if 0 not in shape:
        xp = np.pad(x, ((0, 0), (0, 0), *pads))
        win = _windows(xp, w.shape[2:], node.attrs["strides"], node.attrs["dilations"], shape[2:])
        cin_g, og = w.shape[1], w.shape[0] // groups
        sp = "".join("hijk"[:r])
        kk = "".join("pqrs"[:r])
        for g in range(groups):
            cols = win[:, g * cin_g : (g + 1) * cin_g]
            with np.errstate(all="ignore"):
                out[:, g * og : (g + 1) * og] = np.einsum(
                    f"nc{sp}{kk},oc{kk}->no{sp}", cols, w[g * og : (g + 1) * og], optimize=True
                )
    if len(args) == 3:
        out += args[2].astype(acc).reshape((-1,) + (1,) * r)
    return _out(node, np.ascontiguousarray(np.moveaxis(out, 1, -1)) if last_out else out)


_register("conv", "conv", _infer_conv, _ref_conv)

# ---------------------------------------------------------------------------------------------
# pool: max/avg over windows of x[N, C, *S]


def pool_out_len(length: Dim, k: int, stride: int, pad: tuple[Dim, Dim], dilation: int, ceil: bool) -> Dim:
    """ONNX's pooled length; in ceil mode a last window must start inside the input or left pad."""
    span = length + pad[0] + pad[1] - dilation * (k - 1) - 1
    if not ceil:
        return span // stride + 1
    out = (span + stride - 1) // stride + 1
    # drop the last window when it starts past the input and left pad: an indicator in {0, 1}
    past = (out - 1) * stride - length - pad[0]
    over = smin(smax(past + 1, 0), 1)
    return out - over


INDEX_LIMIT = 2**31
"""The pool kernel indexes positions of its last axis in int32 vector lanes: a padded
extent or window span from 2^31 would wrap, so such a pool is refused when it is built."""


def _index_room(op: str, x: Node, kernel: Sequence[int], dilations: Sequence[int], pads: Any) -> None:
    for ax, (k, d, (lo, hi)) in enumerate(zip(kernel, dilations, pads, strict=True)):
        padded = upper(x.shape[2 + ax] + lo + hi)
        span = d * (k - 1) + 1
        if padded >= INDEX_LIMIT or span >= INDEX_LIMIT:
            raise _fail(
                f"{op}: spatial axis {ax} padded to {padded} positions with a window spanning {span}: "
                f"both must stay under 2^31"
            )


def _infer_pool(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    r = x.ndim - 2
    mode = a["mode"]
    if mode not in ("max", "avg"):
        raise _fail(f"pool mode must be 'max' or 'avg', got {mode!r}")
    if r < 1:
        raise _fail(f"pool needs x[N, C, *S] with at least one spatial axis, got {shape_str(x.shape)}")
    if x.dtype.is_bool or (mode == "avg" and not x.dtype.is_float):
        raise _fail(f"{mode} pool is not defined on {x.dtype.name} tensors")
    kernel = _ints("kernel", "pool", a["kernel"], r, 1)
    strides = _ints("strides", "pool", a["strides"], r, 1)
    dilations = _ints("dilations", "pool", a["dilations"], r, 1)
    pads = _pads("pool", a["pads"], r)
    _index_room("pool", x, kernel, dilations, pads)
    out: list[Dim] = [x.shape[0], x.shape[1]]
    for ax in range(r):
        o = pool_out_len(
            x.shape[2 + ax], kernel[ax], strides[ax], pads[ax], dilations[ax], bool(a["ceil_mode"])
        )
        if bounds(o)[0] < 0:
            raise _fail(f"pool: spatial axis {ax} of {shape_str(x.shape)} can be shorter than the window")
        out.append(o)
    return tuple(out), x.dtype


def _ref_pool(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    mode = node.attrs["mode"]
    k, s, d = node.attrs["kernel"], node.attrs["strides"], node.attrs["dilations"]
    r = len(k)
    pads = [(evaluate(lo, b), evaluate(hi, b)) for lo, hi in node.attrs["pads"]]
    shape = _ev(node.shape, b)
    if 0 in shape:
        return np.zeros(shape, node.dtype.np)
    acc = np.float64 if x.dtype.kind == "f" else x.dtype
    ident = reduce_identity("max", node.dtype) if mode == "max" else 0
    # pad the far end enough for ceil-mode windows too, then mark what each tap may read
    extra = [
        max(0, ss * (o - 1) + dd * (kk - 1) + 1 - (n + lo + hi))
        for ss, o, dd, kk, n, (lo, hi) in zip(s, shape[2:], d, k, x.shape[2:], pads, strict=True)
    ]
    full = [(lo, hi + e) for (lo, hi), e in zip(pads, extra, strict=True)]
    xp = np.pad(x.astype(acc), ((0, 0), (0, 0), *full), constant_values=ident)
    inside = np.pad(np.ones(x.shape[2:], bool), full)
    counted = np.pad(
        np.ones([n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads, strict=True)], bool),
        [(0, e) for e in extra],
    )
    win = _windows(xp, k, s, d, shape[2:])
    axes = tuple(range(2 + r, 2 + 2 * r))
    valid = _windows(inside[None, None], k, s, d, shape[2:])
    if mode == "max":
        with np.errstate(all="ignore"):
            return _out(node, np.max(np.where(valid, win, ident), axis=axes, initial=ident))
    mask = _windows(counted[None, None], k, s, d, shape[2:]) if node.attrs["count_include_pad"] else valid
    count = np.sum(mask, axis=axes)
    with np.errstate(all="ignore"):  # inf - inf in a window is NaN, as in the kernels
        total = np.sum(np.where(valid, win, 0.0), axis=axes)
        return _out(node, np.where(count > 0, total / np.maximum(count, 1), 0.0))


_register("pool", "pool", _infer_pool, _ref_pool)

# ---------------------------------------------------------------------------------------------
# cumsum along one axis


def _infer_cumsum(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    if not 0 <= a["axis"] < x.ndim:
        raise _fail(f"cumsum axis {a['axis']} out of range for {shape_str(x.shape)}")
    if x.dtype.is_bool:
        raise _fail("cumsum is not defined on bool tensors; cast first")
    return x.shape, x.dtype


def _ref_cumsum(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    axis, n = node.attrs["axis"], x.shape[node.attrs["axis"]]
    acc = np.float64 if x.dtype == np.float64 else (np.float32 if x.dtype.kind == "f" else x.dtype)
    v = x.astype(acc)
    if node.attrs.get("reverse", False):
        v = np.flip(v, axis)
    with np.errstate(all="ignore"):
        c = np.cumsum(v, axis=axis, dtype=acc)
    if node.attrs.get("exclusive", False):
        head = np.zeros_like(np.take(v, range(min(n, 1)), axis=axis))
        c = np.concatenate([head, np.take(c, range(n - 1), axis=axis)], axis=axis)
    if node.attrs.get("reverse", False):
        c = np.flip(c, axis)
    return _out(node, c)


_register("cumsum", "scan", _infer_cumsum, _ref_cumsum)

# ---------------------------------------------------------------------------------------------
# argmax / argmin along one axis (kept with size 1)


def _infer_argext(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    axis = a["axis"]
    if a["op"] not in ("max", "min"):
        raise _fail(f"argext op must be 'max' or 'min', got {a['op']!r}")
    if not 0 <= axis < x.ndim:
        raise _fail(f"arg{a['op']} axis {axis} out of range for {shape_str(x.shape)}")
    if bounds(x.shape[axis])[0] < 1:
        raise _fail(f"arg{a['op']}: axis {axis} of {shape_str(x.shape)} can be empty")
    if x.dtype.is_bool:
        raise _fail(f"arg{a['op']} is not defined on bool tensors; cast first")
    return (*x.shape[:axis], 1, *x.shape[axis + 1 :]), dt.int64


def _ref_argext(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    axis, op, last = node.attrs["axis"], node.attrs["op"], node.attrs.get("last", False)
    v = np.flip(x, axis) if last else x
    idx = np.argmax(v, axis=axis) if op == "max" else np.argmin(v, axis=axis)
    if last:
        idx = x.shape[axis] - 1 - idx
    return np.expand_dims(idx.astype(np.int64), axis)


_register("argext", "select", _infer_argext, _ref_argext)

# ---------------------------------------------------------------------------------------------
# topk indices along one axis


def _infer_topk(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    (x,) = ins
    axis, k = a["axis"], a["k"]
    if not 0 <= axis < x.ndim:
        raise _fail(f"topk axis {axis} out of range for {shape_str(x.shape)}")
    if not isinstance(k, int) or k < 0:
        raise _fail(f"topk k must be an int >= 0, got {k!r}")
    if bounds(x.shape[axis] - k)[0] < 0:
        raise _fail(f"topk: k={k} can exceed axis {axis} of {shape_str(x.shape)}")
    if x.dtype.is_bool:
        raise _fail("topk is not defined on bool tensors; cast first")
    return (*x.shape[:axis], k, *x.shape[axis + 1 :]), dt.int64


def _ref_topk(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    (x,) = args
    axis, k, largest = node.attrs["axis"], node.attrs["k"], node.attrs.get("largest", True)
    v = np.moveaxis(x, axis, -1)
    position = np.broadcast_to(np.arange(v.shape[-1]), v.shape)
    if v.dtype.kind == "f":
        nan = np.isnan(v)
        value = np.where(nan, 0.0, v.astype(np.float64))
        order = np.lexsort((position, -value if largest else value, ~nan if largest else nan), axis=-1)
    else:  # ~v orders ints descending without overflow (signed and unsigned)
        order = np.lexsort((position, np.invert(v) if largest else v), axis=-1)
    return np.moveaxis(order[..., :k].astype(np.int64), -1, axis)


_register("topk", "select", _infer_topk, _ref_topk)

# ---------------------------------------------------------------------------------------------
# take_along_axis (ONNX GatherElements)


def _infer_take(ins: tuple[Node, ...], a: Mapping[str, Any]) -> tuple[Shape, DType]:
    x, idx = ins
    axis = a["axis"]
    if idx.ndim != x.ndim or not idx.dtype.is_int:
        raise _fail(
            f"take_along_axis: index must be an int tensor of x's rank, got "
            f"{idx.dtype.name}{shape_str(idx.shape)} for x{shape_str(x.shape)}"
        )
    if not 0 <= axis < x.ndim:
        raise _fail(f"take_along_axis axis {axis} out of range for {shape_str(x.shape)}")
    for ax, (d, e) in enumerate(zip(x.shape, idx.shape, strict=True)):
        if ax != axis and d != e:
            raise _fail(
                f"take_along_axis: index {shape_str(idx.shape)} and x {shape_str(x.shape)} "
                f"differ on axis {ax}"
            )
    if bounds(x.shape[axis])[0] < 1 and bounds(prod(idx.shape))[1] > 0:
        raise _fail(f"take_along_axis: axis {axis} of {shape_str(x.shape)} can be empty")
    return idx.shape, x.dtype


def _ref_take(node: Node, args: list[np.ndarray], b: Mapping[str, int]) -> np.ndarray:
    x, idx = args
    axis = node.attrs["axis"]
    if idx.size == 0:
        return np.zeros(idx.shape, x.dtype)
    safe = np.clip(idx.astype(np.int64), 0, x.shape[axis] - 1)
    return np.take_along_axis(x, safe, axis=axis)


_register("take_along_axis", "index", _infer_take, _ref_take)
