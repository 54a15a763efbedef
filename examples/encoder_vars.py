"""A conformer-style encoder block with symbolic batch ``b`` and length ``t``, prepared once.

Conv subsampling by 4, multi-head self-attention with a length mask, a convolution module (GLU,
depthwise conv, layer norm, SiLU), a feed-forward module, and a final layer norm. The inputs are
allocated at their maximum sizes; ``build`` shrinks them to ``[:b, :, :t]`` with the vars, so each
``execute_with_vars`` pays for the actual (b, t), not the bound. Checked against numpy at several
(b, t) with one prepare.

    python examples/encoder_vars.py
"""

from __future__ import annotations

import math
import time

import attrs
import numpy as np

import asyncjit
from asyncjit import InputSpec, JitWrapper, Tensor, Var

N_MELS, D, HEADS, FF, KERNEL = 80, 64, 4, 128, 15
B_MAX, T_MAX = 8, 400


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


@attrs.frozen
class EncoderConfig:
    max_batch_size: int = B_MAX
    max_mel_frames: int = T_MAX


@attrs.frozen
class Encoder:
    """Weights (PyTorch layouts) and both forward implementations."""

    config: EncoderConfig
    w: dict[str, np.ndarray]

    @classmethod
    def random(cls, seed: int = 0) -> Encoder:
        r = np.random.default_rng(seed)
        w = {
            "sub1": _rand(r, D, N_MELS, 3),
            "sub1_b": np.zeros(D, np.float32),
            "sub2": _rand(r, D, D, 3),
            "sub2_b": np.zeros(D, np.float32),
            "qkv": _rand(r, 3 * D, D),
            "qkv_b": np.zeros(3 * D, np.float32),
            "out": _rand(r, D, D),
            "out_b": np.zeros(D, np.float32),
            "pw1": _rand(r, 2 * D, D),
            "pw1_b": np.zeros(2 * D, np.float32),
            "dw": _rand(r, D, 1, KERNEL),
            "dw_b": np.zeros(D, np.float32),
            "pw2": _rand(r, D, D),
            "pw2_b": np.zeros(D, np.float32),
            "ff1": _rand(r, FF, D),
            "ff1_b": np.zeros(FF, np.float32),
            "ff2": _rand(r, D, FF),
            "ff2_b": np.zeros(D, np.float32),
        }
        for name in ("ln_att", "ln_conv", "ln_dw", "ln_ff", "ln_out"):
            w[name + "_g"] = (1 + 0.1 * r.standard_normal(D)).astype(np.float32)
            w[name + "_b"] = (0.1 * r.standard_normal(D)).astype(np.float32)
        return cls(EncoderConfig(), w)

    # -- asyncjit ----------------------------------------------------------------------------------
    def forward_batch(self, mel: Tensor, lengths: Tensor, b: Var, t: Var) -> Tensor:
        """mel [B_MAX, 80, T_MAX] (max), lengths [B_MAX] -> encoded [b, D, (t+3)//4-ish]."""
        w = {k: Tensor.const(v) for k, v in self.w.items()}
        x = mel[:b, :, :t]
        lens = lengths[:b]
        x = x.conv1d(w["sub1"], w["sub1_b"], stride=2, padding=1).relu()
        x = x.conv1d(w["sub2"], w["sub2_b"], stride=2, padding=1).relu()  # [b, D, t4]
        t4 = x.shape[2]
        sub_lens = ((lens + 1) // 2 + 1) // 2  # same arithmetic as the conv output lengths
        mask = Tensor.arange(t4).reshape(1, t4) < sub_lens.reshape(-1, 1)  # [b, t4]
        h = x.transpose(1, 2)  # [b, t4, D]

        # multi-head self-attention with a key mask
        a = h.layer_norm(w["ln_att_g"], w["ln_att_b"])
        qkv = a.linear(w["qkv"], w["qkv_b"])
        q, k, v = (z.reshape(-1, t4, HEADS, D // HEADS).transpose(1, 2) for z in qkv.chunk(3, axis=-1))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // HEADS))  # [b, H, t4, t4]
        scores = Tensor.select(mask.reshape(-1, 1, 1, t4), scores, -1e9)
        att = scores.softmax(-1) @ v  # [b, H, t4, dh]
        h = h + att.transpose(1, 2).reshape(-1, t4, D).linear(w["out"], w["out_b"])

        # convolution module
        cm = h.layer_norm(w["ln_conv_g"], w["ln_conv_b"]).linear(w["pw1"], w["pw1_b"]).glu(-1)
        cm = cm.transpose(1, 2).conv1d(w["dw"], w["dw_b"], padding=KERNEL // 2, groups=D).transpose(1, 2)
        cm = cm.layer_norm(w["ln_dw_g"], w["ln_dw_b"]).silu().linear(w["pw2"], w["pw2_b"])
        h = h + cm

        # feed-forward module (half-step residual) and the final norm
        ff = h.layer_norm(w["ln_ff_g"], w["ln_ff_b"]).linear(w["ff1"], w["ff1_b"]).silu()
        h = h + 0.5 * ff.linear(w["ff2"], w["ff2_b"])
        h = h.layer_norm(w["ln_out_g"], w["ln_out_b"])
        return h.transpose(1, 2)  # [b, D, t4]

    # -- numpy --------------------------------------------------------------------------------------
    def forward_numpy(self, mel: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The same block in float64 numpy, on exactly the (b, t) given."""
        w = {k: v.astype(np.float64) for k, v in self.w.items()}

        def conv(
            x: np.ndarray, wt: np.ndarray, bias: np.ndarray, stride: int, pad: int, groups: int = 1
        ) -> np.ndarray:
            xp = np.pad(x, [(0, 0), (0, 0), (pad, pad)])
            k = wt.shape[-1]
            lout = (xp.shape[-1] - k) // stride + 1
            cols = np.stack([xp[:, :, j * stride : j * stride + k] for j in range(lout)], axis=2)  # [B,C,L,k]
            if groups == 1:
                return np.einsum("ock,bclk->bol", wt, cols) + bias[:, None]
            return np.einsum("ck,bclk->bcl", wt[:, 0], cols) + bias[:, None]

        def ln(x: np.ndarray, name: str) -> np.ndarray:
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + 1e-5) * w[name + "_g"] + w[name + "_b"]

        def silu(x: np.ndarray) -> np.ndarray:
            return x / (1 + np.exp(-x))

        x = np.maximum(conv(mel.astype(np.float64), w["sub1"], w["sub1_b"], 2, 1), 0)
        x = np.maximum(conv(x, w["sub2"], w["sub2_b"], 2, 1), 0)
        b, _, t4 = x.shape
        sub = ((lengths + 1) // 2 + 1) // 2
        mask = np.arange(t4)[None, :] < sub[:, None]
        h = x.transpose(0, 2, 1)
        a = ln(h, "ln_att") @ w["qkv"].T + w["qkv_b"]
        q, k, v = (z.reshape(b, t4, HEADS, -1).transpose(0, 2, 1, 3) for z in np.split(a, 3, axis=-1))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // HEADS)
        s = np.where(mask[:, None, None, :], s, -1e9)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        h = h + (p @ v).transpose(0, 2, 1, 3).reshape(b, t4, D) @ w["out"].T + w["out_b"]
        cm = ln(h, "ln_conv") @ w["pw1"].T + w["pw1_b"]
        cm = cm[..., :D] / (1 + np.exp(-cm[..., D:]))
        cm = conv(cm.transpose(0, 2, 1), w["dw"], w["dw_b"], 1, KERNEL // 2, groups=D).transpose(0, 2, 1)
        h = h + silu(ln(cm, "ln_dw")) @ w["pw2"].T + w["pw2_b"]
        ff = silu(ln(h, "ln_ff") @ w["ff1"].T + w["ff1_b"])
        h = h + 0.5 * (ff @ w["ff2"].T + w["ff2_b"])
        return ln(h, "ln_out").transpose(0, 2, 1)


class EncoderJit(JitWrapper[Encoder]):
    """The declarative wrapper from the design: two inputs, vars b and t bounded by the model."""

    mel = asyncjit.Input()
    lengths = asyncjit.Input()
    b = asyncjit.VarSpec(1, lambda model: model.config.max_batch_size)
    t = asyncjit.VarSpec(8, lambda model: model.config.max_mel_frames)

    def build(self, model: Encoder, mel: Tensor, lengths: Tensor, b: Var, t: Var) -> Tensor:
        return model.forward_batch(mel, lengths, b, t)


def main() -> float:
    """Prepare once, run at several (b, t), and return the worst absolute error vs numpy."""
    model = Encoder.random()
    jit = EncoderJit(model)
    t0 = time.perf_counter()
    jit.prepare(InputSpec.f32((B_MAX, N_MELS, T_MAX)), InputSpec.i32((B_MAX,)))
    print(f"prepared once in {time.perf_counter() - t0:.3f} s: {jit!r}")
    rng = np.random.default_rng(0)
    worst = 0.0
    for b, t in [(1, 8), (3, 120), (8, 400), (5, 37), (2, 256)]:
        mel = rng.standard_normal((b, N_MELS, t)).astype(np.float32)
        lengths = rng.integers(1, t + 1, size=b).astype(np.int32)
        lengths[0] = t
        jit.mel_mut()[:b, :, :t] = mel
        jit.lengths_mut()[:b] = lengths
        start = time.perf_counter()
        jit.execute_with_vars({"b": b, "t": t})
        ms = (time.perf_counter() - start) * 1e3
        got = jit.output().to_numpy_blocking()
        want = model.forward_numpy(mel, lengths)
        err = float(np.abs(got - want).max())
        worst = max(worst, err)
        print(f"  b={b} t={t:3d}: output {got.shape}, max |error| {err:.1e}, {ms:.2f} ms")
    return worst


if __name__ == "__main__":
    main()
