"""Lowering a graph to one LLVM module: passes, partition, fusion, memory plan, codegen.

Everything here is deterministic, so the same graph gives the same IR text, whose hash keys the
compile caches (DESIGN.md invariant 9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import llvmlite.binding as llvm

from ..codegen._kernels import scratch_bytes
from ..codegen._module import ArgLayout, PluginCall, build_module
from ..codegen._target import parse_and_verify
from ..errors import CompileError, DonationError
from ..graph import Node
from ..passes import (
    Claimed,
    FusionPlan,
    Graph,
    MemoryPlan,
    channels_last,
    fuse,
    kernel_layouts,
    optimize_graph,
    plan_memory,
)
from ._executable import ArgSpec, Signature
from ._partition import CompiledResult, CompilerPlugin, PluginKernel, Subgraph, partition

__all__ = ["Dispatched", "Lowered", "lower"]


@attrs.frozen
class Dispatched:
    """One plugin's bytecode and the plan partitions its entries run (entry ``i`` runs
    partition ``partitions[i]``)."""

    plugin: CompilerPlugin = attrs.field(eq=False)
    result: CompiledResult
    partitions: tuple[int, ...]


def _compile_plugins(
    parts: Sequence[tuple[CompilerPlugin, Subgraph]],
) -> tuple[dict[int, PluginCall], tuple[Dispatched, ...]]:
    """Ask each plugin once to compile all of its partitions (LiteRT's compile step)."""
    linked: dict[int, PluginCall] = {}
    dispatched: list[Dispatched] = []
    by_plugin: dict[str, tuple[CompilerPlugin, list[int]]] = {}
    for i, (plugin, _) in enumerate(parts):
        by_plugin.setdefault(plugin.name, (plugin, []))[1].append(i)
    for plugin, indices in by_plugin.values():
        subs = [parts[i][1] for i in indices]
        try:
            result = plugin.compile(subs)
        except CompileError:
            raise
        except Exception as exc:
            raise CompileError(
                f"plugin {plugin.name!r} failed to compile {len(subs)} partition(s): {exc}"
            ) from exc
        if isinstance(result, CompiledResult):
            if len(result.entries) != len(subs) or not all(isinstance(e, str) for e in result.entries):
                raise CompileError(
                    f"plugin {plugin.name!r} returned {len(result.entries)} entry points "
                    f"for {len(subs)} partitions"
                )
            for attr in ("load", "invoke"):
                if not callable(getattr(plugin, attr, None)):
                    raise CompileError(f"plugin {plugin.name!r} returned bytecode but has no {attr}()")
            dispatched.append(Dispatched(plugin, result, tuple(indices)))
            continue
        kernels = list(result)
        if len(kernels) != len(subs) or not all(isinstance(k, PluginKernel) for k in kernels):
            raise CompileError(
                f"plugin {plugin.name!r} must return a CompiledResult or one PluginKernel per partition"
            )
        for i, k in zip(indices, kernels, strict=True):
            linked[i] = PluginCall(k.symbol, k.ir_text)
    return linked, tuple(dispatched)


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
    linked: Mapping[int, PluginCall] = attrs.field(factory=dict)
    dispatched: tuple[Dispatched, ...] = ()

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
        module = build_module(
            "asyncjit_plan",
            self.fusion,
            self.memory,
            self.layout,
            (*self.graph.vars, *self.graph.data_vars),
            self.linked,
        )
        try:
            ref = parse_and_verify(str(module))
            for call in self.linked.values():
                ref.link_in(llvm.parse_assembly(call.ir_text))
            ref.verify()
        except RuntimeError as exc:
            raise CompileError(f"plan {self.name!r}: LLVM rejected the generated IR: {exc}") from exc
        return str(ref)


def signature_of(
    graph: Graph, fixed: Mapping[str, int] | None = None, aliases: tuple[tuple[int, int], ...] = ()
) -> Signature:
    ins = tuple(ArgSpec(str(n.attrs["name"]), n.shape, n.dtype) for n in graph.inputs)
    outs = tuple(ArgSpec(f"output{j}", n.shape, n.dtype) for j, n in enumerate(graph.outputs))
    return Signature(
        ins, outs, graph.vars, fixed=dict(fixed or {}), data_vars=graph.data_vars, aliases=aliases
    )


def lower(
    graph: Graph,
    name: str,
    fixed: Mapping[str, int] | None = None,
    plugins: Sequence[CompilerPlugin] | None = None,
    donate: Sequence[int] = (),
    channels_last_regions: bool | None = None,
) -> Lowered:
    """Run the graph passes, the partition stage, the plugins' compile step, fusion and memory
    planning (``plugins``: ``None`` means the registered ones; ``donate``: input indices whose
    memory outputs may be written over; ``channels_last_regions``: run the layout pass, by
    default as ``passes.channels_last_enabled()`` says: the caller that keys the plan passes the
    value it keyed it with).

    Raises:
        CompileError: a plugin claim is malformed or a plugin failed. VarBoundsError: a bad ``fixed``.
        DonationError: a donated input that no output can be written over.
    """
    from ..passes._refine import fixed_values

    # argument refinements to one value count as fixed: callers may still pass that value
    fixed_map = {k: v for k, v in graph.pending.items() if isinstance(v, int)}
    fixed_map.update(fixed_values(graph, fixed))
    graph = kernel_layouts(optimize_graph(graph, fixed))
    claims = partition(graph, plugins).partitions
    if not claims:  # a plugin's partition holds the nodes it claimed: rewrite no graph under it
        graph = channels_last(graph, channels_last_regions)
    linked, dispatched = _compile_plugins(claims)
    claimed = [
        Claimed(plugin.name, frozenset(n.id for n in sub.nodes), sub.inputs, sub.outputs)
        for plugin, sub in claims
    ]
    # a donated input keeps its add's own kernel, which may write its output over it
    donated = frozenset(graph.inputs[i].id for i in donate)
    fusion = fuse(graph, claimed, donated)
    scratch = max((scratch_bytes(k) for k in fusion.kernels), default=0)
    memory = plan_memory(fusion, scratch, donate)
    _check_donation(graph, memory, donate)
    data = graph.data_vars
    layout = ArgLayout(
        len(graph.inputs),
        len(graph.outputs),
        len(memory.consts),
        len(graph.vars) + len(data),
        len(data),
        memory.dyn_bytes != 0,
    )
    return Lowered(
        name,
        graph,
        fusion,
        memory,
        layout,
        signature_of(graph, fixed_map, memory.aliases),
        fixed_map,
        claims,
        linked,
        dispatched,
    )


def _check_donation(graph: Graph, memory: MemoryPlan, donate: Sequence[int]) -> None:
    """Raises: DonationError naming a donated input no output is written over, and why."""
    aliased = {i for _, i in memory.aliases}
    for i in donate:
        if i in aliased:
            continue
        x = graph.inputs[i]
        name = x.attrs.get("name", f"#{i}")
        shape = tuple(x.shape)
        like = [j for j, o in enumerate(graph.outputs) if o.dtype == x.dtype and tuple(o.shape) == shape]
        why = (
            f"no output has its shape and dtype {x.dtype.name}{list(x.shape)}"
            if not like
            else f"outputs {like} have its shape and dtype, but each is an input or constant, is "
            "written by a plugin, or is written before a kernel that still reads the input, or by "
            "a kernel that reads it other than element by element"
        )
        raise DonationError(f"donated input {name!r} cannot give its memory to an output: {why}")
