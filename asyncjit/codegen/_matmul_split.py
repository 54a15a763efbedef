"""A matmul split over the intra-op threads (``_parallel``): the part function.

The columns (or, for the packed driver on a tall product, ``M >= ROW_SPLIT_RATIO * N``, the
rows) are cut into ``CHUNKS_PER_PART * parts`` chunks rounded up to the micro-tile width NR (or
height MR). Each part claims chunks from a shared counter (an atomic add) until none is left, so
a part whose thread the OS has not scheduled yet (another job on the core) leaves its chunks to
the parts that run instead of making them wait at the join (with a static half each, a 512^3
product on 2 threads measured 0.75x of one thread on a loaded machine: the caller finished its
half, then waited for a helper that had no core). The driver is chosen once for the whole
product, so each element is computed exactly as on one thread: the same products summed in the
same order (results do not depend on the thread count or on which part took a chunk; rows are
split only for the packed drivers, whose arithmetic per element does not depend on which rows
share a tile). A part uses its own slice of scratch, sized as ``_matmul._region_bytes(M,
ceil(N / parts) rounded to NR, K)`` for a column split and ``_region_bytes(M, N, K)`` for a row
split, which covers a chunk.
"""

from __future__ import annotations

from typing import Protocol

from llvmlite import ir

from ._parallel import new_part_function
from ._target import F32, I64, PTR, i64, smin

__all__ = ["PART_FIELDS", "ROW_SPLIT_RATIO", "call_driver", "split_part"]

PART_FIELDS = (
    "A", "B", "C", "scratch", "M", "N", "K", "a_rs", "a_cs", "b_rs", "b_cs", "c_rs", "which", "next"
)  # fmt: skip
"""The i64 job block a part reads (pointers as integers; ``which``: 0 direct, 1 dot, 2 packed
(ignored by the prepacked driver's part);
``next``: the next unclaimed chunk, 0 before the parts start)."""

CHUNKS_PER_PART = 8
"""Chunks per part. Finer chunks let the caller take over the columns of a helper that starts
late (a helper thread starts 0.1-0.5 ms after it is created here, on another virtual CPU the
host must wake first) and shorten the wait for the last chunk; each chunk reads all of A again
(in place when its rows are contiguous) and packs only its own columns of B. On 2 threads,
median of 60 calls with 5 ms idle before each, in one process (6 runs): 512^3 took 2-4% less
time with 8 chunks per part than with 4, and as much as with 16; 1024^3 3-5% less than with 4;
with 2 it was 2-10% slower than with 4 (``benchmarks/kernels.py --goals`` gives the goal
figure)."""


ROW_SPLIT_RATIO = 2
"""The packed driver splits rows instead of columns from ``M >= ROW_SPLIT_RATIO * N``: each
column chunk reads all of A again, a row chunk only its rows (and packs all of B, the smaller
operand there). 8192x256x256 on 2 threads in 16 column chunks cost 1.5x one thread's CPU."""


class _Tiling(Protocol):
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int


def call_driver(
    b: ir.IRBuilder, drivers: tuple[ir.Function, ...], which: ir.Value, args: list[ir.Value]
) -> None:
    """Call the direct (``which`` 0), dot (1) or packed (2) driver with ``args``; with a single
    driver (the prepacked one of a ``b_panels`` matmul), that one."""
    if len(drivers) == 1:
        b.call(drivers[0], args)
        return
    direct, dot, packed = drivers
    with b.if_else(b.icmp_signed("==", which, i64(0))) as (d_then, d_else):
        with d_then:
            b.call(direct, args)
        with d_else, b.if_else(b.icmp_signed("==", which, i64(1))) as (t_then, t_else):
            with t_then:
                b.call(dot, args)
            with t_else:
                b.call(packed, args)


def _round_up(b: ir.IRBuilder, x: ir.Value, m: int) -> ir.Value:
    return b.mul(b.sdiv(b.add(x, i64(m - 1)), i64(m)), i64(m))


def split_part(module: ir.Module, t: _Tiling, drivers: tuple[ir.Function, ...]) -> ir.Function:
    """``part(job, p, parts)`` for the ``emit_parallel_for`` of a matmul (shared per module;
    one for the three drivers, one for the prepacked driver alone)."""
    name = f"asyncjit.matmul.part{t.mr}x{t.nr}{'p' if len(drivers) == 1 else ''}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_part_function(module, name)
    job, p, parts = fn.args
    fields = {k: b.gep(job, [i64(i)], source_etype=I64) for i, k in enumerate(PART_FIELDS)}
    f = {k: b.load(ptr, typ=I64) for k, ptr in fields.items() if k != "next"}
    m, n, k = f["M"], f["N"], f["K"]
    which = f["which"]
    # rows or columns: see the module docstring
    blocked = b.icmp_signed("==", which, i64(2)) if len(drivers) > 1 else ir.Constant(ir.IntType(1), 1)
    rows = b.and_(blocked, b.icmp_signed(">=", m, b.mul(n, i64(ROW_SPLIT_RATIO))))
    chunks = b.mul(parts, i64(CHUNKS_PER_PART))
    extent = b.select(rows, m, n)
    unit = b.select(rows, i64(t.mr), i64(t.nr))
    per = b.sdiv(b.add(extent, b.sub(chunks, i64(1))), chunks)
    w = b.mul(b.sdiv(b.add(per, b.sub(unit, i64(1))), unit), unit)  # rows or columns per chunk
    # the scratch region of a part: B blocks of ceil(N / parts) columns (a chunk is narrower)
    # when columns are split, of all N columns when rows are
    part_w = _round_up(b, b.sdiv(b.add(n, b.sub(parts, i64(1))), parts), t.nr)
    kc = smin(b, k, i64(t.kc))
    a_blk = b.mul(_round_up(b, smin(b, m, i64(t.mc)), t.mr), kc)
    a_blk = b.and_(b.add(a_blk, i64(15)), i64(-16))
    b_blk = b.mul(_round_up(b, smin(b, b.select(rows, n, part_w), i64(t.nc)), t.nr), kc)
    region = b.add(i64(64), b.mul(i64(4), b.add(a_blk, b_blk)))
    scratch = b.inttoptr(b.add(f["scratch"], b.mul(p, region)), PTR)
    a_base, b_base, c_base = (b.inttoptr(f[x], PTR) for x in ("A", "B", "C"))

    claim = b.append_basic_block("claim")
    work = b.append_basic_block("work")
    done = b.append_basic_block("done")
    b.branch(claim)
    b.position_at_end(claim)
    c = b.atomic_rmw("add", fields["next"], i64(1), "monotonic")
    j0 = b.mul(c, w)
    nt = smin(b, w, b.sub(extent, j0))
    b.cbranch(b.icmp_signed(">", nt, i64(0)), work, done)
    b.position_at_end(work)
    zero = i64(0)
    i0, c0 = b.select(rows, j0, zero), b.select(rows, zero, j0)  # first row, first column
    a_ptr = b.gep(a_base, [b.mul(i0, f["a_rs"])], source_etype=F32)
    b_ptr = b.gep(b_base, [b.mul(c0, f["b_cs"])], source_etype=F32)
    c_ptr = b.gep(c_base, [b.add(b.mul(i0, f["c_rs"]), c0)], source_etype=F32)
    mt, ntc = b.select(rows, nt, m), b.select(rows, n, nt)
    args = [a_ptr, b_ptr, c_ptr, scratch, mt, ntc, k, f["a_rs"], f["a_cs"], f["b_rs"], f["b_cs"], f["c_rs"]]
    call_driver(b, drivers, which, args)
    b.branch(claim)
    b.position_at_end(done)
    b.ret_void()
    return fn
