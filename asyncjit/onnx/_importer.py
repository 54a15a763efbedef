"""``load``: an ONNX file into an asyncjit graph with bounded symbolic dims.

The file is parsed by the ``onnx`` package. Every input dim becomes an int (a fixed size) or a
``Var`` bounded by ``dims``: a named dim (``dim_param``) by its name, an unnamed one as
``"<input>:<axis>"``. The graph is then traced node by node through the op table
(``_registry``); values known at load time (initializers, constants, shape arithmetic) are
computed as they are met, so shape sub-graphs end as symbolic dims and ``If`` nodes whose
condition folds are inlined. Every problem the trace can find is found at load: unsupported ops
(all of them, by node), unbounded dims (all of them), shapes that depend on data.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from .. import dtypes as dt
from ..errors import JitError, OnnxImportError, UnsupportedOpError
from ..graph import shape_str
from ..symbolic import Dim, Expr, Var
from ..tensor import Tensor
from ._lowp import LowP, encode, is_lowp_dtype, run_with_lowp, storage_dtype
from ._registry import NodeCtx, lookup
from ._values import BROADCAST_CONST_MIN, Sym, Value, as_tensor, np_dtype

__all__ = ["OnnxModel", "TensorInfo", "Tracer", "load", "read_model"]

DimBound = int | tuple[int, int]

# Op types whose outputs are never folded to constants at load time (none are data-free).
_NO_FOLD = frozenset({"If", "Loop", "Scan"})
_FOLD_LIMIT = 1 << 22  # elements: bigger constant results stay in the graph as tensors


@attrs.frozen
class TensorInfo:
    """A model input or output: its name, symbolic shape and element type (ORT's ``NodeArg``)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype[Any]

    @property
    def type(self) -> str:
        """ONNX Runtime's spelling of the type, e.g. ``tensor(float)``."""
        names = {
            "float32": "float",
            "float64": "double",
            "bool": "bool",
            **{f"float8_{k}": f"float8{k}" for k in ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz")},
            "float8_e8m0fnu": "float8e8m0",
            "float4_e2m1fn": "float4e2m1",
        }
        return f"tensor({names.get(self.dtype.name, self.dtype.name)})"

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype.name}{shape_str(self.shape)}"


def read_model(source: str | Path | bytes | Any) -> tuple[Any, str, bytes]:
    """Parse ``source`` (a path, the file's bytes, or a ``ModelProto``): ``(model, label, bytes)``.

    Raises:
        OnnxImportError: a missing, truncated or non-ONNX file, naming it and what failed.
    """
    try:
        import onnx
    except ImportError as exc:
        raise OnnxImportError(
            "importing ONNX models needs the 'onnx' package: pip install 'asyncjit[onnx]'"
        ) from exc
    if isinstance(source, onnx.ModelProto):
        label = source.graph.name or "<ModelProto>"
        _check_text(source, label)
        return source, label, source.SerializeToString()
    if isinstance(source, bytes | bytearray | memoryview):
        data, label = bytes(source), "<bytes>"
        base: Path | None = None
    else:
        path = Path(source)
        label = str(path)
        if not path.is_file():
            raise OnnxImportError(f"ONNX model file {label!r} does not exist")
        data = path.read_bytes()
        base = path.parent
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxImportError(
            f"{label!r} is not a readable ONNX model ({type(exc).__name__}: {exc})"
        ) from exc
    if not model.HasField("graph") or model.ir_version == 0 or not (model.graph.node or model.graph.output):
        raise OnnxImportError(f"{label!r} is not an ONNX model (no graph or IR version; truncated?)")
    _check_text(model, label)
    if base is not None and any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer
    ):
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(base))
        except Exception as exc:
            raise OnnxImportError(f"{label!r}: its external weight data could not be read: {exc}") from exc
    return model, label, data


_TENSOR_FAULTS = (TypeError, ValueError, IndexError, KeyError)
"""What ``numpy_helper.to_array`` raises for a tensor whose data and dims disagree, or whose
element type no version defines."""
_LOWERING_FAULTS = (JitError, *_TENSOR_FAULTS, AssertionError, AttributeError, ArithmeticError, MemoryError)
"""What an op's lowering raises on attributes or constants it cannot take (a zero stride, a head
dim of 0, an index past the end, a count of 2^40, a required attribute that is absent or of
another type): the node's typed import error instead."""


def _check_text(message: Any, label: str, path: str = "model") -> None:
    """Every string field of ``message`` (names, op types, domains, dim params, at any depth)
    is text: protobuf hands a field that is not valid UTF-8 to Python as ``bytes``, which the
    import would trip over far from the cause.

    Raises:
        OnnxImportError: naming the first such field.
    """
    from google.protobuf.descriptor import FieldDescriptor

    for field, value in message.ListFields():
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        repeated = getattr(field, "is_repeated", None)
        if repeated is None:  # protobuf before 6
            repeated = field.label == FieldDescriptor.LABEL_REPEATED
        items = list(value) if repeated else [value]
        for i, item in enumerate(items):
            where = f"{path}.{field.name}[{i}]" if repeated else f"{path}.{field.name}"
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                _check_text(item, label, where)
            elif not isinstance(item, str):
                raise OnnxImportError(f"{label!r}: {where} is not UTF-8 text: {bytes(item)[:40]!r}")


def _attribute(a: Any) -> Any:
    from onnx import AttributeProto, helper, numpy_helper

    if a.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type == AttributeProto.GRAPH:
        return a.g
    if a.type == AttributeProto.GRAPHS:
        return list(a.graphs)
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if a.type == AttributeProto.STRINGS:
        return [v.decode() for v in value]
    if a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(value)
    return value


def walk_nodes(graph: Any) -> Iterable[Any]:
    """Every node of ``graph`` and of its subgraphs (``If`` branches, ``Loop``/``Scan`` bodies)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from walk_nodes(a.g)
            for g in a.graphs:
                yield from walk_nodes(g)


def unsupported_nodes(model: Any) -> list[tuple[str, str, str]]:
    """``(node name, op type, reason)`` of every node the op table cannot lower."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    out = []
    for node in walk_nodes(model.graph):
        domain = node.domain or ""
        if domain == "ai.onnx":
            domain = ""
        if domain not in opsets:
            out.append((node.name or node.op_type, node.op_type, f"domain {domain!r} is not imported"))
            continue
        if lookup(domain, node.op_type, opsets[domain]) is None:
            where = f" (domain {domain})" if domain else ""
            out.append(
                (
                    node.name or f"{node.op_type}({', '.join(node.output)})",
                    node.op_type,
                    f"no lowering{where}",
                )
            )
    return out


class Tracer:
    """Runs an ONNX graph over values: records ``Tensor`` ops, computes what is known."""

    def __init__(self, opsets: Mapping[str, int], label: str) -> None:
        self.opsets = dict(opsets)
        self.label = label
        self._envs: list[dict[str, Value | None]] = []
        # while tracing a branch or loop iteration that runs only when a condition from data
        # holds: that condition (a 0-d bool Tensor), so an index check there counts only then
        self.guard: Any = None

    def run(self, graph: Any, env: dict[str, Value | None]) -> None:
        """Trace every node of ``graph``; ``env`` maps value names to values and is extended."""
        from onnx import numpy_helper

        for init in graph.initializer:
            try:
                env[init.name] = numpy_helper.to_array(init)
            except _TENSOR_FAULTS as exc:
                raise OnnxImportError(
                    f"{self.label}: initializer {init.name!r} is unreadable: {type(exc).__name__}: {exc}"
                ) from exc
        for sparse in getattr(graph, "sparse_initializer", []):
            raise OnnxImportError(f"{self.label}: sparse initializer {sparse.values.name!r} is not supported")
        for node in graph.node:
            self.run_node(node, env)

    def subgraph(self, graph: Any, inputs: list[Value | None], when: Any = None) -> list[Value | None]:
        """Trace a subgraph of the node being lowered: it sees the enclosing graph's names, its
        own inputs bound to ``inputs``; ``when``: a 0-d bool Tensor from data under which alone
        it takes effect (an ``If`` branch, an unrolled ``Loop`` iteration), ANDed with the
        enclosing one, the ``guard`` of index checks traced inside."""
        env: dict[str, Value | None] = dict(self._envs[-1])
        for info, value in zip(graph.input, inputs, strict=False):
            env[info.name] = value
        outer = self.guard
        if when is not None:
            self.guard = when if outer is None else outer & when
        try:
            self.run(graph, env)
        finally:
            self.guard = outer
        return [env[o.name] for o in graph.output]

    def run_node(self, node: Any, env: dict[str, Value | None]) -> None:
        domain = node.domain or ""
        domain = "" if domain == "ai.onnx" else domain
        opset = self.opsets.get(domain, 1)
        definition = lookup(domain, node.op_type, opset)
        try:
            attrs = {a.name: _attribute(a) for a in node.attribute}
        except _TENSOR_FAULTS as exc:
            raise OnnxImportError(
                f"{self.label}: node {node.name or node.op_type!r} ({node.op_type}) has an unreadable "
                f"attribute: {type(exc).__name__}: {exc}"
            ) from exc
        ctx = NodeCtx(node, attrs, opset, self)
        if definition is None:
            raise UnsupportedOpError(
                f"{self.label}: node {ctx.name!r} uses op {node.op_type!r}, which asyncjit cannot import",
                ((ctx.name, node.op_type, "no lowering"),),
            )
        try:
            ins = [env[name] if name else None for name in node.input]
        except KeyError as exc:
            raise OnnxImportError(
                f"{self.label}: node {ctx.name!r} reads {exc}, which no node produces"
            ) from None
        self._envs.append(env)
        try:
            result = run_with_lowp(definition, ctx, ins)
            outs = list(result) if isinstance(result, list | tuple) else [result]
            outs = [np.asarray(v) if isinstance(v, np.generic) else v for v in outs]
            if (
                node.op_type not in _NO_FOLD
                and ins
                and all(isinstance(v, np.ndarray) or v is None for v in ins)
            ):
                outs = [_fold(v) for v in outs]
        except OnnxImportError as exc:
            if self.label in str(exc):
                raise
            raise type(exc)(f"{self.label}: {exc}", *exc.args[1:]) from exc
        except _LOWERING_FAULTS as exc:
            raise OnnxImportError(
                f"{self.label}: node {ctx.name!r} ({node.op_type}) cannot be imported: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            self._envs.pop()
        for name, value in zip(node.output, outs, strict=False):
            if name:
                env[name] = value


def _fold(v: Value | LowP | None) -> Value | None:
    """A tensor computed only from constants, evaluated now (numpy reference semantics)."""
    if isinstance(v, LowP):
        bits = _fold(v.bits)
        return bits.view(v.dtype) if isinstance(bits, np.ndarray) else v  # type: ignore[return-value]
    if not isinstance(v, Tensor) or any(isinstance(d, Expr) for d in v.shape):
        return v
    size = 1
    for d in v.shape:
        size *= int(d)
    if size > _FOLD_LIMIT:
        return v
    from ..reference import evaluate

    if size >= BROADCAST_CONST_MIN and v.node.op == "expand":  # a fill: kept a broadcast view
        return np.broadcast_to(evaluate(Tensor(v.node.inputs[0])), tuple(int(d) for d in v.shape))
    return evaluate(v)


def _var_name(text: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", text)
    if not name or not name.isidentifier():
        name = f"d_{name}"
    return name


@attrs.define(eq=False)
class OnnxModel:
    """An imported ONNX model: its inputs, outputs, vars and the traced graph.

    ``build(feeds)`` traces the graph again on other input tensors (``recurrent_step`` feeds it
    the gathered rows of a slot pool); ``outputs_traced`` are the outputs over the placeholders.
    """

    source: str
    proto: Any
    model_bytes: bytes
    opsets: dict[str, int]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    vars: tuple[Var, ...]
    fixed: dict[str, np.ndarray]
    placeholders: dict[str, Tensor]
    outputs_traced: dict[str, Value]
    dims: dict[str, tuple[int, int]]

    def __repr__(self) -> str:
        ins = ", ".join(str(i) for i in self.inputs)
        outs = ", ".join(str(o) for o in self.outputs)
        return f"<OnnxModel {self.source} ({ins}) -> ({outs})>"

    @property
    def op_counts(self) -> dict[str, int]:
        return dict(collections.Counter(n.op_type for n in walk_nodes(self.proto.graph)))

    def build(self, feeds: Mapping[str, Value]) -> dict[str, Value]:
        """Trace the model on ``feeds`` (one value per input); returns every graph output."""
        env: dict[str, Value | None] = {}
        env.update(self.fixed)
        env.update(feeds)
        for info in self.inputs:  # a low-precision input: its bits, or values rounded to it
            v = env.get(info.name)
            if is_lowp_dtype(info.dtype) and isinstance(v, Tensor):
                bits = v.dtype == storage_dtype(info.dtype)
                env[info.name] = LowP(v, info.dtype) if bits else encode(v, info.dtype)  # type: ignore[assignment]
        Tracer(self.opsets, self.source).run(self.proto.graph, env)
        return {o.name: env[o.name] for o in self.proto.graph.output}  # type: ignore[misc]


def _bound(value: Any, key: str, label: str) -> DimBound:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, tuple | list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    raise OnnxImportError(f"{label}: dims[{key!r}] must be an int or a (min, max) pair, got {value!r}")


def load(
    source: str | Path | bytes | Any,
    dims: Mapping[str, Any] | None = None,
    *,
    values: Mapping[str, Any] | None = None,
) -> OnnxModel:
    """Import an ONNX model with bounded symbolic dims.

    Args:
        source: a path, the model's bytes, or an ``onnx.ModelProto``.
        dims: bounds of the symbolic input dims: a named dim by its name
            (``{"batch": (1, 64)}``), an unnamed one as ``"<input>:<axis>"``; an int fixes it;
            a string makes a dim the same var as another key (``{"state:1": "input:0"}``).
        values: inputs fixed to a constant (e.g. ``{"sr": 16000}``), folded into the graph so
            branches on them are inlined; a session checks that feeds of them agree.

    Raises:
        OnnxImportError: an unreadable file, unbounded dims (all listed), a shape that depends
            on data. UnsupportedOpError: ops without a lowering (all listed, by node).
    """
    model, label, data = read_model(source)
    opsets = {(o.domain or ""): int(o.version) for o in model.opset_import}
    if "ai.onnx" in opsets:
        opsets[""] = opsets.pop("ai.onnx")
    bad = unsupported_nodes(model)
    if bad:
        listing = "; ".join(f"{name!r} ({op_type}: {why})" for name, op_type, why in bad)
        kinds = sorted({op_type for _, op_type, _ in bad})
        raise UnsupportedOpError(
            f"{label}: {len(bad)} node(s) use ops asyncjit cannot import ({', '.join(kinds)}): {listing}",
            tuple(bad),
        )
    given = dict(dims or {})
    fixed_values = {k: np.asarray(v) for k, v in (values or {}).items()}
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    known_names = {i.name for i in graph_inputs}
    unknown_fixed = set(fixed_values) - known_names
    if unknown_fixed:
        raise OnnxImportError(
            f"{label}: values= names no input: {sorted(unknown_fixed)} (inputs: {sorted(known_names)})"
        )
    variables: dict[str, Var] = {}
    used_keys: set[str] = set()
    missing: list[str] = []
    infos: list[TensorInfo] = []
    placeholders: dict[str, Tensor] = {}
    bounds_out: dict[str, tuple[int, int]] = {}
    for inp in graph_inputs:
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            raise UnsupportedOpError(
                f"{label}: input {inp.name!r} is not a tensor (sequence/map/optional)",
                ((inp.name, "input", "not a tensor"),),
            )
        dtype = np_dtype(tt.elem_type)
        if inp.name in fixed_values:
            fixed_values[inp.name] = fixed_values[inp.name].astype(dtype)
            continue
        if not tt.HasField("shape"):  # unknown rank (not a scalar, whose shape has no dims)
            raise OnnxImportError(
                f"{label}: input {inp.name!r} declares no shape, so its rank is unknown: asyncjit "
                "compiles for a known rank (declare its dims in the model, symbolic ones by name)"
            )
        shape: list[Dim] = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
                continue
            key = d.dim_param if d.dim_param else f"{inp.name}:{axis}"
            alt = f"{inp.name}:{axis}"
            chosen = key if key in given else alt if alt in given else None
            if chosen is None:
                missing.append(f"{inp.name} axis {axis} ({key!r})")
                shape.append(1)
                continue
            used_keys.add(chosen)
            seen = [chosen]
            while isinstance(given[chosen], str):  # an alias: this dim is the same as another
                chosen = given[chosen]
                if chosen not in given or chosen in seen:
                    raise OnnxImportError(f"{label}: dims[{seen[-1]!r}] = {chosen!r} names no bounded dim")
                seen.append(chosen)
                used_keys.add(chosen)
            b = _bound(given[chosen], chosen, label)
            if isinstance(b, int):
                shape.append(b)
                continue
            if chosen not in variables:
                name = _var_name(chosen, set(variables))
                try:
                    variables[chosen] = Var(name, b[0], b[1])
                except ValueError as exc:
                    raise OnnxImportError(f"{label}: dims[{chosen!r}]: {exc}") from None
                bounds_out[chosen] = b
            shape.append(variables[chosen])
        try:
            adt = storage_dtype(dtype) if is_lowp_dtype(dtype) else dt.from_numpy(dtype)
        except TypeError as exc:
            raise UnsupportedOpError(
                f"{label}: input {inp.name!r}: {exc}", ((inp.name, "input", str(exc)),)
            ) from None
        infos.append(TensorInfo(inp.name, tuple(shape), dtype))
        placeholders[inp.name] = Tensor.placeholder(shape, adt, name=inp.name)
    if missing:
        raise OnnxImportError(
            f"{label}: every symbolic input dim needs bounds; unbounded: {', '.join(missing)}. Pass "
            "dims={name: (min, max)} by dim name, or '<input>:<axis>' for unnamed dims"
        )
    unused = set(given) - used_keys
    if unused:
        raise OnnxImportError(f"{label}: dims= names no symbolic input dim: {sorted(unused)}")
    env: dict[str, Value | None] = {}
    env.update(fixed_values)
    env.update(placeholders)
    for info in infos:  # low-precision inputs: the placeholder holds their bits
        if is_lowp_dtype(info.dtype):
            env[info.name] = LowP(placeholders[info.name], info.dtype)  # type: ignore[assignment]
    Tracer(opsets, label).run(model.graph, env)
    traced: dict[str, Value] = {}
    out_infos: list[TensorInfo] = []
    for o in model.graph.output:
        v = env.get(o.name)
        if v is None:
            raise OnnxImportError(f"{label}: output {o.name!r} is never produced")
        traced[o.name] = v
        if isinstance(v, LowP) or (isinstance(v, np.ndarray) and is_lowp_dtype(v.dtype)):
            out_infos.append(TensorInfo(o.name, tuple(v.shape), v.dtype))
            continue
        t = as_tensor(v)
        out_infos.append(TensorInfo(o.name, t.shape, t.dtype.np))
    return OnnxModel(
        source=label,
        proto=model,
        model_bytes=data,
        opsets=opsets,
        inputs=tuple(infos),
        outputs=tuple(out_infos),
        vars=tuple(variables.values()),
        fixed=fixed_values,
        placeholders=placeholders,
        outputs_traced=traced,
        dims=bounds_out,
    )


_ = Sym
