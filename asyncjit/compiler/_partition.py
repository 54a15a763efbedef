"""The partition stage: compiler plugins claim ops, everything unclaimed falls back to the CPU compiler.

A plugin (``CompilerPlugin``) looks at the optimized graph and returns sets of node ids it wants
(``partition``); for each accepted set it compiles a ``Subgraph`` into a ``PluginKernel``: LLVM IR
defining ``void symbol(ptr out, ptr in_0, ..., ptr vars)`` (``vars`` points at the plan's var
values as ``int64_t``), which the plan's entry point calls in order. Claims are validated before
anything compiles: overlapping claims, placeholders/constants, or sets with more than one value
leaving them are rejected with ``CompileError`` naming the plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from ..errors import CompileError
from ..graph import Node
from ..passes import Graph
from ..symbolic import Var

__all__ = [
    "CompilerPlugin",
    "PluginKernel",
    "Subgraph",
    "partition",
    "register_plugin",
    "registered_plugins",
    "unregister_plugin",
]


@attrs.frozen
class Subgraph:
    """What a plugin compiles: ``nodes`` computing ``output`` from materialized ``inputs``."""

    inputs: tuple[Node, ...]
    output: Node
    nodes: tuple[Node, ...]
    vars: tuple[Var, ...]


@attrs.frozen
class PluginKernel:
    """LLVM IR text defining the external function ``symbol`` with the plugin ABI."""

    symbol: str
    ir_text: str


@runtime_checkable
class CompilerPlugin(Protocol):
    """A compiler for part of a graph. Only the CPU fallback exists today; see issue 3."""

    name: str

    def partition(self, graph: Graph) -> Iterable[frozenset[int]]:
        """Node-id sets this plugin claims; each must have exactly one value used outside it."""
        ...

    def compile(self, subgraph: Subgraph) -> PluginKernel:
        """The kernel computing ``subgraph.output``."""
        ...


_REGISTRY: dict[str, CompilerPlugin] = {}


def register_plugin(plugin: CompilerPlugin) -> None:
    """Add ``plugin`` to the partition stage of every later compile (by name; replaces same name)."""
    if not isinstance(plugin, CompilerPlugin):
        raise TypeError(f"{plugin!r} does not implement CompilerPlugin (name, partition, compile)")
    _REGISTRY[plugin.name] = plugin


def unregister_plugin(name: str) -> None:
    """Remove a plugin (no error if absent)."""
    _REGISTRY.pop(name, None)


def registered_plugins() -> tuple[CompilerPlugin, ...]:
    return tuple(_REGISTRY.values())


def _validate(plugin: CompilerPlugin, claim: frozenset[int], graph: Graph, taken: set[int]) -> Subgraph:
    by_id = {n.id: n for n in graph.nodes}
    unknown = claim - set(by_id)
    if not claim or unknown:
        raise CompileError(f"plugin {plugin.name!r} claimed unknown or no nodes: {sorted(unknown)}")
    if claim & taken:
        raise CompileError(
            f"plugin {plugin.name!r} claimed nodes another plugin owns: {sorted(claim & taken)}"
        )
    nodes = [by_id[i] for i in sorted(claim)]
    if any(n.op in ("placeholder", "const") for n in nodes):
        raise CompileError(f"plugin {plugin.name!r} may not claim placeholders or constants")
    used_outside = {i.id for n in graph.nodes if n.id not in claim for i in n.inputs} | {
        o.id for o in graph.outputs
    }
    exits = [n for n in nodes if n.id in used_outside]
    if len(exits) != 1:
        raise CompileError(
            f"plugin {plugin.name!r}: a claimed set must have exactly one value used outside it, "
            f"got {len(exits)}"
        )
    inputs = {i.id: i for n in nodes for i in n.inputs if i.id not in claim}
    return Subgraph(tuple(inputs.values()), exits[0], tuple(nodes), graph.vars)


def partition(
    graph: Graph, plugins: Sequence[CompilerPlugin] | None = None
) -> list[tuple[CompilerPlugin, Subgraph]]:
    """Ask each plugin (in registration order) for claims; returns the accepted subgraphs.

    Raises:
        CompileError: a claim is malformed (the plugin is named); nothing is compiled then.
    """
    out: list[tuple[CompilerPlugin, Subgraph]] = []
    taken: set[int] = set()
    for plugin in registered_plugins() if plugins is None else plugins:
        for claim in plugin.partition(graph):
            sub = _validate(plugin, frozenset(claim), graph, taken)
            taken |= set(claim)
            out.append((plugin, sub))
    return out
