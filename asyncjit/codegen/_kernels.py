"""One LLVM function per fused kernel.

Every kernel has the same C-level shape: ``void k(ptr out, ptr read_0, ..., ptr scratch, i64
var_0, ...)``, pointers ``noalias`` (memory planning never lets a kernel's output overlap what it
reads), except in a kernel that writes its output over a donated input it reads (``in_place``):
those two pointers may be equal and lose ``noalias``; an in-place ``scatter`` does not copy its base.
Loop trip counts are the runtime var values (invariant 3), so LLVM's vectorizer emits a vector
main loop plus a scalar remainder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from ..dtypes import float32
from ..graph import Node, reduce_identity
from ..graph._nn import conv_layout
from ..passes import Kernel
from ..passes._fusion import (
    conv1d_fft_sign,
    conv1d_kn_weight,
    conv_geometry,
    conv_panel_weight,
    conv_residual,
    conv_spatial,
    conv_wino_weight,
    matmul_operand,
    tuned_conv,
)
from ..symbolic import Dim, Index, Var, is_planned, prod, upper
from ._convfft import emit_conv1d_fft, fft_scratch_bytes
from ._convnd import convnd_scratch_bytes, emit_convnd
from ._dynamic import emit_index_check, emit_prefix
from ._expr import Emitter, flat_eligible, linearize
from ._index import i64
from ._library import conv_library, matmul_library
from ._nnkernels import UNROLL_TAPS, emit_argext, emit_conv_loop, emit_cumsum, emit_pool, emit_topk
from ._reduce_rows import emit_reduce_rows, rows_worthwhile
from ._scalar import TRANSCENDENTAL, combine, double_to_half, intrinsic
from ._stream import emit_streaming, streaming_worthwhile
from ._target import interleave_hint
from ._types import F16, F32, F64, I64, PTR, VOID, compute_type, const, storage_type

__all__ = ["emit_kernel", "scratch_bytes"]

_REDUCE_FLAGS = ("reassoc", "contract")

MATH_INTERLEAVE = 4
"""Vectors per iteration of a flat elementwise loop that calls a math function (exp, tanh,
sigmoid, gelu, ...). Left to itself, LLVM's vectorizer keeps one vector of such a long body per
iteration, and the core then waits on its dependency chains: over 65,536 float32 on AVX-512,
4 vectors per iteration ran sigmoid 1.15-1.45x, gelu 1.17x, exp 1.08-1.15x and the exp-based
tanh of AVX2 hosts 1.22-1.28x (the table-driven tanh of AVX-512 hosts gains nothing); cheap
bodies, limited by memory, are left alone."""

_MATH_OPS = frozenset({*TRANSCENDENTAL, "gelu"})


def _calls_math(kernel: Kernel) -> bool:
    """Whether ``kernel``'s fused expression calls a float math function."""
    return any(n.op in _MATH_OPS for n in (kernel.node, *kernel.fused))


def scratch_bytes(kernel: Kernel) -> int:
    """Scratch memory ``kernel`` needs at the upper bound of every var."""
    node = kernel.node
    if node.dtype != float32:
        return 0
    if kernel.kind == "matmul" and (lib := matmul_library()) is not None:
        a, b = node.inputs
        m = prod(a.shape[:-1]) if _folds_batch(node) else a.shape[-2]
        return int(lib.matmul_scratch_bytes(upper(m), upper(b.shape[-1]), upper(a.shape[-1])))
    if kernel.kind == "conv" and tuned_conv(node := kernel.op_node):
        return int(
            convnd_scratch_bytes(
                **conv_geometry(node),
                p_max=math.prod(
                    max(upper(d), 0) for d in conv_spatial(node.shape, conv_layout(node.attrs)[1])
                ),
                w_panels=conv_panel_weight(node) is not None,
                w_wino=conv_wino_weight(node) is not None,
            )
        )
    if kernel.kind == "conv1d" and conv1d_fft_sign(node) is not None:
        return fft_scratch_bytes(int(node.inputs[1].shape[2]))
    if kernel.kind == "conv1d" and (lib := conv_library()) is not None and _static_pads(node):
        x, w = node.inputs
        cout, cin_g, k = (int(d) for d in w.shape)
        groups = node.attrs["groups"]
        return int(
            lib.conv1d_scratch_bytes(
                cin=cin_g * groups,
                cout=cout,
                k=k,
                stride=node.attrs["stride"],
                dilation=node.attrs["dilation"],
                groups=groups,
                n_max=upper(x.shape[0]),
                l_max=upper(x.shape[2]),
                pad_l=int(node.attrs["padding"][0]),
                pad_r=int(node.attrs["padding"][1]),
            )
        )
    return 0


def _static_pads(node: Node) -> bool:
    """Static pads and bounded sizes: the library conv1d (its im2col scratch is sized for the
    bounds; a size over an unbounded var takes the direct loop, which needs none)."""
    return all(isinstance(p, int) for p in node.attrs["padding"]) and is_planned(node.inputs[0].shape)


class _Ctx:
    """Function, builder, emitter and parameter values of the kernel being emitted."""

    def __init__(
        self,
        module: ir.Module,
        kernel: Kernel,
        mat: frozenset[int],
        vars: Sequence[Var],
        in_place: Node | None = None,
    ) -> None:
        reads = list(kernel.reads)
        self.in_place = in_place
        # a kernel that sets a data-dependent size also takes a pointer where it stores the size
        # it computed and returns the size clamped into its bound (what later kernels loop over)
        self.sets_size = kernel.kind in ("prefix", "index_check")
        extra = [PTR] if self.sets_size else []
        fnty = ir.FunctionType(
            I64 if self.sets_size else VOID, [PTR] * (len(reads) + 2) + [I64] * len(vars) + extra
        )
        self.fn = ir.Function(module, fnty, kernel.name)
        self.fn.linkage = "internal"
        self.fn.attributes.add("noinline")
        self.fn.attributes.add("nounwind")
        for i, arg in enumerate(self.fn.args[: len(reads) + 2]):
            if in_place is None or (i != 0 and (i > len(reads) or reads[i - 1] is not in_place)):
                arg.add_attribute("noalias")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.out = self.fn.args[0]
        self.scratch = self.fn.args[len(reads) + 1]
        buffers = {n.id: self.fn.args[1 + i] for i, n in enumerate(reads)}
        env = {v.name: self.fn.args[len(reads) + 2 + i] for i, v in enumerate(vars)}
        self.buffers = buffers
        self.em = Emitter(self.b, env, buffers, mat)
        self.status = self.fn.args[-1] if self.sets_size else None
        self.result: ir.Value | None = None

    def loop(
        self,
        extent: Dim,
        body: Callable[[Index], None],
        count: ir.Value | None = None,
        interleave: int = 0,
    ) -> None:
        """``for i in range(extent)`` with ``i`` bound as an index atom.

        ``count``, if given, is the runtime trip count to use instead (it must be ``<= extent``);
        ``interleave``, if given, the vectors per iteration asked of LLVM's vectorizer.
        """
        b = self.b
        count = self.em.dim(extent) if count is None else count
        pre = b.block
        head = b.append_basic_block("loop")
        exit_ = b.append_basic_block("loop.end")
        b.cbranch(b.icmp_signed(">", count, i64(0)), head, exit_)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(i64(0), pre)
        self.em._memo.append({})
        body(self.em.bind(i, extent))
        self.em._memo.pop()
        nxt = b.add(i, i64(1), flags=["nuw", "nsw"])
        i.add_incoming(nxt, b.block)
        back = b.cbranch(b.icmp_signed("<", nxt, count), head, exit_)
        if interleave > 1:
            interleave_hint(back, interleave)
        b.position_at_end(exit_)

    def nest(
        self, dims: Sequence[Dim], body: Callable[[tuple[Dim, ...]], None], prefix: tuple[Dim, ...] = ()
    ) -> None:
        """Loops over every dim (size-1 dims get index 0, no loop), innermost last."""
        if not dims:
            body(prefix)
            return
        d = dims[0]
        if isinstance(d, int) and d == 1:
            self.nest(dims[1:], body, (*prefix, 0))
            return
        self.loop(d, lambda i: self.nest(dims[1:], body, (*prefix, i)))

    def alloca(self, ty: ir.Type) -> ir.Value:
        with self.b.goto_entry_block():
            self.b.position_at_start(self.fn.entry_basic_block)
            return self.b.alloca(ty)


def emit_kernel(
    module: ir.Module,
    kernel: Kernel,
    mat: frozenset[int],
    vars: Sequence[Var],
    in_place: Node | None = None,
) -> ir.Function:
    """Add ``kernel`` to ``module`` as an internal function named ``kernel.name``; ``in_place``:
    the donated input it reads and writes its output over (``plan_memory``'s aliases)."""
    ctx = _Ctx(module, kernel, mat, vars, in_place)
    emit = {
        "loop": _loop,
        "copy": _copy,
        "reduce": _reduce,
        "matmul": _matmul,
        "conv1d": _conv1d,
        "conv": _conv,
        "pool": emit_pool,
        "cumsum": emit_cumsum,
        "argext": emit_argext,
        "topk": emit_topk,
        "scatter": _scatter,
        "nonzero": _nonzero,
        "prefix": emit_prefix,
        "index_check": emit_index_check,
    }[kernel.kind]
    emit(ctx, kernel)
    if ctx.result is not None:
        ctx.b.ret(ctx.result)
    else:
        ctx.b.ret_void()
    return ctx.fn


def _store_all(ctx: _Ctx, node: Node, value: Callable[[tuple[Dim, ...]], ir.Value]) -> None:
    ctx.nest(node.shape, lambda idx: ctx.em.store(ctx.out, node, linearize(idx, node.shape), value(idx)))


def _loop(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    if node.ndim >= 1 and flat_eligible(node, ctx.em.mat):
        numel = prod(node.shape)
        ctx.em.flat_shape = node.shape
        math = _calls_math(kernel)
        # a math body is bound by its arithmetic, not by memory: streaming stores gain nothing,
        # and their 16 lanes written out one by one left the SLP vectorizer a body it did not
        # widen (sigmoid over 4M floats: 0.40 Gelem/s, against 1.5 in the plain loop)
        if streaming_worthwhile(node, kernel) and not math:
            emit_streaming(ctx, node, numel)
            return

        def body(f: Index) -> None:
            ctx.em.store(ctx.out, node, f, ctx.em.value(node, (f,), top=True))

        ctx.loop(numel, body, interleave=MATH_INTERLEAVE if math else 0)
        return
    _store_all(ctx, node, lambda idx: ctx.em.value(node, idx, top=True))


def _copy(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    _store_all(ctx, node, lambda idx: ctx.em.value(node, idx))


def _wide(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return v if v.type == F64 else b.fpext(v, F64)


def _combine(
    ctx: _Ctx, op: str, acc: ir.Value, v: ir.Value, is_float: bool, unsigned: bool = False
) -> ir.Value:
    b = ctx.b
    if is_float:
        if op == "sum":
            return b.fadd(acc, _wide(b, v), flags=_REDUCE_FLAGS)
        if op == "prod":
            return b.fmul(acc, _wide(b, v), flags=_REDUCE_FLAGS)
        sfx = "f64" if acc.type == F64 else "f32"
        name = f"llvm.maximum.{sfx}" if op == "max" else f"llvm.minimum.{sfx}"
        return intrinsic(b, name, acc.type, [acc, v])
    if op == "sum":
        return b.add(acc, v)
    if op == "prod":
        return b.mul(acc, v)
    pick = ">" if op == "max" else "<"
    cmp = b.icmp_unsigned if unsigned else b.icmp_signed
    return b.select(cmp(pick, acc, v), acc, v)


def _float_acc(node: Node) -> ir.Type:
    """Float sum/prod accumulate in double and round once (the reference semantics, graph._ops):
    a float32 sum cannot overflow midway, and the unspecified order costs < 1 ulp. max/min are
    exact in the dtype's own width (float16 in float32)."""
    if node.op == "reduce" and node.attrs["op"] in ("sum", "prod"):
        return F64
    return F64 if node.dtype.itemsize == 8 else F32


def _reduce(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    x = node.inputs[0]
    op, axes = node.attrs["op"], tuple(node.attrs["axes"])
    is_float = node.dtype.is_float
    acc_ty = _float_acc(node) if is_float else compute_type(node.dtype)
    init = reduce_identity(op, node.dtype)
    init_value = ir.Constant(acc_ty, float(init)) if is_float else const(node.dtype, init)
    unsigned = node.dtype.is_unsigned

    def value_at(full: tuple[Dim, ...]) -> ir.Value:
        v = ctx.em.value(x, full)
        return ctx.b.fpext(v, F32) if v.type == F16 else v

    def combine(acc_v: ir.Value, v: ir.Value) -> ir.Value:
        return _combine(ctx, op, acc_v, v, is_float, unsigned)

    def finish(idx: tuple[Dim, ...], result: ir.Value) -> None:
        if result.type == F64 and node.dtype.name == "float16":
            result = double_to_half(ctx.b, result)  # rounded once, as the reference does
        elif result.type == F64 and node.dtype.name == "float32":
            result = ctx.b.fptrunc(result, F32)
        elif node.dtype.name == "float16":
            result = ctx.b.fptrunc(result, F16)
        ctx.em.store(ctx.out, node, linearize(idx, node.shape), result)

    if rows_worthwhile(x.shape, axes):  # the last axis kept: read rows, not columns
        emit_reduce_rows(ctx, node.shape, x.shape, axes, acc_ty, init_value, value_at, combine, finish)
        return
    acc = ctx.alloca(acc_ty)
    rank = len(x.shape)
    if len(axes) >= 2 and x.id in ctx.em.mat and sorted(axes) == list(range(rank - len(axes), rank)):
        # The trailing axes of a buffer, reduced, are one contiguous run per output element: one
        # loop over the run, in the same order (a global average pool over [1, 1000, 13, 13]
        # took 131 us as 13 loops of 13 elements each, ONNX Runtime's 47 us).
        last = max(axes)
        run = prod(x.shape[a] for a in axes)

        def over_run(idx: tuple[Dim, ...]) -> None:
            ctx.b.store(init_value, acc)

            def step(j: Dim) -> None:
                full = [0 if a in axes else d for a, d in enumerate(idx)]
                full[last] = j  # the offset of the run's start plus j: linearize is affine
                ctx.b.store(combine(ctx.b.load(acc, typ=acc_ty), value_at(tuple(full))), acc)

            ctx.loop(run, step)
            finish(idx, ctx.b.load(acc, typ=acc_ty))

        ctx.nest(node.shape, over_run)
        return

    def outer(idx: tuple[Dim, ...]) -> None:
        ctx.b.store(init_value, acc)

        def inner(red: tuple[Dim, ...]) -> None:
            full = list(idx)
            for ax, r in zip(axes, red, strict=True):
                full[ax] = r
            ctx.b.store(combine(ctx.b.load(acc, typ=acc_ty), value_at(tuple(full))), acc)

        ctx.nest([x.shape[a] for a in axes], inner)
        finish(idx, ctx.b.load(acc, typ=acc_ty))

    ctx.nest(node.shape, outer)


def _matmul(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    a, b = node.inputs
    batch = prod(a.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    em = ctx.em
    lib = matmul_library()
    if node.dtype.name == "float32" and lib is not None:
        fn = lib.emit_matmul(ctx.fn.module, f"{kernel.name}.mm")
        a_ptr, a_strides = _operand(ctx, a, m, k)
        b_ptr, b_strides = _operand(ctx, b, k, n)
        if _folds_batch(node):
            batch, m, a_strides = 1, batch * m, (0, k, 1)
        dims = [em.dim(e) for e in (batch, m, n, k, *a_strides, *b_strides, m * n, n)]
        ctx.b.call(fn, [a_ptr, b_ptr, ctx.out, ctx.scratch, *dims])
        return
    is_float = node.dtype.is_float
    acc_ty = _float_acc(node) if is_float else compute_type(node.dtype)
    acc = ctx.alloca(acc_ty)
    b_ = ctx.b

    def load3(nd: Node, idx: tuple[Dim, ...], shape: tuple[Dim, ...]) -> ir.Value:
        # operands are contiguous buffers, so a 3-D [batch, rows, cols] view has the same offsets
        ty = storage_type(nd.dtype)
        ptr = b_.gep(ctx.buffers[nd.id], [em.dim(linearize(idx, shape))], inbounds=True, source_etype=ty)
        v = b_.load(ptr, typ=ty)
        return b_.fpext(v, F32) if v.type == F16 else v

    def cell(idx: tuple[Dim, ...]) -> None:
        p, i, j = idx
        b_.store(ir.Constant(acc_ty, 0.0 if is_float else 0), acc)

        def step(kk: Index) -> None:
            x, y = load3(a, (p, i, kk), (batch, m, k)), load3(b, (p, kk, j), (batch, k, n))
            cur = b_.load(acc, typ=acc_ty)
            if is_float:
                new = b_.fadd(cur, b_.fmul(x, y, flags=("contract",)), flags=_REDUCE_FLAGS)
            else:
                new = b_.add(cur, b_.mul(x, y))
            b_.store(new, acc)

        ctx.loop(k, step)
        out = b_.load(acc, typ=acc_ty)
        if node.dtype.name == "float16":
            out = b_.fptrunc(out, F16)
        em.store(ctx.out, node, linearize((p, i, j), (batch, m, n)), out)

    ctx.nest((batch, m, n), cell)


def _folds_batch(node: Node) -> bool:
    """Whether a float32 matmul runs as one ``[B*M, K] @ [K, N]`` product: ``b`` is one matrix
    for every batch and ``a`` its own contiguous buffer (rows contiguous across batches). Each
    row is computed as in the batched form; the product is big enough to split over threads."""
    a, b = node.inputs
    if node.ndim < 3:
        return False
    oa, ob = matmul_operand(a), matmul_operand(b)
    return ob.batch_broadcast and not oa.transposed and not oa.batch_broadcast


def _operand(ctx: _Ctx, x: Node, rows: Dim, cols: Dim) -> tuple[ir.Value, tuple[Dim, Dim, Dim]]:
    """Pointer and (batch, row, column) strides of a float32 matmul operand ``[..., rows, cols]``:
    its own contiguous buffer, or a buffer read in place through strides when it is ``X``
    transposed and/or ``X`` broadcast over the batch (see ``passes.matmul_operand``)."""
    src = matmul_operand(x)
    if src.node.id not in ctx.buffers:
        raise AssertionError(f"matmul operand {x!r} has no buffer")  # fusion guarantees one
    batch_stride: Dim = 0 if src.batch_broadcast else rows * cols
    if src.transposed:
        return ctx.buffers[src.node.id], (batch_stride, 1, rows)
    return ctx.buffers[src.node.id], (batch_stride, cols, 1)


def _conv1d(ctx: _Ctx, kernel: Kernel) -> None:
    """Tuned float32 kernel for static paddings; otherwise a direct loop.

    The direct loop loads ``x`` at the input position clamped into ``[0, L-1]`` and selects 0
    for padding, so it never branches per tap. (For ``L == 0`` it reads element 0, which is
    inside every allocation: the arena is at least 64 bytes, numpy never allocates 0 bytes.)
    """
    node = kernel.node
    x, w = node.inputs
    stride, dilation, groups = node.attrs["stride"], node.attrs["dilation"], node.attrs["groups"]
    pl, pr = node.attrs["padding"]
    cout, cin_g, k = (int(d) for d in w.shape)
    n_, length, lout = x.shape[0], x.shape[2], node.shape[2]
    em = ctx.em
    lib = conv_library()
    kn = conv1d_kn_weight(node)  # the weight stored [cin/groups, k, cout], read in place
    fn: ir.Function | None = None
    w_read = w
    if (sign := conv1d_fft_sign(node)) is not None:  # a windowed DFT basis: by FFT
        fn = emit_conv1d_fft(
            ctx.fn.module, f"{kernel.name}.fft", k=k, stride=stride, pad_l=int(pl), pad_r=int(pr), sign=sign
        )
    elif node.dtype.name == "float32" and lib is not None and _static_pads(node):
        fn = lib.emit_conv1d(
            ctx.fn.module,
            f"{kernel.name}.conv",
            cin=cin_g * groups,
            cout=cout,
            k=k,
            stride=stride,
            dilation=dilation,
            groups=groups,
            pad_l=int(pl),
            pad_r=int(pr),
            w_kn=kn is not None,
        )
        w_read = w if kn is None else kn
    if fn is not None:  # both take (x, w, y, scratch, N, L, Lout)
        buffers = [ctx.buffers[x.id], ctx.buffers[w_read.id], ctx.out, ctx.scratch]
        ctx.b.call(fn, [*buffers, em.dim(n_), em.dim(length), em.dim(lout)])
        return
    og = cout // groups
    acc_ty = _float_acc(node)
    acc = ctx.alloca(acc_ty)
    b = ctx.b

    def cell(idx: tuple[Dim, ...]) -> None:
        nn, o, ll = idx
        b.store(ir.Constant(acc_ty, 0.0), acc)
        ov = em.dim(o)
        g = b.udiv(ov, i64(og))

        def tap(kk: Dim) -> None:
            pos: Dim = ll * stride + kk * dilation - pl
            valid = em.in_range(pos, length)
            posv = em.dim(pos)
            hi = b.sub(em.dim(length), i64(1))
            posv = b.select(b.icmp_signed(">", posv, hi), hi, posv)
            posv = b.select(b.icmp_signed("<", posv, i64(0)), i64(0), posv)
            p_atom = em.bind(posv, length)

            def chan(c: Index) -> None:
                cin = em.bind(b.add(b.mul(g, i64(cin_g)), em.dim(c)), cin_g * groups)
                xv = em.load(x, (nn, cin, p_atom))
                wv = em.load(w, (o, c, kk))
                if xv.type == F16:
                    xv, wv = b.fpext(xv, F32), b.fpext(wv, F32)
                xv = b.select(valid, xv, ir.Constant(acc_ty, 0.0))
                cur = b.load(acc, typ=acc_ty)
                b.store(b.fadd(cur, b.fmul(xv, wv, flags=("contract",)), flags=_REDUCE_FLAGS), acc)

            ctx.loop(cin_g, chan)

        if k <= UNROLL_TAPS:  # short kernels unroll (each tap's bounds fold); long ones loop
            for kk in range(k):
                tap(kk)
        else:
            ctx.loop(k, tap)
        out = b.load(acc, typ=acc_ty)
        if node.dtype.name == "float16":
            out = b.fptrunc(out, F16)
        em.store(ctx.out, node, linearize(idx, node.shape), out)

    ctx.nest((n_, cout, lout), cell)


def _scatter(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    x, ind, src = node.inputs
    axis = node.attrs["axis"]
    reduce = node.attrs.get("reduce", "none")
    em, b = ctx.em, ctx.b
    if ctx.in_place is not x:  # in place, the output already holds the base: write the rows only
        _store_all(ctx, node, lambda idx: em.value(x, idx))
    extent = x.shape[axis]

    def each(i: Index) -> None:
        j = em.index_value(ind, (i,))
        ok = b.and_(b.icmp_signed(">=", j, i64(0)), b.icmp_signed("<", j, em.dim(extent)))
        with b.if_then(ok):
            em._memo.append({})
            ja = em.bind(j, extent)
            dims = [d for a, d in enumerate(node.shape) if a != axis]

            def put(rest: tuple[Dim, ...]) -> None:
                dst = linearize((*rest[:axis], ja, *rest[axis:]), node.shape)
                value = em.value(src, (*rest[:axis], i, *rest[axis:]))
                if reduce != "none":
                    ty = storage_type(node.dtype)
                    here = b.load(b.gep(ctx.out, [em.dim(dst)], inbounds=True, source_etype=ty), typ=ty)
                    if node.dtype.is_bool:
                        here = b.icmp_unsigned("!=", here, ir.Constant(ty, 0))
                    value = combine(b, reduce, here, value, node.dtype)
                em.store(ctx.out, node, dst, value)

            ctx.nest(dims, put)
            em._memo.pop()

    ctx.loop(ind.shape[0], each)


def _nonzero(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.node
    (x,) = node.inputs
    size = node.attrs["size"]
    cols = max(x.ndim, 1)
    em, b = ctx.em, ctx.b
    fill = const(node.dtype, node.attrs.get("fill", 0))
    ctx.loop(size * cols, lambda f: em.store(ctx.out, node, f, fill))
    count = ctx.alloca(I64)
    b.store(i64(0), count)
    zero = const(x.dtype, 0)

    def visit(idx: tuple[Dim, ...]) -> None:
        v = em.value(x, idx)
        nz = b.fcmp_unordered("!=", v, zero) if x.dtype.is_float else b.icmp_unsigned("!=", v, zero)
        c = b.load(count, typ=I64)
        with b.if_then(b.and_(nz, b.icmp_signed("<", c, i64(size)))):
            coords = idx if idx else (0,)
            for col, coord in enumerate(coords):
                ptr = b.gep(ctx.out, [b.add(b.mul(c, i64(cols)), i64(col))], inbounds=True, source_etype=I64)
                b.store(em.dim(coord), ptr)
            b.store(b.add(c, i64(1)), count)

    ctx.nest(x.shape, visit)


def _conv(ctx: _Ctx, kernel: Kernel) -> None:
    node = kernel.op_node  # the conv; ``kernel.node`` is a relu or add fused after it, if any
    if not tuned_conv(node):
        emit_conv_loop(ctx, kernel)
        return
    x, w = node.inputs[0], node.inputs[1]
    has_bias = len(node.inputs) == 3
    panels = conv_panel_weight(node)  # the weight laid out in matmul panels, read in place
    wino = conv_wino_weight(node)  # the weight's Winograd transform stored before it
    residual = conv_residual(kernel)  # the other operand of an add fused after the conv
    last_in, last_out = conv_layout(node.attrs)
    fn = emit_convnd(
        ctx.fn.module,
        f"{kernel.name}.conv",
        **conv_geometry(node),
        has_bias=has_bias,
        w_panels=panels is not None,
        w_wino=wino is not None,
        relu=kernel.node.op == "relu",
        residual=residual is not None,
        channels_last=(last_in, last_out),
    )
    w_buf = ctx.buffers[(panels if panels is not None else wino if wino is not None else w).id]
    bias = ctx.buffers[node.inputs[2].id] if has_bias else w_buf
    spatial = (*conv_spatial(x.shape, last_in), *conv_spatial(node.shape, last_out))
    dims = [ctx.em.dim(d) for d in (x.shape[0], *spatial)]
    res = [] if residual is None else [ctx.buffers[residual.id]]
    ctx.b.call(fn, [ctx.buffers[x.id], w_buf, bias, ctx.out, ctx.scratch, *dims, *res])
