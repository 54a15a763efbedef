"""Throughput of the native kernels against numpy, measured in one run on this machine.

    .venv/bin/python benchmarks/kernels.py [--quick] [--goals | --matmul | --conv | --math-tables]
        [--repeat N]

Prints GFLOP/s and the ratio to numpy (single-threaded OpenBLAS: ``OPENBLAS_NUM_THREADS=1`` is
set before numpy loads) for matmul at 512^3 and the small shapes of LSTM / linear layers, conv1d
for the Silero VAD layers against numpy im2col + matmul, and math-function throughput over 16M
floats against the numpy ufunc.  Every kernel is called through one pointer to an argument
block, as the runtime does; best of several repetitions. The tables run on one thread
(intra-op threads set to 1); the closing goals section (alone with ``--goals``) gives, as medians
of ``--repeat`` interleaved rounds (default 3), 512^3 matmul on all cores against one, ``tanh``
against numpy, and a sum over axis 0 of 4096x4096 against the copy bandwidth. ``--matmul``:
only the matmul table; ``--math-tables``: the table-driven ``tanh`` and ``erf`` of AVX-512 hosts
against the ``exp``-based code, one module, rounds in turns, then whole plans (GELU's erf form,
a big sigmoid on and off the streaming path); ``--conv``: only the conv1d table
(each layer with its weight stored ``[cout, cin, k]`` and ``[cin, k, cout]``, the layout a
constant weight of short outputs gets).
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import ctypes
import functools
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from asyncjit.codegen._conv import conv1d_output_length, conv1d_scratch_bytes, emit_conv1d
from asyncjit.codegen._kernels import MATH_INTERLEAVE
from asyncjit.codegen._mathfn import emit_unary
from asyncjit.codegen._matmul import emit_matmul, matmul_scratch_bytes
from asyncjit.codegen._matmul_tile import matmul_tiling
from asyncjit.codegen._target import (
    F32,
    I64,
    PTR,
    LoadedObject,
    compile_to_object,
    for_range,
    i64,
    load_object,
    new_function,
)

QUICK = False  # --quick: main() sets it from the command line (importing this module parses none)


def best_time(fn: Callable[[], object], min_total: float = 0.2, repeats: int = 5) -> float:
    """Best per-call seconds over ``repeats`` batches that each run at least ``min_total/repeats``."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, int(min_total / repeats / one))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def load_builds(files: list[str]) -> list[LoadedObject]:
    """The LLVM IR modules in ``files`` (one per source tree), compiled and loaded into this
    process, with the intra-op threads at one: the A/B scripts time them side by side."""
    from asyncjit.codegen import _parallel

    _parallel.set_intra_op_threads(1)
    objs = []
    for f in files:
        with open(f) as fh:
            objs.append(load_object(compile_to_object(fh.read())))
    return objs


def interleaved_best(fns: list[Callable[[], object]], rounds: int, min_total: float) -> list[float]:
    """Each function's best per-call seconds over ``rounds`` rounds that call them in turn: on a
    machine whose speed drifts by seconds, only figures taken side by side compare."""
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], best_time(fn, min_total, 2))
    return best


def add_entry(module: ir.Module, entry: str, kernel: ir.Function) -> None:
    fn, b = new_function(module, entry, [("args", PTR)], linkage="external")
    vals = []
    for i, arg in enumerate(kernel.args):
        v = b.load(b.gep(fn.args[0], [ir.Constant(I64, i)], source_etype=I64), typ=I64)
        vals.append(b.inttoptr(v, PTR) if arg.type == PTR else v)
    b.call(kernel, vals)
    b.ret_void()


def compile_module(module: ir.Module) -> tuple[LoadedObject, float]:
    t0 = time.perf_counter()
    obj = compile_to_object(str(module))
    ms = (time.perf_counter() - t0) * 1e3
    return load_object(obj), ms


def caller(obj: LoadedObject, entry: str, args: list[int]) -> Callable[[], object]:
    fn = obj.cfunc(entry, None, ctypes.c_void_p)
    block = np.array(args, dtype=np.int64)
    addr = block.ctypes.data
    caller.keep.append(block)  # type: ignore[attr-defined]
    return lambda: fn(addr)


caller.keep = []  # type: ignore[attr-defined]


MODEL_MATMULS = [
    # the Silero VAD batched step at 128 streams (STFT halves, encoder taps, LSTM gates), one stream
    (512, 129, 129),
    (512, 128, 129),
    (256, 64, 128),
    (128, 64, 64),
    (128, 512, 256),
    (1, 512, 256),
    # CNN layers as im2col matmuls: first 3-channel convs (K = 27, 24), 3x3 convs, the last 1x1
    (24, 12544, 27),
    (48, 3136, 24),
    (64, 3025, 144),
    (1000, 169, 512),
    (64, 3025, 576),
]
"""(M, N, K) of the matmuls the models in BENCHMARKS.md spend their time in."""


def bench_matmul() -> None:
    module = ir.Module("bench_matmul")
    add_entry(module, "mm", emit_matmul(module, "bench.matmul"))
    obj, ms = compile_module(module)
    print(f"\n## matmul (float32, {matmul_tiling()!r}; module compile {ms:.0f} ms)")
    print(f"{'M x N x K':>16} {'layout':>6} {'ours GF/s':>10} {'numpy GF/s':>11} {'ratio':>6} {'ours us':>9}")
    shapes = [
        (512, 512, 512),
        (1, 512, 512),
        (4, 512, 512),
        (16, 256, 256),
        (64, 512, 512),
        (1, 64, 64),
        (8, 128, 128),
        (32, 256, 256),
        (64, 64, 64),
        (256, 512, 512),
        (1, 256, 1024),
        (64, 256, 1024),
        *MODEL_MATMULS,
    ]
    if QUICK:
        shapes = shapes[:4]
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        for layout in ("NN", "NT"):
            a = rng.standard_normal((m, k)).astype(np.float32)
            w = rng.standard_normal((n, k) if layout == "NT" else (k, n)).astype(np.float32)
            bmat = w.T if layout == "NT" else w
            b_strides = (0, 1, k) if layout == "NT" else (0, n, 1)
            c = np.empty((m, n), np.float32)
            scratch = np.zeros(matmul_scratch_bytes(m, n, k), np.uint8)
            run = caller(
                obj,
                "mm",
                [
                    a.ctypes.data,
                    w.ctypes.data,
                    c.ctypes.data,
                    scratch.ctypes.data,
                    1,
                    m,
                    n,
                    k,
                    0,
                    k,
                    1,
                    *b_strides,
                    m * n,
                    n,
                ],
            )
            run()
            np.testing.assert_allclose(c, a @ bmat, rtol=1e-3, atol=1e-3 * math.sqrt(k))
            out = np.empty((m, n), np.float32)
            t_ours = best_time(run)
            t_np = best_time(functools.partial(np.matmul, a, bmat, out=out))
            gf = 2 * m * n * k / 1e9
            print(
                f"{m:>4} x {n:>4} x {k:>4} {layout:>6} {gf / t_ours:10.1f} {gf / t_np:11.1f} "
                f"{t_np / t_ours:6.2f} {t_ours * 1e6:9.2f}"
            )


VAD_LAYERS = [  # (label, cin, cout, k, stride, pad, L)
    ("stft 1->258 k256 s128", 1, 258, 256, 128, 0, 640),
    ("129->128 k3 s1", 129, 128, 3, 1, 1, 4),
    ("128->64 k3 s2", 128, 64, 3, 2, 1, 4),
    ("64->64 k3 s2", 64, 64, 3, 2, 1, 2),
    ("64->128 k3 s1", 64, 128, 3, 1, 1, 1),
]


def numpy_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """numpy im2col (strided view) + matmul, groups = 1, dilation = 1."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad))) if pad else x
    n, cin, length = xp.shape
    cout, _, k = w.shape
    lout = (length - k) // stride + 1
    s = xp.strides
    cols = np.lib.stride_tricks.as_strided(xp, (n, lout, cin, k), (s[0], s[2] * stride, s[1], s[2]))
    out = np.matmul(cols.reshape(n, lout, cin * k), w.reshape(cout, cin * k).T)
    return np.asarray(out.transpose(0, 2, 1))


def bench_conv() -> None:
    """Each layer twice: the weight stored ``[cout, cin, k]`` (a weight passed at run time) and
    ``[cin, k, cout]`` (``w_kn``: how a constant weight of these short outputs is stored)."""

    def geometry(cin: int, cout: int, k: int, stride: int, pad: int) -> dict[str, int]:
        return dict(cin=cin, cout=cout, k=k, stride=stride, dilation=1, groups=1, pad_l=pad, pad_r=pad)

    module = ir.Module("bench_conv")
    for i, (_, cin, cout, k, stride, pad, _l) in enumerate(VAD_LAYERS):
        for prefix, kn in (("c", False), ("kn", True)):
            geom = geometry(cin, cout, k, stride, pad)
            add_entry(module, f"{prefix}{i}", emit_conv1d(module, f"bench.{prefix}conv{i}", **geom, w_kn=kn))
    obj, ms = compile_module(module)
    print(f"\n## conv1d, Silero VAD layers (module compile {ms:.0f} ms)")
    print("(ours: weight [cout, cin, k]; [K,N]: weight [cin, k, cout], as a constant weight is stored)")
    print(
        f"{'layer':>22} {'N':>4} {'ours us':>9} {'[K,N] us':>9} {'numpy us':>9} {'ratio':>6} "
        f"{'[K,N] ratio':>11} {'ours GF/s':>10}"
    )
    rng = np.random.default_rng(0)
    for n in (1, 8, 64, 256) if not QUICK else (1, 64):
        for i, (label, cin, cout, k, stride, pad, length) in enumerate(VAD_LAYERS):
            x = rng.standard_normal((n, cin, length)).astype(np.float32)
            w = rng.standard_normal((cout, cin, k)).astype(np.float32)
            lout = conv1d_output_length(length, k=k, stride=stride, dilation=1, pad_l=pad, pad_r=pad)
            y = np.empty((n, cout, lout), np.float32)
            geom = geometry(cin, cout, k, stride, pad)
            scratch = np.zeros(conv1d_scratch_bytes(**geom, n_max=n, l_max=length), np.uint8)
            run = caller(
                obj,
                f"c{i}",
                [x.ctypes.data, w.ctypes.data, y.ctypes.data, scratch.ctypes.data, n, length, lout],
            )
            w_kn = np.ascontiguousarray(w.transpose(1, 2, 0))
            y_kn = np.empty_like(y)
            run_kn = caller(
                obj,
                f"kn{i}",
                [x.ctypes.data, w_kn.ctypes.data, y_kn.ctypes.data, scratch.ctypes.data, n, length, lout],
            )
            run()
            run_kn()
            ref = numpy_conv(x, w, stride, pad)
            np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * math.sqrt(cin * k))
            np.testing.assert_allclose(y_kn, ref, rtol=1e-3, atol=1e-3 * math.sqrt(cin * k))
            t_ours = best_time(run, 0.1)
            t_kn = best_time(run_kn, 0.1)
            t_np = best_time(functools.partial(numpy_conv, x, w, stride, pad), 0.1)
            gf = 2 * n * cout * lout * cin * k / 1e9
            print(
                f"{label:>22} {n:>4} {t_ours * 1e6:9.2f} {t_kn * 1e6:9.2f} {t_np * 1e6:9.2f} "
                f"{t_np / t_ours:6.2f} {t_np / t_kn:11.2f} {gf / t_ours:10.1f}"
            )


MATH_NUMPY: dict[str, Callable[[np.ndarray, np.ndarray], object]] = {
    "exp": lambda x, o: np.exp(x, out=o),
    "log": lambda x, o: np.log(np.abs(x, out=o), out=o),
    "tanh": lambda x, o: np.tanh(x, out=o),
    "sigmoid": lambda x, o: np.divide(1.0, np.add(1.0, np.exp(np.negative(x, out=o), out=o), out=o), out=o),
    "sin": lambda x, o: np.sin(x, out=o),
    "cos": lambda x, o: np.cos(x, out=o),
}


def bench_math() -> None:
    ops = ["exp", "log", "tanh", "sigmoid", "sin", "cos", "erf", "gelu", "gelu_tanh"]
    module = ir.Module("bench_math")
    for op in ops:
        fn, b = new_function(module, f"m_{op}", [("args", PTR)], linkage="external")
        slots = [b.load(b.gep(fn.args[0], [i64(i)], source_etype=I64), typ=I64) for i in range(3)]
        x, out, n = b.inttoptr(slots[0], PTR), b.inttoptr(slots[1], PTR), slots[2]
        # a plain scalar loop, as the compiler emits it (interleaved as a plan kernel calling a
        # math function is); LLVM's loop vectorizer widens it
        with for_range(b, i64(0), n, interleave=MATH_INTERLEAVE) as i:
            v = b.load(b.gep(x, [i], source_etype=F32), typ=F32, align=4)
            if op == "log":
                v = b.call(module.declare_intrinsic("llvm.fabs", [F32]), [v])
            b.store(emit_unary(b, op, v), b.gep(out, [i], source_etype=F32), align=4)
        b.ret_void()
    obj, ms = compile_module(module)
    print(f"\n## math functions (a plain loop, vectorized by LLVM; module compile {ms:.0f} ms)")
    for size in (1 << 16, 1 << (22 if QUICK else 24)):
        where = "in L2" if size < 1 << 20 else "memory-bound"
        print(f"\n{size:,} float32 ({where}), uniform(-8, 8)")
        bench_math_size(obj, ops, size)


def bench_math_size(obj: LoadedObject, ops: list[str], size: int) -> None:
    print(f"{'op':>10} {'ours Gelem/s':>13} {'numpy Gelem/s':>14} {'ratio':>6}")
    x = np.random.default_rng(0).uniform(-8, 8, size).astype(np.float32)
    out = np.empty_like(x)
    out2 = np.empty_like(x)
    for op in ops:
        run = caller(obj, f"m_{op}", [x.ctypes.data, out.ctypes.data, size])
        t_ours = best_time(run, 0.5, 3)
        ref_fn = MATH_NUMPY.get(op)
        if ref_fn is None:
            print(f"{op:>10} {size / t_ours / 1e9:13.2f} {'-':>14} {'-':>6}")
            continue
        t_np = best_time(functools.partial(ref_fn, x, out2), 0.5, 3)
        print(f"{op:>10} {size / t_ours / 1e9:13.2f} {size / t_np / 1e9:14.2f} {t_np / t_ours:6.2f}")


def pair_time(fns: list[Callable[[], object]], calls: int) -> float:
    """Seconds per call per thread when ``fns[i]`` runs ``calls`` times on thread ``i``, each
    thread pinned to its own CPU of this process, all started together (wall time of the slowest
    divided by the calls made in all, so one thread's figure compares with ``best_time``'s)."""
    cpus = sorted(_cpus())
    barrier = threading.Barrier(len(fns) + 1)
    done: list[float] = []

    def work(i: int) -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {cpus[i % len(cpus)]})  # this thread only (Linux)
        fns[i]()
        barrier.wait()
        for _ in range(calls):
            fns[i]()
        done.append(time.perf_counter())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return (max(done) - t0) / (calls * len(fns))


def _cpus() -> set[int]:
    from asyncjit.codegen import _parallel

    return _parallel.process_cpus()


def _fma_loop_module() -> ir.Module:
    """``fma_loop(args)``: ``args[0]`` iterations of 12 independent vector FMAs held in registers
    (no memory traffic; one lane of their sum stored at ``args[1]``): the core's FMA throughput,
    alone or with the other cores busy."""
    module = ir.Module("fma_loop")
    fn, b = new_function(module, "fma_loop", [("args", PTR)], linkage="external")
    n = b.load(b.gep(fn.args[0], [i64(0)], source_etype=I64), typ=I64)
    lanes = matmul_tiling().vw
    vty = ir.VectorType(F32, lanes)
    fma = ir.Function(module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{lanes}f32")
    accs = [b.alloca(vty) for _ in range(12)]
    for i, acc in enumerate(accs):
        b.store(ir.Constant(vty, [float(i)] * lanes), acc)
    scale, shift = ir.Constant(vty, [0.999] * lanes), ir.Constant(vty, [0.001] * lanes)
    with for_range(b, i64(0), n):
        for acc in accs:
            b.store(b.call(fma, [b.load(acc), scale, shift]), acc)
    total = b.load(accs[0])
    for acc in accs[1:]:
        total = b.fadd(total, b.load(acc))
    out = b.inttoptr(b.load(b.gep(fn.args[0], [i64(1)], source_etype=I64), typ=I64), PTR)
    b.store(b.extract_element(total, ir.Constant(ir.IntType(32), 0)), out)  # the loop is live
    b.ret_void()
    return module


def bench_goals(rounds: int) -> None:
    """The figures with goals, each a median over ``rounds`` interleaved rounds (best-of inside)."""
    from asyncjit import Tensor
    from asyncjit.codegen import _parallel
    from asyncjit.compiler import compile

    cores = _parallel.available_cores()
    m = 512
    a, b = Tensor.placeholder((m, m), name="a"), Tensor.placeholder((m, m), name="b")
    mm = compile(a @ b, [a, b], name="goal_mm512").launcher()
    rng = np.random.default_rng(3)
    av, bv = rng.standard_normal((m, m)).astype(np.float32), rng.standard_normal((m, m)).astype(np.float32)
    cv = np.empty((m, m), np.float32)
    mm_addrs = [av.ctypes.data, bv.ctypes.data, cv.ctypes.data]

    def mm_time(threads: int) -> float:
        _parallel.set_intra_op_threads(threads)
        try:
            return best_time(lambda: mm(mm_addrs, ()), 0.3, 3)
        finally:
            _parallel.set_intra_op_threads(1)

    def mm_cpu(threads: int, calls: int = 20) -> float:
        """CPU seconds per call over all threads: the work the split adds (spawn, A packed by
        every part, shared caches). Other jobs on the cores disturb it far less than the wall
        ratio, which on a loaded machine mostly measures when the helper thread got a core."""
        _parallel.set_intra_op_threads(threads)
        try:
            mm(mm_addrs, ())
            c0 = time.process_time()
            for _ in range(calls):
                mm(mm_addrs, ())
            return (time.process_time() - c0) / calls
        finally:
            _parallel.set_intra_op_threads(1)

    # the machine's own two-core figure for this work: two independent 1-thread products at
    # once, each thread pinned to its own CPU (a VM's cores share power and caches; the split
    # cannot beat what two separate products get), and a register-only FMA loop the same way
    pair_bufs = [[rng.standard_normal((m, m)).astype(np.float32) for _ in range(3)] for _ in range(2)]
    pair_addrs = [[x.ctypes.data for x in bufs] for bufs in pair_bufs]
    fma_obj, _ = compile_module(_fma_loop_module())
    fma_out = np.zeros(1, np.float32)
    fma_block = np.array([1 << 20, fma_out.ctypes.data], np.int64)
    fma_fn = fma_obj.cfunc("fma_loop", None, ctypes.c_void_p)

    def fma_run() -> None:
        fma_fn(fma_block.ctypes.data)

    r = 4096
    x = Tensor.placeholder((r, r), name="x")
    red0 = compile(x.sum(axis=0), [x], name="goal_sum_axis0").launcher()
    red1 = compile(x.sum(axis=1), [x], name="goal_sum_axis1").launcher()
    xv = rng.standard_normal((r, r)).astype(np.float32)
    o0, o1, dst = np.empty(r, np.float32), np.empty(r, np.float32), np.empty_like(xv)
    red0([xv.ctypes.data, o0.ctypes.data], ())
    np.testing.assert_allclose(o0, xv.sum(0), atol=1e-2)
    red1([xv.ctypes.data, o1.ctypes.data], ())
    np.testing.assert_allclose(o1, xv.sum(1), atol=1e-2)

    module = ir.Module("goal_math")
    fn, bld = new_function(module, "m_tanh", [("args", PTR)], linkage="external")
    slots = [bld.load(bld.gep(fn.args[0], [i64(i)], source_etype=I64), typ=I64) for i in range(3)]
    xp, op, n = bld.inttoptr(slots[0], PTR), bld.inttoptr(slots[1], PTR), slots[2]
    # interleaved as a plan's elementwise kernel is (MATH_INTERLEAVE)
    with for_range(bld, i64(0), n, interleave=MATH_INTERLEAVE) as i:
        v = bld.load(bld.gep(xp, [i], source_etype=F32), typ=F32, align=4)
        bld.store(emit_unary(bld, "tanh", v), bld.gep(op, [i], source_etype=F32), align=4)
    bld.ret_void()
    obj, _ = compile_module(module)
    tx = np.random.default_rng(0).uniform(-8, 8, 1 << 16).astype(np.float32)
    t_out, t_out2 = np.empty_like(tx), np.empty_like(tx)
    tanh_ours = caller(obj, "m_tanh", [tx.ctypes.data, t_out.ctypes.data, tx.size])

    cases: dict[str, Callable[[], float]] = {
        "mm1": lambda: mm_time(1),
        "mmN": lambda: mm_time(cores),
        "mm_pair": lambda: pair_time([lambda i=i: mm(pair_addrs[i], ()) for i in range(cores)], 60),
        "fma1": lambda: best_time(fma_run, 0.2, 3),
        "fma_pair": lambda: pair_time([fma_run] * cores, 40),
        "mm1_cpu": lambda: mm_cpu(1),
        "mmN_cpu": lambda: mm_cpu(cores),
        "tanh": lambda: best_time(tanh_ours, 0.2, 3),
        "tanh_np": lambda: best_time(lambda: np.tanh(tx, out=t_out2), 0.2, 3),
        "sum0": lambda: best_time(lambda: red0([xv.ctypes.data, o0.ctypes.data], ()), 0.3, 3),
        "sum1": lambda: best_time(lambda: red1([xv.ctypes.data, o1.ctypes.data], ()), 0.3, 3),
        "sum0_np": lambda: best_time(lambda: np.sum(xv, axis=0, out=o0), 0.3, 3),
        "copy": lambda: best_time(lambda: np.copyto(dst, xv), 0.3, 3),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for key, case in cases.items():
            times[key].append(case())

    def med(key: str) -> float:
        return float(np.median(times[key]))

    def ratios(num: str, den: str) -> str:
        return ", ".join(f"{d / n_:.2f}" for n_, d in zip(times[num], times[den], strict=True))

    gb = xv.nbytes / 1e9
    copy_gbs = 2 * gb / med("copy")  # read + write, what np.copyto moves
    fraction = [(gb / t0) / (2 * gb / tc) for t0, tc in zip(times["sum0"], times["copy"], strict=True)]
    flops = 2 * m**3
    print(f"\n## goals (median of {rounds} interleaved rounds; each figure best-of inside a round)")
    print(
        f"matmul 512^3 f32: 1 thread {flops / med('mm1') / 1e9:.1f} GFLOP/s, {cores} threads "
        f"{flops / med('mmN') / 1e9:.1f} GFLOP/s -> {med('mm1') / med('mmN'):.2f}x "
        f"(goal >= 1.8x on 2 threads; rounds: {ratios('mmN', 'mm1')})"
    )
    print(
        f"  CPU time per call (all threads): 1 thread {med('mm1_cpu') * 1e3:.2f} ms, {cores} threads "
        f"{med('mmN_cpu') * 1e3:.2f} ms -> {med('mmN_cpu') / med('mm1_cpu'):.2f}x the work (rounds: "
        f"{ratios('mm1_cpu', 'mmN_cpu')}); bound on idle cores: {cores} / that = "
        f"{cores * med('mm1_cpu') / med('mmN_cpu'):.2f}x"
    )
    if cores > 1:
        print(
            f"  the machine's own {cores}-core scaling in the same rounds (throughput of {cores} pinned "
            f"threads at once / one): independent 1-thread 512^3 products {med('mm1') / med('mm_pair'):.2f}x "
            f"(rounds: {ratios('mm_pair', 'mm1')}), a register-only FMA loop "
            f"{med('fma1') / med('fma_pair'):.2f}x (rounds: {ratios('fma_pair', 'fma1')})"
        )
    print(
        f"tanh, 65,536 f32 in L2: ours {tx.size / med('tanh') / 1e9:.2f} Gelem/s, numpy "
        f"{tx.size / med('tanh_np') / 1e9:.2f} -> {med('tanh_np') / med('tanh'):.2f}x numpy "
        f"(goal >= 1.0x; rounds: {ratios('tanh', 'tanh_np')})"
    )
    print(
        f"sum over axis 0 of 4096x4096 f32: {gb / med('sum0'):.1f} GB/s read = "
        f"{float(np.median(fraction)):.2f} of copy bandwidth {copy_gbs:.1f} GB/s (goal >= 0.8); "
        f"axis 1 {gb / med('sum1'):.1f} GB/s; numpy axis 0 {gb / med('sum0_np'):.1f} GB/s"
    )


def bench_math_tables(rounds: int) -> None:
    """The table-driven ``tanh`` and ``erf`` against the ``exp``-based code they replace on
    AVX-512 hosts (``codegen._mathlut``), both compiled into one module and timed in turns, with
    numpy's ``tanh`` in the same rounds; each loop interleaved as a plan's kernel is."""
    from asyncjit.codegen import _mathfn

    module = ir.Module("math_tables")
    chosen = _mathfn.lut_chosen
    try:
        for op in ("tanh", "erf"):
            for label, table in (("exp", False), ("table", True)):
                _mathfn.lut_chosen = functools.partial(bool, table)  # type: ignore[assignment]
                fn, b = new_function(module, f"{op}_{label}", [("args", PTR)], linkage="external")
                slots = [b.load(b.gep(fn.args[0], [i64(i)], source_etype=I64), typ=I64) for i in range(3)]
                x, out, n = b.inttoptr(slots[0], PTR), b.inttoptr(slots[1], PTR), slots[2]
                with for_range(b, i64(0), n, interleave=MATH_INTERLEAVE) as i:
                    v = b.load(b.gep(x, [i], source_etype=F32), typ=F32, align=4)
                    b.store(emit_unary(b, op, v), b.gep(out, [i], source_etype=F32), align=4)
                b.ret_void()
    finally:
        _mathfn.lut_chosen = chosen  # type: ignore[assignment]
    obj, _ = compile_module(module)
    print(
        "\n## tanh and erf: tables of polynomials vs the exp-based code "
        f"(Gelem/s, best of each of {rounds} rounds)"
    )
    for size in (1 << 16, 1 << (20 if QUICK else 22)):
        x = np.random.default_rng(1).uniform(-8, 8, size).astype(np.float32)
        outs = {k: np.empty_like(x) for k in ("tanh_exp", "tanh_table", "erf_exp", "erf_table", "np")}
        calls: dict[str, Callable[[], object]] = {
            k: caller(obj, k, [x.ctypes.data, outs[k].ctypes.data, size]) for k in outs if k != "np"
        }
        calls["numpy tanh"] = lambda: np.tanh(x, out=outs["np"])  # noqa: B023
        for _ in range(rounds):
            g = {k: size / best_time(c, 0.2, 3) / 1e9 for k, c in calls.items()}
            print(
                f"{size:>9,} floats: tanh {g['tanh_exp']:.2f} -> {g['tanh_table']:.2f} "
                f"({g['tanh_table'] / g['tanh_exp']:.2f}x; numpy {g['numpy tanh']:.2f}, "
                f"{g['tanh_table'] / g['numpy tanh']:.2f}x numpy's), erf {g['erf_exp']:.2f} -> "
                f"{g['erf_table']:.2f} ({g['erf_table'] / g['erf_exp']:.2f}x)"
            )


def bench_math_plans(rounds: int) -> None:
    """Whole plans, each compiled both ways in one process and timed in turns: GELU in the form
    PyTorch exports it before opset 20 with the exp-based and the table ``erf``; ``sigmoid``
    over 4M floats (bounded at 8M: big enough for streaming stores) on the streaming path and
    on the plain interleaved loop that math kernels keep now."""
    from asyncjit import Tensor, Var
    from asyncjit.codegen import _kernels, _mathfn
    from asyncjit.compiler import compile

    x = Tensor.placeholder((Var("n", 1, 1 << 23),), np.float32, "x")
    gelu = x * 0.5 * ((x * (1 / math.sqrt(2))).erf() + 1.0)
    plans: dict[str, Any] = {}
    chosen, calls_math = _mathfn.lut_chosen, _kernels._calls_math
    try:
        for label, table in (("gelu exp-erf", False), ("gelu table-erf", True)):
            _mathfn.lut_chosen = functools.partial(bool, table)  # type: ignore[assignment]
            plans[label] = compile(
                [gelu], [x], name=label.replace(" ", "_").replace("-", "_"), cache_dir="off"
            )
        _mathfn.lut_chosen = chosen  # type: ignore[assignment]
        _kernels._calls_math = lambda _kernel: False  # type: ignore[assignment]
        plans["sigmoid streaming"] = compile([x.sigmoid()], [x], name="sigmoid_streaming", cache_dir="off")
        _kernels._calls_math = calls_math  # type: ignore[assignment]
        plans["sigmoid plain"] = compile([x.sigmoid()], [x], name="sigmoid_plain", cache_dir="off")
    finally:
        _mathfn.lut_chosen, _kernels._calls_math = chosen, calls_math  # type: ignore[assignment]
    inputs = {
        "gelu": np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32) * 3,
        "sigmoid": np.random.default_rng(3).uniform(-8, 8, 1 << 22).astype(np.float32),
    }
    print(f"\n## math in whole plans, one thread (ms per call, best of each of {rounds} rounds)")
    for _ in range(rounds):
        t = {k: best_time(lambda e=e, k=k: e.run([inputs[k.split()[0]]]), 0.3, 3) for k, e in plans.items()}
        print(
            f"GELU (erf form) 1M floats: {t['gelu exp-erf'] * 1e3:.3f} -> {t['gelu table-erf'] * 1e3:.3f} "
            f"({t['gelu exp-erf'] / t['gelu table-erf']:.2f}x); sigmoid 4M floats: streaming "
            f"{t['sigmoid streaming'] * 1e3:.3f} -> plain {t['sigmoid plain'] * 1e3:.3f} "
            f"({t['sigmoid streaming'] / t['sigmoid plain']:.2f}x)"
        )


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer shapes, batch sizes and sizes in the tables")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--goals", action="store_true", help="only the closing goals section")
    only.add_argument("--matmul", action="store_true", help="only the matmul table")
    only.add_argument("--conv", action="store_true", help="only the conv1d table")
    only.add_argument(
        "--math-tables",
        action="store_true",
        help="the table-driven tanh and erf against the exp-based code, then whole plans",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="interleaved rounds of the goals and of --math-tables (default 3)",
    )
    args = ap.parse_args()
    QUICK = args.quick
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _machine import machine_line

    from asyncjit.codegen import _parallel

    _parallel.set_intra_op_threads(1)  # the tables are single-threaded, as OpenBLAS is here
    print(machine_line())
    print(f"numpy {np.__version__}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    if args.matmul:
        bench_matmul()
        return
    if args.conv:
        bench_conv()
        return
    if args.math_tables:
        bench_math_tables(args.repeat)
        bench_math_plans(args.repeat)
        return
    if not args.goals:
        bench_matmul()
        bench_conv()
        bench_math()
    bench_goals(args.repeat)


if __name__ == "__main__":
    main()
