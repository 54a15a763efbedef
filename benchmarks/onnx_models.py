"""ONNX models through the generic importer against ONNX Runtime, side by side in one run.

    .venv/bin/python benchmarks/onnx_models.py [--quick] [--models silero,light_squeezenet,...]
    .venv/bin/python benchmarks/onnx_models.py --kernels [--groups] [--models light_squeezenet,...]
    .venv/bin/python benchmarks/onnx_models.py --layers light_resnet50
    .venv/bin/python benchmarks/onnx_models.py --pool [--models light_squeezenet,...]
    .venv/bin/python benchmarks/onnx_models.py --layout [--models light_resnet50,...]

Per model: latency at batch 1 (``InferenceSession.run`` with numpy in and out, as an ORT user
calls it; median of many calls), throughput at batch 32 where the file has a batch dim, against
ONNX Runtime with 1 intra-op thread and with its default threads (for the ``light_*`` models
ours runs both ways too, the four called in turn, one call each per round: the first ratio is
one thread against one thread, the second default against default); and the prepare time (import +
compile + load) of a fresh process with an empty compile cache (cold) and again with the cache
it left (warm). For Silero VAD the hand-built ``SileroVad`` (asyncjit.models) runs too: the
generic import should be within 1.2x of it. Ratios are asyncjit / peer: below 1.0 is faster.
``--kernels`` prints instead, for the ``light_*`` models, each side's sum of per-kernel minima
(a load-robust diagnostic of where the time goes; see ``kernel_minima_rows``; ``--groups``:
summed by kernel kind and by ORT op too); ``--layers
MODEL`` each conv kernel's minimum beside ONNX Runtime's conv node of the same rank, with its
shapes (``layer_rows``); ``--pool`` two threads on the helper pool against two threads created
per kernel (``pool_rows``); ``--layout`` channels-last regions between panels convs against
NCHW throughout, on one thread and the default threads, beside ONNX Runtime (``layout_rows``).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

QUICK = False  # --quick: main() sets it from the command line (importing this module parses none)
ROOT = Path(__file__).resolve().parents[1]
# benchmarks/silero_vad.py would shadow the silero-vad package whose .onnx files we read
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def median_time(fn: Callable[[], object], calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


SETTLE_S = 0.005
"""Idle time before each block of calls: ONNX Runtime's default thread pool spins on the cores
for a while after its runs and would slow whichever contestant follows it."""


def interleaved(fns: dict[str, tuple[Callable[[], object], int]], rounds: int = 25) -> dict[str, float]:
    """Each function's median call time per round, rounds interleaved; the median of rounds.

    Many short rounds (tens of ms each): this machine's speed drifts over seconds, and with a
    few long rounds the drift fell on one contestant more than another (the Silero ratio to ONNX
    Runtime ranged 0.29-0.49x over four runs of the same build with 5 rounds).
    """
    per: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (fn, calls) in fns.items():
            time.sleep(SETTLE_S)
            per[k].append(median_time(fn, max(calls // rounds, 5)))
    return {k: float(np.median(v)) for k, v in per.items()}


def prepare_times(path: str, dims: dict[str, Any], values: dict[str, int]) -> tuple[float, float]:
    """Seconds to build a session in a fresh process: empty compile cache, then warm (after
    the Python packages are imported, as ORT's session time excludes ``import onnxruntime``)."""
    code = (
        "import time, logging, structlog\n"
        "structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))\n"
        "import asyncjit.onnx as ao\n"
        "import onnx  # the package asyncjit.onnx reads models with: loaded once per process\n"
        "t = time.perf_counter()\n"
        f"ao.InferenceSession({path!r}, {dims!r}, values={values!r})\n"
        "print(time.perf_counter() - t)\n"
    )
    out = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ASYNCJIT_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        for _ in range(2):
            res = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            out.append(float(res.stdout.strip().splitlines()[-1]))
    return out[0], out[1]


def ort_session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def silero_rows(calls: int) -> list[str]:
    import asyncjit.onnx as ao
    from asyncjit.models import read_audio, speech_sample_path
    from asyncjit.models.silero_vad import SileroVad, default_model_path

    path = str(default_model_path().with_name("silero_vad_16k_op15.onnx"))
    dims = {"batch": (1, 32), "sequence": 576}
    values = {"sr": 16000}
    sess = ao.InferenceSession(path, dims, values=values)
    wave = read_audio(speech_sample_path())
    x1 = np.concatenate([np.zeros(64, np.float32), wave[16000:16512]])[None]
    s1 = np.zeros((2, 1, 128), np.float32)
    x32 = np.stack([wave[i * 512 : i * 512 + 576] for i in range(32)])
    s32 = np.zeros((2, 32, 128), np.float32)
    sr = np.array(16000, np.int64)
    hand = SileroVad(16000)
    chunk = wave[16000:16512]
    orts = {threads: ort_session(path, threads) for threads in (1, 0)}
    f1, f32 = {"input": x1, "state": s1}, {"input": x32, "state": s32}
    o1, o32 = {**f1, "sr": sr}, {**f32, "sr": sr}
    # interleaved rounds: a shared machine's drift hits every contestant alike
    t = interleaved(
        {
            "ours1": (lambda: sess.run(None, f1), calls),
            "hand1": (lambda: hand(chunk), calls),
            "ort1_1": (lambda: orts[1].run(None, o1), calls),
            "ort0_1": (lambda: orts[0].run(None, o1), calls),
            "ours32": (lambda: sess.run(None, f32), calls // 4),
            "ort1_32": (lambda: orts[1].run(None, o32), calls // 4),
            "ort0_32": (lambda: orts[0].run(None, o32), calls // 4),
        }
    )
    ours1, ours32, hand1 = t["ours1"], t["ours32"], t["hand1"]
    peers = {1: (t["ort1_1"], t["ort1_32"]), 0: (t["ort0_1"], t["ort0_32"])}
    rows = []
    cold, warm = prepare_times(path, dims, values)
    rows.append(
        f"| silero_vad_16k_op15 (generic import) | {ours1 * 1e3:.3f} | {peers[1][0] * 1e3:.3f} | "
        f"{peers[0][0] * 1e3:.3f} | {ours1 / peers[1][0]:.2f}x / {ours1 / peers[0][0]:.2f}x | "
        f"{32 / ours32:,.0f} vs {32 / peers[1][1]:,.0f} / {32 / peers[0][1]:,.0f} | "
        f"{cold:.2f} / {warm:.2f} ({warm / cold:.0%}) |"
    )
    rows.append(
        f"| hand-built SileroVad (per 512-sample chunk) | {hand1 * 1e3:.3f} | | | generic/hand-built "
        f"{ours1 / hand1:.2f}x | | |"
    )
    return rows


def _on_threads(threads: int, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with ``threads`` intra-op threads (the default restored after each call)."""
    from asyncjit.codegen import _parallel

    def run() -> object:
        old = _parallel.intra_op_threads()
        _parallel.set_intra_op_threads(threads)
        try:
            return fn()
        finally:
            _parallel.set_intra_op_threads(old)

    return run


def _rounds(fns: dict[str, Callable[[], object]], rounds: int, settle: float = 0.05) -> dict[str, float]:
    """The median of ``rounds`` single calls of each function, the functions called in turn
    after a pause of ``settle`` seconds each (whole models of 5-500 ms: one call per turn spreads
    the host's drift over every contestant alike). ONNX Runtime's default pool spins after its
    calls: with 5 ms pauses the call after it measured 6% slower than with 50 ms."""
    for fn in fns.values():
        fn()
    per: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            per[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in per.items()}


def light_rows(names: list[str], calls: int) -> list[str]:
    import onnx

    import asyncjit.onnx as ao

    data = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rows = []
    for name in names:
        path = str(data / f"{name}.onnx")
        t0 = time.perf_counter()
        sess = ao.InferenceSession(path)
        first = time.perf_counter() - t0
        info = sess.get_inputs()[0]
        shape = tuple(int(d) for d in info.shape)
        x = (np.arange(int(np.prod(shape))).reshape(shape) / np.prod(shape)).astype(np.float32)
        feed = {info.name: x}
        ort1, ort0 = ort_session(path, 1), ort_session(path, 0)
        t = _rounds(
            {
                "ours1": _on_threads(1, lambda s=sess, f=feed: s.run(None, f)),
                "ours0": lambda s=sess, f=feed: s.run(None, f),
                "ort1": lambda p=ort1, f=feed: p.run(None, f),
                "ort0": lambda p=ort0, f=feed: p.run(None, f),
            },
            calls,
        )
        cold, warm = prepare_times(path, {}, {})
        del first
        rows.append(
            f"| {name} | {t['ours1'] * 1e3:.2f} / {t['ours0'] * 1e3:.2f} | {t['ort1'] * 1e3:.2f} | "
            f"{t['ort0'] * 1e3:.2f} | {t['ours1'] / t['ort1']:.2f}x / {t['ours0'] / t['ort0']:.2f}x | "
            f"batch fixed at {shape[0]} in the file | {cold:.1f} / {warm:.1f} ({warm / cold:.0%}) |"
        )
        print(rows[-1], flush=True)
    return rows


def pool_rows(names: list[str], calls: int) -> None:
    """Per light model, two threads on the process's helper pool against two threads created per
    kernel (``codegen._pool.set_pool_enabled(False)``, how split kernels ran before the pool),
    beside one thread and ONNX Runtime's 1-thread and default sessions, all in turns."""
    import onnx

    import asyncjit.onnx as ao
    from asyncjit.codegen import _pool

    data = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

    def created(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            _pool.set_pool_enabled(False)
            try:
                return fn()
            finally:
                _pool.set_pool_enabled(True)

        return run

    print("| model | ours 1t ms | ours 2t, pool / created per kernel ms | ORT 1t / default ms | "
          "ours 2t / 1t: pool, created; ORT's | ours 2t / ORT default: pool, created |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name in names:
        path = str(data / f"{name}.onnx")
        sess = ao.InferenceSession(path)
        info = sess.get_inputs()[0]
        shape = tuple(int(d) for d in info.shape)
        size = int(np.prod(shape))
        feed = {info.name: (np.arange(size).reshape(shape) / size).astype(np.float32)}
        ort1, ort0 = ort_session(path, 1), ort_session(path, 0)
        run = functools.partial(sess.run, None, feed)
        t = _rounds(
            {
                "one": _on_threads(1, run),
                "pool": _on_threads(2, run),
                "created": created(_on_threads(2, run)),
                "ort1": functools.partial(ort1.run, None, feed),
                "ort0": functools.partial(ort0.run, None, feed),
            },
            calls,
        )
        ms = {k: v * 1e3 for k, v in t.items()}
        print(
            f"| {name} | {ms['one']:.2f} | {ms['pool']:.2f} / {ms['created']:.2f} | {ms['ort1']:.2f} / "
            f"{ms['ort0']:.2f} | {t['one'] / t['pool']:.2f}x, {t['one'] / t['created']:.2f}x; "
            f"{t['ort1'] / t['ort0']:.2f}x | {t['pool'] / t['ort0']:.2f}x, {t['created'] / t['ort0']:.2f}x |",
            flush=True,
        )
    print(f"pool: {_pool.pool_stats()}")


def layout_rows(names: list[str], calls: int) -> None:
    """Per light model: the plan with channels-last regions between panels convs against the
    plan without them (``passes.set_channels_last(False)``: every conv transposes its
    activations in and out), on one thread and on the default threads, beside ONNX Runtime's
    1-thread and default sessions, all in turns; and the two plans' outputs compared bit for bit."""
    import onnx

    import asyncjit.onnx as ao
    from asyncjit.passes import channels_last_enabled, set_channels_last

    data = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    print("| model | channels-last / NCHW ms, 1t; default | ORT ms, 1t; default | NCHW / channels-last, "
          "1t; default | channels-last / ORT, 1t; default | same bits |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    was = channels_last_enabled()
    try:
        for name in names:
            path = str(data / f"{name}.onnx")
            sess = {}
            for on in (True, False):
                set_channels_last(on)
                sess[on] = ao.InferenceSession(path)
            set_channels_last(was)
            info = sess[True].get_inputs()[0]
            shape = tuple(int(d) for d in info.shape)
            size = int(np.prod(shape))
            feed = {info.name: (np.arange(size).reshape(shape) / size).astype(np.float32)}
            same = all(
                np.array_equal(a, b)
                for a, b in zip(sess[True].run(None, feed), sess[False].run(None, feed), strict=True)
            )
            ort1, ort0 = ort_session(path, 1), ort_session(path, 0)
            last, nchw = (functools.partial(sess[on].run, None, feed) for on in (True, False))
            t = _rounds(
                {
                    "last1": _on_threads(1, last),
                    "nchw1": _on_threads(1, nchw),
                    "last0": last,
                    "nchw0": nchw,
                    "ort1": functools.partial(ort1.run, None, feed),
                    "ort0": functools.partial(ort0.run, None, feed),
                },
                calls,
            )
            ms = {k: v * 1e3 for k, v in t.items()}
            print(
                f"| {name} | {ms['last1']:.2f} / {ms['nchw1']:.2f}; {ms['last0']:.2f} / {ms['nchw0']:.2f} | "
                f"{ms['ort1']:.2f}; {ms['ort0']:.2f} | {t['nchw1'] / t['last1']:.3f}x; "
                f"{t['nchw0'] / t['last0']:.3f}x | {t['last1'] / t['ort1']:.2f}x; "
                f"{t['last0'] / t['ort0']:.2f}x | {same} |",
                flush=True,
            )
    finally:
        set_channels_last(was)


def _minima(
    name: str, calls: int, chunk: int = 5
) -> tuple[dict[str, float], dict[str, float], dict[str, dict[str, Any]], dict[str, int]]:
    """One light model's per-kernel minima (µs): ours by kernel name, in first-run order, from
    ``asyncjit.profiler.trace`` spans; ONNX Runtime's (1 thread) by node, in order, from its node
    profile, with each node's ``args`` (op name, input and output shapes); and our kernels' flops.

    Both sides run with one thread from the start (ours compiled and loaded that way) and in
    turns of ``chunk`` calls each: this host switches between a fast and a slow state for
    minutes, and minima taken one side after the other once put one side's every kernel in the
    slow state (a layer 1.4x ONNX Runtime's that was 1.0x interleaved)."""
    import json

    import onnx
    import onnxruntime as ort

    import asyncjit.onnx as ao
    from asyncjit.codegen import _parallel
    from asyncjit.profiler import trace

    path = str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx")
    _parallel.set_intra_op_threads(1)
    sess = ao.InferenceSession(path)
    _parallel.set_intra_op_threads(1)  # again after the session: its Client sizes the threads
    info = sess.get_inputs()[0]
    shape = tuple(int(d) for d in info.shape)
    feed = {info.name: (np.arange(int(np.prod(shape))).reshape(shape) / np.prod(shape)).astype(np.float32)}
    sess.run(None, feed)
    assert sess.plan is not None
    flops = {k.name: k.flops for k in sess.plan.executable.kernels}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    ours: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        peer = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        peer.run(None, feed)
        for done in range(0, calls, chunk):
            n = min(chunk, calls - done)
            with trace() as t:
                for _ in range(n):
                    sess.run(None, feed)
            for e in t.events:
                if e.get("cat") == "kernel":
                    ours[e["name"]] = min(ours.get(e["name"], np.inf), e["dur"])
            for _ in range(n):
                peer.run(None, feed)
        events = json.loads(Path(peer.end_profiling()).read_text())
    theirs: dict[str, float] = {}
    args: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            theirs[e["name"]] = min(theirs.get(e["name"], np.inf), e["dur"])
            args.setdefault(e["name"], e.get("args", {}))
    return ours, theirs, args, flops


def kernel_minima_rows(names: list[str], calls: int, groups: bool = False) -> list[str]:
    """Per model, the sum over its kernels of each kernel's fastest call: ours from
    ``asyncjit.profiler.trace`` spans, ONNX Runtime's (1 thread) from its node profile.

    A diagnostic for a loaded machine: a whole-model median there mostly measures when the
    process held a core, while the fastest of many calls of each kernel is close to its
    quiet-machine time, for both sides alike. The scored figures are the latency table's.
    ``groups``: each model's minima summed by kernel kind and by ORT op too.
    """
    from asyncjit.codegen import _parallel

    rows = []
    old = _parallel.intra_op_threads()
    try:
        for name in names:
            ours, theirs, args, _ = _minima(name, calls)
            a, b = sum(ours.values()) / 1e3, sum(theirs.values()) / 1e3
            top = max(ours, key=lambda k: ours[k])
            rows.append(
                f"| {name} | {a:.2f} ({len(ours)} kernels) | {b:.2f} ({len(theirs)} nodes) | {a / b:.2f}x | "
                f"{top} {ours[top] / 1e3:.2f} ms |"
            )
            print(rows[-1], flush=True)
            if groups:
                ops = {k: str(v.get("op_name", k)) for k, v in args.items()}
                mine = _by_kind(ours, lambda k: re.sub(r"^k[0-9]+_", "", k))
                peer = _by_kind(theirs, lambda k, o=ops: o.get(k, k))
                print(f"|   by kind | {mine} | {peer} | | |", flush=True)
    finally:
        _parallel.set_intra_op_threads(old)
    return rows


def _by_kind(minima: dict[str, float], kind: Callable[[str], str]) -> str:
    """The minima summed by kind (a kernel's name without its index, an ORT node's op), largest
    first: where a model's time goes on each side."""
    sums: dict[str, list[float]] = {}
    for k, v in minima.items():
        sums.setdefault(kind(k), []).append(v)
    ranked = sorted(sums.items(), key=lambda kv: -sum(kv[1]))
    return ", ".join(f"{k} x{len(v)} {sum(v) / 1e3:.2f}" for k, v in ranked if sum(v) >= 10.0)


def _conv_flops(args: dict[str, Any]) -> int:
    """2 x multiply-adds of an ORT conv node, from its profiled shapes (0 if they are missing)."""
    try:
        w = next(iter(args["input_type_shape"][1].values()))
        y = next(iter(args["output_type_shape"][0].values()))
    except (KeyError, IndexError, StopIteration):
        return 0
    return int(2 * np.prod(y) * np.prod(w[1:]))


def layer_rows(name: str, calls: int) -> None:
    """Each conv kernel of one light model beside ONNX Runtime's conv node with the same flops
    (the first not yet paired, in graph order), with the node's shapes: where a model's
    difference lies, layer by layer. Both sides' conv kernels include the bias, a
    BatchNormalization after the conv (folded into its weight) and a Relu after it (fused; ours
    also a residual Add before the Relu, which ONNX Runtime runs as a node of its own unless its
    conv fusion takes it)."""
    from asyncjit.codegen import _parallel

    old = _parallel.intra_op_threads()
    try:
        ours, theirs, args, flops = _minima(name, calls)
    finally:
        _parallel.set_intra_op_threads(old)
    peer = [k for k in theirs if "Conv" in str(args[k].get("op_name", ""))]
    mine = [
        k for k in ours if k.endswith(("_conv_conv", "_conv_conv_relu", "_conv_conv_add", "_conv_add_relu"))
    ]
    print(f"{name}: {len(mine)} conv kernels, ORT {len(peer)} conv nodes (minima over {calls} calls, ms)")
    print("| kernel | asyncjit | ORT | ratio | x | w | y |")
    print("|---|---|---|---|---|---|---|")
    total = [0.0, 0.0]
    for k in mine:
        match = next((p for p in peer if _conv_flops(args[p]) == flops.get(k)), None)
        if match is None:
            print(f"| {k} | {ours[k] / 1e3:.3f} | (no ORT conv with its flops) | | | | |")
            continue
        peer.remove(match)
        x, y = ours[k] / 1e3, theirs[match] / 1e3
        total[0] += x
        total[1] += y
        shapes = [next(iter(d.values()), "?") for d in args[match]["input_type_shape"][:2]]
        out = next(iter(args[match]["output_type_shape"][0].values()), "?")
        print(f"| {k} | {x:.3f} | {y:.3f} | {x / y:.2f}x | {shapes[0]} | {shapes[1]} | {out} |")
    print(f"| paired | {total[0]:.2f} | {total[1]:.2f} | {total[0] / max(total[1], 1e-9):.2f}x | | | |")


LIGHT = [
    "light_squeezenet",
    "light_shufflenet",
    "light_resnet50",
    "light_inception_v1",
    "light_densenet121",
    "light_inception_v2",
    "light_bvlc_alexnet",
    "light_zfnet512",
    "light_vgg19",
]


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer calls per model")
    ap.add_argument(
        "--models",
        default="silero," + ",".join(LIGHT),
        metavar="A,B,...",
        help="silero and/or light_* models (default: silero and every light model)",
    )
    ap.add_argument(
        "--kernels",
        action="store_true",
        help="instead of the latency table, each side's sum of per-kernel minima (light models)",
    )
    ap.add_argument(
        "--groups", action="store_true", help="with --kernels: summed by kernel kind and by ORT op too"
    )
    ap.add_argument(
        "--layers",
        metavar="MODEL",
        help="each conv kernel's minimum beside ONNX Runtime's conv node of the same rank, with its shapes",
    )
    ap.add_argument(
        "--pool",
        action="store_true",
        help="light models on 2 threads: the helper pool against threads created per kernel",
    )
    ap.add_argument(
        "--layout",
        action="store_true",
        help="light models: channels-last regions between panels convs against NCHW throughout",
    )
    args = ap.parse_args()
    QUICK = args.quick

    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    calls = 20 if QUICK else 200
    if args.layers is not None:
        print(f"load: {os.getloadavg()}")
        layer_rows(args.layers, 10 if QUICK else 30)
        return
    chosen = args.models.split(",")
    print(f"load: {os.getloadavg()}")
    if args.pool:
        pool_rows([m for m in chosen if m.startswith("light_")], 10 if QUICK else 25)
        return
    if args.layout:
        layout_rows([m for m in chosen if m.startswith("light_")], 10 if QUICK else 25)
        return
    print(
        "| model | asyncjit b1 ms (light: 1t / default) | ORT 1t ms | ORT default ms | "
        "ratio vs ORT 1t / default (light: 1t vs 1t / default vs default) | "
        "b32 items/s (asyncjit vs ORT 1t / default) | prepare cold / warm s |"
    )
    print("|---|---|---|---|---|---|---|")
    if "silero" in chosen:
        for row in silero_rows(calls * 10):  # 50-150 us calls: many, for stable medians
            print(row, flush=True)
    if args.kernels:
        calls = 10 if QUICK else 30
        print(f"\nsum of per-kernel minima over {calls} calls, 1 thread (load: {os.getloadavg()})")
        print("| model | asyncjit ms | ORT 1t ms | ratio | slowest kernel (its minimum) |")
        print("|---|---|---|---|---|")
        kernel_minima_rows([m for m in chosen if m.startswith("light_")], calls, args.groups)
        return
    light_rows([m for m in chosen if m.startswith("light_")], max(9, calls // 10))


if __name__ == "__main__":
    main()
