"""float32 2-D convolution whose matmul micro-tile reads the input in place, under lane masks.

The padded-copy kernel (``_convtaps``) computes in the padded-width frame: a zero-padded copy of
``x``, ``Wp - OW`` junk columns per output row, and a copy-out of ``Y'`` to ``y``. A stride-1
conv that keeps the width (``pad_l + pad_r == (KW-1)*dw``: a 3x3 with pads 1, a 5x5 with pads 2,
any Kx1 without column pads) needs none of it: its frame is the output itself, position ``p =
oh*W + ow``, and tap ``(kh, kw)`` of channel ``c`` reads ``x[c*H*W + p + (kh*dh - pt)*W + (kw*dw
- pl)]``, a run in ``p`` again. That index is right wherever the tap lands inside the image;
where it lands in the padding (a row above or below, or a column left or right, which in the
flat index is the end of the neighbouring row) the lane is masked off and reads zero: a masked
load never touches a masked lane's memory, so nothing is copied: no padded copy (8% of a
64-channel 224x224 layer), no junk columns (7% more tiles at 28x28, 14% at 14x14), no copy-out:
tiles accumulate in ``y`` itself, and each run of positions gets its bias, residual and relu in
place while it is still in L2.

A zero-masked load takes an FMA port besides its load, so masks are kept to the tiles that need
them. The driver finds each panel's lanes' rows and columns (``_lane_masks``: a float64 multiply
by ``1/W``, exact below 2^51 positions) and picks one of three tiles: a *clean* tile (its lanes in
one row, far enough from both ends for every tap) loads unmasked; an *inner* tile (every lane
inside the output, every tap's row inside the image) masks only the taps whose column moves
(``kw*dw != pl``), four masks for a 3x3; an *edge* tile (the first or last rows, the end of the
output) masks every tap by row and column and stores only its lanes inside the output. Loops as
in ``_convtaps``: runs of ``TAPS_CHUNK_BYTES`` of output (claimed by the intra-op threads for a
big layer), K blocks of ``kc // (KH*KW)`` channels, MC-row blocks, NR-position panels, MR-row
tiles: the same tiles, and bits, on any number of threads.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ._matmul_tile import _Vec, matmul_tiling, store_tile, tile_loop, tile_rows
from ._parallel import JobBlock, hand_out, new_part_function
from ._target import (
    CONV_NOALIAS,
    F32,
    F64,
    I1,
    I32,
    I64,
    PTR,
    for_range,
    i64,
    new_function,
    prefetch_line,
    residual_arg,
    smin,
    splat,
    vector_width,
)

__all__ = ["DIRECT_MAX_COUT", "DIRECT_MIN_VW", "direct_eligible", "emit_conv_direct"]

DIRECT_MIN_VW = 16
"""Only on AVX-512 hosts: AVX2's ``vmaskmovps`` costs more than a plain load, and the padded copy
stays there."""

DIRECT_MAX_COUT = 64
"""Up to this many output channels. A zero-masked load takes an FMA port besides its load (the
inner tile of a 3x3 ran 8% slower than the padded copy's, operands hot), and the copies it saves
cost per position about ``cin + cout`` against ``cin * cout`` multiply-adds: measured in one
process (``benchmarks/conv_ab.py``, per-call minima, five runs), 3->64 channels at 224x224
18-35% faster, 64 at 224x224 6-8% (one run in a burst of the host even), 128->32 at 56x56 5-12%,
64 at 56x56 3-6%; 128 at 28x28 and 112x112 and 256 at 56x56 even to 2% slower."""


def direct_eligible(
    *,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> bool:
    """A 2-D stride-1 conv that keeps the input's width, with few outputs, on an AVX-512 host (the
    caller has checked the rest: one group, ``_convtaps.taps_eligible``)."""
    return (
        len(ks) == 2
        and tuple(strides) == (1, 1)
        and pads[1][0] + pads[1][1] == (ks[1] - 1) * dilations[1]
        and cout <= DIRECT_MAX_COUT
        and vector_width() >= DIRECT_MIN_VW
    )


def _micro_direct(vec: _Vec, mr: int, nr: int, taps: Sequence[tuple[int, int]], kind: str) -> ir.Function:
    """``C[0:mr, 0:nr] (+)= sum_{c < nch, t} A[r, c*T + t] * x[c*chan + j + ro_t*wd + co_t]`` over
    the lanes ``j`` that ``masks[t]`` (an i32 of lane bits per tap, from :func:`_lane_masks`) lets
    through, the others reading zero; ``taps`` are ``(ro, co)``, each tap's row and column offset.
    ``kind``: ``"clean"``, every tap of every lane inside the image (no mask: a zero-masked load
    takes an FMA port besides the load, 8% of a 3x3 tile with every moved column masked);
    ``"inner"``, every lane's rows inside the image for every tap and inside the output, so only
    the taps whose column moves are masked, by their column's mask (four masks for a 3x3, held
    in mask registers); ``"edge"``: every tap masked, and only the
    lanes of ``masks[T]`` stored."""
    module = vec.module
    key = "_".join(f"{ro}.{co}" for ro, co in taps).replace("-", "m")
    name = f"asyncjit.conv.direct{mr}x{nr}{kind[0]}.{key}"
    edge = kind == "edge"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    args: list[tuple[str, ir.Type]] = [
        ("a", PTR),
        ("a_rs", I64),
        ("xb", PTR),
        ("chan", I64),
        ("wd", I64),
        ("masks", PTR),
        ("c", PTR),
        ("c_rs", I64),
        ("nch", I64),
        ("accumulate", I1),
    ]
    fn, b = new_function(module, name, args, noalias=("a", "xb", "masks", "c"), inline="noinline")
    a, a_rs, xb, chan, wd, mp, c, c_rs, nch, accumulate = fn.args
    vw, nv, n_taps = vec.vw, nr // vec.vw, len(taps)
    rows = tile_rows(b, mr, a_rs, i64(mr), True)
    offs = [b.add(b.mul(i64(ro), wd), i64(co)) for ro, co in taps]
    # the tile's rows of y: in L2 after the run's first K block, from memory in it; asked for
    # now, every line, so that they are here when the tile is stored
    for r in range(mr):
        for line in range(0, nr, 16):
            at = b.add(b.mul(i64(r), c_rs), i64(line))
            prefetch_line(b, b.gep(c, [at], source_etype=F32), write=True, locality=3)

    def lanes(t: int) -> list[ir.Value]:
        """Tap ``t``'s mask (``T``: the lanes stored), one ``<vw x i1>`` per vector."""
        bits = b.load(b.gep(mp, [i64(t)], source_etype=I32), typ=I32, align=4)
        if nr < 32:
            bits = b.trunc(bits, ir.IntType(nr))
        whole = b.bitcast(bits, ir.VectorType(I1, nr))
        picks = [ir.Constant(ir.VectorType(I32, vw), list(range(v * vw, (v + 1) * vw))) for v in range(nv)]
        return [b.shuffle_vector(whole, whole, pick) for pick in picks]

    masks: list[list[ir.Value | None]] = [[None] * nv for _ in taps]
    if edge:
        masks = [lanes(t) for t in range(n_taps)]
    elif kind == "inner":  # all rows inside: a tap's mask is its column's, the same for every tap of it
        first = {co: t for t, (_ro, co) in reversed(list(enumerate(taps)))}
        by_col = {co: lanes(t) for co, t in first.items() if co != 0}
        masks = [by_col.get(co, [None] * nv) for _ro, co in taps]
    store_masks: list[ir.Value | None] = list(lanes(n_taps)) if edge else [None] * nv

    def step(ch: ir.Value, accs: list[list[ir.Value]]) -> list[list[ir.Value]]:
        xbase = b.mul(ch, chan)
        abase = b.mul(ch, i64(n_taps))
        out = [list(row) for row in accs]
        for t in range(n_taps):
            xo = b.add(xbase, offs[t])
            bv = [vec.load(b, xb, b.add(xo, i64(v * vw)), masks[t][v]) for v in range(nv)]
            for r in range(mr):
                ai = b.add(rows[r], b.add(abase, i64(t)))
                av = vec.splat(b, b.load(b.gep(a, [ai], source_etype=F32), typ=F32, align=4))
                for v in range(nv):
                    out[r][v] = b.call(vec.fma, [av, bv[v], out[r][v]])
        return out

    accs = tile_loop(vec, b, mr, nv, nch, step, "ch")
    store_tile(vec, b, accs, c, c_rs, accumulate, i64(mr), store_masks, True)
    return fn


def _lane_masks(
    b: ir.IRBuilder, out: ir.Value, p0: ir.Value, wd: ir.Value, hd: ir.Value, frame: ir.Value,
    taps: Sequence[tuple[int, int]], nr: int,
) -> None:  # fmt: skip
    """``out[t]`` (i32 lane bits) for the panel of positions ``p0 .. p0+nr``: lane ``j`` set when
    tap ``t`` reads inside the image there and ``p0 + j`` is inside the output; ``out[T]``: the
    lanes inside the output. Rows and columns by a float64 multiply by ``1/W`` (exact below 2^51
    positions), once per panel of each K and M block rather than in every tile (in the tile, a
    divide and multiplies ahead of its FMAs cost 5%)."""
    if nr > 32:
        raise ValueError(f"conv: lane masks are packed in an i32, not {nr} lanes")
    i64v = ir.VectorType(I64, nr)
    pv = b.add(splat(b, p0, nr), ir.Constant(i64v, list(range(nr))))
    inv_w = b.fdiv(ir.Constant(F64, 1.0), b.sitofp(wd, F64))
    half = splat(b, ir.Constant(F64, 0.5), nr)
    ohv = b.fptosi(b.fmul(b.fadd(b.sitofp(pv, ir.VectorType(F64, nr)), half), splat(b, inv_w, nr)), i64v)
    owv = b.sub(pv, b.mul(ohv, splat(b, wd, nr)))
    zero = ir.Constant(i64v, [0] * nr)

    def within(at: ir.Value, off: int, size: ir.Value) -> ir.Value:
        moved = b.add(at, ir.Constant(i64v, [off] * nr))
        return b.and_(b.icmp_signed(">=", moved, zero), b.icmp_signed("<", moved, splat(b, size, nr)))

    inside = b.icmp_signed("<", pv, splat(b, frame, nr))

    def bits(m: ir.Value) -> ir.Value:
        v = b.bitcast(m, ir.IntType(nr))
        return b.zext(v, I32) if nr < 32 else v

    rows = {ro: b.and_(within(ohv, ro, hd), inside) for ro in {ro for ro, _ in taps}}
    cols = {co: within(owv, co, wd) for co in {co for _, co in taps}}
    for t, (ro, co) in enumerate(taps):
        b.store(bits(b.and_(rows[ro], cols[co])), b.gep(out, [i64(t)], source_etype=I32))
    b.store(bits(inside), b.gep(out, [i64(len(taps))], source_etype=I32))


_FIELDS = ("x", "w", "bias", "y", "res", "chan", "wd", "hd", "frame", "ys", "lo", "hi", "run", "next")
"""The i64 job block of the runs part (pointers as integers, each at sample ``n``; ``lo``/``hi``:
the positions whose tiles are inner; ``next``: the next unclaimed run, 0 before the parts
start)."""


def _emit_runs(
    module: ir.Module,
    name: str,
    *,
    vec: _Vec,
    cin: int,
    cout: int,
    taps: Sequence[tuple[int, int]],
    has_bias: bool,
    relu: bool,
    residual: bool,
) -> ir.Function:
    """``part(job, p, parts)``: claim runs of positions of one sample from ``next`` until none is
    left; each over every K block, accumulated in ``y``, then finished in place."""
    from ._convtaps import TileCall, row_epilogue, tiled_runs

    nr = matmul_tiling().nr
    n_taps = len(taps)
    kk = cin * n_taps
    fn, b = new_part_function(module, f"{name}.runs")
    job = fn.args[0]
    lane_bits = b.alloca(I32, size=n_taps + 1)  # the panel's masks (_lane_masks)
    block = JobBlock(b, job, _FIELDS)
    slot, field, pointer = block.slot, block.field, block.pointer

    x, w, bias, y, res_p = (pointer(f) for f in ("x", "w", "bias", "y", "res"))
    chan, wd, hd, frame, ys, lo, hi, run = (field(f) for f in _FIELDS[5:13])
    co_min, co_max = min(co for _, co in taps), max(co for _, co in taps)

    def panel(_j0: ir.Value, jr: ir.Value, c0: ir.Value, nch: ir.Value, acc: ir.Value) -> TileCall:
        inner = b.and_(b.icmp_signed(">=", jr, lo), b.icmp_signed("<=", b.add(jr, i64(nr)), hi))
        # clean: inner, and the panel's columns far enough from both ends of one row
        ow0 = b.srem(jr, wd)
        clean = b.and_(
            inner,
            b.and_(
                b.icmp_signed(">=", ow0, i64(-co_min)),
                b.icmp_signed("<", b.add(ow0, i64(nr - 1 + co_max)), wd),
            ),
        )
        _lane_masks(b, lane_bits, jr, wd, hd, frame, taps, nr)
        xb = b.gep(x, [b.add(b.mul(c0, chan), jr)], source_etype=F32)
        w_blk = b.gep(w, [b.mul(c0, i64(n_taps))], source_etype=F32)
        y_run = b.gep(y, [jr], source_etype=F32)

        def tile(r0: ir.Value, height: int) -> None:
            clean_fn, inner_fn, edge_fn = (
                _micro_direct(vec, height, nr, taps, kind) for kind in ("clean", "inner", "edge")
            )
            micro = b.select(clean, clean_fn, b.select(inner, inner_fn, edge_fn))
            b.call(
                micro,
                [
                    b.gep(w_blk, [b.mul(r0, i64(kk))], source_etype=F32),
                    i64(kk),
                    xb,
                    chan,
                    wd,
                    lane_bits,
                    b.gep(y_run, [b.mul(r0, ys)], source_etype=F32),
                    ys,
                    nch,
                    acc,
                ],
            )

        return tile

    loops = tiled_runs(b, next_slot=slot["next"], run=run, limit=frame, cin=cin, cout=cout, n_taps=n_taps,
                       panel=panel)  # fmt: skip
    with loops as (j0, j_end):
        if has_bias or relu or residual:
            bias_vec = None
            with for_range(b, i64(0), i64(cout), name="oc") as oc:
                if has_bias:
                    bias_vec = splat(b, b.load(b.gep(bias, [oc], source_etype=F32), typ=F32, align=4), vec.vw)
                yrow = b.gep(y, [b.mul(oc, ys)], source_etype=F32)
                rrow = b.gep(res_p, [b.mul(oc, ys)], source_etype=F32) if residual else None
                row_epilogue(b, vec, yrow, yrow, rrow, j0, j_end, bias_vec, relu)
    b.ret_void()
    return fn


def emit_conv_direct(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    has_bias: bool,
    relu: bool = False,
    residual: bool = False,
) -> ir.Function:
    """The conv kernel ``name`` with ``_convnd``'s ABI (``x, w, bias, y, scratch, N, H, W, OH,
    OW`` [, ``res``]) for a layer :func:`direct_eligible` accepts; no scratch; it touches
    ``x``/``w``/``bias``/``y`` only inside their extents (a lane outside ``x`` is masked)."""
    from ._convtaps import run_length

    t = matmul_tiling()
    vec = _Vec(module, t.vw)
    (kh, kw), (dh, dw) = ks, dilations
    (pt, pb), (pl, _pr) = pads
    taps = [(i * dh - pt, j * dw - pl) for i in range(kh) for j in range(kw)]
    kk = cin * kh * kw
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64), ("H", I64), ("W", I64), ("OH", I64), ("OW", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=CONV_NOALIAS)
    x, w, bias, y, _scratch, n_arg, h, wd, oh_arg, ow_arg = fn.args[:10]
    res = fn.args[10] if residual else None
    # the output's rows by the kernel's own reckoning, clamped to the caller's; its width is the
    # input's (a caller that disagrees would need another layout of y: nothing is written)
    room = b.sub(b.add(h, i64(pt + pb)), i64((kh - 1) * dh))
    oh = smin(b, oh_arg, room)
    empty = b.or_(
        b.or_(b.icmp_signed("<=", n_arg, i64(0)), b.icmp_signed("<=", oh, i64(0))),
        b.or_(b.icmp_signed("<=", wd, i64(0)), b.icmp_signed("!=", ow_arg, wd)),
    )
    with b.if_then(empty):
        b.ret_void()
    chan = b.mul(h, wd)
    frame = b.mul(oh, wd)
    ys = b.mul(oh_arg, wd)  # y's channel stride
    run, parts = run_length(b, frame, cout, kk)
    # inner tiles: rows pt .. H - 1 + pt - (KH-1)*dh, where every tap's row is inside the image
    lo = b.mul(i64(pt), wd)
    hi = smin(b, b.mul(b.add(h, i64(pt - (kh - 1) * dh)), wd), frame)
    job = b.alloca(I64, size=len(_FIELDS))
    runs = _emit_runs(module, name, vec=vec, cin=cin, cout=cout, taps=taps, has_bias=has_bias, relu=relu,
                      residual=residual)  # fmt: skip
    with for_range(b, i64(0), n_arg, name="n") as n:
        ybase = b.mul(b.mul(n, i64(cout)), ys)
        fields = {
            "x": b.gep(x, [b.mul(b.mul(n, i64(cin)), chan)], source_etype=F32),
            "w": w,
            "bias": bias,
            "y": b.gep(y, [ybase], source_etype=F32),
            "res": b.gep(res, [ybase], source_etype=F32) if res is not None else y,
            "chan": chan, "wd": wd, "hd": h, "frame": frame, "ys": ys, "lo": lo, "hi": hi, "run": run,
            "next": i64(0),
        }  # fmt: skip
        hand_out(b, job, _FIELDS, fields, runs, parts)
    b.ret_void()
    return fn
