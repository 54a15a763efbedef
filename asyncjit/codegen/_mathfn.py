"""Vectorisable float32 transcendental functions as straight-line LLVM IR.

``emit_unary(builder, op, x)`` and ``emit_pow(builder, x, y)`` work on ``float`` or ``<N x
float>`` values and emit only arithmetic, bit manipulation, ``select`` and the LLVM intrinsics
``fma``, ``rint``, ``fabs`` (no calls into libm), so the loop vectorizer widens loops that use
them; on AVX-512 hosts ``tanh`` and ``erf`` call table-driven functions of ``_mathlut`` with
vector variants the vectorizer widens them to.  Special values follow numpy (IEEE/C99); each function's
docstring states its max error as measured by ``tests/test_codegen_mathfn.py`` against numpy
float64 over wide ranges (near 0, large magnitudes, denormal inputs).  Denormal *outputs* are
produced correctly (exp, pow, sigmoid scale in two steps or through double); denormal inputs are
handled.

sin, cos and pow compute in double precision inside (half the vector width, still no calls):
that is the cheapest way to keep <= 1 ulp over a large argument range. sin and cos reduce huge
arguments with a constant table of the bits of 2/pi (one load per lane), so they are right for
every finite float32, 3e38 included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from ._mathlut import emit_lut, lut_chosen
from ._target import F32, F64, I32, I64, intrinsic, type_suffix

__all__ = ["UNARY_OPS", "emit_pow", "emit_unary"]


class _M:
    """Emission context: the builder plus constants/intrinsics shaped like ``x``."""

    def __init__(self, b: ir.IRBuilder, like: ir.Value) -> None:
        self.b = b
        ty = like.type
        self.n = ty.count if isinstance(ty, ir.VectorType) else 0
        self.module = b.module

    def ty(self, scalar: ir.Type) -> ir.Type:
        return ir.VectorType(scalar, self.n) if self.n else scalar

    def c(self, scalar: ir.Type, value: float | int) -> ir.Constant:
        return ir.Constant(self.ty(scalar), [value] * self.n) if self.n else ir.Constant(scalar, value)

    def f(self, v: float) -> ir.Constant:
        return self.c(F32, v)

    def d(self, v: float) -> ir.Constant:
        return self.c(F64, v)

    def i(self, v: int) -> ir.Constant:
        return self.c(I32, v)

    def call(self, base: str, *args: ir.Value) -> ir.Value:
        ty = args[0].type
        fn = intrinsic(self.module, f"llvm.{base}.{type_suffix(ty)}", ty, [a.type for a in args])
        return self.b.call(fn, list(args))

    def fma(self, a: ir.Value, x: ir.Value, c: ir.Value) -> ir.Value:
        return self.call("fma", a, x, c)

    def horner(self, x: ir.Value, coeffs: Sequence[float], dbl: bool = False) -> ir.Value:
        """``coeffs[0] + x*coeffs[1] + ...`` with FMAs."""
        k = self.d if dbl else self.f
        acc: ir.Value = k(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, k(c))
        return acc

    def bits(self, x: ir.Value) -> ir.Value:
        return self.b.bitcast(x, self.ty(I32))

    def from_bits(self, i: ir.Value) -> ir.Value:
        return self.b.bitcast(i, self.ty(F32))

    def isnan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def clamp(self, x: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
        """``min(max(x, lo), hi)``; NaN maps to ``lo`` (keeps later int conversions defined)."""
        b = self.b
        x = b.select(b.fcmp_ordered(">", x, lo), x, lo)
        return b.select(b.fcmp_ordered("<", x, hi), x, hi)

    def pow2i(self, n: ir.Value) -> ir.Value:
        """float ``2**n`` for int32 ``n`` in [-126, 127]."""
        b = self.b
        return self.from_bits(b.shl(b.add(n, self.i(127)), self.i(23)))


# ---------------------------------------------------------------------------------------------
# exp
# ---------------------------------------------------------------------------------------------

# e^r on |r| <= ln2/2: Taylor to degree 7 (truncation 5e-9 relative, under float rounding).
_EXP_POLY = [1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040]
_LN2_HI = 0.693145751953125  # 16 significant bits: n * _LN2_HI is exact for |n| < 256
_LN2_LO = 1.4286068203094172321e-06


def _exp(m: _M, x: ir.Value) -> ir.Value:
    """exp(x). Measured max error 0.87 ulp over [-104, 89], all magnitudes and denormal results;
    overflow -> inf, underflow -> denormals then 0."""
    b = m.b
    xc = m.clamp(x, m.f(-104.0), m.f(89.0))
    n = m.call("rint", b.fmul(xc, m.f(1.0 / math.log(2.0))))
    r = m.fma(n, m.f(-_LN2_HI), xc)
    r = m.fma(n, m.f(-_LN2_LO), r)
    p = m.horner(r, _EXP_POLY)
    ni = b.fptosi(n, m.ty(I32))
    # 2^n in two factors: n in [-150, 129] covers denormal results and the overflow to inf.
    n1 = b.ashr(ni, m.i(1))
    n2 = b.sub(ni, n1)
    res = b.fmul(b.fmul(p, m.pow2i(n1)), m.pow2i(n2))
    return b.select(m.isnan(x), x, res)


def _exp_neg_abs(m: _M, a: ir.Value) -> ir.Value:
    """exp(-a) for a >= 0 (or NaN)."""
    return _exp(m, m.b.fneg(a))


# ---------------------------------------------------------------------------------------------
# log
# ---------------------------------------------------------------------------------------------

# log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f): the FreeBSD/musl logf scheme.
_LG = [0.66666662693, 0.40000972152, 0.28498786688, 0.24279078841]
_LOG_LN2_HI = 6.9313812256e-01  # 0x3f317180
_LOG_LN2_LO = 9.0580006145e-06  # 0x3717f7d1


def _log(m: _M, x: ir.Value) -> ir.Value:
    """log(x). Measured max error 0.82 ulp over denormal inputs .. 3.4e38."""
    b = m.b
    tiny = b.fcmp_ordered("<", x, m.f(2.0**-126))
    xs = b.select(tiny, b.fmul(x, m.f(2.0**23)), x)
    bits = m.bits(xs)
    # exponent relative to sqrt(0.5) so the mantissa lands in [sqrt(.5), sqrt(2))
    tmp = b.sub(bits, m.i(0x3F3504F3))
    e = b.ashr(tmp, m.i(23))
    mant = m.from_bits(b.sub(bits, b.shl(e, m.i(23))))
    e = b.sub(e, b.select(tiny, m.i(23), m.i(0)))
    ef = b.sitofp(e, m.ty(F32))
    f = b.fsub(mant, m.f(1.0))
    s = b.fdiv(f, b.fadd(f, m.f(2.0)))
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    t1 = b.fmul(w, m.fma(w, m.f(_LG[3]), m.f(_LG[1])))
    t2 = b.fmul(z, m.fma(w, m.f(_LG[2]), m.f(_LG[0])))
    r = b.fadd(t2, t1)
    hfsq = b.fmul(m.f(0.5), b.fmul(f, f))
    res = m.fma(s, b.fadd(hfsq, r), b.fmul(ef, m.f(_LOG_LN2_LO)))
    res = b.fadd(b.fsub(res, hfsq), f)
    res = m.fma(ef, m.f(_LOG_LN2_HI), res)
    # specials: 0 -> -inf, < 0 -> nan, +inf -> +inf, nan -> nan
    res = b.select(b.fcmp_ordered("==", x, m.f(0.0)), m.f(-math.inf), res)
    res = b.select(b.fcmp_ordered("<", x, m.f(0.0)), m.f(math.nan), res)
    res = b.select(b.fcmp_ordered("==", x, m.f(math.inf)), x, res)
    return b.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# tanh, sigmoid
# ---------------------------------------------------------------------------------------------

# tanh(x) = x + x^3 * P(x^2) on |x| < 0.625 (least-squares fit, 1.6e-10 relative).
_TANH_POLY = [
    -0.3333333081787067,
    0.13333206465312833,
    -0.05394681081281083,
    0.021700928683249368,
    -0.008177891830369656,
    0.0021433695140929904,
]


def _recip_newton(m: _M, d: ir.Value, r: ir.Value) -> ir.Value:
    """1/d refined from the estimate ``r`` (relative error e) by three Newton steps (e^8): six
    FMAs instead of a divide, which costs 10-16 cycles per vector and does not pipeline."""
    nd = m.b.fneg(d)
    for _ in range(3):
        r = m.fma(r, m.fma(nd, r, m.f(1.0)), r)
    return r


def _recip_1_2(m: _M, d: ir.Value) -> ir.Value:
    """1/d for d in [1, 2]: the minimax line 24/17 - 8/17 d (error <= 1/17), then Newton."""
    return _recip_newton(m, d, m.fma(d, m.f(-8.0 / 17.0), m.f(24.0 / 17.0)))


def _recip_pos(m: _M, d: ir.Value) -> ir.Value:
    """1/d for normal d > 0: the exponent-negating bit estimate (error < 6%), then Newton."""
    b = m.b
    return _recip_newton(m, d, m.from_bits(b.sub(m.i(0x7EF311C3), m.bits(d))))


def _exp_tanh(m: _M, t: ir.Value) -> ir.Value:
    """exp(t) for t in [0, 18.1] (tanh's range): exp without its clamps, NaN and two-step scaling."""
    b = m.b
    n = m.call("rint", b.fmul(t, m.f(1.0 / math.log(2.0))))
    r = m.fma(n, m.f(-_LN2_HI), t)
    r = m.fma(n, m.f(-_LN2_LO), r)
    return b.fmul(m.horner(r, _EXP_POLY), m.pow2i(b.fptosi(n, m.ty(I32))))


_TANH_ONE = 9.05  # tanh(a) rounds to 1.0f from a = 9.01 on


def _tanh(m: _M, x: ir.Value) -> ir.Value:
    """tanh(x). Measured max error 1.30 ulp (worst just above |x| = 0.625); tanh(+-inf) = +-1.

    Past 0.625: 1 - 2/(e^2a + 1), the reciprocal by Newton steps (no divide). With AVX-512 a
    table of polynomials instead (``_mathlut``: 1.33 ulp, 1.7-1.8x the throughput)."""
    if lut_chosen():
        return emit_lut(m.b, "tanh", x)
    b = m.b
    a = m.call("fabs", x)
    z = b.fmul(x, x)
    small = m.fma(b.fmul(x, z), m.horner(z, _TANH_POLY), x)
    ac = b.select(b.fcmp_ordered("<", a, m.f(_TANH_ONE)), a, m.f(_TANH_ONE))  # NaN -> 9.05
    e = _exp_tanh(m, b.fmul(m.f(2.0), ac))
    big = m.fma(m.f(-2.0), _recip_pos(m, b.fadd(e, m.f(1.0))), m.f(1.0))
    big = m.call("copysign", big, x)
    res = b.select(b.fcmp_ordered("<", a, m.f(0.625)), small, big)
    res = b.select(b.fcmp_ordered("==", x, m.f(0.0)), x, res)  # keep the sign of -0.0
    return b.select(m.isnan(x), x, res)


def _sigmoid(m: _M, x: ir.Value) -> ir.Value:
    """1/(1+exp(-x)). Measured max error 2.68 ulp (denormal results included); sigmoid(+-inf) = 1/0.

    1 + exp(-|x|) is in [1, 2]: its reciprocal is a line and three Newton steps (no divide)."""
    b = m.b
    e = _exp_neg_abs(m, m.call("fabs", x))
    s = _recip_1_2(m, b.fadd(m.f(1.0), e))
    res = b.select(b.fcmp_ordered(">=", x, m.f(0.0)), s, b.fmul(e, s))
    return b.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# sin, cos (double precision inside)
# ---------------------------------------------------------------------------------------------

_PIO2_1 = 1.57079632673412561417e00  # first 33 bits of pi/2
_PIO2_2 = 6.07710050630396597660e-11  # next 33 bits
_PIO2_3 = 2.02226624879595063154e-21  # the rest
_SIN_POLY = [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800, 1 / 6227020800]
_COS_POLY = [1.0, -1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800, 1 / 479001600, -1 / 87178291200]


def _pi_bits(bits: int) -> int:
    """``floor(pi * 2**bits)`` by Machin's formula in integer fixed point (exact to the last bit
    after the guard bits are dropped); used once, to build the reduction table below."""
    guard = 32
    one = 1 << (bits + guard)

    def arctan_inv(k: int) -> int:
        total, term, n, sign = 0, one // k, 1, 1
        while term:
            total += sign * (term // n)
            term //= k * k
            n += 2
            sign = -sign
        return total

    return (16 * arctan_inv(5) - 4 * arctan_inv(239)) >> guard


_RED_MIN_EXP = 148  # biased float32 exponent of 2**21: below it the Cody-Waite path is exact
_RED_BITS = 400


def _reduction_table() -> list[float]:
    """Per float32 exponent ``E`` (x = M * 2**E, M a 24-bit integer, E in [-2, 104]): the three
    doubles c1 + c2 + c3 = (2**E * 2/pi) mod 4, c1 on a 2**-24 grid, c2 on a 2**-50 grid, so
    ``M*c1`` and ``M*c2`` are exact in double and only ``M*c3`` (< 2**-26) rounds (Payne-Hanek)."""
    scale = _RED_BITS + 8
    two_over_pi = (2 << (2 * scale)) // _pi_bits(scale)  # floor(2/pi * 2**scale)
    out: list[float] = []
    for e in range(_RED_MIN_EXP - 150, 255 - 150):
        u = two_over_pi << e if e >= 0 else two_over_pi >> -e
        u %= 4 << scale  # (2**E * 2/pi) mod 4, in units of 2**-scale
        c1 = u >> (scale - 24)
        rest = u - (c1 << (scale - 24))
        c2 = rest >> (scale - 50)
        rest -= c2 << (scale - 50)
        out += [c1 / 2**24, c2 / 2**50, rest / 2**scale]
    return out


_RED_TABLE = _reduction_table()


def _table_row(m: _M, index: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """``_RED_TABLE[3*index : 3*index + 3]`` for an i32 (or vector of i32) row index."""
    b = m.b
    name = "asyncjit.sincos_reduction"
    table = m.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(F64, len(_RED_TABLE))
        table = ir.GlobalVariable(m.module, ty, name=name)
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(ty, _RED_TABLE)
    zero = ir.Constant(I32, 0)

    def load(i: ir.Value, k: int) -> ir.Value:
        at = b.add(b.mul(i, ir.Constant(I32, 3)), ir.Constant(I32, k))
        return b.load(b.gep(table, [zero, at], inbounds=True))

    if not m.n:
        return load(index, 0), load(index, 1), load(index, 2)
    cols: list[ir.Value] = [ir.Constant(m.ty(F64), ir.Undefined)] * 3
    for lane in range(m.n):
        i = b.extract_element(index, ir.Constant(I32, lane))
        cols = [b.insert_element(cols[k], load(i, k), ir.Constant(I32, lane)) for k in range(3)]
    return cols[0], cols[1], cols[2]


def _reduce_large(m: _M, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(n, r) with x = n*pi/2 + r, |r| <= ~pi/4, for |x| >= 2**21 (any finite float32; other
    lanes give garbage that the caller discards). Error in r below 2**-75 absolute."""
    b = m.b
    bits = m.bits(x)
    expo = b.and_(b.lshr(bits, m.i(23)), m.i(0xFF))
    row = b.sub(expo, m.i(_RED_MIN_EXP))
    row = b.select(b.icmp_signed("<", row, m.i(0)), m.i(0), row)
    row = b.select(b.icmp_signed(">", row, m.i(254 - _RED_MIN_EXP)), m.i(254 - _RED_MIN_EXP), row)
    c1, c2, c3 = _table_row(m, row)
    mant = b.sitofp(b.or_(b.and_(bits, m.i(0x7FFFFF)), m.i(0x800000)), m.ty(F64))
    p1 = b.fmul(mant, c1)  # exact: 24 x 26 bits
    p1 = b.fsub(p1, b.fmul(m.call("floor", b.fmul(p1, m.d(0.25))), m.d(4.0)))  # mod 4, exact
    s = b.fadd(p1, b.fmul(mant, c2))  # exact: a multiple of 2**-50 below 8
    n = m.call("rint", s)
    f = b.fadd(b.fsub(s, n), b.fmul(mant, c3))
    r = b.fmul(f, m.d(math.pi / 2))
    neg = b.fcmp_ordered("<", x, m.f(0.0))
    return b.select(neg, b.fneg(n), n), b.select(neg, b.fneg(r), r)


def _sincos(m: _M, x: ir.Value, cosine: bool) -> ir.Value:
    b = m.b
    xd = b.fpext(x, m.ty(F64))
    n = m.call("rint", b.fmul(xd, m.d(2.0 / math.pi)))
    r = m.fma(n, m.d(-_PIO2_1), xd)
    r = m.fma(n, m.d(-_PIO2_2), r)
    r = m.fma(n, m.d(-_PIO2_3), r)
    # |x| >= 2**21: n * _PIO2_1 is no longer exact; reduce with the bits of 2/pi instead
    large = b.fcmp_ordered(">=", m.call("fabs", x), m.f(2.0**21))
    n_big, r_big = _reduce_large(m, x)
    n = b.select(large, n_big, n)
    r = b.select(large, r_big, r)
    z = b.fmul(r, r)
    s = b.fmul(r, m.horner(z, _SIN_POLY, dbl=True))
    c = m.horner(z, _COS_POLY, dbl=True)
    # quadrant from n (|n| < 2**21 or in [-4, 4]); inf/nan would make fptosi poison: zero it first
    big = b.fcmp_unordered("uge", m.call("fabs", n), m.d(2.0**62))
    q = b.trunc(b.fptosi(b.select(big, m.d(0.0), n), m.ty(I64)), m.ty(I32))
    if cosine:
        q = b.add(q, m.i(1))
    odd = b.icmp_signed("!=", b.and_(q, m.i(1)), m.i(0))
    neg = b.icmp_signed("!=", b.and_(q, m.i(2)), m.i(0))
    v = b.select(odd, c, s)
    v = b.select(neg, b.fneg(v), v)
    v = b.select(b.fcmp_ordered(">", v, m.d(1.0)), m.d(1.0), v)  # polynomial overshoot near 1
    v = b.select(b.fcmp_ordered("<", v, m.d(-1.0)), m.d(-1.0), v)
    res = b.fptrunc(v, m.ty(F32))
    if not cosine:
        res = b.select(b.fcmp_ordered("==", x, m.f(0.0)), x, res)  # sin(-0.0) = -0.0
    # inf -> nan (r is nan already, but the quadrant select must not matter)
    return b.select(b.fcmp_ordered("==", m.call("fabs", x), m.f(math.inf)), m.f(math.nan), res)


def _sin(m: _M, x: ir.Value) -> ir.Value:
    """sin(x) for every finite float32 (Cody-Waite reduction below 2**21, Payne-Hanek with a
    table of the bits of 2/pi above, both in double; error <= 1 ulp); inf -> nan."""
    return _sincos(m, x, cosine=False)


def _cos(m: _M, x: ir.Value) -> ir.Value:
    """cos(x). Same accuracy and range as :func:`_sin`."""
    return _sincos(m, x, cosine=True)


# ---------------------------------------------------------------------------------------------
# erf, gelu
# ---------------------------------------------------------------------------------------------

# erf(x) = x * (2/sqrt(pi) + x^2 * P(x^2)) on |x| < 1 (least-squares fit, 3.6e-11 relative).
_ERF_POLY = [
    2.0 / math.sqrt(math.pi),
    -0.3761263858369651,
    0.11283783611043126,
    -0.026865478334855503,
    0.0052211368103691775,
    -0.0008485329714737228,
    0.00011273579460580631,
    -9.685748421614104e-06,
]
# erfc(a) = t * exp(-a^2 + Q(t)), t = 1/(1 + a/2): Chebyshev fit with < 1.2e-7 relative error
# for all a >= 0 (Press et al., Numerical Recipes, erfcc).
_ERFC_Q = [
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
]


def _erf_erfc(m: _M, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(erf(a), erfc(a)) for a >= 0, each computed where it is accurate."""
    b = m.b
    z = b.fmul(a, a)
    erf_small = b.fmul(a, m.horner(z, _ERF_POLY))
    t = b.fdiv(m.f(1.0), m.fma(a, m.f(0.5), m.f(1.0)))
    erfc_big = b.fmul(t, _exp(m, b.fsub(m.horner(t, _ERFC_Q), z)))
    small = b.fcmp_ordered("<", a, m.f(1.0))
    erf = b.select(small, erf_small, b.fsub(m.f(1.0), erfc_big))
    erfc = b.select(small, b.fsub(m.f(1.0), erf_small), erfc_big)
    return erf, erfc


def _erf(m: _M, x: ir.Value) -> ir.Value:
    """erf(x). Measured max abs error 1.4e-7 (2.4 ulp); erf(+-inf) = +-1. With AVX-512 a table
    of polynomials instead (``_mathlut``: 9.3e-8, 2.2 ulp)."""
    if lut_chosen():
        return emit_lut(m.b, "erf", x)
    b = m.b
    erf, _ = _erf_erfc(m, m.call("fabs", x))
    return b.select(m.isnan(x), x, m.call("copysign", erf, x))


def _gelu(m: _M, x: ir.Value) -> ir.Value:
    """0.5*x*(1+erf(x/sqrt 2)). Measured max abs error 3.7e-7 (x<0 uses erfc, no cancellation;
    relative error in the far tail, |x| > 10, up to ~300 ulp of values < 1e-20);
    gelu(-inf) = -0, gelu(inf) = inf."""
    b = m.b
    a = b.fmul(m.call("fabs", x), m.f(1.0 / math.sqrt(2.0)))
    _, erfc = _erf_erfc(m, a)
    pos = b.fmul(x, m.fma(erfc, m.f(-0.5), m.f(1.0)))
    neg = b.fmul(b.fmul(m.f(0.5), x), erfc)
    res = b.select(b.fcmp_ordered(">=", x, m.f(0.0)), pos, neg)
    res = b.select(b.fcmp_ordered("==", x, m.f(-math.inf)), m.f(-0.0), res)
    return b.select(m.isnan(x), x, res)


def _gelu_tanh(m: _M, x: ir.Value) -> ir.Value:
    """0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715x^3))) computed as x*sigmoid(2u): no cancellation
    for x < 0.  Measured max abs error 5.2e-7; gelu_tanh(-inf) = -0, gelu_tanh(inf) = inf."""
    b = m.b
    u = b.fmul(m.f(2.0 * math.sqrt(2.0 / math.pi)), m.fma(b.fmul(m.f(0.044715), b.fmul(x, x)), x, x))
    res = b.fmul(x, _sigmoid(m, u))
    res = b.select(b.fcmp_ordered("==", x, m.f(-math.inf)), m.f(-0.0), res)
    return b.select(m.isnan(x), x, res)


# ---------------------------------------------------------------------------------------------
# pow (double precision inside)
# ---------------------------------------------------------------------------------------------


def _log2_d(m: _M, ax: ir.Value) -> ir.Value:
    """double log2(ax) for float ax > 0 finite (denormals included); ~1e-12 relative."""
    b = m.b
    tiny = b.fcmp_ordered("<", ax, m.f(2.0**-126))
    xs = b.select(tiny, b.fmul(ax, m.f(2.0**23)), ax)
    bits = m.bits(xs)
    tmp = b.sub(bits, m.i(0x3F3504F3))
    e = b.ashr(tmp, m.i(23))
    mant = m.from_bits(b.sub(bits, b.shl(e, m.i(23))))
    e = b.sub(e, b.select(tiny, m.i(23), m.i(0)))
    md = b.fpext(mant, m.ty(F64))
    s = b.fdiv(b.fsub(md, m.d(1.0)), b.fadd(md, m.d(1.0)))
    z = b.fmul(s, s)
    series = m.horner(z, [2.0 / (2 * i + 1) for i in range(8)], dbl=True)  # log(m) = s*series
    return m.fma(b.fmul(s, series), m.d(1.0 / math.log(2.0)), b.sitofp(e, m.ty(F64)))


def _exp2_d(m: _M, t: ir.Value) -> ir.Value:
    """double 2**t for t in [-160, 130] (caller clamps); ~1e-13 relative."""
    b = m.b
    n = m.call("rint", t)
    f = b.fmul(b.fsub(t, n), m.d(math.log(2.0)))
    p = m.horner(f, [1.0 / math.factorial(i) for i in range(12)], dbl=True)
    ni = b.fptosi(n, m.ty(I64))
    scale = b.bitcast(b.shl(b.add(ni, m.c(I64, 1023)), m.c(I64, 52)), m.ty(F64))
    return b.fmul(p, scale)


def _pow(m: _M, x: ir.Value, y: ir.Value) -> ir.Value:
    b = m.b
    ax = m.call("fabs", x)
    l2 = _log2_d(m, b.select(b.fcmp_ordered(">", ax, m.f(0.0)), ax, m.f(1.0)))
    l2 = b.select(b.fcmp_ordered("==", ax, m.f(0.0)), m.d(-math.inf), l2)
    l2 = b.select(b.fcmp_ordered("==", ax, m.f(math.inf)), m.d(math.inf), l2)
    t = b.fmul(b.fpext(y, m.ty(F64)), l2)
    t = b.select(b.fcmp_unordered("uno", t, t), m.d(0.0), t)
    tc = b.select(b.fcmp_ordered(">", t, m.d(-160.0)), t, m.d(-160.0))
    tc = b.select(b.fcmp_ordered("<", tc, m.d(130.0)), tc, m.d(130.0))
    r = b.fptrunc(_exp2_d(m, tc), m.ty(F32))
    # integer-ness and parity of y
    ay = m.call("fabs", y)
    y_int = b.fcmp_ordered("==", m.call("floor", y), y)  # true for +-inf, false for nan
    small = b.fcmp_ordered("<", ay, m.f(2.0**24))
    yi = b.fptosi(b.select(small, y, m.f(0.0)), m.ty(I32))
    odd = b.and_(b.and_(y_int, small), b.icmp_signed("!=", b.and_(yi, m.i(1)), m.i(0)))
    neg_x = b.icmp_signed("<", m.bits(x), m.i(0))
    r = b.select(b.and_(neg_x, odd), b.fneg(r), r)
    finite_neg = b.and_(b.fcmp_ordered("<", x, m.f(0.0)), b.fcmp_ordered(">", x, m.f(-math.inf)))
    r = b.select(b.and_(finite_neg, b.not_(y_int)), m.f(math.nan), r)
    r = b.select(b.or_(m.isnan(x), m.isnan(y)), m.f(math.nan), r)
    r = b.select(
        b.and_(b.fcmp_ordered("==", x, m.f(-1.0)), b.fcmp_ordered("==", ay, m.f(math.inf))), m.f(1.0), r
    )
    r = b.select(b.fcmp_ordered("==", x, m.f(1.0)), m.f(1.0), r)
    return b.select(b.fcmp_ordered("==", y, m.f(0.0)), m.f(1.0), r)


UNARY_OPS: dict[str, Callable[[_M, ir.Value], ir.Value]] = {
    "exp": _exp,
    "log": _log,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "sin": _sin,
    "cos": _cos,
    "erf": _erf,
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
}


def _check_f32(x: ir.Value, what: str) -> None:
    ty = x.type
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    if not isinstance(el, ir.FloatType):
        raise TypeError(f"{what}: expected float or <N x float>, got {ty}")


def emit_unary(builder: ir.IRBuilder, op: str, x: ir.Value) -> ir.Value:
    """Emit ``op(x)`` for a float32 scalar or vector ``x`` at the builder's position.

    Args:
        builder: positioned builder; only straight-line code is emitted (no new blocks).
        op: one of :data:`UNARY_OPS` (exp, log, tanh, sigmoid, sin, cos, erf, gelu, gelu_tanh).
        x: ``float`` or ``<N x float>``.

    Raises:
        KeyError: unknown ``op``.
        TypeError: ``x`` is not float32.
    """
    _check_f32(x, f"emit_unary({op!r})")
    try:
        fn = UNARY_OPS[op]
    except KeyError:
        raise KeyError(f"emit_unary: unknown op {op!r}; expected one of {sorted(UNARY_OPS)}") from None
    return fn(_M(builder, x), x)


def emit_pow(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Emit ``x ** y`` (C99/numpy ``pow`` special cases) for float32 scalars or vectors.

    Measured max error 0.5 ulp (double-precision log2/exp2 inside, one final rounding), including
    denormal results.  pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; a finite negative x with
    a non-integer y gives NaN; signs follow odd integer y.

    Raises:
        TypeError: ``x``/``y`` not float32 or of different types.
    """
    _check_f32(x, "emit_pow")
    _check_f32(y, "emit_pow")
    if x.type != y.type:
        raise TypeError(f"emit_pow: x and y types differ ({x.type} vs {y.type})")
    return _pow(_M(builder, x), x, y)
