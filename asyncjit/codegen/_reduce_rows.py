"""Reductions that keep the last (contiguous) axis: rows accumulated into a block of accumulators.

``x.sum(axis=0)`` of a ``[R, C]`` array, written as one accumulator per output element, reads
``x`` down its columns: a stride of ``C`` floats per step, so every load is a cache line (and
often a page) of its own, 0.04 of the copy bandwidth at 4096 x 4096. Here the output's last
axis is cut into blocks of ``BLOCK`` elements whose accumulators live in a stack array; for each
reduced index the block's slice of the row is combined into them, a contiguous vectorisable
loop, so ``x`` is read row by row. Each output element still combines its inputs one after
another in the reduced axes' order (the order of the plain loop), with the same accumulator
type and combine as ``_kernels._reduce``, which passes them in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llvmlite import ir

from ..symbolic import Dim, upper
from ._index import i64
from ._target import for_range, smin

__all__ = ["BLOCK", "emit_reduce_rows", "rows_worthwhile"]

BLOCK = 4096
"""Output elements per accumulator block. A 4096-column row (16 KiB of float32) is then one
block: x is read front to back, one row after another, with the accumulators (32 KiB of
float64 at most) in L1/L2. Blocks of 512 read each row in 2 KiB pieces 16 KiB apart, a TLB
miss per piece (0.53 of the copy bandwidth at 4096 x 4096 against 0.95, same run)."""


UNROLL = 4
"""Rows of the innermost reduced axis combined per pass over a block: each accumulator is then
loaded and stored once per four rows instead of once per row (float64 accumulators of a 4096
block are 32 KiB, which do not stay in L1 beside the rows streamed through it)."""


def rows_worthwhile(shape: Sequence[Dim], axes: Sequence[int]) -> bool:
    """True when the last axis is kept and long enough to fill vectors, and something is reduced."""
    last = len(shape) - 1
    return bool(axes) and last not in axes and last >= 1 and upper(shape[last]) >= 16


def emit_reduce_rows(
    ctx: Any,
    out_shape: Sequence[Dim],
    in_shape: Sequence[Dim],
    axes: Sequence[int],
    acc_ty: ir.Type,
    init: ir.Constant,
    value_at: Callable[[tuple[Dim, ...]], ir.Value],
    combine: Callable[[ir.Value, ir.Value], ir.Value],
    finish: Callable[[tuple[Dim, ...], ir.Value], None],
) -> None:
    """The reduction over ``axes`` of ``in_shape`` (kept as size-1 axes of ``out_shape``).

    ``ctx`` is ``_kernels._Ctx``; ``value_at(full index)`` is the input element (widened),
    ``combine(acc, v)`` one step, ``finish(out index, acc)`` converts and stores a result.
    """
    b = ctx.b
    em = ctx.em
    cols = in_shape[-1]
    accs = ctx.alloca(ir.ArrayType(acc_ty, BLOCK))

    def slot(j: ir.Value) -> ir.Value:
        return b.gep(accs, [i64(0), j], inbounds=True)

    def row(idx: tuple[Dim, ...]) -> None:
        n = em.dim(cols)
        with for_range(b, i64(0), n, BLOCK, name="blk") as j0:
            count = smin(b, i64(BLOCK), b.sub(n, j0))
            with for_range(b, i64(0), count, name="init") as j:
                b.store(init, slot(j))

            def rows_at(red: tuple[Dim, ...], lasts: list[ir.Value]) -> None:
                """Combine the rows at ``lasts`` (values of the innermost reduced index, in
                order) into the block's accumulators: one load and store per element for all
                of them, the combines in the plain loop's order."""
                with for_range(b, i64(0), count, name="col") as j:
                    em._memo.append({})  # values cached in this loop's scope only
                    col = em.bind(b.add(j0, j), cols)
                    acc = slot(j)
                    value = b.load(acc, typ=acc_ty)
                    for last in lasts:
                        full: list[Dim] = [*idx, col]
                        for ax, r in zip(axes, (*red, em.bind(last, in_shape[axes[-1]])), strict=True):
                            full[ax] = r
                        value = combine(value, value_at(tuple(full)))
                    b.store(value, acc)
                    em._memo.pop()

            def step(red: tuple[Dim, ...]) -> None:
                extent = em.dim(in_shape[axes[-1]])
                whole = b.mul(b.sdiv(extent, i64(UNROLL)), i64(UNROLL))
                with for_range(b, i64(0), whole, UNROLL, name="red") as r0:
                    rows_at(red, [b.add(r0, i64(u)) for u in range(UNROLL)])
                with for_range(b, whole, extent, name="redt") as r:
                    rows_at(red, [r])

            ctx.nest([in_shape[a] for a in axes[:-1]], step)
            with for_range(b, i64(0), count, name="out") as j:
                em._memo.append({})
                finish((*idx, em.bind(b.add(j0, j), cols)), b.load(slot(j), typ=acc_ty))
                em._memo.pop()

    ctx.nest(list(out_shape[:-1]), row)
