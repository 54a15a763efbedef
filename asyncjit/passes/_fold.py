"""Constant folding: evaluate nodes whose inputs are all constants, with the reference semantics.

A node is folded only if its result is static and no larger than its largest input, so folding
never grows memory (a broadcast scalar stays a scalar plus an ``expand`` that codegen inlines).
The one exception is a matmul or conv operand made from a constant by movement alone: it needs a
buffer anyway, so it is folded once here rather than written out on every call (see
``MAX_DENSE_FOLD_ELEMENTS``).
"""

from __future__ import annotations

import numpy as np

from ..graph import OPS, Node, make_node
from ._graph import Graph, rebuild, remake

__all__ = ["fold_constants", "MAX_FOLD_ELEMENTS"]

MAX_FOLD_ELEMENTS = 1 << 16
"""Larger results stay as ops: folding them would bloat executables for little gain."""

MAX_DENSE_FOLD_ELEMENTS = 1 << 26
"""A matmul or conv operand made from constants by movement alone (a broadcast scalar, say, as a
model's ``ConstantOfShape`` weights are) needs a buffer anyway: up to this size it is computed
once, at compile time, instead of being written out on every call."""

_DENSE_CONSUMERS = frozenset({"matmul", "conv", "conv1d"})
_MOVEMENT = frozenset({"expand", "reshape", "permute"})


def _numel(node: Node) -> int | None:
    if not all(isinstance(d, int) for d in node.shape):
        return None
    return int(np.prod([int(d) for d in node.shape], dtype=np.int64))


def _source(node: Node) -> Node | None:
    """The ``const`` a node is a (broadcast/reshaped) view of, if any."""
    while node.op in ("expand", "reshape"):
        node = node.inputs[0]
    return node if node.op == "const" else None


def _value(node: Node) -> np.ndarray:
    """The value of a view (expand, reshape, permute) of a ``const``."""
    if node.op == "const":
        return np.asarray(node.attrs["value"])
    inner = _value(node.inputs[0])
    if node.op == "permute":
        return np.transpose(inner, tuple(node.attrs["order"]))
    shape = tuple(int(d) for d in node.shape)
    return np.broadcast_to(inner, shape) if node.op == "expand" else inner.reshape(shape)


def _const(value: np.ndarray) -> Node:
    """A ``const`` node owning a frozen C-contiguous copy of ``value``."""
    owned = np.array(value, order="C")
    owned.setflags(write=False)
    return make_node("const", (), value=owned)


def fold_constants(graph: Graph) -> Graph:
    """Replace foldable nodes by ``const`` nodes holding their value."""

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        if node.op in _DENSE_CONSUMERS:
            inputs = tuple(_dense_operand(i) for i in inputs)
        new = remake(node, inputs)
        if new.op in ("placeholder", "const", "expand", "reshape") or not new.inputs:
            return new
        sources = [_source(i) for i in new.inputs]
        if any(s is None for s in sources) or any(_numel(i) is None for i in new.inputs):
            return new
        size = _numel(new)
        biggest = max(int(s.attrs["value"].size) for s in sources if s is not None)
        if size is None or size > biggest or size > MAX_FOLD_ELEMENTS:
            return new
        # np.asarray(order="C"), not np.ascontiguousarray: that one turns a 0-d array into 1-d
        args = [np.asarray(_value(i), order="C") for i in new.inputs]
        return _const(OPS[new.op].reference(new, args, {}))

    return rebuild(graph, rewrite)


def _dense_operand(node: Node) -> Node:
    """``node`` folded to a ``const`` when it is movement over a constant of at most
    ``MAX_DENSE_FOLD_ELEMENTS`` elements (see there); otherwise ``node`` itself."""
    size = _numel(node)
    if node.op not in _MOVEMENT or size is None or size > MAX_DENSE_FOLD_ELEMENTS:
        return node
    view = node
    while view.op in _MOVEMENT:
        if _numel(view) is None:
            return node
        view = view.inputs[0]
    return _const(_value(node)) if view.op == "const" else node
