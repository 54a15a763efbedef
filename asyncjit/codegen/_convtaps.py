"""float32 2-D convolution read by the matmul micro-tile from a zero-padded copy of the input.

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

A stride ``s > 1`` splits the padded copy into phase planes, plane ``(a, b)`` holding the padded
rows ``a, a + sh, ...`` and columns ``b, b + sw, ...`` (only the phases some tap reads): tap
``(kh, kw)`` then reads plane ``(kh*dh % sh, kw*dw % sw)`` at row ``oh + kh*dh // sh`` and column
``ow + kw*dw // sw``, a run again, in a frame ``Wq = ceil(Wp / sw)`` wide.

Loops (A block in L2, the B run of one tile in L1): runs of positions (``TAPS_CHUNK_BYTES`` of
``Y'`` over all output channels), then channels in blocks of ``kc // (KH*KW)`` (the matmul's K
block), output channels in blocks of ``mc`` rows (the last block takes the rows left after whole
MR tiles, in 4/2/1-row tiles), then NR-position panels, then MR-row tiles; each run is copied
out once its channel blocks are done, so ``Y'`` is one run long and never leaves L2. A layer of
``PARALLEL_MIN_MACS`` or more hands its runs to the intra-op threads (``_emit_runs``: runs
claimed from a counter, each part in its own run buffer), shortening them, in whole panels, when
there are fewer runs than threads; the tiles, and so the bits, are those of one thread.

A stride-1 layer that keeps its width with few outputs goes, on AVX-512 hosts, to
``_convdirect``, the same loops over ``x`` itself with the padding's lanes masked off: no copy,
no junk columns, no copy-out (``emit_conv_taps`` hands it over; ``taps_chosen`` covers both).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from llvmlite import ir

from ._convdirect import direct_eligible, emit_conv_direct
from ._matmul import PARALLEL_MIN_MACS
from ._matmul_tile import _round_up, _row_sizes, _Vec, matmul_tiling, store_tile, tile_loop, tile_rows
from ._parallel import MAX_THREADS, JobBlock, hand_out, new_part_function, threads_value
from ._target import (
    CONV_NOALIAS,
    F32,
    I1,
    I64,
    PTR,
    conv_epilogue,
    for_range,
    i64,
    new_function,
    prefetch_line,
    relu_value,
    residual_arg,
    smax,
    smin,
    splat,
    vector_width,
)

__all__ = [
    "TAPS_MAX_STRIDE",
    "TAPS_MAX_WASTE",
    "TAPS_MIN_K",
    "TAPS_SMALL_COUT",
    "TAPS_STRIDED_MIN_P",
    "TAPS_STRIDED_MIN_VW",
    "TAPS_STRIDED_NARROW_CIN",
    "emit_conv_taps",
    "taps_chosen",
    "taps_eligible",
    "taps_scratch_bytes",
]

TAPS_MAX_STRIDE = 2
"""Up to 2x2 phase planes. AlexNet's 11x11 stride-4 first layer (16 planes, each tap a plane
of its own) ran 10-25% slower this way than as im2col, whose copy is small at that stride."""

TAPS_MIN_K = 16
"""Below this many products per output (``cin*KH*KW``) the k loop is too short to hide the C
tile's load and store; im2col with the direct matmul driver is used instead."""


def taps_eligible(
    *, cin: int, ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int], groups: int
) -> bool:
    """2-D, one group, more than one tap (a 1x1 conv reads ``x`` in place already)."""
    return (
        len(ks) == 2
        and len(strides) == 2
        and max(strides) <= TAPS_MAX_STRIDE
        and len(dilations) == 2
        and groups == 1
        and ks[0] * ks[1] > 1
        and cin * ks[0] * ks[1] >= TAPS_MIN_K
    )


TAPS_SMALL_COUT = 128
"""Up to this many output channels (stride 1; with a stride of 2 see ``TAPS_STRIDED_MIN_P``)
packing im2col's copy costs more than the junk columns: the padded copy is always used.
Measured in one process (``benchmarks/conv_ab.py``): 32-128 output channels 1.1-2x faster than
im2col, 64 at stride 2 1.0-1.3x, 128 at stride 2 5% slower."""

TAPS_STRIDED_MIN_P = 784
"""With a stride of 2, up to ``TAPS_SMALL_COUT // 2`` output channels always take the padded
copy, up to ``TAPS_SMALL_COUT`` from this many output positions: alone, 128 channels ran 5%
slower than im2col, but inside a model, where the layer's input comes from the previous layer
rather than warm from its own last call, ResNet-50's 128-channel stride-2 3x3 to 28x28 took
2.19-2.30 ms against 2.47-2.62 ms as the panels conv (im2col of a transposed input;
``onnx_models.py --layers``, trees alternated). Smaller outputs keep the measured rule. On
hosts under ``TAPS_STRIDED_MIN_VW`` lanes only layers reading fewer than
``TAPS_STRIDED_NARROW_CIN`` channels take it."""

TAPS_STRIDED_MIN_VW = 16
TAPS_STRIDED_NARROW_CIN = 64
"""``TAPS_STRIDED_MIN_P`` holds on AVX-512 hosts, where it was measured. On AVX2 (8 lanes) the
same layer inside ResNet-50 took 3.9-4.3 ms on the padded copy and 3.2-3.3 ms as the panels
conv, whose channels-last output also feeds the next 1x1 conv untransposed (one process per
tree, ``onnx_models.py --layers``); alone, warm, 4.64 against 3.46 ms (``conv_ab.py``). But
ZFNet's 7x7 stride-2 stem from 3 channels to 96 took 5.3 ms on the padded copy against 7.9 as
the panels conv, whose transposed im2col copies 3 floats per position and tap: below this many
input channels the padded copy keeps such layers on AVX2 too (between 3 and 128, unmeasured)."""

TAPS_MAX_WASTE = 1.05
"""Above ``TAPS_SMALL_COUT``, the padded copy only where its tiles (output rows ``Wq`` wide, junk
included) outnumber im2col's (``OH*OW`` positions) by at most this factor: 13x13 outputs with
384 channels (1.18) ran 10% slower than im2col, 56x56 with 256 (1.04) 9-22% faster."""


TAPS_CHUNK_BYTES = 256 << 10
"""Bytes of ``Y'`` (all output channels of a run of positions) computed over every K block
before the next run starts: the run's accumulators stay in L2 between K blocks instead of
going to memory and back once per block (a 64-channel 224x224 layer's ``Y'`` is 13 MB)."""


def _chunk(cout: int, nr: int) -> int:
    """Positions per run of ``Y'`` (``TAPS_CHUNK_BYTES`` over all output channels, whole panels)."""
    return max(nr, TAPS_CHUNK_BYTES // 4 // max(cout, 1) // nr * nr)


def taps_chosen(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    groups: int,
    s_max: Sequence[int],
) -> bool:
    """Whether a conv :func:`taps_eligible` accepts is faster on the padded copy than as im2col,
    judged at the upper bounds ``s_max`` of its input's spatial extents."""
    if not taps_eligible(cin=cin, ks=ks, strides=strides, dilations=dilations, groups=groups):
        return False
    _hq, wq, oh, ow = _frame([max(v, 1) for v in s_max], ks, strides, dilations, pads)
    if max(strides) > 1:
        measured = vector_width() >= TAPS_STRIDED_MIN_VW or cin < TAPS_STRIDED_NARROW_CIN
        many = oh * ow >= TAPS_STRIDED_MIN_P and measured
        return cout <= TAPS_SMALL_COUT // 2 or (cout <= TAPS_SMALL_COUT and many)
    if cout <= TAPS_SMALL_COUT:
        return True
    nr = matmul_tiling().nr
    if oh <= 0 or ow <= 0:
        return True
    return -(-oh * wq // nr) <= TAPS_MAX_WASTE * -(-oh * ow // nr)


def _phases(ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int]]:
    """The phase planes some tap reads, in order: (row phase, column phase)."""
    (kh, kw), (sh, sw), (dh, dw) = ks, strides, dilations
    return sorted({(i * dh % sh, j * dw % sw) for i in range(kh) for j in range(kw)})


def _taps(ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per tap (row-major, the weights' order): (phase plane index, row offset, column offset)."""
    (kh, kw), (sh, sw), (dh, dw) = ks, strides, dilations
    index = {p: k for k, p in enumerate(_phases(ks, strides, dilations))}
    return [
        (index[(i * dh % sh, j * dw % sw)], i * dh // sh, j * dw // sw) for i in range(kh) for j in range(kw)
    ]


def _frame(
    s: Sequence[int], ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> tuple[int, int, int, int]:  # fmt: skip
    """(Hq, Wq, OH, OW) for input ``s`` (H, W): the phase planes' extents and the output's."""
    hp, wp = s[0] + pads[0][0] + pads[0][1], s[1] + pads[1][0] + pads[1][1]
    hq, wq = -(-hp // strides[0]), -(-wp // strides[1])
    oh = (hp - (ks[0] - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wp - (ks[1] - 1) * dilations[1] - 1) // strides[1] + 1
    return hq, wq, oh, ow


def _slack(ks: Sequence[int], strides: Sequence[int], dilations: Sequence[int], nr: int) -> int:
    """Floats after the copy that the last panels' junk positions may read (zeroed)."""
    return _round_up(nr + (ks[1] - 1) * dilations[1] // strides[1], 16)


def taps_scratch_bytes(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    s_max: Sequence[int],
) -> int:
    """Scratch for inputs of at most ``s_max`` (H, W): the padded copy, its slack and a run of
    ``Y'`` per intra-op thread (each part computes its runs in its own); for a layer
    ``_convdirect`` takes, only the 64 bytes every path reserves."""
    if direct_eligible(cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads):
        return 64
    nr = matmul_tiling().nr
    hq, wq, oh, _ow = _frame([max(v, 0) for v in s_max], ks, strides, dilations, pads)
    planes = len(_phases(ks, strides, dilations))
    xp = _round_up(cin * planes * hq * wq + _slack(ks, strides, dilations, nr), 16)
    run = _round_up(cout * min(_chunk(cout, nr), _round_up(max(oh, 0) * wq, nr)), 16)
    kk = cin * ks[0] * ks[1]
    splits = max(oh, 0) * wq * cout * kk >= PARALLEL_MIN_MACS  # the layer's size only grows to s_max
    return 64 + 4 * (xp + (MAX_THREADS if splits else 1) * run)


def _micro_taps(vec: _Vec, mr: int, nr: int, taps: Sequence[tuple[int, int, int]]) -> ir.Function:
    """``C[0:mr, 0:nr] (+)= sum_{c < nch, t} A[r, c*T + t] * xb[c*chan + off_t + j]`` with
    ``off_t = plane_t*plane + row_t*wq + col_t`` (``taps`` as from ``_taps``); the tile stays in
    registers over every channel and tap. Every row is whole: the rows after the MR-row tiles
    get 4/2/1-row tiles of their own (``tiled_runs``)."""
    module = vec.module
    key = "_".join(f"{p}.{r}.{c}" for p, r, c in taps)
    name = f"asyncjit.conv.taps{mr}x{nr}f.{key}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    args: list[tuple[str, ir.Type]] = [
        ("a", PTR),
        ("a_rs", I64),
        ("xb", PTR),
        ("chan", I64),
        ("plane", I64),
        ("wq", I64),
        ("c", PTR),
        ("c_rs", I64),
        ("nch", I64),
        ("accumulate", I1),
    ]
    fn, b = new_function(module, name, args, noalias=("a", "xb", "c"), inline="noinline")
    a, a_rs, xb, chan, plane, wq, c, c_rs, nch, accumulate = fn.args
    nv, vw, n_taps = nr // vec.vw, vec.vw, len(taps)
    rows = tile_rows(b, mr, a_rs, i64(mr), True)
    offs = [b.add(b.add(b.mul(i64(p), plane), b.mul(i64(r), wq)), i64(col)) for p, r, col in taps]
    # the tile's rows of Y' wait in L2 (a run of positions), not L1: ask for them now, so that
    # they arrive while the FMAs run rather than stall the stores after them
    for r in range(mr):
        prefetch_line(b, b.gep(c, [b.mul(i64(r), c_rs)], source_etype=F32), write=True, locality=3)

    def step(ch: ir.Value, accs: list[list[ir.Value]]) -> list[list[ir.Value]]:
        xbase = b.mul(ch, chan)
        abase = b.mul(ch, i64(n_taps))
        out = [list(row) for row in accs]
        for t in range(n_taps):
            xo = b.add(xbase, offs[t])
            bv = [vec.load(b, xb, b.add(xo, i64(v * vw)), None) for v in range(nv)]
            for r in range(mr):
                ai = b.add(rows[r], b.add(abase, i64(t)))
                av = vec.splat(b, b.load(b.gep(a, [ai], source_etype=F32), typ=F32, align=4))
                for v in range(nv):
                    out[r][v] = b.call(vec.fma, [av, bv[v], out[r][v]])
        return out

    accs = tile_loop(vec, b, mr, nv, nch, step, "ch")
    store_tile(vec, b, accs, c, c_rs, accumulate, i64(mr), [None] * nv, True)
    return fn


def run_length(b: ir.IRBuilder, positions: ir.Value, cout: int, kk: int) -> tuple[ir.Value, ir.Value]:
    """(positions per run, parts): runs of ``TAPS_CHUNK_BYTES`` of output, or shorter ones for a
    layer of ``PARALLEL_MIN_MACS`` or more with fewer runs than threads (a 256-channel 14x14
    layer is one run), in whole NR panels either way, so the same tiles and bits; parts: the
    threads that claim them (one below that size)."""
    nr = matmul_tiling().nr
    padded = b.mul(b.sdiv(b.add(positions, i64(nr - 1)), i64(nr)), i64(nr))
    macs = b.mul(b.mul(positions, i64(cout)), i64(kk))
    want = b.select(b.icmp_signed(">=", macs, i64(PARALLEL_MIN_MACS)), threads_value(b), i64(1))
    share = b.sdiv(b.add(padded, b.sub(want, i64(1))), want)
    run = smin(b, i64(_chunk(cout, nr)), b.mul(b.sdiv(b.add(share, i64(nr - 1)), i64(nr)), i64(nr)))
    n_runs = b.sdiv(b.add(padded, b.sub(run, i64(1))), run)
    return run, smin(b, want, n_runs)


def row_epilogue(
    b: ir.IRBuilder,
    vec: _Vec,
    src: ir.Value,
    dst: ir.Value,
    res: ir.Value | None,
    lo: ir.Value,
    hi: ir.Value,
    bias: ir.Value | None,
    relu: bool,
) -> None:
    """``dst[j] = src[j] (+ bias) (+ res[j])``, then relu, for ``lo <= j < hi`` (``dst`` may be
    ``src``): vectors of the host's width, the last columns under a mask (as scalars, the
    padded-copy kernel's copy-out was 7% of a 64-channel 3x3 layer at 56x56)."""
    vw = vec.vw
    whole = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), i64(vw)), i64(vw)))
    with for_range(b, lo, whole, vw, name="ep") as j:
        v = b.load(b.gep(src, [j], source_etype=F32), typ=vec.vty, align=4)
        v = v if bias is None else b.fadd(v, bias)
        b.store(conv_epilogue(b, v, res, j, relu), b.gep(dst, [j], source_etype=F32), align=4)
    with b.if_then(b.icmp_signed("<", whole, hi)):
        mask = vec.lane_mask(b, b.sub(hi, whole), 0)
        v = vec.load(b, src, whole, mask)
        v = v if bias is None else b.fadd(v, bias)
        if res is not None:
            v = b.fadd(v, vec.load(b, res, whole, mask))
        vec.store(b, relu_value(b, v) if relu else v, dst, whole, mask)


TileCall = Callable[[ir.Value, int], None]
"""Emits one MR-row (or tail) tile's call: ``(first row, height)``."""


@contextlib.contextmanager
def tiled_runs(
    b: ir.IRBuilder,
    *,
    next_slot: ir.Value,
    run: ir.Value,
    limit: ir.Value,
    cin: int,
    cout: int,
    n_taps: int,
    panel: Callable[[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value], TileCall],
) -> Iterator[tuple[ir.Value, ir.Value]]:
    """The loops both run kernels share: claim runs ``[j0, j_end)`` of ``run`` positions from the
    counter at ``next_slot`` until ``limit``; in each, K blocks of ``kc // n_taps`` channels,
    MC-row blocks, NR-position panels and MR-row tiles (the rows after the whole tiles, in the
    last block, as 4/2/1-row tiles), each tile emitted by ``panel(j0, jr, c0, nch, accumulate)``
    (the run's start, the panel's, the K block's first channel, its channels, and whether to add
    to the tile's earlier sums); then the body of the ``with`` (the run's finish, at ``(j0,
    j_end)``), and the next claim."""
    t = matmul_tiling()
    mr, nr = t.mr, t.nr
    cb = max(1, t.kc // n_taps)  # channels per K block
    m_full = cout // mr * mr
    tails = []
    row = m_full
    for size in _row_sizes(mr):
        if cout - row >= size:
            tails.append((row, size))
            row += size
    blocks = max(1, -(-m_full // t.mc)) if m_full else 1
    claim = b.append_basic_block("claim")
    work = b.append_basic_block("work")
    done = b.append_basic_block("done")
    b.branch(claim)
    b.position_at_end(claim)
    j0 = b.mul(b.atomic_rmw("add", next_slot, i64(1), "monotonic"), run)
    b.cbranch(b.icmp_signed("<", j0, limit), work, done)
    b.position_at_end(work)
    j_end = smin(b, b.add(j0, run), limit)
    with for_range(b, i64(0), i64(cin), i64(cb), name="cb") as c0:
        nch = smin(b, i64(cb), b.sub(i64(cin), c0))
        acc = b.icmp_signed(">", c0, i64(0))
        with for_range(b, i64(0), i64(blocks), name="mb") as blk:
            ic = b.mul(blk, i64(t.mc))
            ic_end = smin(b, b.add(ic, i64(t.mc)), i64(m_full))
            last = b.icmp_signed("==", blk, i64(blocks - 1))
            with for_range(b, j0, j_end, i64(nr), name="jr") as jr:
                tile = panel(j0, jr, c0, nch, acc)
                with for_range(b, ic, ic_end, i64(mr), name="ir") as r0:
                    tile(r0, mr)
                if tails:
                    with b.if_then(last):
                        for r0_tail, size in tails:
                            tile(i64(r0_tail), size)
    yield j0, j_end
    b.branch(claim)
    b.position_at_end(done)


_RUN_FIELDS = (
    "xp", "w", "bias", "y", "res", "yp", "n", "chan", "plane", "wq", "oh", "ow", "oh_arg", "ow_arg",
    "pr", "ys", "region", "run", "next",
)  # fmt: skip
"""The i64 job block of ``_emit_runs``'s part (pointers as integers; ``next``: the next unclaimed
run, 0 before the parts start)."""


def _emit_runs(
    module: ir.Module,
    name: str,
    *,
    vec: _Vec,
    cin: int,
    cout: int,
    taps: Sequence[tuple[int, int, int]],
    has_bias: bool,
    relu: bool,
    residual: bool,
) -> ir.Function:
    """``part(job, p, parts)``: compute ``Y'`` over runs of positions of one sample, each over
    every K block, and copy each run out to ``y`` (bias, residual, relu) while it is in L2. Parts
    claim runs from ``next`` until none is left, each in its own run buffer (``yp + p * region``),
    so a run's outputs are the same whichever part computed it, and a part whose thread starts
    late leaves its runs to the others."""
    t = matmul_tiling()
    nr = t.nr
    n_taps = len(taps)
    kk = cin * n_taps
    fn, b = new_part_function(module, f"{name}.runs")
    job, part, _ = fn.args
    block = JobBlock(b, job, _RUN_FIELDS)
    slot, field, pointer = block.slot, block.field, block.pointer

    xp, w, bias, y, res_p = (pointer(f) for f in ("xp", "w", "bias", "y", "res"))
    res = res_p if residual else None
    n, chan, plane, wq, oh, ow = (field(f) for f in ("n", "chan", "plane", "wq", "oh", "ow"))
    oh_arg, ow_arg, pr_, ys, region = (field(f) for f in ("oh_arg", "ow_arg", "pr", "ys", "region"))
    ohw = b.mul(oh_arg, ow_arg)  # y's own layout
    yp = b.gep(pointer("yp"), [b.mul(part, region)], source_etype=F32)
    run = field("run")  # positions per run, a multiple of NR

    def panel(j0: ir.Value, jr: ir.Value, c0: ir.Value, nch: ir.Value, acc: ir.Value) -> TileCall:
        xb = b.gep(xp, [b.add(b.mul(c0, chan), jr)], source_etype=F32)
        w_blk = b.gep(w, [b.mul(c0, i64(n_taps))], source_etype=F32)
        y_run = b.gep(yp, [b.sub(jr, j0)], source_etype=F32)

        def tile(r0: ir.Value, height: int) -> None:
            b.call(
                _micro_taps(vec, height, nr, taps),
                [
                    b.gep(w_blk, [b.mul(r0, i64(kk))], source_etype=F32),
                    i64(kk),
                    xb,
                    chan,
                    plane,
                    wq,
                    b.gep(y_run, [b.mul(r0, ys)], source_etype=F32),
                    ys,
                    nch,
                    acc,
                ],
            )

        return tile

    loops = tiled_runs(b, next_slot=slot["next"], run=run, limit=pr_, cin=cin, cout=cout, n_taps=n_taps,
                       panel=panel)  # fmt: skip
    with loops as (j0, j_end):
        # the output rows this run covers, each from its first to its last column in the run
        vw = t.vw
        r_lo = b.sdiv(j0, wq)
        r_hi = smin(b, b.sdiv(b.add(j_end, b.sub(wq, i64(1))), wq), oh)
        with for_range(b, i64(0), i64(cout), name="oc") as oc:
            bv = b.load(b.gep(bias, [oc], source_etype=F32), typ=F32, align=4) if has_bias else None
            bvec = None if bv is None else splat(b, bv, vw)
            ybase = b.mul(b.add(b.mul(n, i64(cout)), oc), ohw)
            with for_range(b, r_lo, r_hi, name="orow") as orow:
                start = b.mul(orow, wq)  # the row's first position in the frame
                c_lo = smax(b, b.sub(j0, start), i64(0))
                c_hi = smin(b, b.sub(j_end, start), ow)
                src = b.gep(yp, [b.add(b.mul(oc, ys), b.sub(start, j0))], source_etype=F32)
                at = b.add(ybase, b.mul(orow, ow_arg))
                dst = b.gep(y, [at], source_etype=F32)
                res_row = None if res is None else b.gep(res, [at], source_etype=F32)
                row_epilogue(b, vec, src, dst, res_row, c_lo, c_hi, bvec, relu)
    b.ret_void()
    return fn


def emit_conv_taps(
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
) -> ir.Function:
    """The conv kernel ``name`` with ``_convnd``'s ABI (``x, w, bias, y, scratch, N, H, W, OH,
    OW`` [, ``res``]) for a layer :func:`taps_eligible` accepts; it uses at most
    :func:`taps_scratch_bytes` of ``scratch`` and touches ``x``/``w``/``bias``/``y`` only inside
    their extents. ``residual``: ``res`` (``y``'s shape) is added; ``relu``: ``max(y, 0)`` is
    stored (the copy-out applies both). A layer ``_convdirect`` takes (stride 1, the width kept,
    few outputs, AVX-512) reads ``x`` in place there instead, with no copy."""
    if direct_eligible(cout=cout, ks=ks, strides=strides, dilations=dilations, pads=pads):
        return emit_conv_direct(module, name, cin=cin, cout=cout, ks=ks, dilations=dilations, pads=pads,
                                has_bias=has_bias, relu=relu, residual=residual)  # fmt: skip
    t = matmul_tiling()
    vec = _Vec(module, t.vw)
    nr = t.nr
    (kh, kw), (sh, sw), (dh, dw) = ks, strides, dilations
    (pt, pb), (pl, pr) = pads
    taps = _taps(ks, strides, dilations)
    phases = _phases(ks, strides, dilations)
    n_taps = kh * kw
    kk = cin * n_taps
    slack = _slack(ks, strides, dilations, nr)
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64), ("H", I64), ("W", I64), ("OH", I64), ("OW", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=CONV_NOALIAS)
    x, w, bias, y, scratch, n_arg, h, wd, oh_arg, ow_arg = fn.args[:10]
    res = fn.args[10] if residual else None
    hp, wp = b.add(h, i64(pt + pb)), b.add(wd, i64(pl + pr))
    hq = b.sdiv(b.add(hp, i64(sh - 1)), i64(sh))
    wq = b.sdiv(b.add(wp, i64(sw - 1)), i64(sw))

    # the frame's own output extents (0 when the span does not fit); the caller's are the same,
    # clamped to them to be safe
    def extent(padded: ir.Value, span: int, stride: int) -> ir.Value:
        room = b.sub(padded, i64(span))
        fits = b.icmp_signed(">=", room, i64(0))
        return b.select(fits, b.add(b.sdiv(smax(b, room, i64(0)), i64(stride)), i64(1)), i64(0))

    oh_f = extent(hp, (kh - 1) * dh + 1, sh)
    ow_f = extent(wp, (kw - 1) * dw + 1, sw)
    oh, ow = smin(b, oh_arg, oh_f), smin(b, ow_arg, ow_f)
    empty = b.or_(
        b.icmp_signed("<=", n_arg, i64(0)),
        b.or_(b.icmp_signed("<=", oh, i64(0)), b.icmp_signed("<=", ow, i64(0))),
    )
    with b.if_then(empty):
        b.ret_void()
    plane = b.mul(hq, wq)
    chan = b.mul(i64(len(phases)), plane)
    frame = b.mul(oh, wq)  # positions of Y' per output channel that hold outputs or junk
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
    run, parts = run_length(b, frame, cout, kk)
    ys = smin(b, run, pr_)  # Y' row stride: one run of positions per output channel
    region = b.and_(b.add(b.mul(i64(cout), ys), i64(15)), i64(-16))  # a part's run buffer, floats
    job = b.alloca(I64, size=len(_RUN_FIELDS))
    runs = _emit_runs(module, name, vec=vec, cin=cin, cout=cout, taps=taps, has_bias=has_bias, relu=relu,
                      residual=residual)  # fmt: skip
    hw = b.mul(h, wd)
    with for_range(b, i64(0), n_arg, name="n") as n:
        # 1. the zero-padded copy of sample n, one phase plane per (row, column) phase read
        for k, (a_ph, b_ph) in enumerate(phases):
            with for_range(b, i64(0), i64(cin), name="pc") as c, for_range(b, i64(0), hq, name="pq") as rq:
                dst_off = b.add(b.mul(c, chan), b.add(b.mul(i64(k), plane), b.mul(rq, wq)))
                dst = b.gep(xp, [dst_off], source_etype=F32)
                src_row = b.sub(b.add(b.mul(rq, i64(sh)), i64(a_ph)), i64(pt))
                inside = b.and_(b.icmp_signed(">=", src_row, i64(0)), b.icmp_signed("<", src_row, h))
                with b.if_else(inside) as (copy, pad):
                    with copy:
                        src_off = b.add(b.mul(b.add(b.mul(n, i64(cin)), c), hw), b.mul(src_row, wd))
                        src = b.gep(x, [src_off], source_etype=F32)
                        if sw == 1:
                            fill(dst, i64(0), i64(pl))
                            with for_range(b, i64(0), wd, name="pw") as j:
                                v = b.load(b.gep(src, [j], source_etype=F32), typ=F32, align=4)
                                b.store(v, b.gep(dst, [b.add(j, i64(pl))], source_etype=F32), align=4)
                            fill(dst, b.add(wd, i64(pl)), wq)
                        else:
                            with for_range(b, i64(0), wq, name="pw") as j:
                                col = b.sub(b.add(b.mul(j, i64(sw)), i64(b_ph)), i64(pl))
                                ok = b.and_(b.icmp_signed(">=", col, i64(0)), b.icmp_signed("<", col, wd))
                                safe = b.select(ok, col, i64(0))  # wd >= 1 here: an in-bounds load
                                v = b.load(b.gep(src, [safe], source_etype=F32), typ=F32, align=4)
                                b.store(b.select(ok, v, zero), b.gep(dst, [j], source_etype=F32), align=4)
                    with pad:
                        fill(dst, i64(0), wq)

        # 2. Y' = W @ taps(xp) over one run of positions at a time (all K blocks), then 3. the
        # run's outputs copied to y: runs claimed by the parts (one, or the intra-op threads for
        # a big layer), each part computing in its own run buffer
        fields = {
            "xp": xp, "w": w, "bias": bias, "y": y, "res": res if res is not None else xp, "yp": yp,
            "n": n, "chan": chan, "plane": plane, "wq": wq, "oh": oh, "ow": ow, "oh_arg": oh_arg,
            "ow_arg": ow_arg, "pr": pr_, "ys": ys, "region": region, "run": run, "next": i64(0),
        }  # fmt: skip
        hand_out(b, job, _RUN_FIELDS, fields, runs, parts)
    b.ret_void()
    return fn
