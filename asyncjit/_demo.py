"""``asyncjit demo``: the real Silero VAD, streamed chunk by chunk, next to ONNX Runtime.

The built-in audio is ``asyncjit/data/speech_16k.wav`` (7.7 s of synthetic speech with pauses);
``--audio FILE`` runs a file of yours in any format ``asyncjit.audio`` reads (WAV of any width,
FLAC, OGG, ...): channels are mixed down, rates other than 8 and 16 kHz resampled to 16 kHz with
soxr, and the demo says which conversions it made.

``--streams N`` multiplexes N live streams of the same audio (each starting at a different
offset) through one ``StreamMux`` (``vad_mux``) and prints throughput, per-chunk latency
percentiles and the batch sizes, against ONNX Runtime per stream and hand-batched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .audio import load_audio
from .compiler import CompileStats, compile_stats
from .errors import InvalidArgumentError
from .models import SAMPLE_RATES, speech_sample_path, speech_timestamps
from .models.silero_vad import SileroVad

__all__ = ["run_demo", "run_streams_demo"]


def _chunks(audio: np.ndarray, n: int) -> list[np.ndarray]:
    padded = np.zeros(-(-audio.size // n) * n, np.float32)
    padded[: audio.size] = audio
    return list(padded.reshape(-1, n))


def _timed(fn: Callable[[np.ndarray], float], chunks: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    probs, times = [], []
    for c in chunks:
        t0 = time.perf_counter()
        probs.append(fn(c))
        times.append(time.perf_counter() - t0)
    return np.array(probs, np.float32), np.array(times)


def _fmt(times: np.ndarray) -> str:
    return f"median {np.median(times) * 1e6:7.1f} us, p99 {np.percentile(times, 99) * 1e6:7.1f} us"


def _load(path: str, out: Callable[[str], None]) -> tuple[np.ndarray, int]:
    """The file as float32 mono at 8 or 16 kHz, telling the user what it is and what was converted."""
    clip = load_audio(path, 16000, keep=SAMPLE_RATES)
    out(f"audio: {path} ({clip.info.describe()})")
    shown = [c for c in clip.conversions if not c.endswith("to float32")]  # the format is shown above
    if shown:
        out(f"  converted: {'; '.join(shown)}")
    return clip.samples, clip.sample_rate


def _segment_table(segments: Sequence[Any]) -> Any:
    """The speech segments as a rich ``Table``."""
    from rich.table import Table

    table = Table(title=f"speech segments ({len(segments)})")
    for column in ("#", "start (s)", "end (s)", "duration (s)"):
        table.add_column(column, justify="right")
    for i, s in enumerate(segments, 1):
        table.add_row(str(i), f"{s.start_s:.2f}", f"{s.end_s:.2f}", f"{s.duration_s:.2f}")
    return table


def _how_prepared(before: CompileStats) -> str:
    """Where the plans made since ``before`` came from, in words."""
    now = compile_stats()
    cold, disk = now.cold_compiles - before.cold_compiles, now.disk_hits - before.disk_hits
    memory = now.memory_hits - before.memory_hits
    parts = [f"{cold} plan(s) compiled"] if cold else []
    if disk:
        parts.append(f"{disk} loaded from the disk cache")
    if memory:
        parts.append(f"{memory} reused from memory")
    return ", ".join(parts) or "no new plans"


def run_demo(
    audio_path: str | None = None,
    compare: bool = True,
    out: Callable[[str], None] = print,
    console: Any = None,
) -> dict[str, float]:
    """Run the demo and return its figures (median/p99 seconds, ratio, max probability diff).

    ``console``: a ``rich.console.Console`` for a progress bar and the segments as a table (the
    CLI passes one when rich is installed and the output is a terminal); None prints plain lines.
    """
    path = audio_path or speech_sample_path()
    audio, sr = _load(path, out)

    before = compile_stats()
    t0 = time.perf_counter()
    vad = SileroVad(sr)
    seconds = time.perf_counter() - t0
    out(f"asyncjit: Silero VAD prepared in {seconds:.3f} s ({_how_prepared(before)})")
    chunks = _chunks(audio, vad.chunk_samples)
    vad(chunks[0])  # warm the plan and its buffers
    vad.reset()
    if console is not None:  # a progress bar, drawn between the timed calls
        from rich.progress import track

        probs, times = _timed(vad, track(chunks, description="streaming chunks", console=console))
    else:
        probs, times = _timed(vad, chunks)
    segments = speech_timestamps(
        probs, sr, window_size_samples=vad.chunk_samples, audio_length_samples=audio.size
    )
    if console is not None:
        console.print(_segment_table(segments))
    else:
        out(f"speech segments ({len(segments)}):")
        for s in segments:
            out(f"  {s.start_s:6.2f} s - {s.end_s:6.2f} s")
    out(f"asyncjit      per-chunk latency over {len(chunks)} chunks: {_fmt(times)}")
    figures = {"median": float(np.median(times)), "p99": float(np.percentile(times, 99))}

    if compare:
        try:
            from .models import OnnxRuntimeVad

            peer = OnnxRuntimeVad(sr, threads=1)
        except Exception as exc:  # onnxruntime missing: the demo still runs
            out(f"ONNX Runtime comparison skipped: {exc}")
            return figures
        peer(chunks[0][None])
        peer.reset()
        ort_probs, ort_times = _timed(lambda c: float(peer(c[None])[0, 0]), chunks)
        ratio = float(np.median(times) / np.median(ort_times))
        diff = float(np.abs(probs - ort_probs).max())
        out(f"ONNX Runtime  per-chunk latency over {len(chunks)} chunks: {_fmt(ort_times)} (1 thread)")
        out(f"asyncjit / ONNX Runtime median latency: {ratio:.2f}x; max |probability difference| {diff:.1e}")
        figures.update(ort_median=float(np.median(ort_times)), ratio=ratio, max_diff=diff)
    return figures


# ---------------------------------------------------------------------------------------------
# asyncjit demo --streams N: many live streams through one StreamMux

PER_STREAM_PEER_STREAMS = 8
"""ONNX Runtime per stream is timed on this many streams: its cost per call does not depend on N."""


def _offset_streams(chunks: Sequence[np.ndarray], streams: int) -> np.ndarray:
    """``[streams, len(chunks), n]``: every stream is the whole audio, stream ``i`` starting at a
    different chunk (and wrapping around), so streams are at different points of speech."""
    frames = np.stack(chunks)
    total = len(frames)
    starts = (np.arange(streams) * 37) % total
    index = (starts[:, None] + np.arange(total)[None, :]) % total
    return np.asarray(frames[index])


async def _serve_streams(
    workload: np.ndarray, sample_rate: int, max_batch: int
) -> tuple[np.ndarray, np.ndarray, float, dict[str, object]]:
    """Every stream a task stepping its chunks one after another; (probs, latencies, wall, metrics)."""
    import anyio

    from .models.silero_vad import vad_mux

    streams, count = workload.shape[:2]
    probs = np.zeros((streams, count), np.float32)
    latencies = np.zeros((streams, count))
    mux = vad_mux(
        sample_rate, max_streams=streams, max_batch_size=max_batch, idle_timeout=None, metrics_interval=None
    )
    async with mux:
        async with mux.open_stream() as s:  # warm the plan at a few batch sizes, then reset
            await s.step(workload[0, 0])

        async def one(i: int) -> None:
            perf = time.perf_counter
            async with mux.open_stream() as s:
                for j in range(count):
                    t0 = perf()
                    probs[i, j] = await s.step(workload[i, j])
                    latencies[i, j] = perf() - t0

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, i)
        wall = time.perf_counter() - t0
        metrics = mux.metrics()
    return probs, latencies, wall, metrics


def run_streams_demo(
    streams: int,
    audio_path: str | None = None,
    compare: bool = True,
    out: Callable[[str], None] = print,
    max_batch: int = 256,
) -> dict[str, float]:
    """``streams`` concurrent streams of the audio through ``vad_mux``; return its figures
    (chunks/s, latency p50/p99 seconds, ONNX Runtime rates and ratios, max probability diff)."""
    import anyio

    if streams < 1:
        raise InvalidArgumentError(f"--streams must be >= 1, got {streams}")
    path = audio_path or speech_sample_path()
    audio, sr = _load(path, out)
    n = 512 if sr == 16000 else 256
    chunks = _chunks(audio, n)
    workload = _offset_streams(chunks, streams)
    total = workload.shape[0] * workload.shape[1]
    batch = min(max_batch, streams)
    out(
        f"{streams} live streams x {workload.shape[1]} chunks of {path} ({sr} Hz), offset starts, "
        f"through one StreamMux (vad_mux, batches of up to {batch} and at most half the streams, two "
        "in flight); each stream sends its next "
        "chunk when the previous result is back"
    )
    t0 = time.perf_counter()
    before = compile_stats()
    probs, latencies, wall, metrics = anyio.run(_serve_streams, workload, sr, batch)
    rate = total / wall
    p50, p99 = np.percentile(latencies, [50, 99])
    out(
        f"asyncjit StreamMux   {rate:>9,.0f} chunks/s  ({total} chunks in {wall:.2f} s; "
        f"{time.perf_counter() - t0:.2f} s with preparing: {_how_prepared(before)})"
    )
    out(f"  per-chunk latency   p50 {p50 * 1e3:6.2f} ms   p99 {p99 * 1e3:6.2f} ms")
    hist = metrics["batch_size_histogram"]
    assert isinstance(hist, dict)
    shown = ", ".join(f"{b}: {c}" for b, c in sorted(hist.items()))
    out(f"  batches {metrics['batches']}, mean size {metrics['batch_size_mean']}; sizes {{{shown}}}")
    figures = {"chunks_per_s": rate, "p50": float(p50), "p99": float(p99)}
    if not compare:
        return figures
    try:
        from .models import OnnxRuntimeVad

        OnnxRuntimeVad(sr, threads=1)
    except Exception as exc:  # onnxruntime missing: the demo still runs
        out(f"ONNX Runtime comparison skipped: {exc}")
        return figures

    sub = workload[: min(streams, PER_STREAM_PEER_STREAMS)]
    sessions = [OnnxRuntimeVad(sr, threads=1) for _ in sub]
    sessions[0](sub[0, 0][None])
    sessions[0].reset()
    t0 = time.perf_counter()
    for vad, stream in zip(sessions, sub, strict=True):
        for c in stream:
            vad(c[None])
    seq_rate = sub.shape[0] * sub.shape[1] / (time.perf_counter() - t0)

    batched = OnnxRuntimeVad(sr, batch=streams, threads=1)
    ort_probs = np.zeros_like(probs)
    t0 = time.perf_counter()
    for j in range(workload.shape[1]):
        ort_probs[:, j] = batched(np.ascontiguousarray(workload[:, j]))[:, 0]
    hand_rate = total / (time.perf_counter() - t0)
    diff = float(np.abs(probs - ort_probs).max())
    out(
        f"ONNX Runtime per stream  {seq_rate:>9,.0f} chunks/s  (1 thread, one call per stream and "
        f"chunk, timed on {sub.shape[0]} streams)   StreamMux is {rate / seq_rate:.1f}x"
    )
    out(
        f"ONNX Runtime hand-batched {hand_rate:>8,.0f} chunks/s  (1 thread, all {streams} streams "
        f"stacked into each call)   StreamMux is {rate / hand_rate:.2f}x"
    )
    out(f"max |probability difference| StreamMux vs ONNX Runtime per stream: {diff:.1e}")
    figures.update(
        ort_per_stream=seq_rate,
        ort_hand_batched=hand_rate,
        ratio_per_stream=rate / seq_rate,
        ratio_hand_batched=rate / hand_rate,
        max_diff=diff,
    )
    return figures
