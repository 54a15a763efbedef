"""The ``xla`` plugin: each partition exported with JAX as serialized StableHLO (``jax.export``).

Bytecode: ``b"AJXLA1\\n"``, an 8-byte header length, a JSON header (per entry: offset and length
of its ``jax.export`` blob and which partition inputs it takes), then the blobs. Shapes may use
plain vars (exported with JAX shape polymorphism, bounded by the vars' ranges); ops whose
attributes hold symbolic sizes (reshape/expand/slice to a var-dependent size) stay on the CPU.
Constants a partition reads are baked into the StableHLO. Needs the ``jax`` extra.

Like ``onnxruntime``, it claims only what it is forced to unless ``claim_all`` is set
(``ASYNCJIT_PLUGIN_XLA_CLAIM_ALL=1``): asyncjit's CPU compiler runs all of these ops itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..compiler._partition import CompiledResult, Subgraph
from ..errors import CompileError
from ..graph import Node
from ..symbolic import Var
from ._base import Plugin
from ._container import pack_entries, unpack_entries

__all__ = ["XlaPlugin"]

MAGIC = b"AJXLA1\n"
_DTYPES = {"float32", "int32", "bool"}


def _unary(jnp: Any, lax: Any) -> dict[str, Callable[[Any], Any]]:
    return {
        "exp": jnp.exp,
        "log": jnp.log,
        "sqrt": jnp.sqrt,
        "rsqrt": lax.rsqrt,
        "recip": lambda x: 1.0 / x,
        "tanh": jnp.tanh,
        "sigmoid": lambda x: 1.0 / (1.0 + jnp.exp(-x)),
        "sin": jnp.sin,
        "cos": jnp.cos,
        "erf": lax.erf,
        "floor": jnp.floor,
        "ceil": jnp.ceil,
        "neg": jnp.negative,
        "abs": jnp.abs,
        "relu": lambda x: jnp.maximum(x, 0),
    }


def _binary(jnp: Any) -> dict[str, Callable[[Any, Any], Any]]:
    return {
        "add": jnp.add,
        "sub": jnp.subtract,
        "mul": jnp.multiply,
        "div": jnp.divide,
        "pow": jnp.power,
        "maximum": jnp.maximum,
        "minimum": jnp.minimum,
        "lt": jnp.less,
        "le": jnp.less_equal,
        "gt": jnp.greater,
        "ge": jnp.greater_equal,
        "eq": jnp.equal,
        "ne": jnp.not_equal,
    }


_STATIC_ATTRS = {"reshape", "expand", "shrink"}
_OPS = frozenset(
    {
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "recip",
        "tanh",
        "sigmoid",
        "sin",
        "cos",
        "erf",
        "floor",
        "ceil",
        "neg",
        "abs",
        "relu",
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "lt",
        "le",
        "gt",
        "ge",
        "eq",
        "ne",
        "where",
        "matmul",
        "reduce",
        "permute",
        "cat",
        *_STATIC_ATTRS,
    }
)


def _dims_ok(node: Node) -> bool:
    return all(isinstance(d, int | Var) for n in (node, *node.inputs) for d in n.shape)


def _apply(jnp: Any, lax: Any, n: Node, args: list[Any]) -> Any:
    op = n.op
    unary, binary = _unary(jnp, lax), _binary(jnp)
    if op in unary:
        return unary[op](args[0]).astype(n.dtype.np)
    if op in binary:
        return binary[op](*args)
    if op == "where":
        return jnp.where(*args)
    if op == "matmul":
        return jnp.matmul(*args)
    if op == "reduce":
        fn = {"sum": jnp.sum, "prod": jnp.prod, "max": jnp.max, "min": jnp.min}[n.attrs["op"]]
        return fn(args[0], axis=tuple(n.attrs["axes"]), keepdims=True)
    if op == "permute":
        return jnp.transpose(args[0], tuple(n.attrs["order"]))
    if op == "cat":
        return jnp.concatenate(args, axis=int(n.attrs["axis"]))
    if op == "reshape":
        return jnp.reshape(args[0], tuple(int(d) for d in n.shape))
    if op == "expand":
        return jnp.broadcast_to(args[0], tuple(int(d) for d in n.shape))
    if op == "shrink":
        return args[0][tuple(slice(int(s), int(e), int(st)) for s, e, st in n.attrs["slices"])]
    raise CompileError(f"xla plugin cannot translate {op}")


class _Entry:
    __slots__ = ("exported", "takes")

    def __init__(self, exported: Any, takes: list[int]) -> None:
        self.exported = exported
        self.takes = takes


class XlaPlugin(Plugin):
    """Partitions exported as StableHLO with ``jax.export`` and run by JAX's XLA CPU client."""

    name: ClassVar[str] = "xla"
    manufacturer: ClassVar[str] = "Google (JAX/XLA)"
    ops: ClassVar[frozenset[str]] = _OPS
    default_options: ClassVar[Mapping[str, Any]] = {"claim_all": False}

    def __init__(self, options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        import jax

        super().__init__(options, **kwargs)
        self._jax = jax

    @property
    def version(self) -> str:  # type: ignore[override]
        return f"jax-{self._jax.__version__}"

    @property
    def hardware(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(sorted({d.platform for d in self._jax.devices()}))

    def can_run(self, node: Node) -> str | None:
        if node.op not in self.ops:
            return f"{node.op} has no JAX translation here"
        if any(n.dtype.name not in _DTYPES for n in (node, *node.inputs)):
            return f"dtype {node.dtype.name} (JAX runs 32-bit here)"
        if not _dims_ok(node):
            return "a shape with a symbolic expression (only plain vars export)"
        if node.op in _STATIC_ATTRS and not all(isinstance(d, int) for d in node.shape):
            return f"{node.op} to a var-dependent size"
        if node.op == "shrink" and not all(isinstance(v, int) for sl in node.attrs["slices"] for v in sl):
            return "a slice with symbolic bounds"
        return None

    def accepts(self, node: Node) -> str | None:
        if self.options.get("claim_all"):
            return None
        return "asyncjit's CPU compiler runs it (force it, or set claim_all)"

    def _export(self, sub: Subgraph) -> tuple[bytes, list[int]]:
        import jax.numpy as jnp
        from jax import export, lax

        takes = [k for k, x in enumerate(sub.inputs) if x.op != "const"]
        variables = sorted(
            {d for x in sub.inputs for d in x.shape if isinstance(d, Var)}, key=lambda v: v.name
        )
        scope = export.SymbolicScope(
            [c for v in variables for c in (f"{v.name} >= {v.min}", f"{v.name} <= {v.max}")]
        )
        specs = []
        for k in takes:
            x = sub.inputs[k]
            text = ", ".join(d.name if isinstance(d, Var) else str(d) for d in x.shape)
            shape = export.symbolic_shape(text, scope=scope) if x.shape else ()
            specs.append(self._jax.ShapeDtypeStruct(shape, x.dtype.np))  # type: ignore[no-untyped-call]

        def run(*arrays: Any) -> tuple[Any, ...]:
            values: dict[int, Any] = {}
            it = iter(arrays)
            for x in sub.inputs:
                values[x.id] = (
                    jnp.asarray(x.attrs["value"]).reshape(tuple(int(d) for d in x.shape))
                    if x.op == "const"
                    else next(it)
                )
            for n in sub.nodes:
                values[n.id] = _apply(jnp, lax, n, [values[i.id] for i in n.inputs])
            return tuple(values[o.id] for o in sub.outputs)

        exported = export.export(self._jax.jit(run))(*specs)
        return bytes(exported.serialize()), takes

    def compile(self, partitions: Sequence[Subgraph]) -> CompiledResult:
        entries = {}
        for k, sub in enumerate(partitions):
            blob, takes = self._export(sub)
            entries[f"partition_{k}"] = ({"takes": takes}, blob)
        return pack_entries(MAGIC, entries)

    def load(self, bytecode: bytes) -> dict[str, _Entry]:
        from jax import export

        return {
            entry: _Entry(export.deserialize(bytearray(blob)), h["takes"])
            for entry, (h, blob) in unpack_entries(MAGIC, bytecode, "xla").items()
        }

    def invoke(
        self,
        handle: Mapping[str, _Entry],
        entry: str,
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        vars: Mapping[str, int],
    ) -> None:
        e = handle[entry]
        results = e.exported.call(*[inputs[k] for k in e.takes])
        for out, res in zip(outputs, results, strict=True):
            np.copyto(out, np.asarray(res), casting="no")
