"""float32 3x3 stride-1 convolution by Winograd's minimal filtering ``F(2x2, 3x3)``.

A direct 3x3 conv spends 9 multiply-adds per output, input channel and output channel. Winograd
computes a 2x2 block of outputs (a *tile*) from the 4x4 input patch under it with 16 products
instead of 36: ``Y = A^T [ (G g G^T) * (B^T d B) ] A``, where ``g`` is one 3x3 filter, ``d``
the patch and ``*`` an elementwise product. Summed over the input channels, the 16 products of
every tile are 16 independent matmuls, ``M[xi] = U[xi] @ V[xi]`` (``U[xi] [cout, cin]`` from the
filters, ``V[xi] [cin, tiles]`` from the patches), so the product runs on the tiled matmul of
``_matmul`` at 16/36 of the direct conv's multiply-adds (2.25x fewer). The transforms are adds
and subtracts only (``B``, ``A``: 0 and +-1; ``G``: 0, 1/2 and 1, applied to constant weights at
compile time), so the results differ from a direct conv by rounding alone (a few ulps per sum).

The weight is stored once at compile time (``wino_weight``, by constant folding, see
``passes._fold``): ``U`` as ``[16, cout, cin]`` followed by the filters themselves, which the
graph keeps reading as the conv's weight (a ``reshape`` of a ``shrink`` of the stored constant:
the reference and any other consumer see the exact filters).

Per sample, tiles are taken in *blocks* (``WINO_BLOCK_TILES``: a few tile rows, or a segment of
one row on wide layers), each finished before the next starts so that its ``V`` and ``M`` stay in
cache: the input transform reads the block's patches from ``x`` under lane masks (the padding and
the edges read zero, nothing is copied) and writes ``V``; one batched matmul call computes the
16 products; the output transform writes ``y`` (two output rows per tile row, lanes past the
output masked off) with the bias, a fused residual and relu applied in the unfused graph's order.
Both transforms run on eight tiles of a row at once (8-lane vectors on any host). A large layer
hands its blocks to the intra-op threads, each part in a scratch region of its own: every output
is computed as on one thread, the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from ._convpanels import _align
from ._matmul import PARALLEL_MIN_MACS, emit_matmul, matmul_scratch_bytes
from ._parallel import MAX_THREADS, JobBlock, hand_out, new_part_function, threads_value
from ._target import (
    CONV_NOALIAS,
    F32,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    for_range,
    i64,
    intrinsic,
    new_function,
    relu_value,
    residual_arg,
    smax,
    smin,
    splat,
)

__all__ = [
    "WINO_BLOCK_TILES",
    "WINO_MIN_CIN",
    "WINO_MIN_COUT",
    "WINO_MIN_TILES",
    "WINO_WIDE_PARTS",
    "WINO_WIDE_BLOCK_TILES",
    "emit_conv_wino",
    "wino_chosen",
    "wino_scratch_bytes",
    "wino_transform",
    "wino_weight",
]

WINO_MIN_CIN = 32
WINO_MIN_COUT = 32
"""Fewer channels on either side and the transforms (work per tile and channel, against the
products' per tile, input and output channel) are not paid back by the products saved."""

WINO_MIN_TILES = 100
"""Fewer tiles (2x2 outputs, at the input's upper bounds) than this and the matmul's columns are
too few to run at speed while the other kernels (the panels conv, which small layers take) do
well. One thread, against the kernel each layer takes otherwise (``python
benchmarks/nn_kernels.py --winograd``, AVX2): VGG's layers from 28x28 to 224x224 0.47-0.62x its
time, 56x56 with 64 channels and 28x28 with 128 0.63x, 27x27 from 32 to 128 (196 tiles) 0.93x;
forced on, 13x13 from 48 or 64 channels 1.02-1.22x, 7x7 with 512 1.09-1.53x. Alone, 14x14 with
256 or 512 channels gained (0.89-0.91x), but inside ResNet-50 those layers are panels convs in
a channels-last region, which Winograd's NCHW conv breaks: with them taken, ResNet-50's kernel
sum went to 1.05x ONNX Runtime's from 0.99x and Inception v2's to 0.96x from 0.94x (VGG-19's
0.71x to 0.68x; ``onnx_models.py --kernels``, one process each), so the rule leaves them."""

WINO_BLOCK_TILES = 128
WINO_WIDE_BLOCK_TILES = 256
"""Tiles per block (the matmul's column count, ``N``), and with more than 128 channels on a
side; a block's ``V`` and ``M`` are ``16 * (cin + cout)`` floats per tile. Measured in one
process (AVX2, VGG's layers, 32 to 256 tiles): 128 the fastest up to 128 channels, 256 with 256
and 512 (fewer passes over the larger ``U``; 64 tiles ran 1.1-1.35x slower)."""

_LANES = 8  # tiles per vector in the transforms


def wino_chosen(
    *,
    cin: int,
    cout: int,
    ks: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    groups: int,
    s_max: Sequence[int],
) -> bool:
    """Whether a conv runs here: 2-D, 3x3, stride and dilation 1, one group, at least
    ``WINO_MIN_CIN`` input and ``WINO_MIN_COUT`` output channels and ``WINO_MIN_TILES`` tiles
    of output at the input's upper bounds ``s_max`` (any pads; padded extents under 2^30)."""
    if not (
        tuple(ks) == (3, 3)
        and tuple(strides) == (1, 1)
        and tuple(dilations) == (1, 1)
        and groups == 1
        and cin >= WINO_MIN_CIN
        and cout >= WINO_MIN_COUT
    ):
        return False
    if any(s + lo + hi >= 1 << 30 for s, (lo, hi) in zip(s_max, pads, strict=True)):
        return False  # the lane masks compare positions in 32 bits
    tiles = 1
    for s, (lo, hi) in zip(s_max, pads, strict=True):
        tiles *= (max(s + lo + hi - 2, 0) + 1) // 2  # 2x2 tiles over the outputs, the last ones half
    return tiles >= WINO_MIN_TILES


_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_GG = np.kron(_G, _G)  # [16, 9]: U[a*4 + b] = sum_ij G[a, i] G[b, j] g[i, j]


def wino_transform(w: np.ndarray) -> np.ndarray:
    """``U [16, cout, cin]``: ``G g G^T`` of every 3x3 filter ``g`` of ``w [cout, cin, 3, 3]``,
    computed in float64 and rounded once: one product with ``G (x) G`` (75 ms for 512x512
    filters, against 110 ms as a general contraction, paid again by every warm prepare)."""
    cout, cin = w.shape[:2]
    flat = np.asarray(w, dtype=np.float64).reshape(cout * cin, 9)
    return np.ascontiguousarray((_GG @ flat.T).astype(np.float32).reshape(16, cout, cin))


def wino_weight(w: np.ndarray) -> np.ndarray:
    """The stored constant: ``wino_transform(w)`` flattened, then ``w`` itself (float32)."""
    return np.concatenate([wino_transform(w).ravel(), np.asarray(w, dtype=np.float32).ravel()])


def _geometry(cin: int, cout: int) -> tuple[int, int]:
    """(tiles per block, the row stride of ``V`` and ``M`` in floats): room for a block and the
    seven columns a vector of the last tile row may write past it, whole cache lines, never a
    multiple of 128 floats (the matmul would pack rows that map to few L1 sets)."""
    tb = WINO_WIDE_BLOCK_TILES if max(cin, cout) > 128 else WINO_BLOCK_TILES
    vs = -(-(tb + _LANES - 1) // 16) * 16
    return tb, vs + 16 if vs % 128 == 0 else vs


WINO_WIDE_PARTS = 2
"""Parts a layer with more than 128 channels on a side splits its blocks into (at most), each
with a block buffer of its own (17 MB at 512 channels): narrower layers take up to
``MAX_THREADS`` (2.4 MB each at 128)."""


def _parts_cap(cin: int, cout: int) -> int:
    """How many parts may claim blocks at once, each in its own scratch region."""
    return MAX_THREADS if max(cin, cout) <= 128 else WINO_WIDE_PARTS


def _region_bytes(cin: int, cout: int) -> int:
    """One part's scratch: a block's ``V`` and ``M`` and the matmul's own, each 64-byte aligned."""
    _, vs = _geometry(cin, cout)
    return -(-(3 * 64 + 4 * 16 * vs * (cin + cout) + matmul_scratch_bytes(cout, vs, cin)) // 64) * 64


def wino_scratch_bytes(*, cin: int, cout: int) -> int:
    """Scratch for one call: a region for each part that may claim blocks (``_parts_cap``)."""
    return _region_bytes(cin, cout) * _parts_cap(cin, cout)


class _V16:
    """16-lane float vectors: masked loads and stores, and the even/odd lanes as 8-lane halves."""

    def __init__(self, module: ir.Module) -> None:
        self.v8 = ir.VectorType(F32, _LANES)
        self.v16 = ir.VectorType(F32, 2 * _LANES)
        self.m16 = ir.VectorType(I1, 2 * _LANES)
        self.i16 = ir.VectorType(I32, 2 * _LANES)
        self.zero = ir.Constant(self.v16, [0.0] * 16)
        self.mload = intrinsic(module, "llvm.masked.load.v16f32.p0", self.v16, [PTR, I32, self.m16, self.v16])
        self.mstore = intrinsic(module, "llvm.masked.store.v16f32.p0", VOID, [self.v16, PTR, I32, self.m16])
        self.iota = ir.Constant(self.i16, list(range(16)))

    def lanes_in(self, b: ir.IRBuilder, first: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
        """Mask of lanes ``l`` with ``lo <= first + l < hi`` (positions of one image row or
        column: 32-bit lanes)."""
        at = b.add(splat(b, b.trunc(first, I32), 2 * _LANES), self.iota)
        lo_v, hi_v = splat(b, b.trunc(lo, I32), 2 * _LANES), splat(b, b.trunc(hi, I32), 2 * _LANES)
        return b.and_(b.icmp_signed(">=", at, lo_v), b.icmp_signed("<", at, hi_v))

    def load(self, b: ir.IRBuilder, base: ir.Value, at: ir.Value, mask: ir.Value) -> ir.Value:
        return b.call(self.mload, [b.gep(base, [at], source_etype=F32), ir.Constant(I32, 4), mask, self.zero])

    def store(self, b: ir.IRBuilder, v: ir.Value, base: ir.Value, at: ir.Value, mask: ir.Value) -> None:
        b.call(self.mstore, [v, b.gep(base, [at], source_etype=F32), ir.Constant(I32, 4), mask])

    def half(self, b: ir.IRBuilder, v: ir.Value, odd: bool) -> ir.Value:
        lanes = [2 * i + int(odd) for i in range(_LANES)]
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, _LANES), lanes))

    def interleave(self, b: ir.IRBuilder, u: ir.Value, v: ir.Value) -> ir.Value:
        lanes = [i // 2 + (_LANES if i % 2 else 0) for i in range(2 * _LANES)]
        return b.shuffle_vector(u, v, ir.Constant(ir.VectorType(I32, 2 * _LANES), lanes))


def _emit_input(
    module: ir.Module, name: str, vec: _V16, *, cin: int, vs: int, pt: int, pl: int
) -> ir.Function:
    """``V[xi, c, r*cc + t] = (B^T d B)[xi]`` for the patch ``d`` of tile ``(ty0 + r, tx0 + t)``
    of every channel ``c``, ``r < rr``, ``t < cc``; a vector may also write up to seven columns
    past a row's ``cc``, which the next row overwrites (or which lie past the block). Eight tiles
    whose patches lie inside ``x`` load unmasked; the others under lane masks (zero outside)."""
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("v", PTR), ("S0", I64), ("S1", I64)]
    args += [("ty0", I64), ("rr", I64), ("tx0", I64), ("cc", I64)]
    fn, b = new_function(module, name, args, noalias=("x", "v"), inline="noinline")
    x, v, s0, s1, ty0, rr, tx0, cc = fn.args
    plane = b.mul(s0, s1)
    zero = i64(0)

    def transform(xc: ir.Value, c: ir.Value, r: ir.Value, g: ir.Value, row0: ir.Value, col0: ir.Value,
                  masked: bool) -> None:  # fmt: skip
        if masked:
            cols_a = vec.lanes_in(b, col0, zero, s1)
            cols_b = vec.lanes_in(b, b.add(col0, i64(2)), zero, s1)
        rows = []
        for i in range(4):
            row = b.add(row0, i64(i))
            at = b.add(b.mul(row, s1), col0)
            if masked:
                inside = b.and_(b.icmp_signed(">=", row, zero), b.icmp_signed("<", row, s0))
                keep = splat(b, inside, 2 * _LANES)
                lo = vec.load(b, xc, at, b.and_(cols_a, keep))
                hi = vec.load(b, xc, b.add(at, i64(2)), b.and_(cols_b, keep))
            else:
                lo = b.load(b.gep(xc, [at], source_etype=F32), typ=vec.v16, align=4)
                hi = b.load(b.gep(xc, [b.add(at, i64(2))], source_etype=F32), typ=vec.v16, align=4)
            d0, d1 = vec.half(b, lo, False), vec.half(b, lo, True)
            d2, d3 = vec.half(b, hi, False), vec.half(b, hi, True)
            rows.append((b.fsub(d0, d2), b.fadd(d1, d2), b.fsub(d2, d1), b.fsub(d1, d3)))
        col = b.add(b.mul(r, cc), g)
        for j in range(4):
            r0, r1, r2, r3 = (rows[i][j] for i in range(4))
            for a, val in enumerate((b.fsub(r0, r2), b.fadd(r1, r2), b.fsub(r2, r1), b.fsub(r1, r3))):
                at = b.add(b.mul(b.add(i64((a * 4 + j) * cin), c), i64(vs)), col)
                b.store(val, b.gep(v, [at], source_etype=F32), align=4)

    with for_range(b, zero, i64(cin), name="c") as c:
        xc = b.gep(x, [b.mul(c, plane)], source_etype=F32)
        with for_range(b, zero, rr, name="r") as r:
            row0 = b.sub(b.mul(b.add(ty0, r), i64(2)), i64(pt))
            rows_in = b.and_(b.icmp_signed(">=", row0, zero), b.icmp_signed("<=", b.add(row0, i64(4)), s0))
            with for_range(b, zero, cc, _LANES, name="g") as g:
                col0 = b.sub(b.mul(b.add(tx0, g), i64(2)), i64(pl))
                cols_in = b.and_(
                    b.icmp_signed(">=", col0, zero),
                    b.icmp_signed("<=", b.add(col0, i64(4 * _LANES - 14)), s1),
                )
                with b.if_else(b.and_(rows_in, cols_in)) as (inner, edge):
                    with inner:
                        transform(xc, c, r, g, row0, col0, masked=False)
                    with edge:
                        transform(xc, c, r, g, row0, col0, masked=True)
    b.ret_void()
    return fn


def _emit_output(
    module: ir.Module, name: str, vec: _V16, *, cout: int, vs: int, has_bias: bool, relu: bool, residual: bool
) -> ir.Function:
    """``y[co, 2(ty0 + r) + a, 2(tx0 + t) + e] = (A^T M A)[a, e]`` of the block's tile
    ``(r, t)`` (plus the bias, then the residual, then relu), for the outputs inside ``O0 x O1``."""
    args: list[tuple[str, ir.Type]] = [("m", PTR), ("y", PTR), ("bias", PTR), ("O0", I64), ("O1", I64)]
    args += [("ty0", I64), ("rr", I64), ("tx0", I64), ("cc", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=("m", "y", "bias", "res"), inline="noinline")
    m, y, bias, o0, o1, ty0, rr, tx0, cc = fn.args[:9]
    res = fn.args[9] if residual else None
    plane = b.mul(o0, o1)
    zero = i64(0)
    col_end = smin(b, o1, b.mul(b.add(tx0, cc), i64(2)))
    with for_range(b, zero, i64(cout), name="co") as co:
        bv = None
        if has_bias:
            bv = splat(b, b.load(b.gep(bias, [co], source_etype=F32), typ=F32), 2 * _LANES)
        yc = b.gep(y, [b.mul(co, plane)], source_etype=F32)
        rc = None if res is None else b.gep(res, [b.mul(co, plane)], source_etype=F32)
        with for_range(b, zero, rr, name="r") as r, for_range(b, zero, cc, _LANES, name="g") as g:
            col = b.add(b.mul(r, cc), g)
            t = [
                [
                    b.load(
                        b.gep(
                            m,
                            [b.add(b.mul(b.add(i64((a * 4 + j) * cout), co), i64(vs)), col)],
                            source_etype=F32,
                        ),
                        typ=vec.v8,
                        align=4,
                    )
                    for j in range(4)
                ]
                for a in range(4)
            ]
            s = [
                [b.fadd(b.fadd(t[0][j], t[1][j]), t[2][j]) for j in range(4)],
                [b.fsub(b.fsub(t[1][j], t[2][j]), t[3][j]) for j in range(4)],
            ]
            col0 = b.mul(b.add(tx0, g), i64(2))
            row0 = b.mul(b.add(ty0, r), i64(2))
            outs = []
            for a in range(2):
                even = b.fadd(b.fadd(s[a][0], s[a][1]), s[a][2])
                odd = b.fsub(b.fsub(s[a][1], s[a][2]), s[a][3])
                outs.append(vec.interleave(b, even, odd))

            def store(masked: bool) -> None:
                cols = vec.lanes_in(b, col0, zero, col_end) if masked else None
                for a, out in enumerate(outs):
                    row = b.add(row0, i64(a))
                    at = b.add(b.mul(row, o1), col0)
                    mask = None
                    if cols is not None:
                        mask = b.and_(cols, splat(b, b.icmp_signed("<", row, o0), 2 * _LANES))
                    if bv is not None:
                        out = b.fadd(out, bv)
                    if rc is not None:
                        if mask is None:
                            r_v = b.load(b.gep(rc, [at], source_etype=F32), typ=vec.v16, align=4)
                        else:
                            r_v = vec.load(b, rc, at, mask)
                        out = b.fadd(out, r_v)
                    if relu:
                        out = relu_value(b, out)
                    if mask is None:
                        b.store(out, b.gep(yc, [at], source_etype=F32), align=4)
                    else:
                        vec.store(b, out, yc, at, mask)

            whole = b.and_(
                b.icmp_signed("<=", b.add(col0, i64(2 * _LANES)), col_end),
                b.icmp_signed("<=", b.add(row0, i64(2)), o0),
            )
            with b.if_else(whole) as (inner, edge):
                with inner:
                    store(masked=False)
                with edge:
                    store(masked=True)
    b.ret_void()
    return fn


_BLOCK_FIELDS = (
    "x", "w", "bias", "y", "res", "scratch", "region", "S0", "S1", "O0", "O1", "th", "tw", "rb", "cb",
    "nbc", "per_n", "total", "next",
)  # fmt: skip
"""The i64 job block of the blocks' part function (pointers as integers; ``next``: the next
unclaimed block, 0 before the parts start)."""


def _emit_blocks(
    module: ir.Module, name: str, *, cin: int, cout: int, vs: int, to_v: ir.Function, from_m: ir.Function,
    mm: ir.Function, residual: bool,
) -> ir.Function:  # fmt: skip
    """``part(job, p, parts)``: claim blocks (over every sample, tile-row groups, then tile-column
    segments) from ``next`` until none is left, each through the input transform, the 16
    products and the output transform in the part's own ``V``/``M`` (``scratch + p * region``):
    a block's outputs are the same bits whichever part computed it."""
    fn, b = new_part_function(module, f"{name}.blocks")
    job, part, _ = fn.args
    block = JobBlock(b, job, _BLOCK_FIELDS)
    slot, field, pointer = block.slot, block.field, block.pointer

    x, w, bias, y, res = (pointer(f) for f in ("x", "w", "bias", "y", "res"))
    s0, s1, o0, o1, th, tw, rb, cb = (field(f) for f in ("S0", "S1", "O0", "O1", "th", "tw", "rb", "cb"))
    nbc, per_n, total = field("nbc"), field("per_n"), field("total")
    v = _align(b, b.gep(pointer("scratch"), [b.mul(part, field("region"))], source_etype=ir.IntType(8)))
    mbuf = _align(b, b.gep(v, [i64(16 * cin * vs)], source_etype=F32))
    mm_scratch = _align(b, b.gep(mbuf, [i64(16 * cout * vs)], source_etype=F32))
    x_n, y_n = b.mul(i64(cin), b.mul(s0, s1)), b.mul(i64(cout), b.mul(o0, o1))
    claim = b.append_basic_block("claim")
    work = b.append_basic_block("work")
    done = b.append_basic_block("done")
    b.branch(claim)
    b.position_at_end(claim)
    k = b.atomic_rmw("add", slot["next"], i64(1), "monotonic")
    b.cbranch(b.icmp_signed("<", k, total), work, done)
    b.position_at_end(work)
    n, within = b.sdiv(k, per_n), b.srem(k, per_n)
    ty0, tx0 = b.mul(b.sdiv(within, nbc), rb), b.mul(b.srem(within, nbc), cb)
    rr, cc = smin(b, rb, b.sub(th, ty0)), smin(b, cb, b.sub(tw, tx0))
    xn = b.gep(x, [b.mul(n, x_n)], source_etype=F32)
    yn = b.gep(y, [b.mul(n, y_n)], source_etype=F32)
    res_n = [b.gep(res, [b.mul(n, y_n)], source_etype=F32)] if residual else []
    b.call(to_v, [xn, v, s0, s1, ty0, rr, tx0, cc])
    b.call(mm, [w, v, mbuf, mm_scratch, i64(16), i64(cout), b.mul(rr, cc), i64(cin),
                i64(cout * cin), i64(cin), i64(1), i64(cin * vs), i64(vs), i64(1),
                i64(cout * vs), i64(vs)])  # fmt: skip
    b.call(from_m, [mbuf, yn, bias, o0, o1, ty0, rr, tx0, cc, *res_n])
    b.branch(claim)
    b.position_at_end(done)
    b.ret_void()
    return fn


def emit_conv_wino(
    module: ir.Module,
    name: str,
    *,
    cin: int,
    cout: int,
    pads: Sequence[tuple[int, int]],
    has_bias: bool,
    relu: bool = False,
    residual: bool = False,
) -> ir.Function:
    """The conv kernel ``name`` with ``_convnd``'s signature for a layer ``wino_chosen`` takes,
    ``w`` the stored constant of ``wino_weight`` (only its ``U`` part is read). A layer of
    ``PARALLEL_MIN_MACS`` or more hands its blocks to the intra-op threads (up to ``_parts_cap``
    parts, each in its own scratch region; its matmuls then never split). It touches
    ``x``/``w``/``bias``/``y``/``res`` only inside their extents and at most
    :func:`wino_scratch_bytes` of ``scratch``."""
    tb, vs = _geometry(cin, cout)
    vec = _V16(module)
    (pt, _), (pl, _) = pads
    to_v = _emit_input(module, f"{name}.wino_in", vec, cin=cin, vs=vs, pt=pt, pl=pl)
    from_m = _emit_output(
        module, f"{name}.wino_out", vec, cout=cout, vs=vs, has_bias=has_bias, relu=relu, residual=residual
    )
    mm = emit_matmul(module, f"{name}.matmul", m=cout, k=cin, split=False)  # the blocks are split
    blocks = _emit_blocks(module, name, cin=cin, cout=cout, vs=vs, to_v=to_v, from_m=from_m, mm=mm,
                          residual=residual)  # fmt: skip
    args: list[tuple[str, ir.Type]] = [("x", PTR), ("w", PTR), ("bias", PTR), ("y", PTR), ("scratch", PTR)]
    args += [("N", I64), ("S0", I64), ("S1", I64), ("O0", I64), ("O1", I64), *residual_arg(residual)]
    fn, b = new_function(module, name, args, noalias=CONV_NOALIAS)
    x, w, bias, y, scratch, n_arg, s0, s1, o0, o1 = fn.args[:10]
    res = fn.args[10] if residual else None
    job = b.alloca(I64, size=len(_BLOCK_FIELDS))
    empty = b.or_(
        b.icmp_signed("<=", n_arg, i64(0)),
        b.or_(b.icmp_signed("<=", o0, i64(0)), b.icmp_signed("<=", o1, i64(0))),
    )
    with b.if_then(empty):
        b.ret_void()
    th = b.sdiv(b.add(o0, i64(1)), i64(2))
    tw = b.sdiv(b.add(o1, i64(1)), i64(2))
    macs = b.mul(b.mul(b.mul(n_arg, b.mul(o0, o1)), i64(cin * cout)), i64(9))
    want = b.select(b.icmp_signed(">=", macs, i64(PARALLEL_MIN_MACS)), threads_value(b), i64(1))
    want = smax(b, smin(b, want, i64(_parts_cap(cin, cout))), i64(1))

    def ceil_div(a: ir.Value, d: ir.Value) -> ir.Value:
        return b.sdiv(b.add(a, b.sub(d, i64(1))), d)

    cb = smin(b, tw, i64(tb))
    nbc = ceil_div(tw, cb)
    # fewer tile rows per block when the samples and column segments alone give fewer blocks than
    # parts (one 28x28 layer of 512 channels is a single block of 256 tiles otherwise)
    groups = ceil_div(ceil_div(want, n_arg), nbc)
    rb = smax(b, smin(b, smax(b, b.sdiv(i64(tb), cb), i64(1)), ceil_div(th, groups)), i64(1))
    per_n = b.mul(ceil_div(th, rb), nbc)
    total = b.mul(n_arg, per_n)
    parts = smax(b, smin(b, want, total), i64(1))
    fields = {
        "x": x, "w": w, "bias": bias, "y": y, "res": res if res is not None else x, "scratch": scratch,
        "region": i64(_region_bytes(cin, cout)), "S0": s0, "S1": s1, "O0": o0, "O1": o1, "th": th,
        "tw": tw, "rb": rb, "cb": cb, "nbc": nbc, "per_n": per_n, "total": total, "next": i64(0),
    }  # fmt: skip
    hand_out(b, job, _BLOCK_FIELDS, fields, blocks, parts)
    b.ret_void()
    return fn
