"""Bodies of ``Tensor``'s neural-network methods: normalisation, convolution, pooling, scans and
selection. One function each; ``Tensor`` delegates to them (so ``_tensor`` stays one readable
class). Each records graph nodes only: the semantics are the ops' in ``asyncjit.graph``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentTypeError, TensorError
from ..graph import Node, aligned_copy, make_node
from ..symbolic import Dim, as_dim, upper

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = [
    "argext",
    "conv",
    "conv1d",
    "conv_transpose",
    "cumsum",
    "layer_norm",
    "log_softmax",
    "pool",
    "softmax",
    "take_along_axis",
    "topk",
]

Ints = int | Sequence[int]
Pads = int | Sequence[int] | Sequence[tuple[Dim, Dim]]


def int_arg(value: object, what: str) -> int:
    """``value`` as an int (numpy ints too), or ``ArgumentTypeError`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise ArgumentTypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return operator.index(value)


def norm_axis(axis: object, ndim: int) -> int:
    """``axis`` (an int, negative from the end) of a rank-``ndim`` tensor, checked."""
    ax = int_arg(axis, "axis")
    if not -ndim <= ax < max(ndim, 1):
        raise TensorError(f"axis {ax} is out of range for a tensor of rank {ndim}")
    return ax % ndim if ndim else 0


_axis = norm_axis


def tensor_arg(x: Tensor, value: object, what: str) -> Tensor:
    """``value`` if it is a Tensor (the class of ``x``), else ``ArgumentTypeError`` naming ``what``."""
    if not isinstance(value, type(x)):
        raise ArgumentTypeError(f"{what} must be a Tensor, got {type(value).__name__}")
    return value


def _per_axis(value: Ints, r: int, label: str) -> tuple[int, ...]:
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        return (operator.index(value),) * r
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ArgumentTypeError(f"{label} must be an int or a sequence of ints, got {type(value).__name__}")
    vals = tuple(int_arg(v, label) for v in value)
    if len(vals) != r:
        raise TensorError(f"{label} needs {r} values (one per spatial axis), got {vals}")
    return vals


def _pad_pairs(pads: Pads, r: int) -> tuple[tuple[Dim, Dim], ...]:
    """``int`` (both sides), ``(lo, hi)`` pairs, or ONNX's flat ``[lo_0, .., lo_r, hi_0, .., hi_r]``."""
    if isinstance(pads, int):
        return ((pads, pads),) * r
    seq: list[Any] = list(pads)
    if seq and all(isinstance(p, tuple | list) for p in seq):
        if len(seq) != r or any(len(p) != 2 for p in seq):
            raise TensorError(f"pads needs {r} (lo, hi) pairs, got {seq}")
        return tuple((as_dim(p[0]), as_dim(p[1])) for p in seq)
    if len(seq) != 2 * r:
        raise TensorError(f"pads needs {r} (lo, hi) pairs or {2 * r} ONNX-order values, got {seq}")
    return tuple((as_dim(seq[i]), as_dim(seq[r + i])) for i in range(r))


def softmax(x: Tensor, axis: int) -> Tensor:
    x = x._float()
    e = (x - x.max(axis, keepdims=True)).exp()
    return e / e.sum(axis, keepdims=True)


def log_softmax(x: Tensor, axis: int) -> Tensor:
    x = x._float()
    shifted = x - x.max(axis, keepdims=True)
    return shifted - shifted.exp().sum(axis, keepdims=True).log()


def layer_norm(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, axis: int | Sequence[int]
) -> Tensor:
    x = x._float()
    weight = None if weight is None else tensor_arg(x, weight, "layer_norm weight")
    bias = None if bias is None else tensor_arg(x, bias, "layer_norm bias")
    mean = x.mean(axis, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis, keepdims=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: int,
    padding: int | tuple[Dim, Dim],
    dilation: int,
    groups: int,
) -> Tensor:
    x, w = x._float(), tensor_arg(x, weight, "conv1d weight")._float()
    bias = None if bias is None else tensor_arg(x, bias, "conv1d bias")
    if w.dtype != x.dtype:
        w = w.cast(x.dtype)
    pad = (padding, padding) if isinstance(padding, int) else tuple(padding)
    # the op checks the arguments (and names the caller's weight) before any rewrite
    node = make_node("conv1d", (x.node, w.node), stride=stride, padding=pad, dilation=dilation, groups=groups)
    out = None if _by_fft(node, x) else _rewritten_conv1d(x, w, stride, (pad[0], pad[1]), dilation, groups)
    if out is None:
        out = type(x)(node)
    if bias is not None:
        out = out + bias.reshape(bias.shape[0], 1)
    return out


def _rewritten_conv1d(
    x: Tensor, w: Tensor, stride: int, pad: tuple[Dim, Dim], dilation: int, groups: int
) -> Tensor | None:
    """The conv1d (its arguments checked) by a cheaper route: taps that read only padding
    dropped, then as a matmul of one position or on folded DFT frames; the conv1d node of the
    cut weight where only the cut applies. None: the conv1d as given."""
    live = _live_weight(x, w, (stride,), (dilation,), (pad,))
    if live is not None:
        w, (pad,) = live
    out = _single_position(x, w, (pad,), groups)
    if out is None:
        out = _folded_dft(x, w, stride, pad, dilation, groups)
    if out is None and live is not None:
        out = type(x)(
            make_node(
                "conv1d", (x.node, w.node), stride=stride, padding=pad, dilation=dilation, groups=groups
            )
        )
    return out


def _live_taps(
    size: Dim, k: int, stride: int, dilation: int, lo: Dim, hi: Dim
) -> tuple[int, int, int, int] | None:
    """The first and last tap of one window axis that read the input at some output, with the
    pads that keep the output size once the taps outside them are gone: ``(first, last, lo,
    hi)``. None: the size or pads are symbolic, or there is nothing to drop."""
    if (
        not (isinstance(size, int) and isinstance(lo, int) and isinstance(hi, int))
        or min(stride, dilation, k) < 1
    ):
        return None
    n_out = (size + lo + hi - dilation * (k - 1) - 1) // stride + 1
    if size < 1 or lo < 0 or hi < 0 or n_out < 1:
        return None
    live = []
    for j in range(k):
        first_t = max(0, -(-(lo - j * dilation) // stride))  # the first output whose tap j is >= 0
        if first_t < n_out and first_t * stride + j * dilation - lo < size:
            live.append(j)
    if not live or (live[0] == 0 and live[-1] == k - 1):
        return None
    first, last = live[0], live[-1]
    new_lo = lo - first * dilation
    new_hi = (n_out - 1) * stride + dilation * (last - first) + 1 - size - new_lo
    if new_lo < 0 or new_hi < 0:
        return None
    return first, last, new_lo, new_hi


def _live_weight(
    x: Tensor,
    w: Tensor,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[Dim, Dim]],
) -> tuple[Tensor, tuple[tuple[Dim, Dim], ...]] | None:
    """A constant weight cut to the taps that read the input, and the pads that keep the output
    size, where the input's spatial sizes are static and small enough that some taps read
    nothing but padding at every output (a 3-tap conv over a length-1 input: one tap). Those
    taps only multiply zeros; skipping them leaves the same sums (a 1x1 conv then reads ``x``
    in place). Kept when a dropped tap holds an inf or NaN, whose product with a padded zero
    is NaN. None: nothing to drop, or the arguments are for the op's own checks to refuse."""
    r = len(strides)
    if w.node.op != "const" or x.ndim != r + 2 or w.ndim != r + 2 or len(dilations) != r or len(pads) != r:
        return None
    if not all(isinstance(v, int) for v in (*strides, *dilations)):
        return None
    cut: list[slice] = [slice(None), slice(None)]
    new_pads: list[tuple[Dim, Dim]] = []
    for ax in range(r):
        k = w.shape[2 + ax]
        live = None
        if isinstance(k, int) and len(pads[ax]) == 2:
            live = _live_taps(x.shape[2 + ax], k, strides[ax], dilations[ax], *pads[ax])
        if live is None:
            cut.append(slice(None))
            new_pads.append(pads[ax])
        else:
            cut.append(slice(live[0], live[1] + 1))
            new_pads.append((live[2], live[3]))
    if all(c == slice(None) for c in cut):
        return None
    value = np.asarray(w.node.attrs["value"])
    kept = value[tuple(cut)]
    finite = np.isfinite(value.astype(np.float64))
    if int(finite.sum()) - int(finite[tuple(cut)].sum()) != value.size - kept.size:
        return None
    return type(x)(make_node("const", (), value=aligned_copy(kept))), tuple(new_pads)


def _single_position(x: Tensor, w: Tensor, pads: Sequence[tuple[Dim, Dim]], groups: int) -> Tensor | None:
    """A float32 conv of one output position from one input position (a 1x1 kernel over spatial
    sizes of 1, as a head over pooled features or a 3-tap conv over one frame once its
    padding-only taps are gone) as the matmul ``x[N, cin] @ w[cout, cin]^T``: the conv kernels
    would read one column. None: any other conv."""
    r = x.ndim - 2
    if (
        groups != 1
        or x.dtype != dt.float32
        or w.ndim != x.ndim
        or len(pads) != r
        or any(tuple(p) != (0, 0) for p in pads)
        or any(d != 1 for d in (*x.shape[2:], *w.shape[2:]))
        or x.shape[1] != w.shape[1]
    ):
        return None
    cout = w.shape[0]
    flat = x.reshape(x.shape[0], x.shape[1]) @ w.reshape(cout, w.shape[1]).T
    return flat.reshape(x.shape[0], cout, *([1] * r))


def _by_fft(node: Node, x: Tensor) -> bool:
    """Whether conv1d ``node`` over ``x`` stays as it is for the compiler to run by FFT: its
    weight a constant windowed DFT basis (``passes._fusion.conv1d_fft_sign``, what the kernel
    choice asks) and two output frames or more at the bounds (one frame: the other rewrites)."""
    from ..passes._fusion import conv1d_fft_sign

    if conv1d_fft_sign(node) is None:
        return False
    lo, hi = node.attrs["padding"]
    frames = (upper(x.shape[2]) + lo + hi - int(node.inputs[1].shape[2])) // node.attrs["stride"] + 1
    return bool(upper(x.shape[0]) * frames >= 2)


def _dft_halves(value: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of a ``[M, K]`` filter bank split into those even about ``K/2`` (``w[n] ==
    w[K-n]``) and those odd (``w[n] == -w[K-n]``, zero at 0 and ``K/2``), as row indices; None
    when some row is neither (or K is odd)."""
    m, k = value.shape
    half = k // 2
    if k % 2 or k < 8 or m < 8:
        return None
    n = np.arange(1, half)
    even = (value[:, n] == value[:, k - n]).all(1)
    odd = (value[:, n] == -value[:, k - n]).all(1) & (value[:, 0] == 0) & (value[:, half] == 0) & ~even
    if not (even | odd).all():
        return None
    return np.flatnonzero(even), np.flatnonzero(odd)


def _folded_dft(
    x: Tensor, w: Tensor, stride: int, pad: tuple[Dim, Dim], dilation: int, groups: int
) -> Tensor | None:
    """A one-channel float32 conv1d whose constant filters are each even or odd about the
    window's middle (a DFT basis: cos and sin rows, how models export an STFT) computed on
    frames folded in half: ``w[n] * (x[n] + x[K-n])`` for the even rows, ``w[n] * (x[n] -
    x[K-n])`` for the odd, two ``[frames, K/2 + 1]`` matmuls with half the multiply-adds and
    half the weight reads of the convolution. Static length and pads. None: any other conv."""
    if (
        w.node.op != "const"
        or groups != 1
        or dilation != 1
        or x.dtype != dt.float32
        or x.ndim != 3
        or w.ndim != 3
        or x.shape[1] != 1
        or w.shape[1] != 1
        or not isinstance(stride, int)
        or stride < 1
    ):
        return None
    size, (lo, hi) = x.shape[2], pad
    if not (isinstance(size, int) and isinstance(lo, int) and isinstance(hi, int)) or min(lo, hi) < 0:
        return None
    value = np.asarray(w.node.attrs["value"])[:, 0, :]
    k, length = value.shape[1], size + lo + hi
    n_out = (length - k) // stride + 1
    rows = _dft_halves(value)
    if rows is None or n_out < 1:
        return None
    even, odd = rows
    half = k // 2
    n = x.shape[0]
    if k == 2 * stride:
        # frames of two hops ``[p | q]``: ``near = [p, 0]``, ``far = [0, rev(q)]`` (``rev(q)[n-1]
        # == x[K-n]``), from views of the padded input (as ``pad`` and ``reshape`` fuse)
        hops = x.pad([None, None, (lo, hi)]).reshape(n, length)
        hops = hops.shrink([None, (0, (n_out + 1) * stride)]).reshape(n, n_out + 1, stride)
        near = hops.shrink([None, (0, n_out), None]).pad([None, None, (0, 1)])
        rev = type(x).const(np.arange(stride - 1, -1, -1, dtype=np.int64))
        far = hops.shrink([None, (1, n_out + 1), None]).gather(2, rev).pad([None, None, (1, 0)])
        a, b = near.reshape(n * n_out, half + 1), far.reshape(n * n_out, half + 1)
    else:
        # the padded input with one zero past its end (index ``length``), gathered per frame
        xz = x.pad([None, None, (lo, hi + 1)])
        starts = np.arange(n_out)[:, None] * stride
        i = np.arange(half + 1)[None, :]
        near_at = starts + i  # x[n], n <= K/2
        far_at = np.where((i > 0) & (i < half), starts + k - i, length)  # x[K-n], 0 < n < K/2; else 0

        def frames(index: np.ndarray) -> Tensor:
            idx = type(x).const(index.reshape(-1).astype(np.int64))
            return xz.gather(2, idx).reshape(n * n_out, half + 1)

        a, b = frames(near_at), frames(far_at)
    parts = []
    for sel, folded in ((even, a + b), (odd, a - b)):
        if len(sel):
            basis = np.ascontiguousarray(value[sel, : half + 1].T)  # [K/2 + 1, rows]: [K, N]
            parts.append(folded @ type(x).const(basis))
    y = parts[0] if len(parts) == 1 else type(x).cat(parts, 1)
    order = np.concatenate([even, odd])
    if not np.array_equal(order, np.arange(len(order))):
        y = y.gather(1, type(x).const(np.argsort(order).astype(np.int64)))
    return y.reshape(n, n_out, len(order)).permute(0, 2, 1)


def conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    strides: Ints,
    pads: Pads,
    dilations: Ints,
    groups: int,
) -> Tensor:
    x, w = x._float(), tensor_arg(x, weight, "conv weight")._float()
    bias = None if bias is None else tensor_arg(x, bias, "conv bias")
    if w.dtype != x.dtype:
        w = w.cast(x.dtype)
    r = x.ndim - 2
    if r < 1:
        raise TensorError(f"conv needs x[N, C, *spatial] with a spatial axis, got rank {x.ndim}")
    st, dil, pp = _per_axis(strides, r, "strides"), _per_axis(dilations, r, "dilations"), _pad_pairs(pads, r)
    b = None if bias is None else bias._float().cast(x.dtype).reshape(-1)
    ins: tuple[Node, ...] = (x.node, w.node) if b is None else (x.node, w.node, b.node)
    # the op checks the arguments (and names the caller's weight) before any rewrite
    node = make_node("conv", ins, strides=st, pads=pp, dilations=dil, groups=groups)
    live = _live_weight(x, w, st, dil, pp)
    if live is not None:
        w, pp = live
    single = _single_position(x, w, pp, groups)
    if single is not None:
        return single if b is None else single + b.reshape(-1, *([1] * r))
    if live is None:
        return type(x)(node)
    ins = (x.node, w.node) if b is None else (x.node, w.node, b.node)
    return type(x)(make_node("conv", ins, strides=st, pads=pp, dilations=dil, groups=groups))


def _reverse(x: Tensor, axis: int) -> Tensor:
    n = x.shape[axis]
    if not isinstance(n, int):
        raise TensorError(f"conv_transpose needs static weight dims, got {n}")
    return x.gather(axis, type(x).const(np.arange(n - 1, -1, -1, dtype=np.int64)))


def conv_transpose(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    strides: Ints,
    pads: Pads,
    dilations: Ints,
    groups: int,
    output_padding: Ints,
) -> Tensor:
    """Lowered to ``conv``: zeros inserted between input elements (the stride), the weight flipped
    and transposed per group, pads ``dilation*(k-1) - pad`` (a negative one crops)."""
    x, w = x._float(), tensor_arg(x, weight, "conv_transpose weight")._float()
    bias = None if bias is None else tensor_arg(x, bias, "conv_transpose bias")
    if w.dtype != x.dtype:
        w = w.cast(x.dtype)
    r = x.ndim - 2
    if r < 1 or w.ndim != x.ndim:
        raise TensorError(f"conv_transpose needs x[N, C, *S] and w[C, O/g, *K], got ranks {x.ndim}, {w.ndim}")
    st, dil = _per_axis(strides, r, "strides"), _per_axis(dilations, r, "dilations")
    outpad, pp = _per_axis(output_padding, r, "output_padding"), _pad_pairs(pads, r)
    cin, og = w.shape[0], w.shape[1]
    if not isinstance(cin, int) or not isinstance(og, int) or cin % groups or x.shape[1] != cin:
        raise TensorError(f"conv_transpose: x channels {x.shape[1]} vs weight {w.shape} with groups={groups}")
    ks = [int(d) for d in w.shape[2:]]
    # weight [C, O/g, *K] -> [g, C/g, O/g, *K] -> [g, O/g, C/g, *K] -> [O, C/g, *K], flipped
    wt = w.reshape(groups, cin // groups, og, *ks).permute(0, 2, 1, *range(3, 3 + r))
    wt = wt.reshape(groups * og, cin // groups, *ks)
    for ax in range(r):
        wt = _reverse(wt, 2 + ax)
    up = x
    for ax in range(r):
        s = st[ax]
        if s == 1:
            continue
        a = 2 + ax
        n = up.shape[a]
        up = up.unsqueeze(a + 1).pad([None] * (a + 1) + [(0, s - 1)] + [None] * (up.ndim - a - 1))
        up = up.reshape(*up.shape[:a], n * s, *up.shape[a + 2 :])
        sl: list[tuple[Dim, Dim] | None] = [None] * up.ndim
        sl[a] = (0, (n - 1) * s + 1)
        up = up.shrink(sl)
    conv_pads: list[tuple[Dim, Dim]] = []
    crop: list[tuple[Dim, Dim] | None] = [None, None]
    for ax in range(r):
        span = dil[ax] * (ks[ax] - 1)
        lo, hi = as_dim(span) - pp[ax][0], as_dim(span) - pp[ax][1] + outpad[ax]
        clo = lo if isinstance(lo, int) and lo < 0 else 0
        chi = hi if isinstance(hi, int) and hi < 0 else 0
        conv_pads.append((lo - clo, hi - chi))
        crop.append((-clo, -chi))
    out = conv(up, wt, bias, 1, conv_pads, dil, groups)
    if any(c != (0, 0) for c in crop[2:]):
        sl2: list[tuple[Dim, Dim] | None] = [None, None]
        for ax, c in enumerate(crop[2:]):
            assert c is not None
            d = out.shape[2 + ax]
            sl2.append((c[0], d - c[1]))
        out = out.shrink(sl2)
    return out


def pool(
    x: Tensor,
    mode: str,
    kernel: Ints,
    strides: Ints | None,
    pads: Pads,
    dilations: Ints,
    ceil_mode: bool,
    count_include_pad: bool,
) -> Tensor:
    r = x.ndim - 2
    if r < 1:
        raise TensorError(f"{mode}_pool needs x[N, C, *spatial] with a spatial axis, got rank {x.ndim}")
    k = _per_axis(kernel, r, "kernel")
    st = k if strides is None else _per_axis(strides, r, "strides")
    src = x._float() if mode == "avg" else x
    return type(x)(
        make_node(
            "pool",
            (src.node,),
            mode=mode,
            kernel=k,
            strides=st,
            pads=_pad_pairs(pads, r),
            dilations=_per_axis(dilations, r, "dilations"),
            ceil_mode=bool(ceil_mode),
            count_include_pad=bool(count_include_pad),
        )
    )


def cumsum(x: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    src = x.cast(dt.int64) if x.dtype.is_bool else x
    return type(x)(
        make_node(
            "cumsum", (src.node,), axis=_axis(axis, x.ndim), exclusive=bool(exclusive), reverse=bool(reverse)
        )
    )


def argext(x: Tensor, op: str, axis: int | None, keepdims: bool, last: bool) -> Tensor:
    src = x.cast(dt.int32) if x.dtype.is_bool else x
    src = src.reshape(-1) if axis is None else src
    ax = 0 if axis is None else _axis(axis, x.ndim)
    out = type(x)(make_node("argext", (src.node,), op=op, axis=ax, last=bool(last)))
    if axis is None:
        return out.reshape(*([1] * x.ndim)) if keepdims else out.reshape()
    return out if keepdims else out.squeeze(ax)


def take_along_axis(x: Tensor, index: Any, axis: int) -> Tensor:
    idx = x._wrap(index)
    return type(x)(make_node("take_along_axis", (x.node, idx.node), axis=_axis(axis, x.ndim)))


def topk(x: Tensor, k: int, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    ax = _axis(axis, x.ndim)
    idx = type(x)(make_node("topk", (x.node,), k=k, axis=ax, largest=bool(largest)))
    return take_along_axis(x, idx, ax), idx
