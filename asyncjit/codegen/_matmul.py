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
* ``b_panels=True`` (a B laid out in panels once, at compile time: a conv's constant weight,
  see ``_convpanels``) takes a fourth driver, ``prepacked``: the packed nest without packing B.
* Drivers, packers and micro-kernels are shared by every matmul of a module (named
  ``asyncjit.matmul.*``); only the small dispatching kernel is per call site.  The first matmul
  costs ~0.3-0.6 s of LLVM time on this host, later ones a few ms.  ``m``/``n``/``k`` given as
  Python ints become constants, which folds the driver choice; the runtime arguments must then
  equal them.

This module holds the dispatching kernel, the direct driver and the scratch sizing; the tiling,
vector helpers and micro-kernels are in ``_matmul_tile``, the dot and packed drivers in
``_matmul_dot`` and ``_matmul_packed``, and the split over threads in ``_matmul_split``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ._matmul_dot import _dot
from ._matmul_packed import _packed, _prepacked
from ._matmul_split import PART_FIELDS, ROW_SPLIT_RATIO, call_driver, split_part
from ._matmul_tile import (
    _DRIVER_ARGS,
    MatmulTiling,
    _micro,
    _round_up,
    _row_sizes,
    _store_f32,
    _Vec,
    matmul_tiling,
)
from ._parallel import MAX_THREADS, emit_parallel_for, threads_value
from ._target import F32, I64, PTR, for_range, i64, new_function, smax, smin

__all__ = ["PARALLEL_MIN_MACS", "emit_matmul", "matmul_scratch_bytes", "panel_layout"]

GEMV_M_MAX = 4
GEMV_MIN_B = 1 << 20
GEMV_KC = 8
"""The direct driver streams B row after row (K blocks of ``GEMV_KC`` rows spanning every
column) for at most ``GEMV_M_MAX`` rows over a B of at least ``GEMV_MIN_B`` elements (fewer
rows than any MR: that nest has no whole MR-row tiles)."""

PARALLEL_MIN_MACS = 1 << 23
"""Multiply-adds from which one matmul (of a batch) splits its columns over the intra-op threads
(see ``_parallel``): ~0.1-0.2 ms on one core, handed to the pool's helpers, which a plan's
kernels find spinning. From 2^26 with threads created per kernel; at 2^21 a 3-MMAC conv split
ran 0.71x one thread (SqueezeNet, 2 threads). A ``StreamMux`` step runs on one thread
(``_parallel.pin_threads``), whatever its size."""


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


def panel_layout(b: np.ndarray) -> np.ndarray:
    """``b`` (``[K, N]``) laid out as ``emit_matmul(b_panels=True)`` reads it: ``[ceil(N/NR), K,
    NR]``, each panel's columns zero-padded to NR (a reference for tests and the weight fold)."""
    nr = matmul_tiling().nr
    k, n = b.shape
    out = np.zeros((-(-n // nr), k, nr), b.dtype)
    for q in range(out.shape[0]):
        cols = b[:, q * nr : (q + 1) * nr]
        out[q, :, : cols.shape[1]] = cols
    return out


def _region_bytes(t: MatmulTiling, m: int, n: int, k: int) -> int:
    """Scratch of one driver call (mirrored in IR by ``_matmul_split.split_part``)."""
    kc = min(t.kc, max(k, 1))
    a_block = _round_up(_round_up(min(t.mc, max(m, 1)), t.mr) * kc, 16)
    b_block = _round_up(min(t.nc, max(n, 1)), t.nr) * kc
    return 64 + 4 * (a_block + b_block)


# --------------------------------------------------------------------------------------------
# the direct driver
# --------------------------------------------------------------------------------------------


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

        def tile(r: ir.Value, jr: ir.Value, nr_eff: ir.Value, full: bool, prefetch: bool = False) -> None:
            args = [
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
            ]
            if prefetch and full:
                args.append(b.gep(bq, [b.add(jr, i64(nr))], source_etype=F32))
            b.call(_micro(vec, mr, nr, full=full, prefetch=prefetch and full), args)

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
                if mr == t.mr:
                    # the first row tile of a whole panel asks for the next one: B is read in
                    # place (a 1x1 conv's activation, beyond L2 at 56x56), a panel a short run
                    # in each of KC rows far apart, which the hardware prefetchers follow badly
                    # (ResNet-50's 256->64 convs at 56x56 1.05-1.4x faster in the model)
                    def first_rest(jr: ir.Value, w: ir.Value, full: bool) -> None:
                        with b.if_then(b.icmp_signed("<", row0, row_end)):
                            tile(row0, jr, w, full, prefetch=True)
                        with for_range(b, b.add(row0, i64(mr)), row_end, mr, name=f"iq{mr}") as r:
                            tile(r, jr, w, full)

                    panels(first_rest)
                else:
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


def emit_matmul(
    module: ir.Module,
    name: str,
    *,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    b_panels: bool = False,
    split: bool = True,
) -> ir.Function:
    """Add the batched strided matmul kernel ``name`` (see the module docstring) to ``module``.

    Args:
        module: the module to add the kernel and its helpers (``name.*``) to.
        name: symbol of the kernel; internal linkage, so the caller's entry point calls it.
        m, n, k: static sizes; the runtime arguments must equal them when given.
        b_panels: B is laid out in panels of ``matmul_tiling().nr`` columns over all of K
            (``panel_layout``), passed with ``b_rs = NR`` and ``b_cs = K``; the prepacked
            driver reads it without copying and uses no scratch.
        split: a big product may split its columns over the intra-op threads; False for a
            caller that runs on those threads itself (one part of a split of its own).

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
    drivers: tuple[ir.Function, ...] = (
        (_prepacked(vec, t),) if b_panels else (_direct(vec, t), _dot(vec, t), _packed(vec, t))
    )

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
    parts = smin(b, b.select(big, threads_value(b), i64(1)), col_tiles) if split else i64(1)
    which = b.select(use_direct, i64(0), b.select(use_dot, i64(1), i64(2)))
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
                    call_driver(b, drivers, which, call_args)
    b.ret_void()
    return fn
