"""Control flow: ``If`` inlined when its condition folds (else both branches and a select),
``Loop`` and ``Scan`` unrolled over a trip count known at load time, as ``lax.scan`` records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor, broadcast_shapes
from ._ops_shape import axis_of, reverse_axis
from ._registry import NodeCtx, op
from ._values import Sym, Value

__all__: list[str] = []

MAX_UNROLL = 4096
"""The most iterations a ``Loop``/``Scan`` is unrolled to (each is recorded into the plan)."""


@op("If")
def _if(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    cond = ins[0]
    if isinstance(cond, np.ndarray):
        branch = n.attr("then_branch") if bool(cond.reshape(-1)[0]) else n.attr("else_branch")
        return n.tracer.subgraph(branch, [])
    c = n.t(cond).reshape(()).cast(dt.bool_)
    # both branches run; each one's index checks count only when it is the branch taken
    then = n.tracer.subgraph(n.attr("then_branch"), [], when=c)
    other = n.tracer.subgraph(n.attr("else_branch"), [], when=~c)
    out: list[Value | None] = []
    for a, b in zip(then, other, strict=True):
        ta, tb = n.t(a), n.t(b)
        try:
            shape = broadcast_shapes(ta.shape, tb.shape)
        except Exception:
            raise n.fail(
                f"the condition depends on data and the branches have different shapes "
                f"({ta.shape} vs {tb.shape}); fix the input it depends on with values={{...}}"
            ) from None
        if ta.shape != shape or tb.shape != shape:
            raise n.fail("the condition depends on data and the branch outputs differ in shape")
        out.append(Tensor.select(c.expand(*shape), ta, tb.cast(ta.dtype)))
    return out


def _known_bool(v: Value | None) -> bool | None:
    if isinstance(v, np.ndarray):
        return bool(v.reshape(-1)[0])
    return None


@op("Loop")
def _loop(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    body = n.attr("body")
    trip = ins[0] if ins else None
    cond = ins[1] if len(ins) > 1 else None
    carried = list(ins[2:])
    n_carried = len(carried)
    if trip is not None and not isinstance(trip, np.ndarray):
        raise n.fail(
            "the trip count depends on data; it must be known at load time (fix it with values={...})"
        )
    max_trip = int(trip.reshape(-1)[0]) if isinstance(trip, np.ndarray) else None
    if max_trip is None and _known_bool(cond) is None:
        raise n.fail("a Loop without a trip count needs a condition known at load time")
    active: Tensor | None = None  # once the condition depends on data: which iterations run
    scans: list[list[Tensor]] = []
    i = 0
    keep_going = True if cond is None else _known_bool(cond)
    if keep_going is None:
        active = n.t(cond).reshape(()).cast(dt.bool_)
        keep_going = True
    while keep_going and (max_trip is None or i < max_trip):
        if i >= MAX_UNROLL:
            raise n.fail(
                f"the Loop runs more than {MAX_UNROLL} iterations; asyncjit unrolls loops into the plan"
            )
        it = np.array(i, np.int64)
        cond_in: Value = np.array(True) if active is None else active
        outs = n.tracer.subgraph(body, [it, cond_in, *carried], when=active)
        new_cond, new_carried, scan_outs = outs[0], outs[1 : 1 + n_carried], outs[1 + n_carried :]
        if active is not None:
            new_carried = [
                Tensor.select(active.expand(*n.t(a).shape), n.t(a), n.t(b))
                for a, b in zip(new_carried, carried, strict=True)
            ]
            if scan_outs:
                raise n.fail(
                    "a Loop whose condition depends on data cannot have scan outputs (their length would too)"
                )
        carried = list(new_carried)
        for k, s in enumerate(scan_outs):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(n.t(s))
        i += 1
        known = _known_bool(new_cond)
        if known is None:
            if max_trip is None:
                raise n.fail("a Loop whose condition depends on data needs a trip count")
            c = n.t(new_cond).reshape(()).cast(dt.bool_)
            active = c if active is None else active & c
        elif not known:
            keep_going = False
    results: list[Value | None] = list(carried)
    n_scan = len(n.proto.output) - n_carried
    for k in range(n_scan):
        if k < len(scans) and scans[k]:
            results.append(Tensor.stack(scans[k], 0))
        else:
            shapes = [o for o in body.output[1 + n_carried + k : 2 + n_carried + k]]
            del shapes
            raise n.fail("a Loop that runs zero times with scan outputs is not supported")
    return results


def _scan_steps(
    n: NodeCtx, state: list[Value | None], seqs: list[tuple[Tensor, int]], length: Any, n_out: int
) -> tuple[list[Value | None], list[list[Tensor]]]:
    """Run the body over ``length`` steps of each ``(sequence, axis)``: final state, scan outputs."""
    if not isinstance(length, int):
        raise n.fail(f"Scan over a symbolic length {length} is not supported (the steps are unrolled)")
    if length > MAX_UNROLL:
        raise n.fail(f"Scan of {length} steps is more than the {MAX_UNROLL} asyncjit unrolls")
    collected: list[list[Tensor]] = [[] for _ in range(n_out)]
    for t in range(length):
        elems: list[Value | None] = []
        for x, ax in seqs:
            index: list[Any] = [slice(None)] * x.ndim
            index[ax] = t
            elems.append(x[tuple(index)])
        outs = n.tracer.subgraph(n.attr("body"), [*state, *elems])
        state = list(outs[: len(state)])
        for k, y in enumerate(outs[len(state) :]):
            collected[k].append(n.t(y))
    return state, collected


@op("Scan", since=8)
def _scan_8(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    """Scan-8: a leading batch axis on every state and sequence, time on axis 1, per-batch runs."""
    if ins and ins[0] is not None:
        raise n.fail("Scan-8's sequence_lens is not supported (every sequence runs its full length)")
    m = n.attr("num_scan_inputs")
    states = [n.t(v) for v in ins[1 : len(ins) - m]]
    xs = [n.t(v) for v in ins[len(ins) - m :]]
    dirs = list(n.attr("directions") or [0] * m)
    n_out = len(n.proto.output) - len(states)
    batch = xs[0].shape[0]
    if not isinstance(batch, int):
        raise n.fail("Scan-8 runs each batch entry separately: the batch size must be static")
    finals: list[list[Tensor]] = [[] for _ in states]
    scans: list[list[Tensor]] = [[] for _ in range(n_out)]
    for b in range(batch):
        seqs = [(reverse_axis(x[b], 0) if d else x[b], 0) for x, d in zip(xs, dirs, strict=True)]
        state, collected = _scan_steps(n, [s[b] for s in states], seqs, seqs[0][0].shape[0], n_out)
        for k, v in enumerate(state):
            finals[k].append(n.t(v))
        for k, ys in enumerate(collected):
            scans[k].append(Tensor.stack(ys, 0))
    return [Tensor.stack(v, 0) for v in (*finals, *scans)]


@op("Scan", since=9)
def _scan(n: NodeCtx, ins: list[Value | None]) -> list[Value | None]:
    m = n.attr("num_scan_inputs")
    if not isinstance(m, int) or not 1 <= m <= len(ins):
        raise n.fail(f"num_scan_inputs must be 1..{len(ins)} (its inputs), got {m!r}")
    state = list(ins[: len(ins) - m])
    xs = [n.t(v) for v in ins[len(ins) - m :]]
    in_axes = list(n.attr("scan_input_axes") or [0] * m)
    in_dirs = list(n.attr("scan_input_directions") or [0] * m)
    n_out = len(n.proto.output) - len(state)
    out_axes = list(n.attr("scan_output_axes") or [0] * n_out)
    out_dirs = list(n.attr("scan_output_directions") or [0] * n_out)
    seqs = []
    length: Any = None
    for x, ax, d in zip(xs, in_axes, in_dirs, strict=True):
        ax = axis_of(ax, x.ndim, n)
        if d:
            x = reverse_axis(x, ax)
        seqs.append((x, ax))
        length = x.shape[ax]
    state, collected = _scan_steps(n, state, seqs, length, n_out)
    results: list[Value | None] = list(state)
    for k in range(n_out):
        stacked = Tensor.stack(collected[k], 0)
        ax = axis_of(out_axes[k], stacked.ndim, n)
        if out_dirs[k]:
            stacked = reverse_axis(stacked, 0)
        if ax:
            order = list(range(1, stacked.ndim))
            order.insert(ax, 0)
            stacked = stacked.permute(*order)
        results.append(stacked)
    return results


_ = Sym
