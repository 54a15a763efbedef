"""The dot driver of ``_matmul``: C[i, j] as vectorised dot products of A's rows and B's columns.

Chosen for few rows when both operands are contiguous in k (``x @ W.T`` with a PyTorch-layout
weight), where packing B would cost as much as the product. ``_dot_tile`` computes a small
block of dots along k and ``_tree_sums`` reduces their vectors to scalars together, transposing
as it adds, instead of one horizontal reduction per dot.
"""

from __future__ import annotations

from llvmlite import ir

from ._matmul_tile import _DRIVER_ARGS, MatmulTiling, _store_f32, _Vec
from ._target import I32, I64, for_range, i64, new_function, smin


def _tree_sums(b: ir.IRBuilder, vecs: list[ir.Value], vw: int) -> list[ir.Value]:
    """The lane sums of ``vecs`` (a power-of-two count of ``vw``-lane vectors), in order.

    Reduces them together, transposing as it adds: each level adds the first and second halves
    of every lane segment of two vectors into one, so n vectors take about n shuffles + adds per
    level instead of n separate log2(vw)-step horizontal reductions (which dominated short dot
    products: Silero VAD convs at batch 1, GEMV rows of 256).
    """
    cur = list(vecs)
    width, seg = vw, vw
    assert len(cur) & (len(cur) - 1) == 0 and vw & (vw - 1) == 0

    def mask(lanes: list[int]) -> ir.Constant:
        return ir.Constant(ir.VectorType(I32, len(lanes)), lanes)

    def halves(n_seg: int, offset: int) -> tuple[list[int], list[int]]:
        lo = [offset + s * seg + t for s in range(n_seg) for t in range(seg // 2)]
        hi = [offset + s * seg + t for s in range(n_seg) for t in range(seg // 2, seg)]
        return lo, hi

    while len(cur) > 1 and seg > 1:
        lo_a, hi_a = halves(width // seg, 0)
        lo_b, hi_b = halves(width // seg, width)
        lo, hi = mask(lo_a + lo_b), mask(hi_a + hi_b)
        cur = [
            b.fadd(b.shuffle_vector(cur[i], cur[i + 1], lo), b.shuffle_vector(cur[i], cur[i + 1], hi))
            for i in range(0, len(cur), 2)
        ]
        seg //= 2
    while seg > 1:  # one vector left: fold its segments in place (the width halves)
        lo_l, hi_l = halves(width // seg, 0)
        v = cur[0]
        cur = [b.fadd(b.shuffle_vector(v, v, mask(lo_l)), b.shuffle_vector(v, v, mask(hi_l)))]
        width //= 2
        seg //= 2
    return [b.extract_element(v, ir.Constant(I32, lane)) for v in cur for lane in range(width)]


def _dot_tile(
    b: ir.IRBuilder,
    vec: _Vec,
    tm: int,
    tn: int,
    *,
    a: ir.Value,
    bp: ir.Value,
    c: ir.Value,
    i0: ir.Value,
    j0: ir.Value,
    m: ir.Value,
    n: ir.Value,
    k: ir.Value,
    k_full: ir.Value,
    tail_mask: ir.Value,
    a_rs: ir.Value,
    b_cs: ir.Value,
    c_rs: ir.Value,
) -> None:
    """``tm x tn`` dot products starting at (i0, j0); out-of-range rows/columns are clamped
    to the last valid one when read and skipped when stored."""
    vw = vec.vw
    last_i = b.sub(m, i64(1))
    last_j = b.sub(n, i64(1))
    arow = [b.mul(smin(b, b.add(i0, i64(r)), last_i), a_rs) for r in range(tm)]
    bcol = [b.mul(smin(b, b.add(j0, i64(q)), last_j), b_cs) for q in range(tn)]
    pre = b.block
    head = b.append_basic_block("kk.head")
    body = b.append_basic_block("kk.body")
    done = b.append_basic_block("kk.done")
    b.branch(head)
    b.position_at_end(head)
    kk = b.phi(I64, name="kk")
    kk.add_incoming(i64(0), pre)
    accs = [[b.phi(vec.vty, name=f"d{r}_{q}") for q in range(tn)] for r in range(tm)]
    for row in accs:
        for acc in row:
            acc.add_incoming(vec.zero, pre)
    b.cbranch(b.icmp_signed("<", kk, k_full), body, done)
    b.position_at_end(body)
    av = [vec.load(b, a, b.add(arow[r], kk), None) for r in range(tm)]
    bv = [vec.load(b, bp, b.add(bcol[q], kk), None) for q in range(tn)]
    for r in range(tm):
        for q in range(tn):
            accs[r][q].add_incoming(b.call(vec.fma, [av[r], bv[q], accs[r][q]]), body)
    kk.add_incoming(b.add(kk, i64(vw)), body)
    b.branch(head)

    b.position_at_end(done)
    av = [vec.load(b, a, b.add(arow[r], k_full), tail_mask) for r in range(tm)]
    bv = [vec.load(b, bp, b.add(bcol[q], k_full), tail_mask) for q in range(tn)]
    finals = [b.call(vec.fma, [av[r], bv[q], accs[r][q]]) for r in range(tm) for q in range(tn)]
    flat = _tree_sums(b, finals, vw)
    sums = [flat[r * tn : (r + 1) * tn] for r in range(tm)]
    exit_bb = b.append_basic_block("tile.exit")
    for r in range(tm):
        if r > 0:
            row_bb = b.append_basic_block(f"tile.row{r}")
            b.cbranch(b.icmp_signed("<", b.add(i0, i64(r)), m), row_bb, exit_bb)
            b.position_at_end(row_bb)
        base = b.add(b.mul(b.add(i0, i64(r)), c_rs), j0)
        for q in range(tn):
            if q > 0:
                col_bb = b.append_basic_block(f"tile.r{r}c{q}")
                nxt_bb = b.append_basic_block(f"tile.r{r}c{q}.skip")
                b.cbranch(b.icmp_signed("<", b.add(j0, i64(q)), n), col_bb, nxt_bb)
                b.position_at_end(col_bb)
                _store_f32(b, sums[r][q], c, b.add(base, i64(q)))
                b.branch(nxt_bb)
                b.position_at_end(nxt_bb)
            else:
                _store_f32(b, sums[r][q], c, base)
    b.branch(exit_bb)
    b.position_at_end(exit_bb)


def _dot(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """``a_cs == 1 and b_rs == 1``: C[i, j] = dot(A row i, B column j), vectorised along k.

    Used for small M with B transposed (``x @ W.T``): packing W would cost as much as the
    product.  Tiles of 4x4 dots (8 loads per 16 FMAs) for groups of four rows and for three
    rows left, 2x4 for two, 1x8 for one; each dot is reduced horizontally once at the end
    (masked k tail).
    """
    name = f"asyncjit.matmul.dot{vec.vw}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C"), inline="noinline")
    a, bp, c, _scratch, m, n, k, a_rs, _a_cs, _b_rs, b_cs, c_rs = fn.args
    k_full = b.mul(b.sdiv(k, i64(vec.vw)), i64(vec.vw))
    tail_mask = vec.lane_mask(b, b.sub(k, k_full), 0)
    common = dict(
        a=a, bp=bp, c=c, m=m, n=n, k=k, k_full=k_full, tail_mask=tail_mask, a_rs=a_rs, b_cs=b_cs, c_rs=c_rs
    )
    m4 = b.mul(b.sdiv(m, i64(4)), i64(4))
    rest = b.sub(m, m4)
    with for_range(b, i64(0), m4, 4, name="i4") as i0, for_range(b, i64(0), n, 4, name="j4") as j0:
        _dot_tile(b, vec, 4, 4, i0=i0, j0=j0, **common)
    # two or three rows left: one pass over B for them all (as 1x8 passes, a row each, 2 x 4096
    # @ W.T of 4096 x 4096 read W twice: 5.7 ms against 3.0), three in 4x4 tiles whose fourth
    # row re-reads the third and is not stored (6.2 -> 3.6 ms)
    with b.if_then(b.icmp_signed("==", rest, i64(3))), for_range(b, i64(0), n, 4, name="j3") as j0:
        _dot_tile(b, vec, 4, 4, i0=m4, j0=j0, **common)
    with b.if_then(b.icmp_signed("==", rest, i64(2))), for_range(b, i64(0), n, 4, name="j2") as j0:
        _dot_tile(b, vec, 2, 4, i0=m4, j0=j0, **common)
    with b.if_then(b.icmp_signed("==", rest, i64(1))), for_range(b, i64(0), n, 8, name="j8") as j0:
        _dot_tile(b, vec, 1, 8, i0=m4, j0=j0, **common)
    b.ret_void()
    return fn
