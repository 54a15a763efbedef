"""Many concurrent streams through ``StreamMux``: throughput, per-chunk latency, batches, loop lag.

Run (the real Silero VAD, 256 live streams, against ONNX Runtime in the same run)::

    .venv/bin/python benchmarks/multiplex.py

It prints the machine (CPU model, vector flags, load), then, for asyncio (the standard library's
loop), asyncio on uvloop's loop (``uvloop``, when installed: what ``asyncjit serve`` runs on) and
trio side by side in interleaved rounds (``--repeat``, medians), chunks per second and p50/p99
per-chunk latency for 256 concurrent Silero VAD streams (the built-in speech, each stream
starting at a different offset) through ``vad_mux``'s step, the loop thread's CPU time per chunk
(load-independent), the batched step's own CPU time per chunk (no mux) and the two-thread
ceiling they imply, and the ratios to ONNX Runtime on the same ONNX file: called once per stream
and chunk (timed on 16 streams and scaled, or on all with ``--ort-streams 0``), and on
hand-stacked batches of all streams (1 intra-op thread, and its default threads); then the
goals: >= 14x (asyncio, and uvloop held to the same) and >= 12x (trio) the per-stream ONNX
Runtime throughput, p99 chunk latency < 20 ms, loop lag p99 < 2 ms, trio >= 0.85x asyncio's
chunks/s (each ratio scored as the median of the rounds' own ratios, the ratio of the medians
printed beside it). With ``--pool both`` (the default) it also runs the same plan with its slot
pool copied per batch (compiled without the donated pool) in the same interleaved rounds, and
prints in-place / copied chunks/s per backend.

``--model toy`` runs the numpy toy recurrence instead (a scheduler-overhead benchmark). Any
``BatchedStep`` and peers plug in: ``--step module:factory`` names ``factory(client,
max_batch_size, num_slots) -> BatchedStep``; ``--peer module:fn`` (repeatable) names
``fn(chunks) -> seconds``, which processes the workload ``chunks [streams, chunks_per_stream,
*chunk_shape]`` its own way and returns the wall time. Each stream is a task that steps its
chunks one after another (a live stream: the next chunk only after the previous result).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import structlog

from asyncjit._loops import run_options, uvloop_installed
from asyncjit.runtime import Client
from asyncjit.scheduler import BatchedStep, HostBatchedStep, StreamMux, run_unbatched, toy_step

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

from _machine import machine_line  # noqa: E402  (benchmarks/ is on the path when run as a script)

# This folder holds benchmarks/silero_vad.py, which would shadow the ``silero_vad`` package (whose
# ONNX file the models locate by name) when this file runs as a script: keep it off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

StepFactory = Callable[[Client, int, int], BatchedStep]
Peer = Callable[[npt.NDArray[Any]], float]


def toy_factory(client: Client, max_batch_size: int, num_slots: int) -> BatchedStep:
    return HostBatchedStep(client, toy_step, max_batch_size=max_batch_size, num_slots=num_slots)


def toy_per_stream(chunks: npt.NDArray[Any]) -> float:
    """Peer: the toy recurrence called once per stream and chunk (as ONNX Runtime is per stream)."""
    t0 = time.perf_counter()
    for stream in chunks:
        run_unbatched(toy_step, list(stream), np.zeros(4, np.float32))
    return time.perf_counter() - t0


def toy_hand_batched(chunks: npt.NDArray[Any]) -> float:
    """Peer: every stream's chunk ``i`` stacked by hand into one call of the toy recurrence."""
    t0 = time.perf_counter()
    states = np.zeros((chunks.shape[0], 4), np.float32)
    for i in range(chunks.shape[1]):
        _, states = toy_step(np.ascontiguousarray(chunks[:, i]), states)
    return time.perf_counter() - t0


def silero_factory(client: Client, max_batch_size: int, num_slots: int) -> BatchedStep:
    """The real Silero VAD slot plan at 16 kHz (what ``vad_mux`` serves)."""
    from asyncjit.models.silero_vad import SileroBatchedStep

    return SileroBatchedStep(16000, max_streams=num_slots, max_batch_size=max_batch_size, client=client)


def silero_onnx_factory(client: Client, max_batch_size: int, num_slots: int) -> BatchedStep:
    """Silero VAD imported from the silero-vad package's ONNX file by the generic importer
    (``asyncjit.onnx.recurrent_step``: no model code), the same workload as ``silero_factory``."""
    import asyncjit.onnx as ao
    from asyncjit.models.silero_vad import default_model_path

    path = default_model_path().with_name("silero_vad_16k_op15.onnx")
    dims = {"batch": (1, max_batch_size), "sequence": 576}
    sess = ao.InferenceSession(path, dims, values={"sr": 16000}, client=client)
    return ao.recurrent_step(
        sess,
        state={"state": "stateN"},
        context=64,
        max_streams=num_slots,
        max_batch_size=max_batch_size,
        client=client,
    )


def silero_copy_factory(client: Client, max_batch_size: int, num_slots: int) -> BatchedStep:
    """The same plan compiled without the donated pool: each run writes a whole new pool (the
    double-buffered path, for the in-place comparison)."""
    from asyncjit.models.silero_vad import SileroBatchedStep

    return SileroBatchedStep(
        16000, max_streams=num_slots, max_batch_size=max_batch_size, client=client, in_place=False
    )


def speech_workload(streams: int, chunks_per_stream: int, n: int = 512) -> npt.NDArray[np.float32]:
    """``[streams, chunks, n]`` of the built-in speech, stream ``i`` starting ``i * 37`` chunks in."""
    from asyncjit.models import read_wav, speech_sample_path

    audio, _ = read_wav(speech_sample_path())
    total = audio.size // n
    frames = audio[: total * n].reshape(total, n)
    index = (np.arange(streams)[:, None] * 37 + np.arange(chunks_per_stream)[None, :]) % total
    return np.ascontiguousarray(frames[index])


PER_STREAM_SUBSET = 16


def ort_per_stream(chunks: npt.NDArray[Any], streams: int = PER_STREAM_SUBSET) -> float:
    """Peer: ONNX Runtime (1 thread) called once per stream and chunk, one session per stream.

    Per-call cost does not depend on how many streams there are, so by default it is timed on
    the first ``PER_STREAM_SUBSET`` streams and scaled to all of them (``--ort-streams 0`` times
    every stream; a full run of 256 takes about 3 s a round on a quiet machine).
    """
    from asyncjit.models import OnnxRuntimeVad

    subset = chunks[:streams]
    vads = [OnnxRuntimeVad(16000, threads=1) for _ in subset]
    vads[0](subset[0, 0][None])
    vads[0].reset()
    t0 = time.perf_counter()
    for vad, stream in zip(vads, subset, strict=True):
        for c in stream:
            vad(c[None])
    return (time.perf_counter() - t0) * chunks.shape[0] / len(subset)


def _ort_hand_batched(chunks: npt.NDArray[Any], threads: int) -> float:
    from asyncjit.models import OnnxRuntimeVad

    vad = OnnxRuntimeVad(16000, batch=chunks.shape[0], threads=threads)
    vad(np.ascontiguousarray(chunks[:, 0]))
    vad.reset()
    t0 = time.perf_counter()
    for i in range(chunks.shape[1]):
        vad(np.ascontiguousarray(chunks[:, i]))
    return time.perf_counter() - t0


def ort_hand_batched(chunks: npt.NDArray[Any]) -> float:
    """Peer: ONNX Runtime (1 thread) on every stream's chunk ``i`` stacked into one call."""
    return _ort_hand_batched(chunks, 1)


def ort_hand_batched_default_threads(chunks: npt.NDArray[Any]) -> float:
    """Peer: as ``ort_hand_batched`` with ONNX Runtime's default intra-op threads."""
    return _ort_hand_batched(chunks, 0)


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


async def _loop_lag(samples: list[float], stop: anyio.Event, period: float = 0.001) -> None:
    """How late a 1 ms sleep wakes up: what every other task on the loop waits for at worst."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await anyio.sleep(period)
        samples.append(max(0.0, time.perf_counter() - t0 - period))


def run_on(backend: str, fn: Callable[[], Any]) -> Any:
    """``anyio.run(fn)`` on ``backend``: asyncio (the standard library's loop), uvloop (asyncio on
    uvloop's loop, what ``asyncjit serve`` takes when installed) or trio."""
    name, options = run_options(backend)
    return anyio.run(fn, backend=name, backend_options=options)


def step_cpu_us(step: BatchedStep, chunks: npt.NDArray[Any], b: int, iters: int = 20) -> float:
    """Process CPU time per chunk of ``step.run`` alone (no mux) on batches of ``b`` streams.

    Together with the mux's loop CPU per chunk it splits a chunk's cost between the compute
    thread and the loop thread, both nearly load-independent: the mux cannot beat
    ``1e6 / max(step, loop)`` chunks/s on two cores.
    """
    batch = np.ascontiguousarray(chunks[:b, 0])
    slots = np.arange(b, dtype=np.int32)

    async def go() -> float:
        await step.run(batch, slots)
        c0 = time.process_time()
        for _ in range(iters):
            await step.run(batch, slots)
        return (time.process_time() - c0) / (iters * b) * 1e6

    return statistics.median(anyio.run(go) for _ in range(3))


async def _wake_cost(tasks: int = 128, rounds: int = 200) -> float:
    """Loop-thread CPU µs per task wake-up with nothing else to do: ``tasks`` tasks each park on
    the mux's own ``Signal`` and are all set at once, ``rounds`` times. The floor under the
    mux's loop CPU per chunk (each step resumes its stream's task once), per event loop."""
    from asyncjit.scheduler._signal import signal_factory

    make = signal_factory()
    armed: list[Any] = []
    state = {"left": 0, "all": make()}

    async def worker() -> None:
        for _ in range(rounds):
            sig = make()
            armed.append(sig)
            await sig.wait()
            state["left"] -= 1
            if not state["left"]:
                state["all"].set()

    async with anyio.create_task_group() as tg:
        for _ in range(tasks):
            tg.start_soon(worker)
        while len(armed) < tasks:
            await anyio.lowlevel.checkpoint()
        cpu0 = time.thread_time()
        for _ in range(rounds):
            while len(armed) < tasks:  # every worker parked again
                await anyio.lowlevel.checkpoint()
            batch, armed[:] = list(armed), []
            state["left"], state["all"] = tasks, make()
            for sig in batch:
                sig.set()
            await state["all"].wait()
        cpu = time.thread_time() - cpu0
    return cpu / (tasks * rounds) * 1e6


async def run_mux(
    step: BatchedStep,
    chunks: npt.NDArray[Any],
    *,
    max_batch_size: int,
    max_queue_delay: float,
    pipeline_depth: int = 2,
) -> dict[str, Any]:
    n_streams = chunks.shape[0]
    latencies: list[float] = []
    lag: list[float] = []
    stop = anyio.Event()
    async with StreamMux(
        step,
        max_streams=n_streams,
        max_batch_size=max_batch_size,
        max_queue_delay=max_queue_delay,
        idle_timeout=None,
        metrics_interval=None,
        pipeline_depth=pipeline_depth,
    ) as mux:

        async def one(i: int) -> None:
            async with mux.open_stream() as s:
                perf = time.perf_counter
                for c in chunks[i]:
                    t0 = perf()
                    await s.step(c)
                    latencies.append(perf() - t0)

        async with anyio.create_task_group() as outer:
            outer.start_soon(_loop_lag, lag, stop)
            t0 = time.perf_counter()
            cpu0 = time.thread_time()
            async with anyio.create_task_group() as tg:
                for i in range(n_streams):
                    tg.start_soon(one, i)
            wall = time.perf_counter() - t0
            loop_cpu = time.thread_time() - cpu0
            stop.set()
        metrics = mux.metrics()
    q = np.percentile(latencies, [50, 99])
    return {
        "wall_s": wall,
        "chunks_per_s": chunks.shape[0] * chunks.shape[1] / wall,
        "loop_cpu_us": loop_cpu / (chunks.shape[0] * chunks.shape[1]) * 1e6,
        "latency_p50_ms": q[0] * 1e3,
        "latency_p99_ms": q[1] * 1e3,
        "loop_lag_p99_ms": float(np.percentile(lag, 99)) * 1e3 if lag else 0.0,
        "batch_size_mean": metrics["batch_size_mean"],
        "batch_size_histogram": metrics["batch_size_histogram"],
        "step_ms": metrics["step_ms"],
        "batches": metrics["batches"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model",
        choices=["silero", "silero-onnx", "toy"],
        default="silero",
        help="silero: the hand-built model; silero-onnx: the generic ONNX import of the same file",
    )
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=100, help="chunks per stream")
    ap.add_argument("--max-batch", type=int, default=None, help="default 256")
    ap.add_argument("--delay", type=float, default=0.002, help="max_queue_delay in seconds")
    ap.add_argument("--pipeline-depth", type=int, default=2, help="batches in flight (1: no pipelining)")
    ap.add_argument(
        "--backend",
        choices=["all", "both", "asyncio", "uvloop", "trio"],
        default="all",
        help="all: asyncio, uvloop (asyncio on uvloop's loop, when installed) and trio side by "
        "side, interleaved; both: asyncio and trio",
    )
    ap.add_argument("--inline", choices=["auto", "always", "never"], default="auto")
    ap.add_argument("--step", default=None, help="module:factory(client, max_batch, slots) -> BatchedStep")
    ap.add_argument("--peer", action="append", default=[], help="module:fn(chunks) -> seconds (repeatable)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; medians are reported")
    ap.add_argument(
        "--pool",
        choices=["both", "in-place", "copy"],
        default="both",
        help="Silero slot pool: updated in place, copied per batch, or both side by side",
    )
    ap.add_argument(
        "--pool-rows",
        type=int,
        default=0,
        help="slots (and pool rows) the step holds before the run, e.g. 4096: a server that once "
        "had that many streams (a pool never shrinks); default: --streams",
    )
    ap.add_argument(
        "--ort-streams",
        type=int,
        default=PER_STREAM_SUBSET,
        help="streams ORT per stream is timed on (0: all)",
    )
    args = ap.parse_args()
    backends = {"all": ["asyncio", "uvloop", "trio"], "both": ["asyncio", "trio"]}.get(
        args.backend, [args.backend]
    )
    if "uvloop" in backends and not uvloop_installed():
        if args.backend == "uvloop":
            raise SystemExit("--backend uvloop needs the uvloop package (pip install uvloop)")
        print("uvloop is not installed: its rounds are left out")
        backends.remove("uvloop")

    silero = args.model in ("silero", "silero-onnx") and not args.step
    generic = args.model == "silero-onnx"
    factory: StepFactory = (
        _load(args.step)
        if args.step
        else silero_onnx_factory
        if generic
        else silero_factory
        if silero
        else toy_factory
    )
    peers: list[tuple[str, Peer]] = [(p, _load(p)) for p in args.peer]
    if silero:
        n_ort = args.ort_streams or args.streams

        def per_stream(chunks: npt.NDArray[Any]) -> float:
            return ort_per_stream(chunks, n_ort)

        peers = [
            ("ORT per stream", per_stream),
            ("ORT hand-batched", ort_hand_batched),
            ("ORT hand-b. dflt thr", ort_hand_batched_default_threads),
            *peers,
        ]
    elif not args.step:
        peers = [("numpy per stream", toy_per_stream), ("numpy hand-batched", toy_hand_batched), *peers]

    with Client("cpu", inline=args.inline) as client:
        default_batch = 256
        max_batch = min(args.max_batch or default_batch, args.streams)
        slots_n = max(args.pool_rows, args.streams)
        step = factory(client, max_batch, slots_n)
        # the copy-path pool beside the in-place one (Silero only): same plan without donation
        copy_step = (
            silero_copy_factory(client, max_batch, slots_n)
            if silero and not generic and args.pool == "both"
            else None
        )
        if silero and not generic and args.pool == "copy":
            step = silero_copy_factory(client, max_batch, slots_n)
        for s in (step, copy_step):
            if s is not None and args.pool_rows:
                s.reset_slot(args.pool_rows - 1)  # a pool that grows on demand holds every row now
        shape = (args.streams, args.chunks, *step.chunk_shape)
        if silero:
            chunks = speech_workload(args.streams, args.chunks, step.chunk_shape[0])
        else:
            chunks = np.random.default_rng(0).standard_normal(shape).astype(step.chunk_dtype)
        print(machine_line())
        print(f"step: {step!r}, pool rows {getattr(step, 'pool_rows', slots_n)}")
        print(
            f"{args.streams} streams x {args.chunks} chunks, max_batch={max_batch}, "
            f"max_queue_delay={args.delay * 1e3:.1f} ms, pipeline_depth={args.pipeline_depth}, "
            f"backends {', '.join(backends)}, {args.repeat} interleaved rounds"
        )
        if silero:
            how = "all streams" if n_ort >= args.streams else f"the first {n_ort} streams, scaled to all"
            print(f"ORT per stream: one 1-thread session per stream, one call per chunk, timed on {how}")
        step_us = {b: step_cpu_us(step, chunks, b) for b in sorted({max(1, max_batch // 2), max_batch})}
        print(
            "batched step alone (process CPU per chunk, no mux): "
            + ", ".join(f"b={b} {us:.2f} us" for b, us in step_us.items())
        )
        copy_us = {}
        if copy_step is not None:
            copy_us = {b: step_cpu_us(copy_step, chunks, b) for b in step_us}
            print(
                "  the same with the pool copied per batch: "
                + ", ".join(
                    f"b={b} {us:.2f} us (in place {us / step_us[b]:.2f}x faster)" for b, us in copy_us.items()
                )
            )
        # Interleaved rounds (each backend's mux, then every peer), medians over rounds: a machine
        # whose load changes during the run moves every figure of a round together.
        runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
        copy_runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
        peer_seconds: dict[str, list[float]] = {name: [] for name, _ in peers}
        for r in range(args.repeat):
            for backend in backends:
                pair = ((step, runs), (copy_step, copy_runs))
                for which, into in pair if r % 2 == 0 else pair[::-1]:  # alternate which goes first
                    if which is None:
                        continue
                    into[backend].append(
                        run_on(
                            backend,
                            lambda s=which: run_mux(
                                s,
                                chunks,
                                max_batch_size=max_batch,
                                max_queue_delay=args.delay,
                                pipeline_depth=args.pipeline_depth,
                            ),
                        )
                    )
            for name, peer in peers:
                peer_seconds[name].append(peer(chunks))
        total = chunks.shape[0] * chunks.shape[1]
        rates = {name: total / statistics.median(sec) for name, sec in peer_seconds.items()}
        for name, rate in rates.items():
            print(f"{name:<22} {rate:>10,.0f} chunks/s   (median of {args.repeat})")
        mux_rate: dict[str, float] = {}
        best: dict[str, dict[str, Any]] = {}
        for backend in backends:
            rs = runs[backend]
            med = best[backend] = sorted(rs, key=lambda r: r["chunks_per_s"])[len(rs) // 2]
            mux_rate[backend] = statistics.median(r["chunks_per_s"] for r in rs)
            print(
                f"StreamMux {backend:<8} {mux_rate[backend]:>12,.0f} chunks/s   "
                f"p50 {med['latency_p50_ms']:.2f} ms   p99 {med['latency_p99_ms']:.2f} ms   "
                f"loop lag p99 {med['loop_lag_p99_ms']:.2f} ms   (the median round)"
            )
            print("  chunks/s over the rounds: " + ", ".join(f"{r['chunks_per_s']:,.0f}" for r in rs))
            print(
                "  loop thread CPU per chunk (load-independent): "
                + ", ".join(f"{r['loop_cpu_us']:.2f}" for r in rs)
                + " us"
            )
            loop_us = statistics.median(r["loop_cpu_us"] for r in rs)
            near = min(step_us, key=lambda b: abs(b - med["batch_size_mean"]))
            bound = "loop" if loop_us > step_us[near] else "compute"
            print(
                f"  two-thread ceiling 1e6 / max(loop {loop_us:.2f}, step b={near} {step_us[near]:.2f} us) = "
                f"{1e6 / max(loop_us, step_us[near]):,.0f} chunks/s ({bound}-bound)"
            )
            hist = med["batch_size_histogram"]
            top = sorted(hist.items(), key=lambda kv: -kv[1])[:5]
            print(
                f"  batches {med['batches']}, mean size {med['batch_size_mean']}, most common {top}; "
                f"launch-to-result p50 {med['step_ms']['p50']} ms p99 {med['step_ms']['p99']} ms"
            )
            for name, rate in rates.items():
                print(f"  / {name:<20} {mux_rate[backend] / rate:6.2f}x")
        if copy_step is not None:
            print("in-place slot pool vs the pool copied per batch (same run, interleaved, medians):")
            for backend in backends:
                copied = statistics.median(r["chunks_per_s"] for r in copy_runs[backend])
                print(
                    f"  {backend:<8} in place {mux_rate[backend]:>10,.0f}   copied {copied:>10,.0f} chunks/s"
                    f"   {mux_rate[backend] / copied:.2f}x   (copied rounds: "
                    + ", ".join(f"{r['chunks_per_s']:,.0f}" for r in copy_runs[backend])
                    + ")"
                )
                print(
                    "           loop thread CPU per chunk, copied: "
                    + ", ".join(f"{r['loop_cpu_us']:.2f}" for r in copy_runs[backend])
                    + " us"
                )
        if silero:
            # ratios scored per round (each mux round against the peer and the other backend of
            # the same round, then the median): this host's speed drifts between rounds, and a
            # ratio of two medians pairs figures from different rounds
            def paired(num: list[float], den: list[float]) -> float:
                return statistics.median(n / d for n, d in zip(num, den, strict=True))

            ort_rates = [total / sec for sec in peer_seconds["ORT per stream"]]
            goals: list[tuple[str, float, float, str]] = []
            for backend in backends:
                target = 12.0 if backend == "trio" else 14.0  # uvloop is an asyncio loop
                med = best[backend]
                mine = [r["chunks_per_s"] for r in runs[backend]]
                per_round = [m / o for m, o in zip(mine, ort_rates, strict=True)]
                print(
                    f"{backend} / ORT per stream, per round: "
                    + ", ".join(f"{x:.2f}" for x in per_round)
                    + f" (ratio of the medians {mux_rate[backend] / rates['ORT per stream']:.2f})"
                )
                goals += [
                    (f"{backend}: >= {target:.0f}x ORT per stream", paired(mine, ort_rates), target, ">="),
                    (f"{backend}: p99 chunk latency < 20 ms", med["latency_p99_ms"], 20.0, "<"),
                    (f"{backend}: event-loop lag p99 < 2 ms", med["loop_lag_p99_ms"], 2.0, "<"),
                ]
            if "trio" in backends and "asyncio" in backends:
                wake = {b: statistics.median(run_on(b, _wake_cost) for _ in range(3)) for b in backends}
                print(
                    "a bare task wake-up on each loop (the floor under the loop CPU per chunk): "
                    + ", ".join(f"{b} {us:.2f} us" for b, us in wake.items())
                    + f"; trio / asyncio {wake['trio'] / wake['asyncio']:.2f}x"
                )
                trio, aio = ([r["chunks_per_s"] for r in runs[b]] for b in ("trio", "asyncio"))
                print(
                    "trio / asyncio, per round: "
                    + ", ".join(f"{t / a:.2f}" for t, a in zip(trio, aio, strict=True))
                    + f" (ratio of the medians {mux_rate['trio'] / mux_rate['asyncio']:.2f})"
                )
                goals.append(("trio >= 0.85x asyncio chunks/s", paired(trio, aio), 0.85, ">="))
            if "uvloop" in backends and "asyncio" in backends:
                uv, aio = ([r["chunks_per_s"] for r in runs[b]] for b in ("uvloop", "asyncio"))
                print(
                    "uvloop / asyncio, per round: "
                    + ", ".join(f"{u / a:.2f}" for u, a in zip(uv, aio, strict=True))
                    + f" (ratio of the medians {mux_rate['uvloop'] / mux_rate['asyncio']:.2f})"
                )
            print("goals (medians of this run; ratios: the median of each round's own ratio):")
            for label, value, target, op in goals:
                met = value >= target if op == ">=" else value < target
                print(f"  {label:<40} {value:8.2f}   {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
