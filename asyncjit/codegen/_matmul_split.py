"""A matmul's columns split over the intra-op threads (``_parallel``): the part function.

Part ``p`` of ``parts`` computes columns ``[p*w, (p+1)*w)``, ``w = ceil(N / parts)`` rounded up
to the micro-tile width NR, with the driver chosen once for the whole product (so each column is
computed exactly as on one thread: results do not depend on the thread count) and its own slice
of scratch, sized as ``_matmul._region_bytes(M, w, K)``.
"""

from __future__ import annotations

from typing import Protocol

from llvmlite import ir

from ._parallel import new_part_function
from ._target import F32, I64, PTR, i64, smin

__all__ = ["PART_FIELDS", "call_driver", "column_part"]

PART_FIELDS = ("A", "B", "C", "scratch", "M", "N", "K", "a_rs", "a_cs", "b_rs", "b_cs", "c_rs", "which")
"""The i64 job block a part reads (pointers as integers; ``which``: 0 direct, 1 dot, 2 packed)."""


class _Tiling(Protocol):
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int


def call_driver(
    b: ir.IRBuilder,
    drivers: tuple[ir.Function, ir.Function, ir.Function],
    use_direct: ir.Value,
    use_dot: ir.Value,
    args: list[ir.Value],
) -> None:
    """Call the direct, dot or packed driver with ``args``."""
    direct, dot, packed = drivers
    with b.if_else(use_direct) as (d_then, d_else):
        with d_then:
            b.call(direct, args)
        with d_else, b.if_else(use_dot) as (t_then, t_else):
            with t_then:
                b.call(dot, args)
            with t_else:
                b.call(packed, args)


def _round_up(b: ir.IRBuilder, x: ir.Value, m: int) -> ir.Value:
    return b.mul(b.sdiv(b.add(x, i64(m - 1)), i64(m)), i64(m))


def column_part(
    module: ir.Module, t: _Tiling, drivers: tuple[ir.Function, ir.Function, ir.Function]
) -> ir.Function:
    """``part(job, p, parts)`` for the ``emit_parallel_for`` of a matmul (shared per module)."""
    name = f"asyncjit.matmul.part{t.mr}x{t.nr}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_part_function(module, name)
    job, p, parts = fn.args
    f = {k: b.load(b.gep(job, [i64(i)], source_etype=I64), typ=I64) for i, k in enumerate(PART_FIELDS)}
    m, n, k = f["M"], f["N"], f["K"]
    w = _round_up(b, b.sdiv(b.add(n, b.sub(parts, i64(1))), parts), t.nr)
    j0 = b.mul(p, w)
    nt = smin(b, w, b.sub(n, j0))
    with b.if_then(b.icmp_signed("<=", nt, i64(0))):
        b.ret_void()
    kc = smin(b, k, i64(t.kc))
    a_blk = b.mul(_round_up(b, smin(b, m, i64(t.mc)), t.mr), kc)
    a_blk = b.and_(b.add(a_blk, i64(15)), i64(-16))
    b_blk = b.mul(_round_up(b, smin(b, w, i64(t.nc)), t.nr), kc)
    region = b.add(i64(64), b.mul(i64(4), b.add(a_blk, b_blk)))
    scratch = b.inttoptr(b.add(f["scratch"], b.mul(p, region)), PTR)
    b_ptr = b.gep(b.inttoptr(f["B"], PTR), [b.mul(j0, f["b_cs"])], source_etype=F32)
    c_ptr = b.gep(b.inttoptr(f["C"], PTR), [j0], source_etype=F32)
    a_ptr = b.inttoptr(f["A"], PTR)
    args = [a_ptr, b_ptr, c_ptr, scratch, m, nt, k, f["a_rs"], f["a_cs"], f["b_rs"], f["b_cs"], f["c_rs"]]
    which = f["which"]
    call_driver(b, drivers, b.icmp_signed("==", which, i64(0)), b.icmp_signed("==", which, i64(1)), args)
    b.ret_void()
    return fn
