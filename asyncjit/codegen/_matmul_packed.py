"""The packed drivers of ``_matmul``: BLIS-style cache blocking for every case the others skip.

``_packed`` walks B in NC-column by KC-deep blocks and A in MC-row blocks, copying them into
``scratch`` with ``_pack_b`` (NR-column panels; a masked gather for transposed or strided B) and
``_pack_a`` (MR-row panels, skipped when A's rows are contiguous in k), then runs the
micro-kernel of ``_matmul_tile`` over the panels. It handles any strides, including 0.

``_prepacked`` runs the same nest over a B that is already in panels (a constant weight laid
out once, at compile time: see ``emit_matmul(b_panels=True)``), so no B is copied per call.
"""

from __future__ import annotations

from llvmlite import ir

from ._matmul_tile import _DRIVER_ARGS, MatmulTiling, _load_f32, _micro, _row_sizes, _store_f32, _Vec
from ._target import F32, I32, I64, PTR, for_range, i64, new_function, smin


def _pack_a(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """Copy ``A[0:mc, 0:kc]`` into MR-row panels ``dst[(i//MR)*MR*kc + kk*MR + i%MR]``, zero-padded."""
    args: list[tuple[str, ir.Type]] = [
        ("a", PTR),
        ("a_rs", I64),
        ("a_cs", I64),
        ("mc", I64),
        ("kc", I64),
        ("dst", PTR),
    ]
    name = f"asyncjit.matmul.pack_a{t.mr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, args, noalias=("a", "dst"), inline="noinline")
    a, a_rs, a_cs, mc, kc, dst = fn.args
    mr = t.mr
    rows_padded = b.mul(b.sdiv(b.add(mc, i64(mr - 1)), i64(mr)), i64(mr))
    zero = ir.Constant(F32, 0.0)
    with b.if_else(b.icmp_signed("==", a_cs, i64(1))) as (rowwise, generic):
        with rowwise, for_range(b, i64(0), rows_padded, name="i") as i:
            # A rows are contiguous in k: stream each row, write with stride MR.
            panel = b.sdiv(i, i64(mr))
            base = b.add(b.mul(panel, b.mul(kc, i64(mr))), b.srem(i, i64(mr)))
            valid = b.icmp_signed("<", i, mc)
            src = b.mul(b.select(valid, i, i64(0)), a_rs)
            with b.if_else(valid) as (copy, pad):
                with copy, for_range(b, i64(0), kc, name="kk") as kk:
                    _store_f32(b, _load_f32(b, a, b.add(src, kk)), dst, b.add(base, b.mul(kk, i64(mr))))
                with pad, for_range(b, i64(0), kc, name="kz") as kk:
                    _store_f32(b, zero, dst, b.add(base, b.mul(kk, i64(mr))))
        with generic, for_range(b, i64(0), rows_padded, mr, name="ip") as i0:
            base = b.mul(i0, kc)
            with for_range(b, i64(0), kc, name="kk") as kk:
                koff = b.mul(kk, a_cs)
                for r in range(mr):
                    i = b.add(i0, i64(r))
                    valid = b.icmp_signed("<", i, mc)
                    v = _load_f32(b, a, b.add(b.mul(b.select(valid, i, i64(0)), a_rs), koff))
                    _store_f32(
                        b, b.select(valid, v, zero), dst, b.add(base, b.add(b.mul(kk, i64(mr)), i64(r)))
                    )
    b.ret_void()
    return fn


def _pack_b(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """Copy ``B[0:kc, 0:nc]`` into NR-column panels ``dst[(j//NR)*NR*kc + kk*NR + j%NR]``, zero-padded."""
    args: list[tuple[str, ir.Type]] = [
        ("b", PTR),
        ("b_rs", I64),
        ("b_cs", I64),
        ("kc", I64),
        ("nc", I64),
        ("dst", PTR),
    ]
    name = f"asyncjit.matmul.pack_b{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(vec.module, name, args, noalias=("b", "dst"), inline="noinline")
    bp, b_rs, b_cs, kc, nc, dst = fn.args
    nr, vw = t.nr, vec.vw
    with b.if_else(b.icmp_signed("==", b_cs, i64(1))) as (rows, generic):
        with rows, for_range(b, i64(0), nc, nr, name="jp") as j0:
            width = b.sub(nc, j0)
            masks = [vec.lane_mask(b, width, v * vw) for v in range(nr // vw)]
            base = b.mul(j0, kc)
            with for_range(b, i64(0), kc, name="kk") as kk:
                src = b.add(b.mul(kk, b_rs), j0)
                out = b.add(base, b.mul(kk, i64(nr)))
                for v in range(nr // vw):
                    val = vec.load(b, bp, b.add(src, i64(v * vw)), masks[v])
                    vec.store(b, val, dst, b.add(out, i64(v * vw)), None)
        with generic, for_range(b, i64(0), nc, nr, name="jp") as j0:
            # Transposed or strided B: masked gathers, one vector of columns per k (masked-off
            # lanes are not accessed and read as the zero padding).
            base = b.mul(j0, kc)
            width = b.sub(nc, j0)
            masks = [vec.lane_mask(b, width, v * vw) for v in range(nr // vw)]
            bp_int = vec.splat(b, b.ptrtoint(bp, I64))
            col_offsets = []
            for v in range(nr // vw):
                cols = b.add(
                    vec.splat(b, b.trunc(j0, I32)), ir.Constant(vec.ity, [v * vw + i for i in range(vw)])
                )
                cols = b.select(masks[v], cols, vec.splat(b, b.trunc(j0, I32)))
                col_offsets.append(b.mul(b.sext(cols, vec.i64ty), vec.splat(b, b_cs)))
            with for_range(b, i64(0), kc, name="kk") as kk:
                koff = vec.splat(b, b.mul(kk, b_rs))
                out = b.add(base, b.mul(kk, i64(nr)))
                for v in range(nr // vw):
                    # (llvmlite types a vector-index GEP as a scalar ptr; go through integers)
                    addr = b.add(bp_int, b.shl(b.add(col_offsets[v], koff), vec.splat(b, i64(2))))
                    ptrs = b.inttoptr(addr, vec.pty)
                    val = b.call(vec.gather, [ptrs, ir.Constant(I32, 4), masks[v], vec.zero])
                    vec.store(b, val, dst, b.add(out, i64(v * vw)), None)
    b.ret_void()
    return fn


def _packed(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """BLIS loop nest: NC columns x KC depth of B packed, MC rows of A packed, then micro-tiles."""
    name = f"asyncjit.matmul.packed{t.mr}x{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(
        vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C", "scratch"), inline="noinline"
    )
    a, bp, c, scratch, m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs = fn.args
    pack_a = _pack_a(vec, t)
    pack_b = _pack_b(vec, t)
    micro_half = _micro(vec, t.mr, t.nr // 2, b_padded=True)
    # 64-byte align the scratch; the A block (sized from the runtime M, K) comes first.
    base = b.ptrtoint(scratch, I64)
    aligned = b.and_(b.add(base, i64(63)), i64(-64))
    a_pack = b.inttoptr(aligned, PTR)
    kc_max = smin(b, k, i64(t.kc))
    mc_max = smin(b, m, i64(t.mc))
    a_elems = b.mul(b.mul(b.sdiv(b.add(mc_max, i64(t.mr - 1)), i64(t.mr)), i64(t.mr)), kc_max)
    a_elems = b.and_(b.add(a_elems, i64(15)), i64(-16))
    b_pack = b.gep(a_pack, [a_elems], source_etype=F32)
    # A rows contiguous in k: the micro-kernel reads them in place (an MR x KC tile's rows are
    # MR sequential streams); packing them cost a copy of A per call.
    a_rows = b.icmp_signed("==", a_cs, i64(1))
    with for_range(b, i64(0), n, t.nc, name="jc") as jc:
        nc = smin(b, i64(t.nc), b.sub(n, jc))
        with for_range(b, i64(0), k, t.kc, name="pc") as pc:
            kc = smin(b, i64(t.kc), b.sub(k, pc))
            b_src = b.gep(bp, [b.add(b.mul(pc, b_rs), b.mul(jc, b_cs))], source_etype=F32)
            b.call(pack_b, [b_src, b_rs, b_cs, kc, nc, b_pack])
            accumulate = b.icmp_signed(">", pc, i64(0))
            with for_range(b, i64(0), m, t.mc, name="ic") as ic:
                mc = smin(b, i64(t.mc), b.sub(m, ic))
                a_src = b.gep(a, [b.add(b.mul(ic, a_rs), b.mul(pc, a_cs))], source_etype=F32)
                with b.if_then(b.not_(a_rows)):
                    b.call(pack_a, [a_src, a_rs, a_cs, mc, kc, a_pack])
                with for_range(b, i64(0), nc, t.nr, name="jr") as jr:
                    nr_eff = smin(b, i64(t.nr), b.sub(nc, jr))
                    b_panel = b.gep(b_pack, [b.mul(jr, kc)], source_etype=F32)
                    c_blk = b.gep(c, [b.add(b.mul(ic, c_rs), b.add(jc, jr))], source_etype=F32)
                    with for_range(b, i64(0), mc, t.mr, name="ir") as ir_:
                        mr_eff = smin(b, i64(t.mr), b.sub(mc, ir_))
                        a_tile = b.select(
                            a_rows,
                            b.gep(a_src, [b.mul(ir_, a_rs)], source_etype=F32),
                            b.gep(a_pack, [b.mul(ir_, kc)], source_etype=F32),
                        )
                        args = [
                            a_tile,
                            b.select(a_rows, a_rs, i64(1)),
                            b.select(a_rows, i64(1), i64(t.mr)),
                            b_panel,
                            i64(t.nr),
                            b.gep(c_blk, [b.mul(ir_, c_rs)], source_etype=F32),
                            c_rs,
                            kc,
                            mr_eff,
                            nr_eff,
                            accumulate,
                        ]
                        whole = b.and_(
                            b.icmp_signed("==", mr_eff, i64(t.mr)), b.icmp_signed("==", nr_eff, i64(t.nr))
                        )
                        with b.if_else(whole) as (full_tile, edge_tile):
                            with full_tile:
                                b.call(_micro(vec, t.mr, t.nr, b_padded=True, full=True), args)
                            # a last panel of at most NR/2 columns: half-width tiles (half the
                            # FMAs; with the rule above, 2048x49x512 went 50-56 -> 69-72 GFLOP/s, AVX2)
                            with edge_tile:
                                half = b.icmp_signed("<=", nr_eff, i64(t.nr // 2))
                                with b.if_else(half) as (narrow, wide):
                                    with narrow:
                                        b.call(micro_half, args)
                                    with wide:
                                        b.call(_micro(vec, t.mr, t.nr, b_padded=True), args)
    b.ret_void()
    return fn


def _prepacked(vec: _Vec, t: MatmulTiling) -> ir.Function:
    """The packed nest over a B already in NR-column panels: panel ``q`` (columns ``q*NR`` on,
    zero-padded to NR) holds element (k, j) at ``B[q*b_cs*NR + k*b_rs + j % NR]``, so the caller
    passes ``b_rs = NR`` and ``b_cs = K`` (column ``j0``, a multiple of NR, starts at ``j0 *
    b_cs``: a column split hands a part its panels as for a plain B). A is read in place (any
    strides; its rows contiguous in k is the fast case) and no scratch is used: packing B per
    call cost 8-27% of the products a conv makes of its weight (``benchmarks/conv_ab.py``).
    Rows past the last whole MR tile take the 4-, 2- and 1-row micro-kernels, so a 49-row A
    wastes no tile height. The first row tile of each panel asks for the next panel into L2 as
    it goes (``_micro(prefetch=True)``): a conv's weight comes from memory once per call, and
    with few rows per panel the hardware prefetchers left the tile waiting for it (a 49-row
    product on a 4 MB weight read cold: 1.10-1.30x faster; ResNet-50's 7x7 convs 1.2x)."""
    name = f"asyncjit.matmul.prepacked{t.mr}x{t.nr}"
    existing = vec.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn, b = new_function(
        vec.module, name, _DRIVER_ARGS, noalias=("A", "B", "C", "scratch"), inline="noinline"
    )
    a, bp, c, _scratch, m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs = fn.args
    m_full = b.mul(b.sdiv(m, i64(t.mr)), i64(t.mr))
    with for_range(b, i64(0), k, t.kc, name="pc") as pc:
        kc = smin(b, i64(t.kc), b.sub(k, pc))
        accumulate = b.icmp_signed(">", pc, i64(0))
        with for_range(b, i64(0), m, t.mc, name="ic") as ic:
            i_end = smin(b, b.add(ic, i64(t.mc)), m)
            i_full = smin(b, i_end, m_full)
            # panels outer: a panel's KC x NR slice (16 KiB at 256 x 16) is read from L1 by
            # every row tile of the MC-row block, the block from L2 by every panel
            with for_range(b, i64(0), n, t.nr, name="jr") as jr:
                nr_eff = smin(b, i64(t.nr), b.sub(n, jr))
                panel = b.gep(bp, [b.add(b.mul(jr, b_cs), b.mul(pc, b_rs))], source_etype=F32)
                next_panel = b.gep(panel, [b.mul(b_cs, i64(t.nr))], source_etype=F32)  # NR columns on
                whole = b.icmp_signed("==", nr_eff, i64(t.nr))

                def tile(rows: int, r: ir.Value, full: bool, prefetch: bool = False) -> None:
                    args = [
                        b.gep(a, [b.add(b.mul(r, a_rs), b.mul(pc, a_cs))], source_etype=F32),
                        a_rs,
                        a_cs,
                        panel,
                        b_rs,
                        b.gep(c, [b.add(b.mul(r, c_rs), jr)], source_etype=F32),
                        c_rs,
                        kc,
                        i64(rows),
                        nr_eff,
                        accumulate,
                    ]
                    if not full:
                        b.call(_micro(vec, rows, t.nr, b_padded=True), args)
                        return
                    with b.if_else(whole) as (all_columns, last_panel):
                        with all_columns:
                            micro = _micro(vec, rows, t.nr, b_padded=True, full=True, prefetch=prefetch)
                            b.call(micro, [*args, next_panel] if prefetch else args)
                        with last_panel:
                            b.call(_micro(vec, rows, t.nr, b_padded=True), args)

                # the first row tile of a panel asks for the next panel (a constant weight, read
                # from memory once per call) while the FMAs run
                with b.if_then(b.icmp_signed("<", ic, i_full)):
                    tile(t.mr, ic, True, prefetch=True)
                with for_range(b, b.add(ic, i64(t.mr)), i_full, t.mr, name="ir") as r:
                    tile(t.mr, r, True)
                with b.if_then(b.icmp_signed("<", i_full, i_end)):  # the rows after m_full
                    row = i_full
                    for size in _row_sizes(t.mr):
                        take = b.icmp_signed(">=", b.sub(i_end, row), i64(size))
                        with b.if_then(take):
                            tile(size, row, False)
                        row = b.select(take, b.add(row, i64(size)), row)
    b.ret_void()
    return fn
