"""``dump(graph)``: a stable, diff-able text form of a graph (``Graph.dump()``).

Values are numbered by their position in the graph (``%0``, ``%1``, ...), not by node ids, so
two runs that build the same graph print the same text. Each line is one op with its inputs,
its attributes sorted by name (symbolic ones rendered, arrays as dtype, shape and a digest) and
its type with bounds; symbolic dims follow the type as written (``(t, 512)``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..symbolic import DataVar, Expr, Var
from ._types import tensor_type

if TYPE_CHECKING:
    from ..graph import Node
    from ..passes import Graph

__all__ = ["dump"]


def _attr(value: Any, names: Mapping[int, str]) -> str:
    if isinstance(value, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=6).hexdigest()
        return f"<{value.dtype}{list(value.shape)} {digest}>"
    if isinstance(value, DataVar):
        return f"{value.name}<={value.max}"
    if isinstance(value, Expr):
        return str(value)
    if isinstance(value, list | tuple):
        return "(" + ", ".join(_attr(v, names) for v in value) + ")"
    if isinstance(value, dict | MappingProxyType):
        return "{" + ", ".join(f"{k}: {_attr(v, names)}" for k, v in sorted(value.items())) + "}"
    name = getattr(value, "name", None)
    if name is not None and type(value).__name__ == "DType":
        return str(name)
    return repr(value)


def _type(node: Node) -> str:
    text = tensor_type(node.shape, node.dtype)
    if any(not isinstance(d, int) for d in node.shape):
        text += " (" + ", ".join(str(d) for d in node.shape) + ")"
    return text


def _var(v: Var) -> str:
    if isinstance(v, DataVar):
        return f"{v.name} in [{v.min}, {v.max}] set by {v.op or 'an op'}"
    return f"{v.name} in {v.bounds_text}"


def dump(graph: Graph) -> str:
    """The graph as text: a header with inputs and vars, one line per op, then the outputs."""
    nodes = graph.nodes
    names: dict[int, str] = {}
    for k, n in enumerate(nodes):
        names[n.id] = f"%{n.attrs['name']}" if n.op == "placeholder" else f"%{k}"
    args = ", ".join(f"{names[n.id]}: {_type(n)}" for n in graph.inputs)
    lines = [f"graph ({args})"]
    for v in (*graph.vars, *graph.data_vars):
        lines.append(f"  var {_var(v)}")
    for name, value in sorted(graph.pending.items()):
        lines.append(f"  pending {name} = {value!r}")
    for n in nodes:
        if n.op == "placeholder":
            continue
        ins = ", ".join(names[i.id] for i in n.inputs)
        extra = "".join(f" {k}={_attr(v, names)}" for k, v in sorted(n.attrs.items()))
        lines.append(f"  {names[n.id]} = {n.op}({ins}){extra} : {_type(n)}")
    lines.append("  return " + ", ".join(names[o.id] for o in graph.outputs))
    return "\n".join(lines) + "\n"
