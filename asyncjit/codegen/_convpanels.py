"""float32 N-d convolution as ``Y^T = X_col^T @ W^T`` on a weight laid out in matmul panels.

As im2col (``_convnd``) the conv is one matmul per sample, but with the operands swapped: the
rows of A are the output positions (``X_col^T [P, K]``, each row the receptive field of one
position, taps outer and channels inner) and B is the weight ``W^T [K, cout]``, laid out once
at compile time in the matmul's NR-column panels (``panels_weight``; constant folding does it,
see ``passes._fold``), which the prepacked matmul driver reads without copying. Against im2col
+ the packed driver this drops the per-call packing of ``X_col`` and tiles the product along
the output channels, a multiple of NR, rather than along the positions: a 7x7 output (49
positions) filled four 16-wide tiles for 3.06 tiles of work.

Per sample: ``x [cin, S]`` is transposed to ``xT [S, cin]`` in scratch (a 1x1 conv with stride 1
and no pads reads ``xT`` as ``X_col^T``); otherwise every (position, tap) copies the ``cin``
channels of one input position, or zeros where the tap falls in the padding; the product
writes ``C^T [P, cout]`` to scratch, and the copy-out transposes it into ``y [cout, P]``, adding
the bias. Scratch rows whose stride is a multiple of 512 floats get 16 more: rows 2 KiB apart
fall in the same few L1 sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from ._conv import conv1d_output_length
from ._convtaps import TAPS_SMALL_COUT, taps_chosen
from ._matmul import emit_matmul, panel_layout
from ._matmul_tile import _load_f32, _store_f32, matmul_tiling
from ._target import (
    CONV_NOALIAS,
    F32,
    I32,
    I64,
    PTR,
    conv_epilogue,
    for_range,
    i64,
    new_function,
    residual_arg,
    splat,
)

__all__ = [
    "PANELS_MAX_P_1X1",
    "PANELS_MAX_P_OVER_TAPS",
    "PANELS_MIN_K",
    "PANELS_REGION_P_1X1",
    "PANELS_WIDE_C_1X1",
    "PANELS_WIDE_P_1X1",
    "emit_conv_panels",
    "panels_chosen",
    "panels_scratch_bytes",
    "panels_weight",
]

PANELS_MIN_K = 64
"""Fewer products per output (``cin * prod(K)``) than this and the two transposes (of ``x`` in,
of ``C^T`` out), each the size of an activation, are not paid back by the product."""

PANELS_MAX_P_1X1 = 256
"""A 1x1 conv with more output positions than this keeps ``_convnd``'s path, which reads ``x``
in place, unless it sits in a channels-last region (``PANELS_REGION_P_1X1``): alone, its two
transposes, each an activation (3 MB at 56x56 x 256 channels, beyond L2), cost more than the
product gains. Measured in one process, per-call minima (``benchmarks/conv_ab.py``): at 7x7
0.84-0.90 of that path's time, 13x13 and 14x14 0.86-0.97, 28x28 0.97-1.17, 56x56 1.35-1.41, a
stride-2 1x1 from 56x56 1.19."""

PANELS_REGION_P_1X1 = 1024
PANELS_WIDE_P_1X1 = 4096
PANELS_WIDE_C_1X1 = 256
"""Inside a channels-last region (``passes._layout``: a panels conv's output feeds the next one
untransposed) a 1x1 conv is a panels conv up to ``PANELS_REGION_P_1X1`` positions, and up to
``PANELS_WIDE_P_1X1`` (56x56) with ``PANELS_WIDE_C_1X1`` or more channels on one side; the
layout pass gives such a conv found outside every region back to ``_convnd``
(``panels_chosen(alone=True)`` says which). There ``_convnd`` writes ``cout`` output rows a tile
at a time, streams no prefetcher follows, into memory the layers between two calls evicted:
ResNet-50's 64->256, 256->64 and 256->128 at 56x56 took 1.44-1.67 ms against 1.87-2.16 (the
256-channel ones), 2.67 against 2.95, its 1x1 convs at 28x28 0.80-0.94 of their time (ONNX
Runtime's 1.19-1.24 and 2.60-2.72 ms in the same runs; ``onnx_models.py --layers``, one process
per tree, two rounds), while DenseNet-121's 1x1 convs at 56x56 and 28x28, between NCHW
neighbours, took 1.0-1.25x their ``_convnd`` time as panels convs (DenseNet-121 1.06-1.07x ONNX
Runtime's kernel sum against 1.02x)."""

PANELS_MIN_COUT_1X1 = 64
PANELS_ANY_COUT_P_1X1 = 64
"""...and from ``PANELS_ANY_COUT_P_1X1`` to ``PANELS_MAX_P_1X1`` positions only with this many
output channels or more: transposing ``x`` costs a share of ``1/cout`` of the product, and
13x13 positions fill 16-wide position tiles with 4% waste, so there is little to gain (Inception
v1's 1x1 convs at 13x13: 480->16 0.88 -> 1.07x ONNX Runtime's time, 528->32 1.25 -> 1.50x; at
6x6, where tiles of positions waste 25%, 832->32 1.23 -> 1.12x and 832->48 1.25 -> 1.09x)."""

PANELS_MAX_P_OVER_TAPS = 1024
"""Above ``TAPS_SMALL_COUT`` output channels, where the padded-copy kernel would take a layer,
this many output positions or fewer go here instead: measured in one process, per-call minima
(``benchmarks/conv_ab.py``), 3x3 512 channels at 7x7 took 0.91-0.97 of the padded copy's time,
3x3 256 at 56x56 (3,136 positions: ``X_col^T`` is 29 MB) 1.13-1.15x."""

_BLOCK = 8
"""Positions per block of the transposes: a block's rows of ``C^T`` (or columns of ``x``) stay
in L1 while every channel is copied."""


def _row_stride(n: int) -> int:
    """A scratch row stride for ``n`` floats: whole cache lines, never a multiple of 2 KiB."""
    s = -(-n // 16) * 16
    return s + 16 if s % 512 == 0 else s


def _prod(xs: Sequence[int]) -> int:
    """The product of static sizes (shared with ``_convnd``)."""
    out = 1
    for v in xs:
        out *= v
    return out


def _pointwise(ks: Sequence[int], strides: Sequence[int], pads: Sequence[tuple[int, int]]) -> bool:
    """A 1x1 conv with stride 1 and no pads: ``x`` itself is the product's operand."""
    return all(k == 1 for k in ks) and all(s == 1 for s in strides) and all(p == (0, 0) for p in pads)


def panels_chosen(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    groups: int,
    s_max: Sequence[int],
    alone: bool = False,
) -> bool:
    """Whether a conv runs here (its weight then stored by ``panels_weight``), judged at the
    upper bounds ``s_max`` of its input's spatial extents: one group, output channels a multiple
    of the tile width NR, at least ``PANELS_MIN_K`` products per output, and not a layer another
    kernel does better: a 1x1 conv with more than ``PANELS_MAX_P_1X1`` output positions (in a
    channels-last region, ``PANELS_REGION_P_1X1``, or ``PANELS_WIDE_P_1X1`` when wide; ``alone``:
    judged outside every region; or more than ``PANELS_ANY_COUT_P_1X1`` with fewer than
    ``PANELS_MIN_COUT_1X1`` outputs), or one
    the padded-copy kernel of ``_convtaps`` takes with up to ``TAPS_SMALL_COUT`` output channels
    or more than ``PANELS_MAX_P_OVER_TAPS`` positions."""
    nr = matmul_tiling().nr
    if groups != 1 or cout % nr or cin * _prod(ks) < PANELS_MIN_K:
        return False
    outs = [
        conv1d_output_length(max(s, 1), k=k, stride=st, dilation=d, pad_l=lo, pad_r=hi)
        for s, (lo, hi), d, k, st in zip(s_max, pads, dilations, ks, strides, strict=True)
    ]
    p_max = _prod(outs)
    if _prod(ks) == 1:
        if p_max <= PANELS_ANY_COUT_P_1X1:
            return True
        if alone:
            return p_max <= PANELS_MAX_P_1X1 and cout >= PANELS_MIN_COUT_1X1
        wide = p_max <= PANELS_WIDE_P_1X1 and max(cin, cout) >= PANELS_WIDE_C_1X1
        return cout >= PANELS_MIN_COUT_1X1 and (p_max <= PANELS_REGION_P_1X1 or wide)
    taps = taps_chosen(
        cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads, groups=groups, s_max=s_max
    )
    return not taps or (cout > TAPS_SMALL_COUT and p_max <= PANELS_MAX_P_OVER_TAPS)


def panels_weight(w: np.ndarray) -> np.ndarray:
    """``w [cout, cin, *K]`` as the kernel reads it: ``W^T [prod(K)*cin, cout]`` (taps outer,
    channels inner) in NR-column panels, shaped ``[cout/NR, *K, cin, NR]`` (the panels'
    memory order)."""
    nr = matmul_tiling().nr
    cout, cin, *ks = w.shape
    wt = np.moveaxis(w, 1, -1).reshape(cout, -1).T  # [prod(K)*cin, cout]
    return np.ascontiguousarray(panel_layout(wt).reshape(cout // nr, *ks, cin, nr))


def panels_order(r: int) -> tuple[int, ...]:
    """``permute`` order from ``[cout/NR, *K, cin, NR]`` (``panels_weight``) to ``[cout/NR, NR,
    cin, *K]``, which reshapes to the logical weight ``[cout, cin, *K]``."""
    return (0, r + 2, r + 1, *range(1, r + 1))


def _geometry(cin: int, cout: int, ks: Sequence[int], pointwise: bool) -> tuple[int, int, int]:
    """Row strides of ``xT``, ``X_col^T`` and ``C^T`` in scratch (floats)."""
    kk = cin * _prod(ks)
    return _row_stride(cin), (0 if pointwise else _row_stride(kk)), _row_stride(cout)


def panels_scratch_bytes(
    *, cin: int, cout: int, ks: Sequence[int], strides: Sequence[int], pads: Sequence[tuple[int, int]],
    p_max: int, s_max: Sequence[int],
) -> int:  # fmt: skip
    """Scratch for inputs of at most ``s_max`` per spatial axis and ``p_max`` output positions."""
    xs, ks_rs, cs = _geometry(cin, cout, ks, _pointwise(ks, strides, pads))
    s = max(_prod(s_max), 1)
    p = max(p_max, 1)
    return 64 * 4 + 4 * (s * xs + p * ks_rs + p * cs)


def _align(b: ir.IRBuilder, ptr: ir.Value) -> ir.Value:
    return b.inttoptr(b.and_(b.add(b.ptrtoint(ptr, I64), i64(63)), i64(-64)), PTR)


def _transpose8(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the 8x8 block whose rows are ``rows`` (eight <8 x float>): unpack, shuffle
    and 128-bit lane swaps, 24 shuffles for 64 elements (a scalar copy took ~0.25 ns each)."""

    def mix(u: ir.Value, v: ir.Value, lanes: list[int]) -> ir.Value:
        return b.shuffle_vector(u, v, ir.Constant(ir.VectorType(I32, 8), lanes))

    lo, hi = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
    t = [mix(rows[i], rows[i + 1], m) for i in range(0, 8, 2) for m in (lo, hi)]  # t0..t7
    q_lo, q_hi = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    u = [
        mix(t[0], t[2], q_lo), mix(t[0], t[2], q_hi), mix(t[1], t[3], q_lo), mix(t[1], t[3], q_hi),
        mix(t[4], t[6], q_lo), mix(t[4], t[6], q_hi), mix(t[5], t[7], q_lo), mix(t[5], t[7], q_hi),
    ]  # fmt: skip
    first, second = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    return [mix(u[j], u[j + 4], first) for j in range(4)] + [mix(u[j], u[j + 4], second) for j in range(4)]


def _emit_transpose(
    module: ir.Module, name: str, has_bias: bool, relu: bool = False, residual: bool = False
) -> ir.Function:
    """``dst[j*d_rs + i] = src[i*s_rs + j] (+ bias[j]) (+ res[j*d_rs + i])`` (then ``max(., 0)``
    with ``relu``) for ``i < R``, ``j < C``: 8x8 blocks in vector registers (destination rows
    outer, so each is written as one stream), the edges element by element."""
    args: list[tuple[str, ir.Type]] = [("src", PTR), ("dst", PTR), ("bias", PTR), ("R", I64), ("C", I64)]
    args += [("s_rs", I64), ("d_rs", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=("src", "dst", "bias", "res"), inline="noinline")
    src, dst, bias, r_all, c_all, s_rs, d_rs = fn.args[:7]
    res = fn.args[7] if residual else None
    vty = ir.VectorType(F32, _BLOCK)
    r_whole = b.mul(b.sdiv(r_all, i64(_BLOCK)), i64(_BLOCK))
    c_whole = b.mul(b.sdiv(c_all, i64(_BLOCK)), i64(_BLOCK))

    def one(i: ir.Value, j: ir.Value) -> None:
        v = _load_f32(b, src, b.add(b.mul(i, s_rs), j))
        if has_bias:
            v = b.fadd(v, _load_f32(b, bias, j))
        at = b.add(b.mul(j, d_rs), i)
        _store_f32(b, conv_epilogue(b, v, res, at, relu), dst, at)

    with for_range(b, i64(0), c_whole, _BLOCK, name="j0") as j0:
        biases = []
        for j in range(_BLOCK):
            bv = _load_f32(b, bias, b.add(j0, i64(j))) if has_bias else None
            biases.append(None if bv is None else splat(b, bv, _BLOCK))
        with for_range(b, i64(0), r_whole, _BLOCK, name="i0") as i0:
            rows = [
                b.load(
                    b.gep(src, [b.add(b.mul(b.add(i0, i64(r)), s_rs), j0)], source_etype=F32),
                    typ=vty,
                    align=4,
                )
                for r in range(_BLOCK)
            ]
            for j, col in enumerate(_transpose8(b, rows)):
                bv = biases[j]
                out = col if bv is None else b.fadd(col, bv)
                at = b.add(b.mul(b.add(j0, i64(j)), d_rs), i0)
                b.store(conv_epilogue(b, out, res, at, relu), b.gep(dst, [at], source_etype=F32), align=4)
        with (
            for_range(b, r_whole, r_all, name="ir") as i,
            for_range(b, j0, b.add(j0, i64(_BLOCK)), name="jr") as j,
        ):
            one(i, j)
    with for_range(b, c_whole, c_all, name="jt") as j, for_range(b, i64(0), r_all, name="it") as i:
        one(i, j)
    b.ret_void()
    return fn


def _emit_rows_epilogue(
    module: ir.Module, name: str, has_bias: bool, relu: bool, residual: bool
) -> ir.Function:
    """``y[i*C + j] = src[i*s_rs + j] (+ bias[j]) (+ res[i*C + j])`` (then ``max(., 0)`` with
    ``relu``) over ``R`` rows of ``C`` floats (a multiple of 16), ``src`` possibly ``y`` itself:
    the copy-out's sums in its order (so the same bits), for an output kept channels-last."""
    args: list[tuple[str, ir.Type]] = [("src", PTR), ("y", PTR), ("bias", PTR), ("R", I64), ("C", I64)]
    args += [("s_rs", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=("bias", "res"), inline="noinline")
    src, y, bias, r_all, c_all, s_rs = fn.args[:6]
    res = fn.args[6] if residual else None
    vty = ir.VectorType(F32, 16)
    with for_range(b, i64(0), r_all, name="i") as i, for_range(b, i64(0), c_all, 16, name="j") as j:
        at = b.add(b.mul(i, c_all), j)
        v = b.load(b.gep(src, [b.add(b.mul(i, s_rs), j)], source_etype=F32), typ=vty, align=4)
        if has_bias:
            v = b.fadd(v, b.load(b.gep(bias, [j], source_etype=F32), typ=vty, align=4))
        b.store(conv_epilogue(b, v, res, at, relu), b.gep(y, [at], source_etype=F32), align=4)
    b.ret_void()
    return fn


def _emit_im2col_t(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> ir.Function:
    """``dst[p*rs + t*cin + c] = xT[i(p, t)*xs + c]``, or 0 where tap ``t`` of output position
    ``p`` falls in the padding; ``xT`` is one sample's ``[S, cin]`` (row stride ``xs``)."""
    r = len(ks)
    args: list[tuple[str, ir.Type]] = [("xT", PTR), ("dst", PTR), ("xs", I64), ("rs", I64)]
    args += [(f"S{i}", I64) for i in range(r)] + [(f"O{i}", I64) for i in range(r)]
    fn, b = new_function(module, name, args, noalias=("xT", "dst"), inline="noinline")
    xt, dst, xs, rs = fn.args[:4]
    sizes = list(fn.args[4 : 4 + r])
    outs = list(fn.args[4 + r : 4 + 2 * r])
    zero = ir.Constant(F32, 0.0)

    def copy_row(src: ir.Value | None, out: ir.Value) -> None:
        with for_range(b, i64(0), i64(cin), name="c") as c:
            v = zero if src is None else _load_f32(b, xt, b.add(src, c))
            _store_f32(b, v, dst, b.add(out, c))

    def taps(
        ax: int, pos: list[ir.Value], tap: ir.Value, inside: ir.Value, flat_in: ir.Value, row: ir.Value
    ) -> None:
        if ax == r:
            out = b.add(row, b.mul(tap, i64(cin)))
            with b.if_else(inside) as (copy, pad):
                with copy:
                    copy_row(b.mul(flat_in, xs), out)
                with pad:
                    copy_row(None, out)
            return
        with for_range(b, i64(0), i64(ks[ax]), name=f"t{ax}") as t:
            coord = b.sub(
                b.add(b.mul(pos[ax], i64(strides[ax])), b.mul(t, i64(dilations[ax]))), i64(pads[ax][0])
            )
            ok = b.and_(b.icmp_signed(">=", coord, i64(0)), b.icmp_signed("<", coord, sizes[ax]))
            clamped = b.select(ok, coord, i64(0))
            taps(
                ax + 1,
                pos,
                b.add(b.mul(tap, i64(ks[ax])), t),
                b.and_(inside, ok),
                b.add(b.mul(flat_in, sizes[ax]), clamped),
                row,
            )

    def positions(ax: int, pos: list[ir.Value], flat: ir.Value) -> None:
        if ax == r:
            taps(0, pos, i64(0), ir.Constant(ir.IntType(1), 1), i64(0), b.mul(flat, rs))
            return
        with for_range(b, i64(0), outs[ax], name=f"o{ax}") as o:
            positions(ax + 1, [*pos, o], b.add(b.mul(flat, outs[ax]), o))

    positions(0, [], i64(0))
    b.ret_void()
    return fn


def emit_conv_panels(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    has_bias: bool,
    relu: bool = False,
    residual: bool = False,
    channels_last: tuple[bool, bool] = (False, False),
) -> ir.Function:
    """The conv kernel ``name`` with ``_convnd``'s signature, ``w`` laid out by ``panels_weight``;
    ``residual``: ``res`` (a last argument of ``y``'s shape) is added, ``relu``: ``max(y, 0)``
    is stored (the copy-out applies both). ``channels_last``: ``x`` is ``[N, *S, cin]`` (it is
    then ``xT`` itself, no transpose in) and/or ``y`` is ``[N, *O, cout]`` (the product writes
    ``C^T`` there, and the bias, residual and relu are applied in place, in the copy-out's order:
    the same bits), as the layout pass ``passes.channels_last`` sets between such convs.

    It touches ``x``/``w``/``bias``/``y`` only inside their extents and at most
    :func:`panels_scratch_bytes` of ``scratch``.
    """
    r = len(ks)
    nr = matmul_tiling().nr
    if cout % nr:
        raise ValueError(f"conv panels: cout={cout} is not a multiple of {nr}")
    pointwise = _pointwise(ks, strides, pads)
    kk = cin * _prod(ks)
    x_last, y_last = channels_last
    xs, ks_rs, cs = _geometry(cin, cout, ks, pointwise)
    if x_last:
        xs = cin  # x is xT, unpadded rows
    mm = emit_matmul(module, f"{name}.matmul", n=cout, k=kk, b_panels=True)
    transpose_in = None if x_last else _emit_transpose(module, f"{name}.xT", has_bias=False)
    # a channels-last output whose rows would be a multiple of 2 KiB apart is computed in scratch
    # rows (``_row_stride``) and copied: stored in place, the product's C tiles fell in a few L1
    # sets (ResNet-50's 3x3 convs into 512 channels at 7x7 ran 4-7% slower)
    direct = y_last and cs == cout
    if y_last:
        epilogue = has_bias or relu or residual or not direct
        copy_out = _emit_rows_epilogue(module, f"{name}.out", has_bias, relu, residual) if epilogue else None
    else:
        copy_out = _emit_transpose(module, f"{name}.out", has_bias, relu, residual)
    im2col = None if pointwise else _emit_im2col_t(
        module, f"{name}.im2col", cin=cin, ks=ks, strides=strides, dilations=dilations, pads=pads
    )  # fmt: skip
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64)] + [(f"S{i}", I64) for i in range(r)] + [(f"O{i}", I64) for i in range(r)]
    args += residual_arg(residual)
    fn, b = new_function(module, name, args, noalias=CONV_NOALIAS)
    x, w, bias, y, scratch, n_arg = fn.args[:6]
    res = fn.args[-1] if residual else None
    sizes = list(fn.args[6 : 6 + r])
    outs = list(fn.args[6 + r : 6 + 2 * r])
    s_all: ir.Value = i64(1)
    for v in sizes:
        s_all = b.mul(s_all, v)
    p: ir.Value = i64(1)
    for o in outs:
        p = b.mul(p, o)
    empty = b.or_(b.icmp_signed("<=", n_arg, i64(0)), b.icmp_signed("<=", p, i64(0)))
    with b.if_then(empty):
        b.ret_void()
    xt0 = _align(b, scratch)
    xcol = _align(b, b.gep(xt0, [b.mul(s_all, i64(xs))], source_etype=F32))
    ct0 = _align(b, b.gep(xcol, [b.mul(p, i64(ks_rs))], source_etype=F32))
    zero = i64(0)
    with for_range(b, i64(0), n_arg, name="n") as n:
        xn = b.gep(x, [b.mul(n, b.mul(i64(cin), s_all))], source_etype=F32)
        if transpose_in is None:
            xt = xn
        else:
            xt = xt0
            b.call(transpose_in, [xn, xt, w, i64(cin), s_all, s_all, i64(xs)])  # (no bias read)
        if im2col is not None:
            b.call(im2col, [xt, xcol, i64(xs), i64(ks_rs), *sizes, *outs])
        a, a_rs = (xt, i64(xs)) if im2col is None else (xcol, i64(ks_rs))
        y_at = b.mul(n, b.mul(i64(cout), p))
        yn = b.gep(y, [y_at], source_etype=F32)
        ct, c_rs = (yn, i64(cout)) if direct else (ct0, i64(cs))
        b.call(mm, [a, w, ct, scratch, i64(1), p, i64(cout), i64(kk),
                    zero, a_rs, i64(1), zero, i64(nr), i64(kk), zero, c_rs])  # fmt: skip
        res_n = [] if res is None else [b.gep(res, [y_at], source_etype=F32)]
        if y_last:
            if copy_out is not None:
                b.call(copy_out, [ct, yn, bias, p, i64(cout), c_rs, *res_n])
        else:
            b.call(copy_out, [ct, yn, bias, p, i64(cout), i64(cs), p, *res_n])
    b.ret_void()
    return fn
