"""reference.evaluate: bindings, input checks, typed errors and output handling."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit import dtypes as dt
from asyncjit.errors import (
    DTypeMismatchError,
    InputBufferNotFoundError,
    JitError,
    ShapeMismatchError,
    VarBoundsError,
)
from asyncjit.graph import make_node

t = Var("t", 2, 6)


@pytest.fixture
def graph() -> tuple[Tensor, Tensor, Tensor]:
    x = Tensor.placeholder((t, 3), name="x")
    w = Tensor.placeholder((3,), dt.float32, name="w")
    return x, w, (x * w).sum(1)


class TestEvaluate:
    @pytest.mark.parametrize("tv", [2, 4, 6])
    def test_single_output(self, graph: tuple[Tensor, Tensor, Tensor], tv: int) -> None:
        """One output gives one array, for every binding within bounds."""
        x, w, y = graph
        a, c = np.ones((tv, 3), np.float32), np.arange(3, dtype=np.float32)
        got = reference.evaluate(y, {x: a, w: c}, {"t": tv})
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, (a * c).sum(1))

    def test_many_outputs_and_keys(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """A sequence of outputs gives a list; inputs may be keyed by Tensor, Node or name."""
        x, w, y = graph
        a, c = np.ones((2, 3), np.float32), np.ones(3, np.float32)
        for feed in ({x: a, w: c}, {"x": a, "w": c}, {x.node: a, "w": c}):
            got = reference.evaluate([y, x], feed, {"t": 2})
            assert isinstance(got, list) and len(got) == 2
            np.testing.assert_array_equal(got[0], np.full(2, 3, np.float32))
        assert isinstance(reference.evaluate((y,), {x: a, w: c}, {"t": 2}), list)

    def test_no_vars_no_inputs(self) -> None:
        """A constant graph needs neither inputs nor bindings."""
        np.testing.assert_array_equal(reference.evaluate(Tensor.const(np.arange(3)) + 1), [1, 2, 3])

    def test_output_shape_uses_binding(self) -> None:
        """Outputs have the shape their symbolic dims take under the binding."""
        y = Tensor.arange(2 * t) + Tensor.from_dim(t)
        assert reference.evaluate(y, {}, {"t": 5}).shape == (10,)

    def test_not_a_tensor(self) -> None:
        """Outputs must be Tensors or Nodes."""
        with pytest.raises(TypeError, match=r"expected a Tensor or Node, got ndarray"):
            reference.evaluate(np.zeros(2))  # type: ignore[call-overload]


class TestBindingErrors:
    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"t": 1}, r"var 't' = 1 is out of its bounds \[2, 6\]"),
            ({"t": 7}, r"var 't' = 7 is out of its bounds \[2, 6\]"),
            ({}, r"var 't' \(bounds \[2, 6\]\) is not bound"),
            ({"t": 3, "u": 1}, r"unknown var\(s\) \['u'\]; the graph uses \['t'\]"),
            ({"t": 3.0}, r"var 't' must be bound to an int, got float 3.0"),
        ],
    )
    def test_var_bounds_error(
        self, graph: tuple[Tensor, Tensor, Tensor], values: dict[str, object], message: str
    ) -> None:
        """Out-of-bound, unbound, unknown and non-int vars raise VarBoundsError (a JitError)."""
        x, w, y = graph
        feed = {x: np.ones((3, 3), np.float32), w: np.ones(3, np.float32)}
        with pytest.raises(VarBoundsError, match=message) as info:
            reference.evaluate(y, feed, values)  # type: ignore[arg-type]
        assert isinstance(info.value, JitError)

    def test_numpy_int_binding(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """numpy integers are fine as var values."""
        x, w, y = graph
        feed = {x: np.ones((3, 3), np.float32), w: np.ones(3, np.float32)}
        assert reference.evaluate(y, feed, {"t": np.int64(3)}).shape == (3,)  # type: ignore[dict-item]


class TestInputErrors:
    def test_wrong_shape_names_input_and_both_shapes(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """A wrong input shape raises ShapeMismatchError naming the input, both shapes and the binding."""
        x, w, y = graph
        with pytest.raises(
            ShapeMismatchError,
            match=r"input 'x': expected shape \(4, 3\) \(placeholder \(t, 3\) at \{'t': 4\}\), got \(5, 3\)",
        ):
            reference.evaluate(y, {x: np.ones((5, 3), np.float32), w: np.ones(3, np.float32)}, {"t": 4})

    def test_wrong_rank(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """A scalar fed for a vector is a shape mismatch too."""
        x, w, y = graph
        with pytest.raises(ShapeMismatchError, match=r"input 'w': expected shape \(3,\)"):
            reference.evaluate(y, {x: np.ones((2, 3), np.float32), w: np.float32(1)}, {"t": 2})

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            (
                np.ones(3, np.int32),
                r"input 'w': expected dtype float32, got int32 \(convert with .astype\(np.float32\)\)",
            ),
            (np.ones(3, np.float16), r"input 'w': expected dtype float32, got float16"),
            (np.ones(3), r"input 'w': expected dtype float32, got float64"),
            ([1.0, 2.0, 3.0], r"input 'w': expected dtype float32, got float64"),
            (np.ones(3, np.complex64), r"input 'w': asyncjit does not support dtype complex64"),
        ],
    )
    def test_wrong_dtype(self, graph: tuple[Tensor, Tensor, Tensor], value: object, message: str) -> None:
        """Inputs must have the placeholder's dtype exactly: DTypeMismatchError (also a TypeError)."""
        x, w, y = graph
        with pytest.raises(DTypeMismatchError, match=message) as info:
            reference.evaluate(y, {x: np.ones((2, 3), np.float32), w: value}, {"t": 2})
        assert isinstance(info.value, TypeError)

    def test_missing_placeholder(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """A placeholder with no array raises InputBufferNotFoundError (also a KeyError)."""
        x, _w, y = graph
        with pytest.raises(InputBufferNotFoundError, match=r"no array given for placeholder 'w'") as info:
            reference.evaluate(y, {x: np.ones((2, 3), np.float32)}, {"t": 2})
        assert isinstance(info.value, KeyError)
        assert str(info.value) == "no array given for placeholder 'w'"

    def test_unknown_name(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """A name that matches no placeholder is reported with the names that exist."""
        _x, _w, y = graph
        with pytest.raises(
            InputBufferNotFoundError, match=r"no placeholder named 'z' in this graph \(have \['w', 'x'\]\)"
        ):
            reference.evaluate(y, {"z": np.ones(3, np.float32)}, {"t": 2})

    def test_non_placeholder_key(self, graph: tuple[Tensor, Tensor, Tensor]) -> None:
        """Feeding a computed tensor is refused (it could not override the node); unused
        placeholders are allowed, so one full feed dict serves any subset of outputs."""
        x, w, y = graph
        a, c = np.ones((2, 3), np.float32), np.ones(3, np.float32)
        with pytest.raises(
            InputBufferNotFoundError, match=rf"input %{y.node.id} \({y.node.op}\) is not a placeholder"
        ):
            reference.evaluate(y, {x: a, w: c, y: np.ones(2, np.float32)}, {"t": 2})
        other = Tensor.placeholder((3,), name="other")
        np.testing.assert_array_equal(reference.evaluate(x, {x: a, w: c, other: c}, {"t": 2}), a)

    def test_duplicate_names_refused_by_name(self) -> None:
        """Two placeholders sharing a name cannot be fed by that name."""
        a, b = Tensor.placeholder((2,), name="dup"), Tensor.placeholder((2,), name="dup")
        with pytest.raises(
            InputBufferNotFoundError, match=r"2 placeholders are named 'dup'; feed them by Tensor"
        ):
            reference.evaluate(a + b, {"dup": np.ones(2, np.float32)})
        got = reference.evaluate(a + b, {a: np.ones(2, np.float32), b: np.ones(2, np.float32)})
        np.testing.assert_array_equal(got, [2, 2])


class TestOutputs:
    def test_outputs_do_not_alias_inputs(self) -> None:
        """Returning a placeholder gives a copy: writing to it does not change the caller's array."""
        x = Tensor.placeholder((2,), name="x")
        a = np.zeros(2, np.float32)
        out = reference.evaluate(x, {x: a})
        out[0] = 5
        assert a[0] == 0

    def test_reference_bug_is_an_assertion(self) -> None:
        """A reference whose result disagrees with the node's shape is reported as an asyncjit bug."""
        x = Tensor.placeholder((2,), name="x")
        node = make_node("exp", (x.node,))
        object.__setattr__(node, "shape", (3,))
        with pytest.raises(AssertionError, match=r"this is an asyncjit bug"):
            reference.evaluate(node, {x: np.ones(2, np.float32)})
