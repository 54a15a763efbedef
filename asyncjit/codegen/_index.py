"""Symbolic index expressions (``asyncjit.symbolic``) lowered to ``i64`` LLVM values.

``Var`` and ``Index`` atoms are looked up in an environment (function parameters, loop counters,
or opaque runtime values such as a clamped gather index). Floor division and modulo follow
Python semantics; when the numerator is provably non-negative the cheaper unsigned forms are
used, which LLVM turns into shifts and multiplies for constant divisors.
"""

from __future__ import annotations

from collections.abc import Mapping

from llvmlite import ir

from ..symbolic import Dim, FloorDiv, Index, Max, Min, Mod, Prod, Sum, Var, bounds
from ._types import I64

__all__ = ["emit_dim", "floordiv_runtime", "i64"]


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def emit_dim(b: ir.IRBuilder, e: Dim, env: Mapping[str, ir.Value]) -> ir.Value:
    """``e`` as an ``i64`` value; every atom must be bound in ``env``."""
    if isinstance(e, int):
        return i64(e)
    if isinstance(e, Var | Index):
        return env[e.name]
    if isinstance(e, Sum):
        acc: ir.Value | None = None
        for atom, coeff in e.terms:
            v = emit_dim(b, atom, env)
            term = v if coeff == 1 else b.mul(v, i64(coeff))
            acc = term if acc is None else b.add(acc, term)
        assert acc is not None
        return b.add(acc, i64(e.const)) if e.const else acc
    if isinstance(e, Prod):
        out = emit_dim(b, e.factors[0], env)
        for f in e.factors[1:]:
            out = b.mul(out, emit_dim(b, f, env))
        return out
    if isinstance(e, FloorDiv | Mod):
        num = emit_dim(b, e.num, env)
        den = i64(e.den)
        if bounds(e.num)[0] >= 0:
            return b.udiv(num, den) if isinstance(e, FloorDiv) else b.urem(num, den)
        q, r = b.sdiv(num, den), b.srem(num, den)
        neg = b.icmp_signed("<", r, i64(0))
        if isinstance(e, FloorDiv):
            return b.select(neg, b.sub(q, i64(1)), q)
        return b.select(neg, b.add(r, den), r)
    if isinstance(e, Min | Max):
        op = "<" if isinstance(e, Min) else ">"
        out = emit_dim(b, e.args[0], env)
        for a in e.args[1:]:
            v = emit_dim(b, a, env)
            out = b.select(b.icmp_signed(op, out, v), out, v)
        return out
    raise TypeError(f"not a symbolic dim: {e!r}")


def floordiv_runtime(b: ir.IRBuilder, num: ir.Value, den: ir.Value) -> ir.Value:
    """``num // den`` for ``num >= 0`` and a runtime ``den >= 0``; ``den == 0`` gives 0, no trap."""
    zero = b.icmp_unsigned("==", den, i64(0))
    safe = b.select(zero, i64(1), den)
    return b.select(zero, i64(0), b.udiv(num, safe))
