"""Channels-last regions: convs that compute on ``[positions, channels]`` pass their activations
to each other that way.

The panels conv (``codegen._convpanels``, taken by convs over few positions: ResNet-50's 14x14
and 7x7 stages, SqueezeNet's and Inception's late ones) computes ``Y^T = X_col^T @ W^T``: it
transposes its input ``[cin, S]`` to ``[S, cin]`` and its result ``[P, cout]`` back, two passes
over activations around each product. Here every such conv whose output reaches another one
(directly, or through ops that commute with the layout) keeps that output channels-last
(``channels_last_out``), the next takes it as it is (``channels_last_in``), and the ops in
between run on the channels-last tensors: elementwise ops (a residual ``add``, ``relu``, a
per-channel scale or bias from a broadcast constant). A value some other op still reads as NCHW
is given to it through a ``permute`` (one transposing copy, as the conv's own copy-out was).

Which values go channels-last is decided before anything is rewritten: ``_candidates`` are the
values that *could* be (such convs, and commuting ops over candidates), ``_wanted`` keeps those
a channels-last conv input is reached from, so no transpose is moved somewhere it cancels
nothing. Results are bit for bit those of the NCHW plan: the products, and the order of every
sum, are the same.

Some convs take the panels kernel only inside a region (1x1 convs over many positions,
``codegen._convpanels.PANELS_REGION_P_1X1``): one that neither takes nor gives a channels-last
value (or every such conv, with the pass off) is given its weight back in the NCHW order, so
``_convnd`` computes it reading ``x`` in place (``_region_only``, ``_alone``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..graph import OPS, Node, make_node
from ..graph._nn import conv_layout
from ._fold import nchw_weight
from ._fusion import conv_geometry, conv_panel_weight
from ._graph import Graph, rebuild, remake

__all__ = ["channels_last", "channels_last_enabled", "kernel_layouts", "set_channels_last"]


def _orders(r: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``permute`` orders from ``[N, C, *S]`` to ``[N, *S, C]`` (``r`` spatial axes), and back."""
    return (0, *range(2, r + 2), 1), (0, r + 1, *range(1, r + 1))


TO_LAST, TO_FIRST = _orders(2)
"""``[N, C, H, W]`` to ``[N, H, W, C]``, and back."""

_ENABLED = os.environ.get("ASYNCJIT_CHANNELS_LAST", "1").strip().lower() not in ("0", "off", "false", "no")


def channels_last_enabled() -> bool:
    """Whether plans compiled from now on run the pass (``ASYNCJIT_CHANNELS_LAST=0`` or ``off``
    turns it off; part of every plan's cache key)."""
    return _ENABLED


def set_channels_last(enabled: bool) -> None:
    """Turn the pass on or off for plans compiled from now on (to compare the two layouts)."""
    global _ENABLED
    _ENABLED = bool(enabled)


def _panels(node: Node) -> bool:
    """A conv the panels kernel computes: it takes the layer, and its weight is a constant laid
    out in panels already (``fold_constants``; a weight computed at run time is not)."""
    return conv_panel_weight(node) is not None


def _eligible(node: Node) -> bool:
    """A 2-D float32 conv the panels kernel computes, not yet given a layout."""
    return node.op == "conv" and node.ndim == 4 and not any(conv_layout(node.attrs)) and _panels(node)


def _region_only(node: Node) -> bool:
    """An eligible conv the panels kernel takes only inside a channels-last region (a 1x1 over
    many positions, ``codegen._convpanels.PANELS_REGION_P_1X1``): outside every region its two
    transposes cost more than ``_convnd``'s in-place product."""
    from ..codegen._convpanels import panels_chosen

    return not panels_chosen(**conv_geometry(node), alone=True)


def _alone(node: Node, inputs: tuple[Node, ...]) -> Node:
    """``node``, a region-only conv outside every region, on its weight in the NCHW order: the
    conv ``_convnd`` computes, reading ``x`` in place."""
    return make_node("conv", (inputs[0], nchw_weight(inputs[1]), *inputs[2:]), **dict(node.attrs))


def _channel_broadcast(node: Node) -> Node | None:
    """``node`` (an NCHW operand) channels-last, when it is a broadcast of a ``[n, c, 1, 1]``
    value (a per-channel constant: the same memory order either way, so a reshape), else None."""
    if node.op != "expand" or node.ndim != 4:
        return None
    src = node.inputs[0]
    if src.ndim != 4 or src.shape[2] != 1 or src.shape[3] != 1:
        return None
    flat = make_node("reshape", (src,), shape=(src.shape[0], 1, 1, src.shape[1]))
    return make_node("expand", (flat,), shape=tuple(node.shape[i] for i in TO_LAST))


def _commutes(node: Node) -> bool:
    """An op computed element by element at one index of every operand (so in any layout)."""
    return node.ndim == 4 and OPS[node.op].kind == "elementwise" and node.op != "where"


def _candidates(nodes: Sequence[Node]) -> set[int]:
    """Values that could be channels-last: eligible convs, and commuting ops whose operands are
    candidates or per-channel broadcasts, at least one a candidate."""
    cand: set[int] = set()
    for n in nodes:
        if _eligible(n):
            cand.add(n.id)
        elif _commutes(n) and n.inputs:
            inside = [i.id in cand for i in n.inputs]
            others = all(i.id in cand or _channel_broadcast(i) is not None for i in n.inputs)
            if any(inside) and others:
                cand.add(n.id)
    return cand


def _wanted(nodes: Sequence[Node], cand: set[int]) -> set[int]:
    """The candidates a channels-last conv input is reached from (through commuting candidates):
    the values worth keeping channels-last."""
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i.id, []).append(n)
    want: set[int] = set()
    for n in reversed(nodes):
        if n.id not in cand:
            continue
        for u in users.get(n.id, ()):
            conv_input = _eligible(u) and u.inputs[0] is n
            if conv_input or (u.id in want and u.op != "conv"):
                want.add(n.id)
                break
    return want


def _nchw(node: Node, inputs: tuple[Node, ...]) -> Node:
    """A conv given channels-last operands (by a graph built by hand: the pass gives them only to
    convs the panels kernel takes) as permutes around the NCHW conv every kernel computes."""
    last_in, last_out = conv_layout(node.attrs)
    to_last, to_first = _orders(node.ndim - 2)
    x = make_node("permute", (inputs[0],), order=to_first) if last_in else inputs[0]
    attrs = {k: v for k, v in node.attrs.items() if k not in ("channels_last_in", "channels_last_out")}
    y = make_node("conv", (x, *inputs[1:]), **attrs)
    return make_node("permute", (y,), order=to_last) if last_out else y


def kernel_layouts(graph: Graph) -> Graph:
    """Every conv with channels-last operands that the panels kernel would not take, as NCHW
    (run on every plan, plugin partitions or not: no other kernel reads those layouts)."""

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        new = remake(node, inputs)
        if new.op == "conv" and any(conv_layout(new.attrs)) and not _panels(new):
            return _nchw(new, inputs)
        return new

    return rebuild(graph, rewrite)


def channels_last(graph: Graph, enabled: bool | None = None) -> Graph:
    """The graph with channels-last regions between panels convs (see the module docstring);
    off (``enabled``, by default ``channels_last_enabled()``), it only rewrites convs given
    channels-last operands that no kernel takes (``kernel_layouts``); either way, a conv that is
    a panels conv only inside a region and is in none goes back to the NCHW kernels."""
    graph = kernel_layouts(graph)
    nodes = graph.nodes
    # off, or no conv would take or give a channels-last value: each conv on its own
    want = _wanted(nodes, _candidates(nodes)) if (_ENABLED if enabled is None else enabled) else set()
    memo: dict[int, Node] = {}  # node id -> its NCHW value in the new graph
    last: dict[int, Node] = {}  # node id -> its channels-last value, for the wanted ones

    def nhwc(i: Node) -> Node:
        if i.id in last:
            return last[i.id]
        bc = _channel_broadcast(memo[i.id])
        assert bc is not None  # _candidates admitted only these
        return bc

    for n in nodes:
        inputs = tuple(memo[i.id] for i in n.inputs)
        x_last = bool(n.inputs) and n.inputs[0].id in want
        if _eligible(n) and (x_last or n.id in want):
            x = last[n.inputs[0].id] if x_last else inputs[0]
            attrs = {**dict(n.attrs), **({"channels_last_in": True} if x_last else {})}
            if n.id in want:
                y = make_node("conv", (x, *inputs[1:]), **attrs, channels_last_out=True)
                last[n.id] = y
                memo[n.id] = make_node("permute", (y,), order=TO_FIRST)
            else:
                memo[n.id] = make_node("conv", (x, *inputs[1:]), **attrs)
        elif _eligible(n) and _region_only(n):
            memo[n.id] = _alone(n, inputs)
        elif n.id in want:
            y = make_node(n.op, tuple(nhwc(i) for i in n.inputs), **dict(n.attrs))
            last[n.id] = y
            memo[n.id] = make_node("permute", (y,), order=TO_FIRST)
        else:
            memo[n.id] = remake(n, inputs)
    return Graph(
        tuple(memo[n.id] for n in graph.inputs),
        tuple(memo[n.id] for n in graph.outputs),
        graph.vars,
        graph.pending,
    )
