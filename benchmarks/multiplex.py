"""Many concurrent streams through ``StreamMux``: throughput, per-chunk latency, batches, loop lag.

Run: ``.venv/bin/python benchmarks/multiplex.py`` (the toy step, a few seconds), or plug in any
``BatchedStep`` and peers measured in the same run::

    .venv/bin/python benchmarks/multiplex.py --streams 256 --chunks 100 \\
        --step asyncjit.models.silero_vad:bench_step --peer mypkg.bench:onnx_per_stream

``--step module:factory`` names ``factory(client, max_batch_size, num_slots) -> BatchedStep``;
``--peer module:fn`` (repeatable) names ``fn(chunks) -> seconds``, which processes the same
workload ``chunks [streams, chunks_per_stream, *chunk_shape]`` its own way (for example ONNX
Runtime called once per stream and chunk, or on hand-stacked batches) and returns the wall time.
Each stream is a task that steps its chunks one after another (a live stream: the next chunk
only after the previous result). Issue 7's goals: >= 10x the per-stream peer, >= 1.5x the
hand-batched peer, p99 chunk latency < 20 ms, loop lag p99 < 2 ms (for Silero VAD, 256 streams).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import structlog

from asyncjit.runtime import Client
from asyncjit.scheduler import BatchedStep, HostBatchedStep, StreamMux, run_unbatched, toy_step

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

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


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


async def _loop_lag(samples: list[float], stop: anyio.Event, period: float = 0.001) -> None:
    """How late a 1 ms sleep wakes up: what every other task on the loop waits for at worst."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await anyio.sleep(period)
        samples.append(max(0.0, time.perf_counter() - t0 - period))


async def run_mux(
    step: BatchedStep, chunks: npt.NDArray[Any], *, max_batch_size: int, max_queue_delay: float
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
            async with anyio.create_task_group() as tg:
                for i in range(n_streams):
                    tg.start_soon(one, i)
            wall = time.perf_counter() - t0
            stop.set()
        metrics = mux.metrics()
    q = np.percentile(latencies, [50, 99])
    return {
        "wall_s": wall,
        "chunks_per_s": chunks.shape[0] * chunks.shape[1] / wall,
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
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=100, help="chunks per stream")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--delay", type=float, default=0.002, help="max_queue_delay in seconds")
    ap.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    ap.add_argument("--inline", choices=["auto", "always", "never"], default="auto")
    ap.add_argument("--step", default=None, help="module:factory(client, max_batch, slots) -> BatchedStep")
    ap.add_argument("--peer", action="append", default=[], help="module:fn(chunks) -> seconds (repeatable)")
    ap.add_argument("--repeat", type=int, default=3, help="mux runs; the median is reported")
    args = ap.parse_args()

    factory: StepFactory = _load(args.step) if args.step else toy_factory
    peers: list[tuple[str, Peer]] = [(p, _load(p)) for p in args.peer]
    if not args.step:
        peers = [("numpy per stream", toy_per_stream), ("numpy hand-batched", toy_hand_batched), *peers]

    with Client("cpu", inline=args.inline) as client:
        max_batch = min(args.max_batch, args.streams)
        step = factory(client, max_batch, args.streams)
        rng = np.random.default_rng(0)
        shape = (args.streams, args.chunks, *step.chunk_shape)
        chunks = rng.standard_normal(shape).astype(step.chunk_dtype)
        print(f"step: {step!r}")
        print(
            f"{args.streams} streams x {args.chunks} chunks, max_batch={max_batch}, "
            f"max_queue_delay={args.delay * 1e3:.1f} ms, backend={args.backend}"
        )
        runs = []
        for _ in range(args.repeat):
            runs.append(
                anyio.run(
                    lambda: run_mux(step, chunks, max_batch_size=max_batch, max_queue_delay=args.delay),
                    backend=args.backend,
                )
            )
        best = sorted(runs, key=lambda r: r["chunks_per_s"])[len(runs) // 2]
        print(
            f"StreamMux            {best['chunks_per_s']:>12,.0f} chunks/s   "
            f"p50 {best['latency_p50_ms']:.2f} ms   p99 {best['latency_p99_ms']:.2f} ms   "
            f"loop lag p99 {best['loop_lag_p99_ms']:.2f} ms"
        )
        hist = best["batch_size_histogram"]
        top = sorted(hist.items(), key=lambda kv: -kv[1])[:5]
        print(
            f"  batches {best['batches']}, mean size {best['batch_size_mean']}, most common {top}; "
            f"step p50 {best['step_ms']['p50']} ms p99 {best['step_ms']['p99']} ms"
        )
        for name, peer in peers:
            seconds = statistics.median(peer(chunks) for _ in range(args.repeat))
            rate = chunks.shape[0] * chunks.shape[1] / seconds
            print(
                f"{name:<20} {rate:>12,.0f} chunks/s   StreamMux / peer = {best['chunks_per_s'] / rate:.2f}x"
            )


if __name__ == "__main__":
    main()
