"""Silero VAD streams served by two Ray replicas, each running its own ``StreamMux``.

Run (a local Ray cluster is started; pass ``--address`` to join a real one)::

    .venv/bin/python examples/ray_streams.py                    # 64 streams, asyncio
    .venv/bin/python examples/ray_streams.py --streams 256 --backend trio
    .venv/bin/python examples/ray_streams.py --address ray://head-node:10001

Each stream is pinned to one replica (its LSTM state lives in that replica's slot pool); the
steps of all streams on a replica travel as one actor call. The example also runs the same
streams through one in-process ``vad_mux`` and checks that every probability is the same.
"""

from __future__ import annotations

import argparse
import functools
import time

import anyio
import numpy as np
import ray

from asyncjit.models import read_audio, speech_sample_path
from asyncjit.models.silero_vad import vad_mux
from asyncjit.ray import serve_streams


async def run(streams: int, chunks: np.ndarray, open_stream: object) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}

    async def one(i: int) -> None:
        async with open_stream() as s:  # type: ignore[operator]
            out[i] = [float(await s.step(np.roll(c, 37 * i))) for c in chunks]

    async with anyio.create_task_group() as tg:
        for i in range(streams):
            tg.start_soon(one, i)
    return out


async def main(streams: int, n_chunks: int) -> None:
    wave = read_audio(speech_sample_path())
    chunks = np.ascontiguousarray(wave[: 512 * n_chunks].reshape(n_chunks, 512))
    per_replica = (streams + 1) // 2
    factory = functools.partial(vad_mux, max_streams=per_replica)
    async with serve_streams(factory, replicas=2, max_streams=per_replica, num_cpus=0.5) as svc:
        t0 = time.perf_counter()
        remote = await run(streams, chunks, svc.open_stream)
        seconds = time.perf_counter() - t0
        for s in svc.statistics():
            print(f"replica {s['replica']}: {s['steps']} steps in {s['calls']} actor calls")
    print(
        f"{streams} streams x {n_chunks} chunks over 2 replicas: {streams * n_chunks / seconds:,.0f} chunks/s"
    )
    async with vad_mux(max_streams=streams) as mux:
        local = await run(streams, chunks, mux.open_stream)
    print("equal to one process:", remote == local)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    ap.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    args = ap.parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    anyio.run(main, args.streams, args.chunks, backend=args.backend)
