"""Fusion: decide which values get buffers, and group the rest into kernels.

A value is *materialized* (has a buffer) if it is a placeholder, a non-scalar constant, a graph
output, the result of an op that needs its own loop structure (reduce, matmul, conv1d, scatter,
nonzero, a plugin's kernel), an operand of matmul/conv1d/plugins (they read contiguous memory), or
a computed value several consumers share (computing it once beats recomputing it per consumer).

Everything else is *fused*: elementwise ops, broadcasts, gathers and movement ops
(reshape/permute/expand/shrink/pad/cat) are inlined into the consuming kernel, movement ops as
index arithmetic on loads (tinygrad's view idea), so fused values never touch memory.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from typing import Any

import attrs

from ..graph import OPS, Node
from ..graph._nn import conv_layout
from ..symbolic import Dim, is_planned, upper
from ._graph import Graph

__all__ = [
    "MAX_FUSED_DEPTH",
    "Claimed",
    "FusionPlan",
    "Kernel",
    "MatmulOperand",
    "fuse",
    "matmul_operand",
    "conv1d_kn_weight",
    "conv1d_fft_sign",
    "conv1d_takes_kn",
    "conv_epilogues",
    "conv_residual",
    "conv_geometry",
    "conv_panel_weight",
    "conv_spatial",
    "conv_takes_panels",
    "conv_takes_wino",
    "conv_wino_weight",
    "tuned_conv",
    "CONV1D_KN_ORDER",
    "OWN_LOOP_OPS",
    "transposed_source",
]

OWN_LOOP_OPS = frozenset(
    {
        "reduce",
        "matmul",
        "conv1d",
        "conv",
        "pool",
        "cumsum",
        "argext",
        "topk",
        "scatter",
        "nonzero",
        "prefix",
        "index_check",
    }
)
_DENSE_OPERANDS = frozenset({"matmul", "conv1d", "conv", "pool", "topk"})
MAX_FUSED_DEPTH = 64
"""Most levels of fused ops between a kernel's root and its buffers: codegen emits a fused
expression by recursion over it, so a chain of 1,000 adds would exhaust Python's stack; every
64th level gets a buffer instead (one more pass over memory per 64 ops)."""


@attrs.frozen
class Kernel:
    """One loop nest: computes ``node`` (with ``fused`` nodes inlined) into its buffer.

    ``kind`` is ``loop`` (elementwise/movement/gather root), an ``OWN_LOOP_OPS`` name, ``copy``
    (an output that is an input, a constant or a repeated output) or ``plugin``. ``target`` is the
    output slot written, or ``None`` for the buffer of ``node`` itself.
    """

    name: str
    kind: str
    node: Node
    fused: tuple[Node, ...]
    reads: tuple[Node, ...]
    target: int | None = None
    plugin: str | None = None
    extra: tuple[Node, ...] = ()
    partition: int | None = None

    @property
    def outputs(self) -> tuple[Node, ...]:
        """Every node this kernel writes (a plugin partition may write several)."""
        return (self.node, *self.extra)

    @property
    def op_node(self) -> Node:
        """The node whose op ``kind`` names: ``node``, or the conv of a conv kernel whose
        ``node`` is the ``relu`` or residual ``add`` fused after it (see ``conv_epilogues``)."""
        if self.kind == "conv" and self.node.op != "conv":
            return self.fused[0]
        return self.node


@attrs.frozen
class Claimed:
    """A plugin partition as fusion sees it: one kernel reading ``inputs``, writing ``outputs``."""

    plugin: str
    nodes: frozenset[int]
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]


@attrs.frozen
class FusionPlan:
    """The kernels of a graph in execution order and the ids of materialized nodes."""

    graph: Graph
    kernels: tuple[Kernel, ...]
    materialized: frozenset[int]


def transposed_source(node: Node) -> Node | None:
    """``X`` when ``node`` is ``X`` with its last two axes swapped (and the others in place).

    A float32 matmul reads such an operand in place through strides (the tuned matmul takes
    any strides), so ``X`` gets the buffer and the transposed copy is never made.
    """
    if node.op != "permute" or node.ndim < 2 or node.dtype.name != "float32":
        return None
    order = tuple(node.attrs["order"])
    r = node.ndim
    if order != (*range(r - 2), r - 1, r - 2):
        return None
    return node.inputs[0]


def _batch_broadcast_source(node: Node) -> Node | None:
    """``X`` when ``node`` is ``X`` (its leading axes all 1, or absent) broadcast over leading
    batch axes only, the last two kept: ``x @ w`` with ``x`` ``[B, M, K]`` and ``w`` ``[K, N]``
    broadcasts ``w`` that way. Every batch then reads the same matrix (batch stride 0)."""
    if node.op != "expand" or node.ndim < 3 or node.dtype.name != "float32":
        return None
    x = node.inputs[0]
    if x.shape[-2:] != node.shape[-2:] or any(d != 1 for d in x.shape[:-2]):
        return None
    if x.op == "reshape":  # [K, N] -> [1, K, N]: the same buffer
        src = x.inputs[0]
        if src.ndim >= 2 and src.shape[-2:] == x.shape[-2:] and all(d == 1 for d in src.shape[:-2]):
            return src
    return x


@attrs.frozen
class MatmulOperand:
    """Where a float32 matmul operand ``[..., rows, cols]`` is read from: ``node``'s buffer, read
    transposed (``X.T`` through strides) and/or with batch stride 0 (one matrix for every batch)."""

    node: Node
    transposed: bool
    batch_broadcast: bool


def matmul_operand(node: Node) -> MatmulOperand:
    """The buffer a float32 matmul reads for operand ``node``, looking through a batch broadcast
    and a last-axes transpose (the tuned matmul takes any strides, 0 included), so neither the
    broadcast copy (``B`` times the matrix) nor the transposed copy is ever made."""
    src = _batch_broadcast_source(node)
    broadcast = src is not None
    x = src if src is not None else node
    t = transposed_source(x)
    return MatmulOperand(t if t is not None else x, t is not None, broadcast)


CONV1D_KN_ORDER = (2, 0, 1)
"""``permute`` order that makes a conv1d weight ``[cout, cin/groups, k]`` of one stored
``[cin/groups, k, cout]`` (the layout the tuned conv1d reads as the ``[K, N]`` matmul operand)."""


def conv1d_takes_kn(node: Node) -> bool:
    """Whether the tuned kernel would read float32 conv1d ``node``'s weight stored ``[cin/groups,
    k, cout]`` (``codegen._conv.takes_kn_weight``: static pads, bounded sizes, short outputs);
    decided from shapes and attributes alone, before any weight is copied."""
    if node.op != "conv1d" or node.dtype.name != "float32":
        return False
    from ..codegen._library import conv_library

    lib = conv_library()
    x, w = node.inputs
    if lib is None or not all(isinstance(p, int) for p in node.attrs["padding"]) or not is_planned(x.shape):
        return False
    groups = node.attrs["groups"]
    cout, cin_g = int(w.shape[0]), int(w.shape[1])
    lout_max = int(upper(node.shape[2]))
    return bool(
        lib.takes_kn_weight(cin_g, cout // groups, groups, lout_max, int(upper(x.shape[0])) * lout_max)
    )


def conv1d_fft_sign(node: Node) -> int | None:
    """The sign of the sine rows when float32 conv1d ``node``'s constant weight is a windowed DFT
    basis (``codegen._convfft.dft_sign``): the conv then runs by FFT, its weight kept as it is
    (the kernel reads the window, row 0); None for any other conv1d."""
    if node.op != "conv1d" or node.dtype.name != "float32":
        return None
    w = node.inputs[1]
    if w.op != "const" or node.attrs["groups"] != 1 or node.attrs["dilation"] != 1:
        return None
    if not all(isinstance(p, int) for p in node.attrs["padding"]):
        return None
    from ..codegen._convfft import dft_sign

    return dft_sign(w.attrs["value"])


def conv1d_kn_weight(node: Node) -> Node | None:
    """The ``[cin/groups, k, cout]`` source a float32 conv1d ``node`` reads its weight from in
    place, when its weight is that source permuted by ``CONV1D_KN_ORDER`` and ``conv1d_takes_kn``;
    else None."""
    if node.op != "conv1d":
        return None
    w = node.inputs[1]
    if w.op != "permute" or tuple(w.attrs["order"]) != CONV1D_KN_ORDER or w.dtype.name != "float32":
        return None
    return w.inputs[0] if conv1d_takes_kn(node) else None


def tuned_conv(node: Node) -> bool:
    """A float32 conv with static pads and bounded sizes: the tuned kernels of ``codegen._convnd``
    (their scratch is sized at the bounds: the input, and ``cin/groups * prod(K)`` rows of
    every output position, must be plannable too); other convs run the direct loop."""
    if node.op != "conv" or node.dtype.name != "float32":
        return False
    if not all(isinstance(p, int) for pair in node.attrs["pads"] for p in pair):
        return False
    x, w = node.inputs[0], node.inputs[1]
    positions = conv_spatial(node.shape, conv_layout(node.attrs)[1])
    return is_planned(node.shape) and is_planned(x.shape) and is_planned((*w.shape[1:], *positions))


def conv_epilogues(
    graph: Graph, claimed: Sequence[Claimed] = (), donated: frozenset[int] = frozenset()
) -> dict[int, tuple[Node, ...]]:
    """Node id -> the nodes its conv kernel computes before storing it (the conv first): for a
    tuned conv whose one consumer is a ``relu`` (``relu(conv)``), an ``add`` of a value of the
    conv's own shape (``conv + r``, a residual connection) or a ``relu`` of such an add, none of
    them a graph output before the last nor in a plugin's partition. The conv kernel then stores
    ``max(y (+ r), 0)`` into the last node's buffer, reading ``r`` at the index it writes, and
    neither the conv's output nor the sum touches memory (ResNet-50's activation passes, 3% of
    its kernel time, and its 16 residual ``add``+``relu`` kernels, 1.7%, are gone). A residual
    that is a ``donated`` input (node ids) is not fused: the add's own loop may write its output
    over it, which a conv kernel, writing ``y`` before it reads ``r``, may not."""
    inside = {i for c in claimed for i in c.nodes}
    outputs = {n.id for n in graph.outputs}
    users: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            users.setdefault(i.id, []).append(n)

    def alone(n: Node) -> bool:
        """``n`` is read once, by one node, is not a graph output and belongs to no partition."""
        return n.id not in outputs and n.id not in inside and len(users.get(n.id, ())) == 1

    def conv_of(n: Node) -> Node | None:
        return n if tuned_conv(n) and alone(n) else None

    def residual_conv(add: Node) -> Node | None:
        """The conv of ``conv + r`` with ``r`` of the conv's shape and dtype and not a broadcast
        view (the kernel reads ``r`` from a buffer: an expanded one would be written out first)."""
        if add.op != "add" or add.id in inside or add.dtype.name != "float32":
            return None
        for c, r in ((add.inputs[1], add.inputs[0]), (add.inputs[0], add.inputs[1])):
            same = tuple(r.shape) == tuple(c.shape) == tuple(add.shape) and r.dtype == c.dtype
            readable = r is not c and r.id not in donated and not _broadcast_view(r)
            if same and readable and conv_of(c) is not None:
                return c
        return None

    found: dict[int, tuple[Node, ...]] = {}
    for n in graph.nodes:
        if n.id in inside:
            continue
        if n.op == "relu":
            src = n.inputs[0]
            if (conv := conv_of(src)) is not None:
                found[n.id] = (conv,)
            elif alone(src) and (conv := residual_conv(src)) is not None:
                found[n.id] = (conv, src)
        elif (conv := residual_conv(n)) is not None:
            after = users.get(n.id, [])
            if not (alone(n) and after[0].op == "relu" and after[0].id not in inside):
                found[n.id] = (conv, n)  # else the relu's kernel takes the add with it
    return found


def _broadcast_view(node: Node) -> bool:
    """Whether an ``expand`` is among the movement ops that make ``node`` (a broadcast)."""
    while OPS[node.op].kind == "movement":
        if node.op == "expand":
            return True
        node = node.inputs[0]
    return False


def conv_residual(kernel: Kernel) -> Node | None:
    """The value a conv kernel adds to its result before storing it (the other operand of the
    ``add`` fused after the conv, see ``conv_epilogues``), or None."""
    if kernel.kind != "conv" or kernel.node.op == "conv":
        return None
    return _residual(kernel.fused)


def _residual(inner: tuple[Node, ...]) -> Node | None:
    """The residual of a conv kernel's epilogue nodes (``conv_epilogues``' values: the conv,
    then the ``add`` if any), or None."""
    if len(inner) < 2:
        return None
    conv, add = inner[0], inner[1]
    return add.inputs[1] if add.inputs[0] is conv else add.inputs[0]


def conv_takes_panels(node: Node) -> bool:
    """Whether the tuned kernel would read float32 conv ``node``'s weight laid out in the
    matmul's panels (``codegen._convpanels.panels_chosen``); from shapes and attributes alone."""
    if not tuned_conv(node) or conv_takes_wino(node):
        return False
    from ..codegen._convpanels import panels_chosen

    return panels_chosen(**conv_geometry(node))


def conv_takes_wino(node: Node) -> bool:
    """Whether the tuned kernel would run float32 conv ``node`` by Winograd's ``F(2x2, 3x3)``
    (``codegen._convwino.wino_chosen``), its input and output in NCHW; before any other
    strategy (a conv it takes never gets its weight in panels)."""
    if not tuned_conv(node) or any(conv_layout(node.attrs)):
        return False
    from ..codegen._convwino import wino_chosen

    return wino_chosen(**conv_geometry(node))


def conv_wino_weight(node: Node) -> Node | None:
    """The constant ``codegen._convwino.wino_weight`` stored for a float32 conv ``node`` that
    ``conv_takes_wino``, when its weight is that constant's tail (the filters themselves) cut
    out and reshaped; else None."""
    if node.op != "conv" or node.dtype.name != "float32":
        return None
    w = node.inputs[1]
    if w.op != "reshape" or w.inputs[0].op != "shrink" or len(w.shape) != 4:
        return None
    src = w.inputs[0].inputs[0]
    cout, cin, kh, kw = (int(d) for d in w.shape)
    size = cout * cin * kh * kw
    if src.op != "const" or src.dtype.name != "float32" or tuple(src.shape) != (16 * cout * cin + size,):
        return None
    if tuple(w.inputs[0].attrs["slices"]) != ((16 * cout * cin, 16 * cout * cin + size, 1),):
        return None
    return src if conv_takes_wino(node) else None


def conv_geometry(node: Node) -> dict[str, Any]:
    """A tuned conv's static layer description, as the conv emitters and their rules take it:
    channels, kernel, strides, dilations, pads per axis, groups and the input's spatial bounds."""
    x, w = node.inputs[0], node.inputs[1]
    groups = node.attrs["groups"]
    return {
        "cin": int(w.shape[1]) * groups,
        "cout": int(w.shape[0]),
        "ks": [int(d) for d in w.shape[2:]],
        "strides": node.attrs["strides"],
        "dilations": node.attrs["dilations"],
        "pads": [(int(lo), int(hi)) for lo, hi in node.attrs["pads"]],
        "groups": groups,
        "s_max": [upper(d) for d in conv_spatial(x.shape, conv_layout(node.attrs)[0])],
    }


def conv_spatial(shape: Sequence[Dim], channels_last: bool) -> tuple[Dim, ...]:
    """The spatial extents of a conv operand of ``shape`` (``[N, C, *S]``, or ``[N, *S, C]``)."""
    return tuple(shape[1:-1] if channels_last else shape[2:])


def conv_panel_weight(node: Node) -> Node | None:
    """The ``[cout/NR, *K, cin, NR]`` source (``codegen._convpanels.panels_weight``) a float32
    conv ``node`` reads its weight from in place, when its weight is that source permuted by
    ``panels_order`` and reshaped, and ``conv_takes_panels``; else None."""
    if node.op != "conv" or node.dtype.name != "float32":
        return None
    from ..codegen._convpanels import panels_order
    from ..codegen._matmul_tile import matmul_tiling

    w = node.inputs[1]
    if w.op != "reshape" or w.inputs[0].op != "permute":
        return None
    r = len(w.shape) - 2
    permuted = w.inputs[0]
    src = permuted.inputs[0]
    cout, cin, *ks = (int(d) for d in w.shape)
    nr = matmul_tiling().nr
    if tuple(permuted.attrs["order"]) != panels_order(r) or src.dtype.name != "float32" or cout % nr:
        return None
    if tuple(src.shape) != (cout // nr, *ks, cin, nr):
        return None
    return src if conv_takes_panels(node) else None


def _read_in_place(node: Node) -> tuple[Node, ...] | None:
    """The buffers a tuned kernel reads for ``node`` through strides, past the views in between
    (a float32 matmul's operand sources, a conv1d's stored ``[K, N]`` weight, a conv's weight in
    panels); None: read the inputs as they are."""
    if node.op == "matmul" and node.dtype.name == "float32" and _strided_matmul():
        return tuple(matmul_operand(i).node for i in node.inputs)
    if (panels := conv_panel_weight(node)) is not None:
        return (node.inputs[0], panels, *node.inputs[2:])
    if (stored := conv_wino_weight(node)) is not None:
        return (node.inputs[0], stored, *node.inputs[2:])
    kn = conv1d_kn_weight(node)
    return None if kn is None else (node.inputs[0], kn)


def _strided_matmul() -> bool:
    from ..codegen._library import matmul_library

    return matmul_library() is not None


def _is_scalar_const(node: Node) -> bool:
    return node.op == "const" and node.attrs["value"].size == 1


def _computes(node: Node, mat: set[int], memo: dict[int, bool]) -> bool:
    """Whether inlining ``node`` repeats arithmetic (not just index math on buffers)."""
    if node.id in mat or node.op in ("placeholder", "const", "arange", "dim"):
        return False
    if node.id not in memo:
        kind = OPS[node.op].kind
        memo[node.id] = kind != "movement" or any(_computes(i, mat, memo) for i in node.inputs)
    return memo[node.id]


def _disjoint_slices(users: list[Node]) -> bool:
    """Whether ``users`` are slices (``shrink``) of one value that no two of them overlap, as
    ``chunk``/``split`` make: inlining the value into each computes every element once.
    (Disjoint ``[start, stop)`` ranges on one axis suffice, whatever the steps.)"""
    if not all(u.op == "shrink" for u in users):
        return False
    boxes = [tuple(u.attrs["slices"]) for u in users]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = False
            for (s1, e1, *_), (s2, e2, *_) in zip(a, b, strict=True):
                if all(isinstance(v, int) for v in (s1, e1, s2, e2)) and (e1 <= s2 or e2 <= s1):
                    apart = True
                    break
            if not apart:
                return False
    return True


def _materialize(
    graph: Graph, claimed: Sequence[Claimed], epilogues: dict[int, tuple[Node, ...]]
) -> set[int]:
    inside = {i for c in claimed for i in c.nodes}
    nodes = [n for n in graph.nodes if n.id not in inside]
    consumers: dict[int, set[int]] = {}
    for n in nodes:
        for i in n.inputs:
            consumers.setdefault(i.id, set()).add(n.id)
    by_id = {n.id: n for n in nodes}
    mat: set[int] = {n.id for n in graph.outputs}
    for c in claimed:
        mat.update(n.id for n in (*c.inputs, *c.outputs))
    for n in nodes:
        if n.op == "placeholder" or (n.op == "const" and not _is_scalar_const(n)) or n.op in OWN_LOOP_OPS:
            mat.add(n.id)
        if (sources := _read_in_place(n)) is not None:
            mat.update(s.id for s in sources)
        elif n.op in _DENSE_OPERANDS:
            mat.update(i.id for i in n.inputs)
    for last, inner in epilogues.items():
        mat.difference_update(n.id for n in inner)  # computed inside the kernel writing ``last``
        mat.add(last)
        if (residual := _residual(inner)) is not None:  # read at the index being written
            mat.add(residual.id)
    memo: dict[int, bool] = {}
    for n in nodes:  # inputs before users, so _computes sees earlier decisions
        users = consumers.get(n.id, set())
        if n.id in mat or not users:
            continue
        grows = any(by_id[u].op == "expand" for u in users)
        shared = len(users) > 1 and not _disjoint_slices([by_id[u] for u in users])
        if (shared or grows) and _computes(n, mat, memo):
            mat.add(n.id)
            memo.clear()
    depth: dict[int, int] = {}  # fused levels below each node, buffers at 0
    for n in nodes:
        if n.id in mat:
            depth[n.id] = 0
            continue
        d = 1 + max((depth.get(i.id, 0) for i in n.inputs), default=0)
        if d > MAX_FUSED_DEPTH:
            mat.add(n.id)
            d = 0
        depth[n.id] = d
    return mat


def _walk(root: Node, mat: set[int]) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    """(fused nodes, materialized leaves) reachable from ``root``'s inputs without crossing a buffer."""
    fused: dict[int, Node] = {}
    reads: dict[int, Node] = {}
    stack = list(root.inputs)
    while stack:
        n = stack.pop()
        if n.id in mat:
            reads.setdefault(n.id, n)
        elif n.id not in fused:
            fused[n.id] = n
            stack.extend(n.inputs)
    return tuple(sorted(fused.values(), key=lambda n: n.id)), tuple(
        sorted(reads.values(), key=lambda n: n.id)
    )


def _name(index: int, kind: str, root: Node, fused: tuple[Node, ...]) -> str:
    ops: list[str] = []
    for n in (*fused, root):
        label = n.attrs["op"] if n.op == "reduce" else n.op
        if OPS[n.op].kind != "movement" and n.op not in ("const", "placeholder") and label not in ops:
            ops.append(label)
    label = "_".join(ops[-4:]) or root.op
    prefix = "fused" if kind == "loop" and len(ops) > 1 else kind
    return re.sub(r"[^A-Za-z0-9_]", "_", f"k{index}_{prefix}_{label}")


def fuse(graph: Graph, claimed: Sequence[Claimed] = (), donated: frozenset[int] = frozenset()) -> FusionPlan:
    """Group ``graph`` into kernels.

    ``claimed`` are plugin partitions: each becomes one ``plugin`` kernel (the CPU compiler emits
    nothing for its nodes) reading its inputs' buffers and writing its outputs' buffers. Kernels
    run in a topological order of their buffers, which exists because partitions never form a
    cycle (the partition stage guarantees it). ``donated``: ids of the donated inputs, which a
    conv kernel never takes as its residual (see ``conv_epilogues``).
    """
    epilogues = conv_epilogues(graph, claimed, donated)
    mat = _materialize(graph, claimed, epilogues)
    kernels: list[Kernel] = []
    first_output: dict[int, int] = {}
    for j, out in enumerate(graph.outputs):
        first_output.setdefault(out.id, j)
    position = {n.id: k for k, n in enumerate(graph.nodes)}
    last_member = {max(c.nodes, key=position.__getitem__): i for i, c in enumerate(claimed)}
    inside = {i for c in claimed for i in c.nodes}
    for n in graph.nodes:
        index = last_member.get(n.id)
        if index is not None:
            c = claimed[index]
            kernels.append(
                Kernel(
                    f"k{len(kernels)}_plugin_{_label(c.plugin)}",
                    "plugin",
                    c.outputs[0],
                    (),
                    c.inputs,
                    target=first_output.get(c.outputs[0].id),
                    plugin=c.plugin,
                    extra=c.outputs[1:],
                    partition=index,
                )
            )
            continue
        if n.id not in mat or n.id in inside or n.op == "placeholder" or n.op == "const":
            continue
        if (inner := epilogues.get(n.id)) is not None:
            conv = inner[0]
            srcs = [*(_read_in_place(conv) or conv.inputs)]
            if (residual := _residual(inner)) is not None:
                srcs.append(residual)
            by_id = {x.id: x for x in srcs}
            reads = tuple(by_id[k] for k in sorted(by_id))
            name = _name(len(kernels), "conv", n, inner)
            kernels.append(Kernel(name, "conv", n, inner, reads, target=first_output.get(n.id)))
            continue
        if (in_place := _read_in_place(n)) is not None:
            # The tuned kernel reads each operand's source through strides, whatever lies in
            # between is materialized or not (an operand that is also an output has its own
            # buffer, yet the kernel reads the source it was made from).
            sources = {s.id: s for s in in_place}
            fused: tuple[Node, ...] = ()
            reads = tuple(sources[k] for k in sorted(sources))
        else:
            fused, reads = _walk(n, mat)
        kind = n.op if n.op in OWN_LOOP_OPS else "loop"
        kernels.append(
            Kernel(_name(len(kernels), kind, n, fused), kind, n, fused, reads, target=first_output.get(n.id))
        )
    kernels = _ordered(kernels) if claimed else kernels
    for j, out in enumerate(graph.outputs):
        if first_output[out.id] != j or out.op in ("placeholder", "const"):
            name = _name(len(kernels), "copy", out, ())
            kernels.append(Kernel(name, "copy", out, (), (out,) if out.id in mat else (), target=j))
    return FusionPlan(graph, tuple(kernels), frozenset(mat))


def _label(plugin: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", plugin)


def _ordered(kernels: list[Kernel]) -> list[Kernel]:
    """A stable topological order of ``kernels`` by the buffers they read and write (renumbered)."""
    producer = {n.id: k for k, kern in enumerate(kernels) for n in kern.outputs}
    deps = [{producer[r.id] for r in kern.reads if r.id in producer} - {k} for k, kern in enumerate(kernels)]
    users: list[list[int]] = [[] for _ in kernels]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    pending = [len(ds) for ds in deps]
    ready = [k for k, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(kernels):
        raise ValueError("plugin partitions form a cycle with CPU kernels")
    out = []
    for new, k in enumerate(order):
        kern = kernels[k]
        out.append(attrs.evolve(kern, name=re.sub(r"^k\d+_", f"k{new}_", kern.name)))
    return out
