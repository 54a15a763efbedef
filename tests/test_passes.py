"""Graph passes: each is a pure graph -> graph function with a checkable effect."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.graph import make_node, structural_key
from asyncjit.passes import (
    ALIGN,
    Graph,
    cse,
    dce,
    fold_constants,
    fuse,
    optimize_graph,
    plan_memory,
    refine,
    simplify,
)
from asyncjit.passes._memory import capacity_bytes


def _ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def test_fold_constants_stores_a_short_conv1d_weight_k_by_n() -> None:
    """A constant conv1d weight of a short output is stored ``[cin/groups, k, cout]`` and
    permuted back (the tuned kernel reads it in place as its matmul's ``[K, N]`` operand); long
    outputs and depthwise convs keep ``[cout, cin/groups, k]``; the value never changes."""
    from asyncjit.passes._fusion import CONV1D_KN_ORDER, conv1d_kn_weight

    rng = np.random.default_rng(5)
    w = rng.standard_normal((12, 3, 3)).astype(np.float32)  # groups=2: cin 6, cout 12
    dw = rng.standard_normal((6, 1, 3)).astype(np.float32)  # depthwise
    short = Tensor.placeholder((Var("n", 1, 64), 6, 8), name="short")
    long = Tensor.placeholder((2, 6, 40), name="long")
    outs = [
        short.conv1d(Tensor.const(w), padding=1, stride=2, groups=2),
        long.conv1d(Tensor.const(w), padding=1, groups=2),
        short.conv1d(Tensor.const(dw), padding=1, groups=6),
    ]
    g = fold_constants(Graph.of([o.node for o in outs], [short.node, long.node]))
    kn, kept, depthwise = (o.inputs[1] for o in g.outputs)
    assert kn.op == "permute" and tuple(kn.attrs["order"]) == CONV1D_KN_ORDER
    assert kn.inputs[0].op == "const" and kn.inputs[0].attrs["value"].shape == (3, 3, 12)
    assert conv1d_kn_weight(g.outputs[0]) is kn.inputs[0]
    assert kept.op == "const" and depthwise.op == "const"
    assert conv1d_kn_weight(g.outputs[1]) is None and conv1d_kn_weight(g.outputs[2]) is None
    xv = rng.standard_normal((5, 6, 8)).astype(np.float32)
    want = reference.evaluate(outs[0].node, {short: xv}, {"n": 5})
    np.testing.assert_array_equal(reference.evaluate(g.outputs[0], {short: xv}, {"n": 5}), want)
    # rows of 64 channels (256 bytes apart) keep [cout, cin, k] under more than 64 output columns
    w64 = rng.standard_normal((64, 6, 3)).astype(np.float32)
    narrow_batch = Tensor.placeholder((Var("m", 1, 8), 6, 8), name="narrow_batch")
    g64 = fold_constants(
        Graph.of(
            [b.conv1d(Tensor.const(w64), padding=1, stride=2).node for b in (short, narrow_batch)],
            [short.node, narrow_batch.node],
        )
    )
    assert g64.outputs[0].inputs[1].op == "const"  # 64 x 4 columns
    assert g64.outputs[1].inputs[1].op == "permute"  # 8 x 4 columns
    # folding again leaves it as it is
    again = fold_constants(g)
    assert again.outputs[0].inputs[1].op == "permute"
    # and the compiled plan reads it in place, at every batch
    from asyncjit.compiler import compile

    exe = compile(outs[0], [short], name="conv1d_kn")
    for n in (1, 7, 64):
        xn = rng.standard_normal((n, 6, 8)).astype(np.float32)
        (got,) = exe.run([xn], {})
        np.testing.assert_allclose(
            got, reference.evaluate(outs[0].node, {short: xn}, {"n": n}), rtol=1e-5, atol=1e-5
        )


def test_simplify_removes_identities_and_merges_views() -> None:
    """``x*1``, no-op casts and reshape-of-reshape disappear; the value is unchanged."""
    x = Tensor.placeholder((2, 6), name="x")
    y = (x * 1.0).cast("float32").reshape(3, 4).reshape(12)
    g = simplify(Graph.of([y.node], [x.node]))
    assert _ops(g) == ["placeholder", "reshape"]
    xv = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(reference.evaluate(g.outputs[0], {x: xv}), xv.reshape(12))


def test_fold_constants_never_grows_memory() -> None:
    """Small constant expressions fold; a broadcast scalar stays scalar + expand."""
    x = Tensor.placeholder((1000,), name="x")
    c = Tensor.const(np.arange(4, dtype=np.float32)) * 2.0 + 1.0
    big = Tensor.full((1000,), 3.0)
    g = fold_constants(Graph.of([c.node, (x + big).node], [x.node]))
    assert g.outputs[0].op == "const"
    np.testing.assert_array_equal(g.outputs[0].attrs["value"], np.arange(4) * 2.0 + 1.0)
    assert all(n.attrs["value"].size == 1 for n in g.nodes if n.op == "const" and n is not g.outputs[0])


def test_fold_constants_computes_a_broadcast_matmul_weight_once() -> None:
    """A matmul operand that is a broadcast scalar (a model's ``ConstantOfShape`` weight), seen
    through a transpose too, folds to a const (it needs a buffer anyway: computed once, not on
    every call); the same broadcast feeding an elementwise op stays scalar + expand."""
    x = Tensor.placeholder((12, 50), name="x")
    w = Tensor.full((30, 50), 0.5)  # used transposed, as Gemm(transB=1) does
    y = x @ w.permute(1, 0)
    z = x + Tensor.full((12, 50), 2.0)
    g = fold_constants(Graph.of([y.node, z.node], [x.node]))
    mm = g.outputs[0]
    assert mm.op == "matmul" and mm.inputs[1].op == "const"
    value = mm.inputs[1].attrs["value"]
    assert value.shape == (50, 30) and value.strides == (0, 0)  # the view: written out at load
    assert g.outputs[1].inputs[1].op == "expand"
    xv = np.random.default_rng(0).standard_normal((12, 50)).astype(np.float32)
    np.testing.assert_allclose(reference.evaluate(mm, {x: xv}), xv @ np.full((50, 30), 0.5), rtol=1e-5)


def test_fold_constants_keeps_a_transposed_weight_for_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """With at most ``TRANSPOSED_MAX_ROWS`` rows (a batch-1 ``Linear``) a large ``W.T`` weight
    stays a ``permute`` of its (folded) const, which the dot driver streams row by row; with more
    rows (a bounded batch above it) the transposed copy is folded."""
    from asyncjit.passes import _fold
    from asyncjit.passes._fold import TRANSPOSED_MAX_ROWS

    monkeypatch.setattr(_fold, "MAX_FOLD_ELEMENTS", 100)  # a "large" weight: not folded as such

    weight = np.random.default_rng(1).standard_normal((30, 50)).astype(np.float32)
    few = Tensor.placeholder((TRANSPOSED_MAX_ROWS, 50), name="few")
    many = Tensor.placeholder((Var("b", 1, TRANSPOSED_MAX_ROWS + 1), 50), name="many")
    g = fold_constants(
        Graph.of(
            [(a @ Tensor.const(weight).permute(1, 0)).node for a in (few, many)],
            [few.node, many.node],
        )
    )
    kept, folded = g.outputs[0].inputs[1], g.outputs[1].inputs[1]
    assert kept.op == "permute" and kept.inputs[0].op == "const"
    assert folded.op == "const" and folded.attrs["value"].shape == (50, 30)
    # any other permute (not the last two axes swapped, which the matmul reads through strides)
    # is still folded, few rows or not
    x3 = Tensor.placeholder((3, 2, 50), name="x3")
    w3 = Tensor.const(np.ones((50, 3, 30), np.float32)).permute(1, 0, 2)
    g3 = fold_constants(Graph.of([(x3 @ w3).node], [x3.node]))
    assert g3.outputs[0].inputs[1].op == "const"
    xv = np.ones((TRANSPOSED_MAX_ROWS, 50), np.float32)
    np.testing.assert_allclose(reference.evaluate(g.outputs[0], {few: xv}), xv @ weight.T, rtol=1e-5)


def test_fold_constants_folds_a_broadcast_weight_of_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the dense-fold cap a broadcast weight still folds (to its view: nothing is written
    at compile time), while a transposed dense one stays a ``permute`` of its const."""
    from asyncjit.passes import _fold

    monkeypatch.setattr(_fold, "MAX_DENSE_FOLD_ELEMENTS", 100)
    monkeypatch.setattr(_fold, "MAX_FOLD_ELEMENTS", 100)
    x = Tensor.placeholder((30, 50), name="x")
    wide = x @ Tensor.const(np.float32(0.25)).reshape(1, 1).expand(50, 40)
    dense = x @ Tensor.const(np.ones((40, 50), np.float32)).permute(1, 0)
    g = fold_constants(Graph.of([wide.node, dense.node], [x.node]))
    folded, kept = g.outputs[0].inputs[1], g.outputs[1].inputs[1]
    assert folded.op == "const" and folded.attrs["value"].strides == (0, 0)
    assert kept.op == "permute"


def test_broadcast_constants_hash_by_their_core() -> None:
    """A broadcast const is hashed from its core: equal views hash alike, different values
    differ, and a view of 2^32 elements is keyed without writing it out."""
    from asyncjit.graph import broadcast_core

    huge = np.broadcast_to(np.float32(1.5), (1 << 16, 1 << 16))
    assert broadcast_core(huge) is not None and broadcast_core(huge).shape == (1, 1)
    keys = [
        structural_key(make_node("const", (), value=v), ())
        for v in (huge, *(np.broadcast_to(np.float32(f), huge.shape) for f in (1.5, 2.0)))
    ]
    assert keys[0] == keys[1] != keys[2]
    assert broadcast_core(np.ones((3, 4), np.float32)) is None
    row = np.broadcast_to(np.arange(4, dtype=np.float32), (5, 4))
    core = broadcast_core(row)
    assert core is not None and core.shape == (1, 4)
    np.testing.assert_array_equal(np.broadcast_to(core, row.shape), row)


def test_a_broadcast_conv_weight_is_laid_out_in_panels_with_a_derived_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conv whose weight is a broadcast fill (a ``ConstantOfShape`` placeholder weight) gets
    the panels layout a real weight gets, so it runs the same kernel; the laid-out copy's digest
    comes from the weight's digest and the layout (no hash over its bytes), equal for equal
    weights and different for different ones, and the values are the dense weight's."""
    from asyncjit.graph import _node, content_digest, derived_const
    from asyncjit.passes._fusion import conv_panel_weight

    x = Tensor.placeholder((1, 256, 14, 14), name="x")
    fill = Tensor.const(np.float32(0.02)).expand(256, 256, 3, 3)
    dense = Tensor.const(np.full((256, 256, 3, 3), 0.02, np.float32))
    graphs = [optimize_graph(Graph.of([x.conv(w, pads=1).node], [x.node]), rounds=3) for w in (fill, dense)]
    convs = [next(n for n in g.nodes if n.op == "conv") for g in graphs]
    stored = [conv_panel_weight(c) for c in convs]
    assert all(s is not None for s in stored)
    xv = np.random.default_rng(2).standard_normal((1, 256, 14, 14)).astype(np.float32)
    outs = [reference.evaluate(Tensor(g.outputs[0]), {Tensor(g.inputs[0]): xv}) for g in graphs]
    np.testing.assert_array_equal(outs[0], outs[1])

    hashed: list[tuple[int, ...]] = []
    blake = _node.hashlib.blake2b

    def counting(data: bytes = b"", **kw: object) -> object:
        hashed.append((len(data),))
        return blake(data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_node.hashlib, "blake2b", counting)
    big = np.ones((256, 1024), np.float32)
    a, b = derived_const(big, ("layout", "w1")), derived_const(big, ("layout", "w1"))
    c = derived_const(big, ("layout", "w2"))
    hashed.clear()
    assert content_digest(a) == content_digest(b) != content_digest(c)
    assert hashed == []  # memoised from the origin: the 1 MB copies were never hashed
    np.testing.assert_array_equal(a, big)
    assert not a.flags.writeable and a.ctypes.data % 64 == 0


def test_a_broadcast_conv1d_weight_is_stored_k_by_n_like_a_dense_one() -> None:
    """A conv1d whose weight is a broadcast fill gets the ``[cin/groups, k, cout]`` store a real
    weight gets (so the same tuned kernel runs), and both plans compute the dense weight's values."""
    from asyncjit.compiler import compile
    from asyncjit.passes._fusion import CONV1D_KN_ORDER, conv1d_kn_weight

    x = Tensor.placeholder((Var("n", 1, 8), 64, 8), name="x")
    fill = Tensor.const(np.float32(0.03)).expand(128, 64, 3)
    dense = Tensor.const(np.full((128, 64, 3), 0.03, np.float32))
    outs = [x.conv1d(w, padding=1, stride=2) for w in (fill, dense)]
    g = fold_constants(Graph.of([o.node for o in outs], [x.node]))
    for out in g.outputs:
        kn = out.inputs[1]
        assert kn.op == "permute" and tuple(kn.attrs["order"]) == CONV1D_KN_ORDER
        assert conv1d_kn_weight(out) is kn.inputs[0]
        assert kn.inputs[0].attrs["value"].shape == (64, 3, 128)
    xv = np.random.default_rng(6).standard_normal((3, 64, 8)).astype(np.float32)
    got = [compile(o, [x], name=f"conv1d_fill{i}").run([xv], {})[0] for i, o in enumerate(outs)]
    np.testing.assert_array_equal(got[0], got[1])
    want = reference.evaluate(outs[1].node, {x: xv}, {"n": 3})
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_a_batchnorm_folded_into_a_conv_hashes_its_weight_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``conv(x, W) * s + t`` folds ``s`` into the weight and lays the result out in panels: the
    optimizer then hashes no array as big as the weight (only ``W`` itself, once, for the plan
    key: the rescaled and laid-out copies take digests derived from it), and the folded conv
    computes what the unfolded graph does."""
    from asyncjit.graph import _node

    rng = np.random.default_rng(4)
    w = rng.standard_normal((256, 256, 3, 3)).astype(np.float32)
    s = rng.uniform(0.5, 2, (1, 256, 1, 1)).astype(np.float32)
    t = rng.standard_normal((1, 256, 1, 1)).astype(np.float32)
    x = Tensor.placeholder((1, 256, 14, 14), name="x")
    y = x.conv(Tensor.const(w), pads=1) * Tensor.const(s) + Tensor.const(t)
    g = Graph.of([y.node], [x.node])
    weight = next(n for n in g.nodes if n.op == "const" and n.attrs["value"].size == w.size)
    _node.content_digest(weight.attrs["value"])  # hashed once first, as the plan key does
    sizes: list[int] = []
    blake = _node.hashlib.blake2b

    def counting(data: bytes = b"", **kw: object) -> object:
        sizes.append(len(data))
        return blake(data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_node.hashlib, "blake2b", counting)
    opt = optimize_graph(g, rounds=3)
    assert [n.op for n in opt.nodes].count("mul") == 0
    assert max(sizes) < w.nbytes // 4, sizes
    xv = rng.standard_normal((1, 256, 14, 14)).astype(np.float32)
    got = reference.evaluate(Tensor(opt.outputs[0]), {Tensor(opt.inputs[0]): xv})
    np.testing.assert_allclose(got, reference.evaluate(y, {x: xv}), rtol=1e-4, atol=1e-3)


def test_cse_merges_equal_subexpressions() -> None:
    """Two structurally equal nodes become one."""
    x = Tensor.placeholder((4,), name="x")
    a, b = x.exp() + 1.0, x.exp() + 1.0
    g = cse(Graph.of([(a * b).node], [x.node]))
    assert _ops(g).count("exp") == 1
    mul = g.outputs[0]
    assert mul.inputs[0] is mul.inputs[1]


def test_dce_keeps_unused_placeholders_but_drops_dead_nodes() -> None:
    """Placeholders are the ABI; nothing else unreachable stays."""
    x = Tensor.placeholder((4,), name="x")
    unused = Tensor.placeholder((4,), name="unused")
    _dead = x.sin()
    g = dce(Graph.of([x.exp().node], [x.node, unused.node]))
    assert "sin" not in _ops(g)
    assert g.inputs[1] is unused.node


def test_refine_substitutes_fixed_and_degenerate_vars() -> None:
    """Fixed vars and min == max vars become ints; the remaining vars stay symbolic."""
    t, s, one = Var("t", 1, 100), Var("s", 1, 9), Var("u", 3, 3)
    x = Tensor.placeholder((t, s, one), name="x")
    g = refine(Graph.of([x.sum(axis=0).node], [x.node]), {"t": 10})
    assert g.inputs[0].shape == (10, s, 3)
    assert [v.name for v in g.vars] == ["s"]


def test_fusion_puts_a_chain_and_its_reduction_in_one_kernel() -> None:
    """An elementwise chain feeding a reduction is one kernel with no intermediate buffers."""
    t = Var("t", 1, 64)
    x = Tensor.placeholder((t, 8), name="x")
    y = ((x * 2.0 + 1.0).exp() - x).sum(axis=1)
    plan = fuse(optimize_graph(Graph.of([y.node], [x.node])))
    reduces = [k for k in plan.kernels if k.kind == "reduce"]
    assert len(reduces) == 1
    assert {"exp", "mul", "add", "sub"} <= {n.op for n in reduces[0].fused}
    assert reduces[0].name.startswith("k0_reduce_")
    memory = plan_memory(plan)
    assert all(s.kind != "arena" for nid, s in memory.slots.items() if nid != reduces[0].node.id)


def test_memory_plan_reuses_arena_by_liveness() -> None:
    """A chain of materialized intermediates reuses arena space; offsets are 64-byte aligned."""
    t = Var("t", 1, 32)
    x = Tensor.placeholder((t, 16), name="x")
    h = x
    for _ in range(6):
        h = h.sum(axis=1, keepdims=True).expand(t, 16) + h  # each sum is a materialized intermediate
    plan = fuse(optimize_graph(Graph.of([h.node], [x.node])))
    memory = plan_memory(plan, scratch_bytes=100)
    arena = [s for s in memory.slots.values() if s.kind == "arena"]
    assert len(arena) >= 4
    assert all(s.offset % ALIGN == 0 for s in arena)
    assert memory.scratch_offset % ALIGN == 0
    assert len({s.offset for s in arena}) < len(arena)  # some space reused
    by_id = {n.id: n for n in plan.graph.nodes}
    separate = sum(
        max(ALIGN, -(-capacity_bytes(by_id[nid]) // ALIGN) * ALIGN)
        for nid, s in memory.slots.items()
        if s.kind == "arena"
    )
    assert memory.scratch_offset < separate  # sharing made the arena smaller than one buffer each


def test_fusion_inlines_a_value_split_into_disjoint_slices() -> None:
    """A computed value consumed only through disjoint slices (``chunk``) is inlined into each
    consumer, since no element is computed twice; overlapping slices keep it in a buffer."""
    b = Var("b", 1, 8)
    x = Tensor.placeholder((b, 32), name="x")
    g = x * 2.0 + 1.0
    parts = g.chunk(4, axis=1)
    y = parts[0].sigmoid() * parts[1] + parts[2].tanh() * parts[3]
    plan = fuse(optimize_graph(Graph.of([y.node], [x.node])))
    assert len(plan.kernels) == 1
    overlapping = g.shrink([None, (0, 20)]).exp() + g.shrink([None, (12, 32)])
    plan2 = fuse(optimize_graph(Graph.of([overlapping.node], [x.node])))
    assert len(plan2.kernels) == 2
    xs = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
    from asyncjit.compiler import compile

    exe = compile(y, [x], [b], name="disjoint_slices")
    gv = xs * 2.0 + 1.0
    want = 1 / (1 + np.exp(-gv[:, :8])) * gv[:, 8:16] + np.tanh(gv[:, 16:24]) * gv[:, 24:]
    np.testing.assert_allclose(exe.run([xs], {"b": 3})[0], want, rtol=1e-5, atol=1e-6)
