"""The neural-network op kinds of ``strategies.graph_cases`` and the wider int dtypes.

Conv, pool, cumsum, argmax/argmin, topk and take_along_axis, each with an independent loop
oracle written here, kept apart from the core kinds of ``strategies_kinds``; ``strategies``
merges ``NN_KIND_BUILDERS`` into ``KIND_BUILDERS``. Importing this module also adds the
``WIDE_INT_DTYPES`` to the oracle's ``NP_TYPES``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from hypothesis import strategies as st
from oracle import (
    NP_TYPES,
    oracle_cast,
    round_to,
)
from strategies_case import DimChoice, _Builder
from strategies_kinds import _upper

from asyncjit import Tensor
from asyncjit.symbolic import Dim

__all__ = ["NN_KINDS", "NN_KIND_BUILDERS", "WIDE_INT_DTYPES"]


def oracle_conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    groups: int,
    dilations: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Direct loops over every output element (ONNX Conv; pads in ONNX order)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    dh, dw = dilations
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, max(oh, 0), max(ow, 0)))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(max(oh, 0)):
            for j in range(max(ow, 0)):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * strides[0] : i * strides[0] + dh * (kh - 1) + 1 : dh,
                    j * strides[1] : j * strides[1] + dw * (kw - 1) + 1 : dw,
                ]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return round_to(out, x.dtype)


def oracle_pool1d(
    x: np.ndarray, mode: str, k: int, s: int, pad: tuple[int, int], ceil: bool, include: bool
) -> np.ndarray:
    """ONNX MaxPool/AveragePool on x[N, C, L], one window at a time."""
    length = x.shape[2]
    span = length + pad[0] + pad[1] - k
    out_len = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out_len - 1) * s >= length + pad[0]:
        out_len -= 1
    out = np.zeros((*x.shape[:2], max(out_len, 0)), np.float64 if x.dtype.kind == "f" else x.dtype)
    for o in range(max(out_len, 0)):
        taps = [o * s + t - pad[0] for t in range(k)]
        inside = [p for p in taps if 0 <= p < length]
        if mode == "max":
            ident = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            out[:, :, o] = x[:, :, inside].max(axis=2, initial=ident) if inside else ident
        else:
            count = sum(1 for p in taps if p < length + pad[1]) if include else len(inside)
            total = x[:, :, inside].astype(np.float64).sum(axis=2)
            out[:, :, o] = total / count if count else 0.0
    return round_to(out, x.dtype)


def oracle_pool2d(
    x: np.ndarray,
    mode: str,
    ks: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    dilations: tuple[int, int],
    ceil: bool,
    include: bool,
) -> np.ndarray:
    """ONNX MaxPool/AveragePool on x[N, C, H, W] (pads in ONNX order), one window at a time."""
    outs = []
    for ax in range(2):
        length, k, s, d = x.shape[2 + ax], ks[ax], strides[ax], dilations[ax]
        span = length + pads[ax] + pads[ax + 2] - d * (k - 1) - 1
        n = (-(-span // s) if ceil else span // s) + 1
        if ceil and (n - 1) * s >= length + pads[ax]:
            n -= 1
        outs.append(max(n, 0))
    out = np.zeros((*x.shape[:2], *outs), np.float64 if x.dtype.kind == "f" else x.dtype)
    for i in range(outs[0]):
        for j in range(outs[1]):
            taps = [
                [o * strides[ax] + t * dilations[ax] - pads[ax] for t in range(ks[ax])]
                for ax, o in enumerate((i, j))
            ]
            rows = [p for p in taps[0] if 0 <= p < x.shape[2]]
            cols = [p for p in taps[1] if 0 <= p < x.shape[3]]
            window = x[:, :, rows][:, :, :, cols].reshape(*x.shape[:2], len(rows) * len(cols))
            if mode == "max":
                ident = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
                out[:, :, i, j] = window.max(axis=2, initial=ident) if window.shape[2] else ident
            else:
                if include:
                    count = sum(1 for p in taps[0] if p < x.shape[2] + pads[2]) * sum(
                        1 for p in taps[1] if p < x.shape[3] + pads[3]
                    )
                else:
                    count = len(rows) * len(cols)
                total = window.astype(np.float64).sum(axis=2)
                out[:, :, i, j] = total / count if count else 0.0
    return round_to(out, x.dtype)


def oracle_cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    v = np.flip(x, axis) if reverse else x
    work = np.float32 if x.dtype.kind == "f" else x.dtype
    out = np.zeros(v.shape, work)
    acc = np.zeros(np.delete(np.array(v.shape), axis), work)
    with np.errstate(all="ignore"):
        for i in range(v.shape[axis]):
            cur = np.take(v, i, axis=axis).astype(work)
            if exclusive:
                np.moveaxis(out, axis, 0)[i] = acc
                acc = (acc + cur).astype(work)
            else:
                acc = (acc + cur).astype(work)
                np.moveaxis(out, axis, 0)[i] = acc
    out = np.flip(out, axis) if reverse else out
    return out.astype(x.dtype)


def oracle_argext(x: np.ndarray, op: str, axis: int, last: bool) -> np.ndarray:
    """First (or last) index of the extreme along ``axis``; NaN is the extreme."""
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1], np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = [float(v) if x.dtype.kind == "f" else int(v) for v in moved[pos]]
        nan = [k for k, v in enumerate(row) if v != v]
        if nan:
            out[pos] = nan[-1] if last else nan[0]
            continue
        best = max(row) if op == "max" else min(row)
        hits = [k for k, v in enumerate(row) if v == best]
        out[pos] = hits[-1] if last else hits[0]
    return np.expand_dims(out, axis)


def oracle_topk(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    """Indices of the k best along ``axis`` by a stable sort (ties: lower index first)."""
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros((*moved.shape[:-1], k), np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = list(moved[pos])

        def key(i: int, row: list[Any] = row) -> tuple[int, Any]:
            v = row[i]
            nan = v != v
            if largest:
                return (0 if nan else 1, 0 if nan else -v if x.dtype.kind == "f" else -int(v))
            return (1 if nan else 0, 0 if nan else v if x.dtype.kind == "f" else int(v))

        out[pos] = sorted(range(len(row)), key=key)[:k]
    return np.moveaxis(out, -1, axis)


def _long_enough(b: _Builder, extra: int) -> DimChoice:
    """A length of at least ``extra + 1``: a drawn var plus ``extra``, or a static one."""
    if b.variables:
        v = b.draw(st.sampled_from(b.variables))
        return DimChoice(v + extra, lambda bb, n=v.name, e=extra: bb[n] + e)
    n = b.draw(st.integers(1, 5)) + extra
    return DimChoice(n, lambda _b, n=n: n)


def _k_conv2d(b: _Builder) -> None:
    # One group of up to 6 channels and up to 8 outputs per group: stride-1 layers with 16+
    # products per output take the padded-input kernel (``codegen._convtaps``), with row tiles
    # of 4/2/1 output channels beside the full ones; symbolic widths move its padded frame.
    # A layer that keeps its width (2-12 channels, 1-20 outputs) reads x in place under masks
    # on an AVX-512 host (``codegen._convdirect``).
    # A wide layer (one group, one or two whole matmul tiles of outputs, up to 72 channels) with
    # 64+ products per output and stride 3 rows, or a 1x1 kernel, or few positions, runs on its
    # weight laid out in matmul panels (``codegen._convpanels``: both transposes' 8x8 blocks and
    # edges, the prepacked driver's 4/2/1-row tiles).
    # A 3x3 stride-1 layer with 32+ channels on both sides and 100+ tiles of 2x2 outputs at the
    # bounds runs by Winograd's F(2x2, 3x3) (``codegen._convwino``): half tiles at odd edges,
    # patches in the padding, blocks of tiles across rows, float32 only.
    from asyncjit.codegen._convwino import WINO_MIN_CIN, WINO_MIN_COUT
    from asyncjit.codegen._matmul_tile import matmul_tiling

    wino = b.draw(st.integers(0, 7)) == 0
    kh, kw = (3, 3) if wino else (b.draw(st.integers(1, 3)), b.draw(st.integers(1, 3)))
    strides = (1, 1) if wino else (b.draw(st.integers(1, 3)), b.draw(st.integers(1, 2)))
    dilations = (1, 1) if wino else (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    wide = not wino and b.draw(st.integers(0, 3)) == 0
    # the width kept at stride 1 (column pads split either way), one group, enough channels for
    # 16+ products per output: with few outputs on an AVX-512 host, the kernel that reads x in
    # place under lane masks (``codegen._convdirect``)
    same = not wide and not wino and b.draw(st.integers(0, 2)) == 0
    groups = 1 if wide or same or wino else b.draw(st.sampled_from([1, 2]))
    if wino:
        cg, og = (
            b.draw(st.integers(WINO_MIN_CIN, WINO_MIN_CIN + 8)),
            b.draw(st.integers(WINO_MIN_COUT, WINO_MIN_COUT + 8)),
        )
    elif same:
        strides = (1, 1)
        cg, og = b.draw(st.integers(2, 12)), b.draw(st.integers(1, 20))
    elif wide:
        nr = matmul_tiling().nr
        cg, og = b.draw(st.integers(8, 72)), b.draw(st.sampled_from([nr, 2 * nr]))
    else:
        cg, og = b.draw(st.integers(1, 6 if groups == 1 else 2)), b.draw(st.integers(1, 8))
    pads = tuple(b.draw(st.integers(0, 2 if wino else 3)) for _ in range(4))
    if same:
        left = b.draw(st.integers(0, dilations[1] * (kw - 1)))
        pads = (pads[0], left, pads[2], dilations[1] * (kw - 1) - left)
    extra_h = max(dilations[0] * (kh - 1) - pads[0] - pads[2], 0)
    extra_w = max(dilations[1] * (kw - 1) - pads[1] - pads[3], 0)
    height = _long_enough(b, 20 if wino else extra_h)
    width = _long_enough(b, 20 if wino else extra_w + 2)
    n = b.draw_dim(nonzero=True)
    chans = DimChoice(cg * groups, lambda _b, c=cg * groups: c)
    xi = b.placeholder([n, chans, height, width], np.dtype(np.float32) if wino else b.draw_dtype("f"))
    rng = np.random.default_rng(b.draw(st.integers(0, 2**16)))
    w = (rng.integers(-8, 9, size=(og * groups, cg, kh, kw)) / 4).astype(np.float32)
    x = b.tensors[xi]
    wt = Tensor.const(w).cast(x.dtype)
    out = x.conv(wt, strides=strides, pads=pads, dilations=dilations, groups=groups)
    # an epilogue the conv kernel may store itself: a relu, a residual of the conv's shape (a
    # second conv of the same input, as a ResNet projection shortcut), or both; and, for a wide
    # layer of two tiles of outputs, two 1x1 convs after it ("next", each with a relu before it):
    # panels convs in a row pass their activations channels-last (``passes.channels_last``)
    chained = wide and og == 2 * matmul_tiling().nr and groups == 1
    epilogue = b.draw(st.sampled_from(["", "", "relu", "add", "add_relu", *(["next", "add_next"] * chained)]))
    w2 = (rng.integers(-8, 9, size=w.shape) / 4).astype(np.float32)
    w3 = (rng.integers(-8, 9, size=(2, og, og, 1, 1)) / 8).astype(np.float32)
    if epilogue.startswith("add"):
        out = out + x.conv(Tensor.const(w2).cast(x.dtype), strides=strides, pads=pads, dilations=dilations,
                           groups=groups)  # fmt: skip
    if epilogue.endswith(("relu", "next")):
        out = out.relu()
    if epilogue.endswith("next"):
        out = out.conv(Tensor.const(w3[0]).cast(x.dtype)).relu().conv(Tensor.const(w3[1]).cast(x.dtype))

    def oracle(a: list[np.ndarray], _b: Mapping[str, int]) -> np.ndarray:
        def conv(wv: np.ndarray) -> np.ndarray:
            return oracle_conv2d(a[0], oracle_cast(wv, a[0].dtype).astype(np.float64), strides, pads, groups,
                                 dilations)  # fmt: skip

        y = conv(w)
        if epilogue.startswith("add"):
            y = y + conv(w2)
        if epilogue.endswith(("relu", "next")):
            y = np.maximum(y, 0)
        for i in range(2 if epilogue.endswith("next") else 0):
            w3_cast = oracle_cast(w3[i], a[0].dtype).astype(np.float64)
            y = round_to(oracle_conv2d(y, w3_cast, (1, 1), (0, 0, 0, 0), 1, (1, 1)), a[0].dtype)
            y = np.maximum(y, 0) if i == 0 else y
        return y

    kind = "wino," if wino else ""
    tail = "," + epilogue if epilogue else ""
    what = f"conv2d[{kind}k{kh}x{kw},s{strides},d{dilations},g{groups},p{pads}{tail}]"
    b.add(out, what, (xi,), oracle)


def _k_pool(b: _Builder) -> None:
    if b.draw(st.booleans()):
        _k_pool2d(b)
        return
    mode = b.draw(st.sampled_from(["max", "avg"]))
    # windows past the codegen's unroll limit (8 taps) loop over their taps at run time
    k, s = b.draw(st.one_of(st.integers(1, 3), st.integers(9, 12))), b.draw(st.integers(1, 3))
    pad = (b.draw(st.integers(0, 2)), b.draw(st.integers(0, 2)))
    ceil, include = b.draw(st.booleans()), b.draw(st.booleans())
    extra = max(k - 1 - pad[0] - pad[1], 0)
    length = _long_enough(b, extra)
    xi = b.placeholder(
        [b.draw_dim(nonzero=True), b.draw_dim(), length], b.draw_dtype("f" if mode == "avg" else "fi")
    )
    x = b.tensors[xi]
    out = (
        x.max_pool(k, s, pad, ceil_mode=ceil)
        if mode == "max"
        else x.avg_pool(k, s, pad, ceil_mode=ceil, count_include_pad=include)
    )
    b.add(
        out,
        f"{mode}_pool[k{k},s{s},p{pad},{'ceil' if ceil else 'floor'}{',incl' if include else ''}]",
        (xi,),
        lambda a, _b, m=mode, k=k, s=s, p=pad, c=ceil, i=include: oracle_pool1d(a[0], m, k, s, p, c, i),
    )


def _k_pool2d(b: _Builder) -> None:
    # float32 2-D pools take the vector kernel (blocks of 8 output columns, plain loads inside
    # the input, masked ones at its edges, strides 1, 2 and gathers above, the row's tail
    # stored masked): widths of a few blocks, dilations, pads, ceil mode, both avg divisors
    mode = b.draw(st.sampled_from(["max", "avg"]))
    ks = (b.draw(st.integers(1, 3)), b.draw(st.integers(1, 4)))
    strides = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 3)))
    dilations = (b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2)))
    pads = (
        b.draw(st.integers(0, ks[0] - 1)),
        b.draw(st.integers(0, ks[1] - 1)),
        b.draw(st.integers(0, ks[0] - 1)),
        b.draw(st.integers(0, ks[1] - 1)),
    )
    ceil, include = b.draw(st.booleans()), b.draw(st.booleans())
    height = _long_enough(b, max(dilations[0] * (ks[0] - 1) - pads[0] - pads[2], 0))
    width = _long_enough(
        b, max(dilations[1] * (ks[1] - 1) - pads[1] - pads[3], 0) + b.draw(st.integers(0, 20))
    )
    xi = b.placeholder(
        [b.draw_dim(nonzero=True), b.draw_dim(), height, width], b.draw_dtype("f" if mode == "avg" else "fi")
    )
    x = b.tensors[xi]
    out = (
        x.max_pool(ks, strides, pads, dilations, ceil_mode=ceil)
        if mode == "max"
        else x.avg_pool(ks, strides, pads, dilations, ceil_mode=ceil, count_include_pad=include)
    )
    b.add(
        out,
        f"{mode}_pool2d[k{ks},s{strides},d{dilations},p{pads},{'ceil' if ceil else 'floor'}"
        f"{',incl' if include else ''}]",
        (xi,),
        lambda a, _b, m=mode: oracle_pool2d(a[0], m, ks, strides, pads, dilations, ceil, include),
    )


def _k_cumsum(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    ex, rev = b.draw(st.booleans()), b.draw(st.booleans())
    b.add(x.cumsum(ax, ex, rev), f"cumsum{ax}{'x' if ex else ''}{'r' if rev else ''}", (i,),
          lambda a, _b, ax=ax, ex=ex, rev=rev: oracle_cumsum(a[0], ax, ex, rev))  # fmt: skip


def _k_argext(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None or not b.is_drawn(i):
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    if _lower(x.shape[ax]) < 1:
        return
    op, last = b.draw(st.sampled_from(["max", "min"])), b.draw(st.booleans())
    out = (x.argmax if op == "max" else x.argmin)(ax, keepdims=True, last=last)
    b.add(
        out,
        f"arg{op}{ax}{'L' if last else ''}",
        (i,),
        lambda a, _b, o=op, ax=ax, la=last: oracle_argext(a[0], o, ax, la),
    )


def _k_topk(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1 and not t.dtype.is_bool)
    if i is None:
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    k = b.draw(st.integers(0, max(_lower(x.shape[ax]), 0)))
    largest = b.draw(st.booleans())
    vals, idx = x.topk(k, ax, largest)
    j = b.add(idx, f"topk{ax}[{k}{'' if largest else ',min'}]", (i,),
              lambda a, _b, k=k, ax=ax, la=largest: oracle_topk(a[0], k, ax, la))  # fmt: skip
    b.add(vals, "topk_values", (i, j), lambda a, _b, ax=ax: np.take_along_axis(a[0], a[1], axis=ax))


def _k_take_along_axis(b: _Builder) -> None:
    i = b.pick(lambda t: t.ndim >= 1)
    if i is None or not b.is_drawn(i):
        return
    x = b.tensors[i]
    ax = b.draw(st.integers(0, x.ndim - 1))
    if _lower(x.shape[ax]) < 1:
        return
    shape = b.shape_choices(i)
    m = b.draw(st.integers(0, 4))
    shape[ax] = DimChoice(m, lambda _b, m=m: m)
    hi = _upper(x.shape[ax])
    j = b.placeholder(
        shape, b.draw(st.sampled_from([np.dtype(np.int32), np.dtype(np.int64)])), low=-2, high=hi + 1
    )

    def oracle(a: list[np.ndarray], _b: Mapping[str, int], ax: int = ax) -> np.ndarray:
        return np.take_along_axis(a[0], np.clip(a[1].astype(np.int64), 0, a[0].shape[ax] - 1), axis=ax)

    b.add(x.take_along_axis(b.tensors[j], ax), f"take_along{ax}", (i, j), oracle)


def _lower(d: Dim) -> int:
    from asyncjit.symbolic import bounds

    return bounds(d)[0]


NN_KIND_BUILDERS: dict[str, Callable[[_Builder], None]] = {
    "conv2d": _k_conv2d,
    "pool": _k_pool,
    "cumsum": _k_cumsum,
    "argext": _k_argext,
    "topk": _k_topk,
    "take_along_axis": _k_take_along_axis,
}
NN_KINDS = tuple(NN_KIND_BUILDERS)
# The wider ints, each drawn on its own (with bool) by ``graph_cases(dtypes=...)``; index
# placeholders (int32/int64) still meet them, which the oracle's ``promote`` handles.
WIDE_INT_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64))
for _d in WIDE_INT_DTYPES:
    NP_TYPES.setdefault(_d.name, _d.type)
