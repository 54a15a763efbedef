"""Mutated ONNX models through the importer and the session: ``python tests/fuzz.py --onnx``.

Model ``i`` of seed ``S`` is one runnable case of ONNX's conformance suite (the node cases and
the ``simple``/``pytorch-*`` model suites, as ``asyncjit.onnx.conformance`` collects them)
picked by ``Random("S:i")`` and changed by one to three mutators from ``MUTATORS`` (attribute
values, initializer and input values at their edges, input shapes and dtypes, the opset, the
declared input dims, flipped or cut bytes). Half of the models that pick a one-node
``LSTM``/``GRU``/``RNN`` case run instead as a metamorphic variant (``metamorphic``): batch
first (``layout=1``, which ONNX Runtime does not run), given random initial states half the
time, and compared with ONNX Runtime on the model before the change, our outputs transposed
back. Each must either run or raise a ``JitError`` (an ``OnnxImportError``,
``ShapeMismatchError``, ...): any other exception is reported as a finding (a bad model must get
a typed error), and a worker that dies or hangs as a crash by the fuzzer's supervisor. A model
that runs is also run by ONNX Runtime (when installed) on the same feeds: where both run, the
outputs must agree (shape, dtype, values within ``RTOL``/``ATOL``; where they do not, ONNX's
reference implementation arbitrates: agreeing with it is no finding), except where a mutation put
NaN or inf in play (NaN's order in min/max and its absorption by an ignored element are where
the two runtimes legitimately differ) or an output is a low-precision float (ONNX Runtime hands
those out as raw bits). Indices out of range are compared first: a model that runs where ONNX
Runtime refuses a Gather/Scatter index (``INDEX_REFUSALS``), or raises ``IndexOutOfRangeError``
where ONNX Runtime runs, is a finding.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from random import Random
from typing import Any

import numpy as np

__all__ = ["MUTATORS", "corpus", "metamorphic", "run_asyncjit", "run_one"]

EDGE_INTS = (-(2**62), -(2**31), -1000, -3, -2, -1, 0, 1, 2, 3, 7, 1000, 2**31 - 1, 2**40)
EDGE_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30, -1e30, 1e-30)
KINDS = ("node", "simple", "pytorch-operator", "pytorch-converted")
RTOL, ATOL = 1e-3, 1e-4


@functools.cache
def corpus(kinds: tuple[str, ...] = KINDS) -> list[Any]:
    """The runnable conformance cases (not the excluded families), in a stable order."""
    from asyncjit.onnx.conformance import collect, excluded_reason

    return sorted((c for c in collect(kinds) if excluded_reason(c) is None), key=lambda c: (c.kind, c.name))


Mutator = Callable[[Any, list[np.ndarray], Random], "str | None"]
"""``(model, feeds, rng) -> what it changed``, in place; None when it does not apply."""


def _int_attrs(model: Any) -> list[tuple[Any, Any]]:
    from onnx import AttributeProto

    return [
        (n, a)
        for n in model.graph.node
        for a in n.attribute
        if a.type in (AttributeProto.INT, AttributeProto.INTS)
    ]


def attr_int(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """An INT attribute set to an edge value, or an INTS one with an element changed, dropped
    or added (axes, pads, strides, perm, kernel shapes, group, ...)."""
    from onnx import AttributeProto

    found = _int_attrs(model)
    if not found:
        return None
    node, attr = rng.choice(found)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(EDGE_INTS)
        return f"{node.op_type}.{attr.name} = {attr.i}"
    how = rng.choice(["set", "drop", "add"]) if attr.ints else "add"
    if how == "set":
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(EDGE_INTS)
    elif how == "drop":
        del attr.ints[rng.randrange(len(attr.ints))]
    else:
        attr.ints.append(rng.choice(EDGE_INTS))
    return f"{node.op_type}.{attr.name} = {list(attr.ints)}"


def attr_float(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """A FLOAT attribute (epsilon, alpha, scales, ...) set to NaN, inf, 0 or a huge value."""
    from onnx import AttributeProto

    found = [(n, a) for n in model.graph.node for a in n.attribute if a.type == AttributeProto.FLOAT]
    if not found:
        return None
    node, attr = rng.choice(found)
    attr.f = rng.choice(EDGE_FLOATS)
    return f"{node.op_type}.{attr.name} = {attr.f}"


def _edge_value(arr: np.ndarray, rng: Random) -> Any:
    if arr.dtype.kind == "f":
        return rng.choice(EDGE_FLOATS)
    if arr.dtype.kind == "b":
        return not bool(arr.flat[0])
    info = np.iinfo(arr.dtype)
    return max(info.min, min(info.max, rng.choice(EDGE_INTS)))


def init_value(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """One element of an initializer (a shape, indices, pads, a weight) at an edge value."""
    from onnx import numpy_helper

    inits = [t for t in model.graph.initializer if t.dims and 0 < int(np.prod(t.dims)) <= 1 << 16]
    if not inits:
        return None
    t = rng.choice(inits)
    arr = numpy_helper.to_array(t).copy()
    if arr.dtype.kind not in "fiub":
        return None
    i = rng.randrange(arr.size)
    arr.flat[i] = _edge_value(arr, rng)
    t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return f"initializer {t.name}[{i}] = {arr.flat[i]}"


def feed_value(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """One element of an input at an edge value (an index past the end, a negative shape, NaN)."""
    usable = [k for k, f in enumerate(feeds) if f.size and f.dtype.kind in "fiub"]
    if not usable:
        return None
    k = rng.choice(usable)
    arr = feeds[k] = feeds[k].copy()
    i = rng.randrange(arr.size)
    arr.flat[i] = _edge_value(arr, rng)
    kind = " (an int input)" if arr.dtype.kind in "iu" else ""
    return f"input {k}[{i}] = {arr.flat[i]}{kind}"


def feed_shape(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """An input fed with one dim changed (0, one less, one more) or one axis more or less."""
    if not feeds:
        return None
    k = rng.randrange(len(feeds))
    arr = feeds[k]
    shape = list(arr.shape)
    how = rng.choice(["dim", "rank"]) if shape else "rank"
    if how == "dim":
        d = rng.randrange(len(shape))
        shape[d] = rng.choice([0, max(shape[d] - 1, 0), shape[d] + 1])
    elif shape and rng.random() < 0.5:
        shape.pop()
    else:
        shape.append(rng.choice([1, 2]))
    n = int(np.prod(shape))
    flat = np.resize(arr.reshape(-1), n) if arr.size else np.zeros(n, arr.dtype)
    feeds[k] = flat.reshape(shape).astype(arr.dtype)
    return f"input {k} fed as {tuple(shape)} (declared {arr.shape})"


def feed_dtype(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """An input fed in another dtype."""
    if not feeds:
        return None
    k = rng.randrange(len(feeds))
    to = rng.choice([np.float64, np.float32, np.int64, np.int32, np.bool_, np.float16, np.uint8])
    with np.errstate(all="ignore"):
        feeds[k] = feeds[k].astype(to)
    return f"input {k} fed as {np.dtype(to).name}"


def input_dim(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """A graph input's declared dim changed (and fed so): shape inference meets new sizes."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if not inputs or len(inputs) != len(feeds):
        return None
    k = rng.randrange(len(inputs))
    dims = inputs[k].type.tensor_type.shape.dim
    fixed = [d for d in dims if d.HasField("dim_value")]
    if not fixed:
        return None
    j = rng.randrange(len(fixed))
    fixed[j].dim_value = rng.choice([0, 1, fixed[j].dim_value + 1, 2 * fixed[j].dim_value + 3])
    shape = [
        d.dim_value if d.HasField("dim_value") else s for d, s in zip(dims, feeds[k].shape, strict=False)
    ]
    if len(shape) == feeds[k].ndim:
        n = int(np.prod(shape))
        arr = feeds[k]
        feeds[k] = (np.resize(arr.reshape(-1), n) if arr.size else np.zeros(n, arr.dtype)).reshape(shape)
    return f"input {inputs[k].name} declared and fed as {tuple(shape)}"


def opset(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """The default domain's opset changed (ops are versioned by it)."""
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = rng.choice([1, 6, 7, 9, 11, 13, 17, 19, 21, 23, 99])
            return f"opset {o.version}"
    return None


MUTATORS: dict[str, Mutator] = {
    "attr_int": attr_int,
    "attr_float": attr_float,
    "init_value": init_value,
    "feed_value": feed_value,
    "feed_shape": feed_shape,
    "feed_dtype": feed_dtype,
    "input_dim": input_dim,
    "opset": opset,
}
BYTE_MUTATIONS = ("flip", "cut")


def _bytes_mutation(data: bytes, rng: Random) -> tuple[bytes, str]:
    if rng.choice(BYTE_MUTATIONS) == "cut":
        n = rng.randrange(len(data))
        return data[:n], f"cut to {n} of {len(data)} bytes"
    buf = bytearray(data)
    at = sorted(rng.randrange(len(buf)) for _ in range(rng.randint(1, 8)))
    for i in at:
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf), f"bits flipped at {at}"


def mutate(case: Any, rng: Random) -> tuple[bytes, list[np.ndarray], list[str]]:
    """The serialized mutated model, its feeds and what was changed."""
    from onnx import ModelProto

    model = ModelProto()
    model.CopyFrom(case.model)
    feeds = [np.array(x) for x in case.inputs]
    done: list[str] = []
    names = sorted(MUTATORS)
    for _ in range(rng.randint(1, 3)):
        what = MUTATORS[rng.choice(names)](model, feeds, rng)
        if what is not None:
            done.append(what)
    data = model.SerializeToString()
    if not done or rng.random() < 0.1:
        data, what = _bytes_mutation(data, rng)
        done.append(what)
    return data, feeds, done


RNN_OPS = ("LSTM", "GRU", "RNN")
METAMORPHIC_SHARE = 0.25
"""Of the models that pick a case some variant applies to, the share run as that variant."""

Back = Callable[[list[np.ndarray]], list[np.ndarray]]
"""Our outputs of a metamorphic variant mapped to the outputs of the model it came from."""


def _rnn_node(model: Any) -> Any | None:
    """The node of a one-node LSTM/GRU/RNN graph whose inputs are all graph inputs, or None."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    if len(graph.node) != 1 or graph.node[0].op_type not in RNN_OPS:
        return None
    node = graph.node[0]
    return None if any(name in inits for name in node.input) else node


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    found = [helper.get_attribute_value(a) for a in node.attribute if a.name == name]
    return found[0] if found else default


def _inputs(model: Any) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def rnn_state(model: Any, feeds: list[np.ndarray], rng: Random) -> str | None:
    """A recurrent node given the initial states it lacks, as inputs fed random values (the
    corpus has them in one case only: the state paths then meet every direction, layout and
    length)."""
    from onnx import helper

    node = _rnn_node(model)
    names = _inputs(model)
    if node is None or len(names) != len(feeds) or node.input[0] not in names:
        return None
    slots = list(node.input) + [""] * (8 - len(node.input))
    missing = [s for s in ((5, 6) if node.op_type == "LSTM" else (5,)) if not slots[s]]
    if not missing:
        return None
    x = feeds[names.index(node.input[0])]
    layout = _attr(node, "layout", 0)
    dirs = 2 if _attr(node, "direction", b"forward") in (b"bidirectional", "bidirectional") else 1
    batch, hidden = x.shape[0 if layout else 1], int(_attr(node, "hidden_size", 0))
    if x.ndim != 3 or hidden < 1:
        return None
    shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    values = np.random.default_rng(rng.randrange(1 << 32))
    for s in missing:
        name = f"fuzz_initial_{s}"
        slots[s] = name
        elem = helper.np_dtype_to_tensor_dtype(x.dtype)
        model.graph.input.append(helper.make_tensor_value_info(name, elem, list(shape)))
        feeds.append(values.standard_normal(shape).astype(x.dtype))
    while slots and not slots[-1]:
        slots.pop()
    del node.input[:]
    node.input.extend(slots)
    return f"{node.op_type} given initial states {[slots[s] for s in missing]} of shape {shape}"


def _swap_first_dims(value_info: Any) -> None:
    """A graph input's declared first two dims swapped (as its feed is transposed)."""
    dims = value_info.type.tensor_type.shape.dim
    if len(dims) >= 2:
        first, second = type(dims[0])(), type(dims[0])()
        first.CopyFrom(dims[0])
        second.CopyFrom(dims[1])
        dims[0].CopyFrom(second)
        dims[1].CopyFrom(first)


def batch_first(model: Any, feeds: list[np.ndarray], rng: Random) -> tuple[str, Back] | None:
    """A recurrent node's ``layout`` 0 turned to 1, ``X`` and the initial states fed batch
    first: ONNX Runtime, which runs only layout 0, runs the model before the change, and our
    outputs are transposed back to be compared with it."""
    node = _rnn_node(model)
    names = _inputs(model)
    if node is None or _attr(node, "layout", 0) != 0 or len(names) != len(feeds):
        return None
    graph_inputs = {i.name: i for i in model.graph.input}
    for slot in (0, 5, 6):
        if slot < len(node.input) and node.input[slot]:
            k = names.index(node.input[slot])
            feeds[k] = np.ascontiguousarray(np.swapaxes(feeds[k], 0, 1))
            _swap_first_dims(graph_inputs[node.input[slot]])
    from onnx import helper

    kept = [a for a in node.attribute if a.name != "layout"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("layout", 1)])
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    slot_of = {name: j for j, name in enumerate(node.output) if name}
    order = [slot_of.get(o.name, -1) for o in model.graph.output]

    def back(outs: list[np.ndarray]) -> list[np.ndarray]:
        # Y [B, T, D, H] -> [T, D, B, H]; Y_h, Y_c [B, D, H] -> [D, B, H]
        return [
            o.transpose(1, 2, 0, 3)
            if j == 0 and o.ndim == 4
            else np.swapaxes(o, 0, 1)
            if j > 0 and o.ndim == 3
            else o
            for o, j in zip(outs, order, strict=False)
        ]

    return f"{node.op_type} batch first (layout 1), compared with layout 0", back


def _identity(outs: list[np.ndarray]) -> list[np.ndarray]:
    return outs


AXIS_OPS = frozenset(
    [
        "ArgMax",
        "ArgMin",
        "Compress",
        "Concat",
        "CumSum",
        "DequantizeLinear",
        "Flatten",
        "Gather",
        "GatherElements",
        "Hardmax",
        "LayerNormalization",
        "LogSoftmax",
        "LpNormalization",
        "QuantizeLinear",
        "ScatterElements",
        "Softmax",
        "Split",
        "TopK",
    ]
)
"""Ops whose ``axis`` attribute counts the dims of their first input."""

AXES_OPS = frozenset(
    [
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "Squeeze",
    ]
)
"""Ops whose ``axes`` attribute (before it became an input) counts the dims of their input."""

COMMUTATIVE = frozenset(
    [
        "Add",
        "Mul",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "And",
        "Or",
        "Xor",
        "Equal",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
    ]
)
"""Ops whose inputs may come in any order (broadcast alike)."""


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _single_node(model: Any, feeds: list[np.ndarray]) -> Any | None:
    """The node of a one-node graph whose inputs are the graph inputs in feed order."""
    graph = model.graph
    if len(graph.node) != 1 or len(_inputs(model)) != len(feeds):
        return None
    return graph.node[0]


def negative_axis(model: Any, feeds: list[np.ndarray], rng: Random) -> tuple[str, Back] | None:
    """An ``axis`` (or each of ``axes``) of a first-input-rank op written from the end: the same
    dims, the same outputs (from opset 11, where the spec allows negative axes)."""
    node = _single_node(model, feeds)
    names = _inputs(model)
    if node is None or not node.input or node.input[0] not in names or _opset(model) < 11:
        return None
    rank = feeds[names.index(node.input[0])].ndim
    for attr in node.attribute:
        if attr.name == "axis" and node.op_type in AXIS_OPS and 0 <= attr.i < rank:
            before = attr.i
            attr.i -= rank
            return f"{node.op_type}.axis {before} written as {attr.i}", _identity
        if (
            attr.name == "axes"
            and node.op_type in AXES_OPS
            and attr.ints
            and all(0 <= a < rank for a in attr.ints)
        ):
            before_axes = list(attr.ints)
            attr.ints[:] = [a - rank for a in before_axes]
            return f"{node.op_type}.axes {before_axes} written as {list(attr.ints)}", _identity
    return None


def commuted(model: Any, feeds: list[np.ndarray], rng: Random) -> tuple[str, Back] | None:
    """A commutative op's inputs in reverse order: the same outputs (not under the one-way
    ``broadcast`` attribute of opsets before 7, which is not symmetric)."""
    node = _single_node(model, feeds)
    if node is None or node.op_type not in COMMUTATIVE or len(node.input) < 2 or "" in node.input:
        return None
    if any(a.name == "broadcast" for a in node.attribute):
        return None
    before = list(node.input)
    node.input[:] = before[::-1]
    return f"{node.op_type} inputs {before} reversed", _identity


def transposed_gemm(model: Any, feeds: list[np.ndarray], rng: Random) -> tuple[str, Back] | None:
    """A ``Gemm``'s ``A`` or ``B`` fed transposed, its ``transA``/``transB`` flipped."""
    from onnx import helper

    node = _single_node(model, feeds)
    names = _inputs(model)
    if node is None or node.op_type != "Gemm":
        return None
    which = rng.randrange(2)
    name, flag = node.input[which], ("transA", "transB")[which]
    if name not in names or feeds[names.index(name)].ndim != 2:
        return None
    k = names.index(name)
    feeds[k] = np.ascontiguousarray(feeds[k].T)
    was = int(_attr(node, flag, 0))
    kept = [a for a in node.attribute if a.name != flag]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(flag, 1 - was)])
    for i in model.graph.input:
        if i.name == name:
            _swap_first_dims(i)
    return f"Gemm {name} fed transposed, {flag} {was} -> {1 - was}", _identity


VARIANTS: dict[str, Callable[[Any, list[np.ndarray], Random], tuple[str, Back] | None]] = {
    "batch_first": batch_first,
    "negative_axis": negative_axis,
    "commuted": commuted,
    "transposed_gemm": transposed_gemm,
}
"""Metamorphic variants: ``(model, feeds, rng) -> (what, back)`` changed in place so that our
outputs of the variant, mapped by ``back``, must equal the outputs of the model before."""


def metamorphic(
    case: Any, rng: Random, states: bool | None = None
) -> tuple[bytes, list[np.ndarray], list[str], bytes, list[np.ndarray], Back] | None:
    """A case and one variant of it from ``VARIANTS`` (a one-node recurrent case given initial
    states first half the time, or as ``states`` says): ``(variant, its feeds, what, model, its
    feeds, back)``; None where no variant applies."""
    from onnx import ModelProto

    model = ModelProto()
    model.CopyFrom(case.model)
    feeds = [np.array(x) for x in case.inputs]
    done = []
    if (rng.random() < 0.5 if states is None else states) and (
        what := rnn_state(model, feeds, rng)
    ) is not None:
        done.append(what)
    for name in rng.sample(sorted(VARIANTS), len(VARIANTS)):
        variant = ModelProto()
        variant.CopyFrom(model)
        variant_feeds = list(feeds)
        made = VARIANTS[name](variant, variant_feeds, rng)
        if made is not None:
            done.append(made[0])
            return variant.SerializeToString(), variant_feeds, done, model.SerializeToString(), feeds, made[1]
    return None


def run_asyncjit(data: bytes, feeds: list[np.ndarray], *, strict: bool = False) -> list[np.ndarray]:
    """asyncjit's outputs for a model, its inputs fed in order (``strict``: exactly one feed
    per input)."""
    import asyncjit.onnx as ao

    with np.errstate(all="ignore"):
        sess = ao.InferenceSession(data)
        return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds, strict=strict)))


def _runs(data: bytes, feeds: list[np.ndarray]) -> bool:
    """Whether asyncjit runs a model."""
    try:
        run_asyncjit(data, feeds)
    except Exception:  # a typed error; any other is the mutations' to find
        return False
    return True


def _peer(data: bytes, feeds: list[np.ndarray]) -> list[np.ndarray] | None:
    """ONNX Runtime's outputs (one thread) for the same model and feeds; None where it refuses
    them or is not installed."""
    return _peer_run(data, feeds)[0]


INDEX_REFUSALS = re.compile(
    r"out of data bounds|out of range value in index|invalid indic?e? found|invalid index found", re.I
)
"""ONNX Runtime's messages for a run whose Gather/Scatter indices fall outside their axis."""


def _peer_run(data: bytes, feeds: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str | None]:
    """ONNX Runtime's outputs, or None and the message of its run's failure (None when it
    refused the model itself or is not installed)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception:  # ONNX Runtime refusing a mutated model is its own business
        return None, None
    try:
        named = {i.name: f for i, f in zip(sess.get_inputs(), feeds, strict=False)}
        return [np.asarray(v) for v in sess.run(None, named)], None
    except Exception as exc:
        return None, str(exc)


REFERENCE_MAX_ELEMENTS = 1 << 20
"""Feeds up to this size are re-run by ONNX's reference on a difference (it is numpy, slow)."""


def _reference(data: bytes, feeds: list[np.ndarray]) -> list[np.ndarray] | None:
    """ONNX's reference implementation's outputs, the arbiter where ONNX Runtime and asyncjit
    differ (ONNX Runtime's own liberties: a window larger than its input still gives one
    output); None where it fails or the feeds are too big for it."""
    if sum(f.size for f in feeds) > REFERENCE_MAX_ELEMENTS:
        return None
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(data)
        with np.errstate(all="ignore"):
            return [
                np.asarray(v)
                for v in evaluator.run(None, dict(zip(evaluator.input_names, feeds, strict=False)))
            ]
    except Exception:  # the reference has its own gaps
        return None


def _differs(ours: list[np.ndarray], theirs: list[np.ndarray]) -> str | None:
    """How our outputs differ from ONNX Runtime's, or None."""
    if len(ours) != len(theirs):
        return f"{len(ours)} outputs, ONNX Runtime {len(theirs)}"
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        a = np.asarray(a)
        if (
            a.dtype.kind == "V"
            or b.dtype.kind == "V"
            or a.dtype.name.startswith(("float8", "float4", "bfloat"))
        ):
            continue  # a low-precision float: ONNX Runtime returns its bits
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {a.dtype}{a.shape}, ONNX Runtime {b.dtype}{b.shape}"
        if a.dtype.kind in "fc":
            with np.errstate(all="ignore"):
                b64 = b.astype(np.float64)
                finite = np.abs(b64[np.isfinite(b64)])
                # an exact 0 among sums of larger terms (a DFT) carries their rounding
                scale = max(1.0, float(finite.max())) if finite.size else 1.0
                a64 = a.astype(np.float64)
                same = np.isclose(a64, b64, RTOL, ATOL * scale, equal_nan=True)
                # a masked score: -inf here (as ONNX's reference), the lowest float there
                top = float(np.finfo(a.dtype).max)
                same |= (np.isinf(a64) & (np.abs(b64) >= top) & (np.sign(a64) == np.sign(b64))) | (
                    np.isinf(b64) & (np.abs(a64) >= top) & (np.sign(a64) == np.sign(b64))
                )
        else:
            same = a == b
        if not np.all(same):
            at = np.argwhere(~np.asarray(same))[0].tolist() if a.ndim else []
            return f"output {k} at {at}: {a[tuple(at)]!r}, ONNX Runtime {b[tuple(at)]!r}"
    return None


def _special(feeds: list[np.ndarray], done: list[str]) -> bool:
    """Whether the two runtimes may legitimately differ: NaN, inf or magnitudes from 1e15 in a
    feed, an attribute or an initializer (NaN's order in min/max, overflow inside a
    normalization, absolute errors of 1e30-sized sums), or an int input changed (a label out of
    range, which ONNX leaves undefined; indices of Gather*/Scatter* out of range are compared
    before this: where ONNX Runtime refuses them, we must too)."""
    text = " ".join(done)
    # ignore_index: labels it used to skip become out of range, which ONNX leaves undefined
    if any(w in text for w in ("nan", "inf", "e+", "an int input", "ignore_index")):
        return True
    with np.errstate(all="ignore"):
        return any(f.dtype.kind in "fc" and not (np.abs(f) < 1e15).all() for f in feeds)


def run_one(seed: int, index: int) -> dict[str, Any]:
    """Mutate and run model ``index`` of ``seed``; a report in ``tests/fuzz.py``'s format
    (``mismatches``: untyped exceptions; ``outcome``: ran, or the typed error's class)."""
    from asyncjit.errors import IndexOutOfRangeError, JitError

    cases = corpus(tuple(os.environ.get("ASYNCJIT_FUZZ_ONNX_KINDS", ",".join(KINDS)).split(",")))
    rng = Random(f"{seed}:{index}")
    case = cases[rng.randrange(len(cases))]
    # a separate stream: the other cases of a seed stay what they were before metamorphic runs
    meta_rng = Random(f"{seed}:{index}:metamorphic")
    plan = metamorphic(case, meta_rng) if meta_rng.random() < METAMORPHIC_SHARE else None
    if plan is not None:
        data, feeds, done, peer_data, peer_feeds, back = plan
    else:
        data, feeds, done = mutate(case, rng)
        peer_data, peer_feeds, back = data, feeds, None
    report: dict[str, Any] = {
        "case": index,
        "graph": f"model {case.kind}/{case.name}; " + "; ".join(done),
        "runs": 1,
        "bindings": 1,
        "mismatches": [],
    }
    try:
        ours = run_asyncjit(data, feeds)
        if back is None and (refusal := _peer_run(data, feeds)[1]) and INDEX_REFUSALS.search(refusal):
            report["outcome"] = "ran, ONNX Runtime refused an index"
            report["mismatches"] = [f"ran where ONNX Runtime refused an index out of range: {refusal[-160:]}"]
            return report
        theirs = None if _special(feeds, done) else _peer(peer_data, peer_feeds)
        if theirs is not None and back is not None:
            ours = back(ours)
        report["outcome"] = "ran" if theirs is None else "ran, as ONNX Runtime"
        if theirs is not None and (why := _differs(ours, theirs)) is not None:
            ref = _reference(peer_data, peer_feeds)
            if ref is not None and _differs(ours, ref) is None:
                report["outcome"] = "ran, as ONNX's reference (ONNX Runtime differs)"
            else:
                report["outcome"] = "ran, unlike ONNX Runtime"
                report["mismatches"] = [f"differs from ONNX Runtime: {why}"]
    except JitError as exc:
        report["outcome"] = type(exc).__name__
        if back is not None and _runs(peer_data, peer_feeds):  # a variant must not be refused
            report["mismatches"] = [f"the variant raised {type(exc).__name__}, the model before runs"]
        elif isinstance(exc, IndexOutOfRangeError) and _peer_run(data, feeds)[0] is not None:
            report["mismatches"] = [f"raised IndexOutOfRangeError where ONNX Runtime runs: {exc}"]
    except Exception as exc:  # what a bad model must never give
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        report["outcome"] = "untyped"
        report["mismatches"] = [f"untyped {type(exc).__name__}: {first}"]
    return report
