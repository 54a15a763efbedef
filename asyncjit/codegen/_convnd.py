"""float32 N-d convolution (ONNX ``Conv``, static pads) as im2col + the tiled matmul of
``_matmul``.

Emitted function::

    void name(float* x, float* w, float* bias, float* y, i8* scratch, i64 N, i64 S_0.., i64 O_0..)

with ``x [N, cin, *S]``, ``w [cout, cin/groups, *K]``, ``bias [cout]`` (ignored unless the
kernel was emitted with ``has_bias``), ``y [N, cout, *O]``, all contiguous; the caller computes
``O``.

Strategy, per sample and group: ``Y_g [cout_g, P] = W_g [cout_g, cin_g*prod(K)] @ X_col
[cin_g*prod(K), P]`` with ``P = prod(O)``, which writes ``y`` in place (row stride ``P``), as
MLAS does for its non-NCHWc convolutions. ``X_col`` rows are built a whole output row at a time:
the valid range of each tap along the last axis is computed once, so the copy is a contiguous
(stride 1) or strided loop with no per-element test. A pointwise conv (1x1, stride 1, no pads)
skips im2col and reads ``x`` in place, batched over samples; with a bias, residual or relu to
apply it runs over runs of positions (``_convtaps._chunk``: 256 KB of outputs), each finished
while it is still in L2 (64->256 channels at 56x56: 0.83 -> 0.73 ms), unless the product is
split over threads. Otherwise the bias is added in a vectorised pass over each output row. A 2-D
conv with one group and strides up to 2 goes to ``_convtaps`` instead (no im2col: the matmul
tile reads a zero-padded copy of ``x`` at per-tap offsets). A weight laid out in the matmul's
panels at compile time (``w_panels``: one group, output channels a multiple of the tile width,
see ``_convpanels.panels_chosen``) goes to ``_convpanels`` (``Y^T = X_col^T @ W^T``, no per-call
packing), and one stored with its Winograd transform (``w_wino``: a 3x3 stride-1 layer, see
``_convwino.wino_chosen``) to ``_convwino``."""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ._conv import _valid_range
from ._convpanels import _pointwise, _prod, emit_conv_panels, panels_scratch_bytes
from ._convtaps import _chunk, emit_conv_taps, row_epilogue, taps_chosen, taps_scratch_bytes
from ._convwino import emit_conv_wino, wino_chosen, wino_scratch_bytes
from ._matmul import PARALLEL_MIN_MACS, emit_matmul, matmul_scratch_bytes
from ._matmul_tile import _Vec, matmul_tiling
from ._parallel import threads_value
from ._target import (
    CONV_NOALIAS,
    F32,
    I64,
    PTR,
    conv_epilogue,
    for_range,
    i64,
    new_function,
    residual_arg,
    smin,
    splat,
)

__all__ = ["convnd_scratch_bytes", "emit_convnd"]


def _depthwise(cin: int, cout: int, groups: int) -> bool:
    """One input channel per group and few outputs each (MobileNet/ShuffleNet depthwise): a
    matmul of M = cout/groups rows would fill less than one micro-tile, so taps are direct."""
    return cin == groups and cout // groups < 8


def convnd_scratch_bytes(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[tuple[int, int]],
    groups: int,
    p_max: int,
    dilations: Sequence[int],
    s_max: Sequence[int],
    w_panels: bool = False,
    w_wino: bool = False,
) -> int:
    """Scratch for outputs of at most ``p_max`` positions per sample (the upper bound of ``P``)
    and inputs of at most ``s_max`` per spatial axis (needed by the stride-1 2-D kernel)."""
    if w_wino:
        return wino_scratch_bytes(cin=cin, cout=cout)
    if w_panels:
        return panels_scratch_bytes(
            cin=cin, cout=cout, ks=ks, strides=strides, pads=pads, p_max=p_max, s_max=s_max
        )
    if _depthwise(cin, cout, groups):
        return 0
    if taps_chosen(cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads, groups=groups,
                   s_max=s_max):  # fmt: skip
        return taps_scratch_bytes(
            cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads, s_max=s_max
        )
    if _pointwise(ks, strides, pads):
        return matmul_scratch_bytes(cout // groups, max(p_max, 1), cin // groups)
    kk = cin // groups * _prod(ks)
    xcol = (kk * max(p_max, 1) + 15) // 16 * 16
    return 64 + 4 * xcol + matmul_scratch_bytes(cout // groups, max(p_max, 1), kk)


def _emit_im2col(
    module: ir.Module,
    name: str,
    *,
    cin_g: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> ir.Function:
    """``dst[(ci*prod(K) + t) * P + o] = x[ci, o*stride + t*dilation - lo]`` or 0, for one sample
    and group (``x`` points at its first channel)."""
    r = len(ks)
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("dst", PTR)]
    args += [(f"S{i}", I64) for i in range(r)] + [(f"O{i}", I64) for i in range(r)]
    fn, b = new_function(module, name, args, noalias=("x", "dst"), inline="noinline")
    x, dst = fn.args[0], fn.args[1]
    sizes = list(fn.args[2 : 2 + r])
    outs = list(fn.args[2 + r : 2 + 2 * r])
    # row-major strides of one channel of x and of one X_col row
    sx: list[ir.Value] = [i64(1)] * r
    so: list[ir.Value] = [i64(1)] * r
    for ax in range(r - 2, -1, -1):
        sx[ax] = b.mul(sx[ax + 1], sizes[ax + 1])
        so[ax] = b.mul(so[ax + 1], outs[ax + 1])
    chan = b.mul(sx[0], sizes[0])
    plane = b.mul(so[0], outs[0])
    zero = ir.Constant(F32, 0.0)

    def fill_zero(base: ir.Value, count: ir.Value) -> None:
        with for_range(b, i64(0), count, name="z") as i:
            b.store(zero, b.gep(dst, [b.add(base, i)], source_etype=F32), align=4)

    def level(ax: int, taps: list[ir.Value], src: ir.Value, out: ir.Value) -> None:
        off = b.sub(b.mul(taps[ax], i64(dilations[ax])), i64(pads[ax][0]))
        lo, hi = _valid_range(b, off, sizes[ax], strides[ax], outs[ax])
        if ax == r - 1:
            fill_zero(out, lo)
            with for_range(b, lo, hi, name="l") as o:
                pos = b.add(b.mul(o, i64(strides[ax])), off)
                v = b.load(b.gep(x, [b.add(src, pos)], source_etype=F32), typ=F32, align=4)
                b.store(v, b.gep(dst, [b.add(out, o)], source_etype=F32), align=4)
            fill_zero(b.add(out, hi), b.sub(outs[ax], hi))
            return
        fill_zero(out, b.mul(lo, so[ax]))
        with for_range(b, lo, hi, name=f"o{ax}") as o:
            pos = b.add(b.mul(o, i64(strides[ax])), off)
            level(ax + 1, taps, b.add(src, b.mul(pos, sx[ax])), b.add(out, b.mul(o, so[ax])))
        fill_zero(b.add(out, b.mul(hi, so[ax])), b.mul(b.sub(outs[ax], hi), so[ax]))

    kprod = _prod(ks)
    with for_range(b, i64(0), i64(cin_g), name="ci") as ci:
        src0 = b.mul(ci, chan)

        def tap_loops(ax: int, taps: list[ir.Value], flat: ir.Value) -> None:
            if ax == r:
                row = b.add(b.mul(ci, i64(kprod)), flat)
                level(0, taps, src0, b.mul(row, plane))
                return
            with for_range(b, i64(0), i64(ks[ax]), name=f"t{ax}") as t:
                tap_loops(ax + 1, [*taps, t], b.add(b.mul(flat, i64(ks[ax])), t))

        tap_loops(0, [], i64(0))
    b.ret_void()
    return fn


def emit_convnd(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    groups: int,
    has_bias: bool,
    s_max: Sequence[int],
    w_panels: bool = False,
    w_wino: bool = False,
    relu: bool = False,
    residual: bool = False,
    channels_last: tuple[bool, bool] = (False, False),
) -> ir.Function:
    """Add the conv kernel ``name`` (see the module docstring) to ``module``; ``s_max`` bounds the
    input's spatial extents (the scratch is sized there, and it picks the 2-D strategy);
    ``w_panels``: ``w`` is laid out by ``_convpanels.panels_weight``; ``w_wino``: ``w`` is the
    constant ``_convwino.wino_weight`` stores (a layer ``wino_chosen`` takes); ``residual``: the kernel
    takes a last argument ``res`` of ``y``'s shape and adds it (a fused ``conv + r``); ``relu``:
    it stores ``max(y, 0)`` (a ``relu`` after the conv, fused: no pass of its own over ``y``);
    ``channels_last``: ``x`` and/or ``y`` have their channels last (weights in panels only).

    It touches ``x``/``w``/``bias``/``y`` only inside their extents and at most
    :func:`convnd_scratch_bytes` of ``scratch``.
    """
    r = len(ks)
    if min(cin, cout, groups, *ks, *strides, *dilations) < 1 or cin % groups or cout % groups:
        raise ValueError(f"conv: bad static parameters cin={cin} cout={cout} ks={ks} groups={groups}")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ValueError(f"conv: pads must be >= 0, got {pads}")
    cin_g, cout_g = cin // groups, cout // groups
    if any(channels_last) and not w_panels:
        raise ValueError("conv: channels-last operands need the weight in panels")
    if w_wino:
        fits = wino_chosen(cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads,
                           groups=groups, s_max=s_max)  # fmt: skip
        if any(channels_last) or not fits:
            raise ValueError(f"conv: a Winograd weight for a layer it does not fit: cin={cin} ks={ks}")
        return emit_conv_wino(module, name, cin=cin, cout=cout, pads=pads, has_bias=has_bias, relu=relu,
                              residual=residual)  # fmt: skip
    if w_panels:
        if groups != 1:
            raise ValueError(f"conv: a weight in panels needs one group, got groups={groups}")
        return emit_conv_panels(module, name, cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations,
                                pads=pads, has_bias=has_bias, relu=relu, residual=residual,
                                channels_last=channels_last)  # fmt: skip
    if _depthwise(cin, cout, groups):
        return _emit_depthwise(module, name, cout=cout, cout_g=cout_g, ks=ks, strides=strides,
                               dilations=dilations, pads=pads, has_bias=has_bias, relu=relu,
                               residual=residual)  # fmt: skip
    if taps_chosen(cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads, groups=groups,
                   s_max=s_max):  # fmt: skip
        return emit_conv_taps(module, name, cin=cin, cout=cout, ks=ks, strides=strides, dilations=dilations,
                              pads=pads, has_bias=has_bias, relu=relu, residual=residual)  # fmt: skip
    kk = cin_g * _prod(ks)
    mm = emit_matmul(module, f"{name}.matmul", m=cout_g, k=kk)
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64)] + [(f"S{i}", I64) for i in range(r)] + [(f"O{i}", I64) for i in range(r)]
    fn, b = new_function(module, name, args + residual_arg(residual), noalias=CONV_NOALIAS)
    x, w, bias, y, scratch, n_arg = fn.args[:6]
    res = fn.args[-1] if residual else None
    sizes = list(fn.args[6 : 6 + r])
    outs = list(fn.args[6 + r : 6 + 2 * r])
    sx: ir.Value = i64(1)
    for s in sizes:
        sx = b.mul(sx, s)
    p: ir.Value = i64(1)
    for o in outs:
        p = b.mul(p, o)
    empty = b.or_(b.icmp_signed("<=", n_arg, i64(0)), b.icmp_signed("<=", p, i64(0)))
    with b.if_then(empty):
        b.ret_void()

    epilogue = has_bias or relu or res is not None

    def finish(n: ir.Value, p0: ir.Value, plen: ir.Value) -> None:
        """Positions ``p0 .. p0+plen`` of every output row of sample ``n``: + bias (+ residual),
        then relu, in place (``_convtaps.row_epilogue``: vectors of the host's width, the last
        columns under a mask)."""
        vec = _Vec(module, matmul_tiling().vw)
        with for_range(b, i64(0), i64(cout), name="bc") as c:
            bv = b.load(b.gep(bias, [c], source_etype=F32), typ=F32, align=4) if has_bias else None
            bvec = None if bv is None else splat(b, bv, vec.vw)
            at = b.add(b.mul(b.add(b.mul(n, i64(cout)), c), p), p0)
            row = b.gep(y, [at], source_etype=F32)
            res_row = None if res is None else b.gep(res, [at], source_etype=F32)
            row_epilogue(b, vec, row, row, res_row, i64(0), plen, bvec, relu)

    if _pointwise(ks, strides, pads):

        def pointwise(n: ir.Value, batch: ir.Value, p0: ir.Value, plen: ir.Value) -> None:
            """``batch`` samples from ``n``, positions ``p0 .. p0+plen``: x read in place."""
            with for_range(b, i64(0), i64(groups), name="g") as g:
                xs = b.add(b.mul(n, b.mul(i64(cin), sx)), b.add(b.mul(g, b.mul(i64(cin_g), sx)), p0))
                ys = b.add(b.mul(n, b.mul(i64(cout), p)), b.add(b.mul(g, b.mul(i64(cout_g), p)), p0))
                b.call(
                    mm,
                    [
                        b.gep(w, [b.mul(g, i64(cout_g * kk))], source_etype=F32),
                        b.gep(x, [xs], source_etype=F32),
                        b.gep(y, [ys], source_etype=F32),
                        scratch,
                        batch,
                        i64(cout_g),
                        plen,
                        i64(kk),
                        i64(0),
                        i64(kk),
                        i64(1),
                        b.mul(i64(cin), sx),
                        sx,
                        i64(1),
                        b.mul(i64(cout), p),
                        p,
                    ],
                )

        if not epilogue:
            pointwise(i64(0), n_arg, i64(0), p)
            b.ret_void()
            return fn
        # With an epilogue and one thread per product: runs of positions, each finished while
        # its outputs are still in L2 (a 56x56 x 256-channel output is 3 MB: a separate pass
        # read and wrote it back from memory). A product big enough to be split over threads
        # runs whole, then the pass.
        # the matmul splits each product (one sample, one group) on its own size
        macs = b.mul(p, i64(cout_g * kk))
        split = b.and_(
            b.icmp_signed(">=", macs, i64(PARALLEL_MIN_MACS)), b.icmp_signed(">", threads_value(b), i64(1))
        )
        run = i64(_chunk(cout, matmul_tiling().nr))
        with b.if_else(split) as (whole_product, in_runs):
            with whole_product:
                pointwise(i64(0), n_arg, i64(0), p)
                with for_range(b, i64(0), n_arg, name="bn") as n:
                    finish(n, i64(0), p)
            with (
                in_runs,
                for_range(b, i64(0), n_arg, name="rn") as n,
                for_range(b, i64(0), p, run, name="rp") as p0,
            ):
                plen = smin(b, run, b.sub(p, p0))
                pointwise(n, i64(1), p0, plen)
                finish(n, p0, plen)
        b.ret_void()
        return fn
    im2col = _emit_im2col(
        module, f"{name}.im2col", cin_g=cin_g, ks=ks, strides=strides, dilations=dilations, pads=pads
    )
    base = b.and_(b.add(b.ptrtoint(scratch, I64), i64(63)), i64(-64))
    xcol = b.inttoptr(base, PTR)
    xcol_elems = b.and_(b.add(b.mul(i64(kk), p), i64(15)), i64(-16))
    mm_scratch = b.gep(xcol, [xcol_elems], source_etype=F32)
    with for_range(b, i64(0), n_arg, name="n") as n, for_range(b, i64(0), i64(groups), name="g") as g:
        xg = b.gep(x, [b.mul(b.add(b.mul(n, i64(cin)), b.mul(g, i64(cin_g))), sx)], source_etype=F32)
        b.call(im2col, [xg, xcol, *sizes, *outs])
        yg = b.gep(y, [b.mul(b.add(b.mul(n, i64(cout)), b.mul(g, i64(cout_g))), p)], source_etype=F32)
        wg = b.gep(w, [b.mul(g, i64(cout_g * kk))], source_etype=F32)
        zero = i64(0)
        b.call(mm, [wg, xcol, yg, mm_scratch, i64(1), i64(cout_g), p, i64(kk),
                    zero, i64(kk), i64(1), zero, p, i64(1), zero, p])  # fmt: skip
    if epilogue:
        with for_range(b, i64(0), n_arg, name="bn") as n:
            finish(n, i64(0), p)
    b.ret_void()
    return fn


def _emit_depthwise(
    module: ir.Module,
    name: str,
    *,
    cout: int,
    cout_g: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    has_bias: bool,
    relu: bool = False,
    residual: bool = False,
) -> ir.Function:
    """Per output channel and output row: the row starts at the bias, then every tap whose
    outer-axis position is inside the input adds ``w * x`` over the output range (computed
    once per tap) that reads inside the input -- a contiguous axpy for stride 1; with
    ``residual`` and ``relu`` the row, still in cache, then becomes ``max(row + res, 0)``."""
    r = len(ks)
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64)] + [(f"S{i}", I64) for i in range(r)] + [(f"O{i}", I64) for i in range(r)]
    fn, b = new_function(module, name, args + residual_arg(residual), noalias=CONV_NOALIAS)
    x, w, bias, y, _scratch, n_arg = fn.args[:6]
    res = fn.args[-1] if residual else None
    sizes = list(fn.args[6 : 6 + r])
    outs = list(fn.args[6 + r : 6 + 2 * r])
    sx: list[ir.Value] = [i64(1)] * r
    so: list[ir.Value] = [i64(1)] * r
    for ax in range(r - 2, -1, -1):
        sx[ax] = b.mul(sx[ax + 1], sizes[ax + 1])
        so[ax] = b.mul(so[ax + 1], outs[ax + 1])
    chan_in = b.mul(sx[0], sizes[0])
    chan_out = b.mul(so[0], outs[0])
    kprod = _prod(ks)
    last = r - 1
    with for_range(b, i64(0), n_arg, name="n") as n, for_range(b, i64(0), i64(cout), name="co") as co:
        ci = b.sdiv(co, i64(cout_g))
        xc = b.gep(x, [b.mul(b.add(b.mul(n, i64(cout // cout_g)), ci), chan_in)], source_etype=F32)
        y_at = b.mul(b.add(b.mul(n, i64(cout)), co), chan_out)
        yc = b.gep(y, [y_at], source_etype=F32)
        rc = None if res is None else b.gep(res, [y_at], source_etype=F32)
        wc = b.gep(w, [b.mul(co, i64(kprod))], source_etype=F32)
        init = (
            b.load(b.gep(bias, [co], source_etype=F32), typ=F32, align=4)
            if has_bias
            else ir.Constant(F32, 0.0)
        )

        def rows(ax: int, yoff: ir.Value, picked: list[tuple[int, ir.Value]]) -> None:
            if ax < last:
                with for_range(b, i64(0), outs[ax], name=f"o{ax}") as o:
                    rows(ax + 1, b.add(yoff, b.mul(o, so[ax])), [*picked, (ax, o)])
                return
            row = b.gep(yc, [yoff], source_etype=F32)
            with for_range(b, i64(0), outs[last], name="init") as j:
                b.store(init, b.gep(row, [j], source_etype=F32), align=4)

            def taps(level: int, xoff: ir.Value, wflat: ir.Value) -> None:
                if level == len(picked):
                    for t in range(ks[last]):
                        wv = b.load(b.gep(wc, [b.add(b.mul(wflat, i64(ks[last])), i64(t))], source_etype=F32),
                                    typ=F32, align=4)  # fmt: skip
                        off = b.sub(i64(t * dilations[last]), i64(pads[last][0]))
                        lo, hi = _valid_range(b, off, sizes[last], strides[last], outs[last])
                        with for_range(b, lo, hi, name="j") as j:
                            xi = b.add(xoff, b.add(b.mul(j, i64(strides[last])), off))
                            xv = b.load(b.gep(xc, [xi], source_etype=F32), typ=F32, align=4)
                            yp = b.gep(row, [j], source_etype=F32)
                            acc = b.load(yp, typ=F32, align=4)
                            b.store(
                                b.fadd(acc, b.fmul(wv, xv, flags=("contract",)), flags=("contract",)),
                                yp,
                                align=4,
                            )
                    return
                ax2, o = picked[level]
                for t in range(ks[ax2]):
                    pos = b.sub(
                        b.add(b.mul(o, i64(strides[ax2])), i64(t * dilations[ax2])), i64(pads[ax2][0])
                    )
                    inside = b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, sizes[ax2]))
                    with b.if_then(inside):
                        taps(
                            level + 1,
                            b.add(xoff, b.mul(pos, sx[ax2])),
                            b.add(b.mul(wflat, i64(ks[ax2])), i64(t)),
                        )

            taps(0, i64(0), i64(0))
            if relu or rc is not None:
                with for_range(b, i64(0), outs[last], name="epilogue") as j:
                    ptr = b.gep(row, [j], source_etype=F32)
                    v = b.load(ptr, typ=F32, align=4)
                    b.store(conv_epilogue(b, v, rc, b.add(yoff, j), relu), ptr, align=4)

        rows(0, i64(0), [])
    b.ret_void()
    return fn
