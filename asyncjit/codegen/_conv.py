"""float32 conv1d (PyTorch semantics: cross-correlation, zero padding, groups, dilation) as LLVM IR.

Emitted function::

    void name(float* x, float* w, float* y, i8* scratch, i64 N, i64 L, i64 Lout)

with ``x [N, cin, L]``, ``w [cout, cin/groups, k]``, ``y [N, cout, Lout]``, all contiguous, and
``Lout = (L + pad_l + pad_r - dilation*(k-1) - 1)//stride + 1`` computed by the caller.

Strategy (chosen when emitting; the Silero VAD layers have lengths 1..4 and 64..258 channels, so
the work is all in the channel contraction):

* ``cin/groups > 1`` (or 8+ outputs per group): im2col into ``scratch`` then the tiled matmul
  of :mod:`._matmul`, one of:

  - *per sample* (``Lout >= 32``, or N == 1 with more than 8 columns): each sample is one batch
    of ``W_g [cout_g, cin_g*k] @ X_col [cin_g*k, Lout]``, which writes ``y`` directly;
  - *transposed* (at most 8 columns; or short outputs over several samples with at most 32
    columns, the matmul's dot path, or with an ``X_col`` too big for its direct driver): the
    columns of all N samples as rows, ``X_col^T [N*Lout, cin_g*k]`` (one contiguous row per
    output position, the valid tap range computed once per position), ``Y^T = X_col^T @
    W_g^T``, then a vectorized scatter into ``y`` (Lout 1, 2, 4);
  - *concatenated* (4 <= Lout < 32, in between): ``X_col [cin_g*k, N*Lout]``, whose small size
    lets the direct driver read it without packing the weights, then a scatter into ``y``.

  Measured on the Silero VAD layers: at N = 256 the transposed form is 1.5-2x faster than the
  concatenated one (cheaper im2col and scatter; the matmul itself runs at the same rate); at
  N = 16..32 the concatenated one wins (no weight packing).  A 1x1 conv without padding skips
  im2col (B is ``x`` itself).
* ``cin/groups == 1`` and fewer than 8 outputs per group (depthwise, as in conformer conv
  modules): a direct kernel; each tap is a
  vectorised axpy over the in-bounds output range (no per-element padding tests).
"""

from __future__ import annotations

from llvmlite import ir

from ._matmul import emit_matmul, matmul_scratch_bytes
from ._matmul_tile import matmul_tiling
from ._target import F32, I1, I32, I64, PTR, for_range, i64, new_function, smax, smin, vector_width

__all__ = ["conv1d_output_length", "conv1d_scratch_bytes", "emit_conv1d", "takes_kn_weight"]

# Outputs at least this long are run as one matmul batch per sample (direct writes to y).
_BATCHED_MIN_LOUT = 32
# Up to this many output columns (N*Lout) the product is computed transposed (see emit_conv1d).
_NARROW_MAX_COLS = 8


def conv1d_output_length(l_in: int, *, k: int, stride: int, dilation: int, pad_l: int, pad_r: int) -> int:
    """PyTorch's output length; may be <= 0 for inputs shorter than the receptive field."""
    return (l_in + pad_l + pad_r - dilation * (k - 1) - 1) // stride + 1


def _check(
    cin: int, cout: int, k: int, stride: int, dilation: int, groups: int, pad_l: int, pad_r: int
) -> None:
    if min(cin, cout, k, stride, dilation, groups) < 1:
        raise ValueError(
            f"conv1d: cin, cout, k, stride, dilation, groups must be >= 1, got "
            f"{dict(cin=cin, cout=cout, k=k, stride=stride, dilation=dilation, groups=groups)}"
        )
    if pad_l < 0 or pad_r < 0:
        raise ValueError(f"conv1d: padding must be >= 0, got pad_l={pad_l}, pad_r={pad_r}")
    if cin % groups or cout % groups:
        raise ValueError(f"conv1d: groups={groups} must divide cin={cin} and cout={cout}")


def _use_direct(cin_g: int, cout_g: int) -> bool:
    """Direct kernel for depthwise-like groups: a matmul with cin_g*k rows and < 8 output
    channels per group would fill less than one micro-tile.  (STFT as conv, cin=1 cout=258,
    still goes through im2col + matmul: measured 20x faster than the direct loop.)"""
    return cin_g == 1 and cout_g < 8


_KN_WIDE_COLS = 64
"""Above this many output columns (batch x length, at their bounds) a weight with ``cout`` a
multiple of 64 but not of 128 keeps ``[cout, cin/groups, k]``: see ``takes_kn_weight``."""


def takes_kn_weight(cin_g: int, cout_g: int, groups: int, lout_max: int, cols_max: int) -> bool:
    """Whether the kernel reads a constant weight stored ``[cin/groups, k, cout]`` (``w_kn``;
    ``passes.fold_constants`` stores it so): outputs shorter than ``_BATCHED_MIN_LOUT`` on the
    im2col path. Every call then takes the transposed product ``X_col^T @ W^T`` with ``W^T``
    read as rows of ``cout`` (the direct or packed driver) instead of through the dot driver on
    ``W``'s rows: 4 x 387 @ 387 x 128 of a cache-resident weight 5.5 us against 8.8.

    Not for long outputs (their per-sample product reads the weight as A, which this layout
    makes strided: 0.83-0.97x at 100-300 outputs), nor for rows of ``cout`` 256 bytes apart
    (64, 192, ... channels) under many output columns: the direct driver then reads B strips
    whose rows fall in a quarter of L1's sets (``benchmarks/kernels.py --conv``, 256 streams:
    128->64 k3 s2 0.71x, 64->64 0.85x, where every other layer gained)."""
    cout = cout_g * groups
    aliased = cout % 64 == 0 and cout % 128 != 0 and cols_max > _KN_WIDE_COLS
    return not _use_direct(cin_g, cout_g) and lout_max < _BATCHED_MIN_LOUT and not aliased


def _is_pointwise(k: int, stride: int, pad_l: int, pad_r: int) -> bool:
    return k == 1 and stride == 1 and pad_l == 0 and pad_r == 0


def conv1d_scratch_bytes(
    *,
    cin: int,
    cout: int,
    k: int,
    stride: int,
    dilation: int,
    groups: int,
    n_max: int,
    l_max: int,
    pad_l: int,
    pad_r: int,
) -> int:
    """Bytes of ``scratch`` the kernel needs for ``N <= n_max`` and ``L <= l_max``.

    ``pad_l``/``pad_r`` are required (beyond the original ABI sketch): padding lengthens the
    output and so the im2col buffer; no bound is safe without them.
    """
    _check(cin, cout, k, stride, dilation, groups, pad_l, pad_r)
    cin_g, cout_g = cin // groups, cout // groups
    if _use_direct(cin_g, cout_g) or _is_pointwise(k, stride, pad_l, pad_r):
        return 0
    lout_max = max(
        conv1d_output_length(l_max, k=k, stride=stride, dilation=dilation, pad_l=pad_l, pad_r=pad_r), 0
    )
    kk = cin_g * k
    cols = max(n_max, 0) * lout_max
    xcol = (kk * cols + 15) // 16 * 16
    ctmp = (cout_g * cols + 15) // 16 * 16
    # the wide product (cout_g x cols) or, for few columns, the transposed one (cols x cout_g)
    mm = max(matmul_scratch_bytes(cout_g, max(cols, 1), kk), matmul_scratch_bytes(max(cols, 1), cout_g, kk))
    return 64 + 4 * (xcol + ctmp) + mm


def _valid_range(
    b: ir.IRBuilder, off: ir.Value, length: ir.Value, stride: int, lout: ir.Value
) -> tuple[ir.Value, ir.Value]:
    """Output positions ``l`` in ``[lo, hi)`` with ``0 <= l*stride + off < length``, within [0, lout)."""
    s = i64(stride)
    neg = b.sub(i64(0), off)  # need l*s >= -off
    lo = b.select(b.icmp_signed("<=", neg, i64(0)), i64(0), b.sdiv(b.add(neg, i64(stride - 1)), s))
    room = b.sub(length, off)  # need l*s < length - off
    hi = b.select(b.icmp_signed("<=", room, i64(0)), i64(0), b.sdiv(b.add(room, i64(stride - 1)), s))
    lo = smin(b, lo, lout)
    hi = smax(b, smin(b, hi, lout), lo)
    return lo, hi


def _conv_entry(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    """The public conv ABI ``void(x, w, y, scratch, N, L, Lout)``, returning early when N or Lout
    is not positive; the builder is left in the body."""
    args: list[tuple[str, ir.Type]] = [
        ("x", PTR),
        ("w", PTR),
        ("y", PTR),
        ("scratch", PTR),
        ("N", I64),
        ("L", I64),
        ("Lout", I64),
    ]
    fn, b = new_function(module, name, args, noalias=("x", "w", "y", "scratch"))
    n_arg, lout = fn.args[4], fn.args[6]
    with b.if_then(b.or_(b.icmp_signed("<=", n_arg, i64(0)), b.icmp_signed("<=", lout, i64(0)))):
        b.ret_void()
    return fn, b


def _emit_direct(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    k: int,
    stride: int,
    dilation: int,
    groups: int,
    pad_l: int,
) -> ir.Function:
    fn, b = _conv_entry(module, name)
    x, w, y, _scratch, n_arg, l_arg, lout = fn.args
    cin_g, cout_g = cin // groups, cout // groups
    zero = ir.Constant(F32, 0.0)
    with for_range(b, i64(0), n_arg, name="n") as n, for_range(b, i64(0), i64(cout), name="co") as co:
        g = b.sdiv(co, i64(cout_g))
        yrow = b.gep(y, [b.mul(b.add(b.mul(n, i64(cout)), co), lout)], source_etype=F32)
        with for_range(b, i64(0), lout, name="z") as l_:
            b.store(zero, b.gep(yrow, [l_], source_etype=F32), align=4)
        with for_range(b, i64(0), i64(cin_g), name="ci") as ci:
            chan = b.add(b.mul(g, i64(cin_g)), ci)
            xrow = b.gep(x, [b.mul(b.add(b.mul(n, i64(cin)), chan), l_arg)], source_etype=F32)
            wrow = b.gep(w, [b.mul(b.add(b.mul(co, i64(cin_g)), ci), i64(k))], source_etype=F32)
            with for_range(b, i64(0), i64(k), name="t") as t:
                wt = b.load(b.gep(wrow, [t], source_etype=F32), typ=F32, align=4)
                off = b.sub(b.mul(t, i64(dilation)), i64(pad_l))
                lo, hi = _valid_range(b, off, l_arg, stride, lout)
                with for_range(b, lo, hi, name="l") as l_:
                    src = b.add(b.mul(l_, i64(stride)), off)
                    xv = b.load(b.gep(xrow, [src], source_etype=F32), typ=F32, align=4)
                    yp = b.gep(yrow, [l_], source_etype=F32)
                    acc = b.load(yp, typ=F32, align=4)
                    b.store(
                        b.fadd(acc, b.fmul(wt, xv, flags=("contract",)), flags=("contract",)), yp, align=4
                    )
    b.ret_void()
    return fn


def _emit_im2col(
    module: ir.Module, name: str, *, cin: int, k: int, stride: int, dilation: int, pad_l: int
) -> ir.Function:
    """``dst[n*sn + (ci*k + t)*sk + l*sl] = x[n, c0 + ci, l*stride + t*dilation - pad_l]`` or 0."""
    args: list[tuple[str, ir.Type]] = [
        ("x", PTR),
        ("dst", PTR),
        ("N", I64),
        ("L", I64),
        ("Lout", I64),
        ("c0", I64),
        ("cin_g", I64),
        ("sn", I64),
        ("sk", I64),
        ("sl", I64),
    ]
    fn, b = new_function(module, name, args, noalias=("x", "dst"), inline="noinline")
    x, dst, n_arg, l_arg, lout, c0, cin_g, sn, sk, sl = fn.args
    zero = ir.Constant(F32, 0.0)
    with for_range(b, i64(0), n_arg, name="n") as n, for_range(b, i64(0), cin_g, name="ci") as ci:
        xrow = b.gep(x, [b.mul(b.add(b.mul(n, i64(cin)), b.add(c0, ci)), l_arg)], source_etype=F32)
        with for_range(b, i64(0), i64(k), name="t") as t:
            row = b.add(b.mul(n, sn), b.mul(b.add(b.mul(ci, i64(k)), t), sk))
            drow = b.gep(dst, [row], source_etype=F32)
            off = b.sub(b.mul(t, i64(dilation)), i64(pad_l))
            lo, hi = _valid_range(b, off, l_arg, stride, lout)
            with for_range(b, i64(0), lo, name="zl") as l_:
                b.store(zero, b.gep(drow, [b.mul(l_, sl)], source_etype=F32), align=4)
            with for_range(b, lo, hi, name="l") as l_:
                xv = b.load(
                    b.gep(xrow, [b.add(b.mul(l_, i64(stride)), off)], source_etype=F32), typ=F32, align=4
                )
                b.store(xv, b.gep(drow, [b.mul(l_, sl)], source_etype=F32), align=4)
            with for_range(b, hi, lout, name="zh") as l_:
                b.store(zero, b.gep(drow, [b.mul(l_, sl)], source_etype=F32), align=4)
    b.ret_void()
    return fn


def _emit_im2col_rows(
    module: ir.Module, name: str, *, cin: int, k: int, stride: int, dilation: int, pad_l: int
) -> ir.Function:
    """``dst[(n*Lout + l)*kk + ci*k + t] = x[n, c0 + ci, l*stride + t*dilation - pad_l]`` or 0.

    Row-major columns (one contiguous ``kk = cin_g*k`` row per output position), so the product
    is ``Y^T = X_col^T @ W_g^T``.  The valid tap range is computed once per position, not per
    (sample, channel, tap) row; short kernels (``k <= 8``) are unrolled with clamped loads and
    selects (no branches), long ones copy the valid range (contiguous for ``dilation == 1``).
    """
    args: list[tuple[str, ir.Type]] = [
        ("x", PTR),
        ("dst", PTR),
        ("N", I64),
        ("L", I64),
        ("Lout", I64),
        ("c0", I64),
        ("cin_g", I64),
    ]
    fn, b = new_function(module, name, args, noalias=("x", "dst"), inline="noinline")
    x, dst, n_arg, l_arg, lout, c0, cin_g = fn.args
    zero = ir.Constant(F32, 0.0)
    kk = b.mul(cin_g, i64(k))
    last = b.sub(l_arg, i64(1))
    with for_range(b, i64(0), n_arg, name="n") as n, for_range(b, i64(0), lout, name="l") as l_:
        off = b.sub(b.mul(l_, i64(stride)), i64(pad_l))
        drow = b.gep(dst, [b.mul(b.add(b.mul(n, lout), l_), kk)], source_etype=F32)
        xbase = b.mul(b.add(b.mul(n, i64(cin)), c0), l_arg)
        if k <= 8:
            taps = []
            for t in range(k):
                pos = b.add(off, i64(t * dilation))
                valid = b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, l_arg))
                clamped = smax(b, smin(b, pos, last), i64(0))
                taps.append((valid, clamped))
            with for_range(b, i64(0), cin_g, name="ci") as ci:
                xrow = b.gep(x, [b.add(xbase, b.mul(ci, l_arg))], source_etype=F32)
                dci = b.gep(drow, [b.mul(ci, i64(k))], source_etype=F32)
                for t, (valid, clamped) in enumerate(taps):
                    v = b.load(b.gep(xrow, [clamped], source_etype=F32), typ=F32, align=4)
                    b.store(b.select(valid, v, zero), b.gep(dci, [i64(t)], source_etype=F32), align=4)
        else:
            # taps t with 0 <= off + t*dilation < L: t in [lo, hi)
            d = i64(dilation)
            neg = b.sub(i64(0), off)
            lo = b.select(b.icmp_signed("<=", neg, i64(0)), i64(0), b.sdiv(b.add(neg, i64(dilation - 1)), d))
            room = b.sub(l_arg, off)
            hi = b.select(
                b.icmp_signed("<=", room, i64(0)), i64(0), b.sdiv(b.add(room, i64(dilation - 1)), d)
            )
            lo = smin(b, lo, i64(k))
            hi = smax(b, smin(b, hi, i64(k)), lo)
            with for_range(b, i64(0), cin_g, name="ci") as ci:
                xrow = b.gep(x, [b.add(b.add(xbase, b.mul(ci, l_arg)), off)], source_etype=F32)
                dci = b.gep(drow, [b.mul(ci, i64(k))], source_etype=F32)
                with for_range(b, i64(0), lo, name="zl") as t:
                    b.store(zero, b.gep(dci, [t], source_etype=F32), align=4)
                with for_range(b, lo, hi, name="t") as t:
                    v = b.load(b.gep(xrow, [b.mul(t, d)], source_etype=F32), typ=F32, align=4)
                    b.store(v, b.gep(dci, [t], source_etype=F32), align=4)
                with for_range(b, hi, i64(k), name="zh") as t:
                    b.store(zero, b.gep(dci, [t], source_etype=F32), align=4)
    b.ret_void()
    return fn


def _interleave(b: ir.IRBuilder, vs: list[ir.Value], width: int) -> ir.Value:
    """``out[c*len(vs) + l] = vs[l][c]`` for a power-of-two number of ``width``-lane vectors."""
    if len(vs) == 1:
        return vs[0]
    x, y = _interleave(b, vs[0::2], width), _interleave(b, vs[1::2], width)
    w = width * len(vs) // 2
    mask = [i // 2 + (w if i % 2 else 0) for i in range(2 * w)]
    return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, 2 * w), mask))


def _emit_unscatter(
    b: ir.IRBuilder,
    ctmp: ir.Value,
    y: ir.Value,
    n_arg: ir.Value,
    lout: ir.Value,
    g: ir.Value,
    *,
    cout: int,
    cout_g: int,
) -> None:
    """``y[n, g*cout_g + co, l] = ctmp[(n*Lout + l)*cout_g + co]``: the transposed product back
    into ``[N, cout, Lout]``.  For Lout in {1, 2, 4} (the Silero VAD layers) ``VW`` channels at a
    time: Lout contiguous vector loads interleaved by shuffles into one contiguous store; other
    lengths, and the channel remainder, element by element."""
    vw = vector_width()
    full = cout_g // vw * vw

    def generic() -> None:
        with (
            for_range(b, i64(0), n_arg, name="tn") as n,
            for_range(b, i64(0), i64(cout_g), name="tc") as co,
        ):
            dst_row = b.add(b.mul(n, i64(cout)), b.add(b.mul(g, i64(cout_g)), co))
            dst = b.gep(y, [b.mul(dst_row, lout)], source_etype=F32)
            with for_range(b, i64(0), lout, name="tl") as l_:
                src = b.add(b.mul(b.add(b.mul(n, lout), l_), i64(cout_g)), co)
                v = b.load(b.gep(ctmp, [src], source_etype=F32), typ=F32, align=4)
                b.store(v, b.gep(dst, [l_], source_etype=F32), align=4)

    def fast(lo: int) -> None:
        vty = ir.VectorType(F32, vw)
        with for_range(b, i64(0), n_arg, name=f"vn{lo}") as n:
            dst = b.gep(
                y, [b.mul(b.add(b.mul(n, i64(cout)), b.mul(g, i64(cout_g))), i64(lo))], source_etype=F32
            )
            src = b.gep(ctmp, [b.mul(n, i64(lo * cout_g))], source_etype=F32)
            with for_range(b, i64(0), i64(full), vw, name=f"vc{lo}") as co:
                vs = [
                    b.load(b.gep(src, [b.add(i64(l_ * cout_g), co)], source_etype=F32), typ=vty, align=4)
                    for l_ in range(lo)
                ]
                b.store(_interleave(b, vs, vw), b.gep(dst, [b.mul(co, i64(lo))], source_etype=F32), align=4)
            with for_range(b, i64(full), i64(cout_g), name=f"vt{lo}") as co:
                for l_ in range(lo):
                    v = b.load(b.gep(src, [b.add(i64(l_ * cout_g), co)], source_etype=F32), typ=F32, align=4)
                    b.store(v, b.gep(dst, [b.add(b.mul(co, i64(lo)), i64(l_))], source_etype=F32), align=4)

    def dispatch(options: list[int]) -> None:
        if not options:
            generic()
            return
        with b.if_else(b.icmp_signed("==", lout, i64(options[0]))) as (hit, miss):
            with hit:
                fast(options[0])
            with miss:
                dispatch(options[1:])

    dispatch([1, 2, 4])


def emit_conv1d(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    k: int,
    stride: int,
    dilation: int,
    groups: int,
    pad_l: int,
    pad_r: int,
    w_kn: bool = False,
) -> ir.Function:
    """Add the conv1d kernel ``name`` (see the module docstring) to ``module``.

    Args:
        module: module to add the kernel and its helpers (``name.*``) to.
        name: symbol of the kernel (internal linkage).
        cin, cout, k, stride, dilation, groups, pad_l, pad_r: the static conv parameters.
        w_kn: ``w`` is stored ``[cin/groups, k, cout]`` (``takes_kn_weight``), not
            ``[cout, cin/groups, k]``.

    Returns:
        The kernel; it touches only ``x``/``w``/``y`` inside their extents and at most
        :func:`conv1d_scratch_bytes` of ``scratch``.

    Raises:
        ValueError: for non-positive sizes, negative padding or groups not dividing the channels.
    """
    _check(cin, cout, k, stride, dilation, groups, pad_l, pad_r)
    cin_g, cout_g = cin // groups, cout // groups
    if _use_direct(cin_g, cout_g):
        if w_kn:
            raise ValueError(
                f"conv1d: the [cin/groups, k, cout] weight layout needs the im2col path, {cin_g=} {cout_g=}"
            )
        return _emit_direct(
            module,
            name,
            cin=cin,
            cout=cout,
            k=k,
            stride=stride,
            dilation=dilation,
            groups=groups,
            pad_l=pad_l,
        )
    kk = cin_g * k
    mm = emit_matmul(module, f"{name}.matmul", m=cout_g, k=kk)
    fn, b = _conv_entry(module, name)
    x, w, y, scratch, n_arg, l_arg, lout = fn.args
    # group g's weights as the matmul's A [cout_g, kk] (row, column strides) and B [kk, cout_g]
    a_rs, a_cs = (i64(1), i64(cout)) if w_kn else (i64(kk), i64(1))
    b_rs, b_cs = (i64(cout), i64(1)) if w_kn else (i64(1), i64(kk))
    w_group = cout_g if w_kn else cout_g * kk

    if _is_pointwise(k, stride, pad_l, pad_r):
        # B is x itself: per sample and group, [cin_g, L] with row stride L.
        with for_range(b, i64(0), i64(groups), name="g") as g:
            b.call(
                mm,
                [
                    b.gep(w, [b.mul(g, i64(w_group))], source_etype=F32),
                    b.gep(x, [b.mul(g, b.mul(i64(cin_g), l_arg))], source_etype=F32),
                    b.gep(y, [b.mul(g, b.mul(i64(cout_g), lout))], source_etype=F32),
                    scratch,
                    n_arg,
                    i64(cout_g),
                    lout,
                    i64(kk),
                    i64(0),
                    a_rs,
                    a_cs,
                    b.mul(i64(cin), l_arg),
                    l_arg,
                    i64(1),
                    b.mul(i64(cout), lout),
                    lout,
                ],
            )
        b.ret_void()
        return fn

    im2col = _emit_im2col(
        module, f"{name}.im2col", cin=cin, k=k, stride=stride, dilation=dilation, pad_l=pad_l
    )
    cols = b.mul(n_arg, lout)
    base = b.and_(b.add(b.ptrtoint(scratch, I64), i64(63)), i64(-64))
    xcol = b.inttoptr(base, PTR)
    xcol_elems = b.and_(b.add(b.mul(i64(kk), cols), i64(15)), i64(-16))
    ctmp = b.gep(xcol, [xcol_elems], source_etype=F32)
    ctmp_elems = b.and_(b.add(b.mul(i64(cout_g), cols), i64(15)), i64(-16))
    mm_scratch = b.gep(ctmp, [ctmp_elems], source_etype=F32)
    batched = b.or_(b.icmp_signed(">=", lout, i64(_BATCHED_MIN_LOUT)), b.icmp_signed("==", n_arg, i64(1)))
    # The transposed product for few columns (the dot path, no packing) and for wide problems
    # whose X_col is too big for the direct driver anyway (then packing happens either way and
    # the row-major im2col and vector scatter are cheaper); in between, the column-major
    # X_col feeds the direct driver (no packing of the weights): measured at N = 16..32 on
    # the Silero VAD layers, STFT 97 vs 128 us at N = 16.
    not_batched = b.xor(batched, ir.Constant(I1, 1))
    few_cols = b.icmp_signed("<=", cols, i64(matmul_tiling().dot_m_max))
    big_xcol = b.icmp_signed(">", b.mul(cols, i64(kk)), i64(matmul_tiling().direct_b_max))
    # ... and for Lout < 4, where the column-major im2col's per-row range checks dominate (64->64
    # k3 s2 at N = 256: 289 vs 107-134 us).
    short_rows = b.icmp_signed("<", lout, i64(4))
    narrow = b.or_(
        b.icmp_signed("<=", cols, i64(_NARROW_MAX_COLS)),
        b.and_(not_batched, b.or_(b.or_(few_cols, big_xcol), short_rows)),
    )
    if w_kn:  # the weight as B in rows of cout: the transposed product at any batch
        narrow = ir.Constant(I1, 1)
    im2col_rows = _emit_im2col_rows(
        module, f"{name}.im2col_rows", cin=cin, k=k, stride=stride, dilation=dilation, pad_l=pad_l
    )
    mm_t = emit_matmul(module, f"{name}.matmul_t", n=cout_g, k=kk)

    with for_range(b, i64(0), i64(groups), name="g") as g:
        wg = b.gep(w, [b.mul(g, i64(w_group))], source_etype=F32)
        c0 = b.mul(g, i64(cin_g))
        with b.if_else(narrow) as (transposed, wide):
            with transposed:
                # Short outputs: compute Y^T = X_col^T @ W_g^T so the long dimension (cout) is
                # the matmul's N; A rows and W rows are both contiguous in k (the dot-product
                # path for <= 8 columns, measured 4-8x faster than 4-wide tiles; packed above).
                b.call(im2col_rows, [x, xcol, n_arg, l_arg, lout, c0, i64(cin_g)])
                b.call(
                    mm_t,
                    [
                        xcol,
                        wg,
                        ctmp,
                        mm_scratch,
                        i64(1),
                        cols,
                        i64(cout_g),
                        i64(kk),
                        i64(0),
                        i64(kk),
                        i64(1),
                        i64(0),
                        b_rs,
                        b_cs,
                        i64(0),
                        i64(cout_g),
                    ],
                )
                _emit_unscatter(b, ctmp, y, n_arg, lout, g, cout=cout, cout_g=cout_g)
            with wide, b.if_else(batched) as (per_sample, concat):
                with per_sample:
                    # x_col [n][kk][l]; one matmul batch per sample writes y directly.
                    b.call(
                        im2col,
                        [x, xcol, n_arg, l_arg, lout, c0, i64(cin_g), b.mul(i64(kk), lout), lout, i64(1)],
                    )
                    b.call(
                        mm,
                        [
                            wg,
                            xcol,
                            b.gep(y, [b.mul(g, b.mul(i64(cout_g), lout))], source_etype=F32),
                            mm_scratch,
                            n_arg,
                            i64(cout_g),
                            lout,
                            i64(kk),
                            i64(0),
                            a_rs,
                            a_cs,
                            b.mul(i64(kk), lout),
                            lout,
                            i64(1),
                            b.mul(i64(cout), lout),
                            lout,
                        ],
                    )
                with concat:
                    # x_col [kk][n*Lout + l]; one wide matmul into ctmp, then scatter to y.
                    b.call(im2col, [x, xcol, n_arg, l_arg, lout, c0, i64(cin_g), lout, cols, i64(1)])
                    b.call(
                        mm,
                        [
                            wg,
                            xcol,
                            ctmp,
                            mm_scratch,
                            i64(1),
                            i64(cout_g),
                            cols,
                            i64(kk),
                            i64(0),
                            a_rs,
                            a_cs,
                            i64(0),
                            cols,
                            i64(1),
                            i64(0),
                            cols,
                        ],
                    )
                    with (
                        for_range(b, i64(0), n_arg, name="sn") as n,
                        for_range(b, i64(0), i64(cout_g), name="sc") as co,
                    ):
                        src = b.gep(ctmp, [b.add(b.mul(co, cols), b.mul(n, lout))], source_etype=F32)
                        dst_row = b.add(b.mul(n, i64(cout)), b.add(b.mul(g, i64(cout_g)), co))
                        dst = b.gep(y, [b.mul(dst_row, lout)], source_etype=F32)
                        with for_range(b, i64(0), lout, name="sl") as l_:
                            v = b.load(b.gep(src, [l_], source_etype=F32), typ=F32, align=4)
                            b.store(v, b.gep(dst, [l_], source_etype=F32), align=4)
    b.ret_void()
    return fn
