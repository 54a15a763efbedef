"""``asyncjit demo``: the real Silero VAD, streamed chunk by chunk, next to ONNX Runtime.

The built-in audio is ``asyncjit/data/speech_16k.wav`` (7.7 s of synthetic speech with pauses);
``--audio FILE.wav`` runs a mono 8 or 16 kHz 16-bit WAV of yours (multiples of 16 kHz are
decimated; other rates, stereo and other formats are rejected with the ``sox`` command that
converts them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from .models import read_wav, speech_sample_path, speech_timestamps
from .models.silero_vad import SileroVad

__all__ = ["run_demo"]


def _chunks(audio: np.ndarray, n: int) -> list[np.ndarray]:
    padded = np.zeros(-(-audio.size // n) * n, np.float32)
    padded[: audio.size] = audio
    return list(padded.reshape(-1, n))


def _timed(fn: Callable[[np.ndarray], float], chunks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    probs, times = [], []
    for c in chunks:
        t0 = time.perf_counter()
        probs.append(fn(c))
        times.append(time.perf_counter() - t0)
    return np.array(probs, np.float32), np.array(times)


def _fmt(times: np.ndarray) -> str:
    return f"median {np.median(times) * 1e6:7.1f} us, p99 {np.percentile(times, 99) * 1e6:7.1f} us"


def run_demo(
    audio_path: str | None = None, compare: bool = True, out: Callable[[str], None] = print
) -> dict[str, float]:
    """Run the demo and return its figures (median/p99 seconds, ratio, max probability diff)."""
    path = audio_path or speech_sample_path()
    audio, sr = read_wav(path)
    out(f"audio: {path} ({audio.size / sr:.2f} s at {sr} Hz)")

    t0 = time.perf_counter()
    vad = SileroVad(sr)
    seconds = time.perf_counter() - t0
    out(f"asyncjit: Silero VAD prepared in {seconds:.3f} s (compiled once, or loaded from the cache)")
    chunks = _chunks(audio, vad.chunk_samples)
    vad(chunks[0])  # warm the plan and its buffers
    vad.reset()
    probs, times = _timed(vad, chunks)
    segments = speech_timestamps(
        probs, sr, window_size_samples=vad.chunk_samples, audio_length_samples=audio.size
    )
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
