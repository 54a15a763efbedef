"""The reference backend: runs any graph with numpy, for any binding of its vars within bounds.

This interpreter defines what every graph means (see ``asyncjit.graph._ops`` for the semantics
decisions); compiled code is tested against it. It is slow by design and never on a hot path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .dtypes import check_array_dtype
from .errors import InputBufferNotFoundError, ShapeMismatchError, VarBoundsError
from .graph import OPS, Node, as_node, defined_var, graph_vars, shape_str, toposort
from .symbolic import DataVar, check_bindings
from .symbolic import evaluate as eval_dim

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["evaluate", "run_nodes"]

InputKey = "Tensor | Node | str"


@overload
def evaluate(
    outputs: Tensor | Node,
    inputs: Mapping[Any, Any] | None = ...,
    var_values: Mapping[str, int] | None = ...,
) -> np.ndarray: ...


@overload
def evaluate(
    outputs: Sequence[Tensor | Node],
    inputs: Mapping[Any, Any] | None = ...,
    var_values: Mapping[str, int] | None = ...,
) -> list[np.ndarray]: ...


def evaluate(
    outputs: Tensor | Node | Sequence[Tensor | Node],
    inputs: Mapping[Any, Any] | None = None,
    var_values: Mapping[str, int] | None = None,
) -> np.ndarray | list[np.ndarray]:
    """Evaluate one output (returns an array) or a sequence of outputs (returns a list).

    Args:
        outputs: ``Tensor``/``Node`` or a sequence of them.
        inputs: arrays keyed by placeholder ``Tensor``, ``Node`` or name. Arrays must have the
            placeholder's dtype exactly and its shape under ``var_values``.
        var_values: a value for every var the graph uses, within its bounds.

    Raises:
        VarBoundsError: a var is unbound, out of bounds, or unknown to the graph.
        InputBufferNotFoundError: a placeholder has no array, or a name matches no placeholder.
        ShapeMismatchError / DTypeMismatchError: an input does not match its placeholder.
    """
    single = not isinstance(outputs, Sequence)
    out_nodes = [as_node(outputs)] if single else [as_node(o) for o in outputs]  # type: ignore[union-attr]
    results = run_nodes(out_nodes, inputs or {}, var_values or {})
    return results[0] if single else results


def run_nodes(
    out_nodes: Sequence[Node],
    inputs: Mapping[Any, Any],
    var_values: Mapping[str, int],
    sizes: dict[str, int] | None = None,
) -> list[np.ndarray]:
    """``evaluate`` on nodes; returns one array per output node. ``sizes``, if given, receives
    the data-dependent sizes the run computed, by name."""
    order = toposort(out_nodes)
    # data-dependent sizes are set by the ops that compute them, never by the caller
    variables = tuple(v for v in graph_vars(order) if not isinstance(v, DataVar))
    # vars of fed placeholders the outputs do not use may be given too (a compiled plan takes
    # them); they are checked against their bounds but never required
    fed = [as_node(k) for k in inputs if not isinstance(k, str)]
    extra = [
        v
        for v in graph_vars(toposort([n for n in fed if n.op == "placeholder"]))
        if v not in variables and v.name in var_values and not isinstance(v, DataVar)
    ]
    bindings = dict(var_values)
    unknown = set(bindings) - {v.name for v in (*variables, *extra)}
    if unknown:
        raise VarBoundsError(
            f"unknown var(s) {sorted(unknown)}; the graph uses {[v.name for v in variables]}"
        )
    check_bindings((*variables, *extra), bindings)

    placeholders: dict[str, list[Node]] = {}
    for n in order:
        if n.op == "placeholder":
            placeholders.setdefault(n.attrs["name"], []).append(n)
    feed: dict[int, Any] = {}
    for key, value in inputs.items():
        if isinstance(key, str):
            if key not in placeholders:
                raise InputBufferNotFoundError(
                    f"no placeholder named {key!r} in this graph (have {sorted(placeholders)})"
                )
            if len(placeholders[key]) > 1:
                raise InputBufferNotFoundError(
                    f"{len(placeholders[key])} placeholders are named {key!r}; feed them by Tensor"
                )
            feed[placeholders[key][0].id] = value
            continue
        node = as_node(key)
        if node.op != "placeholder":
            # feeding a computed value would be silently ignored; it cannot override the node
            raise InputBufferNotFoundError(f"input %{node.id} ({node.op}) is not a placeholder")
        feed[node.id] = value  # placeholders the outputs do not use are allowed (a full feed dict)

    values: dict[int, np.ndarray] = {}
    for node in order:
        if node.op == "placeholder":
            values[node.id] = _bind_input(node, feed, bindings)
            continue
        args = [values[i.id] for i in node.inputs]
        result = OPS[node.op].reference(node, args, bindings)
        made = defined_var(node)
        if made is not None:  # the op checked the size against its bound
            bindings[made[0].name] = int(result.shape[made[1]])
            if sizes is not None:
                sizes[made[0].name] = bindings[made[0].name]
        want = tuple(eval_dim(d, bindings) for d in node.shape)
        if result.shape != want or result.dtype != node.dtype.np:
            raise AssertionError(
                f"reference of {node!r} gave {result.dtype}{result.shape}, expected "
                f"{node.dtype.name}{want}: this is an asyncjit bug"
            )
        values[node.id] = result
    # outputs own their memory: never a view of a caller's input or a frozen constant
    return [_owned(values[n.id]) for n in out_nodes]


def _owned(value: np.ndarray) -> np.ndarray:
    return value if value.flags.owndata and value.flags.writeable else value.copy()


def _bind_input(node: Node, feed: Mapping[int, Any], bindings: Mapping[str, int]) -> np.ndarray:
    name = node.attrs["name"]
    if node.id not in feed:
        raise InputBufferNotFoundError(f"no array given for placeholder {name!r}")
    arr = np.asarray(feed[node.id])
    check_array_dtype(arr, node.dtype, f"input {name!r}")
    want = tuple(eval_dim(d, bindings) for d in node.shape)
    if arr.shape != want:
        raise ShapeMismatchError(
            f"input {name!r}: expected shape {want} (placeholder {shape_str(node.shape)} at "
            f"{dict(bindings)}), got {arr.shape}"
        )
    view = arr.view()
    view.flags.writeable = False  # the caller's array is never written, nor returned as an output
    return view
