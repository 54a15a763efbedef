"""Memory planning: every buffer a plan touches gets a slot; intermediates share one arena.

Inputs, outputs and constants live in caller-owned memory (their own argument slots). Every other
materialized value gets an offset in a single arena, sized for the upper bound of every var and
reused by liveness: a buffer can take the place of one no kernel reads any more. Offsets are
64-byte aligned (a cache line, and the widest vector load on AVX-512).

A value whose size depends on an *unbounded* var has no upper bound to size for: it goes to the
dynamic arena at a symbolic offset (``Slot.expr``), and the plan's ``dyn_bytes`` (an expression
over the vars) is evaluated before each run; the launcher grows that arena on demand and reuses
it. Dead dynamic buffers are reused by a later one that provably fits (same or smaller size).

**Donated inputs** (``donate``) may give their memory to an output: output ``j`` is written over
input ``i`` (``MemoryPlan.aliases``) when both have the same shape and dtype, a kernel of this
plan writes the output, and no kernel after that one reads the input. The writing kernel itself
may read the input only where writing over it is safe: a ``scatter`` whose base is the input
(then it writes only the scattered rows and skips its copy of the base), or a loop of
elementwise ops of the output's shape (each element is read before it is written, at the same
index). The launcher copies the input into the output first whenever the caller passes two
different buffers, so the plan is correct with and without donation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from ..graph import OPS, Node
from ..symbolic import DataVar, Dim, Var, bounds, free_vars, is_planned, prod, substitute, upper
from ._fusion import FusionPlan, Kernel

__all__ = ["ALIGN", "MemoryPlan", "Slot", "capacity_bytes", "in_place_kernels", "plan_memory"]

ALIGN = 64


@attrs.frozen
class Slot:
    """Where a materialized node lives.

    ``input``/``output``/``const`` number ``index`` (caller memory), or the arena at ``offset``.
    """

    kind: str
    index: int = 0
    offset: int = 0
    expr: Dim = 0  # kind "dyn": the offset in the dynamic arena, over the vars


@attrs.frozen
class MemoryPlan:
    """Slots for every materialized node, the constants in argument order, and the arena size."""

    slots: Mapping[int, Slot]
    consts: tuple[Node, ...]
    arena_bytes: int
    scratch_offset: int
    scratch_bytes: int
    dyn_bytes: Dim = 0  # bytes of the dynamic arena, over the vars (0: no dynamic buffers)
    aliases: tuple[tuple[int, int], ...] = ()  # (output j, donated input i): j is written over i


def capacity_bytes(node: Node) -> int:
    """Bytes for ``node`` at the upper bound of every var."""
    numel = math.prod(max(upper(d), 0) for d in node.shape)
    return numel * node.dtype.itemsize


def _round(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def _round_expr(n: Dim) -> Dim:
    return (n + ALIGN - 1) // ALIGN * ALIGN + ALIGN  # never 0, so offsets stay distinct


def _fits(size: Dim, room: Dim) -> bool:
    """``size <= room`` for every binding (provably)."""
    return bounds(room - size)[0] >= 0


def plan_memory(plan: FusionPlan, scratch_bytes: int = 0, donate: Sequence[int] = ()) -> MemoryPlan:
    """Assign slots; first-fit arena placement over intervals of kernel indices; outputs written
    over the ``donate`` inputs where that is safe (see the module docstring)."""
    graph = plan.graph
    slots: dict[int, Slot] = {}
    for i, n in enumerate(graph.inputs):
        slots.setdefault(n.id, Slot("input", i))
    for j, n in enumerate(graph.outputs):
        if n.op not in ("placeholder", "const"):
            slots.setdefault(n.id, Slot("output", j))
    consts: list[Node] = []
    for k in plan.kernels:
        for n in (*k.reads, k.node):
            if n.op == "const" and n.id in plan.materialized and n.id not in slots:
                slots[n.id] = Slot("const", len(consts))
                consts.append(n)

    last_use: dict[int, int] = {}
    for t, k in enumerate(plan.kernels):
        for n in k.reads:
            last_use[n.id] = t
    live: list[tuple[int, int, int]] = []  # (offset, size, last use)
    dyn_live: list[tuple[Dim, Dim, int]] = []  # (offset, size, last use) in the dynamic arena
    dyn_free: list[tuple[Dim, Dim]] = []
    dyn_total: Dim = 0
    arena = 0
    for t, k in enumerate(plan.kernels):
        if k.kind == "copy":
            continue
        live = [iv for iv in live if iv[2] >= t]
        dyn_free += [(o, sz) for o, sz, last in dyn_live if last < t]
        dyn_live = [iv for iv in dyn_live if iv[2] >= t]
        for n in k.outputs:  # a plugin kernel writes several; none may overlap what it reads
            if n.id in slots:
                continue
            if not is_planned(n.shape):
                # a data-dependent size takes its bound: the arena is sized before the run
                nbytes = prod(n.shape) * n.dtype.itemsize
                data: dict[Var | str, Dim] = {v: v.max for v in free_vars(nbytes) if isinstance(v, DataVar)}
                need = _round_expr(substitute(nbytes, data) if data else nbytes)
                spot = next((f for f in dyn_free if _fits(need, f[1])), None)
                if spot is not None:
                    dyn_free.remove(spot)
                else:
                    spot = (dyn_total, need)
                    dyn_total = dyn_total + need
                dyn_live.append((spot[0], spot[1], last_use.get(n.id, t)))
                slots[n.id] = Slot("dyn", expr=spot[0])
                continue
            size = _round(capacity_bytes(n))
            offset = 0
            for start, sz, _ in sorted(live):
                if offset + size <= start:
                    break
                offset = max(offset, start + sz)
            live.append((offset, size, last_use.get(n.id, t)))
            slots[n.id] = Slot("arena", offset=offset)
            arena = max(arena, offset + size)
    scratch_offset = _round(arena) if scratch_bytes else arena
    total = scratch_offset + (_round(scratch_bytes) if scratch_bytes else 0)
    aliases = _aliases(plan, slots, last_use, donate) if donate else ()
    return MemoryPlan(slots, tuple(consts), total, scratch_offset, scratch_bytes, dyn_total, aliases)


def _aliases(
    plan: FusionPlan, slots: Mapping[int, Slot], last_use: Mapping[int, int], donate: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    """(output, input) pairs where the output may be written over the donated input."""
    graph = plan.graph
    writer = {k.node.id: t for t, k in enumerate(plan.kernels) if k.kind not in ("copy", "plugin")}
    taken: set[int] = set()
    pairs = []
    for i in sorted(set(donate)):
        x = graph.inputs[i]
        for j, out in enumerate(graph.outputs):
            t = writer.get(out.id)
            if j in taken or t is None or slots.get(out.id) != Slot("output", j):
                continue
            if out.dtype != x.dtype or tuple(out.shape) != tuple(x.shape):
                continue
            if last_use.get(x.id, -1) > t or not _writes_over_safely(plan.kernels[t], x):
                continue
            pairs.append((j, i))
            taken.add(j)
            break
    return tuple(pairs)


def _writes_over_safely(k: Kernel, x: Node) -> bool:
    """``k`` may write its output over ``x``'s memory: it reads no element of ``x`` after writing it."""
    if x not in k.reads:
        return True
    nodes = (k.node, *k.fused)
    if k.kind == "scatter":
        base, index, src = k.node.inputs
        return base is x and index is not x and src is not x and all(x not in n.inputs for n in k.fused)
    if k.kind != "loop":
        return False
    # every node of the kernel that reads x, directly or through others, must be elementwise of
    # the output's shape: then x is read only at the index being written
    inside = {n.id for n in nodes}
    shape = tuple(k.node.shape)
    reads_x: dict[int, bool] = {}

    def depends(n: Node) -> bool:
        if n is x:
            return True
        if n.id not in inside:
            return False
        if n.id not in reads_x:
            reads_x[n.id] = any(depends(i) for i in n.inputs)
        return reads_x[n.id]

    return all(OPS[n.op].kind == "elementwise" and tuple(n.shape) == shape for n in nodes if depends(n))


def in_place_kernels(plan: FusionPlan, memory: MemoryPlan) -> dict[int, int]:
    """Kernel index -> the input it writes its output over (only for kernels that read it)."""
    inputs = {j: plan.graph.inputs[i] for j, i in memory.aliases}
    found = {}
    for t, k in enumerate(plan.kernels):
        if k.kind in ("copy", "plugin"):
            continue
        for j, x in inputs.items():
            if memory.slots.get(k.node.id) == Slot("output", j) and x in k.reads:
                found[t] = plan.graph.inputs.index(x)
    return found
