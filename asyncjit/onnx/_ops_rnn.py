"""LSTM, GRU and RNN: every direction, initial states, sequence lengths, peepholes, clipping.

The input projection of all steps is one matmul; the recurrence is unrolled over the time axis
(``asyncjit.lax.scan``'s recording, which needs a static length). A symbolic sequence length is
unrolled to its upper bound with the steps past it masked, so the state then stays put and the
outputs past the end are cut off: correct for every length in range, paid at the bound.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import dtypes as dt
from ..symbolic import Dim, bounds, upper
from ..tensor import Tensor
from ._ops_elementwise import softplus
from ._ops_reduce import _gather_elements
from ._ops_shape import reverse_axis
from ._registry import NodeCtx, op
from ._values import Value, const_tensor

__all__: list[str] = []

Act = Callable[[Tensor], Tensor]
Cell = Callable[[Tensor, tuple[Tensor, ...], int, list[Act], bool], tuple[Tensor, ...]]
"""One step: the projection (with ``h @ R`` in it when the flag says so), the carry, the
direction, its activations."""


def _activation(n: NodeCtx, name: str, alpha: float | None, beta: float | None) -> Act:
    name = name.decode() if isinstance(name, bytes) else name
    key = name.lower()
    if key == "sigmoid":
        return lambda x: x.sigmoid()
    if key == "tanh":
        return lambda x: x.tanh()
    if key == "relu":
        return lambda x: x.relu()
    if key == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: (x * a + b).clip(0.0, 1.0)
    if key == "affine":
        a, b = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return lambda x: x * a + b
    if key == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: Tensor.select(x < 0, x * a, x)
    if key == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: Tensor.select(x > a, x, 0.0)
    if key == "scaledtanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda x: (x * b).tanh() * a
    if key == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: Tensor.select(x < 0, (x.exp() - 1.0) * a, x)
    if key == "softsign":
        return lambda x: x / (x.abs() + 1.0)
    if key == "softplus":
        return softplus  # log(1 + exp(x)) without exp's overflow
    raise n.fail(f"activation {name!r} is not supported")


def _activations(n: NodeCtx, defaults: list[str], dirs: int) -> list[list[Act]]:
    names = n.attr("activations") or defaults * dirs
    alphas = list(n.attr("activation_alpha") or [])
    betas = list(n.attr("activation_beta") or [])
    acts = [
        _activation(n, nm, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
        for i, nm in enumerate(names)
    ]
    per = len(defaults)
    if len(acts) == per and dirs == 2:
        acts = acts * 2
    return [acts[d * per : (d + 1) * per] for d in range(dirs)]


def _clip(n: NodeCtx) -> Callable[[Tensor], Tensor]:
    c = n.attr("clip")
    return (lambda x: x) if c is None else (lambda x: x.clip(-c, c))


def _prepare(
    n: NodeCtx, ins: list[Value | None], gates: int
) -> tuple[Tensor, int, Dim, Dim, int, Tensor | None, Dim]:
    """X as [T, B, I] (padded to the bound of a symbolic T), its T, B, hidden size, lengths."""
    x = n.t(ins[0])
    if n.flag("layout", 0):
        x = x.transpose(0, 1)
    T, B = x.shape[0], x.shape[1]
    H = n.attr("hidden_size") or int(n.t(ins[2]).shape[-1])
    lens = n.t(ins[4]).cast(dt.int64) if len(ins) > 4 and ins[4] is not None else None
    t_max = upper(T)
    if not isinstance(T, int):
        x = x.pad([(0, t_max - T), None, None])
    return x, t_max, T, B, H, lens, T


def _direction_input(x: Tensor, lens: Tensor | None, T: Dim, reverse: bool) -> Tensor:
    """``x`` in processing order: reversed within each sequence's length for the reverse pass."""
    if not reverse:
        return x
    if lens is None and isinstance(T, int):
        return reverse_axis(x, 0)
    real = lens if lens is not None else (Tensor.from_dim(T, dt.int64) + Tensor.zeros([x.shape[1]], dt.int64))
    t_max = x.shape[0]
    t = Tensor.arange(t_max, dt.int64).reshape(t_max, 1)
    src = Tensor.select(t < real.reshape(1, -1), real.reshape(1, -1) - 1 - t, t)
    index = src.reshape(t_max, x.shape[1], 1).expand(*x.shape)
    return _gather_elements(x, index, 0)


def _masks(t_max: int, T: Dim, B: Dim, lens: Tensor | None) -> list[Tensor | None]:
    """Per step: None (always active) or a [B, 1] bool of the batch rows still running."""
    out: list[Tensor | None] = []
    for t in range(t_max):
        m: Tensor | None = None
        if lens is not None:
            m = (lens > t).reshape(B, 1)
        if not isinstance(T, int) and t >= bounds(T)[0]:
            live = Tensor.from_dim(T, dt.int64) > t
            m = live.reshape(1, 1).expand(B, 1) if m is None else m & live
        out.append(m)
    return out


def _run(
    n: NodeCtx,
    ins: list[Value | None],
    gates: int,
    defaults: list[str],
    cell: Cell,
    states: int,
    joinable: bool = False,
) -> list[Value | None]:
    x, t_max, T, B, H, lens, _ = _prepare(n, ins, gates)
    direction = n.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(n, defaults, dirs)
    w_t = transposed(ins[1], n, x.dtype)
    inits = [ins[5] if len(ins) > 5 else None, ins[6] if len(ins) > 6 else None][:states]
    ys, finals = [], []
    masks = _masks(t_max, T, B, lens)
    joint = _joint_weights(ins, x.dtype) if joinable and T == 1 and inits[0] is not None else None
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        xd = _direction_input(x, lens, T, reverse)
        state = tuple(
            _initial(n, v)[d].cast(x.dtype) if v is not None else Tensor.zeros([B, H], x.dtype) for v in inits
        )
        if len(state) < states:
            state = state + tuple(Tensor.zeros([B, H], x.dtype) for _ in range(states - len(state)))
        if joint is not None:
            # one step from a given state: [x | h] @ [W^T; R^T], one matmul instead of two
            proj = (Tensor.cat([xd[0], state[0]], 1) @ joint[d]).reshape(1, B, -1)
        else:
            # [T, B, gates*H] for every step at once, as one 2-D matmul (a 3-D one would
            # broadcast the weight over T, copying it every run)
            proj = (xd.reshape(t_max * B, xd.shape[2]) @ w_t[d]).reshape(t_max, B, -1)

        carry = state
        outs = []
        for t in range(t_max):  # unrolled as lax.scan records it; the step index picks the mask
            new = cell(proj[t], carry, d, acts[d], joint is not None and t == 0)
            m = masks[t]
            if m is not None:
                new = tuple(Tensor.select(m, a, b) for a, b in zip(new, carry, strict=True))
                outs.append(Tensor.select(m, new[0], Tensor.zeros(new[0].shape, new[0].dtype)))
            else:
                outs.append(new[0])
            carry = new
        y_all = Tensor.stack(outs, 0) if outs else Tensor.zeros([0, B, H], x.dtype)
        if reverse:
            y_all = _direction_input(y_all, lens, T, True)
        ys.append(y_all)
        finals.append(carry)
    Y = Tensor.stack(ys, 1)  # [T, D, B, H]
    if not isinstance(T, int):
        Y = Y.shrink([(0, T), None, None, None])
    if n.flag("layout", 0):
        Y = Y.permute(2, 0, 1, 3)
    results: list[Value | None] = [Y]
    for s in range(states):
        fin = Tensor.stack([f[s] for f in finals], 0)
        results.append(fin.transpose(0, 1) if n.flag("layout", 0) else fin)
    return results


def _initial(n: NodeCtx, v: Value) -> Tensor:
    """An initial state as ``[directions, batch, hidden]`` (``layout=1`` gives it batch first)."""
    t = n.t(v)
    return t.transpose(0, 1) if n.flag("layout", 0) else t


def _joint_weights(ins: list[Value | None], dtype: dt.DType) -> list[Tensor] | None:
    """``[W[d]^T; R[d]^T]`` per direction, ``[input + hidden, gates*H]``, when both weights
    are known: a single step from a given state is then one matmul over ``[x | h]`` (about half
    the kernel time of two at batch 1, where the weights' reads dominate). None otherwise."""
    w, r = ins[1], ins[2]
    if not isinstance(w, np.ndarray) or not isinstance(r, np.ndarray) or w.shape[0] != r.shape[0]:
        return None
    return [
        const_tensor(np.ascontiguousarray(np.concatenate([w[d].T, r[d].T], 0)).astype(dtype.np))
        for d in range(w.shape[0])
    ]


def transposed(v: Value | None, n: NodeCtx, dtype: dt.DType) -> list[Tensor]:
    """``v[d].T`` for each direction, as contiguous constants when ``v`` is known (weights are
    then stored [K, N] for the matmuls instead of being transposed by the plan every run)."""
    if isinstance(v, np.ndarray):
        return [const_tensor(np.ascontiguousarray(v[d].T).astype(dtype.np)) for d in range(v.shape[0])]
    t = n.t(v).cast(dtype)
    return [t[d].T for d in range(int(t.shape[0]))]


def _biases(n: NodeCtx, ins: list[Value | None], gates: int, H: Dim, dtype: dt.DType) -> Tensor | None:
    if len(ins) > 3 and ins[3] is not None:
        b = n.t(ins[3]).cast(dtype)
        return b[:, : gates * H] + b[:, gates * H :]
    return None


@op("LSTM")
def _lstm(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    R = n.t(ins[2])
    r_t = transposed(ins[2], n, n.t(ins[0]).dtype)
    H = int(R.shape[-1])
    bias = _biases(n, ins, 4, H, n.t(ins[0]).dtype)
    P = n.t(ins[7]) if len(ins) > 7 and ins[7] is not None else None
    clip = _clip(n)
    couple = n.flag("input_forget", 0)

    def cell(
        p_t: Tensor, carry: tuple[Tensor, ...], d: int, acts: list[Act], joined: bool
    ) -> tuple[Tensor, ...]:
        h, c = carry
        g = p_t if joined else p_t + h @ r_t[d]
        if bias is not None:
            g = g + bias[d]
        f_act, g_act, h_act = acts
        gi, go, gf, gc = g.split([H, H, H, H], 1)
        po = None
        if P is not None:
            pi, po, pf = P[d].cast(h.dtype).split([H, H, H], 0)
            gi, gf = gi + pi * c, gf + pf * c
        i = f_act(clip(gi))
        f = 1.0 - i if couple else f_act(clip(gf))
        c_new = f * c + i * g_act(clip(gc))
        if po is not None:
            go = go + po * c_new
        o = f_act(clip(go))
        h_new = o * h_act(c_new)
        return h_new, c_new

    outs = _run(n, ins, 4, ["Sigmoid", "Tanh", "Tanh"], cell, 2, joinable=True)
    return outs


@op("GRU")
def _gru(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    R = n.t(ins[2])
    H = int(R.shape[-1])
    dtype = n.t(ins[0]).dtype
    B_all = n.t(ins[3]).cast(dtype) if len(ins) > 3 and ins[3] is not None else None
    clip = _clip(n)
    lbr = n.flag("linear_before_reset", 0)

    def cell(
        p_t: Tensor, carry: tuple[Tensor, ...], d: int, acts: list[Act], joined: bool
    ) -> tuple[Tensor, ...]:
        (h,) = carry
        f_act, g_act = acts
        Rd = R[d].cast(h.dtype)
        xz, xr, xh = p_t.split([H, H, H], 1)
        if B_all is not None:
            wb = B_all[d, : 3 * H]
            rb = B_all[d, 3 * H :]
            wbz, wbr, wbh = wb.split([H, H, H], 0)
            rbz, rbr, rbh = rb.split([H, H, H], 0)
            xz, xr, xh = xz + wbz + rbz, xr + wbr + rbr, xh + wbh
        else:
            rbh = None
        rz, rr, rh = Rd.split([H, H, H], 0)
        z = f_act(clip(xz + h @ rz.T))
        r = f_act(clip(xr + h @ rr.T))
        if lbr:
            hr = h @ rh.T
            if rbh is not None:
                hr = hr + rbh
            cand = g_act(clip(xh + r * hr))
        else:
            hr = (r * h) @ rh.T
            if rbh is not None:
                hr = hr + rbh
            cand = g_act(clip(xh + hr))
        return ((1.0 - z) * cand + z * h,)

    return _run(n, ins, 3, ["Sigmoid", "Tanh"], cell, 1)


@op("RNN")
def _rnn(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    R = n.t(ins[2])
    r_t = transposed(ins[2], n, n.t(ins[0]).dtype)
    H = int(R.shape[-1])
    bias = _biases(n, ins, 1, H, n.t(ins[0]).dtype)
    clip = _clip(n)

    def cell(
        p_t: Tensor, carry: tuple[Tensor, ...], d: int, acts: list[Act], joined: bool
    ) -> tuple[Tensor, ...]:
        (h,) = carry
        g = p_t if joined else p_t + h @ r_t[d]
        if bias is not None:
            g = g + bias[d]
        return (acts[0](clip(g)),)

    return _run(n, ins, 1, ["Tanh"], cell, 1, joinable=True)
