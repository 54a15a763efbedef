"""Lowering a graph to one LLVM module: passes, partition, fusion, memory plan, codegen.

Everything here is deterministic, so the same graph gives the same IR text, whose hash keys the
compile caches (DESIGN.md invariant 9).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import llvmlite.binding as llvm

from ..codegen._kernels import scratch_bytes
from ..codegen._module import ArgLayout, PluginCall, build_module
from ..codegen._target import parse_and_verify
from ..errors import CompileError
from ..graph import Node
from ..passes import FusionPlan, Graph, MemoryPlan, fuse, optimize_graph, plan_memory
from ._executable import ArgSpec, Signature
from ._partition import CompilerPlugin, Subgraph, partition

__all__ = ["Lowered", "lower"]


@attrs.frozen
class Lowered:
    """A planned graph: kernels, memory and argument layout; ``emit_ir`` turns it into LLVM IR.

    Planning is cheap Python; IR emission is the expensive part, so a warm disk-cache load plans
    the graph (to find constants, layout and arena size) but never emits IR unless asked.
    """

    name: str
    graph: Graph
    fusion: FusionPlan
    memory: MemoryPlan
    layout: ArgLayout
    signature: Signature
    fixed: Mapping[str, int]
    claims: tuple[tuple[CompilerPlugin, Subgraph], ...]

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.fusion.kernels)

    @property
    def consts(self) -> tuple[Node, ...]:
        return self.memory.consts

    def emit_ir(self) -> str:
        """The verified, linked, unoptimized IR text of the plan (deterministic).

        Raises:
            CompileError: LLVM rejects the generated IR (an asyncjit or plugin bug).
        """
        plugin_calls = {}
        for plugin, sub in self.claims:
            kernel = plugin.compile(sub)
            plugin_calls[sub.output.id] = PluginCall(kernel.symbol, kernel.ir_text)
        module = build_module(
            "asyncjit_plan", self.fusion, self.memory, self.layout, self.graph.vars, plugin_calls
        )
        try:
            ref = parse_and_verify(str(module))
            for call in plugin_calls.values():
                ref.link_in(llvm.parse_assembly(call.ir_text))
            ref.verify()
        except RuntimeError as exc:
            raise CompileError(f"plan {self.name!r}: LLVM rejected the generated IR: {exc}") from exc
        return str(ref)


def signature_of(graph: Graph, fixed: Mapping[str, int] | None = None) -> Signature:
    ins = tuple(ArgSpec(str(n.attrs["name"]), n.shape, n.dtype) for n in graph.inputs)
    outs = tuple(ArgSpec(f"output{j}", n.shape, n.dtype) for j, n in enumerate(graph.outputs))
    return Signature(ins, outs, graph.vars, fixed=dict(fixed or {}))


def lower(graph: Graph, name: str, fixed: Mapping[str, int] | None = None) -> Lowered:
    """Run the graph passes, the partition stage, fusion and memory planning.

    Raises:
        CompileError: a plugin claim is malformed. VarBoundsError: a bad ``fixed`` value.
    """
    from ..passes._refine import fixed_values

    fixed_map = fixed_values(graph, fixed)
    graph = optimize_graph(graph, fixed)
    claims = tuple(partition(graph))
    claimed = {sub.output.id: plugin.name for plugin, sub in claims}
    interior = frozenset(n.id for _, sub in claims for n in sub.nodes if n.id != sub.output.id)
    fusion = fuse(graph, claimed, interior)
    scratch = max((scratch_bytes(k) for k in fusion.kernels), default=0)
    memory = plan_memory(fusion, scratch)
    layout = ArgLayout(len(graph.inputs), len(graph.outputs), len(memory.consts), len(graph.vars))
    return Lowered(name, graph, fusion, memory, layout, signature_of(graph, fixed_map), fixed_map, claims)
