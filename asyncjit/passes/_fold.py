"""Constant folding: evaluate nodes whose inputs are all constants, with the reference semantics.

A node is folded only if its result is static and no larger than its largest input, so folding
never grows memory (a broadcast scalar stays a scalar plus an ``expand`` that codegen inlines).
The one exception is a matmul or conv operand made from a constant by movement alone: it needs a
buffer anyway, so it is folded once here rather than written out on every call. A transposed or
reshaped constant is folded to a dense copy (see ``MAX_DENSE_FOLD_ELEMENTS``); a broadcast one
(a model's ``ConstantOfShape`` weight) to a ``const`` holding the broadcast view itself, which
the executable writes out once when it is built (see ``broadcast_core``): the plan and its cache
entries keep only the small source, as ONNX Runtime keeps such a weight folded in memory.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from ..graph import (
    OPS,
    Node,
    aligned_copy,
    broadcast_core,
    content_digest,
    derived_const,
    make_node,
    structural_key,
)
from ..graph._nn import conv_layout
from ..symbolic import upper
from ._fusion import (
    CONV1D_KN_ORDER,
    conv1d_fft_sign,
    conv1d_takes_kn,
    conv_panel_weight,
    conv_takes_panels,
    conv_takes_wino,
    conv_wino_weight,
    transposed_source,
)
from ._graph import Graph, rebuild, remake

__all__ = ["MAX_FOLD_ELEMENTS", "fold_constants", "fold_conv_affine"]

MAX_FOLD_ELEMENTS = 1 << 16
"""Larger results stay as ops: folding them would bloat executables for little gain."""

MAX_DENSE_FOLD_ELEMENTS = 1 << 26
"""A matmul or conv operand made from a constant by a transpose or reshape needs a buffer anyway:
up to this size it is computed once, at compile time, instead of being written out on every
call (a broadcast is folded at any size, to a view: see ``broadcast_core``)."""

_DENSE_CONSUMERS = frozenset({"matmul", "conv", "conv1d"})
_MOVEMENT = frozenset({"expand", "reshape", "permute"})


def _numel(node: Node) -> int | None:
    if not all(isinstance(d, int) for d in node.shape):
        return None
    return math.prod(int(d) for d in node.shape)


def _source(node: Node) -> Node | None:
    """The ``const`` a node is a (broadcast/reshaped) view of, if any."""
    while node.op in ("expand", "reshape"):
        node = node.inputs[0]
    return node if node.op == "const" else None


def _value(node: Node) -> np.ndarray:
    """The value of a view (expand, reshape, permute, a static shrink) of a ``const``."""
    if node.op == "const":
        return np.asarray(node.attrs["value"])
    inner = _value(node.inputs[0])
    if node.op == "permute":
        return np.transpose(inner, tuple(node.attrs["order"]))
    if node.op == "shrink":
        return inner[tuple(slice(int(a), int(e), int(s)) for a, e, s in node.attrs["slices"])]
    shape = tuple(int(d) for d in node.shape)
    return np.broadcast_to(inner, shape) if node.op == "expand" else inner.reshape(shape)


def _const(value: np.ndarray, origin: Hashable | None = None) -> Node:
    """A ``const`` node owning a frozen C-contiguous copy of ``value``; with ``origin`` (what
    determines every byte: a source's digest and a layout), its digest is derived from that
    instead of hashed (``derived_const``)."""
    frozen = aligned_copy(value) if origin is None else derived_const(value, origin)
    return make_node("const", (), value=frozen)


def fold_constants(graph: Graph) -> Graph:
    """Replace foldable nodes by ``const`` nodes holding their value."""

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        if node.op == "conv" and (
            conv_panel_weight(new := remake(node, inputs)) is not None or conv_wino_weight(new) is not None
        ):
            return new  # its weight is laid out already (an earlier round)
        if node.op in _DENSE_CONSUMERS:
            keep = node.op == "matmul" and _few_rows(inputs[0])
            inputs = tuple(
                remake(i, (_dense_operand(i.inputs[0]),))
                if k == 1 and keep and transposed_source(i) is not None
                else _dense_operand(i)
                for k, i in enumerate(inputs)
            )
        new = remake(node, inputs)
        if new.op == "conv1d":
            new = _conv1d_kn(new)
        if new.op == "conv":
            new = _conv_panels(_conv_wino(new))
        if new.op in ("placeholder", "const", "expand", "reshape") or not new.inputs:
            return new
        sources = [_source(i) for i in new.inputs]
        if any(s is None for s in sources) or any(_numel(i) is None for i in new.inputs):
            return new
        if _symbolic_attrs(new):  # its value depends on var values (an index_check's axis size)
            return new
        size = _numel(new)
        biggest = max(int(s.attrs["value"].size) for s in sources if s is not None)
        if size is None or size > biggest or size > MAX_FOLD_ELEMENTS:
            return new
        # np.asarray(order="C"), not np.ascontiguousarray: that one turns a 0-d array into 1-d
        args = [np.asarray(_value(i), order="C") for i in new.inputs]
        return _const(OPS[new.op].reference(new, args, {}))

    return rebuild(graph, rewrite)


def _symbolic_attrs(node: Node) -> bool:
    """Whether an attribute of ``node`` uses a var (the data-dependent size it sets, its own
    ``size_var``, does not count; any other var, a ``DataVar`` another op sets included, does)."""
    from ..graph._node import _attr_vars

    own = node.attrs.get("size_var")
    return any(v is not own and v != own for a in node.attrs.values() for v in _attr_vars(a))


TRANSPOSED_MAX_ROWS = 8
"""A matmul of at most this many rows (all of A's leading dims, at their upper bounds) keeps a
transposed constant weight (``x @ W.T``, a PyTorch ``Linear``, ``Gemm`` with ``transB=1``: a
float32 swap of the last two axes, which the matmul reads through strides) in its own layout:
the dot driver then streams W's rows, each contiguous in k (1 x 9216 @ W.T of
4096 x 9216: 5.8 ms, against 9.6 on the folded ``[K, N]`` copy; 4 rows 5.1 vs 10.7; at 16 rows
even, from 24 the copy wins, AVX2)."""


def _few_rows(a: Node) -> bool:
    """Whether ``a`` (a matmul's left operand) has at most ``TRANSPOSED_MAX_ROWS`` rows."""
    rows = 1
    for d in a.shape[:-1]:
        rows *= int(upper(d))  # an unbounded dim: a huge bound
    return rows <= TRANSPOSED_MAX_ROWS


def _dense_operand(node: Node) -> Node:
    """``node`` folded to a ``const`` when it is movement over a constant: a broadcast one to the
    broadcast view (written out when the executable is built), any other of at most
    ``MAX_DENSE_FOLD_ELEMENTS`` elements to a dense copy; otherwise ``node`` itself."""
    size = _numel(node)
    if node.op not in _MOVEMENT or size is None:
        return node
    view = node
    while view.op in _MOVEMENT:
        if _numel(view) is None:
            return node
        view = view.inputs[0]
    if view.op != "const":
        return node
    if size > MAX_DENSE_FOLD_ELEMENTS and not _broadcasts(node):
        return node
    value = _value(node)
    if broadcast_core(value) is not None:
        value.setflags(write=False)  # a view: nothing to copy
        return make_node("const", (), value=value)
    return _const(value) if size <= MAX_DENSE_FOLD_ELEMENTS else node


def _conv1d_kn(node: Node) -> Node:
    """A float32 conv1d with a constant weight ``[cout, cin/groups, k]``: the weight stored
    ``[cin/groups, k, cout]`` and permuted back (``CONV1D_KN_ORDER``), which the tuned kernel
    reads in place as the ``[K, N]`` operand of its matmul (``codegen._conv.takes_kn_weight``);
    else ``node`` itself. A broadcast weight (a filled placeholder) is laid out the same way, so
    the conv runs the kernel it would with real weights; the copy's digest is derived, not hashed."""
    x, w = node.inputs
    if w.op != "const" or w.dtype.name != "float32" or not conv1d_takes_kn(node):
        return node
    if conv1d_fft_sign(node) is not None:
        return node  # the FFT kernel reads the weight's first row, the window, as it is
    value = w.attrs["value"]
    origin = ("conv1d_kn", content_digest(value), value.dtype.str, value.shape)
    swapped = make_node("permute", (_const(np.transpose(value, (1, 2, 0)), origin),), order=CONV1D_KN_ORDER)
    return remake(node, (x, swapped))


def _conv_panels(node: Node) -> Node:
    """A float32 conv with a constant weight ``[cout, cin, *K]`` that ``conv_takes_panels``: the
    weight stored as ``codegen._convpanels.panels_weight`` lays it out (``W^T`` in the matmul's
    column panels, what the kernel reads in place) and permuted and reshaped back; else ``node``
    itself. A broadcast weight (a model's filled placeholder weights) is laid out the same way,
    so the conv runs the kernel it would with real weights. The stored copy's digest is derived
    from the weight's and the layout (``derived_const``), not hashed again."""
    from ..codegen._convpanels import panels_order, panels_weight
    from ..codegen._matmul_tile import matmul_tiling

    w = node.inputs[1]
    if w.op != "const" or w.dtype.name != "float32" or not conv_takes_panels(node):
        return node
    value = w.attrs["value"]
    stored = panels_weight(np.asarray(value))
    r = len(w.shape) - 2
    origin = ("conv_panels", content_digest(value), value.dtype.str, value.shape, matmul_tiling().nr)
    permuted = make_node("permute", (_const(stored, origin),), order=panels_order(r))
    logical = make_node("reshape", (permuted,), shape=tuple(w.shape))
    return remake(node, (node.inputs[0], logical, *node.inputs[2:]))


def _conv_wino(node: Node) -> Node:
    """A float32 conv with a constant weight ``[cout, cin, 3, 3]`` that ``conv_takes_wino``: the
    weight stored as ``codegen._convwino.wino_weight`` (its Winograd transform, then the filters
    themselves) and the filters cut back out of it, which the kernel knows to read the transform
    from; else ``node`` itself. The stored copy's digest is derived from the weight's."""
    from ..codegen._convwino import wino_weight

    w = node.inputs[1]
    if w.op != "const" or w.dtype.name != "float32" or not conv_takes_wino(node):
        return node
    value = np.asarray(w.attrs["value"])
    stored = _const(wino_weight(value), ("conv_wino", content_digest(value), value.dtype.str, value.shape))
    head = 16 * value.shape[0] * value.shape[1]
    tail = make_node("shrink", (stored,), slices=((head, head + value.size, 1),))
    logical = make_node("reshape", (tail,), shape=tuple(w.shape))
    return remake(node, (node.inputs[0], logical, *node.inputs[2:]))


def nchw_weight(w: Node) -> Node:
    """The ``[cout, cin, *K]`` constant a weight laid out by ``_conv_panels`` (a ``reshape`` of a
    ``permute`` of the stored panels) stands for: a conv given back to the NCHW kernels reads it
    as it is. Its digest is derived from the stored copy's, not hashed."""
    stored = np.asarray(w.inputs[0].inputs[0].attrs["value"])
    origin = ("conv_nchw", content_digest(stored), stored.dtype.str, tuple(int(d) for d in w.shape))
    return _const(_value(w), origin)  # _const copies the transposed view contiguous


def _of_constant(node: Node) -> bool:
    """Whether ``node`` is a ``const`` or movement over one (a weight laid out in panels is a
    ``reshape`` of a ``permute`` of its constant, a Winograd conv's a ``reshape`` of a ``shrink``):
    ``_value`` can compute it."""
    while node.op in _MOVEMENT or node.op == "shrink":
        if node.op == "shrink" and not all(isinstance(v, int) for sl in node.attrs["slices"] for v in sl):
            return False
        node = node.inputs[0]
    return node.op == "const"


def _broadcasts(node: Node) -> bool:
    """Whether an ``expand`` is among the movement ops above the constant (cheap: no values)."""
    while node.op in _MOVEMENT:
        if node.op == "expand":
            return True
        node = node.inputs[0]
    return False


def fold_conv_affine(graph: Graph) -> Graph:
    """``conv(x, W, b) * s`` and ``conv(x, W, b) + t``, with ``W`` (and ``b``) constant and ``s``,
    ``t`` finite per-output-channel (or scalar) constants, become ``conv(x, W*s, b*s)`` and
    ``conv(x, W, b+t)``: an inference BatchNormalization after a conv (``x*s + t``) and a
    separate bias add (the ONNX importer's ``Conv`` adds its ``B`` after the conv) then cost
    nothing at run time, as ONNX Runtime folds them, instead of a pass over the activation.
    Only a conv whose one consumer is that ``mul``/``add`` is folded (and not a graph output);
    the weights are rescaled in float64 and rounded once."""
    consumers: dict[int, int] = {}
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i.id] = consumers.get(i.id, 0) + 1
    outputs = {n.id for n in graph.outputs}

    def rewrite(node: Node, inputs: tuple[Node, ...]) -> Node:
        new = remake(node, inputs)
        if node.op not in ("mul", "add") or len(inputs) != 2:
            return new
        for k in (0, 1):
            conv, other = inputs[k], inputs[1 - k]
            was = node.inputs[k]
            if conv.op != "conv" or consumers.get(was.id, 0) != 1 or was.id in outputs:
                continue
            if any(conv_layout(conv.attrs)):  # channels on another axis (a graph built by hand)
                continue
            if tuple(new.shape) != tuple(conv.shape) or new.dtype != conv.dtype:
                continue
            per = _per_channel(other, conv)
            folded = None if per is None else _affine(conv, per, scale=node.op == "mul")
            if folded is not None:
                return folded
        return new

    return rebuild(graph, rewrite)


def _per_channel(node: Node, conv: Node) -> np.ndarray | None:
    """``node``'s value as one float64 number per output channel of ``conv`` when it is a finite
    constant that broadcasts along the channel axis only (shape ``[C, 1, ...]``, ``[1, C, 1,
    ...]`` or a scalar); else None."""
    while node.op == "expand":  # the broadcast to the conv's shape, made explicit by the op
        node = node.inputs[0]
    if _source(node) is None or _numel(node) is None:
        return None
    shape = tuple(int(d) for d in node.shape)
    if len(shape) > len(conv.shape):
        return None
    padded = (1,) * (len(conv.shape) - len(shape)) + shape
    channels = int(conv.shape[1])
    if padded[0] != 1 or padded[1] not in (1, channels) or any(d != 1 for d in padded[2:]):
        return None
    value = np.asarray(_value(node), dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(value)):
        return None
    return np.broadcast_to(value, (channels,)) if value.size == 1 else value


def _provenance(node: Node) -> Hashable:
    """A key that determines the value of ``node``, a constant or movement over one: its
    structural key over its inputs' (a ``const``'s holds its digest, memoised)."""
    return structural_key(node, tuple(_provenance(i) for i in node.inputs))


def _affine(conv: Node, per: np.ndarray, *, scale: bool) -> Node | None:
    """``conv`` with its weight and bias scaled by ``per`` (or ``per`` added to its bias); None
    when the weight or the bias is not a constant."""
    x, w = conv.inputs[0], conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) == 3 else None
    if not _of_constant(w) or (bias is not None and not _of_constant(bias)):
        return None
    wv = np.asarray(_value(w), dtype=np.float64)
    bv = np.zeros(per.shape) if bias is None else np.asarray(_value(bias), dtype=np.float64)
    dtype = conv.dtype.np
    if scale:
        wv = wv * per.reshape(-1, *([1] * (wv.ndim - 1)))
        bv = bv * per
    else:
        bv = bv + per
    if scale:  # elementwise and rounded once: its digest follows from the inputs' (no rehash)
        origin = ("conv_scale", _provenance(w), per.tobytes().hex(), dtype.str)
        new_w = _const(wv.astype(dtype), origin)
    else:
        new_w = w
    return make_node("conv", (x, new_w, _const(bv.astype(dtype))), **dict(conv.attrs))
