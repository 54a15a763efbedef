"""``asyncjit.onnx.backend``: ONNX's ``Backend`` interface, which its conformance tests drive.

``prepare`` imports the model (unsupported ops fail here, all listed); the first ``run`` with a
given set of input shapes compiles a plan with every symbolic dim fixed to those sizes, so
models with free dims (as the test models often have) run without bounds being given.
``device="REFERENCE"`` interprets the traced graph with numpy instead of compiling it: the
same import and op lowerings, without LLVM (the conformance suite's fast path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ..errors import OnnxImportError
from ..symbolic import Var
from ._importer import OnnxModel, load, read_model, unsupported_nodes
from ._lowp import LowP, bits_array, is_lowp_dtype
from ._session import InferenceSession
from ._values import Sym, as_tensor

__all__ = [
    "AsyncjitBackend",
    "AsyncjitBackendRep",
    "dims_for_feed",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

DEVICES = ("CPU", "REFERENCE")
_DATA_SHAPED = ("computed from data", "must be a constant known at load time", "depends on data")


def dims_for_feed(model: Any, feed: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Every symbolic input dim of ``model`` fixed to the size ``feed`` has on it."""
    inits = {t.name for t in model.graph.initializer}
    dims: dict[str, int] = {}
    for inp in model.graph.input:
        if inp.name in inits or inp.name not in feed or not inp.type.HasField("tensor_type"):
            continue
        arr = feed[inp.name]
        for axis, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value") or axis >= np.ndim(arr):
                continue
            key = d.dim_param if d.dim_param else f"{inp.name}:{axis}"
            dims.setdefault(key, int(np.shape(arr)[axis]))
    return dims


class AsyncjitBackendRep(BackendRep):
    """A prepared model: compiled per set of input shapes on first use."""

    def __init__(self, model: Any, device: str) -> None:
        self.proto = model
        self.device = device.upper()
        self._sessions: dict[tuple[Any, ...], InferenceSession | OnnxModel] = {}
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]

    def _prepare(self, dims: dict[str, int], values: dict[str, np.ndarray]) -> InferenceSession | OnnxModel:
        if self.device == "REFERENCE":
            return load(self.proto, dims, values=values)
        return InferenceSession(self.proto, dims, values=values)

    def _feed(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            return {k: np.asarray(v) for k, v in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return {name: np.asarray(v) for name, v in zip(self.input_names, inputs, strict=False)}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feed = self._feed(inputs)
        key = tuple((k, v.shape, v.dtype.str) for k, v in sorted(feed.items()))
        prepared = self._sessions.get(key)
        if prepared is None:
            dims = dims_for_feed(self.proto, feed)
            try:
                prepared = self._prepare(dims, {})
            except OnnxImportError as exc:
                if not any(m in str(exc) for m in _DATA_SHAPED):
                    raise
                # a shape-like input (axes, pads, k, ...) fed at run time: fix the int inputs to
                # this feed's values, as a user would with values= (the plan is per feed anyway)
                ints = {
                    k: v
                    for k, v in feed.items()
                    if (v.dtype.kind in "iub" and v.size <= 4096) or v.size <= 16
                }
                dims = dims_for_feed(self.proto, {k: v for k, v in feed.items() if k not in ints})
                prepared = self._prepare(dims, ints)
                feed = {k: v for k, v in feed.items() if k not in ints}
            self._sessions[key] = prepared
        else:
            fixed = prepared.model.fixed if isinstance(prepared, InferenceSession) else prepared.fixed
            feed = {k: v for k, v in feed.items() if k not in fixed}
        if isinstance(prepared, InferenceSession):
            return tuple(prepared.run(None, feed))
        return tuple(_interpret(prepared, feed))


def _interpret(model: OnnxModel, feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The traced graph evaluated by the numpy reference interpreter (no compile)."""
    from ..reference import evaluate

    sess_inputs = {i.name for i in model.inputs}
    arrays = {
        model.placeholders[k]: bits_array(v) if is_lowp_dtype(v.dtype) else v
        for k, v in feed.items()
        if k in sess_inputs
    }
    var_values: dict[str, int] = {}
    for info in model.inputs:
        for d, size in zip(info.shape, feed[info.name].shape, strict=False):
            if isinstance(d, Var):
                var_values[d.name] = int(size)
    out: list[np.ndarray] = []
    tensors = []
    for o in model.outputs:
        v = model.outputs_traced[o.name]
        if isinstance(v, np.ndarray):
            out.append(v)
            continue
        if isinstance(v, Sym):
            from ..symbolic import evaluate as eval_dim

            flat = [eval_dim(e, var_values) if not isinstance(e, int) else e for e in v.values.reshape(-1)]
            out.append(np.array(flat, v.dtype).reshape(v.shape))
            continue
        view = v.dtype if isinstance(v, LowP) else None
        t = v.bits if isinstance(v, LowP) else as_tensor(v)
        out.append(None)  # type: ignore[arg-type]
        tensors.append((len(out) - 1, t, view))
    if tensors:
        used = {n.name for n in model.vars}
        results = evaluate(
            [t for _, t, _ in tensors], arrays, {k: v for k, v in var_values.items() if k in used}
        )
        for (i, _, view), r in zip(tensors, results, strict=True):
            out[i] = r if view is None else r.view(view)
    return out


class AsyncjitBackend(Backend):
    """``onnx.backend.base.Backend`` for asyncjit (class methods, as ONNX's runner calls them)."""

    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return not unsupported_nodes(model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() in DEVICES

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> AsyncjitBackendRep:
        """Check the model imports (every unsupported op raises here, listed); compile on run.

        Raises:
            OnnxImportError, UnsupportedOpError.
        """
        if not cls.supports_device(device):
            raise OnnxImportError(f"asyncjit's ONNX backend runs on {DEVICES}, not {device!r}")
        proto, _, _ = read_model(model)
        from ..errors import UnsupportedOpError

        bad = unsupported_nodes(proto)
        if bad:
            kinds = sorted({op_type for _, op_type, _ in bad})
            raise UnsupportedOpError(f"unsupported ops: {', '.join(kinds)}", tuple(bad))
        return AsyncjitBackendRep(proto, device)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """One node as a model of its own (input types from ``inputs``)."""
        from onnx import helper, numpy_helper

        arrays = [np.asarray(v) for v in inputs]
        ins = [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for name, a in zip(node.input, arrays, strict=False)
        ]
        outs = [helper.make_empty_tensor_value_info(name) for name in node.output]
        graph = helper.make_graph([node], "node", ins, outs)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", int(kwargs.get("opset_version", 21)))]
        )
        del numpy_helper
        return cls.run_model(model, arrays, device)


prepare = AsyncjitBackend.prepare
run_model = AsyncjitBackend.run_model
run_node = AsyncjitBackend.run_node
supports_device = AsyncjitBackend.supports_device
