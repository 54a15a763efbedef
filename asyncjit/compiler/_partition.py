"""The partition stage: plugins say which ops they support, the framework groups them.

A plugin declares per-op support (``supports(node)``; ``Plugin`` builds it from an op-name set and
a predicate) and may still claim node-id sets itself (``partition(graph)``). The framework turns
supported nodes into **maximal** connected groups (partitions) that create no cycle: the graph
with every partition contracted to one vertex (the quotient) stays acyclic, so a partition never
needs its own output back through a node outside it. A partition has any number of inputs (values
it reads from outside) and outputs (values used outside, or graph outputs). Everything unclaimed
falls back to the CPU compiler. Explicit claims are validated (known nodes, no placeholders or
constants, no overlap, acyclic quotient) and rejected with a ``CompileError`` naming the plugin.

Grouping is greedy edge contraction over a union-find: for every edge between two groups of one
plugin, the two merge unless the quotient then has a path between them through a third vertex
(that path would become a cycle). At the fixpoint no two adjacent partitions of one plugin can be
merged without a cycle, which is the maximality the property tests check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..errors import ArgumentTypeError, CompileError
from ..graph import Node
from ..passes import Graph
from ..symbolic import DataVar, Var, free_vars, is_planned

__all__ = [
    "CompiledResult",
    "CompilerPlugin",
    "Fallback",
    "PartitionResult",
    "PluginKernel",
    "Subgraph",
    "partition",
    "register_plugin",
    "registered_plugins",
    "unregister_plugin",
]

_SOURCES = ("placeholder", "const")


@attrs.frozen
class Subgraph:
    """What a plugin compiles: ``nodes`` (in execution order) computing ``outputs`` from ``inputs``.

    ``inputs`` are values computed outside (placeholders, constants or other kernels' results);
    ``outputs`` are the values used outside the partition or returned by the graph.
    """

    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    nodes: tuple[Node, ...]
    vars: tuple[Var, ...]

    @property
    def output(self) -> Node:
        """The only output (``ValueError`` when there are several)."""
        if len(self.outputs) != 1:
            raise ValueError(f"this subgraph has {len(self.outputs)} outputs")
        return self.outputs[0]


@attrs.frozen
class PluginKernel:
    """LLVM IR text defining ``void symbol(ptr out_0, ..., ptr in_0, ..., ptr vars)``.

    The in-process fast path: the IR is linked into the plan's module and called like any CPU
    kernel (``vars`` points at the plan's var values as ``int64_t``, in ``Subgraph.vars`` order).
    """

    symbol: str
    ir_text: str


def _names(entries: Iterable[str]) -> tuple[str, ...]:
    return tuple(entries)


@attrs.frozen
class CompiledResult:
    """A plugin's compile output: one opaque ``bytecode`` blob and one entry name per partition.

    The plugin's dispatch runtime runs it: ``load(bytecode) -> handle`` once per executable, then
    ``invoke(handle, entry, inputs, outputs, vars)`` per call, in plan order.
    """

    bytecode: bytes = attrs.field(converter=bytes)
    entries: tuple[str, ...] = attrs.field(converter=_names)


@attrs.frozen
class Fallback:
    """A node no plugin took, and why (for ``asyncjit partition``)."""

    node: Node
    reason: str


@attrs.frozen
class PartitionResult:
    """The partitions in execution order, with their plugins, and the CPU fallbacks."""

    partitions: tuple[tuple[CompilerPlugin, Subgraph], ...]
    fallbacks: tuple[Fallback, ...]


@runtime_checkable
class CompilerPlugin(Protocol):
    """A compiler for part of a graph (see ``asyncjit.plugins.Plugin`` for the full interface).

    Required: ``name`` and ``compile(partitions)``, returning either a ``CompiledResult`` (opaque
    bytecode run by the plugin's ``load``/``invoke``) or one ``PluginKernel`` per partition (LLVM
    IR linked into the plan). Partitioning uses ``supports(node)`` and/or ``partition(graph)``.
    """

    name: str

    def compile(self, partitions: Sequence[Subgraph]) -> CompiledResult | Sequence[PluginKernel]: ...


_REGISTRY: dict[str, CompilerPlugin] = {}


def register_plugin(plugin: CompilerPlugin) -> None:
    """Add ``plugin`` to every later compile that does not choose its own (replaces same name)."""
    if not isinstance(plugin, CompilerPlugin) or not (
        hasattr(plugin, "supports") or hasattr(plugin, "partition")
    ):
        raise ArgumentTypeError(
            f"{plugin!r} does not implement CompilerPlugin (name, supports/partition, compile)"
        )
    _REGISTRY[plugin.name] = plugin


def unregister_plugin(name: str) -> None:
    """Remove a plugin (no error if absent)."""
    _REGISTRY.pop(name, None)


def registered_plugins() -> tuple[CompilerPlugin, ...]:
    return tuple(_REGISTRY.values())


class _Groups:
    """Union-find over node ids with the quotient graph's successor sets, for cycle checks."""

    def __init__(self, graph: Graph) -> None:
        self.by_id = {n.id: n for n in graph.nodes}
        self.order = {n.id: i for i, n in enumerate(graph.nodes)}
        self.users: dict[int, list[int]] = {n.id: [] for n in graph.nodes}
        for n in graph.nodes:
            for i in dict.fromkeys(x.id for x in n.inputs):
                self.users[i].append(n.id)
        self.parent = {n.id: n.id for n in graph.nodes}
        self.members: dict[int, set[int]] = {n.id: {n.id} for n in graph.nodes}

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def succ(self, g: int) -> set[int]:
        return {self.find(u) for m in self.members[g] for u in self.users[m]} - {g}

    def _path_via_third(self, src: int, dst: int) -> bool:
        """A quotient path ``src -> x -> ... -> dst`` with ``x`` not ``src`` or ``dst``."""
        seen: set[int] = set()
        stack = [g for g in self.succ(src) if g != dst]
        while stack:
            g = stack.pop()
            if g == dst:
                return True
            if g in seen:
                continue
            seen.add(g)
            stack.extend(self.succ(g))
        return False

    def can_merge(self, a: int, b: int) -> bool:
        return not (self._path_via_third(a, b) or self._path_via_third(b, a))

    def union(self, a: int, b: int) -> int:
        if len(self.members[a]) < len(self.members[b]):
            a, b = b, a
        self.parent[b] = a
        self.members[a] |= self.members.pop(b)
        return a

    def acyclic(self) -> bool:
        roots = {self.find(i) for i in self.parent}
        indeg = dict.fromkeys(roots, 0)
        succ = {g: self.succ(g) for g in roots}
        for s in succ.values():
            for t in s:
                indeg[t] += 1
        ready = [g for g, d in indeg.items() if d == 0]
        done = 0
        while ready:
            g = ready.pop()
            done += 1
            for t in succ[g]:
                indeg[t] -= 1
                if indeg[t] == 0:
                    ready.append(t)
        return done == len(roots)


def _explicit(
    plugin: CompilerPlugin, graph: Graph, groups: _Groups, owner: dict[int, int], p: int
) -> list[int]:
    claims = getattr(plugin, "partition", None)
    if claims is None:
        return []
    roots = []
    for raw in claims(graph) or ():
        claim = frozenset(int(i) for i in raw)
        unknown = claim - set(groups.by_id)
        if not claim or unknown:
            raise CompileError(f"plugin {plugin.name!r} claimed unknown or no nodes: {sorted(unknown)}")
        taken = sorted(i for i in claim if i in owner)
        if taken:
            raise CompileError(f"plugin {plugin.name!r} claimed nodes another claim owns: {taken}")
        if any(groups.by_id[i].op in _SOURCES for i in claim):
            raise CompileError(f"plugin {plugin.name!r} may not claim placeholders or constants")
        if any(_data_dependent(groups.by_id[i]) for i in claim):
            raise CompileError(
                f"plugin {plugin.name!r} may not claim ops with data-dependent or unbounded sizes "
                "(the CPU compiler runs them: plugins see buffers sized for bounds the caller binds)"
            )
        ids = sorted(claim)
        root = groups.find(ids[0])
        for i in ids[1:]:
            root = groups.union(root, groups.find(i))
        for i in ids:
            owner[i] = p
        roots.append(root)
    if not groups.acyclic():
        raise CompileError(
            f"plugin {plugin.name!r}: a claimed set needs its own output through a node outside it "
            "(the partitions would form a cycle)"
        )
    return roots


def _supported(plugin: CompilerPlugin, node: Node) -> bool:
    supports = getattr(plugin, "supports", None)
    return bool(supports(node)) if supports is not None and not _data_dependent(node) else False


def _data_dependent(node: Node) -> bool:
    """Whether ``node`` sets or reads a data-dependent or unbounded size, or one too large to
    plan (``symbolic.is_planned``): those are sized per run and stay on the CPU compiler, since
    plugins' buffers are views into the arena planned at the bounds; or sets one through its
    attributes (``prefix``'s size, ``index_check``'s count)."""
    if any(isinstance(v, DataVar) for v in node.attrs.values()):
        return True
    if not all(is_planned(n.shape) for n in (node, *node.inputs)):  # unbounded vars included
        return True
    return any(isinstance(v, DataVar) for n in (node, *node.inputs) for v in free_vars(n.shape))


def _reason(plugins: Sequence[CompilerPlugin], node: Node) -> str:
    if node.op in _SOURCES:
        return f"{node.op}s are inputs of kernels, never claimed"
    if not plugins:
        return "no plugin chosen"
    parts = []
    for plugin in plugins:
        why = getattr(plugin, "unsupported_reason", None)
        text = why(node) if why is not None else None
        parts.append(f"{plugin.name}: {text or 'not supported'}")
    return "; ".join(parts)


def _subgraph(graph: Graph, groups: _Groups, members: set[int]) -> Subgraph:
    nodes = sorted(members, key=groups.order.__getitem__)
    graph_outputs = {o.id for o in graph.outputs}
    inputs: dict[int, Node] = {}
    for i in nodes:
        for x in groups.by_id[i].inputs:
            if x.id not in members:
                inputs.setdefault(x.id, x)
    outputs = [
        groups.by_id[i] for i in nodes if i in graph_outputs or any(u not in members for u in groups.users[i])
    ]
    return Subgraph(tuple(inputs.values()), tuple(outputs), tuple(groups.by_id[i] for i in nodes), graph.vars)


def partition(graph: Graph, plugins: Sequence[CompilerPlugin] | None = None) -> PartitionResult:
    """Group the nodes of ``graph`` into plugin partitions (plugins in order of preference).

    Explicit claims (``plugin.partition``) come first and stay as claimed; then each plugin's
    supported nodes that nobody owns yet are grouped maximally.

    Raises:
        CompileError: a claim is malformed (the plugin is named); nothing is compiled then.
    """
    chosen = registered_plugins() if plugins is None else tuple(plugins)
    groups = _Groups(graph)
    owner: dict[int, int] = {}
    fixed: set[int] = set()
    for p, plugin in enumerate(chosen):
        fixed.update(_explicit(plugin, graph, groups, owner, p))
    fixed_members = {i for r in fixed for i in groups.members[r]}
    for p, plugin in enumerate(chosen):
        mine = [
            n.id for n in graph.nodes if n.op not in _SOURCES and n.id not in owner and _supported(plugin, n)
        ]
        for i in mine:
            owner[i] = p
        changed = True
        while changed:
            changed = False
            for i in mine:
                for u in groups.users[i]:
                    if owner.get(u) != p or u in fixed_members:
                        continue
                    a, b = groups.find(i), groups.find(u)
                    if a != b and groups.can_merge(a, b):
                        groups.union(a, b)
                        changed = True
    by_root: dict[int, set[int]] = {}
    for i in owner:
        by_root.setdefault(groups.find(i), set()).add(i)
    parts = []
    for root, members in by_root.items():
        sub = _subgraph(graph, groups, members)
        parts.append((min(groups.order[i] for i in members), chosen[owner[root]], sub))
    parts.sort(key=lambda t: t[0])
    fallbacks = tuple(Fallback(n, _reason(chosen, n)) for n in graph.nodes if n.id not in owner)
    return PartitionResult(tuple((plugin, sub) for _, plugin, sub in parts), fallbacks)


def plugin_identity(plugin: CompilerPlugin) -> tuple[Any, ...]:
    """What of a plugin changes compiled code: name, version and options (for cache keys)."""
    options: Mapping[str, Any] = getattr(plugin, "options", None) or {}
    return (
        plugin.name,
        str(getattr(plugin, "version", "")),
        tuple(sorted((str(k), repr(v)) for k, v in options.items())),
    )


def plugin_options(plugin: CompilerPlugin) -> dict[str, Any]:
    """The plugin's JSON-representable options (what a serialized executable can recreate it with)."""
    import json

    out = {}
    for k, v in (getattr(plugin, "options", None) or {}).items():
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[str(k)] = v
    return out
