"""The ``prefix`` kernel: the one kernel that sets a data-dependent size during a run.

It evaluates the count, stores it (unclamped) where the host reads it after the run, clamps it
into ``[0, min(bound, axis size)]``, copies that many entries and returns the clamped value, which
the entry point passes to every later kernel. Native code therefore never loops past a bound,
whatever the data; the host turns a clamped count into ``VarBoundsError`` (``check_size``).

The ``index_check`` kernel takes the same path to fail a run on its data: it copies indices
through and stores how many are out of range; its ``DataVar`` allows only 0, and the host turns
any other count into ``IndexOutOfRangeError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..passes import Kernel
from ..symbolic import Dim
from ._expr import linearize
from ._index import i64
from ._types import I64

if TYPE_CHECKING:
    from ._kernels import _Ctx

__all__ = ["emit_index_check", "emit_prefix"]

_I64_MAX = (1 << 63) - 1


def emit_prefix(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    x, count = node.inputs
    axis, var = node.attrs["axis"], node.attrs["size_var"]
    em, b = ctx.em, ctx.b
    c = em.value(count, ())
    width = c.type.width
    if count.dtype.is_bool or count.dtype.is_unsigned:
        raw = b.zext(c, I64) if width < 64 else c
        if width == 64:  # a uint64 above int64's range is "too big", never negative
            raw = b.select(b.icmp_signed("<", raw, i64(0)), i64(_I64_MAX), raw)
    else:
        raw = b.sext(c, I64) if width < 64 else c
    assert ctx.status is not None
    b.store(raw, ctx.status)
    axis_len = em.dim(x.shape[axis])
    limit = b.select(b.icmp_signed("<", axis_len, i64(var.max)), axis_len, i64(var.max))
    clamped = b.select(b.icmp_signed("<", raw, i64(0)), i64(0), raw)
    clamped = b.select(b.icmp_signed(">", clamped, limit), limit, clamped)
    em.env[var.name] = clamped  # this kernel's own loops run to the clamped size

    def put(idx: tuple[Dim, ...]) -> None:
        em.store(ctx.out, node, linearize(idx, node.shape), em.value(x, idx))

    ctx.nest(node.shape, put)
    ctx.result = clamped


def emit_index_check(ctx: _Ctx, kernel: Kernel) -> None:
    """Copy the indices through and store how many fall outside ``[0, size)`` where the host
    reads it after the run (returning 0, the only count the check's ``DataVar`` allows: any
    other is out of its bounds and the host raises ``IndexOutOfRangeError``)."""
    node = kernel.node
    index = node.inputs[0]
    em, b = ctx.em, ctx.b
    size = em.dim(node.attrs["size"])
    bad = ctx.alloca(I64)
    b.store(i64(0), bad)

    def put(idx: tuple[Dim, ...]) -> None:
        v = em.value(index, idx)
        em.store(ctx.out, node, linearize(idx, node.shape), v)
        w = v.type.width
        if index.dtype.is_unsigned:
            wide = b.zext(v, I64) if w < 64 else v
            out = b.icmp_unsigned(">=", wide, size)  # a uint64 above int64's range is outside too
        else:
            wide = b.sext(v, I64) if w < 64 else v
            out = b.or_(b.icmp_signed("<", wide, i64(0)), b.icmp_signed(">=", wide, size))
        b.store(b.add(b.load(bad, typ=I64), b.zext(out, I64)), bad)

    ctx.nest(node.shape, put)
    assert ctx.status is not None
    count = b.load(bad, typ=I64)
    if len(node.inputs) == 2:  # checked only while ``when`` holds
        when = em.value(node.inputs[1], ())
        on = when if when.type.width == 1 else b.icmp_unsigned("!=", when, ir.Constant(when.type, 0))
        count = b.select(on, count, i64(0))
    b.store(count, ctx.status)
    ctx.result = i64(0)
