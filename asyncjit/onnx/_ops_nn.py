"""Neural-network ONNX ops: matmuls, convolutions, pools, normalisations, softmax.

1-D convolutions use the compiler's ``conv1d`` kernel; higher ranks are composed as strided tap
slices and one batched matmul per group (correct at any size; a dedicated N-d kernel replaces it
when the compiler has one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import dtypes as dt
from ..symbolic import Dim, prod, upper
from ..tensor import Tensor
from ._ops_shape import axis_of
from ._registry import NodeCtx, checked, op
from ._values import Value, const_tensor

__all__ = ["conv_node", "window_geometry"]


@op("MatMul")
def _matmul(n: NodeCtx, ins: list[Value | None]) -> Value:
    a, b = n.t(ins[0]), n.t(ins[1])
    if a.ndim > 2 and b.ndim == 2:
        # rows of every batch at once: a batched matmul would broadcast (copy) b per batch
        lead = a.shape[:-1]
        return (a.reshape(-1, a.shape[-1]) @ b).reshape(*lead, b.shape[1])
    return a.matmul(b)


@op("Gemm")
def _gemm(n: NodeCtx, ins: list[Value | None]) -> Value:
    a, b = n.t(ins[0]), n.t(ins[1])
    if n.flag("transA", 0):
        a = a.T
    if n.flag("transB", 0):
        b = b.T  # a constant weight is stored transposed once by constant folding (passes._fold)
    out = a @ b
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if len(ins) > 2 and ins[2] is not None:
        c = n.t(ins[2]).cast(out.dtype)
        out = out + (c * beta if beta != 1.0 else c)
    return out


def _attr_list(n: NodeCtx, name: str, count: int, default: int) -> list[int]:
    v = n.attr(name)
    return [default] * count if not v else [int(x) for x in v]


def window_geometry(
    n: NodeCtx, spatial: Sequence[Dim], kernel: Sequence[int], ceil_mode: bool = False
) -> tuple[list[int], list[int], list[tuple[Dim, Dim]], list[Dim]]:
    """Strides, dilations, (begin, end) pads and output sizes of a conv/pool window (auto_pad too)."""
    k = len(kernel)
    strides = _attr_list(n, "strides", k, 1)
    dil = _attr_list(n, "dilations", k, 1)
    pads_attr = _attr_list(n, "pads", 2 * k, 0)
    for label, values, count, least in (
        ("kernel_shape", kernel, k, 1), ("strides", strides, k, 1), ("dilations", dil, k, 1),
        ("pads", pads_attr, 2 * k, 0),
    ):  # fmt: skip
        if len(values) != count or min(values, default=least) < least:
            raise n.fail(f"{label} must be {count} ints >= {least}, got {list(values)}")
    auto = n.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads: list[tuple[Dim, Dim]] = []
    outs: list[Dim] = []
    for i in range(k):
        d, s, dk = spatial[i], strides[i], (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if not isinstance(d, int):
                raise n.fail("auto_pad SAME needs static spatial dims")
            out = -(-d // s)
            total = max((out - 1) * s + dk - d, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
            outs.append(out)
            continue
        lo, hi = (0, 0) if auto == "VALID" else (pads_attr[i], pads_attr[i + k])
        span = d + lo + hi - dk
        if ceil_mode:
            out_d: Dim = -(-span // s) + 1 if isinstance(span, int) else (span + s - 1) // s + 1
            if isinstance(out_d, int) and (out_d - 1) * s >= d + lo:  # type: ignore[operator]
                out_d -= 1  # the last window must start inside the input or the begin pad
        else:
            out_d = span // s + 1
        pads.append((lo, hi))
        outs.append(out_d)
    return strides, dil, pads, outs


@op("Conv")
def _conv(n: NodeCtx, ins: list[Value | None]) -> Value:
    bias = n.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return conv_node(n, n.t(ins[0]), n.t(ins[1]), bias)


def conv_node(n: NodeCtx, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """``x`` convolved with ``w`` (plus ``bias``) by the node's window attributes, in x's dtype."""
    w = w.cast(x.dtype)
    kernel = [int(d) for d in w.shape[2:]]
    group = n.attr("group", 1)
    strides, dil, pads, _ = window_geometry(n, x.shape[2:], kernel)
    if len(kernel) == 1:
        out = x.conv1d(w, None, stride=strides[0], padding=pads[0], dilation=dil[0], groups=group)
    else:
        out = x.conv(w, None, strides, pads, dil, group)
    if bias is not None:
        out = out + bias.cast(out.dtype).reshape(bias.shape[0], *([1] * len(kernel)))
    return out


@op("ConvTranspose")
def _conv_transpose(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, w = n.t(ins[0]), n.t(ins[1])
    w = w.cast(x.dtype)
    group = n.attr("group", 1)
    kernel = [int(d) for d in w.shape[2:]]
    k = len(kernel)
    strides = _attr_list(n, "strides", k, 1)
    dil = _attr_list(n, "dilations", k, 1)
    out_pad = _attr_list(n, "output_padding", k, 0)
    pads = _attr_list(n, "pads", 2 * k, 0)
    spatial = x.shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise n.fail("ConvTranspose needs static spatial dims")
    full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 + out_pad[i] for i in range(k)]
    auto = n.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    out_shape = n.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = (
            list(out_shape)[-k:]
            if out_shape is not None
            else [d * s for d, s in zip(spatial, strides, strict=True)]
        )
        pads = [0] * (2 * k)
        for i in range(k):
            total = full[i] - target[i]
            if auto == "SAME_UPPER":
                pads[i], pads[i + k] = total // 2, total - total // 2  # type: ignore[assignment]
            else:
                pads[i], pads[i + k] = total - total // 2, total // 2  # type: ignore[assignment]
    bias = n.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return x.conv_transpose(w, bias, strides, pads, dil, group, out_pad)


def _pool(n: NodeCtx, x: Tensor, kind: str) -> Tensor:
    kernel = [int(v) for v in n.attr("kernel_shape")]
    ceil = n.flag("ceil_mode", 0)
    strides, dil, pads, _ = window_geometry(n, x.shape[2:], kernel, ceil)
    if kind == "max":
        return x.max_pool(kernel, strides, pads, dil, ceil)
    if kind == "lp":
        p = float(n.attr("p", 2))
        count = float(prod(kernel))
        pooled = x.abs().pow(p).avg_pool(kernel, strides, pads, dil, ceil, True)
        return (pooled * count).pow(1.0 / p).cast(x.dtype)
    return x.avg_pool(kernel, strides, pads, dil, ceil, n.flag("count_include_pad", 0)).cast(x.dtype)


@op("MaxPool")
def _max_pool(n: NodeCtx, ins: list[Value | None]) -> Value | list[Value | None]:
    if len(n.proto.output) > 1 and n.proto.output[1]:
        return _max_pool_with_indices(n, n.t(ins[0]))
    return _pool(n, n.t(ins[0]), "max")


def _max_pool_with_indices(n: NodeCtx, x: Tensor) -> list[Value | None]:
    """MaxPool's values and flat input indices: every window tap is gathered (padding reads
    -inf), the first largest tap wins, and a table made at load time maps it to its index."""
    kernel = [int(v) for v in n.attr("kernel_shape")]
    spatial = x.shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise n.fail("MaxPool's Indices output needs static spatial dims")
    dims = [int(d) for d in spatial]
    strides, dil, pads, outs = window_geometry(n, dims, kernel, n.flag("ceil_mode", 0))
    out = [int(o) for o in outs]
    taps = np.array(list(np.ndindex(*kernel)))  # [K, r]
    cells = np.array(list(np.ndindex(*out)))  # [Q, r]
    pos = cells[None] * np.array(strides) + taps[:, None] * np.array(dil) - np.array([lo for lo, _ in pads])
    inside = ((pos >= 0) & (pos < np.array(dims))).all(-1)  # [K, Q]
    clipped = np.clip(pos, 0, np.array(dims) - 1)
    source = np.ravel_multi_index(tuple(clipped.transpose(2, 0, 1)), dims)
    nb, ch = x.shape[0], x.shape[1]
    flat = x.reshape(nb, ch, -1)
    index = Tensor.const(source.reshape(1, 1, -1)).expand(nb, ch, source.size)
    lowest = float("-inf") if x.dtype.is_float else float(np.iinfo(x.dtype.np).min)  # type: ignore[type-var]
    values = Tensor.select(Tensor.const(inside.reshape(1, 1, -1)), flat.take_along_axis(index, 2), lowest)
    values = values.reshape(nb, ch, len(taps), len(cells))
    best = values.argmax(2, keepdims=True)  # [N, C, 1, Q]
    y = values.take_along_axis(best, 2).reshape(nb, ch, *out).cast(x.dtype)
    # the winning tap's input position, row-major (or column-major with storage_order 1)
    order = list(reversed(range(len(dims)))) if n.attr("storage_order", 0) else list(range(len(dims)))
    strides_in = np.ones(len(dims), np.int64)
    for i in range(len(order) - 2, -1, -1):
        strides_in[order[i]] = strides_in[order[i + 1]] * dims[order[i + 1]]
    where = (clipped * strides_in).sum(-1)  # [K, Q]
    table = Tensor.const(where.reshape(1, 1, len(taps), len(cells)).astype(np.int64))
    at = table.expand(nb, ch, len(taps), len(cells)).take_along_axis(best, 2).reshape(nb, ch, -1)
    plane = int(np.prod(dims))
    base = Tensor.arange(nb * ch, dt.int64).reshape(nb, ch, 1) * plane
    return [y, (at + base).reshape(nb, ch, *out)]


@op("AveragePool")
def _avg_pool(n: NodeCtx, ins: list[Value | None]) -> Value:
    return _pool(n, n.t(ins[0]), "avg")


@op("LpPool")
def _lp_pool(n: NodeCtx, ins: list[Value | None]) -> Value:
    return _pool(n, n.t(ins[0]), "lp")


@op("GlobalAveragePool")
def _global_avg(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x.mean(tuple(range(2, x.ndim)), keepdims=True)


@op("GlobalMaxPool")
def _global_max(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    return x.max(tuple(range(2, x.ndim)), keepdims=True)


@op("GlobalLpPool")
def _global_lp(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    p = float(n.attr("p", 2))
    return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdims=True).pow(1.0 / p)


def _channel(v: Tensor, ndim: int) -> Tensor:
    return v.reshape(v.shape[0], *([1] * (ndim - 2)))


@op("BatchNormalization")
def _batch_norm(n: NodeCtx, ins: list[Value | None]) -> Value:
    if n.attr("training_mode", 0):
        raise n.fail("training_mode=1 is not supported (inference only)")
    x = n.t(ins[0])
    eps = n.attr("epsilon", 1e-5)
    scale, bias, mean, var = ins[1], ins[2], ins[3], ins[4]
    if all(isinstance(v, np.ndarray) for v in (scale, bias, mean, var)):
        s = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)  # type: ignore[union-attr]
        b = (bias - mean * s).astype(np.float32)
        return x * _channel(const_tensor(s.astype(x.dtype.np)), x.ndim) + _channel(
            const_tensor(b.astype(x.dtype.np)), x.ndim
        )
    ts, tb, tm, tv = (n.t(v).cast(x.dtype) for v in (scale, bias, mean, var))
    inv = (tv + eps).rsqrt() * ts
    return (x - _channel(tm, x.ndim)) * _channel(inv, x.ndim) + _channel(tb, x.ndim)


@op("InstanceNormalization")
def _instance_norm(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdims=True)
    c = x - mean
    var = (c * c).mean(axes, keepdims=True)
    y = c * (var + n.attr("epsilon", 1e-5)).rsqrt()
    return y * _channel(n.t(ins[1]).cast(x.dtype), x.ndim) + _channel(n.t(ins[2]).cast(x.dtype), x.ndim)  # type: ignore[no-any-return]


@op("LayerNormalization")
def _layer_norm(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x = n.t(ins[0])
    axis = axis_of(n.attr("axis", -1), x.ndim, n)
    axes = tuple(range(axis, x.ndim))
    xf = x.cast(dt.float32)
    mean = xf.mean(axes, keepdims=True)
    c = xf - mean
    var = (c * c).mean(axes, keepdims=True)
    inv = (var + n.attr("epsilon", 1e-5)).rsqrt()
    y = c * inv
    y = y * n.t(ins[1]).cast(dt.float32)
    if len(ins) > 2 and ins[2] is not None:
        y = y + n.t(ins[2]).cast(dt.float32)
    return [y.cast(x.dtype), mean, inv]


@op("GroupNormalization", since=18)
def _group_norm(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    g = n.attr("num_groups")
    N, C = x.shape[0], x.shape[1]
    rest = x.shape[2:]
    xg = x.reshape(N, g, -1)
    mean = xg.mean(2, keepdims=True)
    c = xg - mean
    var = (c * c).mean(2, keepdims=True)
    y = (c * (var + n.attr("epsilon", 1e-5)).rsqrt()).reshape(N, C, *rest)
    scale, bias = n.t(ins[1]), n.t(ins[2])
    if n.opset < 21 and scale.shape[0] != C:
        per = C // g
        scale = scale.reshape(g, 1).expand(g, per).reshape(C)
        bias = bias.reshape(g, 1).expand(g, per).reshape(C)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)  # type: ignore[no-any-return]


@op("MeanVarianceNormalization")
def _mvn(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axes = tuple(n.attr("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdims=True)
    c = x - mean
    return c / ((c * c).mean(axes, keepdims=True).sqrt() + 1e-9)


@op("LpNormalization")
def _lp_norm(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axis = n.attr("axis", -1)
    norm = (
        x.abs().sum(axis, keepdims=True) if n.attr("p", 2) == 1 else (x * x).sum(axis, keepdims=True).sqrt()
    )
    return x / Tensor.select(norm == 0.0, 1.0, norm)  # an all-zero slice stays zero, not 0/0


@op("LRN")
def _lrn(n: NodeCtx, ins: list[Value | None]) -> Value:
    """``x / (bias + alpha/size * sum of x^2 over the size channels around)^beta``: the sum is a
    window over the channel axis, an average pool of ``x^2`` counting the zero padding, times
    the window (one kernel; a chain of ``size`` shifted adds grew with it, unboundedly)."""
    x = n.t(ins[0])
    size = n.attr("size")
    if not isinstance(size, int) or size < 1:
        raise n.fail(f"size must be an int >= 1, got {size!r}")
    alpha, beta, bias = n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0)
    if x.ndim < 2:
        raise n.fail(f"LRN needs x[N, C, ...], got rank {x.ndim}")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    # a window reaching past every channel adds only zeros: clamped, any size costs the same
    reach = max(int(upper(x.shape[1])) - 1, 0)
    lo, hi = min(lo, reach), min(hi, reach)
    k = lo + hi + 1
    sq = (x * x).reshape(x.shape[0], 1, x.shape[1], prod(x.shape[2:]))  # [N, 1, C, positions]
    total = sq.avg_pool([k, 1], [1, 1], [(lo, hi), (0, 0)], 1, False, True) * float(k)
    return x / (total.reshape(*x.shape) * (alpha / size) + bias).pow(beta)  # type: ignore[no-any-return]


def _softmax_like(n: NodeCtx, x: Tensor, fn: str) -> Tensor:
    def apply(t: Tensor, axis: int) -> Tensor:
        if fn == "softmax":
            return t.softmax(axis)
        if fn == "log_softmax":
            return t.log_softmax(axis)
        m = t.max(axis, keepdims=True)
        idx = Tensor.arange(t.shape[axis], dt.int64).reshape(
            *([1] * axis), t.shape[axis], *([1] * (t.ndim - axis - 1))
        )
        first = Tensor.select(t == m, idx.expand(*t.shape), t.shape[axis]).min(axis, keepdims=True)
        return (idx == first).cast(t.dtype).expand(*t.shape)

    if n.opset < 13:
        axis = axis_of(n.attr("axis", 1), x.ndim, n)
        flat = x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))
        return apply(flat, 1).reshape(*x.shape).cast(x.dtype)
    return apply(x, axis_of(n.attr("axis", -1), x.ndim, n)).cast(x.dtype)


op("Softmax")(lambda n, ins: _softmax_like(n, n.t(ins[0]), "softmax"))
op("LogSoftmax")(lambda n, ins: _softmax_like(n, n.t(ins[0]), "log_softmax"))
op("Hardmax")(lambda n, ins: _softmax_like(n, n.t(ins[0]), "hardmax"))


def _expand_ellipsis(
    n: NodeCtx, eq: str, terms: list[str], rhs: str | None, operands: list[Tensor]
) -> tuple[list[str], str]:
    """Spell each ``...`` as letters the equation does not use, aligned from the right as numpy
    broadcasts them; an implicit output puts them first."""
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    ranks = [
        t.ndim - len(term.replace("...", "")) if "..." in term else 0
        for term, t in zip(terms, operands, strict=True)
    ]
    width = max(ranks, default=0)
    if min(ranks, default=0) < 0 or width > len(free):
        raise n.fail(f"the equation {eq!r} does not fit the operands' ranks")
    batch = "".join(free[:width])
    spelled = [term.replace("...", batch[width - r :]) for term, r in zip(terms, ranks, strict=True)]
    if rhs is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        return spelled, batch + "".join(sorted(c for c, k in counts.items() if k == 1))
    return spelled, rhs.replace("...", batch)


@op("Einsum")
def _einsum(n: NodeCtx, ins: list[Value | None]) -> Value:
    eq = n.attr("equation").replace(" ", "")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    ops_ = [n.t(v) for v in ins if v is not None]
    if "..." in eq:
        terms, rhs = _expand_ellipsis(n, eq, terms, rhs if arrow else None, ops_)
        arrow = "->"
    if not arrow:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    letters = sorted({c for t in terms for c in t}, key=lambda c: (c not in rhs, rhs.find(c), c))
    aligned = []
    for term, t in zip(terms, ops_, strict=True):
        # a repeated letter in one term is a diagonal
        while len(set(term)) < len(term):
            c = next(ch for ch in term if term.count(ch) > 1)
            i, j = term.index(c), term.index(c, term.index(c) + 1)
            d = t.shape[i]
            eye = const_tensor(np.eye(int(d), dtype=t.dtype.np))
            shape = [1] * t.ndim
            shape[i], shape[j] = int(d), int(d)
            t = (t * eye.reshape(*shape)).sum(j)
            term = term[:j] + term[j + 1 :]
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        t = t.permute(*order)
        own: dict[str, Dim] = {term[i]: t.shape[k] for k, i in enumerate(order)}
        aligned.append(t.reshape(*[own.get(c, 1) for c in letters]))  # size-1 dims broadcast
    out = aligned[0]
    for t in aligned[1:]:
        out = out * t
    reduce_axes = [i for i, c in enumerate(letters) if c not in rhs]
    if reduce_axes:
        out = out.sum(reduce_axes)
    kept = [c for c in letters if c in rhs]
    return out.permute(*[kept.index(c) for c in rhs]) if kept else out


def _round_even(x: Tensor) -> Tensor:
    """numpy's ``rint`` (``_ops_lowp.rint``: one fused loop, bit for bit)."""
    from ._ops_lowp import rint

    return rint(x)


@op("RMSNormalization", since=23)
def _rms_norm(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    axis = axis_of(n.attr("axis", -1), x.ndim, n)
    axes = tuple(range(axis, x.ndim))
    xf = x.cast(dt.float32)
    y = xf * ((xf * xf).mean(axes, keepdims=True) + n.attr("epsilon", 1e-5)).rsqrt()
    out: Tensor = (y * n.t(ins[1]).cast(dt.float32)).cast(x.dtype)
    return out


@op("Swish", since=24)
def _swish(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    gate: Tensor = (x * float(n.attr("alpha", 1.0))).sigmoid().cast(x.dtype)
    return x * gate


def _nll(n: NodeCtx, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """Negative log-likelihood of ``target`` classes (axis 1 of ``logp``), ONNX's reductions.

    A class other than ``ignore_index`` counts from the end when negative (as ONNX Runtime's
    and the reference's gathers do); one outside ``[-C, C)``, or outside the weights, fails the
    run (``IndexOutOfRangeError``), as ONNX Runtime fails it."""
    ignore = n.attr("ignore_index")
    reduction = n.attr("reduction", "mean")
    target = target.cast(dt.int64)
    safe = (
        target
        if ignore is None
        else Tensor.select(target == ignore, Tensor.zeros(target.shape, dt.int64), target)
    )

    def wrapped(size: Dim) -> Tensor:
        return checked(n, Tensor.select(safe < 0, safe + size, safe), size)

    picked = logp.take_along_axis(wrapped(logp.shape[1]).unsqueeze(1), 1).squeeze(1)  # [N, d1, ...]
    w = (
        Tensor.ones(target.shape, logp.dtype)
        if weight is None
        else weight.cast(logp.dtype).gather(0, wrapped(weight.shape[0]).reshape(-1)).reshape(*target.shape)
    )
    if ignore is not None:
        w = Tensor.select(target == ignore, Tensor.zeros(w.shape, w.dtype), w)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if weight is None and ignore is None:
        return loss.mean()
    return loss.sum() / w.sum()


@op("NegativeLogLikelihoodLoss")
def _nll_loss(n: NodeCtx, ins: list[Value | None]) -> Value:
    weight = n.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return _nll(n, n.t(ins[0]), n.t(ins[1]), weight)


@op("SoftmaxCrossEntropyLoss")
def _sce_loss(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x = n.t(ins[0])
    logp = x.log_softmax(1).cast(x.dtype)
    weight = n.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return [_nll(n, logp, n.t(ins[1]), weight), logp]


@op("QLinearMatMul")
def _qlinear_matmul(n: NodeCtx, ins: list[Value | None]) -> Value:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (n.t(v) for v in ins[:8])

    def deq(q: Tensor, scale: Tensor, zp: Tensor, axis_last: bool) -> Tensor:
        s, z = scale.cast(dt.float32), zp.cast(dt.float32)
        if s.ndim == 1 and s.shape[0] != 1:  # per column of b / per row of a
            s = s.reshape(1, s.shape[0]) if axis_last else s.reshape(s.shape[0], 1)
            z = z.reshape(1, z.shape[0]) if axis_last else z.reshape(z.shape[0], 1)
        return (q.cast(dt.float32) - z) * s

    y = deq(a, a_scale, a_zp, False) @ deq(b, b_scale, b_zp, True)
    info = np.iinfo(y_zp.dtype.np)  # type: ignore[type-var]
    q = _round_even(y / y_scale.cast(dt.float32)) + y_zp.cast(dt.float32)
    return q.clip(float(info.min), float(info.max)).cast(y_zp.dtype)


@op("DynamicQuantizeLinear")
def _dynamic_quantize(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x = n.t(ins[0]).cast(dt.float32)
    lo = x.min().minimum(0.0)
    hi = x.max().maximum(0.0)
    # an all-zero (or empty) input has no range: scale 1 and zero point 0 as ONNX Runtime gives
    # (the formula divides 0 by 0; ONNX's reference takes 1/255)
    ranged = (hi - lo) / 255.0
    scale = Tensor.select(ranged > 0.0, ranged, 1.0)  # also a range whose scale underflows
    zp = _round_even(-lo / scale).clip(0.0, 255.0)
    y = (_round_even(x / scale) + zp).clip(0.0, 255.0).cast(dt.uint8)
    return [y, scale, zp.cast(dt.uint8)]


def _window(n: NodeCtx, ins: list[Value | None], coeffs: tuple[float, ...]) -> Value:
    size = int(n.const(ins[0], "size").reshape(-1)[0])
    periodic = n.flag("periodic", 1)
    denom = size if periodic else size - 1
    k = np.arange(size, dtype=np.float64)
    w = np.zeros(size)
    for i, c in enumerate(coeffs):
        w += (-1) ** i * c * np.cos(2 * np.pi * i * k / max(denom, 1))
    from ._values import np_dtype

    return w.astype(np_dtype(n.attr("output_datatype", 1)))


op("HannWindow")(lambda n, ins: _window(n, ins, (0.5, 0.5)))
op("HammingWindow")(lambda n, ins: _window(n, ins, (25 / 46, 21 / 46)))
op("BlackmanWindow")(lambda n, ins: _window(n, ins, (0.42, 0.5, 0.08)))
