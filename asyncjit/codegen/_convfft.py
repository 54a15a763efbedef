"""A float32 conv1d whose constant filters are a windowed DFT basis, computed by FFT.

Audio models export their short-time Fourier transform as a one-channel ``conv1d`` with a
constant weight: ``F = K/2 + 1`` rows ``win[n] cos(2 pi k n / K)`` (the real parts) followed by
``F`` rows ``s win[n] sin(2 pi k n / K)`` (the imaginary parts, ``s`` = -1 as ``torch.stft``'s
basis has it, or +1), hop ``stride``. As a convolution a frame costs ``2F x K`` multiply-adds
(``_folded_dft`` at the tensor level halves that); a radix-2 FFT of the windowed frame costs
about ``2 K log2 K``. ``dft_sign`` recognises such a weight from its values: every entry within
1.5 float32 ulps of the window (row 0, exact since ``cos 0 = 1``) times the exact cosine or sine,
so the transform and the convolution with the stored basis differ by rounding only (what
``docs/semantics.md`` states for this kernel).

**The kernel.** Frames are taken eight at a time, one per lane of a ``<8 x float>``, in the
order of ``y``'s flat ``[N, Lout]`` positions (a tail group repeats its last frame: the same
value stored twice at the same address). A group whose frames all lie inside ``x`` loads each
frame's eight consecutive samples as one vector and transposes 8x8 blocks (``_transpose8``);
one that reaches into the padding loads lane by lane, clamped into ``x``, and selects 0 there.
Each sample times its window value is stored at its bit-reversed index in scratch (the real
parts). The stages run two to a pass over scratch, whose stores bound them: spans 2 and 4 on
real values (writing the imaginary parts), then pairs of complex spans as vector butterflies
with twiddles from a table; the last pass (span ``K``, with ``K/2`` when the stages before are
odd in number) stores the ``F`` real and ``F`` imaginary rows into ``y [N, 2F, Lout]``. A frame
holding an inf or NaN gives NaN in every output (each sample's product with 0, summed while
loading, is added to every output), as a direct conv gives inf or NaN in each.
A lane's arithmetic does not depend on its neighbours, so every batch position and group gives
the same bits.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir

from ..graph._node import content_digest
from ._conv import _conv_entry
from ._convpanels import _align, _transpose8
from ._target import F32, I32, I64, for_range, i64, intrinsic, smax, smin, splat

__all__ = ["FFT_MAX_K", "FFT_MIN_K", "dft_sign", "emit_conv1d_fft", "fft_length", "fft_scratch_bytes"]

FFT_MIN_K = 16
"""Smallest frame: below it the folded matmuls (``_folded_dft``) leave the FFT little to save."""
FFT_MAX_K = 4096
"""Largest frame: its two scratch arrays of eight lanes (256 KiB) still fit in L2."""
_LANES = 8
_V8 = ir.VectorType(F32, _LANES)


def dft_sign(value: np.ndarray) -> int | None:
    """The sign ``s`` of a conv1d weight ``[2F, 1, K]`` whose rows are ``win cos`` then ``s win
    sin`` (``F = K/2 + 1``, ``K`` a power of two in ``[FFT_MIN_K, FFT_MAX_K]``), each entry within
    1.5 float32 ulps of the window's value; None for any other weight."""
    if value.dtype != np.float32 or value.ndim != 3 or value.shape[1] != 1:
        return None
    rows, k = value.shape[0], value.shape[2]
    if not fft_length(k) or rows != 2 * (k // 2 + 1):
        return None
    digest = content_digest(value)
    if digest in _SIGNS:
        return _SIGNS[digest]
    sign = _dft_sign(value)
    if len(_SIGNS) >= 256:
        _SIGNS.clear()
    _SIGNS[digest] = sign
    return sign


def fft_length(k: int) -> bool:
    """Whether the kernel takes frames of ``k``: a power of two in ``[FFT_MIN_K, FFT_MAX_K]``."""
    return FFT_MIN_K <= k <= FFT_MAX_K and not k & (k - 1)


_SIGNS: dict[str, int | None] = {}
"""Weights checked, by content digest: a model's basis is checked once however often its graph
is built, folded and compiled."""


def _dft_sign(value: np.ndarray) -> int | None:
    basis = value[:, 0, :].astype(np.float64)
    k = basis.shape[1]
    f = k // 2 + 1
    win = basis[0]
    if not np.isfinite(basis).all() or not np.abs(win).max() > 0:
        return None
    n = np.arange(k)
    tol = 1.5 * float(np.finfo(np.float32).eps) * np.abs(win)[None, :] + np.finfo(np.float32).tiny
    signs = {-1, 1}
    for lo in range(0, f, 64):  # 64 rows at a time: K = 4096 needs no 70 MB temporaries
        rows = np.arange(lo, min(lo + 64, f))
        angle = 2 * np.pi * ((rows[:, None] * n[None, :]) % k) / k  # exact angle indices
        if not (np.abs(basis[rows] - np.cos(angle) * win) <= tol).all():
            return None
        sin = np.sin(angle) * win
        signs = {s for s in signs if (np.abs(basis[f + rows] - s * sin) <= tol).all()}
        if not signs:
            return None
    return min(signs)  # both fit when the window is 0 wherever a sine is not: either sign, -1


def fft_scratch_bytes(k: int) -> int:
    """Scratch of the kernel for frames of ``k``: the real and imaginary parts of eight frames,
    and their non-finite marks."""
    return 64 + (2 * k + 1) * _LANES * 4


def _bitrev(k: int) -> np.ndarray:
    bits = k.bit_length() - 1
    out = np.zeros(k, dtype=np.int32)
    for i in range(k):
        out[i] = int(format(i, f"0{bits}b")[::-1], 2)
    return out


def _table(module: ir.Module, name: str, values: np.ndarray, ty: ir.Type) -> ir.GlobalVariable:
    """A constant array global (once per module)."""
    existing = module.globals.get(name)
    if existing is not None:
        assert isinstance(existing, ir.GlobalVariable)
        return existing
    arr = ir.ArrayType(ty, len(values))
    g = ir.GlobalVariable(module, arr, name)
    g.global_constant = True
    g.linkage = "internal"
    g.align = 64
    conv = float if ty == F32 else int
    g.initializer = ir.Constant(arr, [ir.Constant(ty, conv(v)) for v in values])
    return g


def emit_conv1d_fft(
    module: ir.Module, name: str, *, k: int, stride: int, pad_l: int, pad_r: int, sign: int
) -> ir.Function:
    """Add the kernel ``void name(x, w, y, scratch, N, L, Lout)`` (``_conv._conv_entry``'s ABI) for
    a conv1d of ``x [N, 1, L]`` with the ``[2F, 1, k]`` weight ``w`` that ``dft_sign`` gave
    ``sign`` for, into ``y [N, 2F, Lout]``. It reads ``x`` only inside its extents, ``w``'s first
    row, and at most ``fft_scratch_bytes(k)`` of ``scratch``.

    Raises:
        ValueError: ``k`` not a power of two in range, a stride below 1, negative pads or a sign
            other than +-1.
    """
    if not fft_length(k) or stride < 1 or min(pad_l, pad_r) < 0 or sign not in (-1, 1):
        raise ValueError(f"conv1d by FFT: bad parameters {k=} {stride=} {pad_l=} {pad_r=} {sign=}")
    fn, b = _conv_entry(module, name)  # returns at once when N or Lout is not positive
    x, w, y, scratch, n_arg, length, lout = fn.args
    fft = _Fft(b, k, scratch)
    total = b.mul(n_arg, lout)
    last = b.sub(total, i64(1))
    with for_range(b, i64(0), total, _LANES, name="group") as g:
        # each lane's frame (a tail repeats the last), its sample and its first sample's index
        frames = [smin(b, b.add(g, i64(lane)), last) for lane in range(_LANES)]
        samples = [b.sdiv(fr, lout) for fr in frames]
        positions = [b.srem(fr, lout) for fr in frames]
        starts = [b.sub(b.mul(p, i64(stride)), i64(pad_l)) for p in positions]
        rows = [b.mul(s, length) for s in samples]
        lo = functools.reduce(lambda u, v: smin(b, u, v), starts)
        hi = functools.reduce(lambda u, v: smax(b, u, v), starts)
        inside = b.and_(b.icmp_signed(">=", lo, i64(0)), b.icmp_signed("<=", b.add(hi, i64(k)), length))
        fft.clear_marks()
        with b.if_else(inside) as (then, otherwise):
            with then:
                fft.load_inside(x, w, [b.add(r, s) for r, s in zip(rows, starts, strict=True)])
            with otherwise:
                fft.load_clamped(x, w, rows, starts, length)
        fft.stages()
        cout = 2 * (k // 2 + 1)
        out = [b.add(b.mul(b.mul(s, i64(cout)), lout), p) for s, p in zip(samples, positions, strict=True)]
        fft.last_stage(y, out, frames, samples, lout, sign)
    b.ret_void()
    return fn


class _Fft:
    """The emitter of one group's transform: eight frames' real and imaginary parts in scratch
    (``<8 x float>`` per index), the bit-reversal and twiddle tables."""

    def __init__(self, b: ir.IRBuilder, k: int, scratch: ir.Value) -> None:
        module = b.module
        self.b, self.k = b, k
        self.rev = _table(module, f"asyncjit_fft_bitrev_{k}", _bitrev(k), I32)
        angles = 2 * np.pi * np.arange(k // 2) / k
        self.cos = _table(module, f"asyncjit_fft_cos_{k}", np.cos(angles).astype(np.float32), F32)
        self.sin = _table(module, f"asyncjit_fft_sin_{k}", np.sin(angles).astype(np.float32), F32)
        self.re = _align(b, scratch)
        self.im = b.gep(self.re, [i64(k)], source_etype=_V8)
        self.marks = b.gep(self.re, [i64(2 * k)], source_etype=_V8)
        self.fma = intrinsic(module, "llvm.fma.v8f32", _V8, [_V8, _V8, _V8])

    def load(self, arr: ir.Value, idx: ir.Value) -> ir.Value:
        return self.b.load(self.b.gep(arr, [idx], source_etype=_V8), typ=_V8, align=32)

    def store(self, v: ir.Value, arr: ir.Value, idx: ir.Value) -> None:
        self.b.store(v, self.b.gep(arr, [idx], source_etype=_V8), align=32)

    def _entry(self, table: ir.GlobalVariable, idx: ir.Value, ty: ir.Type) -> ir.Value:
        return self.b.load(self.b.gep(table, [i64(0), idx], source_etype=table.value_type), typ=ty)

    def _put(self, v: ir.Value, win: ir.Value, m: ir.Value, marks: ir.Value) -> ir.Value:
        """Sample ``m`` of the eight frames times its window value, at its bit-reversed index;
        ``marks`` plus that product times 0 (NaN where it is inf or NaN, else 0)."""
        b = self.b
        v = b.fmul(v, splat(b, win, _LANES))
        self.store(v, self.re, b.sext(self._entry(self.rev, m, I32), I64))
        return b.call(self.fma, [v, ir.Constant(_V8, [0.0] * _LANES), marks])

    def clear_marks(self) -> None:
        """No non-finite sample seen yet in this group's frames."""
        self.store(ir.Constant(_V8, [0.0] * _LANES), self.marks, i64(0))

    def load_inside(self, x: ir.Value, w: ir.Value, at: list[ir.Value]) -> None:
        """Frames wholly inside ``x`` starting at flat indices ``at``: eight samples of each frame
        as one vector, then 8x8 transposes into one vector per sample index."""
        b = self.b
        with for_range(b, i64(0), i64(self.k), _LANES, name="m8") as m0:
            rows = [b.load(b.gep(x, [b.add(a, m0)], source_etype=F32), typ=_V8, align=4) for a in at]
            win = b.load(b.gep(w, [m0], source_etype=F32), typ=_V8, align=4)
            marks = self.load(self.marks, i64(0))
            for i, col in enumerate(_transpose8(b, rows)):
                marks = self._put(col, b.extract_element(win, ir.Constant(I32, i)), b.add(m0, i64(i)), marks)
            self.store(marks, self.marks, i64(0))

    def load_clamped(
        self, x: ir.Value, w: ir.Value, rows: list[ir.Value], starts: list[ir.Value], length: ir.Value
    ) -> None:
        """Frames reaching into the padding: each lane's sample read at its index clamped into
        ``x``'s row (``rows`` the row's flat start, ``starts`` the frame's first index in it) and
        0 selected where the index falls outside."""
        b = self.b
        top, zero = b.sub(length, i64(1)), ir.Constant(F32, 0.0)
        with for_range(b, i64(0), i64(self.k), name="m") as m:
            vec = ir.Constant(_V8, None)
            for lane in range(_LANES):
                p = b.add(starts[lane], m)
                ok = b.and_(b.icmp_signed(">=", p, i64(0)), b.icmp_signed("<", p, length))
                at = b.add(rows[lane], smax(b, smin(b, p, top), i64(0)))
                v = b.load(b.gep(x, [at], source_etype=F32), typ=F32, align=4)
                vec = b.insert_element(vec, b.select(ok, v, zero), ir.Constant(I32, lane))
            win = b.load(b.gep(w, [m], source_etype=F32), typ=F32, align=4)
            self.store(self._put(vec, win, m, self.load(self.marks, i64(0))), self.marks, i64(0))

    def _twiddle(self, t: ir.Value, span: int) -> tuple[ir.Value, ir.Value]:
        """``exp(-2 pi i t / span)`` as splats ``(cos, sin)``: the tables' entry ``t k / span``."""
        b = self.b
        at = b.mul(t, i64(self.k // span))
        return splat(b, self._entry(self.cos, at, F32), _LANES), splat(
            b, self._entry(self.sin, at, F32), _LANES
        )

    def _times(
        self, v: tuple[ir.Value, ir.Value], tw: tuple[ir.Value, ir.Value]
    ) -> tuple[ir.Value, ir.Value]:
        """``(vr + i vi) (c - i s)`` with two fused multiply-adds."""
        b = self.b
        (vr, vi), (c, s) = v, tw
        return b.call(self.fma, [vr, c, b.fmul(vi, s)]), b.call(self.fma, [vi, c, b.fneg(b.fmul(vr, s))])

    def _butterfly(self, u: _Complex, v: _Complex, tw: _Complex) -> tuple[_Complex, _Complex]:
        b = self.b
        tr, ti = self._times(v, tw)
        return (b.fadd(u[0], tr), b.fadd(u[1], ti)), (b.fsub(u[0], tr), b.fsub(u[1], ti))

    @property
    def _odd(self) -> bool:
        """Whether the complex stages before the last (spans 8 .. k/2) are odd in number: the
        span ``k/2`` is then left to the last pass, which runs it with span ``k``."""
        return (self.k.bit_length() - 4) % 2 == 1

    def stages(self) -> None:
        """The stages of spans 2 .. k/2 in place, two per pass over scratch (a pass's four loads
        and stores per pair of elements bound a stage by stores): spans 2 and 4 on real inputs
        (their twiddles are 1 and -i, and the imaginary parts' zeros are written there), then
        complex pairs of spans ``(L, 2L)``; an odd one out (span ``k/2``) is the last pass's."""
        b, k, re, im = self.b, self.k, self.re, self.im
        zero = ir.Constant(_V8, [0.0] * _LANES)
        with for_range(b, i64(0), i64(k), 4, name="s4") as i:
            at = [b.add(i, i64(d)) for d in range(4)]
            x0, x1, x2, x3 = (self.load(re, a) for a in at)
            sa, da, sc, dc = b.fadd(x0, x1), b.fsub(x0, x1), b.fadd(x2, x3), b.fsub(x2, x3)
            for a, r, m in zip(
                at, (b.fadd(sa, sc), da, b.fsub(sa, sc), da), (zero, b.fneg(dc), zero, dc), strict=True
            ):
                self.store(r, re, a)
                self.store(m, im, a)
        span = 8
        while span < (k // 2 if self._odd else k):
            fused = span * 4 <= k
            width = 2 * span if fused else span
            half = span // 2
            offsets = (0, half, span, span + half) if fused else (0, half)
            with (
                for_range(b, i64(0), i64(k), width, name=f"s{span}") as start,
                for_range(b, i64(0), i64(half), name=f"j{span}") as j,
            ):
                at = [b.add(b.add(start, j), i64(d)) for d in offsets]
                z = [(self.load(re, a), self.load(im, a)) for a in at]
                tw = self._twiddle(j, span)
                z[0], z[1] = self._butterfly(z[0], z[1], tw)
                if fused:
                    z[2], z[3] = self._butterfly(z[2], z[3], tw)
                    z[0], z[2] = self._butterfly(z[0], z[2], self._twiddle(j, 2 * span))
                    z[1], z[3] = self._butterfly(z[1], z[3], self._twiddle(b.add(j, i64(half)), 2 * span))
                for a, (r, m) in zip(at, z, strict=True):
                    self.store(r, re, a)
                    self.store(m, im, a)
            span = width * 2 if fused else span * 2

    def last_stage(
        self, y: ir.Value, out: list[ir.Value], frames: list[ir.Value], samples: list[ir.Value],
        lout: ir.Value, sign: int,
    ) -> None:  # fmt: skip
        """The stage of span ``k`` for the ``F = k/2 + 1`` outputs kept: row ``j`` of ``y`` the
        real part, row ``F + j`` the imaginary part times ``-sign`` (``out``: each lane's output
        index in row 0). Eight lanes of one sample are eight neighbouring outputs of a row,
        stored as one vector; two runs of four (``Lout`` 4, Silero VAD's frames per chunk) as
        two; any other group lane by lane (a tail group's lanes past the end repeat the last
        frame, so they are not neighbours)."""
        b = self.b
        full = b.icmp_signed("==", b.sub(frames[-1], frames[0]), i64(_LANES - 1))
        one = b.and_(full, b.icmp_signed("==", samples[0], samples[-1]))
        fours = b.and_(
            b.icmp_signed("==", samples[0], samples[3]), b.icmp_signed("==", samples[4], samples[-1])
        )
        with b.if_else(one) as (then, otherwise):
            with then:
                self._last_stage(_RowStore(b, y, out, lout, (0,), _LANES), sign)
            with otherwise, b.if_else(b.and_(full, fours)) as (then2, otherwise2):
                with then2:
                    self._last_stage(_RowStore(b, y, out, lout, (0, 4), 4), sign)
                with otherwise2:
                    self._last_stage(_RowStore(b, y, out, lout, tuple(range(_LANES)), 1), sign)

    def _last_stage(self, store: _RowStore, sign: int) -> None:
        b, half = self.b, self.k // 2
        f = half + 1
        marks = self.load(self.marks, i64(0))

        def put(v: ir.Value, row: ir.Value) -> None:
            # a frame holding an inf or NaN gives NaN in every row, as a direct conv gives
            # non-finite ones (the real first stages skip the products by 0 that would)
            store(b.fadd(v, marks), row)

        def imag(v: ir.Value) -> ir.Value:
            return b.fneg(v) if sign > 0 else v

        def at(i: ir.Value) -> _Complex:
            return self.load(self.re, i), self.load(self.im, i)

        if not self._odd:
            with for_range(b, i64(0), i64(half), name="last") as j:
                (sr, si), _ = self._butterfly(at(j), at(b.add(j, i64(half))), self._twiddle(j, self.k))
                put(sr, j)
                put(imag(si), b.add(j, i64(f)))
            # the Nyquist bin: twiddle 1, the difference
            a, c = at(i64(0)), at(i64(half))
            put(b.fsub(a[0], c[0]), i64(half))
            put(imag(b.fsub(a[1], c[1])), i64(f + half))
            return
        # spans k/2 and k in one pass: for j < k/4, elements j, j + k/4, j + k/2 and j + 3k/4
        # give bins j and j + k/4 (the upper halves' bins mirror these); bin k/2 from j = 0
        quarter = half // 2

        def two_stages(j: ir.Value) -> list[_Complex]:
            z = [at(b.add(j, i64(d))) for d in (0, quarter, half, half + quarter)]
            tw = self._twiddle(j, half)
            z[0], z[1] = self._butterfly(z[0], z[1], tw)
            z[2], z[3] = self._butterfly(z[2], z[3], tw)
            return z

        with for_range(b, i64(0), i64(quarter), name="last") as j:
            z = two_stages(j)
            (sr, si), _ = self._butterfly(z[0], z[2], self._twiddle(j, self.k))
            put(sr, j)
            put(imag(si), b.add(j, i64(f)))
            j2 = b.add(j, i64(quarter))
            (sr, si), _ = self._butterfly(z[1], z[3], self._twiddle(j2, self.k))
            put(sr, j2)
            put(imag(si), b.add(j2, i64(f)))
        z = two_stages(i64(0))
        put(b.fsub(z[0][0], z[2][0]), i64(half))
        put(imag(b.fsub(z[0][1], z[2][1])), i64(f + half))


_Complex = tuple[ir.Value, ir.Value]


class _RowStore:
    """Stores of an 8-lane vector into row ``row`` of ``y``: runs of ``width`` lanes starting at
    ``firsts``, each run's outputs neighbours in ``y`` from its first lane's index ``out``."""

    def __init__(
        self,
        b: ir.IRBuilder,
        y: ir.Value,
        out: list[ir.Value],
        lout: ir.Value,
        firsts: tuple[int, ...],
        width: int,
    ) -> None:
        self.b, self.y, self.out, self.lout, self.firsts, self.width = b, y, out, lout, firsts, width

    def __call__(self, v: ir.Value, row: ir.Value) -> None:
        b = self.b
        off = b.mul(row, self.lout)
        for first in self.firsts:
            ptr = b.gep(self.y, [b.add(self.out[first], off)], source_etype=F32)
            if self.width == 1:
                b.store(b.extract_element(v, ir.Constant(I32, first)), ptr, align=4)
            elif self.width == _LANES:
                b.store(v, ptr, align=4)
            else:
                lanes = ir.Constant(ir.VectorType(I32, self.width), list(range(first, first + self.width)))
                b.store(b.shuffle_vector(v, v, lanes), ptr, align=4)
