"""The built-in demo until the Silero VAD demo lands: one symbolic graph at three lengths.

Build one graph with a bounded symbolic length and evaluate it at three lengths.

The graph is recorded once; the var ``t`` (4..4096) is bound only at evaluation time. This runs
on the numpy reference backend, which defines what every compiled plan must compute.

    asyncjit demo        (or: python -m asyncjit._demo)
"""

from __future__ import annotations

import numpy as np

import asyncjit
from asyncjit import Tensor, Var


def build() -> tuple[Tensor, Tensor]:
    """A framewise energy + softmax over a variable-length signal: x[2, t] -> [2, t//4]."""
    t = Var("t", 4, 4096)
    x = Tensor.placeholder((2, t), asyncjit.float32, name="x")
    frames = x[:, : t // 4 * 4].reshape(2, t // 4, 4)  # drop the ragged tail, frame by 4
    energy = (frames * frames).mean(axis=-1)  # [2, t//4]
    return x, energy.softmax(axis=-1)


def main() -> None:
    x, out = build()
    rng = np.random.default_rng(0)
    print(f"graph output {out!r}: one graph, evaluated at three lengths")
    for length in (8, 100, 4096):
        signal = rng.standard_normal((2, length)).astype(np.float32)
        got = asyncjit.reference.evaluate(out, {x: signal}, {"t": length})
        frames = signal[:, : length // 4 * 4].reshape(2, -1, 4)
        energy = (frames.astype(np.float64) ** 2).mean(-1)
        want = np.exp(energy - energy.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        err = float(np.abs(got - want).max())
        sums = got.sum(-1).round(6)
        print(f"  t={length:5d}: output shape {got.shape}, row sums {sums}, max |err| {err:.1e}")


if __name__ == "__main__":
    main()
