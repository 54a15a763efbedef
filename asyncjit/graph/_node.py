"""SSA graph nodes: an op, its input nodes, a dtype, a shape of ints and symbolic dims, attrs.

Nodes are immutable once made and compared by identity; ``structural_key`` gives the value key
that CSE and cache keys use. ``make_node`` is the only constructor that callers should use: it
runs the op's shape/dtype rule, so an ill-typed node never exists.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
from attrs import define, field

from ..dtypes import DType
from ..errors import ArgumentTypeError, OutOfMemoryError, TensorError, VarBoundsError
from ..symbolic import UNBOUNDED, Dim, Var, free_vars

__all__ = [
    "Node",
    "as_node",
    "aligned_copy",
    "allocate_array",
    "broadcast_core",
    "content_digest",
    "derived_const",
    "graph_vars",
    "make_node",
    "shape_str",
    "structural_key",
    "toposort",
]

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
    huge = [d for d in shape if isinstance(d, int) and d > UNBOUNDED]
    if huge:  # generated code indexes with i64: such a dim (of an empty tensor) would wrap
        raise TensorError(f"{op}: dim {huge[0]} of {shape_str(tuple(shape))} is larger than 2^62")
    return Node(op, ins, dtype, tuple(shape), MappingProxyType(dict(node_attrs)))


_DIGESTS: dict[int, tuple[weakref.ref[np.ndarray], str]] = {}
_DIGESTS_LOCK = threading.Lock()


def _forget(key: int, ref: weakref.ref[np.ndarray]) -> None:
    with _DIGESTS_LOCK:
        if key in _DIGESTS and _DIGESTS[key][0] is ref:
            del _DIGESTS[key]


def broadcast_core(value: np.ndarray) -> np.ndarray | None:
    """The data of a broadcast view (``value`` with a zero stride on some axis of length > 1):
    ``value`` at index 0 of those axes, shaped with 1 there, so that ``np.broadcast_to(core,
    value.shape)`` equals ``value``; ``None`` for any other array.

    Such a ``const`` (a folded ``ConstantOfShape`` weight) is hashed, serialized and cached as its
    core, and written out only when an executable is built from it.
    """
    if value.ndim == 0 or value.size <= 1:
        return None
    pairs = zip(value.shape, value.strides, strict=True)
    axes = [ax for ax, (n, st) in enumerate(pairs) if st == 0 and n > 1]
    if not axes:
        return None
    index = tuple(slice(0, 1) if ax in axes else slice(None) for ax in range(value.ndim))
    return np.ascontiguousarray(value[index])


CONST_ALIGN = 64


def allocate_array(shape: Any, dtype: Any, what: str, *, zeroed: bool = False) -> np.ndarray:
    """``np.empty`` (``np.zeros`` when ``zeroed``) of ``shape``, or ``OutOfMemoryError`` naming
    ``what``: numpy's own ``MemoryError`` says only the size, and what is asked for may be a
    plan's arena sized for its largest var values, or an output a model sized."""
    try:
        return (np.zeros if zeroed else np.empty)(shape, dtype)
    except (MemoryError, ValueError) as exc:  # ValueError: a size numpy cannot even express
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        nbytes = math.prod(dims) * np.dtype(dtype).itemsize
        raise OutOfMemoryError(
            f"cannot allocate {nbytes:,} bytes ({np.dtype(dtype).name}{list(dims)}) for {what}: {exc}"
        ) from None


def aligned_copy(value: Any) -> np.ndarray:
    """A frozen C-contiguous copy of ``value`` at a 64-byte boundary (0-d stays 0-d).

    numpy's large allocations start 16 bytes into a page, where every other 32- or 64-byte
    vector load of a weight splits a cache line; constants are copied here once (``Tensor.const``,
    folding, loading an executable), so executables can use them as they are.
    """
    arr = np.asarray(value)
    raw = np.empty(arr.nbytes + CONST_ALIGN, np.uint8)
    start = -raw.ctypes.data % CONST_ALIGN
    out = raw[start : start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    out.setflags(write=False)
    raw.setflags(write=False)
    return out


def _owned_frozen(value: np.ndarray) -> bool:
    """Read-only and owning its memory, or a read-only view of such an array (``aligned_copy``):
    it cannot change while it lives."""
    if value.flags.writeable:
        return False
    base = value.base
    return base is None or (isinstance(base, np.ndarray) and base.base is None and not base.flags.writeable)


def _digest(value: np.ndarray) -> str:
    """The array's content hash, memoised for frozen arrays that own their data (constants).

    CSE, the plan key and the passes hash every node's attrs; a model's weights (100 MB for a
    ResNet-50) would be hashed again on each of them. A read-only array that owns its memory
    cannot change under us (``Tensor.const`` makes such a copy), so its digest is kept while it
    lives; any other array is hashed each time.
    """
    frozen = _owned_frozen(value)
    if frozen:
        with _DIGESTS_LOCK:
            hit = _DIGESTS.get(id(value))
        if hit is not None and hit[0]() is value:
            return hit[1]
    core = broadcast_core(value)
    if core is not None:  # a broadcast weight: its data, not the written-out array, is hashed
        body = repr(("broadcast", value.shape, core.shape)).encode() + core.tobytes()
    else:
        body = np.asarray(value, order="C").tobytes()
    digest = hashlib.blake2b(body, digest_size=16).hexdigest()
    if frozen:
        key = id(value)
        ref = weakref.ref(value, functools.partial(_forget, key))
        with _DIGESTS_LOCK:
            _DIGESTS[key] = (ref, digest)
    return digest


def derived_const(value: Any, origin: Hashable) -> np.ndarray:
    """``aligned_copy(value)`` whose digest is derived from ``origin`` instead of hashed.

    For a constant laid out from another by pure data movement (a conv weight in matmul panels):
    ``origin`` names the source's digest and the layout, which determine every byte, so hashing
    the copy again (hundreds of MB for a large model, on every compile, warm or cold) would only
    find the same answer. ``origin`` must be built of values with a stable ``repr`` (strings,
    ints, tuples).
    """
    out = aligned_copy(value)
    digest = hashlib.blake2b(repr(("derived", origin)).encode(), digest_size=16).hexdigest()
    key = id(out)
    ref = weakref.ref(out, functools.partial(_forget, key))
    with _DIGESTS_LOCK:
        _DIGESTS[key] = (ref, digest)
    return out


def content_digest(value: np.ndarray) -> str:
    """The digest CSE and the plan key use for ``value`` (memoised for frozen constants)."""
    return _digest(value)


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
