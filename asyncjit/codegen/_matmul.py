"""Register-tiled float32 matmul (batched, arbitrary strides) as LLVM IR.

Emitted function (the ABI the compiler codes against)::

    void name(float* A, float* B, float* C, i8* scratch, i64 batch, i64 M, i64 N, i64 K,
              i64 a_bs, i64 a_rs, i64 a_cs, i64 b_bs, i64 b_rs, i64 b_cs, i64 c_bs, i64 c_rs)

    C[p*c_bs + i*c_rs + j] = sum_k A[p*a_bs + i*a_rs + k*a_cs] * B[p*b_bs + k*b_rs + j*b_cs]

Design (measured on the 2-core AVX-512 host, see ``benchmarks/kernels.py``):

* The micro-kernel keeps an ``MR x NR`` tile of C in vector registers and does, per k, ``NR/VW``
  vector loads of B, ``MR`` broadcasts of A and ``MR*NR/VW`` FMAs.  With AVX-512 (VW=16) the
  tile is 8x32 (16 zmm accumulators): it beat 12x32, 14x32, 6x64 and 4x64 on 512^3 here (~93 vs
  72-91 GFLOP/s, best of noisy runs; the host peaks near 93); with
  AVX2 (VW=8) the same code gives 8x16 (16 ymm).  Row remainders use 4-, 2- and 1-row
  micro-kernels, column remainders masked loads/stores (a packed last panel of at most NR/2
  columns runs a half-width tile): nothing outside the extents is touched.
* Three drivers, chosen per call from the runtime strides and sizes:
  ``direct`` (B has unit column stride and M <= 16 or K*N <= 64K elements; for M > 64 only
  when B's rows are whole cache lines apart): no packing, the micro-kernel reads A and B in
  place -- packing B would cost as much as the whole product;
  ``dot`` (A rows and B columns both contiguous in k, i.e. ``x @ W.T`` with a PyTorch weight,
  and M <= 32): each C element is a vectorised dot product, 4x4 of them at a time;
  ``packed`` (everything else, and all large problems): BLIS-style cache blocking with A and B
  panels packed into ``scratch`` (any strides, including 0 and transposed).
* Drivers, packers and micro-kernels are shared by every matmul of a module (named
  ``asyncjit.matmul.*``); only the small dispatching kernel is per call site.  The first matmul
  costs ~0.3-0.6 s of LLVM time on this host, later ones a few ms.  ``m``/``n``/``k`` given as
  Python ints become constants, which folds the driver choice; the runtime arguments must then
  equal them.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ._matmul_split import PART_FIELDS, ROW_SPLIT_RATIO, call_driver, split_part
from ._parallel import MAX_THREADS, emit_parallel_for, threads_value
from ._target import (
    F32,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    for_range,
    i64,
    intrinsic,
    new_function,
    smax,
    smin,
    vector_width,
)

__all__ = ["PARALLEL_MIN_MACS", "MatmulTiling", "emit_matmul", "matmul_scratch_bytes", "matmul_tiling"]

GEMV_M_MAX = 4
GEMV_MIN_B = 1 << 20
GEMV_KC = 8
"""The direct driver streams B row after row (K blocks of ``GEMV_KC`` rows spanning every
column) for at most ``GEMV_M_MAX`` rows over a B of at least ``GEMV_MIN_B`` elements (fewer
rows than any MR: that nest has no whole MR-row tiles)."""

PARALLEL_MIN_MACS = 1 << 26
"""Multiply-adds from which one matmul (of a batch) splits its columns over the intra-op threads
(see ``_parallel``): ~1.7 ms on one core, so spawning and joining (20-60 µs a thread) stays
under 5%. The Silero VAD's batched steps (at most 2^25 at b = 256) stay on one thread."""


class MatmulTiling:
    """Tile and cache-block sizes (in elements) shared by the emitter and the scratch sizing."""

    __slots__ = (
        "direct_b_max",
        "direct_m_max",
        "direct_rows_first_k",
        "direct_short_k_m_max",
        "direct_short_k_max",
        "dot_m_max",
        "kc",
        "mc",
        "mr",
        "nc",
        "nr",
        "vw",
    )

    def __init__(self, vw: int) -> None:
        self.vw = vw
        self.mr = 8 if vw >= 16 else 6  # AVX2: 12 accumulators + 2 B + 1 A fit 16 ymm; 8x16 spilled
        self.nr = 2 * vw
        # KC x NR B micro-panel (32 KiB at 256x32) stays in L1; MC x KC A block in L2;
        # KC x NC B block in L2/L3.
        self.kc = 256
        self.mc = 64 if self.mr == 8 else 60  # whole MR-row tiles per block
        self.nc = 2048
        self.direct_m_max = 16
        self.direct_b_max = 64 * 1024
        # M <= 64 with K <= 640 (a CNN's first convs, K = 27 from 3 channels x 3x3; 3x3 convs
        # into 64 channels, K = 576): the direct driver on blocks of B that stay in L2 beat
        # packing B, 1.3-1.7x at 24x12544x27, 48x3136x24, 24x784x216 and 1.07-1.19x at
        # 64x3025x576, 32x3025x576 (M x N x K, AVX2); at K = 1152 packing won (64x784x1152).
        self.direct_short_k_m_max = 64
        self.direct_short_k_max = 640
        self.direct_rows_first_k = 32
        # M <= 32 with both operands contiguous in k: the dot path, which never packs B.  At
        # 8 < M <= 32 packing a weight-sized B cost more than the product (conv1d at N = 8,
        # Silero VAD STFT 88-106 -> 76-80 us, 128->64 k3 s2 25-27 -> 12-14 us; M = 64 was even).
        self.dot_m_max = 32

    def __repr__(self) -> str:
        return (
            f"MatmulTiling(mr={self.mr}, nr={self.nr}, vw={self.vw}, kc={self.kc}, mc={self.mc}, "
            f"nc={self.nc})"
        )


def matmul_tiling() -> MatmulTiling:
    """The tiling used for the host CPU."""
    return MatmulTiling(vector_width())


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def matmul_scratch_bytes(m_max: int, n_max: int, k_max: int) -> int:
    """Bytes of ``scratch`` a kernel from :func:`emit_matmul` needs for sizes up to the maxima.

    Covers the packed A block, the packed B block and 64 bytes of alignment slack.  Depends only
    on the maxima (the kernel lays the blocks out from the runtime sizes, which are smaller).
    """
    if min(m_max, n_max, k_max) < 0:
        raise ValueError(f"matmul maxima must be >= 0, got {(m_max, n_max, k_max)}")
    t = matmul_tiling()
    single = _region_bytes(t, m_max, n_max, k_max)
    if m_max * n_max * k_max < PARALLEL_MIN_MACS:
        return single
    # split over T threads: T regions for ceil(N / T) columns each (rounded up to NR), or, when
    # rows are split (M >= ROW_SPLIT_RATIO * N, so N <= M_max / ratio), T regions for all N
    rows_n = min(n_max, m_max // ROW_SPLIT_RATIO)
    return max(
        single,
        *(
            parts * _region_bytes(t, m_max, _round_up(-(-n_max // parts), t.nr), k_max)
            for parts in range(2, MAX_THREADS + 1)
        ),
        MAX_THREADS * _region_bytes(t, m_max, rows_n, k_max),
    )


def _region_bytes(t: MatmulTiling, m: int, n: int, k: int) -> int:
    """Scratch of one driver call (mirrored in IR by ``_matmul_split.split_part``)."""
    kc = min(t.kc, max(k, 1))
    a_block = _round_up(_round_up(min(t.mc, max(m, 1)), t.mr) * kc, 16)
    b_block = _round_up(min(t.nc, max(n, 1)), t.nr) * kc
    return 64 + 4 * (a_block + b_block)


# --------------------------------------------------------------------------------------------
# IR plumbing
# --------------------------------------------------------------------------------------------


class _Vec:
    """Vector helpers bound to one module and vector width."""

    def __init__(self, module: ir.Module, vw: int) -> None:
        self.module = module
        self.vw = vw
        self.vty = ir.VectorType(F32, vw)
        self.mty = ir.VectorType(I1, vw)
        self.ity = ir.VectorType(I32, vw)
        self.i64ty = ir.VectorType(I64, vw)
        self.pty = ir.VectorType(PTR, vw)
        self.zero = ir.Constant(self.vty, [0.0] * vw)
        sfx = f"v{vw}f32"
        self.fma = intrinsic(module, f"llvm.fma.{sfx}", self.vty, [self.vty] * 3)
        self.mload = intrinsic(module, f"llvm.masked.load.{sfx}.p0", self.vty, [PTR, I32, self.mty, self.vty])
        self.mstore = intrinsic(module, f"llvm.masked.store.{sfx}.p0", VOID, [self.vty, PTR, I32, self.mty])
        self.gather = intrinsic(
            module, f"llvm.masked.gather.{sfx}.v{vw}p0", self.vty, [self.pty, I32, self.mty, self.vty]
        )
        self.reduce = intrinsic(module, f"llvm.vector.reduce.fadd.{sfx}", F32, [F32, self.vty])

    def splat(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        undef = ir.Constant(
            x.type if isinstance(x.type, ir.VectorType) else ir.VectorType(x.type, self.vw), ir.Undefined
        )
        v = b.insert_element(undef, x, ir.Constant(I32, 0))
        return b.shuffle_vector(v, undef, ir.Constant(self.ity, [0] * self.vw))

    def lane_mask(self, b: ir.IRBuilder, valid: ir.Value, offset: int) -> ir.Value:
        """Mask of lanes ``l`` with ``offset + l < valid`` (``valid`` an i64)."""
        n = b.trunc(smin(b, valid, i64(offset + self.vw + 1)), I32)
        iota = ir.Constant(self.ity, [offset + i for i in range(self.vw)])
        return b.icmp_signed("<", iota, self.splat(b, n))

    def load(self, b: ir.IRBuilder, base: ir.Value, idx: ir.Value, mask: ir.Value | None) -> ir.Value:
        ptr = b.gep(base, [idx], source_etype=F32)
        if mask is None:
            return b.load(ptr, typ=self.vty, align=4)
        return b.call(self.mload, [ptr, ir.Constant(I32, 4), mask, self.zero])

    def store(
        self, b: ir.IRBuilder, val: ir.Value, base: ir.Value, idx: ir.Value, mask: ir.Value | None
    ) -> None:
        ptr = b.gep(base, [idx], source_etype=F32)
        if mask is None:
            b.store(val, ptr, align=4)
        else:
            b.call(self.mstore, [val, ptr, ir.Constant(I32, 4), mask])


def _load_f32(b: ir.IRBuilder, base: ir.Value, idx: ir.Value) -> ir.Value:
    return b.load(b.gep(base, [idx], source_etype=F32), typ=F32, align=4)


def _store_f32(b: ir.IRBuilder, val: ir.Value, base: ir.Value, idx: ir.Value) -> None:
    b.store(val, b.gep(base, [idx], source_etype=F32), align=4)


# --------------------------------------------------------------------------------------------
# micro-kernels
# --------------------------------------------------------------------------------------------

_MICRO_ARGS: list[tuple[str, ir.Type]] = [
    ("a", PTR),
    ("a_rs", I64),
    ("a_cs", I64),
    ("b", PTR),
    ("b_ks", I64),
    ("c", PTR),
    ("c_rs", I64),
    ("kc", I64),
    ("mr_eff", I64),
    ("nr_eff", I64),
    ("accumulate", I1),
]


def _micro(vec: _Vec, mr: int, nr: int, b_padded: bool = False, full: bool = False) -> ir.Function:
    """``C[0:mr_eff, 0:nr_eff] (+)= A[0:mr_eff, 0:kc] @ B[0:kc, 0:nr_eff]``, tile in registers.

    A element (r, k) at ``a[r*a_rs + k*a_cs]``; B element (k, j) at ``b[k*b_ks + j]``.  Rows
    past ``mr_eff`` (1 <= mr_eff <= mr) re-read row ``mr_eff-1`` (always in bounds) and are not
    stored; columns past ``nr_eff`` are masked off in every B load and C load/store.  Masked
    AVX-512 loads cost the same as plain ones (measured: no difference on 512^3), so there is a
    single variant per height -- half the code, half the compile time.  ``b_padded`` (packed B
    panels, zero-padded to NR columns) loads B unmasked: on AVX2 the two masks would otherwise
    take registers the 6x16 tile needs (a spill per k).  ``full`` (the caller guarantees
    ``nr_eff == nr`` and ``mr_eff == mr``) drops every mask, in the B loads and the C stores
    alike, and the clamping of row offsets: A's rows are then ``r * a_rs``, which x86 addressing
    forms from one stride register instead of six offsets held across the k loop.
    """
    module = vec.module
    name = f"asyncjit.matmul.micro{mr}x{nr}{'p' if b_padded else ''}{'f' if full else ''}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(module, name, _MICRO_ARGS, noalias=("a", "b", "c"), inline="noinline")
    a, a_rs, a_cs, bp, b_ks, c, c_rs, kc, mr_eff, nr_eff, accumulate = fn.args
    nv = nr // vec.vw
    rows = tile_rows(b, mr, a_rs, mr_eff, full)
    masks: list[ir.Value | None] = [None if full else vec.lane_mask(b, nr_eff, v * vec.vw) for v in range(nv)]
    b_masks = [None if b_padded else m for m in masks]

    def step(k: ir.Value, accs: list[list[ir.Value]]) -> list[list[ir.Value]]:
        kb = b.mul(k, b_ks)
        ka = b.mul(k, a_cs)
        bv = [vec.load(b, bp, b.add(kb, i64(v * vec.vw)), b_masks[v]) for v in range(nv)]
        out = [list(row) for row in accs]
        for r in range(mr):
            av = vec.splat(b, _load_f32(b, a, b.add(rows[r], ka)))
            for v in range(nv):
                out[r][v] = b.call(vec.fma, [av, bv[v], accs[r][v]])
        return out

    accs = tile_loop(vec, b, mr, nv, kc, step, "k")
    store_tile(vec, b, accs, c, c_rs, accumulate, mr_eff, masks, full)
    return fn


def tile_rows(b: ir.IRBuilder, mr: int, a_rs: ir.Value, mr_eff: ir.Value, full: bool) -> list[ir.Value]:
    """Offsets of a tile's ``mr`` rows of A; not ``full``: rows past ``mr_eff`` re-read row
    ``mr_eff - 1`` (always in bounds; their results are not stored)."""
    rows = []
    for r in range(mr):
        rr = smin(b, i64(r), b.sub(mr_eff, i64(1))) if r > 0 and not full else i64(r)
        rows.append(b.mul(rr, a_rs))
    return rows


def tile_loop(
    vec: _Vec,
    b: ir.IRBuilder,
    mr: int,
    nv: int,
    count: ir.Value,
    step: Callable[[ir.Value, list[list[ir.Value]]], list[list[ir.Value]]],
    name: str,
) -> list[list[ir.Value]]:
    """``for i < count: accs = step(i, accs)`` over an ``mr x nv`` tile of vector accumulators
    (from zero) kept in registers; returns them after the loop, the builder placed there."""
    entry = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(i64(0), entry)
    accs = [[b.phi(vec.vty, name=f"acc{r}_{v}") for v in range(nv)] for r in range(mr)]
    for row in accs:
        for acc in row:
            acc.add_incoming(vec.zero, entry)
    b.cbranch(b.icmp_signed("<", i, count), body, done)
    b.position_at_end(body)
    new = step(i, accs)
    for r in range(mr):
        for v in range(nv):
            accs[r][v].add_incoming(new[r][v], b.block)
    i.add_incoming(b.add(i, i64(1)), b.block)
    b.branch(head)
    b.position_at_end(done)
    return accs


def store_tile(
    vec: _Vec,
    b: ir.IRBuilder,
    accs: list[list[ir.Value]],
    c: ir.Value,
    c_rs: ir.Value,
    accumulate: ir.Value,
    mr_eff: ir.Value,
    masks: list[ir.Value | None],
    full: bool,
) -> None:
    """``C (+)= tile`` (added to C when ``accumulate``), rows past ``mr_eff`` not stored unless
    ``full``, lanes by ``masks``; then returns from the function."""
    add_bb = b.append_basic_block("store.acc")
    set_bb = b.append_basic_block("store.set")
    exit_bb = b.append_basic_block("exit")
    b.cbranch(accumulate, add_bb, set_bb)
    for bb, add in ((add_bb, True), (set_bb, False)):
        b.position_at_end(bb)
        for r in range(len(accs)):
            if r > 0 and not full:
                store_bb = b.append_basic_block(f"row{r}.{'acc' if add else 'set'}")
                b.cbranch(b.icmp_signed("<", i64(r), mr_eff), store_bb, exit_bb)
                b.position_at_end(store_bb)
            base = b.mul(i64(r), c_rs)
            for v in range(len(accs[r])):
                idx = b.add(base, i64(v * vec.vw))
                val = accs[r][v]
                if add:
                    val = b.fadd(val, vec.load(b, c, idx, masks[v]))
                vec.store(b, val, c, idx, masks[v])
        b.branch(exit_bb)
    b.position_at_end(exit_bb)
    b.ret_void()


def _row_sizes(mr: int) -> list[int]:
    """Sub-tile heights for row remainders: powers of two below ``mr`` (largest first)."""
    sizes = []
    s = 1
    while s < mr:
        sizes.append(s)
        s *= 2
    return sizes[::-1]


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------

_DRIVER_ARGS: list[tuple[str, ir.Type]] = [
    ("A", PTR),
    ("B", PTR),
    ("C", PTR),
    ("scratch", PTR),
    ("M", I64),
    ("N", I64),
    ("K", I64),
    ("a_rs", I64),
    ("a_cs", I64),
    ("b_rs", I64),
    ("b_cs", I64),
    ("c_rs", I64),
]


def _direct(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """No packing (requires ``b_cs == 1``): MR-row blocks, then 4/2/1-row blocks for the rest,
    over K in KC blocks (C accumulates after the first; at K = 1152 and M = 16 that was 1.8x
    faster than streaming the whole K x NR strip of B from L2 per tile).

    2-row blocks use tiles twice as wide (NR*2), 1-row blocks four times (NR*4): with only
    NR/VW accumulators per row the FMA latency chain, not throughput, would bound a GEMV (2x
    wide measured 1.7x faster than 1x; 4x wide 1.33x faster again on 1x512x256, AVX2).  Whole
    tiles run a mask-free micro-kernel: on AVX2 two mask registers beside the 6x16 tile spill an
    accumulator per k (1.15-1.36x on the Silero VAD step's shapes without them).
    """
    name = f"asyncjit.matmul.direct{t.mr}x{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C"), inline="noinline")
    a, bp, c, _scratch, m, n_all, k, a_rs, a_cs, b_rs, _b_cs, c_rs = fn.args

    # K in blocks of KC and columns in blocks of NB: a block's KC x NB slice of B stays in L2,
    # and one panel's KC x NR strip of it in L1 while every row tile of an MC-row block reads it
    # (panels outer, row tiles inner). NB is a whole number of the widest tiles.
    wide = 4 * t.nr
    # A few rows over a B far larger than L2 (a batch-1 fully connected layer on a [K, N]
    # weight): K blocks of GEMV_KC rows, so that a block spans every column and B streams a few
    # rows at a time; in KC x NB blocks each tile read KC short runs a row apart, which the
    # prefetchers follow badly (1 x 4096 @ 4096 x 4096: 3.9 -> 2.75 ms = 24 GB/s, as fast as the
    # dot driver on the transposed weight; 2 rows 7.0 -> 3.0 ms; GEMV_KC 2, 4, 16 were slower).
    gemv = b.and_(
        b.icmp_signed("<=", m, i64(GEMV_M_MAX)),
        b.icmp_signed(">=", b.mul(k, n_all), i64(GEMV_MIN_B)),
    )
    kc_max = smin(b, k, i64(t.kc))
    nb_blocks = b.mul(
        smax(b, b.sdiv(b.sdiv(i64(t.direct_b_max), smax(b, kc_max, i64(1))), i64(wide)), i64(1)), i64(wide)
    )
    at: dict[str, ir.Value] = {}

    def block(mr: int, nr: int, row0: ir.Value, row_end: ir.Value) -> None:
        jc, pc, kc, accumulate = at["jc"], at["pc"], at["kc"], at["acc"]
        bq = b.gep(bp, [b.add(b.mul(pc, b_rs), jc)], source_etype=F32)
        n = smin(b, at["nb"], b.sub(n_all, jc))

        def tile(r: ir.Value, jr: ir.Value, nr_eff: ir.Value, full: bool) -> None:
            b.call(
                _micro(vec, mr, nr, full=full),
                [
                    b.gep(a, [b.add(b.mul(r, a_rs), b.mul(pc, a_cs))], source_etype=F32),
                    a_rs,
                    a_cs,
                    b.gep(bq, [jr], source_etype=F32),
                    b_rs,
                    b.gep(c, [b.add(b.mul(r, c_rs), b.add(jc, jr))], source_etype=F32),
                    c_rs,
                    kc,
                    i64(mr),
                    nr_eff,
                    accumulate,
                ],
            )

        def panels(each: Callable[[ir.Value, ir.Value, bool], None]) -> None:
            """Whole tiles without masks, then the masked remainder."""
            n_full = b.mul(b.sdiv(n, i64(nr)), i64(nr))
            with for_range(b, i64(0), n_full, nr, name=f"jr{mr}") as jr:
                each(jr, i64(nr), True)
            with b.if_then(b.icmp_signed("<", n_full, n)):
                each(n_full, b.sub(n, n_full), False)

        def rows(each: Callable[[ir.Value], None]) -> None:
            with for_range(b, row0, row_end, mr, name=f"ir{mr}") as r:
                each(r)

        # Panels outer: a panel's strip of B is reused from L1 by every row tile. Below
        # ``direct_rows_first_k`` the C stores outweigh the B reads: rows outer, so each tile
        # writes its rows of C in sequence (48x3136x24: 74 vs 58 GFLOP/s panels outer).
        with b.if_else(b.icmp_signed("<=", kc, i64(t.direct_rows_first_k))) as (rows_first, panels_first):
            with rows_first:
                rows(lambda r: panels(lambda jr, w, full: tile(r, jr, w, full)))
            with panels_first:
                panels(lambda jr, w, full: rows(lambda r: tile(r, jr, w, full)))

    m_full = b.mul(b.sdiv(m, i64(t.mr)), i64(t.mr))

    def nest(kstep: int, nb: ir.Value, whole_tiles: bool) -> None:
        """Column blocks of ``nb``, K blocks of ``kstep`` (a constant: the k loops fold it);
        MR-row tiles only where M may exceed GEMV_M_MAX."""
        with (
            for_range(b, i64(0), n_all, nb, name="jc") as jc,
            for_range(b, i64(0), k, kstep, name="pc") as pc,
        ):
            acc = b.icmp_signed(">", pc, i64(0))
            at.update(jc=jc, pc=pc, nb=nb, kc=smin(b, i64(kstep), b.sub(k, pc)), acc=acc)
            if whole_tiles:
                with for_range(b, i64(0), m_full, t.mc, name="ic") as ic:
                    block(t.mr, t.nr, ic, smin(b, b.add(ic, i64(t.mc)), m_full))
            row = m_full if whole_tiles else i64(0)
            for size in _row_sizes(t.mr):
                take = b.icmp_signed(">=", b.sub(m, row), i64(size))
                with b.if_then(take):
                    width = t.nr if size > 2 else (2 * t.nr if size == 2 else 4 * t.nr)
                    block(size, width, row, b.add(row, i64(size)))
                row = b.select(take, b.add(row, i64(size)), row)

    with b.if_else(gemv) as (few_rows, other):
        with few_rows:
            nest(GEMV_KC, smax(b, n_all, i64(1)), whole_tiles=False)
        with other:
            nest(t.kc, nb_blocks, whole_tiles=True)
    b.ret_void()
    return fn


def _tree_sums(b: ir.IRBuilder, vecs: list[ir.Value], vw: int) -> list[ir.Value]:
    """The lane sums of ``vecs`` (a power-of-two count of ``vw``-lane vectors), in order.

    Reduces them together, transposing as it adds: each level adds the first and second halves
    of every lane segment of two vectors into one, so n vectors take about n shuffles + adds per
    level instead of n separate log2(vw)-step horizontal reductions (which dominated short dot
    products: Silero VAD convs at batch 1, GEMV rows of 256).
    """
    cur = list(vecs)
    width, seg = vw, vw
    assert len(cur) & (len(cur) - 1) == 0 and vw & (vw - 1) == 0

    def mask(lanes: list[int]) -> ir.Constant:
        return ir.Constant(ir.VectorType(I32, len(lanes)), lanes)

    def halves(n_seg: int, offset: int) -> tuple[list[int], list[int]]:
        lo = [offset + s * seg + t for s in range(n_seg) for t in range(seg // 2)]
        hi = [offset + s * seg + t for s in range(n_seg) for t in range(seg // 2, seg)]
        return lo, hi

    while len(cur) > 1 and seg > 1:
        lo_a, hi_a = halves(width // seg, 0)
        lo_b, hi_b = halves(width // seg, width)
        lo, hi = mask(lo_a + lo_b), mask(hi_a + hi_b)
        cur = [
            b.fadd(b.shuffle_vector(cur[i], cur[i + 1], lo), b.shuffle_vector(cur[i], cur[i + 1], hi))
            for i in range(0, len(cur), 2)
        ]
        seg //= 2
    while seg > 1:  # one vector left: fold its segments in place (the width halves)
        lo_l, hi_l = halves(width // seg, 0)
        v = cur[0]
        cur = [b.fadd(b.shuffle_vector(v, v, mask(lo_l)), b.shuffle_vector(v, v, mask(hi_l)))]
        width //= 2
        seg //= 2
    return [b.extract_element(v, ir.Constant(I32, lane)) for v in cur for lane in range(width)]


def _dot_tile(
    b: ir.IRBuilder,
    vec: _Vec,
    tm: int,
    tn: int,
    *,
    a: ir.Value,
    bp: ir.Value,
    c: ir.Value,
    i0: ir.Value,
    j0: ir.Value,
    m: ir.Value,
    n: ir.Value,
    k: ir.Value,
    k_full: ir.Value,
    tail_mask: ir.Value,
    a_rs: ir.Value,
    b_cs: ir.Value,
    c_rs: ir.Value,
) -> None:
    """``tm x tn`` dot products starting at (i0, j0); out-of-range rows/columns are clamped
    to the last valid one when read and skipped when stored."""
    vw = vec.vw
    last_i = b.sub(m, i64(1))
    last_j = b.sub(n, i64(1))
    arow = [b.mul(smin(b, b.add(i0, i64(r)), last_i), a_rs) for r in range(tm)]
    bcol = [b.mul(smin(b, b.add(j0, i64(q)), last_j), b_cs) for q in range(tn)]
    pre = b.block
    head = b.append_basic_block("kk.head")
    body = b.append_basic_block("kk.body")
    done = b.append_basic_block("kk.done")
    b.branch(head)
    b.position_at_end(head)
    kk = b.phi(I64, name="kk")
    kk.add_incoming(i64(0), pre)
    accs = [[b.phi(vec.vty, name=f"d{r}_{q}") for q in range(tn)] for r in range(tm)]
    for row in accs:
        for acc in row:
            acc.add_incoming(vec.zero, pre)
    b.cbranch(b.icmp_signed("<", kk, k_full), body, done)
    b.position_at_end(body)
    av = [vec.load(b, a, b.add(arow[r], kk), None) for r in range(tm)]
    bv = [vec.load(b, bp, b.add(bcol[q], kk), None) for q in range(tn)]
    for r in range(tm):
        for q in range(tn):
            accs[r][q].add_incoming(b.call(vec.fma, [av[r], bv[q], accs[r][q]]), body)
    kk.add_incoming(b.add(kk, i64(vw)), body)
    b.branch(head)

    b.position_at_end(done)
    av = [vec.load(b, a, b.add(arow[r], k_full), tail_mask) for r in range(tm)]
    bv = [vec.load(b, bp, b.add(bcol[q], k_full), tail_mask) for q in range(tn)]
    finals = [b.call(vec.fma, [av[r], bv[q], accs[r][q]]) for r in range(tm) for q in range(tn)]
    flat = _tree_sums(b, finals, vw)
    sums = [flat[r * tn : (r + 1) * tn] for r in range(tm)]
    exit_bb = b.append_basic_block("tile.exit")
    for r in range(tm):
        if r > 0:
            row_bb = b.append_basic_block(f"tile.row{r}")
            b.cbranch(b.icmp_signed("<", b.add(i0, i64(r)), m), row_bb, exit_bb)
            b.position_at_end(row_bb)
        base = b.add(b.mul(b.add(i0, i64(r)), c_rs), j0)
        for q in range(tn):
            if q > 0:
                col_bb = b.append_basic_block(f"tile.r{r}c{q}")
                nxt_bb = b.append_basic_block(f"tile.r{r}c{q}.skip")
                b.cbranch(b.icmp_signed("<", b.add(j0, i64(q)), n), col_bb, nxt_bb)
                b.position_at_end(col_bb)
                _store_f32(b, sums[r][q], c, b.add(base, i64(q)))
                b.branch(nxt_bb)
                b.position_at_end(nxt_bb)
            else:
                _store_f32(b, sums[r][q], c, base)
    b.branch(exit_bb)
    b.position_at_end(exit_bb)


def _dot(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """``a_cs == 1 and b_rs == 1``: C[i, j] = dot(A row i, B column j), vectorised along k.

    Used for small M with B transposed (``x @ W.T``): packing W would cost as much as the
    product.  Tiles of 4x4 dots (8 loads per 16 FMAs) for groups of four rows and for three
    rows left, 2x4 for two, 1x8 for one; each dot is reduced horizontally once at the end
    (masked k tail).
    """
    name = f"asyncjit.matmul.dot{vec.vw}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C"), inline="noinline")
    a, bp, c, _scratch, m, n, k, a_rs, _a_cs, _b_rs, b_cs, c_rs = fn.args
    k_full = b.mul(b.sdiv(k, i64(vec.vw)), i64(vec.vw))
    tail_mask = vec.lane_mask(b, b.sub(k, k_full), 0)
    common = dict(
        a=a, bp=bp, c=c, m=m, n=n, k=k, k_full=k_full, tail_mask=tail_mask, a_rs=a_rs, b_cs=b_cs, c_rs=c_rs
    )
    m4 = b.mul(b.sdiv(m, i64(4)), i64(4))
    rest = b.sub(m, m4)
    with for_range(b, i64(0), m4, 4, name="i4") as i0, for_range(b, i64(0), n, 4, name="j4") as j0:
        _dot_tile(b, vec, 4, 4, i0=i0, j0=j0, **common)
    # two or three rows left: one pass over B for them all (as 1x8 passes, a row each, 2 x 4096
    # @ W.T of 4096 x 4096 read W twice: 5.7 ms against 3.0), three in 4x4 tiles whose fourth
    # row re-reads the third and is not stored (6.2 -> 3.6 ms)
    with b.if_then(b.icmp_signed("==", rest, i64(3))), for_range(b, i64(0), n, 4, name="j3") as j0:
        _dot_tile(b, vec, 4, 4, i0=m4, j0=j0, **common)
    with b.if_then(b.icmp_signed("==", rest, i64(2))), for_range(b, i64(0), n, 4, name="j2") as j0:
        _dot_tile(b, vec, 2, 4, i0=m4, j0=j0, **common)
    with b.if_then(b.icmp_signed("==", rest, i64(1))), for_range(b, i64(0), n, 8, name="j8") as j0:
        _dot_tile(b, vec, 1, 8, i0=m4, j0=j0, **common)
    b.ret_void()
    return fn


def _pack_a(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """Copy ``A[0:mc, 0:kc]`` into MR-row panels ``dst[(i//MR)*MR*kc + kk*MR + i%MR]``, zero-padded."""
    args: list[tuple[str, ir.Type]] = [
        ("a", PTR),
        ("a_rs", I64),
        ("a_cs", I64),
        ("mc", I64),
        ("kc", I64),
        ("dst", PTR),
    ]
    name = f"asyncjit.matmul.pack_a{t.mr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, args, noalias=("a", "dst"), inline="noinline")
    a, a_rs, a_cs, mc, kc, dst = fn.args
    mr = t.mr
    rows_padded = b.mul(b.sdiv(b.add(mc, i64(mr - 1)), i64(mr)), i64(mr))
    zero = ir.Constant(F32, 0.0)
    with b.if_else(b.icmp_signed("==", a_cs, i64(1))) as (rowwise, generic):
        with rowwise, for_range(b, i64(0), rows_padded, name="i") as i:
            # A rows are contiguous in k: stream each row, write with stride MR.
            panel = b.sdiv(i, i64(mr))
            base = b.add(b.mul(panel, b.mul(kc, i64(mr))), b.srem(i, i64(mr)))
            valid = b.icmp_signed("<", i, mc)
            src = b.mul(b.select(valid, i, i64(0)), a_rs)
            with b.if_else(valid) as (copy, pad):
                with copy, for_range(b, i64(0), kc, name="kk") as kk:
                    _store_f32(b, _load_f32(b, a, b.add(src, kk)), dst, b.add(base, b.mul(kk, i64(mr))))
                with pad, for_range(b, i64(0), kc, name="kz") as kk:
                    _store_f32(b, zero, dst, b.add(base, b.mul(kk, i64(mr))))
        with generic, for_range(b, i64(0), rows_padded, mr, name="ip") as i0:
            base = b.mul(i0, kc)
            with for_range(b, i64(0), kc, name="kk") as kk:
                koff = b.mul(kk, a_cs)
                for r in range(mr):
                    i = b.add(i0, i64(r))
                    valid = b.icmp_signed("<", i, mc)
                    v = _load_f32(b, a, b.add(b.mul(b.select(valid, i, i64(0)), a_rs), koff))
                    _store_f32(
                        b, b.select(valid, v, zero), dst, b.add(base, b.add(b.mul(kk, i64(mr)), i64(r)))
                    )
    b.ret_void()
    return fn


def _pack_b(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """Copy ``B[0:kc, 0:nc]`` into NR-column panels ``dst[(j//NR)*NR*kc + kk*NR + j%NR]``, zero-padded."""
    args: list[tuple[str, ir.Type]] = [
        ("b", PTR),
        ("b_rs", I64),
        ("b_cs", I64),
        ("kc", I64),
        ("nc", I64),
        ("dst", PTR),
    ]
    name = f"asyncjit.matmul.pack_b{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, args, noalias=("b", "dst"), inline="noinline")
    bp, b_rs, b_cs, kc, nc, dst = fn.args
    nr, vw = t.nr, vec.vw
    with b.if_else(b.icmp_signed("==", b_cs, i64(1))) as (rows, generic):
        with rows, for_range(b, i64(0), nc, nr, name="jp") as j0:
            width = b.sub(nc, j0)
            masks = [vec.lane_mask(b, width, v * vw) for v in range(nr // vw)]
            base = b.mul(j0, kc)
            with for_range(b, i64(0), kc, name="kk") as kk:
                src = b.add(b.mul(kk, b_rs), j0)
                out = b.add(base, b.mul(kk, i64(nr)))
                for v in range(nr // vw):
                    val = vec.load(b, bp, b.add(src, i64(v * vw)), masks[v])
                    vec.store(b, val, dst, b.add(out, i64(v * vw)), None)
        with generic, for_range(b, i64(0), nc, nr, name="jp") as j0:
            # Transposed or strided B: masked gathers, one vector of columns per k (masked-off
            # lanes are not accessed and read as the zero padding).
            base = b.mul(j0, kc)
            width = b.sub(nc, j0)
            masks = [vec.lane_mask(b, width, v * vw) for v in range(nr // vw)]
            bp_int = vec.splat(b, b.ptrtoint(bp, I64))
            col_offsets = []
            for v in range(nr // vw):
                cols = b.add(
                    vec.splat(b, b.trunc(j0, I32)), ir.Constant(vec.ity, [v * vw + i for i in range(vw)])
                )
                cols = b.select(masks[v], cols, vec.splat(b, b.trunc(j0, I32)))
                col_offsets.append(b.mul(b.sext(cols, vec.i64ty), vec.splat(b, b_cs)))
            with for_range(b, i64(0), kc, name="kk") as kk:
                koff = vec.splat(b, b.mul(kk, b_rs))
                out = b.add(base, b.mul(kk, i64(nr)))
                for v in range(nr // vw):
                    # (llvmlite types a vector-index GEP as a scalar ptr; go through integers)
                    addr = b.add(bp_int, b.shl(b.add(col_offsets[v], koff), vec.splat(b, i64(2))))
                    ptrs = b.inttoptr(addr, vec.pty)
                    val = b.call(vec.gather, [ptrs, ir.Constant(I32, 4), masks[v], vec.zero])
                    vec.store(b, val, dst, b.add(out, i64(v * vw)), None)
    b.ret_void()
    return fn


def _packed(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """BLIS loop nest: NC columns x KC depth of B packed, MC rows of A packed, then micro-tiles."""
    name = f"asyncjit.matmul.packed{t.mr}x{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(
        vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C", "scratch"), inline="noinline"
    )
    a, bp, c, scratch, m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs = fn.args
    pack_a = _pack_a(vec, t)
    pack_b = _pack_b(vec, t)
    micro_half = _micro(vec, t.mr, t.nr // 2, b_padded=True)
    # 64-byte align the scratch; the A block (sized from the runtime M, K) comes first.
    base = b.ptrtoint(scratch, I64)
    aligned = b.and_(b.add(base, i64(63)), i64(-64))
    a_pack = b.inttoptr(aligned, PTR)
    kc_max = smin(b, k, i64(t.kc))
    mc_max = smin(b, m, i64(t.mc))
    a_elems = b.mul(b.mul(b.sdiv(b.add(mc_max, i64(t.mr - 1)), i64(t.mr)), i64(t.mr)), kc_max)
    a_elems = b.and_(b.add(a_elems, i64(15)), i64(-16))
    b_pack = b.gep(a_pack, [a_elems], source_etype=F32)
    # A rows contiguous in k: the micro-kernel reads them in place (an MR x KC tile's rows are
    # MR sequential streams); packing them cost a copy of A per call.
    a_rows = b.icmp_signed("==", a_cs, i64(1))
    with for_range(b, i64(0), n, t.nc, name="jc") as jc:
        nc = smin(b, i64(t.nc), b.sub(n, jc))
        with for_range(b, i64(0), k, t.kc, name="pc") as pc:
            kc = smin(b, i64(t.kc), b.sub(k, pc))
            b_src = b.gep(bp, [b.add(b.mul(pc, b_rs), b.mul(jc, b_cs))], source_etype=F32)
            b.call(pack_b, [b_src, b_rs, b_cs, kc, nc, b_pack])
            accumulate = b.icmp_signed(">", pc, i64(0))
            with for_range(b, i64(0), m, t.mc, name="ic") as ic:
                mc = smin(b, i64(t.mc), b.sub(m, ic))
                a_src = b.gep(a, [b.add(b.mul(ic, a_rs), b.mul(pc, a_cs))], source_etype=F32)
                with b.if_then(b.not_(a_rows)):
                    b.call(pack_a, [a_src, a_rs, a_cs, mc, kc, a_pack])
                with for_range(b, i64(0), nc, t.nr, name="jr") as jr:
                    nr_eff = smin(b, i64(t.nr), b.sub(nc, jr))
                    b_panel = b.gep(b_pack, [b.mul(jr, kc)], source_etype=F32)
                    c_blk = b.gep(c, [b.add(b.mul(ic, c_rs), b.add(jc, jr))], source_etype=F32)
                    with for_range(b, i64(0), mc, t.mr, name="ir") as ir_:
                        mr_eff = smin(b, i64(t.mr), b.sub(mc, ir_))
                        a_tile = b.select(
                            a_rows,
                            b.gep(a_src, [b.mul(ir_, a_rs)], source_etype=F32),
                            b.gep(a_pack, [b.mul(ir_, kc)], source_etype=F32),
                        )
                        args = [
                            a_tile,
                            b.select(a_rows, a_rs, i64(1)),
                            b.select(a_rows, i64(1), i64(t.mr)),
                            b_panel,
                            i64(t.nr),
                            b.gep(c_blk, [b.mul(ir_, c_rs)], source_etype=F32),
                            c_rs,
                            kc,
                            mr_eff,
                            nr_eff,
                            accumulate,
                        ]
                        whole = b.and_(
                            b.icmp_signed("==", mr_eff, i64(t.mr)), b.icmp_signed("==", nr_eff, i64(t.nr))
                        )
                        with b.if_else(whole) as (full_tile, edge_tile):
                            with full_tile:
                                b.call(_micro(vec, t.mr, t.nr, b_padded=True, full=True), args)
                            # a last panel of at most NR/2 columns: half-width tiles (half the
                            # FMAs; with the rule above, 2048x49x512 went 50-56 -> 69-72 GFLOP/s, AVX2)
                            with edge_tile:
                                half = b.icmp_signed("<=", nr_eff, i64(t.nr // 2))
                                with b.if_else(half) as (narrow, wide):
                                    with narrow:
                                        b.call(micro_half, args)
                                    with wide:
                                        b.call(_micro(vec, t.mr, t.nr, b_padded=True), args)
    b.ret_void()
    return fn


def emit_matmul(
    module: ir.Module, name: str, *, m: int | None = None, n: int | None = None, k: int | None = None
) -> ir.Function:
    """Add the batched strided matmul kernel ``name`` (see the module docstring) to ``module``.

    Args:
        module: the module to add the kernel and its helpers (``name.*``) to.
        name: symbol of the kernel; internal linkage, so the caller's entry point calls it.
        m, n, k: static sizes; the runtime arguments must equal them when given.

    Returns:
        The kernel.  It reads only ``A``/``B`` elements inside the extents, writes only ``C``
        elements inside them, and uses at most :func:`matmul_scratch_bytes` of ``scratch``.
    """
    for label, value in (("m", m), ("n", n), ("k", k)):
        if value is not None and value < 0:
            raise ValueError(f"emit_matmul: static {label} must be >= 0, got {value}")
    t = matmul_tiling()
    vec = _Vec(module, t.vw)
    args: list[tuple[str, ir.Type]] = [
        ("A", PTR),
        ("B", PTR),
        ("C", PTR),
        ("scratch", PTR),
        ("batch", I64),
        ("M", I64),
        ("N", I64),
        ("K", I64),
        ("a_bs", I64),
        ("a_rs", I64),
        ("a_cs", I64),
        ("b_bs", I64),
        ("b_rs", I64),
        ("b_cs", I64),
        ("c_bs", I64),
        ("c_rs", I64),
    ]
    fn, b = new_function(module, name, args, noalias=("C", "scratch"))
    a, bp, c, scratch, batch, m_arg, n_arg, k_arg, a_bs, a_rs, a_cs, b_bs, b_rs, b_cs, c_bs, c_rs = fn.args
    mv = i64(m) if m is not None else m_arg
    nv = i64(n) if n is not None else n_arg
    kv = i64(k) if k is not None else k_arg
    direct = _direct(vec, t)
    dot = _dot(vec, t)
    packed = _packed(vec, t)

    empty = b.or_(b.icmp_signed("<=", mv, i64(0)), b.icmp_signed("<=", nv, i64(0)))
    with b.if_then(empty):
        b.ret_void()
    # Direct (no packing) when M is small, or when B is small enough to stay in L2 anyway.
    # ... except when many row tiles would share strips of B whose rows are a power-of-two
    # stride apart (N = 256: each strip maps to a few L1 sets and does not stay there).
    aliased = b.and_(
        b.icmp_signed(">", mv, i64(t.direct_short_k_m_max)),
        b.icmp_signed("==", b.and_(b_rs, i64(127)), i64(0)),
    )
    # ... and except when many row tiles would read B's rows at offsets that are not whole cache
    # lines apart (N = 49: every strip load splits a line; packing B, a 1/M share of the work
    # there, made W[2048,512] @ X[512,49] 1.68 -> 1.41 ms, 33 columns 1.13 -> 1.07, AVX2; see
    # benchmarks/matmul_ab.py).
    misaligned = b.and_(
        b.icmp_signed(">", mv, i64(t.direct_short_k_m_max)),
        b.icmp_signed("!=", b.and_(b_rs, i64(15)), i64(0)),
    )
    small_b = b.and_(
        b.icmp_signed("<=", b.mul(kv, nv), i64(t.direct_b_max)), b.not_(b.or_(aliased, misaligned))
    )
    few_rows_short_k = b.and_(
        b.icmp_signed("<=", mv, i64(t.direct_short_k_m_max)),
        b.icmp_signed("<=", kv, i64(t.direct_short_k_max)),
    )
    use_direct = b.and_(
        b.icmp_signed("==", b_cs, i64(1)),
        b.or_(b.or_(b.icmp_signed("<=", mv, i64(t.direct_m_max)), small_b), few_rows_short_k),
    )
    use_dot = b.and_(
        b.and_(b.icmp_signed("==", a_cs, i64(1)), b.icmp_signed("==", b_rs, i64(1))),
        b.icmp_signed("<=", mv, i64(t.dot_m_max)),
    )
    # Columns split over the intra-op threads for a big product (the driver is chosen once, from
    # the whole product, so every column is computed exactly as on one thread).
    big = b.icmp_signed(">=", b.mul(b.mul(mv, nv), kv), i64(PARALLEL_MIN_MACS))
    col_tiles = b.sdiv(b.add(nv, i64(t.nr - 1)), i64(t.nr))
    parts = smin(b, b.select(big, threads_value(b), i64(1)), col_tiles)
    which = b.select(use_direct, i64(0), b.select(use_dot, i64(1), i64(2)))
    drivers = (direct, dot, packed)
    part = split_part(module, t, drivers)
    job = b.alloca(I64, size=len(PART_FIELDS))
    with for_range(b, i64(0), batch, name="p") as p:
        ap = b.gep(a, [b.mul(p, a_bs)], source_etype=F32)
        bpp = b.gep(bp, [b.mul(p, b_bs)], source_etype=F32)
        cp = b.gep(c, [b.mul(p, c_bs)], source_etype=F32)
        call_args = [ap, bpp, cp, scratch, mv, nv, kv, a_rs, a_cs, b_rs, b_cs, c_rs]
        with b.if_else(b.icmp_signed("<=", kv, i64(0))) as (zero_k, nonzero_k):
            with zero_k, for_range(b, i64(0), mv, name="zi") as i, for_range(b, i64(0), nv, name="zj") as j:
                _store_f32(b, ir.Constant(F32, 0.0), cp, b.add(b.mul(i, c_rs), j))
            with nonzero_k, b.if_else(b.icmp_signed(">", parts, i64(1))) as (par, serial):
                with par:
                    for f, v in enumerate([*call_args, which, i64(0)]):  # next chunk: 0
                        slot = b.gep(job, [i64(f)], source_etype=I64)
                        b.store(b.ptrtoint(v, I64) if v.type == PTR else v, slot)
                    emit_parallel_for(b, part, job, parts)
                with serial:
                    call_driver(b, drivers, use_direct, use_dot, call_args)
    b.ret_void()
    return fn
