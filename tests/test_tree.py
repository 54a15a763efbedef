"""Pytrees: flattening, unflattening, static keys and registration."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

from asyncjit.errors import StaticArgumentError
from asyncjit.tree import (
    register_pytree_node,
    static_key,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_paths,
    tree_unflatten,
)


class ConfigBox:
    """The seed's pytree: an array leaf and a static scalar."""

    def __init__(self, vec: Any, scale: Any) -> None:
        self.vec = vec
        self.scale = scale


register_pytree_node(
    ConfigBox,
    lambda box: ((box.vec,), {"scale": box.scale}),
    lambda aux, leaves: ConfigBox(*leaves, **aux),
)


@attrs.frozen
class Pair:
    left: Any
    right: Any
    tag: str = attrs.field(default="p", metadata={"static": True})


def test_builtin_containers_round_trip() -> None:
    """tuples, lists, dicts (sorted keys) and None flatten and rebuild exactly."""
    tree = {"b": [1, (2, None)], "a": 3.0}
    leaves, treedef = tree_flatten(tree)
    assert leaves == [3.0, 1, 2]
    assert tree_unflatten(treedef, leaves) == tree
    assert treedef.num_leaves == 3


def test_attrs_classes_flatten_fields_and_keep_static_ones_in_aux() -> None:
    """attrs fields are children unless marked ``metadata={"static": True}``."""
    p = Pair(np.ones(2), 5, tag="x")
    leaves, treedef = tree_flatten(p)
    assert len(leaves) == 2 and leaves[1] == 5
    back = tree_unflatten(treedef, leaves)
    assert back.tag == "x" and back.right == 5
    assert tree_flatten(Pair(1, 2, tag="y"))[1] != treedef


def test_registered_class_aux_is_static_and_leaves_are_dynamic() -> None:
    """Changing the leaf keeps the treedef; changing the static scalar changes it."""
    _, d1 = tree_flatten(ConfigBox(np.array([1.0, 2.0]), 2))
    _, d2 = tree_flatten(ConfigBox(np.array([3.0, 4.0]), 2))
    _, d3 = tree_flatten(ConfigBox(np.array([3.0, 4.0]), 3))
    assert d1 == d2 and hash(d1) == hash(d2)
    assert d1 != d3


def test_int_and_float_static_values_are_different_keys() -> None:
    """Unlike JAX, ``1`` and ``1.0`` (and ``True``) key differently."""
    assert static_key(1) != static_key(1.0)
    assert static_key(1) != static_key(True)
    _, d_int = tree_flatten(ConfigBox(np.zeros(2), 1))
    _, d_float = tree_flatten(ConfigBox(np.zeros(2), 1.0))
    assert d_int != d_float


def test_unhashable_static_value_raises_a_clear_error() -> None:
    """An unhashable aux value raises StaticArgumentError instead of keying by identity."""
    with pytest.raises(StaticArgumentError, match="unhashable"):
        tree_flatten(ConfigBox(np.zeros(2), np.zeros(3)))
    with pytest.raises(StaticArgumentError, match="set"):
        static_key({1, 2})


def test_static_key_of_containers_is_structural() -> None:
    """Lists and dicts key by their contents and types."""
    assert static_key([1, 2]) == static_key([1, 2])
    assert static_key([1, 2]) != static_key((1, 2))
    assert static_key({"a": 1}) != static_key({"a": 1.0})


def test_tree_map_over_two_trees() -> None:
    """``tree_map`` applies leafwise and rejects mismatched structures."""
    assert tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    with pytest.raises(ValueError, match="structures differ"):
        tree_map(lambda a, b: a, (1, 2), [1, 2])


def test_unflatten_checks_leaf_count() -> None:
    """Too few or too many leaves is a ValueError."""
    _, treedef = tree_flatten((1, 2))
    with pytest.raises(ValueError, match="too few"):
        tree_unflatten(treedef, [1])
    with pytest.raises(ValueError, match="too many"):
        tree_unflatten(treedef, [1, 2, 3])


def test_paths_name_each_leaf() -> None:
    """Leaf paths are readable, for cache-miss messages."""
    _, treedef = tree_flatten(({"x": 1, "y": [2]}, Pair(3, 4)))
    assert tree_paths(treedef) == ["[0]['x']", "[0]['y'][0]", "[1].left", "[1].right"]
    assert tree_leaves(({"x": 1},)) == [1]


def test_double_registration_is_rejected() -> None:
    """Registering a type twice is an error, not a silent override."""
    with pytest.raises(ValueError, match="already registered"):
        register_pytree_node(ConfigBox, lambda b: ((), None), lambda a, c: None)


def test_is_leaf_stops_descent() -> None:
    """``is_leaf`` treats matching nodes as leaves."""
    leaves, _ = tree_flatten([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), 3]
