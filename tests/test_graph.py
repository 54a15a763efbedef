"""The graph: SSA nodes, the op registry, toposort, structural keys and graph_vars."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, float32, int32
from asyncjit.errors import TensorError
from asyncjit.graph import OPS, Node, OpDef, graph_vars, make_node, shape_str, structural_key, toposort
from asyncjit.symbolic import smin

t = Var("t", 1, 8)


def _ph(shape: tuple[object, ...] = (2, 3), name: str = "x") -> Node:
    return make_node("placeholder", (), name=name, shape=shape, dtype=float32)


class TestMakeNode:
    def test_fields_and_repr(self) -> None:
        """make_node runs the shape rule and records op, inputs, dtype, shape and attrs."""
        x = _ph((2, t))
        y = make_node("exp", (x,))
        assert (y.op, y.inputs, y.dtype, y.shape, y.ndim) == ("exp", (x,), float32, (2, t), 2)
        assert repr(y) == f"%{y.id} = exp(%{x.id}) : float32[2, t]"
        assert (
            repr(x) == f"%{x.id} = placeholder() name=x shape=(2, Var('t', 1, 8)) "
            "dtype=asyncjit.float32 : float32[2, t]"
        )

    def test_attrs_are_read_only(self) -> None:
        """Node attrs cannot be changed after creation."""
        x = _ph()
        with pytest.raises(TypeError):
            x.attrs["name"] = "y"  # type: ignore[index]

    def test_ids_increase_and_identity_equality(self) -> None:
        """Each node has a fresh id; nodes compare by identity, not by value."""
        a, b = _ph(), _ph()
        assert b.id > a.id
        assert a != b and a == a

    def test_unknown_op(self) -> None:
        """An unknown op name is a ValueError."""
        with pytest.raises(ValueError, match=r"unknown op 'frobnicate'"):
            make_node("frobnicate", ())

    def test_rule_rejects_bad_inputs(self) -> None:
        """A rule violation raises TensorError at creation, naming both shapes."""
        with pytest.raises(TensorError, match=r"add: operand shapes differ: \(2, 3\) vs \(3, 2\)"):
            make_node("add", (_ph((2, 3)), _ph((3, 2))))

    def test_const_array_attr_repr(self) -> None:
        """Array attrs are shown by dtype and shape, not by value."""
        c = make_node("const", (), value=np.zeros((2, 2), np.float32))
        assert "value=<array float32[2, 2]>" in repr(c)

    def test_shape_str(self) -> None:
        """shape_str writes tuples the Python way, with symbolic dims rendered."""
        assert shape_str(()) == "()"
        assert shape_str((t,)) == "(t,)"
        assert shape_str((2, t // 2)) == "(2, t//2)"


class TestRegistry:
    def test_every_op_registered(self) -> None:
        """The registry holds every op the Tensor API records, each with a kind, rule and reference."""
        expected = {
            "placeholder", "const", "arange", "dim", "exp", "log", "sqrt", "rsqrt", "recip", "tanh",
            "sigmoid", "sin", "cos", "erf", "floor", "ceil", "neg", "abs", "relu", "not", "gelu", "add",
            "sub", "mul", "div", "idiv", "mod", "pow", "maximum", "minimum", "lt", "le", "gt", "ge", "eq",
            "ne", "and", "or", "xor", "where", "cast", "reduce", "matmul", "reshape", "permute", "expand",
            "shrink", "pad", "cat", "conv1d", "gather", "scatter", "nonzero", "conv", "pool", "cumsum",
            "argext", "topk", "take_along_axis", "prefix", "index_check",
        }  # fmt: skip
        assert expected <= set(OPS)
        for name, op in OPS.items():
            assert isinstance(op, OpDef) and op.name == name
            assert op.kind in {
                "source",
                "elementwise",
                "reduce",
                "matmul",
                "movement",
                "conv",
                "index",
                "nonzero",
                "pool",
                "prefix",
                "scan",
                "select",
            }
            assert callable(op.infer) and callable(op.reference)

    def test_kinds(self) -> None:
        """Ops are grouped by kind for the compilers."""
        assert OPS["add"].kind == "elementwise"
        assert OPS["reduce"].kind == "reduce"
        assert OPS["shrink"].kind == "movement"
        assert OPS["gather"].kind == "index"


class TestToposort:
    def test_inputs_before_users_and_dedup(self) -> None:
        """Every node appears once, after all its inputs."""
        x = _ph()
        a = make_node("exp", (x,))
        b = make_node("neg", (x,))
        c = make_node("add", (a, b))
        d = make_node("mul", (c, a))
        order = toposort([d, c])
        assert len(order) == len({n.id for n in order}) == 5
        pos = {n.id: i for i, n in enumerate(order)}
        for n in order:
            assert all(pos[i.id] < pos[n.id] for i in n.inputs)

    def test_deep_graph(self) -> None:
        """A 10,000-deep chain sorts without recursion limits."""
        x = _ph()
        y = x
        for _ in range(10_000):
            y = make_node("neg", (y,))
        order = toposort([y])
        assert len(order) == 10_001 and order[0] is x and order[-1] is y

    def test_only_reachable(self) -> None:
        """Nodes not reachable from the outputs are left out."""
        x = _ph()
        make_node("exp", (x,))
        assert toposort([x]) == [x]


class TestStructuralKey:
    def _key(self, out: Node) -> object:
        keys: dict[int, object] = {}
        for n in toposort([out]):
            keys[n.id] = structural_key(n, [keys[i.id] for i in n.inputs])
        return keys[out.id]

    def test_equal_for_equal_computations(self) -> None:
        """Separately built nodes computing the same thing have equal, hashable keys."""
        x = _ph()
        a = make_node("pad", (make_node("exp", (x,)),), pads=((0, 1), (t, 0)), mode="constant", value=0)
        b = make_node("pad", (make_node("exp", (x,)),), pads=((0, 1), (t, 0)), mode="constant", value=0)
        assert self._key(a) == self._key(b)
        hash(self._key(a))

    def test_differs_on_op_attr_input_and_const_data(self) -> None:
        """Keys differ when the op, an attr, an input or constant data differs."""
        x, y = _ph(), _ph(name="y")
        assert self._key(make_node("exp", (x,))) != self._key(make_node("neg", (x,)))
        assert self._key(make_node("exp", (x,))) != self._key(make_node("exp", (y,)))
        r1 = make_node("reduce", (x,), op="sum", axes=(0,))
        r2 = make_node("reduce", (x,), op="sum", axes=(1,))
        assert self._key(r1) != self._key(r2)
        c1 = make_node("const", (), value=np.zeros(3, np.float32))
        c2 = make_node("const", (), value=np.ones(3, np.float32))
        c3 = make_node("const", (), value=np.zeros(3, np.float32))
        assert self._key(c1) != self._key(c2)
        assert self._key(c1) == self._key(c3)

    def test_const_dtype_and_shape_matter(self) -> None:
        """Constants with equal bytes but different dtype or shape have different keys."""
        c1 = make_node("const", (), value=np.zeros(4, np.int32))
        c2 = make_node("const", (), value=np.zeros(4, np.float32))
        c3 = make_node("const", (), value=np.zeros((2, 2), np.int32))
        assert len({self._key(c1), self._key(c2), self._key(c3)}) == 3

    def test_const_digest_is_kept_only_for_frozen_arrays(self) -> None:
        """A frozen constant's content hash is computed once; a writable array is hashed anew,
        so writing to it changes the key."""
        from asyncjit.graph._node import _DIGESTS

        frozen = Tensor.const(np.arange(6, dtype=np.float32)).node
        before = self._key(frozen)
        assert _DIGESTS[id(frozen.attrs["value"])][1] in str(before)
        assert self._key(frozen) == before
        data = np.zeros(3, np.float32)
        loose = make_node("const", (), value=data)
        first = self._key(loose)
        assert id(data) not in _DIGESTS
        data[0] = 1.0
        assert self._key(loose) != first


class TestGraphVars:
    def test_from_shapes_and_attrs(self) -> None:
        """graph_vars finds vars in shapes and in symbolic attrs (slices, pads, arange lengths)."""
        s, u = Var("s", 1, 4), Var("u", 2, 5)
        x = Tensor.placeholder((t, 3))
        y = x.shrink([(0, smin(s, t)), None])
        z = Tensor.arange(u)
        out = [y.node, z.node]
        assert graph_vars(toposort(out)) == (s, t, u)

    def test_sorted_by_name(self) -> None:
        """Vars come back sorted by name."""
        a, b = Var("b", 1, 2), Var("a", 1, 2)
        x = Tensor.placeholder((a, b))
        assert [v.name for v in graph_vars(toposort([x.node]))] == ["a", "b"]

    def test_conflicting_vars(self) -> None:
        """Two different vars sharing a name are rejected."""
        x = Tensor.placeholder((Var("t", 1, 4),))
        y = Tensor.placeholder((Var("t", 1, 5),))
        with pytest.raises(ValueError, match=r"two different vars named 't'"):
            graph_vars(toposort([x.node, y.node]))

    def test_dim_and_int_graph(self) -> None:
        """A graph with only static shapes uses no vars; from_dim records its var."""
        assert graph_vars(toposort([Tensor.placeholder((2,), int32).node])) == ()
        assert graph_vars(toposort([Tensor.from_dim(t * 2).node])) == (t,)
