"""The ``onnxruntime`` plugin: each partition becomes an ONNX sub-model run by an ORT session.

Bytecode: ``b"AJORT1\\n"``, an 8-byte header length, a JSON header (per entry: model offset and
length, input/output names, and the symbolic integers the model takes as int64 scalar inputs,
as ``symbolic.to_json``), then the serialized ONNX models. Symbolic shapes and slice bounds are
model inputs evaluated from the call's var values, so one model serves every binding. Constants
a partition reads become initializers. ORT's execution providers are the plugin's hardware.

What it claims: by default only what it is forced to (``force`` option: node ids or a predicate)
because asyncjit's CPU compiler runs every op ORT could take here; ``claim_all`` (env
``ASYNCJIT_PLUGIN_ONNXRUNTIME_CLAIM_ALL=1``) claims every op it can translate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..compiler._partition import CompiledResult, Subgraph
from ..errors import CompileError
from ..graph import Node
from ..symbolic import Dim, evaluate, from_json, render, to_json
from ._base import Plugin
from ._container import pack_entries, unpack_entries

__all__ = ["OrtPlugin"]

MAGIC = b"AJORT1\n"
OPSET = 17

_UNARY = {
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "sin": "Sin",
    "cos": "Cos",
    "erf": "Erf",
    "floor": "Floor",
    "ceil": "Ceil",
    "neg": "Neg",
    "abs": "Abs",
    "relu": "Relu",
    "recip": "Reciprocal",
}
_BINARY = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "pow": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
    "eq": "Equal",
}
_REDUCE = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin", "prod": "ReduceProd"}
_MOVEMENT = {"reshape", "permute", "expand", "shrink", "cat"}
_FLOATS = {"float32", "float64"}


class _Builder:
    """Accumulates ONNX nodes for one partition; symbolic integers become int64 inputs."""

    def __init__(self) -> None:
        from onnx import helper

        self.h = helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.dims: dict[str, Dim] = {}
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(self.h.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def ints(self, values: Sequence[Dim]) -> str:
        """A 1-D int64 tensor of ``values`` (symbolic ones read from scalar inputs)."""
        if all(isinstance(v, int) for v in values):
            return self.const(np.array(values, np.int64), "ints")
        parts = []
        for v in values:
            if isinstance(v, int):
                parts.append(self.const(np.array([v], np.int64), "int"))
            else:
                key = json.dumps(to_json(v), sort_keys=True)
                name = next(
                    (n for n, d in self.dims.items() if json.dumps(to_json(d), sort_keys=True) == key), None
                )
                if name is None:
                    name = f"dim_{len(self.dims)}"
                    self.dims[name] = v
                parts.append(self.op("Reshape", [name, self.const(np.array([1], np.int64), "one")]))
        return self.op("Concat", parts, axis=0)


def _translate(b: _Builder, n: Node, args: list[str]) -> str:
    op = n.op
    if op in _UNARY:
        return b.op(_UNARY[op], args)
    if op == "rsqrt":
        return b.op("Reciprocal", [b.op("Sqrt", args)])
    if op in _BINARY:
        return b.op(_BINARY[op], args)
    if op == "ne":
        return b.op("Not", [b.op("Equal", args)])
    if op == "where":
        return b.op("Where", args)
    if op == "cast":
        from onnx import helper

        return b.op("Cast", args, to=helper.np_dtype_to_tensor_dtype(n.dtype.np))
    if op == "matmul":
        return b.op("MatMul", args)
    if op == "reduce":
        axes = [int(a) for a in n.attrs["axes"]]
        if n.attrs["op"] == "sum":
            return b.op("ReduceSum", [args[0], b.const(np.array(axes, np.int64), "axes")], keepdims=1)
        return b.op(_REDUCE[n.attrs["op"]], args, axes=axes, keepdims=1)
    if op == "reshape":
        return b.op("Reshape", [args[0], b.ints(n.shape)])
    if op == "permute":
        return b.op("Transpose", args, perm=[int(a) for a in n.attrs["order"]])
    if op == "expand":
        return b.op("Expand", [args[0], b.ints(n.shape)])
    if op == "shrink":
        slices = list(n.attrs["slices"])
        starts = b.ints([s for s, _, _ in slices])
        ends = b.ints([e for _, e, _ in slices])
        on = b.const(np.arange(len(slices), dtype=np.int64), "axes")
        steps = b.const(np.array([st for _, _, st in slices], np.int64), "steps")
        return b.op("Slice", [args[0], starts, ends, on, steps])
    if op == "cat":
        return b.op("Concat", args, axis=int(n.attrs["axis"]))
    raise CompileError(f"onnxruntime plugin cannot translate {op}")


def _value_info(name: str, n: Node) -> Any:
    from onnx import helper

    dims = [d if isinstance(d, int) else render(d) for d in n.shape]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(n.dtype.np), dims)


def _model(sub: Subgraph) -> tuple[bytes, list[str], list[str], dict[str, Any]]:
    """(serialized model, runtime input names, output names, symbolic integer inputs)."""
    from onnx import TensorProto, helper

    b = _Builder()
    names: dict[int, str] = {}
    graph_inputs = []
    runtime_inputs = []
    for k, x in enumerate(sub.inputs):
        if x.op == "const":
            names[x.id] = b.const(
                np.asarray(x.attrs["value"], dtype=x.dtype.np).reshape(tuple(int(d) for d in x.shape)), "w"
            )
        else:
            names[x.id] = f"in_{k}"
            graph_inputs.append(_value_info(names[x.id], x))
            runtime_inputs.append(names[x.id])
    for n in sub.nodes:
        names[n.id] = _translate(b, n, [names[i.id] for i in n.inputs])
    outputs = []
    out_names = []
    for j, o in enumerate(sub.outputs):
        name = f"out_{j}"
        b.nodes.append(helper.make_node("Identity", [names[o.id]], [name]))
        outputs.append(_value_info(name, o))
        out_names.append(name)
    for name in b.dims:
        graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, []))
    graph = helper.make_graph(b.nodes, "asyncjit_partition", graph_inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="asyncjit")
    model.ir_version = 8
    return (
        model.SerializeToString(),
        runtime_inputs,
        out_names,
        {k: to_json(v) for k, v in b.dims.items()},
    )


class _Entry:
    __slots__ = ("dims", "inputs", "outputs", "session")

    def __init__(self, session: Any, inputs: list[str], outputs: list[str], dims: dict[str, Dim]) -> None:
        self.session = session
        self.inputs = inputs
        self.outputs = outputs
        self.dims = dims


class OrtPlugin(Plugin):
    """Partitions compiled to ONNX sub-models and dispatched through ONNX Runtime sessions."""

    name: ClassVar[str] = "onnxruntime"
    manufacturer: ClassVar[str] = "Microsoft (ONNX Runtime)"
    ops: ClassVar[frozenset[str]] = frozenset(
        {*_UNARY, *_BINARY, "rsqrt", "ne", "where", "cast", "matmul", "reduce", *_MOVEMENT}
    )
    default_options: ClassVar[Mapping[str, Any]] = {
        "claim_all": False,
        "threads": 1,
        "providers": "CPUExecutionProvider",
    }

    def __init__(self, options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        import onnxruntime

        super().__init__(options, **kwargs)
        self._ort = onnxruntime

    @property
    def version(self) -> str:  # type: ignore[override]
        return f"ort-{self._ort.__version__}"

    @property
    def hardware(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._ort.get_available_providers())

    def can_run(self, node: Node) -> str | None:
        if node.op not in self.ops:
            return f"{node.op} has no ONNX translation here"
        if node.op == "cast" and not (node.dtype.name in _FLOATS or node.dtype.is_bool):
            return "casts to ints saturate/wrap in asyncjit, not in ONNX"
        if (
            node.op in _UNARY or node.op in ("rsqrt", "matmul", "div", "pow")
        ) and node.dtype.name not in _FLOATS:
            return f"{node.op} on {node.dtype.name}"
        return None

    def accepts(self, node: Node) -> str | None:
        if self.options.get("claim_all"):
            return None
        return "asyncjit's CPU compiler runs it (force it, or set claim_all)"

    def compile(self, partitions: Sequence[Subgraph]) -> CompiledResult:
        entries = {}
        for k, sub in enumerate(partitions):
            model, ins, outs, dims = _model(sub)
            entries[f"partition_{k}"] = ({"inputs": ins, "outputs": outs, "dims": dims}, model)
        return pack_entries(MAGIC, entries)

    def load(self, bytecode: bytes) -> dict[str, _Entry]:
        """One ORT session per entry point."""
        entries = unpack_entries(MAGIC, bytecode, "onnxruntime")
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = int(self.options["threads"])
        opts.inter_op_num_threads = 1
        providers = [p for p in str(self.options["providers"]).split(",") if p]
        out = {}
        for entry, (h, model) in entries.items():
            session = self._ort.InferenceSession(model, opts, providers=providers)
            out[entry] = _Entry(
                session, h["inputs"], h["outputs"], {k: from_json(v) for k, v in h["dims"].items()}
            )
        return out

    def invoke(
        self,
        handle: Mapping[str, _Entry],
        entry: str,
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        vars: Mapping[str, int],
    ) -> None:
        e = handle[entry]
        feed: dict[str, Any] = dict(zip(e.inputs, _runtime(inputs, e.inputs), strict=True))
        for name, d in e.dims.items():
            feed[name] = np.array(evaluate(d, vars), np.int64)
        results = e.session.run(e.outputs, feed)
        for out, res in zip(outputs, results, strict=True):
            np.copyto(out, res, casting="no")


def _runtime(inputs: Sequence[np.ndarray], names: list[str]) -> Sequence[np.ndarray]:
    """The non-constant inputs (constants are initializers inside the model)."""
    if len(inputs) == len(names):
        return inputs
    return [inputs[int(n.split("_")[1])] for n in names]
