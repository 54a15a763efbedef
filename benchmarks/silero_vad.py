"""Silero VAD: asyncjit vs ONNX Runtime on the same published weights, measured in one run.

    .venv/bin/python benchmarks/silero_vad.py            # ~1 minute
    .venv/bin/python benchmarks/silero_vad.py --quick    # fewer repetitions
    .venv/bin/python benchmarks/silero_vad.py --profile  # also print per-kernel profiles
    .venv/bin/python benchmarks/silero_vad.py --stft     # the STFT by FFT against folded frames

Prints:

1. per-chunk latency for one 16 kHz stream read back every chunk (median and p99):
   ``SileroVad.__call__`` vs ``OnnxRuntimeVad`` with 1 intra-op thread and with ONNX Runtime's
   default (``threads=0``); goal: asyncjit <= 0.5x ONNX Runtime (1 thread);
2. per-chunk cost of one batched step at B = 8, 64, 256: the ``SileroVadJit`` plan prepared for
   256 streams and run with ``execute_with_vars({"b": B})`` (inputs written, output read back,
   state carried) vs an ONNX Runtime session fed ``[B, 576]``; goal: <= 0.7x ONNX Runtime (1
   thread) at the same B.

The machine may be shared, so every measurement is interleaved: each round runs a block of calls
of every contender in turn (with a 5 ms pause before each block, so ONNX Runtime's spinning
worker threads do not steal the core from the next contender), and the medians are taken over
all rounds. Per-kernel profiles (``--profile``) come from ``JitWrapper.execute_profiled``.

``--stft`` prints instead the batched step's kernel time per chunk at B = 1, 16 and 128 with the
STFT run by FFT (``codegen/_convfft.py``, what the model builds) and on folded frames (two
matmuls: what it built before), the two plans profiled in alternating rounds in one process:
the sum of the kernels' times (minimum and median over rounds) and the STFT's own kernels.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

# This file is named like the ``silero_vad`` package the weights come from: keep its directory
# off the import path so ``importlib`` finds the package, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import numpy as np  # noqa: E402

from asyncjit.models._ort import OnnxRuntimeVad  # noqa: E402
from asyncjit.models.silero_vad import HIDDEN, SileroVad, SileroVadJit, load_weights  # noqa: E402


def _interleaved(
    contenders: dict[str, Callable[[], None]], rounds: int, per_round: int
) -> dict[str, np.ndarray]:
    """Seconds per call of each contender, over ``rounds`` interleaved blocks of ``per_round`` calls."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for fn in contenders.values():  # warm up
        for _ in range(max(per_round // 4, 2)):
            fn()
    for _ in range(rounds):
        for name, fn in contenders.items():
            # ONNX Runtime's default thread pool spins after a run; let it settle so it does not
            # steal the core from whichever contender runs next.
            time.sleep(0.005)
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: np.array(v) for name, v in times.items()}


def _verdict(ratio: float, goal: float) -> str:
    return f"{ratio:.2f}x (goal <= {goal}x: {'met' if ratio <= goal else 'MISSED'})"


def single_stream(rounds: int, per_round: int) -> bool:
    rng = np.random.default_rng(0)
    audio = (rng.standard_normal((per_round, 512)) * 0.1).astype(np.float32)
    vad = SileroVad(16000)
    ort1 = OnnxRuntimeVad(16000, batch=1, threads=1)
    ort0 = OnnxRuntimeVad(16000, batch=1, threads=0)
    idx = {"i": 0}

    def nxt() -> np.ndarray:
        idx["i"] = (idx["i"] + 1) % per_round
        return audio[idx["i"]]

    def run_aj() -> None:
        vad(nxt())

    def run_ort1() -> None:
        float(ort1(nxt())[0, 0])

    def run_ort0() -> None:
        float(ort0(nxt())[0, 0])

    t = _interleaved({"asyncjit": run_aj, "ort1": run_ort1, "ort0": run_ort0}, rounds, per_round)
    med = {k: float(np.median(v)) for k, v in t.items()}
    p99 = {k: float(np.percentile(v, 99)) for k, v in t.items()}
    print(f"one 16 kHz stream, read back every chunk ({rounds} x {per_round} interleaved calls each):")
    labels = {
        "asyncjit": "asyncjit SileroVad",
        "ort1": "ONNX Runtime, 1 thread",
        "ort0": "ONNX Runtime, default threads",
    }
    for k, label in labels.items():
        print(f"  {label:32s} median {med[k] * 1e6:7.1f} us   p99 {p99[k] * 1e6:7.1f} us")
    r1 = med["asyncjit"] / med["ort1"]
    r0 = med["asyncjit"] / med["ort0"]
    print(f"  ratio vs ORT 1 thread:  {_verdict(r1, 0.5)}")
    print(f"  ratio vs ORT default:   {r0:.2f}x")
    timing = vad.last_timing
    if timing is not None:
        print(
            f"  last asyncjit call: pack {timing.pack * 1e6:.1f} us, exec {timing.exec * 1e6:.1f} us, "
            f"read {timing.read * 1e6:.1f} us"
        )
    return r1 <= 0.5


def batched(sizes: tuple[int, ...], rounds: int, per_round: int) -> bool:
    weights = load_weights(16000)
    jit = SileroVadJit.prepared(weights, max_batch=max(sizes))
    ctx = weights.context_samples
    ok = True
    print(f"\nbatched steps, per-chunk cost ({rounds} x {per_round} interleaved calls each):")
    print(f"  {'B':>4s} {'asyncjit':>12s} {'ORT 1 thr':>12s} {'ORT default':>12s}   ratio vs ORT 1 thread")
    rng = np.random.default_rng(1)
    for b in sizes:
        audio = (rng.standard_normal((b, 512)) * 0.1).astype(np.float32)
        ort1 = OnnxRuntimeVad(16000, batch=b, threads=1)
        ort0 = OnnxRuntimeVad(16000, batch=b, threads=0)
        for view in (jit.chunk_mut(), jit.state_h_mut(), jit.state_c_mut()):
            view[:] = 0

        def run_aj(b: int = b, audio: np.ndarray = audio) -> None:
            chunk, sh, sc = jit.chunk_mut(), jit.state_h_mut(), jit.state_c_mut()
            chunk[:b, ctx:] = audio
            jit.execute_with_vars({"b": b})
            out = jit.output().to_numpy_blocking()
            sh[:b] = out[:, 1 : 1 + HIDDEN]
            sc[:b] = out[:, 1 + HIDDEN :]
            chunk[:b, :ctx] = audio[:, -ctx:]

        t = _interleaved(
            {"asyncjit": run_aj, "ort1": lambda o=ort1, a=audio: o(a), "ort0": lambda o=ort0, a=audio: o(a)},
            rounds,
            per_round,
        )
        med = {k: float(np.median(v)) / b for k, v in t.items()}
        ratio = med["asyncjit"] / med["ort1"]
        ok &= ratio <= 0.7
        aj, o1, o0 = (med[k] * 1e6 for k in ("asyncjit", "ort1", "ort0"))
        print(
            f"  {b:4d} {aj:9.1f} us {o1:9.1f} us {o0:9.1f} us"
            f"   {_verdict(ratio, 0.7)}   (vs default threads {med['asyncjit'] / med['ort0']:.2f}x)"
        )
    return ok


def profiles(sizes: tuple[int, ...]) -> None:
    weights = load_weights(16000)
    rng = np.random.default_rng(2)
    for max_batch, b in [(1, 1), *((max(sizes), s) for s in sizes)]:
        jit = SileroVadJit.prepared(weights, max_batch=max_batch)
        jit.chunk_mut()[:] = (rng.standard_normal(jit.chunk_mut().shape) * 0.1).astype(np.float32)
        runs = [jit.execute_with_vars_profiled({"b": b}) for _ in range(30 if b > 64 else 200)]
        names = [p.name for p in runs[0]]
        med = [float(np.median([r[i].duration for r in runs])) for i in range(len(names))]
        total = sum(med)
        print(f"\nkernel profile, B={b} ({len(names)} kernels, {total * 1e6:.1f} us in kernels):")
        for i in sorted(range(len(names)), key=lambda i: -med[i])[:8]:
            p = runs[0][i]
            rate = p.flops / med[i] / 1e9 if med[i] else 0.0
            print(f"  {med[i] * 1e6:9.2f} us {100 * med[i] / total:5.1f}% {rate:6.1f} GFLOP/s  {p.name}")


def stft_rows(sizes: tuple[int, ...], rounds: int = 8, per_round: int = 15) -> None:
    """The batched step's kernel time per chunk, STFT by FFT against folded frames, alternated."""
    import asyncjit.models.silero_vad as sv

    weights = load_weights(16000)
    rng = np.random.default_rng(2)
    real = sv.dft_sign
    plans: dict[str, SileroVadJit] = {}
    try:
        sv.dft_sign = lambda _value: None  # the basis not recognised: folded frames
        plans["folded"] = SileroVadJit.prepared(weights, max_batch=max(sizes))
    finally:
        sv.dft_sign = real
    plans["fft"] = SileroVadJit.prepared(weights, max_batch=max(sizes))
    chunk = (rng.standard_normal(plans["fft"].chunk_mut().shape) * 0.1).astype(np.float32)
    print("batched step, kernel time per chunk (us): all kernels min / median | the STFT's median")
    for b in sizes:
        totals: dict[str, list[float]] = {k: [] for k in plans}
        stft: dict[str, list[float]] = {k: [] for k in plans}
        for _ in range(rounds):
            for name, jit in plans.items():
                jit.chunk_mut()[:] = chunk
                for _ in range(per_round):
                    run = jit.execute_with_vars_profiled({"b": b})
                    totals[name].append(sum(p.duration for p in run) / b * 1e6)
                    # the STFT's kernels: the padding, the frames and their transform, up to |X|
                    last = next(i for i, p in enumerate(run) if "sqrt" in p.name)
                    stft[name].append(sum(p.duration for p in run[: last + 1]) / b * 1e6)
        cells = [
            f"{k} {min(totals[k]):.2f} / {np.median(totals[k]):.2f} | {np.median(stft[k]):.2f}" for k in plans
        ]
        ratio = np.median(totals["fft"]) / np.median(totals["folded"])
        print(f"  B={b:4d}: " + "   ".join(cells) + f"   fft/folded {ratio:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--profile", action="store_true", help="also print per-kernel profiles")
    ap.add_argument("--stft", action="store_true", help="only the STFT by FFT against folded frames")
    args = ap.parse_args()
    if args.stft:
        stft_rows((1, 16, 128))
        return 0
    sizes = (8, 64, 256)
    if args.profile:
        profiles(sizes)
        print()
    one = single_stream(rounds=6 if args.quick else 20, per_round=100)
    many = batched(sizes, rounds=4 if args.quick else 10, per_round=5)
    print(f"\ngoals: single stream {'met' if one else 'MISSED'}, batched {'met' if many else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
