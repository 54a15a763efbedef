"""Transformer and state-space ops: FlexAttention, LinearAttention, RotaryEmbedding, SwiGLU and
CausalConvWithState, composed from matmuls, softmax and slices.

``Attention`` itself lives with ``Resize`` in ``_ops_resize``; these are the newer relatives.
Recurrences over time (``LinearAttention``) record one step per position with ``lax.scan``, so
the sequence length must be known when the model is loaded.
"""

from __future__ import annotations

import math

from .. import dtypes as dt
from ..lax import scan
from ..tensor import Tensor
from ._registry import NodeCtx, op
from ._values import Value, np_dtype

__all__: list[str] = []


def _heads(x: Tensor, heads: int) -> Tensor:
    """``[B, T, H*D] -> [B, H, T, D]``."""
    return x.reshape(x.shape[0], x.shape[1], heads, -1).permute(0, 2, 1, 3)


def _repeat_heads(x: Tensor, heads: int) -> Tensor:
    """Repeat each of the ``x.shape[1]`` kv heads ``heads / x.shape[1]`` times (grouped queries)."""
    kv = int(x.shape[1])
    if kv == heads:
        return x
    b, _, s, d = x.shape
    return x.unsqueeze(2).expand(b, kv, heads // kv, s, d).reshape(b, heads, s, d)


def _compute_dtype(n: NodeCtx, dtype: dt.DType) -> dt.DType:
    precision = n.attr("softmax_precision")
    if precision is not None:
        return dt.from_numpy(np_dtype(precision))
    return dt.float32 if dtype.itemsize < 4 else dtype


def _mod(n: NodeCtx, name: str, x: Tensor) -> Tensor:
    """Apply a ``score_mod``/``prob_mod`` subgraph attribute, if the node has one."""
    graph = n.attr(name)
    if graph is None:
        return x
    outs = n.tracer.subgraph(graph, [x])
    if len(outs) != 1:
        raise n.fail(f"{name} must have exactly one output, it has {len(outs)}")
    return n.t(outs[0]).cast(x.dtype)


@op("FlexAttention", since=1, domain="ai.onnx.preview")
def _flex_attention(n: NodeCtx, ins: list[Value | None]) -> Value:
    q, k, v = n.t(ins[0]), n.t(ins[1]), n.t(ins[2])
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise n.fail(f"Q, K and V must be rank 4, got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    heads = int(q.shape[1])
    if heads % int(k.shape[1]):
        raise n.fail(f"query heads ({heads}) must be a multiple of key/value heads ({k.shape[1]})")
    k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
    scale = n.attr("scale")
    scale = 1.0 / math.sqrt(int(q.shape[-1])) if scale is None else float(scale)
    root = math.sqrt(scale)
    scores = (q * root) @ (k * root).transpose(-1, -2)
    compute = _compute_dtype(n, q.dtype)
    scores = _mod(n, "score_mod", scores.cast(compute))
    probs = _mod(n, "prob_mod", scores.softmax(-1))
    return (probs @ v.cast(compute)).cast(v.dtype)


@op("LinearAttention", since=27)
def _linear_attention(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    q, k, v = n.t(ins[0]), n.t(ins[1]), n.t(ins[2])
    past, decay, beta = (ins[i] if len(ins) > i else None for i in (3, 4, 5))
    rule = n.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    hq, hkv = n.attr("q_num_heads"), n.attr("kv_num_heads")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise n.fail(f"update_rule {rule!r} is not one of linear, gated, delta, gated_delta")
    if not hq or not hkv or hq % hkv:
        raise n.fail(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise n.fail(f"update_rule {rule!r} needs decay {'given' if gated else 'omitted'} and beta "
                     f"{'given' if delta else 'omitted'}")  # fmt: skip
    b, t = q.shape[0], q.shape[1]
    if not isinstance(t, int):
        raise n.fail("LinearAttention records one step per position: the sequence length must be static")
    f32 = dt.float32
    q4, k4, v4 = (_heads(x.cast(f32), h) for x, h in ((q, hq), (k, hkv), (v, hkv)))
    dk, dv = q4.shape[-1], v4.shape[-1]
    xs: dict[str, Tensor] = {"q": q4, "k": k4, "v": v4}
    if decay is not None:
        g = n.t(decay).cast(f32)
        last = g.shape[-1]
        xs["g"] = g.reshape(b, t, hkv, 1).permute(0, 2, 1, 3) if last == hkv else _heads(g, hkv)
    if beta is not None:
        be = n.t(beta).cast(f32)
        xs["beta"] = be.reshape(b, t, be.shape[-1], 1).permute(0, 2, 1, 3)
    xs = {name: x.permute(2, 0, 1, 3) for name, x in xs.items()}  # time-major for the scan
    state0 = n.t(past).cast(f32) if past is not None else Tensor.zeros([b, hkv, dk, dv], f32)
    scale = n.attr("scale")
    scale = 1.0 / math.sqrt(int(dk)) if not scale else float(scale)
    group = hq // hkv

    def step(state: Tensor, x: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        kt, vt = x["k"], x["v"]
        if gated:
            state = state * x["g"].exp().unsqueeze(-1)
        if delta:
            retrieved = (kt.unsqueeze(-1) * state).sum(2)
            vt = x["beta"] * (vt - retrieved)
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        read = x["q"].reshape(b, hkv, group, dk) @ state
        return state, read.reshape(b, hq, dv) * scale

    state, ys = scan(step, state0, xs)
    out = ys.permute(1, 0, 2, 3).reshape(b, t, hq * dv)
    state_dtype = n.t(past).dtype if past is not None else q.dtype
    return [out.cast(q.dtype), state.cast(state_dtype)]


@op("CausalConvWithState", since=27)
def _causal_conv_with_state(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    x, w = n.t(ins[0]), n.t(ins[1])
    bias = ins[2] if len(ins) > 2 else None
    past = ins[3] if len(ins) > 3 else None
    act = n.attr("activation", "none")
    act = act.decode() if isinstance(act, bytes) else act
    if act not in ("none", "silu", "swish"):
        raise n.fail(f"activation {act!r} is not one of none, silu, swish")
    if x.ndim != 3 or w.ndim != 3:
        raise n.fail(f"input and weight must be rank 3, got ranks {x.ndim} and {w.ndim}")
    b, c, length = x.shape
    k = int(w.shape[2])
    state = n.t(past).cast(x.dtype) if past is not None else Tensor.zeros([b, c, k - 1], x.dtype)
    padded = Tensor.cat([state, x], 2) if k > 1 else x
    out = padded.conv1d(w.cast(x.dtype), None, groups=int(c))
    if bias is not None:
        out = out + n.t(bias).cast(out.dtype).reshape(c, 1)
    if act != "none":
        out = out.cast(dt.float32).silu().cast(x.dtype)
    present = padded[:, :, length:] if k > 1 else Tensor.zeros([b, c, 0], x.dtype)
    return [out, present]


@op("RotaryEmbedding", since=23)
def _rotary_embedding(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, cos, sin = n.t(ins[0]), n.t(ins[1]), n.t(ins[2])
    positions = ins[3] if len(ins) > 3 else None
    shape = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)  # [B, S, H, D]
    else:
        heads = n.attr("num_heads")
        if not heads:
            raise n.fail("a rank-3 input needs the num_heads attribute")
        x = x.reshape(shape[0], shape[1], heads, -1)
    b, s, _, d = x.shape
    rot = n.attr("rotary_embedding_dim", 0) or int(d)
    half = rot // 2
    if positions is not None:
        pos = n.t(positions).cast(dt.int64).reshape(-1)
        cos = cos.gather(0, pos).reshape(b, s, -1)
        sin = sin.gather(0, pos).reshape(b, s, -1)
    if cos.shape[-1] != half or sin.shape[-1] != half:
        raise n.fail(f"the cos/sin caches' last dim must be rotary_embedding_dim / 2 = {half}")
    cos, sin = cos.cast(x.dtype).unsqueeze(2), sin.cast(x.dtype).unsqueeze(2)
    rotate, keep = x[:, :, :, :rot], x[:, :, :, rot:]
    if n.flag("interleaved", 0):
        pairs = rotate.reshape(b, s, x.shape[2], half, 2)
        x1, x2 = pairs[:, :, :, :, 0], pairs[:, :, :, :, 1]
    else:
        x1, x2 = rotate[:, :, :, :half], rotate[:, :, :, half:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if n.flag("interleaved", 0):
        rotated = Tensor.stack([real, imag], -1).reshape(*rotate.shape)
    else:
        rotated = Tensor.cat([real, imag], -1)
    out = Tensor.cat([rotated, keep], -1) if rot < int(d) else rotated
    return out.reshape(*shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)


@op("SwiGLU", since=28)
def _swiglu(n: NodeCtx, ins: list[Value | None]) -> Value:
    a, b = n.t(ins[0]), n.t(ins[1])
    if a.shape != b.shape:
        raise n.fail(f"A and B must have the same shape (no broadcasting), got {a.shape} and {b.shape}")
    alpha = float(n.attr("alpha", 1.0))
    af = a.cast(dt.float32)
    gate = af * (af * alpha).sigmoid()
    return (gate * b.cast(dt.float32)).cast(a.dtype)
