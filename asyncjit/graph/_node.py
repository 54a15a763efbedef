"""SSA graph nodes: an op, its input nodes, a dtype, a shape of ints and symbolic dims, attrs.

Nodes are immutable once made and compared by identity; ``structural_key`` gives the value key
that CSE and cache keys use. ``make_node`` is the only constructor that callers should use: it
runs the op's shape/dtype rule, so an ill-typed node never exists.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
from attrs import define, field

from ..dtypes import DType
from ..errors import ArgumentTypeError, TensorError, VarBoundsError
from ..symbolic import Dim, Var, free_vars

__all__ = ["Node", "as_node", "graph_vars", "make_node", "shape_str", "structural_key", "toposort"]

_ids = itertools.count()


@define(eq=False, repr=False)
class Node:
    """One SSA value. Build with ``make_node``; never mutate."""

    op: str
    inputs: tuple[Node, ...]
    dtype: DType
    shape: tuple[Dim, ...]
    attrs: Mapping[str, Any]
    id: int = field(init=False, factory=lambda: next(_ids))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        extra = "".join(f" {k}={_short(v)}" for k, v in self.attrs.items())
        ins = ",".join(f"%{i.id}" for i in self.inputs)
        return f"%{self.id} = {self.op}({ins}){extra} : {self.dtype.name}[{dims}]"


def _short(v: object) -> str:
    if isinstance(v, np.ndarray):
        return f"<array {v.dtype}{list(v.shape)}>"
    return str(v)


def as_node(x: Any) -> Node:
    """The graph node of a ``Tensor`` (anything with a ``.node``) or of a ``Node`` itself."""
    if isinstance(x, Node):
        return x
    node = getattr(x, "node", None)
    if isinstance(node, Node):
        return node
    raise ArgumentTypeError(f"expected a Tensor or Node, got {type(x).__name__}")


def make_node(op: str, inputs: Sequence[Node], /, **node_attrs: Any) -> Node:
    """Create a node after checking it with the op's shape/dtype rule.

    Raises:
        TensorError: if the op rejects the inputs or attrs (the message names both shapes).
    """
    from ._ops import OPS

    try:
        opdef = OPS[op]
    except KeyError:
        raise TensorError(f"unknown op {op!r}") from None
    ins = tuple(inputs)
    shape, dtype = opdef.infer(ins, node_attrs)
    return Node(op, ins, dtype, tuple(shape), MappingProxyType(dict(node_attrs)))


_DIGESTS: dict[int, tuple[weakref.ref[np.ndarray], str]] = {}
_DIGESTS_LOCK = threading.Lock()


def _forget(key: int, ref: weakref.ref[np.ndarray]) -> None:
    with _DIGESTS_LOCK:
        if key in _DIGESTS and _DIGESTS[key][0] is ref:
            del _DIGESTS[key]


def _digest(value: np.ndarray) -> str:
    """The array's content hash, memoised for frozen arrays that own their data (constants).

    CSE, the plan key and the passes hash every node's attrs; a model's weights (100 MB for a
    ResNet-50) would be hashed again on each of them. A read-only array that owns its memory
    cannot change under us (``Tensor.const`` makes such a copy), so its digest is kept while it
    lives; any other array is hashed each time.
    """
    frozen = not value.flags.writeable and value.base is None
    if frozen:
        with _DIGESTS_LOCK:
            hit = _DIGESTS.get(id(value))
        if hit is not None and hit[0]() is value:
            return hit[1]
    digest = hashlib.blake2b(np.asarray(value, order="C").tobytes(), digest_size=16).hexdigest()
    if frozen:
        key = id(value)
        ref = weakref.ref(value, functools.partial(_forget, key))
        with _DIGESTS_LOCK:
            _DIGESTS[key] = (ref, digest)
    return digest


def _freeze(value: Any) -> Hashable:
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, _digest(value))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict | MappingProxyType):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def structural_key(node: Node, input_keys: Iterable[Hashable]) -> Hashable:
    """A hashable value equal for nodes that compute the same thing from the same inputs."""
    return (
        node.op,
        tuple(input_keys),
        node.dtype,
        node.shape,
        tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items())),
    )


def toposort(outputs: Iterable[Node]) -> list[Node]:
    """Every node reachable from ``outputs``, inputs before users (iterative: deep graphs are fine)."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node.id in seen:
                continue
            seen.add(node.id)
            stack.append((node, True))
            stack.extend((i, False) for i in reversed(node.inputs) if i.id not in seen)
    if any(n.op == "prefix" for n in order):
        return _after_sizes(order)
    return order


def _after_sizes(order: list[Node]) -> list[Node]:
    """``order`` with every node that uses a data-dependent size after the node that sets it,
    even without a data path between them (``expand`` of a constant to a masked tensor's shape):
    evaluators bind the size when its op runs."""
    import heapq

    from ..symbolic import DataVar

    setter = {n.attrs["size_var"].name: n for n in order if n.op == "prefix"}
    pos = {n.id: k for k, n in enumerate(order)}
    deps: dict[int, set[int]] = {}
    users: dict[int, list[int]] = {}
    for n in order:
        found = set(free_vars(n.shape))
        for v in n.attrs.values():
            found |= _attr_vars(v)
        ds = {i.id for i in n.inputs}
        for v in found:
            if isinstance(v, DataVar) and v.name in setter and setter[v.name] is not n:
                ds.add(setter[v.name].id)
        deps[n.id] = ds
        for d in ds:
            users.setdefault(d, []).append(n.id)
    waiting = {k: len(v) for k, v in deps.items()}
    ready = [pos[k] for k, c in waiting.items() if c == 0]
    heapq.heapify(ready)
    out: list[Node] = []
    while ready:
        node = order[heapq.heappop(ready)]
        out.append(node)
        for u in users.get(node.id, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, pos[u])
    assert len(out) == len(order), "a data-dependent size is used before the op that sets it"
    return out


def graph_vars(nodes: Iterable[Node]) -> tuple[Var, ...]:
    """The vars a graph's shapes and symbolic attrs use, sorted by name.

    Raises:
        ValueError: if two different vars share a name.
    """
    found: set[Var] = set()
    for n in nodes:
        found |= free_vars(n.shape)
        for v in n.attrs.values():
            found |= _attr_vars(v)
    by_name: dict[str, Var] = {}
    for v in found:
        other = by_name.setdefault(v.name, v)
        if other != v:
            raise VarBoundsError(f"two different vars named {v.name!r}: {other!r} and {v!r}")
    return tuple(sorted(found, key=lambda v: v.name))


def _attr_vars(value: Any) -> frozenset[Var]:
    from ..symbolic import Expr

    if isinstance(value, Expr):
        return free_vars(value)
    if isinstance(value, list | tuple):
        out: frozenset[Var] = frozenset()
        for v in value:
            out |= _attr_vars(v)
        return out
    return frozenset()


def shape_str(shape: Sequence[Dim]) -> str:
    """``(b, 3, t//2)`` style text for messages."""
    inner = ", ".join(str(d) for d in shape)
    return f"({inner}{',' if len(shape) == 1 else ''})"
