"""Which graphs run data-parallel: rows of a split axis that never meet.

``split_axes`` answers, for a graph traced with one axis of some inputs replaced by the symbolic
*shard var*, whether running the same plan on each device's slice of those inputs (the var set to
the slice's length) gives each device's slice of every output, and along which output axis. It
does, when every op keeps the rows of the split axis apart: elementwise ops, reductions over
other axes, matmul on a batch or row axis, permutes, slices and pads that leave the axis whole,
and so on. A reduction over the split axis, an ``arange`` of its length, a reshape that merges it
with another axis, or any op not in the table below would need communication between devices
(an all-reduce or an all-gather), so the answer is None and the caller runs the whole graph on one
device instead.

The rules are a table of small functions (one per op kind, as in ``graph/_ops.py``). Each takes a
node and the split axis of each input (None: the input is the same on every device) and returns
the node's split axis, or raises ``_NotSplit``. A final check on every node guards them all: the
shard var may appear in a node's shape only as its whole split axis, and in no attribute except
those a rule vetted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..graph import Node, toposort
from ..symbolic import Expr, Var, free_vars

__all__ = ["split_axes"]


class _NotSplit(Exception):
    """This node mixes rows of the split axis (the message says how)."""


Rule = Callable[[Node, list[int | None], Var], int]


def _mentions(value: Any, var: Var) -> bool:
    """Does an attribute value (dims, tuples of them, nested) use ``var``?"""
    if isinstance(value, Expr):
        return var in free_vars(value)
    if isinstance(value, tuple | list):
        return any(_mentions(v, var) for v in value)
    return False


def _one_axis(node: Node, axes: list[int | None]) -> int:
    """Every input split, all on one axis: that axis."""
    split = set(axes)
    if None in split or len(split) != 1:
        raise _NotSplit(f"{node.op} mixes split inputs (axes {axes}) with others")
    (axis,) = split
    assert axis is not None
    return axis


def _elementwise(node: Node, axes: list[int | None], var: Var) -> int:
    return _one_axis(node, axes)


def _reduce(node: Node, axes: list[int | None], var: Var) -> int:
    axis = _one_axis(node, axes)
    if axis in tuple(node.attrs["axes"]):
        raise _NotSplit("a reduction over the split axis")
    return axis


def _matmul(node: Node, axes: list[int | None], var: Var) -> int:
    x, y = axes
    rank = node.ndim
    if x is not None and y is None and x == rank - 2:
        return x  # rows of the left operand
    if x is not None and x == y and x < rank - 2:
        return x  # a batch axis of both
    raise _NotSplit(f"matmul with operands split on axes {axes}")


def _permute(node: Node, axes: list[int | None], var: Var) -> int:
    return tuple(node.attrs["order"]).index(_one_axis(node, axes))


def _expand(node: Node, axes: list[int | None], var: Var) -> int:
    return _one_axis(node, axes)  # the final check makes sure the axis stays the var


def _reshape(node: Node, axes: list[int | None], var: Var) -> int:
    axis = _one_axis(node, axes)
    (x,) = node.inputs
    # row-major: when the dims up to and including the split axis are unchanged, each row of
    # it keeps exactly its own elements
    if tuple(node.shape[: axis + 1]) != tuple(x.shape[: axis + 1]):
        raise _NotSplit(f"a reshape {x.shape} -> {node.shape} that moves the split axis")
    return axis


def _shrink(node: Node, axes: list[int | None], var: Var) -> int:
    axis = _one_axis(node, axes)
    start, stop, step = node.attrs["slices"][axis]
    if not (start == 0 and step == 1 and stop == node.inputs[0].shape[axis]):
        raise _NotSplit("a slice of the split axis")
    if any(_mentions(s, var) for i, s in enumerate(node.attrs["slices"]) if i != axis):
        raise _NotSplit("a slice whose bounds use the split length")
    return axis


def _pad(node: Node, axes: list[int | None], var: Var) -> int:
    axis = _one_axis(node, axes)
    pads = node.attrs["pads"]
    if tuple(pads[axis]) != (0, 0) or any(_mentions(p, var) for p in pads):
        raise _NotSplit("a pad of the split axis")
    return axis


def _along_other_axis(node: Node, axes: list[int | None], var: Var) -> int:
    axis = _one_axis(node, axes)
    if node.attrs["axis"] == axis:
        raise _NotSplit(f"{node.op} along the split axis")
    return axis


def _batch_only(node: Node, axes: list[int | None], var: Var) -> int:
    """conv / pool: the batch axis (0) of the data input split, weights the same everywhere."""
    if axes[0] != 0 or any(a is not None for a in axes[1:]):
        raise _NotSplit(f"{node.op} with inputs split on axes {axes}")
    return 0


def _checked_rows(node: Node, axes: list[int | None], var: Var) -> int:
    """index_check: each shard checks its own rows of the indices (against the whole axis they
    index: a ``size`` that uses the split length is refused by the attribute guard)."""
    axis = axes[0]
    assert axis is not None  # a rule runs only when some input is split
    return axis


RULES: dict[str, Rule] = {
    "reduce": _reduce,
    "matmul": _matmul,
    "permute": _permute,
    "expand": _expand,
    "reshape": _reshape,
    "shrink": _shrink,
    "pad": _pad,
    "cat": _along_other_axis,
    "cumsum": _along_other_axis,
    "argext": _along_other_axis,
    "topk": _along_other_axis,
    "take_along_axis": _along_other_axis,
    "index_check": _checked_rows,
    "conv1d": _batch_only,
    "conv": _batch_only,
    "pool": _batch_only,
}
"""Ops that keep split rows apart, by name; the elementwise kind is handled as a whole."""

_VETTED_ATTRS = {"shape", "slices", "pads"}
"""Attributes a rule checks itself (the final shape check covers ``shape``)."""


def _node_axis(node: Node, axes: list[int | None], var: Var) -> int | None:
    from ..graph._ops import OPS

    if all(a is None for a in axes):
        if node.op == "expand" and var in free_vars(node.shape):
            # a broadcast of something the same everywhere to the split length: split it
            return next(i for i, d in enumerate(node.shape) if d == var)
        out = None
    elif OPS[node.op].kind == "elementwise":
        out = _elementwise(node, axes, var)
    else:
        rule = RULES.get(node.op)
        if rule is None:
            raise _NotSplit(f"no data-parallel rule for {node.op!r}")
        out = rule(node, axes, var)
    # the guard under every rule: the var is the split axis and nothing else
    if out is None:
        if var in free_vars(node.shape):
            raise _NotSplit(f"{node.op} makes the split length a dim of an unsplit value")
    else:
        if node.shape[out] != var or any(var in free_vars(d) for i, d in enumerate(node.shape) if i != out):
            raise _NotSplit(f"{node.op} output {node.shape} does not keep the split axis {out} whole")
    vetted = _VETTED_ATTRS if node.op in RULES or node.op == "expand" else frozenset()
    if any(_mentions(v, var) for k, v in node.attrs.items() if k not in vetted):
        raise _NotSplit(f"{node.op} uses the split length in its attributes")
    return out


def split_axes(
    outputs: Sequence[Node], inputs: Mapping[Node, int | None], var: Var
) -> tuple[tuple[int | None, ...] | None, str]:
    """(each output's split axis or None for outputs equal on every device, "") when the graph
    runs data-parallel over ``var``; (None, the reason) when it does not.

    Args:
        outputs: the graph's outputs.
        inputs: the split axis of each placeholder (where its dim is ``var``), None for
            placeholders every device gets whole.
        var: the shard var: the length of each device's slice.
    """
    state: dict[int, int | None] = {}
    try:
        for node in toposort(list(outputs)):
            if node.op == "placeholder":
                axis = inputs.get(node)
                if axis is None and var in free_vars(node.shape):
                    raise _NotSplit("an unsplit input has the split length as a dim")
                state[node.id] = axis
                continue
            state[node.id] = _node_axis(node, [state[i.id] for i in node.inputs], var)
    except _NotSplit as exc:
        return None, str(exc)
    return tuple(state[o.id] for o in outputs), ""
