"""Intra-op parallelism (``codegen._parallel``): a big matmul splits its columns over threads the
plan spawns and joins itself; results are bit for bit those of one thread, at any thread count.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from asyncjit import Tensor
from asyncjit.codegen import _parallel
from asyncjit.codegen._matmul import PARALLEL_MIN_MACS, _region_bytes, matmul_scratch_bytes
from asyncjit.codegen._matmul_split import ROW_SPLIT_RATIO
from asyncjit.codegen._matmul_tile import matmul_tiling
from asyncjit.compiler import compile
from asyncjit.runtime import Client


@pytest.fixture(autouse=True)
def restore_threads() -> Iterator[None]:
    old = _parallel.intra_op_threads()
    yield
    _parallel.set_intra_op_threads(old)


@pytest.mark.parametrize(
    ("batch", "m", "n", "k"),
    # N not a multiple of NR; the last two split rows (packed driver, M >= 2N; M not a multiple of MR)
    [(1, 512, 520, 300), (3, 96, 1030, 700), (1, 1000, 70, 1000), (2, 4099, 131, 130)],
)
def test_split_matmul_equals_one_thread_bit_for_bit(batch: int, m: int, n: int, k: int) -> None:
    assert m * n * k >= PARALLEL_MIN_MACS  # each product of the batch is split
    a = Tensor.placeholder((batch, m, k), name="a")
    b = Tensor.placeholder((batch, k, n), name="b")
    exe = compile(a @ b, [a, b], name=f"split_mm_{batch}_{m}_{n}_{k}")
    rng = np.random.default_rng(m + n + k)
    av = rng.standard_normal((batch, m, k)).astype(np.float32)
    bv = rng.standard_normal((batch, k, n)).astype(np.float32)
    outs = {}
    count = exe._loaded.global_address(_parallel.THREADS_SYMBOL)
    assert count, "the plan does not read the intra-op thread count"
    for threads in (1, 2, 3, 8):
        _parallel.set_intra_op_threads(threads)  # applies to plans already loaded
        assert ctypes.c_int64.from_address(count).value == threads
        (outs[threads],) = exe.run([av, bv], {})
    np.testing.assert_allclose(outs[1], av @ bv, rtol=2e-3, atol=2e-3)
    for threads, out in outs.items():
        assert np.array_equal(out, outs[1]), threads


@pytest.mark.parametrize(("cout", "hw"), [(256, 14), (160, 45)])
def test_a_conv_on_weight_panels_splits_bit_for_bit(cout: int, hw: int) -> None:
    """The prepacked driver of a conv whose weight is laid out in matmul panels splits its
    panels (columns of ``C^T``) or, from twice as many positions as outputs, its rows over the
    threads: every thread count gives one thread's bits."""
    from asyncjit.codegen._convpanels import panels_chosen

    cin, stride = 256, 2 if hw > 32 else 1
    pads = ((1, 1), (1, 1))
    assert panels_chosen(cin=cin, cout=cout, ks=(3, 3), strides=(stride,) * 2, dilations=(1, 1), pads=pads,
                         groups=1, s_max=(hw, hw))  # fmt: skip
    out_hw = (hw + 2 - 3) // stride + 1
    assert out_hw * out_hw * cout * cin * 9 >= PARALLEL_MIN_MACS
    rng = np.random.default_rng(cout)
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) / 48
    x = Tensor.placeholder((1, cin, hw, hw), name="x")
    exe = compile(x.conv(Tensor.const(w), strides=stride, pads=1), [x], name=f"split_conv_{cout}_{hw}")
    xv = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
    _same_bits_on_every_thread_count(exe, [xv], (1, 2, 3))


def _same_bits_on_every_thread_count(
    exe: object, args: list[np.ndarray], counts: tuple[int, ...]
) -> np.ndarray:
    """Run ``exe`` on each intra-op thread count; every output equals the first's bit for bit."""
    outs = {}
    for threads in counts:
        _parallel.set_intra_op_threads(threads)
        (outs[threads],) = exe.run(args, {})  # type: ignore[attr-defined]
    for threads, out in outs.items():
        assert np.array_equal(out, outs[counts[0]]), threads
    return np.asarray(outs[counts[0]])


def test_scratch_covers_every_split() -> None:
    """The scratch bound holds the per-thread regions of any split up to MAX_THREADS, each as
    large as the part function lays it out (``w`` columns, rounded up to NR)."""
    t = matmul_tiling()
    for m, n, k in [(512, 512, 512), (96, 1030, 700), (1000, 70, 1000), (8192, 256, 256)]:
        total = matmul_scratch_bytes(m, n, k)
        for parts in range(1, _parallel.MAX_THREADS + 1):
            cols = (n + parts - 1) // parts
            w = (cols + t.nr - 1) // t.nr * t.nr
            assert total >= parts * _region_bytes(t, m, w, k), (m, n, k, parts)
            # a row split (any M, N with M >= ROW_SPLIT_RATIO * N up to the maxima): all N columns
            for nn in range(1, min(n, m // ROW_SPLIT_RATIO) + 1, 7):
                assert total >= parts * _region_bytes(t, m, nn, k), (m, nn, k, parts)


def test_thread_count_is_checked_and_sized_by_the_client() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        _parallel.set_intra_op_threads(0)
    with pytest.raises(ValueError, match="intra_op_threads"):
        Client("cpu", intra_op_threads=0)
    cores = len(os.sched_getaffinity(0))
    with Client("cpu:2"):
        assert _parallel.intra_op_threads() == max(1, cores // 2)
    with Client("cpu", intra_op_threads=3):
        assert _parallel.intra_op_threads() == 3


@pytest.mark.parametrize("which", [0, 1, 2, 3])  # direct, dot, packed driver; 3: packed, rows split
def test_a_part_that_runs_alone_computes_every_chunk(which: int) -> None:
    """Parts claim column (or row) chunks from a shared counter: when only the last part ever
    runs (the others' threads never got a core), it computes every column, bit for bit as one
    part does."""
    from llvmlite import ir

    from asyncjit.codegen._matmul import _direct
    from asyncjit.codegen._matmul_dot import _dot
    from asyncjit.codegen._matmul_packed import _packed
    from asyncjit.codegen._matmul_split import PART_FIELDS, split_part
    from asyncjit.codegen._matmul_tile import _Vec
    from asyncjit.codegen._target import I64, PTR, compile_to_object, load_object, new_function

    t = matmul_tiling()
    module = ir.Module("part_alone")
    vec = _Vec(module, t.vw)
    part = split_part(module, t, (_direct(vec, t), _dot(vec, t), _packed(vec, t)))
    fn, b = new_function(module, "run_part", [("job", PTR), ("p", I64), ("parts", I64)], linkage="external")
    b.call(part, list(fn.args))
    b.ret_void()
    loaded = load_object(compile_to_object(str(module)))
    run_part = loaded.cfunc("run_part", None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

    rows_split = which == 3
    which = 2 if rows_split else which
    m, n, k = (24, 203, 40) if which == 1 else (209, 45, 90) if rows_split else (70, 203, 90)
    assert rows_split == (which == 2 and m >= ROW_SPLIT_RATIO * n)
    rng = np.random.default_rng(which)
    a = rng.standard_normal((m, k)).astype(np.float32)
    bm = rng.standard_normal((k, n)).astype(np.float32)
    b_t = np.ascontiguousarray(bm.T)  # the dot driver reads B along k (b_rs == 1)
    parts = 3
    scratch = np.zeros(parts * _region_bytes(t, m, n, k) + 64, np.uint8)

    def run(ranks: list[int]) -> np.ndarray:
        c = np.full((m, n), np.nan, np.float32)
        src, b_rs, b_cs = (b_t, 1, k) if which == 1 else (bm, n, 1)
        fields = dict(
            A=a.ctypes.data, B=src.ctypes.data, C=c.ctypes.data, scratch=scratch.ctypes.data,
            M=m, N=n, K=k, a_rs=k, a_cs=1, b_rs=b_rs, b_cs=b_cs, c_rs=n, which=which, next=0,
        )  # fmt: skip
        job = (ctypes.c_int64 * len(PART_FIELDS))(*(fields[f] for f in PART_FIELDS))
        for p in ranks:
            run_part(ctypes.addressof(job), p, parts)
        return c

    whole = run([0, 1, 2])  # one after another: part 0 takes every chunk, the others none
    np.testing.assert_allclose(whole, a @ bm, rtol=1e-4, atol=1e-4)
    for ranks in ([2], [1], [2, 0]):
        assert np.array_equal(run(ranks), whole), ranks


def _placement_probe() -> tuple[object, object]:
    """A plan-like object whose parallel-for body records, per part, the CPU it runs on and the
    first word of its affinity mask (CPUs 0-63). Part 0 (the caller's) then spins until part 1
    has recorded its CPU (at most ~10^8 iterations): a busy caller, as in a real kernel, so a
    helper queued behind it on its core could not have run first. ``ctx``: 5 int64s, the last
    the flag."""
    from llvmlite import ir

    from asyncjit.codegen._target import I32, I64, PTR, compile_to_object, i64, load_object, new_function

    module = ir.Module("placement_probe")
    body, bb = _parallel.new_part_function(module, "probe.part")
    ctx, part, _ = body.args
    getcpu = ir.Function(module, ir.FunctionType(I32, []), "sched_getcpu")
    getaff = ir.Function(module, ir.FunctionType(I32, [I32, I64, PTR]), "sched_getaffinity")
    mask = bb.alloca(I64, size=16)
    cpu = bb.sext(bb.call(getcpu, []), I64)
    bb.call(getaff, [ir.Constant(I32, 0), i64(128), mask])
    slot = bb.gep(ctx, [bb.mul(part, i64(2))], source_etype=I64)
    bb.store(cpu, slot)
    bb.store(bb.load(mask, typ=I64), bb.gep(slot, [i64(1)], source_etype=I64))
    flag = bb.gep(ctx, [i64(4)], source_etype=I64)
    with bb.if_else(bb.icmp_signed("==", part, i64(0))) as (caller, helper):
        with caller:
            spins = bb.alloca(I64)
            bb.store(i64(0), spins)
            head = bb.append_basic_block("spin")
            done = bb.append_basic_block("spun")
            bb.branch(head)
            bb.position_at_end(head)
            n = bb.add(bb.load(spins, typ=I64), i64(1))
            bb.store(n, spins)
            seen = bb.atomic_rmw("add", flag, i64(0), "monotonic")
            go_on = bb.and_(bb.icmp_signed("==", seen, i64(0)), bb.icmp_signed("<", n, i64(100_000_000)))
            bb.cbranch(go_on, head, done)
            bb.position_at_end(done)
        with helper:
            bb.atomic_rmw("xchg", flag, i64(1), "monotonic")
    bb.ret_void()
    fn, b = new_function(module, "run", [("ctx", PTR), ("parts", I64)], linkage="external")
    _parallel.emit_parallel_for(b, body, fn.args[0], fn.args[1])
    b.ret_void()
    loaded = load_object(compile_to_object(str(module)))
    return loaded, loaded.cfunc("run", None, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture
def created_helpers() -> Iterator[None]:
    """Helpers created per kernel (the path a kernel takes when the pool is busy): the pool's
    own helpers, started once and woken later, go wherever the scheduler wakes them."""
    from asyncjit.codegen import _pool

    was = _pool.set_pool_enabled(False)
    yield
    _pool.set_pool_enabled(was)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or min(os.sched_getaffinity(0)) >= 64, reason="one CPU")
@pytest.mark.usefixtures("created_helpers")
def test_helpers_start_off_the_callers_cpu_then_may_run_anywhere() -> None:
    """Linux starts a new thread on its creator's CPU; a helper is created with an affinity that
    excludes the caller's CPU (so it runs at once while the caller computes), then widened back
    to the process's."""
    loaded, run = _placement_probe()  # the object holds the code: keep it alive
    allowed = sum(1 << c for c in os.sched_getaffinity(0) if c < 64)
    apart = 0
    calls = 20
    for _ in range(calls):
        rec = (ctypes.c_int64 * 5)()
        time.sleep(0.002)  # idle cores between calls: where plain placement kept both on one
        run(ctypes.addressof(rec), 2)
        caller_cpu, _, helper_cpu, helper_mask, _ = rec
        # widened back, so the scheduler may move it later (or, read before the caller widened
        # it, the process's CPUs minus the caller's)
        assert helper_mask in (allowed, allowed & ~(1 << caller_cpu))
        apart += helper_cpu != caller_cpu
    # by construction every helper starts elsewhere (20 of 20 here; 11-12 of 20 with plain
    # placement and an idle caller, fewer with a busy one); a migration in between is rare
    assert apart >= calls * 4 // 5, apart
    del loaded


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or min(os.sched_getaffinity(0)) >= 64, reason="one CPU")
@pytest.mark.usefixtures("created_helpers")
def test_a_caller_pinned_to_one_cpu_still_spreads_its_helpers() -> None:
    """A thread pinned to one CPU (its program's choice) splits a kernel: its
    helpers take the process's CPUs, not the caller's one-CPU mask (they would share its core)."""
    loaded, run = _placement_probe()
    allowed = sum(1 << c for c in os.sched_getaffinity(0) if c < 64)
    home = min(os.sched_getaffinity(0))
    records: list[tuple[int, ...]] = []

    def pinned_caller() -> None:
        os.sched_setaffinity(0, {home})  # this thread only
        for _ in range(10):
            rec = (ctypes.c_int64 * 5)()
            time.sleep(0.002)
            run(ctypes.addressof(rec), 2)
            records.append(tuple(rec))

    worker = threading.Thread(target=pinned_caller)
    worker.start()
    worker.join()
    assert len(records) == 10
    apart = 0
    for caller_cpu, caller_mask, helper_cpu, helper_mask, _ in records:
        assert caller_cpu == home and caller_mask == 1 << home
        # the process's CPUs, or (read before the caller widened it) those minus the caller's
        assert helper_mask in (allowed, allowed & ~(1 << home))
        apart += helper_cpu != home
    assert apart >= 8, records
    del loaded


def test_parallel_for_with_one_part_spawns_nothing() -> None:
    loaded, run = _placement_probe()  # the object holds the code: keep it alive
    rec = (ctypes.c_int64 * 5)(-7, -7, -7, -7, 1)  # flag set: the caller's part does not spin
    run(ctypes.addressof(rec), 1)
    assert rec[0] >= 0 and list(rec[2:4]) == [-7, -7]
    del loaded


@pytest.mark.parametrize(
    ("cin", "cout", "hw", "stride", "residual"),
    # 4 runs; stride 2 (3 runs); 256 -> 128 channels at 14x14: one run, cut into one per thread
    # (128 outputs: on the padded copy on every host; 256 take im2col where NR is 16 lanes)
    [(64, 64, 56, 1, True), (32, 48, 112, 2, False), (256, 128, 14, 1, False)],
)
def test_a_padded_copy_conv_splits_its_runs_bit_for_bit(
    cin: int, cout: int, hw: int, stride: int, residual: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The padded-copy conv (``_convtaps``) hands its runs of positions to the threads, each in
    its own run buffer: every thread count gives one thread's bits, with the bias, a residual
    and the relu applied as each run is copied out (on AVX-512 the 64-channel layer reads ``x``
    in place, ``_convdirect``, each thread finishing its runs in ``y``)."""
    from asyncjit.codegen import _convwino
    from asyncjit.codegen._convtaps import taps_chosen

    monkeypatch.setattr(_convwino, "WINO_MIN_TILES", 1 << 30)  # the 64-channel layer would be Winograd's
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "")  # a plan compiled under the patched rule is not kept
    pads = ((1, 1), (1, 1))
    assert taps_chosen(cin=cin, cout=cout, ks=(3, 3), strides=(stride,) * 2, dilations=(1, 1), pads=pads,
                       groups=1, s_max=(hw, hw))  # fmt: skip
    out_hw = (hw + 2 - 3) // stride + 1
    assert out_hw * out_hw * cout * cin * 9 >= PARALLEL_MIN_MACS
    rng = np.random.default_rng(cout)
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) / 24
    bias = rng.standard_normal(cout).astype(np.float32)
    x = Tensor.placeholder((2, cin, hw, hw), name="x")
    y = x.conv(Tensor.const(w), Tensor.const(bias), strides=stride, pads=1)
    inputs = [x]
    if residual:
        r = Tensor.placeholder((2, cout, out_hw, out_hw), name="r")
        y = y + r
        inputs.append(r)
    exe = compile(y.relu(), inputs, name=f"split_taps_{cin}_{cout}_{hw}_{stride}_{residual}")
    assert any("conv" in k.name for k in exe.kernels)
    xs = [rng.standard_normal((2, cin, hw, hw)).astype(np.float32)]
    if residual:
        xs.append(rng.standard_normal((2, cout, out_hw, out_hw)).astype(np.float32))
    from asyncjit.codegen import _pool

    before = _pool.pool_stats()
    got = _same_bits_on_every_thread_count(exe, xs, (1, 2, 3, 8))
    after = _pool.pool_stats()
    split = after["jobs"] + after["refused"] - before["jobs"] - before["refused"]
    assert split >= 3 * 2, split  # each sample split at 2, 3 and 8 threads
    # and the conv itself: a direct sum over the windows of the zero-padded input
    xpad = np.pad(xs[0].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xpad, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    ref = np.einsum("ncijhw,ochw->noij", windows, w.astype(np.float64)) + bias[None, :, None, None]
    if residual:
        ref = ref + xs[1]
    np.testing.assert_allclose(got, np.maximum(ref, 0.0), rtol=1e-4, atol=1e-3)
