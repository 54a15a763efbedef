"""One LLVM module per plan, with one entry point: ``void plan(int64_t *args)``.

The argument block holds, in order: input addresses, output addresses, constant addresses, the
arena address, then the var values (``ArgLayout``). The entry point loads each slot once and calls
every kernel in order (invariant 4: one foreign call per replay).

A plan with partitions run by a plugin's dispatch runtime is a sequence of segments: every run of
CPU kernels between two dispatch calls gets its own entry point (``plan``, then ``plan_seg<i>``; one
foreign call per CPU segment); the launcher calls the segments and the dispatch runtime in plan order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from llvmlite import ir

from ..passes import FusionPlan, Kernel, MemoryPlan, in_place_kernels
from ..symbolic import Var
from ._index import emit_dim, i64
from ._kernels import emit_kernel
from ._types import I8, I64, PTR, VOID

__all__ = [
    "ENTRY",
    "ENTRY_PROFILED",
    "TICKS",
    "ArgLayout",
    "PluginCall",
    "build_module",
    "cpu_segments",
    "segment_entries",
]

ENTRY = "plan"
# ``void plan_profiled(int64_t *args, int64_t *ticks)``: the same kernel calls, with the cycle
# counter stored before the first kernel and after each one (``ticks[0..n_kernels]``).
ENTRY_PROFILED = "plan_profiled"
# ``int64_t plan_ticks(void)``: the cycle counter, to calibrate ticks against wall time.
TICKS = "plan_ticks"


@attrs.frozen
class ArgLayout:
    """Slot numbers of the ``int64_t`` argument block."""

    n_inputs: int
    n_outputs: int
    n_consts: int
    n_vars: int
    # data-dependent sizes: the last ``n_data`` of the ``n_vars`` value slots, set by the plan,
    # then one status slot each (the size as computed, before clamping) after the value slots
    n_data: int = 0
    # one more slot after the status slots: the dynamic arena's address (buffers whose size
    # depends on an unbounded var; ``MemoryPlan.dyn_bytes`` of them, grown per run)
    dynamic: bool = False

    @property
    def const_slot(self) -> int:
        return self.n_inputs + self.n_outputs

    @property
    def arena_slot(self) -> int:
        return self.const_slot + self.n_consts

    @property
    def var_slot(self) -> int:
        return self.arena_slot + 1

    @property
    def status_slot(self) -> int:
        return self.var_slot + self.n_vars

    @property
    def dyn_slot(self) -> int:
        return self.status_slot + self.n_data

    @property
    def n_slots(self) -> int:
        return self.dyn_slot + int(self.dynamic)


@attrs.frozen
class PluginCall:
    """A kernel compiled by a plugin: LLVM IR defining
    ``void symbol(ptr out_0, ..., ptr in_0, ..., ptr vars)``."""

    symbol: str
    ir_text: str


def cpu_segments(plan: FusionPlan, linked: Mapping[int, PluginCall]) -> list[tuple[int, int]]:
    """``[start, stop)`` kernel ranges between dispatch kernels (plugin kernels not in ``linked``).

    One range covering everything when nothing is dispatched (even an empty plan); otherwise only
    the non-empty ranges.
    """
    cuts = [i for i, k in enumerate(plan.kernels) if k.kind == "plugin" and k.partition not in linked]
    if not cuts:
        return [(0, len(plan.kernels))]
    out, start = [], 0
    for c in (*cuts, len(plan.kernels)):
        if c > start:
            out.append((start, c))
        start = c + 1
    return out


def segment_entries(n_segments: int, dispatched: bool) -> list[tuple[str, str]]:
    """(entry, profiled entry) symbol names of each CPU segment."""
    if not dispatched:
        return [(ENTRY, ENTRY_PROFILED)]
    return [
        (ENTRY, ENTRY_PROFILED) if i == 0 else (f"{ENTRY}_seg{i}", f"{ENTRY}_seg{i}_profiled")
        for i in range(n_segments)
    ]


def build_module(
    name: str,
    plan: FusionPlan,
    memory: MemoryPlan,
    layout: ArgLayout,
    vars: Sequence[Var],
    plugins: Mapping[int, PluginCall] | None = None,
) -> ir.Module:
    """The plan's module: every CPU kernel plus the segment entry points.

    ``plugins`` maps partition index to the LLVM IR a plugin compiled it to (only declared here,
    linked in later); other plugin kernels are dispatched by the launcher between segments.
    """
    plugins = plugins or {}
    module = ir.Module(name=name)
    kernel_fns: dict[str, ir.Function] = {}
    in_place = in_place_kernels(plan, memory)
    for t, k in enumerate(plan.kernels):
        if k.kind == "plugin":
            call = plugins.get(k.partition) if k.partition is not None else None
            if call is None:
                continue
            fnty = ir.FunctionType(VOID, [PTR] * (len(k.outputs) + len(k.reads) + 1))
            fn = module.globals.get(call.symbol) or ir.Function(module, fnty, call.symbol)
            kernel_fns[k.name] = fn
        else:
            x = plan.graph.inputs[in_place[t]] if t in in_place else None
            kernel_fns[k.name] = emit_kernel(module, k, plan.materialized, vars, x)
    counter = ir.Function(module, ir.FunctionType(I64, []), "llvm.readcyclecounter")
    segments = cpu_segments(plan, plugins)
    names = segment_entries(len(segments), len(segments) != 1 or segments[0] != (0, len(plan.kernels)))
    if not segments:  # every kernel dispatched: the (empty) entry still names the object's plan
        segments, names = [(0, 0)], [(ENTRY, ENTRY_PROFILED)]
    for (start, stop), (entry, profiled) in zip(segments, names, strict=True):
        _emit_entry(module, entry, plan, memory, layout, vars, kernel_fns, None, start, stop)
        _emit_entry(module, profiled, plan, memory, layout, vars, kernel_fns, counter, start, stop)
    ticks_fn = ir.Function(module, ir.FunctionType(I64, []), TICKS)
    ticks_fn.attributes.add("nounwind")
    tb = ir.IRBuilder(ticks_fn.append_basic_block("entry"))
    tb.ret(tb.call(counter, []))
    return module


def _emit_entry(
    module: ir.Module,
    name: str,
    plan: FusionPlan,
    memory: MemoryPlan,
    layout: ArgLayout,
    vars: Sequence[Var],
    kernel_fns: Mapping[str, ir.Function],
    counter: ir.Function | None,
    start: int,
    stop: int,
) -> None:
    """One entry point calling kernels ``start..stop-1`` in order; with ``counter``, it also takes a
    ``ticks`` pointer and records the cycle counter before and after each kernel call."""
    params = [PTR, PTR] if counter is not None else [PTR]
    b = ir.IRBuilder(ir.Function(module, ir.FunctionType(VOID, params), name).append_basic_block("entry"))
    entry = b.function
    entry.attributes.add("nounwind")
    args = entry.args[0]

    def stamp(i: int) -> None:
        if counter is not None:
            ptr = b.gep(entry.args[1], [i64(i)], inbounds=True, source_etype=I64)
            b.store(b.call(counter, []), ptr)

    def slot(i: int) -> ir.Value:
        return b.load(b.gep(args, [i64(i)], inbounds=True, source_etype=I64), typ=I64)

    arena = b.inttoptr(slot(layout.arena_slot), PTR)
    var_values = [slot(layout.var_slot + i) for i in range(len(vars))]
    var_block = b.gep(args, [i64(layout.var_slot)], inbounds=True, source_etype=I64)
    scratch = b.gep(arena, [i64(memory.scratch_offset)], inbounds=True, source_etype=I8)
    pointers: dict[tuple[str, int], ir.Value] = {}

    def pointer(kind: str, index: int) -> ir.Value:
        key = (kind, index)
        if key not in pointers:
            base = {"input": 0, "output": layout.n_inputs, "const": layout.const_slot}[kind]
            pointers[key] = b.inttoptr(slot(base + index), PTR)
        return pointers[key]

    dyn_arena = b.inttoptr(slot(layout.dyn_slot), PTR) if layout.dynamic else None
    env = {v.name: var_values[i] for i, v in enumerate(vars)}

    def buffer(node_id: int) -> ir.Value:
        s = memory.slots[node_id]
        if s.kind == "arena":
            return b.gep(arena, [i64(s.offset)], inbounds=True, source_etype=I8)
        if s.kind == "dyn":  # offsets over unbounded vars: the launcher sized the arena for them
            assert dyn_arena is not None
            return b.gep(dyn_arena, [emit_dim(b, s.expr, env)], inbounds=True, source_etype=I8)
        return pointer(s.kind, s.index)

    def out_ptr(k: Kernel) -> ir.Value:
        return pointer("output", k.target) if k.target is not None else buffer(k.node.id)

    stamp(0)
    for i, k in enumerate(plan.kernels[start:stop]):
        reads = [buffer(n.id) for n in k.reads]
        fn = kernel_fns[k.name]
        if k.kind == "plugin":
            outs = [out_ptr(k), *(buffer(n.id) for n in k.extra)]
            b.call(fn, [*outs, *reads, var_block])
        elif k.kind in ("prefix", "index_check"):  # sets a data var: later kernels see its value
            pos = list(vars).index(k.node.attrs["size_var"])
            status = layout.status_slot + pos - (layout.n_vars - layout.n_data)
            status_ptr = b.gep(args, [i64(status)], inbounds=True, source_etype=I64)
            size = b.call(fn, [out_ptr(k), *reads, scratch, *var_values, status_ptr])
            b.store(size, b.gep(args, [i64(layout.var_slot + pos)], inbounds=True, source_etype=I64))
            var_values[pos] = size
        else:
            b.call(fn, [out_ptr(k), *reads, scratch, *var_values])
        stamp(i + 1)
    b.ret_void()
