"""Data-dependent sizes pay for the actual size: VAD-gated frames through an encoder.

Run: ``.venv/bin/python benchmarks/dynamism.py`` (about 30 s; ``--quick``: fewer rounds).

A batch of ``T = 2048`` audio frames (``F = 128`` features each) and a per-frame speech score;
only speech frames (score > 0.5) go through an encoder (three dense layers 128 -> 512 -> 512 ->
128 with tanh, then a mean over the kept frames). Three ways, in one run, rounds interleaved,
median wall time per call of ``CpuExecutable.run``:

* ``gated``: ``frames[score > 0.5]`` (a boolean mask: the kept-frame count is a data-dependent
  dim, bounded by ``T``), encoder over the kept frames only;
* ``padded``: the same plan shape without dynamism: the encoder over all ``T`` frames, the
  non-speech ones zeroed by the mask and left out of the mean (what a static-shape runtime does);
* peer: numpy (``frames[mask]`` then the same matmuls, its BLAS threads).

Speech fractions 10%, 50% and 100%; goal: at 10% speech the gated run takes at most 0.3x the
padded one.

Then an unbounded var (``Var("n", 1, None)``): one plan run at sizes 1, 1,000 and 1,000,000,
then 10,000 runs at mixed sizes (1 to 2,000 frames) with the process RSS before and after
(goal: flat; the dynamic arena grows to the largest size once and is reused).

The load average is printed next to the figures: on a shared machine the ratios, not the
times, are the result.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog

sys.path.insert(0, os.path.dirname(__file__))
from _machine import machine_line

from asyncjit import Tensor, Var, float32
from asyncjit.compiler import compile

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

T, F, H = 2048, 128, 512
RNG = np.random.default_rng(0)
WEIGHTS = [
    (RNG.standard_normal((F, H)) / np.sqrt(F)).astype(np.float32),
    (RNG.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32),
    (RNG.standard_normal((H, F)) / np.sqrt(H)).astype(np.float32),
]


def encoder(h: Tensor) -> Tensor:
    for w in WEIGHTS:
        h = (h @ Tensor.const(w)).tanh()
    return h


def build() -> tuple[Any, Any]:
    frames = Tensor.placeholder((T, F), float32, name="frames")
    score = Tensor.placeholder((T,), float32, name="score")
    speech = score > 0.5
    gated = encoder(frames[speech]).mean(0)
    keep = speech.cast(float32)
    enc = encoder(frames * keep.reshape(T, 1))
    padded = (enc * keep.reshape(T, 1)).sum(0) / keep.sum().maximum(1.0)
    return compile([gated], [frames, score], name="gated"), compile([padded], [frames, score], name="padded")


def numpy_gated(frames: np.ndarray, score: np.ndarray) -> np.ndarray:
    h = frames[score > 0.5]
    for w in WEIGHTS:
        h = np.tanh(h @ w)
    out: np.ndarray = h.mean(0)
    return out


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    quick = ap.parse_args().quick
    rounds = 5 if quick else 15
    print(machine_line())
    gated, padded = build()
    frames = RNG.standard_normal((T, F)).astype(np.float32)
    print(f"T={T} frames x F={F}; encoder {F}->{H}->{H}->{F} tanh; median of {rounds} rounds\n")
    head = ("speech", "kept", "gated ms", "padded ms", "numpy ms", "gated/padded", "gated/numpy")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 5, 9, 10, 9, 13, 12), strict=True)))
    for fraction in (0.1, 0.5, 1.0):
        score = (RNG.random(T) < fraction).astype(np.float32)
        want = numpy_gated(frames, score)
        (g,) = gated.run([frames, score])
        (p,) = padded.run([frames, score])
        np.testing.assert_allclose(g, want, rtol=2e-3, atol=2e-4)
        np.testing.assert_allclose(p, want, rtol=2e-3, atol=2e-4)
        times: dict[str, list[float]] = {"gated": [], "padded": [], "numpy": []}
        feed = [frames, score]
        runs: dict[str, Callable[[], Any]] = {
            "gated": functools.partial(gated.run, feed),
            "padded": functools.partial(padded.run, feed),
            "numpy": functools.partial(numpy_gated, frames, score),
        }
        for _ in range(rounds):
            for name, fn in runs.items():
                times[name].append(timed(fn))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        g_ms, p_ms, n_ms = med["gated"], med["padded"], med["numpy"]
        print(
            f"{fraction:>7.0%} {int((score > 0.5).sum()):>5} {g_ms:>9.3f} {p_ms:>10.3f} "
            f"{n_ms:>9.3f} {g_ms / p_ms:>12.3f}x {g_ms / n_ms:>11.3f}x"
        )
    print("\ngoal: gated/padded <= 0.3x at 10% speech\n")
    unbounded(1000 if quick else 10_000)
    print(machine_line())


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def unbounded(runs: int) -> None:
    n = Var("n", 1, None)
    x = Tensor.placeholder((n, F), float32, name="x")
    proj = Tensor.const(WEIGHTS[0][:, :8].copy())  # a light layer: the runs measure memory
    exe = compile([((x * 2 + 1).tanh() @ proj).sum(0)], [x], name="unbounded")
    big = RNG.standard_normal((1_000_000, F)).astype(np.float32)
    for size in (1, 1000, 1_000_000):
        t = timed(functools.partial(exe.run, [big[:size]]))
        print(f"unbounded n={size:>9,}: {t * 1e3:9.2f} ms (one compile)")
    sizes = RNG.integers(1, 2_000, runs)
    exe.run([big[:2_000]])
    before = _rss_mb()
    t0 = time.perf_counter()
    for size in sizes:
        exe.run([big[: int(size)]])
    after = _rss_mb()
    print(
        f"{runs:,} runs at mixed sizes (1..2,000): RSS {before:.1f} -> {after:.1f} MB "
        f"({after - before:+.1f} MB), {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
