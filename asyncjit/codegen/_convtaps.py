"""float32 2-D convolution with stride 1, read by the matmul micro-tile from a padded input copy.

im2col writes ``cin*KH*KW`` shifted copies of the input (115 MB for a 64-channel 224x224 layer)
for the matmul to read back and pack once more; with few output channels (M = cout) those
copies cost about as much as the product itself. With stride 1, one tap over a run of output
positions reads a run of the input: the output is computed in the *padded-width frame*, position
``p = oh*Wp + ow`` with ``Wp = W + pad_l + pad_r``, where tap ``(kh, kw)`` of channel ``c`` reads
``xp[c*Hp*Wp + p + kh*dh*Wp + kw*dw]`` of the zero-padded copy ``xp``: contiguous in ``p``,
across the ends of rows too. So the micro-tile (MR output channels x NR positions, as in
``_matmul``) loads its B vectors from ``xp`` at per-tap offsets, broadcasts the weights read in
place, and writes ``Y' [cout, OH*Wp]`` in scratch; the ``Wp - OW`` columns of each row past the
output (2 for a 3x3 with pad 1) are computed and dropped when ``Y'`` is copied out to ``y``, with
the bias added. The extra work is the padded copy of ``x`` and the copy-out, each the size of one
activation, against im2col's ``KH*KW`` copies and the packing of them.

Loops (A block in L2, the B run of one tile in L1): channels in blocks of ``kc // (KH*KW)``
(the matmul's K block), output channels in blocks of ``mc`` rows (the last block takes the rows
left after whole MR tiles, in 4/2/1-row tiles), then NR-position panels, then MR-row tiles.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ._matmul import _row_sizes, _Vec, matmul_tiling
from ._target import F32, I1, I64, PTR, for_range, i64, new_function, smin

__all__ = ["TAPS_MIN_K", "emit_conv_taps", "taps_eligible", "taps_scratch_bytes"]

TAPS_MIN_K = 16
"""Below this many products per output (``cin*KH*KW``) the k loop is too short to hide the C
tile's load and store; im2col with the direct matmul driver is used instead."""


def taps_eligible(
    *, cin: int, ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int], groups: int
) -> bool:
    """2-D, stride 1, one group, more than one tap (a 1x1 conv reads ``x`` in place already)."""
    return (
        len(ks) == 2
        and all(s == 1 for s in strides)
        and groups == 1
        and ks[0] * ks[1] > 1
        and cin * ks[0] * ks[1] >= TAPS_MIN_K
        and len(dilations) == 2
    )


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _layout(
    cin: int, ks: Sequence[int], dilations: Sequence[int], pads: Sequence[tuple[int, int]], nr: int
) -> tuple[int, int, int]:
    """(top+bottom pad, left+right pad, slack floats after ``xp``): the last panel's taps read up to
    ``NR - 1 + (KW-1)*dw`` floats past the padded copy."""
    return pads[0][0] + pads[0][1], pads[1][0] + pads[1][1], _round_up(nr + (ks[1] - 1) * dilations[1], 16)


def taps_scratch_bytes(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    s_max: Sequence[int],
) -> int:
    """Scratch for inputs of at most ``s_max`` (H, W): the padded copy, its slack and ``Y'``."""
    nr = matmul_tiling().nr
    ph, pw, slack = _layout(cin, ks, dilations, pads, nr)
    hp, wp = max(s_max[0], 0) + ph, max(s_max[1], 0) + pw
    oh = max(hp - (ks[0] - 1) * dilations[0], 0)
    xp = _round_up(cin * hp * wp + slack, 16)
    return 64 + 4 * (xp + cout * _round_up(oh * wp, nr))


def _micro_taps(vec: _Vec, mr: int, nr: int, kh: int, kw: int, dw: int, full: bool) -> ir.Function:
    """``C[0:mr_eff, 0:nr] (+)= sum_{c < nch, taps} A[r, c*T + t] * xb[c*chan + off_t + j]`` with
    ``off_t = kh_t*row_step + kw_t*dw``; the tile stays in registers over every channel and tap.
    Not ``full``: rows past ``mr_eff`` re-read row ``mr_eff - 1`` and are not stored."""
    module = vec.module
    name = f"asyncjit.conv.taps{mr}x{nr}.k{kh}x{kw}.dw{dw}{'f' if full else ''}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    args: list[tuple[str, ir.Type]] = [
        ("a", PTR),
        ("a_rs", I64),
        ("xb", PTR),
        ("chan", I64),
        ("row_step", I64),
        ("c", PTR),
        ("c_rs", I64),
        ("nch", I64),
        ("mr_eff", I64),
        ("accumulate", I1),
    ]
    fn, b = new_function(module, name, args, noalias=("a", "xb", "c"), inline="noinline")
    a, a_rs, xb, chan, row_step, c, c_rs, nch, mr_eff, accumulate = fn.args
    nv, vw, taps = nr // vec.vw, vec.vw, kh * kw
    rows = []
    for r in range(mr):
        rr = smin(b, i64(r), b.sub(mr_eff, i64(1))) if r > 0 and not full else i64(r)
        rows.append(b.mul(rr, a_rs))
    offs = [b.add(b.mul(i64(t // kw), row_step), i64((t % kw) * dw)) for t in range(taps)]

    entry = b.block
    head = b.append_basic_block("ch.head")
    body = b.append_basic_block("ch.body")
    done = b.append_basic_block("ch.done")
    b.branch(head)
    b.position_at_end(head)
    ch = b.phi(I64, name="ch")
    ch.add_incoming(i64(0), entry)
    accs = [[b.phi(vec.vty, name=f"acc{r}_{v}") for v in range(nv)] for r in range(mr)]
    for row in accs:
        for acc in row:
            acc.add_incoming(vec.zero, entry)
    b.cbranch(b.icmp_signed("<", ch, nch), body, done)

    b.position_at_end(body)
    xbase = b.mul(ch, chan)
    abase = b.mul(ch, i64(taps))
    cur = [list(row) for row in accs]
    for t in range(taps):
        xo = b.add(xbase, offs[t])
        bv = [vec.load(b, xb, b.add(xo, i64(v * vw)), None) for v in range(nv)]
        for r in range(mr):
            ai = b.add(rows[r], b.add(abase, i64(t)))
            av = vec.splat(b, b.load(b.gep(a, [ai], source_etype=F32), typ=F32, align=4))
            for v in range(nv):
                cur[r][v] = b.call(vec.fma, [av, bv[v], cur[r][v]])
    for r in range(mr):
        for v in range(nv):
            accs[r][v].add_incoming(cur[r][v], b.block)
    ch.add_incoming(b.add(ch, i64(1)), b.block)
    b.branch(head)

    b.position_at_end(done)
    add_bb = b.append_basic_block("store.acc")
    set_bb = b.append_basic_block("store.set")
    exit_bb = b.append_basic_block("exit")
    b.cbranch(accumulate, add_bb, set_bb)
    for bb, add in ((add_bb, True), (set_bb, False)):
        b.position_at_end(bb)
        for r in range(mr):
            if r > 0 and not full:
                store_bb = b.append_basic_block(f"row{r}.{'acc' if add else 'set'}")
                b.cbranch(b.icmp_signed("<", i64(r), mr_eff), store_bb, exit_bb)
                b.position_at_end(store_bb)
            for v in range(nv):
                idx = b.add(b.mul(i64(r), c_rs), i64(v * vw))
                val = accs[r][v]
                if add:
                    val = b.fadd(val, vec.load(b, c, idx, None))
                vec.store(b, val, c, idx, None)
        b.branch(exit_bb)
    b.position_at_end(exit_bb)
    b.ret_void()
    return fn


def emit_conv_taps(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    has_bias: bool,
) -> ir.Function:
    """The conv kernel ``name`` with ``_convnd``'s ABI (``x, w, bias, y, scratch, N, H, W, OH,
    OW``) for a layer :func:`taps_eligible` accepts; it uses at most :func:`taps_scratch_bytes`
    of ``scratch`` and touches ``x``/``w``/``bias``/``y`` only inside their extents."""
    t = matmul_tiling()
    vec = _Vec(module, t.vw)
    mr, nr = t.mr, t.nr
    (kh, kw), (dh, dw) = ks, dilations
    (pt, _pb), (pl, _pr) = pads
    taps = kh * kw
    kk = cin * taps
    ph, pw, slack = _layout(cin, ks, dilations, pads, nr)
    cb = max(1, t.kc // taps)  # channels per K block
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64), ("H", I64), ("W", I64), ("OH", I64), ("OW", I64)]
    fn, b = new_function(module, name, args, noalias=("x", "w", "bias", "y", "scratch"))
    x, w, bias, y, scratch, n_arg, h, wd, oh_arg, ow_arg = fn.args
    hp, wp = b.add(h, i64(ph)), b.add(wd, i64(pw))
    # the frame's own output extents (stride 1); the caller's are the same, clamped to be safe
    oh = smin(b, oh_arg, b.sub(hp, i64((kh - 1) * dh)))
    ow = smin(b, ow_arg, b.sub(wp, i64((kw - 1) * dw)))
    empty = b.or_(
        b.icmp_signed("<=", n_arg, i64(0)),
        b.or_(b.icmp_signed("<=", oh, i64(0)), b.icmp_signed("<=", ow, i64(0))),
    )
    with b.if_then(empty):
        b.ret_void()
    chan = b.mul(hp, wp)
    frame = b.mul(oh, wp)  # positions of Y' per output channel that hold outputs or junk
    pr_ = b.mul(b.sdiv(b.add(frame, i64(nr - 1)), i64(nr)), i64(nr))  # Y' row length
    xp = b.inttoptr(b.and_(b.add(b.ptrtoint(scratch, I64), i64(63)), i64(-64)), PTR)
    xp_elems = b.add(b.mul(i64(cin), chan), i64(slack))
    yp = b.gep(xp, [b.and_(b.add(xp_elems, i64(15)), i64(-16))], source_etype=F32)
    zero = ir.Constant(F32, 0.0)

    def fill(dst: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
        with for_range(b, lo, hi, name="z") as i:
            b.store(zero, b.gep(dst, [i], source_etype=F32), align=4)

    # the slack past the copy is read by the last panels' junk positions only: zeros, not NaN
    fill(xp, b.mul(i64(cin), chan), xp_elems)
    hw = b.mul(h, wd)
    ohw = b.mul(oh_arg, ow_arg)  # y's own layout
    with for_range(b, i64(0), n_arg, name="n") as n:
        # 1. the zero-padded copy of sample n
        with for_range(b, i64(0), i64(cin), name="pc") as c, for_range(b, i64(0), hp, name="ph") as r:
            dst = b.gep(xp, [b.add(b.mul(c, chan), b.mul(r, wp))], source_etype=F32)
            src_row = b.sub(r, i64(pt))
            inside = b.and_(b.icmp_signed(">=", src_row, i64(0)), b.icmp_signed("<", src_row, h))
            with b.if_else(inside) as (copy, pad):
                with copy:
                    src_off = b.add(b.mul(b.add(b.mul(n, i64(cin)), c), hw), b.mul(src_row, wd))
                    src = b.gep(x, [src_off], source_etype=F32)
                    fill(dst, i64(0), i64(pl))
                    with for_range(b, i64(0), wd, name="pw") as j:
                        v = b.load(b.gep(src, [j], source_etype=F32), typ=F32, align=4)
                        b.store(v, b.gep(dst, [b.add(j, i64(pl))], source_etype=F32), align=4)
                    fill(dst, b.add(wd, i64(pl)), wp)
                with pad:
                    fill(dst, i64(0), wp)

        # 2. Y' = W @ taps(xp), K in channel blocks
        row_step = b.mul(wp, i64(dh))
        m_full = cout // mr * mr
        tails = []
        row = m_full
        for size in _row_sizes(mr):
            if cout - row >= size:
                tails.append((row, size))
                row += size
        blocks = max(1, -(-m_full // t.mc)) if m_full else 1
        with for_range(b, i64(0), i64(cin), i64(cb), name="cb") as c0:
            nch = smin(b, i64(cb), b.sub(i64(cin), c0))
            acc = b.icmp_signed(">", c0, i64(0))
            with for_range(b, i64(0), i64(blocks), name="mb") as blk:
                ic = b.mul(blk, i64(t.mc))
                ic_end = smin(b, b.add(ic, i64(t.mc)), i64(m_full))
                last = b.icmp_signed("==", blk, i64(blocks - 1))
                with for_range(b, i64(0), pr_, i64(nr), name="jr") as jr:
                    xb = b.gep(xp, [b.add(b.mul(c0, chan), jr)], source_etype=F32)

                    def tile(r0: ir.Value, height: int, full: bool) -> None:
                        b.call(
                            _micro_taps(vec, height, nr, kh, kw, dw, full),
                            [
                                b.gep(w, [b.add(b.mul(r0, i64(kk)), b.mul(c0, i64(taps)))], source_etype=F32),
                                i64(kk),
                                xb,
                                chan,
                                row_step,
                                b.gep(yp, [b.add(b.mul(r0, pr_), jr)], source_etype=F32),
                                pr_,
                                nch,
                                i64(height),
                                acc,
                            ],
                        )

                    with for_range(b, ic, ic_end, i64(mr), name="ir") as r0:
                        tile(r0, mr, True)
                    if tails:
                        with b.if_then(last):
                            for r0_tail, size in tails:
                                tile(i64(r0_tail), size, True)

        # 3. copy the outputs (not the junk columns) to y, adding the bias
        with for_range(b, i64(0), i64(cout), name="oc") as oc:
            bv = b.load(b.gep(bias, [oc], source_etype=F32), typ=F32, align=4) if has_bias else None
            ybase = b.mul(b.add(b.mul(n, i64(cout)), oc), ohw)
            with for_range(b, i64(0), oh, name="orow") as orow:
                src = b.gep(yp, [b.add(b.mul(oc, pr_), b.mul(orow, wp))], source_etype=F32)
                dst = b.gep(y, [b.add(ybase, b.mul(orow, ow_arg))], source_etype=F32)
                with for_range(b, i64(0), ow, name="ocol") as j:
                    v = b.load(b.gep(src, [j], source_etype=F32), typ=F32, align=4)
                    if bv is not None:
                        v = b.fadd(v, bv)
                    b.store(v, b.gep(dst, [j], source_etype=F32), align=4)
    b.ret_void()
    return fn
