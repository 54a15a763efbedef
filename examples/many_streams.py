"""Many live audio streams through one Silero VAD ``StreamMux``, each read from an audio file ahead
of the compute.

Run::

    .venv/bin/python examples/many_streams.py                  # 32 streams of the built-in speech
    .venv/bin/python examples/many_streams.py --streams 200 --backend trio
    .venv/bin/python examples/many_streams.py a.wav b.flac c.ogg   # one stream per file

Files may be in any format ``asyncjit.audio`` reads, at any rate (resampled to 16 kHz as read).

Each stream is a task: it opens a stream on the mux, reads its file with ``wav_chunks`` (a
background reader keeps a few chunks ahead) and awaits one speech probability per 512-sample
chunk. The mux batches whichever streams are ready into one native call; every stream still
gets exactly its own results, in order, as a ``SileroVad`` fed the same chunks would. Streams
here skip a different number of chunks at the start, so they are not in step with each other.
"""

from __future__ import annotations

import argparse
import time

import anyio
import numpy as np

from asyncjit.models import speech_sample_path
from asyncjit.models.silero_vad import vad_mux
from asyncjit.scheduler import StreamMux, wav_chunks

CHUNK = 512  # samples per step at 16 kHz


async def serve_file(mux: StreamMux, path: str, skip: int) -> list[float]:
    """One stream: the file's chunks after the first ``skip``, one probability per chunk."""
    probs: list[float] = []
    async with mux.open_stream() as stream, wav_chunks(path, CHUNK, sample_rate=16000) as chunks:
        i = 0
        async for chunk in chunks:
            if i >= skip:
                probs.append(float(await stream.step(chunk)))
            i += 1
    return probs


async def main(streams: int, files: list[str] | None = None) -> None:
    paths = files or [str(speech_sample_path())] * streams
    streams = len(paths)
    results: dict[int, list[float]] = {}
    mux = vad_mux(16000, max_streams=streams, idle_timeout=30.0, metrics_interval=None)
    t0 = time.perf_counter()
    async with mux:

        async def one(i: int) -> None:
            # the built-in file is shared, so its streams start at different chunks
            results[i] = await serve_file(mux, paths[i], skip=0 if files else (i * 7) % 50)

        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, i)
    wall = time.perf_counter() - t0
    total = sum(len(p) for p in results.values())
    m = mux.metrics()
    print(f"{streams} streams, {total} chunks in {wall:.2f} s: {total / wall:,.0f} chunks/s")
    print(f"batches: {m['batches']}, mean size {m['batch_size_mean']}, step p50 {m['step_ms']['p50']} ms")
    for i in sorted(results)[:4]:
        p = np.array(results[i])
        print(f"  stream {i} ({paths[i]}): {p.size} chunks, {int((p > 0.5).sum())} of them speech (p > 0.5)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="audio files, one stream each (default: built-in speech)")
    ap.add_argument("--streams", type=int, default=32, help="streams of the built-in speech (no files)")
    ap.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = ap.parse_args()
    anyio.run(main, args.streams, args.files, backend=args.backend)
