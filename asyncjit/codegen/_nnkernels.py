"""Loop kernels for the neural-network ops of ``graph._nn``: conv (any dtype, symbolic pads),
pool, cumsum, argmax/argmin and top-k. Each reproduces the reference semantics exactly; the
tuned float32 conv lives in ``_convnd``.

Every load is at an index proven inside its buffer: window positions are clamped into the axis
and the padding chosen by a ``select`` (never a branch per tap), data-dependent indices are
results of loops bounded by the axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from llvmlite import ir

from ..errors import CompileError
from ..graph import Node, reduce_identity
from ..graph._nn import conv_layout
from ..symbolic import Dim, Index, prod
from ._conv import _valid_range
from ._expr import linearize
from ._index import i64
from ._scalar import intrinsic
from ._target import for_range, splat, vector_width
from ._types import F16, F32, I1, I32, I64, compute_type, const

if TYPE_CHECKING:
    from ..passes import Kernel
    from ._kernels import _Ctx

__all__ = ["emit_argext", "emit_conv_loop", "emit_cumsum", "emit_pool", "emit_topk"]

_FLAGS = ("contract",)


def _acc_type(node: Node) -> ir.Type:
    """Register type sums and maxima are kept in: float32 for float16/float32 (the reference
    rounds once per op), float64 for float64, the int itself otherwise."""
    if node.dtype.is_float:
        return ir.DoubleType() if node.dtype.itemsize == 8 else F32
    return compute_type(node.dtype)


def _widen(b: ir.IRBuilder, v: ir.Value, ty: ir.Type) -> ir.Value:
    return b.fpext(v, ty) if v.type == F16 else v


def _narrow(b: ir.IRBuilder, v: ir.Value, node: Node) -> ir.Value:
    return b.fptrunc(v, F16) if node.dtype.name == "float16" else v


def _window_tap(ctx: _Ctx, pos: Dim, length: Dim) -> tuple[Index, ir.Value]:
    """``pos`` clamped into ``[0, length)`` as an index atom, and whether it was in range.
    (For ``length == 0`` the clamp gives 0, inside every allocation; the select discards it.)"""
    em, b = ctx.em, ctx.b
    valid = em.in_range(pos, length)
    p = em.dim(pos)
    hi = b.sub(em.dim(length), i64(1))
    p = b.select(b.icmp_signed(">", p, hi), hi, p)
    p = b.select(b.icmp_signed("<", p, i64(0)), i64(0), p)
    return em.bind(p, length), valid


def _fadd(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return (
        b.fadd(x, y, flags=_FLAGS)
        if isinstance(x.type, ir.FloatType | ir.DoubleType | ir.HalfType)
        else b.add(x, y)
    )


def _is_float(ty: ir.Type) -> bool:
    return isinstance(ty, ir.FloatType | ir.DoubleType | ir.HalfType)


def _max(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, unsigned: bool = False) -> ir.Value:
    """NaN-propagating float max/min (``llvm.maximum``), signed or unsigned int max/min."""
    if _is_float(x.type):
        sfx = "f64" if isinstance(x.type, ir.DoubleType) else "f32"
        return intrinsic(b, f"llvm.{'maximum' if op == 'max' else 'minimum'}.{sfx}", x.type, [x, y])
    cmp = b.icmp_unsigned if unsigned else b.icmp_signed
    return b.select(cmp(">" if op == "max" else "<", x, y), x, y)


def emit_conv_loop(ctx: _Ctx, kernel: Kernel) -> None:
    """Direct N-d conv: per output element, the channel/tap sum with clamped loads."""
    node = kernel.node
    if any(conv_layout(node.attrs)):
        raise CompileError("a channels-last conv reached the direct conv loop (only tuned convs take it)")
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) == 3 else None
    r = x.ndim - 2
    strides, dilations, groups = node.attrs["strides"], node.attrs["dilations"], node.attrs["groups"]
    pads = node.attrs["pads"]
    cout, cin_g = int(w.shape[0]), int(w.shape[1])
    ks = [int(k) for k in w.shape[2:]]
    og = cout // groups
    em, b = ctx.em, ctx.b
    acc_ty = _acc_type(node)
    acc = ctx.alloca(acc_ty)

    def cell(idx: tuple[Dim, ...]) -> None:
        nn, o = idx[0], idx[1]
        init = ir.Constant(acc_ty, 0.0)
        if bias is not None:
            init = _widen(b, em.value(bias, (o,)), acc_ty)
        b.store(init, acc)
        g = b.udiv(em.dim(o), i64(og))

        def taps(t: tuple[Dim, ...]) -> None:
            atoms: list[Dim] = []
            valid: ir.Value = ir.Constant(I1, 1)
            for ax in range(r):
                pos = idx[2 + ax] * strides[ax] + t[ax] * dilations[ax] - pads[ax][0]
                atom, ok = _window_tap(ctx, pos, x.shape[2 + ax])
                atoms.append(atom)
                valid = b.and_(valid, ok)

            def chan(c: Index) -> None:
                cin = em.bind(b.add(b.mul(g, i64(cin_g)), em.dim(c)), cin_g * groups)
                xv = _widen(b, em.load(x, (nn, cin, *atoms)), acc_ty)
                wv = _widen(b, em.load(w, (o, c, *t)), acc_ty)
                xv = b.select(valid, xv, ir.Constant(acc_ty, 0.0))
                cur = b.load(acc, typ=acc_ty)
                b.store(b.fadd(cur, b.fmul(xv, wv, flags=_FLAGS), flags=("reassoc", "contract")), acc)

            ctx.loop(cin_g, chan)

        ctx.nest(ks, taps)
        out = _narrow(b, b.load(acc, typ=acc_ty), node)
        em.store(ctx.out, node, linearize(idx, node.shape), out)

    ctx.nest(node.shape, cell)


def emit_pool(ctx: _Ctx, kernel: Kernel) -> None:
    """Max/avg pool: float32 by output rows (``_pool_rows``); other dtypes per output element,
    the taps of its window, padding excluded by ``select``, the avg count accumulated alongside."""
    node = kernel.node
    if node.dtype.name == "float32":
        _pool_rows(ctx, kernel)
        return
    (x,) = node.inputs
    mode = node.attrs["mode"]
    ks, strides, dilations = node.attrs["kernel"], node.attrs["strides"], node.attrs["dilations"]
    pads, include = node.attrs["pads"], node.attrs["count_include_pad"]
    r = len(ks)
    em, b = ctx.em, ctx.b
    acc_ty = _acc_type(node)
    acc = ctx.alloca(acc_ty)
    cnt = ctx.alloca(I64)
    ident = reduce_identity("max", node.dtype) if mode == "max" else 0
    ident_c = ir.Constant(acc_ty, float(ident)) if _is_float(acc_ty) else const(node.dtype, ident)

    def cell(idx: tuple[Dim, ...]) -> None:
        b.store(ident_c, acc)
        b.store(i64(0), cnt)

        def tap(t: tuple[Dim, ...]) -> None:
            atoms: list[Dim] = []
            valid: ir.Value = ir.Constant(I1, 1)
            counted: ir.Value = ir.Constant(I1, 1)
            for ax in range(r):
                length = x.shape[2 + ax]
                pos = idx[2 + ax] * strides[ax] + t[ax] * dilations[ax] - pads[ax][0]
                atom, ok = _window_tap(ctx, pos, length)
                atoms.append(atom)
                valid = b.and_(valid, ok)
                if include:
                    inside = b.icmp_signed("<", em.dim(pos), em.dim(length + pads[ax][1]))
                    counted = b.and_(counted, inside)
            v = _widen(b, em.load(x, (idx[0], idx[1], *atoms)), acc_ty)
            cur = b.load(acc, typ=acc_ty)
            if mode == "max":
                b.store(b.select(valid, _max(b, "max", cur, v, x.dtype.is_unsigned), cur), acc)
                return
            b.store(b.fadd(cur, b.select(valid, v, ir.Constant(acc_ty, 0.0))), acc)
            hit = counted if include else valid
            b.store(b.add(b.load(cnt, typ=I64), b.zext(hit, I64)), cnt)

        ctx.nest(list(ks), tap)
        out = b.load(acc, typ=acc_ty)
        if mode == "avg":
            n = b.load(cnt, typ=I64)
            div = b.fdiv(out, b.sitofp(n, acc_ty))
            out = b.select(b.icmp_signed(">", n, i64(0)), div, ir.Constant(acc_ty, 0.0))
        em.store(ctx.out, node, linearize(idx, node.shape), _narrow(b, out, node))

    ctx.nest(node.shape, cell)


def _pool_rows(ctx: _Ctx, kernel: Kernel) -> None:
    """Pool one output row (last axis) at a time, in blocks of ``pool_lanes()`` columns (the
    host's vector width: 16 with AVX-512 ran the light models' pools 0.98-1.59x the speed of
    8, bit for bit the same, ``benchmarks/nn_kernels.py --pool-widths``): a block's register
    combines every tap of the outer axes whose input row exists and every tap of the last axis
    (lanes whose tap falls outside the input are masked off and read as the identity), then is
    stored once. Blocks whose every last-axis tap lies inside the input use plain loads; stride
    2 reads two vectors and keeps the even lanes. The avg divisor is, per lane, the product of
    the per-axis tap counts (exact small integers: the quotient is the reference's). Against a
    loop per tap over the row in memory, whose rows of 14-28 columns ran mostly in scalar
    remainders: 1.2-2.2x ONNX Runtime's time became 0.7-1.1x (``benchmarks/nn_kernels.py
    --pools``)."""
    lanes = pool_lanes()
    node = kernel.node
    (x,) = node.inputs
    mode, include = node.attrs["mode"], node.attrs["count_include_pad"]
    ks, strides, dils, pads = (
        node.attrs["kernel"],
        node.attrs["strides"],
        node.attrs["dilations"],
        node.attrs["pads"],
    )
    r = len(ks)
    em, b = ctx.em, ctx.b
    sizes = [em.dim(d) for d in x.shape[2:]]
    outs = [em.dim(d) for d in node.shape[2:]]
    his = [em.dim(p[1]) for p in pads]
    los = [em.dim(p[0]) for p in pads]
    xbuf = ctx.buffers[x.id]
    chans = b.mul(em.dim(x.shape[0]), em.dim(x.shape[1]))
    in_plane: ir.Value = i64(1)
    out_plane: ir.Value = i64(1)
    for sz, o in zip(sizes, outs, strict=True):
        in_plane, out_plane = b.mul(in_plane, sz), b.mul(out_plane, o)
    ident = ir.Constant(F32, float(reduce_identity("max", node.dtype)) if mode == "max" else 0.0)
    last = r - 1

    def tap_range(ax: int, o: ir.Value, t: ir.Value) -> tuple[ir.Value, ir.Value]:
        pos = b.sub(b.add(b.mul(o, i64(strides[ax])), b.mul(t, i64(dils[ax]))), los[ax])
        return pos, b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, sizes[ax]))

    def count(ax: int, o: ir.Value) -> ir.Value:
        total = ctx.alloca(I64)
        b.store(i64(0), total)

        def one(t: ir.Value) -> None:
            pos, ok = tap_range(ax, o, t)
            if include:
                ok = b.icmp_signed("<", pos, b.add(sizes[ax], his[ax]))
            b.store(b.add(b.load(total, typ=I64), b.zext(ok, I64)), total)

        _taps(b, ks[ax], one, f"c{ax}")
        return b.load(total, typ=I64)

    vty = ir.VectorType(F32, lanes)
    vzero = ir.Constant(vty, [0.0] * lanes)
    lane_ids = ir.Constant(ir.VectorType(I32, lanes), list(range(lanes)))

    def count_lanes(cols: ir.Value) -> ir.Value:
        """Per lane (output column), the last axis's taps counted in the avg divisor (unrolled
        up to ``UNROLL_TAPS`` taps, else a loop: a window of 2^30 would unroll forever)."""
        ity = ir.VectorType(I32, lanes)
        total = ctx.alloca(ity)
        b.store(splat(b, ir.Constant(I32, 0), lanes), total)
        hi = b.add(sizes[last], his[last]) if include else sizes[last]
        lo = b.sub(i64(0), los[last]) if include else i64(0)

        def one(t: ir.Value) -> None:
            off = b.sub(b.mul(t, i64(dils[last])), los[last])
            pos = b.add(
                b.mul(cols, splat(b, ir.Constant(I32, strides[last]), lanes)),
                splat(b, b.trunc(off, I32), lanes),
            )
            ok = b.and_(
                b.icmp_signed(">=", pos, splat(b, b.trunc(lo, I32), lanes)),
                b.icmp_signed("<", pos, splat(b, b.trunc(hi, I32), lanes)),
            )
            b.store(b.add(b.load(total, typ=ity), b.zext(ok, ity)), total)

        _taps(b, ks[last], one, "cl")
        return b.load(total, typ=ity)

    # the output columns whose every last-axis tap reads inside the input: from the first tap's
    # lower bound to the last tap's upper one (whose odd neighbour a stride-2 load reads too)
    inner_lo, _ = _valid_range(b, b.sub(i64(0), los[last]), sizes[last], strides[last], outs[last])
    far = b.sub(i64((ks[last] - 1) * dils[last] + (1 if strides[last] == 2 else 0)), los[last])
    _, inner_hi = _valid_range(b, far, sizes[last], strides[last], outs[last])

    with for_range(b, i64(0), chans, name="nc") as nc:
        xplane = b.gep(xbuf, [b.mul(nc, in_plane)], source_etype=F32)
        yplane = b.gep(ctx.out, [b.mul(nc, out_plane)], source_etype=F32)

        def rows(
            ax: int,
            xoff: ir.Value,
            yoff: ir.Value,
            outer_count: ir.Value,
            outer_ok: list[tuple[int, ir.Value]],
        ) -> None:
            if ax < last:
                with for_range(b, i64(0), outs[ax], name=f"o{ax}") as o:
                    ystride: ir.Value = i64(1)
                    for a2 in range(ax + 1, r):
                        ystride = b.mul(ystride, outs[a2])
                    cnt = b.mul(outer_count, count(ax, o)) if mode == "avg" else outer_count
                    rows(ax + 1, xoff, b.add(yoff, b.mul(o, ystride)), cnt, [*outer_ok, (ax, o)])
                return
            row = b.gep(yplane, [yoff], source_etype=F32)
            n_outer = [ks[a] for a, _ in outer_ok]
            acc = ctx.alloca(vty)  # the block's accumulator (promoted to a register)

            def block(j0: ir.Value, whole: bool, interior: bool = False) -> None:
                """Output columns ``j0 .. j0+lanes-1`` (those below the row's end): every valid tap
                combined into one register, stored once; ``interior``: every tap of the last
                axis is inside the input for all of them (plain loads, no masks)."""
                cols = b.add(lane_ids, splat(b, b.trunc(j0, I32), lanes))
                b.store(splat(b, ident, lanes), acc)

                def outer_taps(level: int, src: ir.Value) -> None:
                    if level == len(outer_ok):

                        def last_tap(t: ir.Value) -> None:
                            off = b.sub(b.mul(t, i64(dils[last])), los[last])
                            mask = None
                            if not interior:
                                lo, hi = _valid_range(b, off, sizes[last], strides[last], outs[last])
                                mask = b.and_(
                                    b.icmp_signed(">=", cols, splat(b, b.trunc(lo, I32), lanes)),
                                    b.icmp_signed("<", cols, splat(b, b.trunc(hi, I32), lanes)),
                                )
                            first = b.add(src, b.add(b.mul(j0, i64(strides[last])), off))
                            v = _strided_load(b, xplane, first, strides[last], mask, splat(b, ident, lanes))
                            cur = b.load(acc, typ=vty)
                            b.store(_vmax(b, cur, v) if mode == "max" else b.fadd(cur, v), acc)

                        _taps(b, ks[last], last_tap, "tl")
                        return
                    ax2, o = outer_ok[level]
                    xstride: ir.Value = i64(1)
                    for a2 in range(ax2 + 1, r):
                        xstride = b.mul(xstride, sizes[a2])

                    def outer_tap(t: ir.Value) -> None:
                        pos, ok = tap_range(ax2, o, t)
                        with b.if_then(ok):
                            outer_taps(level + 1, b.add(src, b.mul(pos, xstride)))

                    _taps(b, n_outer[level], outer_tap, f"t{level}")

                outer_taps(0, xoff)
                out = b.load(acc, typ=vty)
                if mode == "avg":
                    n = b.mul(splat(b, b.trunc(outer_count, I32), lanes), count_lanes(cols))
                    q = b.fdiv(out, b.sitofp(n, vty))
                    out = b.select(b.icmp_signed(">", n, splat(b, ir.Constant(I32, 0), lanes)), q, vzero)
                dst = b.gep(row, [j0], source_etype=F32)
                if whole:
                    b.store(out, dst, align=4)
                else:
                    keep = b.icmp_signed("<", cols, splat(b, b.trunc(outs[last], I32), lanes))
                    intrinsic(
                        b,
                        f"llvm.masked.store.v{lanes}f32.p0",
                        ir.VoidType(),
                        [out, dst, ir.Constant(I32, 4), keep],
                    )

            whole_end = b.mul(b.sdiv(outs[last], i64(lanes)), i64(lanes))
            with for_range(b, i64(0), whole_end, lanes, name="jb") as j0:
                inside = b.and_(
                    b.icmp_signed(">=", j0, inner_lo), b.icmp_signed("<=", b.add(j0, i64(lanes)), inner_hi)
                )
                with b.if_else(inside) as (plain, edge):
                    with plain:
                        block(j0, True, interior=True)
                    with edge:
                        block(j0, True)
            with b.if_then(b.icmp_signed("<", whole_end, outs[last])):
                block(whole_end, False)

        rows(0, i64(0), i64(0), i64(1), [])


POOL_LANES: int | None = None
"""Output columns a pool block computes in one register; None: the host's float32 vector
width (8 with AVX2, 16 with AVX-512)."""


def pool_lanes() -> int:
    """Output columns of one pool block (``POOL_LANES``, else the host's vector width)."""
    return POOL_LANES or vector_width()


def _vmax(b: ir.IRBuilder, cur: ir.Value, v: ir.Value) -> ir.Value:
    """NaN-propagating max of two vectors by compares and selects (``llvm.maximum`` costs three
    blends per vector on AVX2): ``v`` where it is greater or NaN, else ``cur`` (a NaN in
    ``cur`` stays: no compare with it is true)."""
    bigger = b.select(b.fcmp_ordered(">", v, cur), v, cur)
    return b.select(b.fcmp_unordered("uno", v, v), v, bigger)


def _strided_load(
    b: ir.IRBuilder, base: ir.Value, first: ir.Value, stride: int, mask: ir.Value | None, fill: ir.Value
) -> ir.Value:
    """``base[first + l*stride]`` for the lanes ``l`` in ``mask`` (others ``fill``, and never
    read): one masked load at stride 1, two and a shuffle of the even lanes at stride 2, a
    masked gather above. ``mask=None``: every lane, by plain loads (at stride 2 the element
    after the last lane is read too: the caller keeps it inside the buffer)."""
    vty = fill.type
    n = vty.count
    if mask is None and stride <= 2:
        lo = b.load(b.gep(base, [first], source_etype=F32), typ=vty, align=4)
        if stride == 1:
            return lo
        hi = b.load(b.gep(base, [b.add(first, i64(n))], source_etype=F32), typ=vty, align=4)
        return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, n), list(range(0, 2 * n, 2))))
    if mask is None:
        mask = ir.Constant(ir.VectorType(I1, n), [1] * n)
    if stride == 1:
        ptr = b.gep(base, [first], source_etype=F32)
        return intrinsic(b, f"llvm.masked.load.v{n}f32.p0", vty, [ptr, ir.Constant(I32, 4), mask, fill])
    if stride == 2:
        halves = []
        for h in range(2):
            lanes = [mask_lane for k in range(n // 2) for mask_lane in (h * n // 2 + k, n)]
            widened = b.shuffle_vector(
                mask, ir.Constant(mask.type, [0] * n), ir.Constant(ir.VectorType(I32, n), lanes)
            )
            ptr = b.gep(base, [b.add(first, i64(h * n))], source_etype=F32)
            halves.append(
                intrinsic(b, f"llvm.masked.load.v{n}f32.p0", vty, [ptr, ir.Constant(I32, 4), widened, fill])
            )
        even = list(range(0, 2 * n, 2))
        return b.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(I32, n), even))
    # (llvmlite types a vector-index GEP as a scalar pointer: addresses go through integers)
    offsets = ir.Constant(ir.VectorType(I64, n), [4 * k * stride for k in range(n)])
    start = b.ptrtoint(b.gep(base, [first], source_etype=F32), I64)
    ptrs = b.inttoptr(b.add(splat(b, start, n), offsets), ir.VectorType(ir.PointerType(), n))
    return intrinsic(b, f"llvm.masked.gather.v{n}f32.v{n}p0", vty, [ptrs, ir.Constant(I32, 4), mask, fill])


UNROLL_TAPS = 8
"""Window axes up to this many taps are unrolled (each tap's valid range folds at compile time);
longer ones loop at run time, so a large window (a 60x80 pool) cannot blow up the IR (thousands of
unrolled loops took LLVM's optimizer tens of minutes)."""


def _taps(b: ir.IRBuilder, n: int, body: Callable[[ir.Value], None], name: str) -> None:
    """``body(t)`` for every tap ``t`` in ``[0, n)``: unrolled up to ``UNROLL_TAPS``, else a loop."""
    if n <= UNROLL_TAPS:
        for t in range(n):
            body(i64(t))
        return
    with for_range(b, i64(0), i64(n), name=name) as t:
        body(t)


def _outer(node: Node, axis: int) -> list[Dim]:
    return [d for a, d in enumerate(node.shape) if a != axis]


def _with(rest: Sequence[Dim], axis: int, i: Dim) -> tuple[Dim, ...]:
    return (*rest[:axis], i, *rest[axis:])


def emit_cumsum(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    (x,) = node.inputs
    axis, exclusive, reverse = node.attrs["axis"], node.attrs["exclusive"], node.attrs["reverse"]
    em, b = ctx.em, ctx.b
    acc_ty = _acc_type(node)
    acc = ctx.alloca(acc_ty)
    n = node.shape[axis]
    zero = ir.Constant(acc_ty, 0.0 if _is_float(acc_ty) else 0)

    def row(rest: tuple[Dim, ...]) -> None:
        b.store(zero, acc)

        def step(i: Index) -> None:
            j: Dim = i
            if reverse:
                j = em.bind(b.sub(b.sub(em.dim(n), i64(1)), em.dim(i)), n)
            full = _with(rest, axis, j)
            v = _widen(b, em.value(x, full), acc_ty)
            cur = b.load(acc, typ=acc_ty)
            nxt = _fadd(b, cur, v)
            b.store(nxt, acc)
            em.store(ctx.out, node, linearize(full, node.shape), _narrow(b, cur if exclusive else nxt, node))

        ctx.loop(n, step)

    ctx.nest(_outer(node, axis), row)


def _better(b: ir.IRBuilder, op: str, v: ir.Value, best: ir.Value, ties: bool, unsigned: bool) -> ir.Value:
    """Whether ``v`` displaces ``best``: strictly more extreme (or equal, with ``ties``); NaN is
    the most extreme float and the first NaN stays unless ``ties``."""
    if not _is_float(v.type):
        sym = (">" if op == "max" else "<") + ("=" if ties else "")
        return (b.icmp_unsigned if unsigned else b.icmp_signed)(sym, v, best)
    sym = (">" if op == "max" else "<") + ("=" if ties else "")
    v_nan = b.fcmp_unordered("uno", v, v)
    best_ok = b.fcmp_ordered("ord", best, best)
    if ties:
        return b.or_(v_nan, b.and_(best_ok, b.fcmp_ordered(sym, v, best)))
    return b.and_(best_ok, b.or_(v_nan, b.fcmp_ordered(sym, v, best)))


def emit_argext(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    (x,) = node.inputs
    axis, op, last = node.attrs["axis"], node.attrs["op"], node.attrs.get("last", False)
    em, b = ctx.em, ctx.b
    vty = _acc_type(x)
    best = ctx.alloca(vty)
    at = ctx.alloca(I64)
    n = x.shape[axis]

    def row(rest: tuple[Dim, ...]) -> None:
        b.store(_widen(b, em.value(x, _with(rest, axis, 0)), vty), best)
        b.store(i64(0), at)

        def step(i: Index) -> None:
            v = _widen(b, em.value(x, _with(rest, axis, i)), vty)
            cur = b.load(best, typ=vty)
            take = _better(b, op, v, cur, last, x.dtype.is_unsigned)
            b.store(b.select(take, v, cur), best)
            b.store(b.select(take, em.dim(i), b.load(at, typ=I64)), at)

        ctx.loop(n, step)
        em.store(ctx.out, node, linearize(_with(rest, axis, 0), node.shape), b.load(at, typ=I64))

    ctx.nest(_outer(node, axis), row)


def emit_topk(ctx: _Ctx, kernel: Kernel) -> None:
    """Insertion into the sorted output row, per outer position: O(n*k), no scratch. A new
    element moves past strictly worse ones only, so ties keep the lower index first."""
    node = kernel.node
    (x,) = node.inputs
    axis, k, largest = node.attrs["axis"], node.attrs["k"], node.attrs.get("largest", True)
    em, b = ctx.em, ctx.b
    n = x.shape[axis]
    vty = _acc_type(x)
    if k == 0:
        return

    def out_ptr(rest: tuple[Dim, ...], pos: ir.Value) -> ir.Value:
        flat = em.dim(linearize(_with(rest, axis, em.bind(pos, k)), node.shape))
        return b.gep(ctx.out, [flat], inbounds=True, source_etype=I64)

    def load_x(rest: tuple[Dim, ...], j: ir.Value) -> ir.Value:
        return _widen(b, em.load(x, _with(rest, axis, em.bind(j, n))), vty)

    def worse(v: ir.Value, u: ir.Value) -> ir.Value:
        """``u`` ranks strictly below ``v`` (so ``v`` moves ahead of it)."""
        if not _is_float(vty):
            return (b.icmp_unsigned if x.dtype.is_unsigned else b.icmp_signed)(">" if largest else "<", v, u)
        v_nan, u_nan = b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", u, u)
        if largest:
            return b.or_(b.and_(v_nan, b.not_(u_nan)), b.fcmp_ordered(">", v, u))
        return b.or_(b.and_(u_nan, b.not_(v_nan)), b.fcmp_ordered("<", v, u))

    def row(rest: tuple[Dim, ...]) -> None:
        def each(i: Index) -> None:
            iv = em.dim(i)
            v = load_x(rest, iv)
            filled = b.select(b.icmp_signed("<", iv, i64(k)), iv, i64(k))
            # walk pos down from `filled` while the entry above is worse than v
            pre = b.block
            head = b.append_basic_block("topk.walk")
            body = b.append_basic_block("topk.shift")
            done = b.append_basic_block("topk.place")
            b.branch(head)
            b.position_at_end(head)
            pos = b.phi(I64)
            pos.add_incoming(filled, pre)
            at_top = b.icmp_signed("<=", pos, i64(0))
            prev = b.sub(pos, i64(1))
            safe_prev = b.select(at_top, i64(0), prev)
            u_idx = b.load(out_ptr(rest, safe_prev), typ=I64)
            u_idx = b.select(b.icmp_signed("<", u_idx, i64(0)), i64(0), u_idx)
            last = b.sub(em.dim(n), i64(1))
            u_idx = b.select(b.icmp_signed(">", u_idx, last), last, u_idx)
            u = load_x(rest, u_idx)
            go = b.and_(b.not_(at_top), worse(v, u))
            b.cbranch(go, body, done)
            b.position_at_end(body)
            with b.if_then(b.icmp_signed("<", pos, i64(k))):
                b.store(u_idx, out_ptr(rest, pos))
            pos.add_incoming(prev, b.block)
            b.branch(head)
            b.position_at_end(done)
            with b.if_then(b.icmp_signed("<", pos, i64(k))):
                b.store(iv, out_ptr(rest, pos))

        ctx.loop(n, each)

    ctx.nest(_outer(node, axis), row)


def conv_flops(node: Node) -> Dim:
    """Multiply-adds times two of a ``conv`` node (for cost records)."""
    w = node.inputs[1]
    return 2 * prod(node.shape) * prod(int(d) for d in w.shape[1:])
