"""Pytrees: nested containers whose leaves are dynamic and whose structure is static.

``tree_flatten(tree) -> (leaves, treedef)`` splits a value into its dynamic leaves (arrays,
buffers, tensors, Python numbers) and a hashable ``TreeDef`` that holds the structure and every
node's *aux data* (static). tuples, lists, dicts (keys sorted), ``None`` and attrs classes
flatten by default; ``register_pytree_node(cls, flatten, unflatten)`` adds more types.

Unlike JAX, static values are keyed by ``(type, value)``: ``1`` and ``1.0`` are different keys,
and an unhashable aux value raises ``StaticArgumentError`` instead of keying by identity.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs

from .errors import InvalidArgumentError, StaticArgumentError

__all__ = [
    "TreeDef",
    "flatten_like",
    "register_pytree_node",
    "static_key",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_paths",
    "tree_unflatten",
]

Flatten = Callable[[Any], tuple[Iterable[Any], Any]]
Unflatten = Callable[[Any, Sequence[Any]], Any]

_REGISTRY: dict[type, tuple[Flatten, Unflatten]] = {}


def register_pytree_node(cls: type, flatten: Flatten, unflatten: Unflatten) -> None:
    """Make instances of ``cls`` pytree nodes.

    Args:
        cls: the exact type (subclasses must be registered on their own).
        flatten: ``obj -> (children, aux)``; children are flattened further, aux is static and
            must be hashable (it becomes part of jit cache keys).
        unflatten: ``(aux, children) -> obj``.

    Raises:
        ValueError: if ``cls`` is already registered.
    """
    if cls in _REGISTRY:
        raise InvalidArgumentError(f"{cls.__qualname__} is already registered as a pytree node")
    _REGISTRY[cls] = (flatten, unflatten)
    _LEAF_TYPES.discard(cls)


# Types seen to be leaves (neither registered nor attrs): ``flatten_like``'s one-lookup check.
_LEAF_TYPES: set[type] = set()


def registry_size() -> int:
    """How many node types are registered; it changes with every registration (for caches)."""
    return len(_REGISTRY)


def is_leaf_type(cls: type) -> bool:
    """True when values of ``cls`` are leaves (neither registered nor attrs classes)."""
    if cls in _LEAF_TYPES:
        return True
    if cls in _REGISTRY or attrs.has(cls):
        return False
    _LEAF_TYPES.add(cls)
    return True


def static_key(value: Any) -> Hashable:
    """A cache key for a static value: ``(type, value)``, recursively for containers.

    Lists, tuples and dicts key by their contents (so ``[1, 2]`` is a usable static value);
    any other unhashable value is an error rather than a key by identity.

    Raises:
        StaticArgumentError: if the value (or a part of it) is unhashable.
    """
    if isinstance(value, tuple | list):
        return (type(value).__qualname__, tuple(static_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((static_key(k), static_key(v)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        raise StaticArgumentError(
            f"static value of type {type(value).__qualname__} is unhashable, so it cannot key the "
            f"compile cache; pass it as a dynamic argument, or make it hashable (e.g. a tuple "
            f"or a frozen attrs class)"
        ) from None
    return (type(value).__module__, type(value).__qualname__, value)


@attrs.frozen
class TreeDef:
    """The static structure of a pytree: a node kind, its aux key, and its children's defs.

    ``kind`` is ``"leaf"`` for a leaf, otherwise the registered type. ``aux`` is kept as given
    (for unflattening) and compared through ``aux_key`` (type-aware, hashable).
    """

    kind: Any
    aux: Any = attrs.field(eq=False)
    aux_key: Hashable
    children: tuple[TreeDef, ...]

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        name = self.kind.__qualname__ if isinstance(self.kind, type) else str(self.kind)
        inner = ", ".join(repr(c) for c in self.children)
        return f"{name}[{self.aux!r}]({inner})" if self.aux is not None else f"{name}({inner})"


_LEAF = TreeDef("leaf", None, None, ())


def _node_type(value: Any) -> tuple[Flatten, Unflatten] | None:
    cls = type(value)
    found = _REGISTRY.get(cls)
    if found is not None:
        return found
    if attrs.has(cls):
        return _attrs_flatten, _attrs_unflatten_for(cls)
    return None


def _attrs_flatten(obj: Any) -> tuple[list[Any], tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]]:
    """attrs classes: fields are children, except fields with ``metadata={"static": True}``."""
    dynamic, static = [], []
    for f in attrs.fields(type(obj)):
        if f.metadata.get("static"):
            static.append((f.name, getattr(obj, f.name)))
        else:
            dynamic.append(f.name)
    return [getattr(obj, n) for n in dynamic], (tuple(dynamic), tuple(static))


def _attrs_unflatten_for(cls: type) -> Unflatten:
    def unflatten(aux: Any, children: Sequence[Any]) -> Any:
        names, static = aux
        kwargs = dict(zip(names, children, strict=True))
        kwargs.update(static)
        return cls(**kwargs)

    return unflatten


register_pytree_node(tuple, lambda t: (t, None), lambda aux, ch: tuple(ch))
register_pytree_node(list, lambda t: (t, None), lambda aux, ch: list(ch))
register_pytree_node(
    dict,
    lambda d: ([d[k] for k in sorted(d)], tuple(sorted(d))),
    lambda aux, ch: dict(zip(aux, ch, strict=True)),
)
register_pytree_node(type(None), lambda n: ((), None), lambda aux, ch: None)


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """Split ``tree`` into its leaves (depth-first, left to right) and its ``TreeDef``.

    Raises:
        StaticArgumentError: if a node's aux data is unhashable.
    """
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, is_leaf)


def _flatten(tree: Any, leaves: list[Any], is_leaf: Callable[[Any], bool] | None) -> TreeDef:
    handlers = None if is_leaf is not None and is_leaf(tree) else _node_type(tree)
    if handlers is None:
        leaves.append(tree)
        return _LEAF
    flatten, _ = handlers
    children, aux = flatten(tree)
    defs = tuple(_flatten(c, leaves, is_leaf) for c in children)
    kind = type(tree)
    return TreeDef(kind, aux, static_key(aux), defs)


def flatten_like(treedef: TreeDef, tree: Any, leaves: list[Any]) -> bool:
    """Append ``tree``'s leaves to ``leaves`` if it has exactly ``treedef``'s structure.

    The fast check behind a jit cache hit: no ``TreeDef`` is built and no aux is keyed. It
    handles leaves, tuples, lists, ``None`` and dicts whose keys are all exactly ``str`` (where
    equal keys mean equal ``static_key``s); for anything else it returns False and the caller
    falls back to ``tree_flatten``. A False return may leave some leaves appended.
    """
    kind = treedef.kind
    cls = type(tree)
    if treedef is _LEAF or kind == "leaf":
        if cls not in _LEAF_TYPES and not is_leaf_type(cls):
            return False
        leaves.append(tree)
        return True
    if cls is not kind:
        return False
    defs = treedef.children
    if kind is tuple or kind is list:
        if len(tree) != len(defs):
            return False
        children = tree
    elif kind is dict:
        aux = treedef.aux
        if len(tree) != len(aux):
            return False
        for k in tree:
            if type(k) is not str:
                return False
        try:
            children = [tree[k] for k in aux]
        except (KeyError, TypeError):
            return False
    else:
        return tree is None  # None has no children; other registered nodes take the slow path
    for child, d in zip(children, defs):  # noqa: B905 - lengths checked above
        if d is _LEAF or d.kind == "leaf":  # identity first: ``type == str`` compares slowly
            ccls = type(child)
            if ccls not in _LEAF_TYPES and not is_leaf_type(ccls):
                return False
            leaves.append(child)
        elif not flatten_like(d, child, leaves):
            return False
    return True


def str_keyed(treedef: TreeDef) -> bool:
    """True when every dict in ``treedef`` has only ``str`` keys (what ``flatten_like`` handles)."""
    if treedef.kind is dict and any(type(k) is not str for k in treedef.aux):
        return False
    return all(str_keyed(c) for c in treedef.children)


def tree_unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild a pytree of ``treedef``'s structure from ``leaves``.

    Raises:
        ValueError: if the number of leaves does not match.
    """
    it = iter(leaves)
    out = _unflatten(treedef, it)
    if next(it, _SENTINEL) is not _SENTINEL:
        raise InvalidArgumentError(f"too many leaves for {treedef!r}")
    return out


_SENTINEL = object()


def _unflatten(treedef: TreeDef, it: Any) -> Any:
    if treedef.kind == "leaf":
        value = next(it, _SENTINEL)
        if value is _SENTINEL:
            raise InvalidArgumentError("too few leaves for the tree structure")
        return value
    children = [_unflatten(c, it) for c in treedef.children]
    handlers = _REGISTRY.get(treedef.kind)
    unflatten = handlers[1] if handlers else _attrs_unflatten_for(treedef.kind)
    return unflatten(treedef.aux, children)


def tree_leaves(tree: Any) -> list[Any]:
    return tree_flatten(tree)[0]


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply ``fn`` leafwise over one or more trees of the same structure."""
    leaves, treedef = tree_flatten(tree)
    others = []
    for r in rest:
        r_leaves, r_def = tree_flatten(r)
        if r_def != treedef:
            raise InvalidArgumentError(f"tree structures differ: {treedef!r} vs {r_def!r}")
        others.append(r_leaves)
    return tree_unflatten(treedef, [fn(*xs) for xs in zip(leaves, *others, strict=True)])


def tree_paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """A readable path for each leaf (``[0]['x'].vec``), used in cache-miss messages."""
    if treedef.kind == "leaf":
        return [prefix or "<root>"]
    out: list[str] = []
    if treedef.kind is dict:
        labels = [f"[{k!r}]" for k in treedef.aux]
    elif isinstance(treedef.kind, type) and attrs.has(treedef.kind) and treedef.kind not in _REGISTRY:
        labels = [f".{n}" for n in treedef.aux[0]]
    else:
        labels = [f"[{i}]" for i in range(len(treedef.children))]
    for label, child in zip(labels, treedef.children, strict=True):
        out.extend(tree_paths(child, prefix + label))
    return out
