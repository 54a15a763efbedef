"""The ONNX op table: one small function per op, versioned by the opset where semantics changed.

``@op("Softmax", since=13)`` registers the lowering used for models whose opset (of the op's
domain) is 13 or newer; an older model gets the newest entry registered for an earlier version.
Each function takes the node (its attributes, name, opset) and its input values (``Tensor``,
``np.ndarray``, ``Sym`` or None for an omitted optional input) and returns its output values.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..errors import OnnxImportError
from ._values import Sym, Value, as_tensor, dims_of

if TYPE_CHECKING:
    from ..tensor import Tensor
    from ._importer import Tracer

__all__ = ["OPS", "NodeCtx", "OpDef", "checked", "lookup", "op", "supported_ops"]

Lowering = Callable[["NodeCtx", list[Value | None]], "Sequence[Value | None] | Value"]


@attrs.frozen
class OpDef:
    """One lowering: the op, its domain, the first opset it applies to and the function."""

    op_type: str
    domain: str
    since: int
    fn: Lowering


OPS: dict[tuple[str, str], list[OpDef]] = {}


def op(*names: str, since: int = 1, domain: str = "") -> Callable[[Lowering], Lowering]:
    """Register ``fn`` as the lowering of ``names`` from opset ``since`` on."""

    def register(fn: Lowering) -> Lowering:
        for name in names:
            entries = OPS.setdefault((domain, name), [])
            entries.append(OpDef(name, domain, since, fn))
            entries.sort(key=lambda d: d.since)
        return fn

    return register


def lookup(domain: str, op_type: str, opset: int) -> OpDef | None:
    """The lowering of ``op_type`` for a model importing ``domain`` at version ``opset``."""
    entries = OPS.get(("" if domain == "ai.onnx" else domain, op_type))
    if not entries:
        return None
    i = bisect.bisect_right([d.since for d in entries], opset)
    return entries[i - 1] if i else entries[0]


def supported_ops() -> list[str]:
    """The op types of the default domain the importer lowers, sorted."""
    return sorted(name for (domain, name) in OPS if domain == "")


class NodeCtx:
    """What a lowering sees of its node: attributes, name, op type and opset."""

    __slots__ = ("attrs", "name", "op_type", "opset", "proto", "tracer")

    def __init__(self, proto: Any, attrs_: dict[str, Any], opset: int, tracer: Tracer) -> None:
        self.proto = proto
        self.attrs = attrs_
        self.name = proto.name or f"{proto.op_type}({', '.join(proto.output)})"
        self.op_type = proto.op_type
        self.opset = opset
        self.tracer = tracer

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def flag(self, name: str, default: int) -> bool:
        """A 0/1 attribute (``keepdims``, ``transA``, ``interleaved``, ...) as a bool.

        Raises:
            OnnxImportError: any other value (ONNX Runtime reads ``== 1``, ONNX's reference
                implementation ``!= 0``: a model with 2 or -1 means different things to them).
        """
        value = self.attrs.get(name, default)
        if value not in (0, 1) or isinstance(value, float):
            raise self.fail(f"attribute {name!r} must be 0 or 1, got {value!r}")
        return bool(value)

    def fail(self, why: str) -> OnnxImportError:
        """An import error naming this node."""
        return OnnxImportError(f"node {self.name!r} ({self.op_type}): {why}")

    def t(self, v: Value | None) -> Tensor:
        """An input as a ``Tensor`` (an omitted input is an error naming the node)."""
        if v is None:
            raise self.fail("a required input is missing")
        return as_tensor(v)

    def ints(self, v: Value | None, what: str) -> list[Any]:
        """A shape-like input as a list of dims; it must be known at load time."""
        if v is None:
            raise self.fail(f"{what} is missing")
        if not isinstance(v, np.ndarray | Sym):
            raise self.fail(
                f"{what} is computed from data at run time; asyncjit compiles one plan per bounded "
                "shape, so a shape that depends on input values cannot be imported"
            )
        return dims_of(v)

    def const(self, v: Value | None, what: str) -> np.ndarray:
        """An input that must be a load-time constant (no symbolic elements)."""
        if not isinstance(v, np.ndarray):
            raise self.fail(f"{what} must be a constant known at load time")
        return v


def checked(n: NodeCtx, index: Tensor, size: Any) -> Tensor:
    """``index`` (wrapped to ``[0, size)`` already) with a run failing with
    ``IndexOutOfRangeError`` naming node ``n`` if a value is outside: ONNX Runtime fails such a
    run, where a bare gather would clamp the index and a scatter drop it. Inside a branch or
    loop iteration that runs only when a condition from data holds (``tracer.guard``), only
    when it holds: ONNX Runtime never runs the other."""
    return index.checked_index(size, f"node {n.name!r} ({n.op_type})", when=n.tracer.guard)
