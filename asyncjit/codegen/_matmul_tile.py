"""The pieces every float32 matmul driver of ``_matmul`` builds on (and ``_convtaps`` reuses).

``MatmulTiling`` holds the tile and cache-block sizes for the host's vector width; ``_Vec`` binds
the vector types and intrinsics (FMA, masked load/store, gather) to one module; the micro-kernel
keeps an ``MR x NR`` tile of C in registers over a k loop, built from ``tile_rows``,
``tile_loop`` and ``store_tile``; ``_DRIVER_ARGS`` is the signature the direct, dot and packed
drivers share. Why the tile has the shape it has is in ``_matmul``'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ._target import (
    F32,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    i64,
    intrinsic,
    new_function,
    prefetch_line,
    smin,
    vector_width,
)

__all__ = ["MatmulTiling", "matmul_tiling", "store_tile", "tile_loop", "tile_rows"]


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


def _micro(
    vec: _Vec, mr: int, nr: int, b_padded: bool = False, full: bool = False, prefetch: bool = False
) -> ir.Function:
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
    ``prefetch`` (with ``full``) takes one more argument, ``pf``: the next B panel (laid out as
    this one, rows ``b_ks`` apart), whose row k is asked into L2 beside row k of this one: the
    drivers pass it to the first row tile of each panel (``_prepacked``, ``_matmul._direct``).
    """
    module = vec.module
    suffix = f"{'p' if b_padded else ''}{'f' if full else ''}{'q' if prefetch else ''}"
    name = f"asyncjit.matmul.micro{mr}x{nr}{suffix}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    args = [*_MICRO_ARGS, ("pf", PTR)] if prefetch else _MICRO_ARGS
    fn, b = new_function(module, name, args, noalias=("a", "b", "c"), inline="noinline")
    a, a_rs, a_cs, bp, b_ks, c, c_rs, kc, mr_eff, nr_eff, accumulate = fn.args[:11]
    nv = nr // vec.vw
    rows = tile_rows(b, mr, a_rs, mr_eff, full)
    masks: list[ir.Value | None] = [None if full else vec.lane_mask(b, nr_eff, v * vec.vw) for v in range(nv)]
    b_masks = [None if b_padded else m for m in masks]

    def step(k: ir.Value, accs: list[list[ir.Value]]) -> list[list[ir.Value]]:
        kb = b.mul(k, b_ks)
        ka = b.mul(k, a_cs)
        if prefetch:  # the next panel's row k, into L2
            for line in range(0, nr, 16):
                pf = b.gep(fn.args[11], [b.add(kb, i64(line))], source_etype=F32)
                prefetch_line(b, pf, write=False, locality=2)
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


# the arguments of every driver (direct, dot, packed)
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
