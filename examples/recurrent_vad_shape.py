"""A Silero-VAD-shaped recurrent network through ``JitWrapper`` + ``JitRecurrent``.

Random weights, the real model's shapes: a 576-sample chunk (64 context + 512 new) is reflect-padded,
turned into a 129-bin magnitude spectrum by an STFT written as a conv1d with a fixed basis, passed
through four conv+ReLU blocks, an LSTM cell of 128, and a sigmoid head. The plan is compiled once
and stepped over 50 chunks with the LSTM state kept on the host; every step is checked against a
numpy implementation of the same network.

    python examples/recurrent_vad_shape.py
"""

from __future__ import annotations

import time

import attrs
import numpy as np

import asyncjit
from asyncjit import InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor

HIDDEN = 128
CONTEXT, NEW = 64, 512
CHUNK = CONTEXT + NEW
N_FFT, HOP = 256, 128
BLOCKS = [(129, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)]  # (cin, cout, stride), k=3, pad 1


@attrs.frozen
class VadShapedModel:
    """Weights of the network, as numpy arrays in PyTorch layouts."""

    basis: np.ndarray  # [2*129, 1, 256]: cosine and sine rows of a windowed DFT
    convs: tuple[tuple[np.ndarray, np.ndarray, int], ...]  # (weight [O, C, 3], bias [O], stride)
    w_ih: np.ndarray  # [4*H, H]  gates i, f, g, o
    w_hh: np.ndarray
    b_ih: np.ndarray
    b_hh: np.ndarray
    head_w: np.ndarray  # [1, H, 1]
    head_b: np.ndarray  # [1]

    @classmethod
    def random(cls, seed: int = 0) -> VadShapedModel:
        rng = np.random.default_rng(seed)
        n = np.arange(N_FFT)
        k = np.arange(N_FFT // 2 + 1)[:, None]
        window = np.hanning(N_FFT)
        basis = (
            np.concatenate([np.cos(2 * np.pi * k * n / N_FFT), -np.sin(2 * np.pi * k * n / N_FFT)]) * window
        )
        convs = tuple(
            (
                (rng.standard_normal((cout, cin, 3)) / np.sqrt(cin * 3)).astype(np.float32),
                (rng.standard_normal(cout) * 0.1).astype(np.float32),
                stride,
            )
            for cin, cout, stride in BLOCKS
        )
        s = 1 / np.sqrt(HIDDEN)
        return cls(
            basis=basis[:, None, :].astype(np.float32),
            convs=convs,
            w_ih=rng.uniform(-s, s, (4 * HIDDEN, HIDDEN)).astype(np.float32),
            w_hh=rng.uniform(-s, s, (4 * HIDDEN, HIDDEN)).astype(np.float32),
            b_ih=rng.uniform(-s, s, 4 * HIDDEN).astype(np.float32),
            b_hh=rng.uniform(-s, s, 4 * HIDDEN).astype(np.float32),
            head_w=rng.uniform(-s, s, (1, HIDDEN, 1)).astype(np.float32),
            head_b=np.zeros(1, np.float32),
        )

    def forward(self, chunk: Tensor, h: Tensor, c: Tensor) -> Tensor:
        """One step on the Tensor API: returns ``[prob | h_new | c_new]`` of shape [B, 1 + 2H]."""
        x = chunk.pad([None, (0, 64)], mode="reflect").unsqueeze(1)  # [B, 1, 640]
        spec = x.conv1d(Tensor.const(self.basis), stride=HOP)  # [B, 258, 4]
        re, im = spec.split([129, 129], axis=1)
        feats = (re * re + im * im).sqrt()  # [B, 129, 4]
        for w, b, stride in self.convs:
            feats = feats.conv1d(Tensor.const(w), Tensor.const(b), stride=stride, padding=1).relu()
        x_t = feats.squeeze(-1)  # [B, 128]
        gates = x_t.linear(Tensor.const(self.w_ih), Tensor.const(self.b_ih)) + h.linear(
            Tensor.const(self.w_hh), Tensor.const(self.b_hh)
        )
        i, f, g, o = gates.chunk(4, axis=1)
        c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h_new = o.sigmoid() * c_new.tanh()
        logit = h_new.relu().unsqueeze(-1).conv1d(Tensor.const(self.head_w), Tensor.const(self.head_b))
        prob = logit.squeeze(-1).sigmoid()  # [B, 1]
        return Tensor.cat([prob, h_new, c_new], axis=1)

    def forward_numpy(self, chunk: np.ndarray, h: np.ndarray, c: np.ndarray) -> np.ndarray:
        """The same step in plain numpy (float64), independent of asyncjit."""
        x = np.pad(chunk.astype(np.float64), [(0, 0), (0, 64)], mode="reflect")
        frames = np.stack([x[:, i * HOP : i * HOP + N_FFT] for i in range(4)], axis=-1)  # [B, 256, 4]
        spec = np.einsum("ok,bkt->bot", self.basis[:, 0, :].astype(np.float64), frames)
        feats = np.sqrt(spec[:, :129] ** 2 + spec[:, 129:] ** 2)
        for w, b, stride in self.convs:
            padded = np.pad(feats, [(0, 0), (0, 0), (1, 1)])
            lout = (padded.shape[-1] - 3) // stride + 1
            cols = np.stack([padded[:, :, j * stride : j * stride + 3] for j in range(lout)], axis=-1)
            feats = np.maximum(np.einsum("ock,bckl->bol", w.astype(np.float64), cols) + b[:, None], 0)
        x_t = feats[:, :, 0]
        gates = x_t @ self.w_ih.T + self.b_ih + h @ self.w_hh.T + self.b_hh
        i, f, g, o = np.split(gates, 4, axis=1)

        def sig(v: np.ndarray) -> np.ndarray:
            return 1 / (1 + np.exp(-v))

        c_new = sig(f) * c + sig(i) * np.tanh(g)
        h_new = sig(o) * np.tanh(c_new)
        prob = sig(np.maximum(h_new, 0) @ self.head_w[:, :, 0].T + self.head_b)
        return np.concatenate([prob, h_new, c_new], axis=1)


class VadShapedJit(JitWrapper[VadShapedModel]):
    """The declarative wrapper: three inputs, no vars (batch 1)."""

    chunk = asyncjit.Input()
    state_h = asyncjit.Input()
    state_c = asyncjit.Input()

    def build(self, model: VadShapedModel, chunk: Tensor, state_h: Tensor, state_c: Tensor) -> Tensor:
        return model.forward(chunk, state_h, state_c)

    def pack_state(self, state: LstmState) -> None:
        self.state_h_mut()[0] = state.h
        self.state_c_mut()[0] = state.c


def main(steps: int = 50) -> float:
    """Run ``steps`` chunks, check each against numpy, and return the worst absolute error."""
    model = VadShapedModel.random()
    jit = VadShapedJit(model)
    t0 = time.perf_counter()
    jit.prepare(InputSpec.f32((1, CHUNK)), InputSpec.f32((1, HIDDEN)), InputSpec.f32((1, HIDDEN)))
    print(f"prepared in {time.perf_counter() - t0:.3f} s")
    vad = JitRecurrent(jit, LstmState.zeros(HIDDEN), head_len=1)

    rng = np.random.default_rng(1)
    h = np.zeros((1, HIDDEN))
    c = np.zeros((1, HIDDEN))
    worst = 0.0
    times = []
    for _ in range(steps):
        audio = (rng.standard_normal((1, CHUNK)) * 0.1).astype(np.float32)

        def write(j: VadShapedJit, audio: np.ndarray = audio) -> None:
            j.chunk_mut()[:] = audio

        t = time.perf_counter()
        prob = vad.step(write)
        times.append(time.perf_counter() - t)
        want = model.forward_numpy(audio, h, c)
        h, c = want[:, 1 : 1 + HIDDEN], want[:, 1 + HIDDEN :]
        worst = max(worst, float(np.abs(prob[0] - want[0, 0])), float(np.abs(vad.state.h - h[0]).max()))
    print(f"{steps} steps: max |error| vs numpy {worst:.2e}, median step {np.median(times) * 1e6:.0f} us")
    return worst


if __name__ == "__main__":
    main()
