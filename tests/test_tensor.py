"""The lazy Tensor front end: construction, broadcasting, promotion, indexing and call-time errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit import dtypes as dt
from asyncjit.errors import ShapeMismatchError, TensorError
from asyncjit.graph import graph_vars, toposort
from asyncjit.symbolic import evaluate, smin

t = Var("t", 1, 8)
s = Var("s", 2, 5)


def run(out: Tensor, feed: dict[Tensor, np.ndarray], b: dict[str, int]) -> np.ndarray:
    used = {v.name for v in graph_vars(toposort([out.node]))}
    return reference.evaluate(out, feed, {k: v for k, v in b.items() if k in used})


class TestConstruction:
    def test_placeholder(self) -> None:
        """placeholder records a named input with symbolic dims and a dtype."""
        x = Tensor.placeholder((2, t), np.int64, name="frames")
        assert x.shape == (2, t) and x.dtype == dt.int64 and x.ndim == 2
        assert x.node.op == "placeholder" and x.node.attrs["name"] == "frames"
        assert x.numel == 2 * t
        assert repr(x) == f"<Tensor int64(2, t) %{x.node.id} placeholder>"

    def test_placeholder_default_names_unique(self) -> None:
        """Unnamed placeholders get distinct names."""
        assert Tensor.placeholder((1,)).node.attrs["name"] != Tensor.placeholder((1,)).node.attrs["name"]

    def test_placeholder_rejects_bad_dims(self) -> None:
        """Dims must be ints or symbolic and never negative."""
        with pytest.raises(TypeError, match=r"expected an int or symbolic dim, got float 2.0"):
            Tensor.placeholder((2.0,))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"placeholder 'bad': dim t - 2 can be negative"):
            Tensor.placeholder((t - 2,), name="bad")
        with pytest.raises(TypeError, match=r"asyncjit does not support dtype complex64"):
            Tensor.placeholder((2,), np.complex64)

    def test_full_zeros_ones(self) -> None:
        """full broadcasts one scalar to a (symbolic) shape; the default dtype follows the value."""
        assert Tensor.full((2,), 1.5).dtype == dt.float32
        assert Tensor.full((2,), 3).dtype == dt.int32
        assert Tensor.full((2,), True).dtype == dt.bool_
        z = Tensor.zeros((t, 2))
        np.testing.assert_array_equal(run(z, {}, {"t": 3}), np.zeros((3, 2), np.float32))
        np.testing.assert_array_equal(run(Tensor.ones((2,), dt.int64), {}, {}), np.ones(2, np.int64))

    def test_wraps_only_nodes(self) -> None:
        """Tensor() takes a graph node, nothing else."""
        with pytest.raises(
            TypeError, match=r"Tensor wraps a graph Node; use Tensor.placeholder or Tensor.const"
        ):
            Tensor(np.zeros(2))  # type: ignore[arg-type]


class TestNoValue:
    def test_bool_raises(self) -> None:
        """Branching on a tensor is a TypeError (the graph must not depend on data)."""
        x = Tensor.placeholder((2,))
        with pytest.raises(
            TypeError, match=r"a Tensor has no value while the graph is built; branching on it"
        ):
            bool(x > 0)
        with pytest.raises(TypeError, match=r"Use Tensor.where\(cond, a, b\) instead"):
            if x:
                pass

    def test_len_and_iter(self) -> None:
        """len() works for a static first dim only; iteration is refused."""
        assert len(Tensor.placeholder((3, t))) == 3
        with pytest.raises(TypeError, match=r"len\(\) of a tensor whose first dim t is symbolic"):
            len(Tensor.placeholder((t,)))
        with pytest.raises(TypeError, match=r"len\(\) of a 0-d tensor"):
            len(Tensor.placeholder(()))
        with pytest.raises(TypeError, match=r"iterating a Tensor is not supported"):
            list(Tensor.placeholder((2,)))

    def test_hash_is_identity(self) -> None:
        """Tensors hash by identity, so they can key input dicts despite == being elementwise."""
        x, y = Tensor.placeholder((2,)), Tensor.placeholder((2,))
        assert len({x: 1, y: 2}) == 2
        assert isinstance(x == y, Tensor)


class TestBroadcasting:
    @pytest.mark.parametrize(
        ("a", "b", "out"),
        [
            ((2, 3), (3,), (2, 3)),
            ((t, 1), (1, s), (t, s)),
            ((1,), (t,), (t,)),
            ((), (2, t), (2, t)),
            ((s, 1, t), (4, 1), (s, 4, t)),
            ((2 * t,), (t + t,), (2 * t,)),
        ],
    )
    def test_shapes(self, a: tuple[Any, ...], b: tuple[Any, ...], out: tuple[Any, ...]) -> None:
        """numpy rules over symbolic dims: provably equal, or one side is 1."""
        x, y = Tensor.placeholder(a), Tensor.placeholder(b)
        assert (x + y).shape == out
        assert (y * x).shape == out

    def test_values(self) -> None:
        """Broadcast values match numpy at a binding."""
        x, y = Tensor.placeholder((t, 1)), Tensor.placeholder((1, s))
        a, c = np.arange(3, dtype=np.float32)[:, None], np.arange(4, dtype=np.float32)[None]
        np.testing.assert_array_equal(run(x - y, {x: a, y: c}, {"t": 3, "s": 4}), a - c)

    @pytest.mark.parametrize(
        ("a", "b", "message"),
        [
            ((2, 3), (4,), r"cannot broadcast shapes \(2, 3\) and \(4,\): dim 3 vs 4"),
            ((t,), (s,), r"cannot broadcast shapes \(t,\) and \(s,\): dim t vs s"),
            ((t,), (t + 1,), r"cannot broadcast shapes \(t,\) and \(t \+ 1,\): dim t vs t \+ 1"),
        ],
    )
    def test_errors_name_both_shapes(self, a: tuple[Any, ...], b: tuple[Any, ...], message: str) -> None:
        """An impossible broadcast raises ShapeMismatchError at the op call, naming both shapes."""
        x, y = Tensor.placeholder(a), Tensor.placeholder(b)
        with pytest.raises(ShapeMismatchError, match=message):
            x + y

    def test_shape_error_is_tensor_and_value_error(self) -> None:
        """ShapeMismatchError is a TensorError and a ValueError."""
        assert issubclass(ShapeMismatchError, TensorError) and issubclass(ShapeMismatchError, ValueError)


class TestPromotion:
    @pytest.mark.parametrize(
        ("left", "right", "expected"),
        [
            (dt.int32, dt.float16, dt.float16),
            (dt.int64, dt.int32, dt.int64),
            (dt.bool_, dt.int32, dt.int32),
            (dt.float16, dt.float32, dt.float32),
        ],
    )
    def test_tensor_tensor(self, left: dt.DType, right: dt.DType, expected: dt.DType) -> None:
        """Two tensors promote by the dtype table."""
        assert (Tensor.placeholder((2,), left) + Tensor.placeholder((2,), right)).dtype == expected

    @pytest.mark.parametrize(
        ("dtype", "scalar", "expected"),
        [
            (dt.float16, 2, dt.float16),
            (dt.float16, 0.5, dt.float16),
            (dt.int32, 2, dt.int32),
            (dt.int32, 0.5, dt.float32),
            (dt.int64, True, dt.int64),
        ],
    )
    def test_weak_scalars(self, dtype: dt.DType, scalar: Any, expected: dt.DType) -> None:
        """Python scalars are weak on both sides of an operator."""
        x = Tensor.placeholder((2,), dtype)
        assert (x + scalar).dtype == expected
        assert (scalar * x).dtype == expected

    def test_true_division_is_float(self) -> None:
        """/ of ints is float32; // of ints stays int; ** 2 of an int stays int."""
        x = Tensor.placeholder((2,), dt.int32)
        assert (x / 2).dtype == dt.float32
        assert (2 / x).dtype == dt.float32
        assert (x // 2).dtype == dt.int32
        assert (x**2).dtype == dt.int32
        assert (x**0.5).dtype == dt.float32

    def test_reflected_operators(self) -> None:
        """Scalars and numpy scalars on the left use the reflected operators."""
        x = Tensor.placeholder((3,))
        a = np.array([1, 2, 4], np.float32)
        np.testing.assert_allclose(run(1 - x, {x: a}, {}), 1 - a)
        np.testing.assert_allclose(run(8 / x, {x: a}, {}), 8 / a)
        np.testing.assert_allclose(run(np.float32(2) ** x, {x: a}, {}), 2**a)
        np.testing.assert_allclose(run(7 // x, {x: a}, {}), 7 // a)
        np.testing.assert_allclose(run(7 % x, {x: a}, {}), 7 % a)

    def test_numpy_array_operand(self) -> None:
        """A numpy array operand becomes a constant."""
        x = Tensor.placeholder((3,))
        a = np.array([1, 2, 3], np.float32)
        np.testing.assert_array_equal(run(x + np.ones(3, np.float32), {x: a}, {}), a + 1)
        np.testing.assert_array_equal(run(np.ones((2, 3), np.float32) @ x, {x: a}, {}), np.ones((2, 3)) @ a)

    def test_bad_operand(self) -> None:
        """Lists and strings are not tensors."""
        with pytest.raises(TypeError, match=r"cannot combine a Tensor with list"):
            Tensor.placeholder((2,)) + [1, 2]  # type: ignore[operator]  # noqa: RUF005

    def test_float16_scalar_overflow_is_inf(self) -> None:
        """A weak scalar too big for float16 becomes inf (no warning), as in JAX."""
        x = Tensor.placeholder((1,), dt.float16)
        assert run(x * 1e9, {x: np.ones(1, np.float16)}, {})[0] == np.inf


class TestIndexing:
    A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    @pytest.mark.parametrize(
        "index",
        [
            0,
            -1,
            (1, 2),
            (slice(None), 1),
            (..., 0),
            (0, ..., 1),
            (None, 0),
            (0, None),
            (0, None, 1),
            (..., None),
            (None, ..., None),
            (slice(1, None), slice(None, -1), slice(None, None, 2)),
            (slice(5, 1),),
            (slice(-10, 10, 3),),
            (1, slice(None), -2),
            (),
            Ellipsis,
        ],
    )
    def test_static_like_numpy(self, index: Any) -> None:
        """Basic indexing matches numpy: ints drop axes, None adds them, slices clamp."""
        x = Tensor.placeholder((2, 3, 4))
        want = self.A[index]
        got = run(x[index], {x: self.A}, {})
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)

    @pytest.mark.parametrize(
        "sl",
        [
            slice(None, 5),
            slice(-3, None),
            slice(2, 7, 2),
            slice(-5, -2),
            slice(8, 3),
            slice(-20, 20, 3),
            slice(1, -1),
        ],
    )
    def test_symbolic_axis_clamps(self, sl: slice) -> None:
        """Slicing a symbolic axis clamps like numpy at every binding (x[:5] has min(t, 5) items)."""
        x = Tensor.placeholder((t,))
        y = x[sl]
        for tv in range(t.min, t.max + 1):
            a = np.arange(tv, dtype=np.float32)
            np.testing.assert_array_equal(run(y, {x: a}, {"t": tv}), a[sl])

    def test_symbolic_slice_shapes(self) -> None:
        """Clamped slice lengths are readable symbolic dims."""
        x = Tensor.placeholder((t,))
        assert x[:5].shape == (smin(t, 5),)
        assert x[1:].shape == (t - 1,)
        assert x[:-1].shape == (t - 1,)
        assert x[8:3].shape == (0,)
        assert [evaluate(x[-3:].shape[0], {"t": v}) for v in (1, 2, 3, 8)] == [1, 2, 3, 3]

    @pytest.mark.parametrize(
        ("make", "want"),
        [
            (lambda x: x[:s], lambda a, b: a[: b["s"]]),
            (lambda x: x[s // 2 :], lambda a, b: a[b["s"] // 2 :]),
            (lambda x: x[:-s], lambda a, b: a[: -b["s"]]),
            (lambda x: x[s - 1], lambda a, b: a[b["s"] - 1]),
            (lambda x: x[-s], lambda a, b: a[-b["s"]]),
        ],
    )
    def test_symbolic_bounds(self, make: Any, want: Any) -> None:
        """Symbolic starts, stops and indices follow numpy, negative ones counting from the end."""
        x = Tensor.placeholder((t + 4,))
        y = make(x)
        for tv, sv in [(1, 2), (8, 5), (3, 4)]:
            b = {"t": tv, "s": sv}
            a = np.arange(tv + 4, dtype=np.float32)
            np.testing.assert_array_equal(run(y, {x: a}, b), want(a, b))

    def test_tensor_index_gathers(self) -> None:
        """One 1-D int Tensor index gathers along its axis."""
        x = Tensor.placeholder((2, 3, 4))
        idx = Tensor.const(np.array([2, 0], np.int32))
        np.testing.assert_array_equal(run(x[:, idx], {x: self.A}, {}), self.A[:, [2, 0]])
        np.testing.assert_array_equal(run(x[1, idx, None], {x: self.A}, {}), self.A[1, [2, 0], None])

    @pytest.mark.parametrize(
        ("index", "error", "message"),
        [
            ((0, 0, 0, 0), TensorError, r"too many indices \(4\) for a tensor of rank 3"),
            ((..., ...), TensorError, r"an index can only have a single ellipsis"),
            ((2,), TensorError, r"index 2 is out of range for axis 0 of size 2"),
            ((-3,), TensorError, r"index -3 is out of range for axis 0 of size 2"),
            ((slice(None, None, -1),), TensorError, r"slice step must be an int >= 1, got -1"),
            (("a",), TypeError, r"unsupported index 'a' \(type str\)"),
            ((1.5,), TypeError, r"unsupported index 1.5 \(type float\)"),
        ],
    )
    def test_errors(self, index: Any, error: type[Exception], message: str) -> None:
        """Bad indices raise at the call with a message saying why."""
        x = Tensor.placeholder((2, 3, 4))
        with pytest.raises(error, match=message):
            x[index]

    def test_symbolic_index_errors(self) -> None:
        """A symbolic index must be provably in range; a sign that depends on the binding is refused."""
        x = Tensor.placeholder((t,))
        with pytest.raises(TensorError, match=r"index t is out of range for axis 0 of size t"):
            x[t]
        with pytest.raises(
            TensorError, match=r"slice bound t - 3 is negative for some bindings and not for others"
        ):
            x[: t - 3]

    def test_two_tensor_indices_refused(self) -> None:
        """numpy pairs several array indices element-wise; we refuse instead of silently differing."""
        x = Tensor.placeholder((3, 3))
        i = Tensor.const(np.array([0, 1], np.int32))
        with pytest.raises(TensorError, match=r"only one Tensor index is supported"):
            x[i, i]


class TestMovementApi:
    def test_unsqueeze_squeeze_flatten(self) -> None:
        """unsqueeze/squeeze/flatten compose reshape like numpy/PyTorch."""
        x = Tensor.placeholder((t, 1, 3))
        assert x.unsqueeze(0).shape == (1, t, 1, 3)
        assert x.unsqueeze(-1).shape == (t, 1, 3, 1)
        assert x.squeeze().shape == (t, 3)
        assert x.squeeze(1).shape == (t, 3)
        assert x.flatten().shape == (3 * t,)
        assert x.flatten(1).shape == (t, 3)
        assert Tensor.placeholder(()).flatten().shape == (1,)
        with pytest.raises(ShapeMismatchError, match=r"cannot squeeze axis 2 of \(t, 1, 3\): not 1"):
            x.squeeze(2)

    def test_noop_movements_record_nothing(self) -> None:
        """Identity reshapes, permutes, broadcasts, shrinks and pads return the same tensor."""
        x = Tensor.placeholder((t, 3))
        assert x.reshape(t, 3) is x
        assert x.permute(0, 1) is x
        assert x.expand(t, 3) is x
        assert x.shrink([None, (0, 3)]) is x
        assert x.pad([None, (0, 0)]) is x
        assert x[:] is x
        assert Tensor.cat([x]) is x

    def test_split_and_chunk_errors(self) -> None:
        """split sizes must add up; chunk needs a static, divisible dim."""
        x = Tensor.placeholder((t, 4))
        with pytest.raises(ShapeMismatchError, match=r"split sizes \[1, 2\] do not add up to dim 4"):
            x.split([1, 2], axis=1)
        with pytest.raises(ShapeMismatchError, match=r"cannot chunk dim t into 2 equal parts"):
            x.chunk(2, axis=0)
        assert [p.shape for p in x.split([1, t - 1], axis=0)] == [(1, 4), (t - 1, 4)]

    def test_axis_errors(self) -> None:
        """Axes out of range are TensorErrors."""
        x = Tensor.placeholder((2, 3))
        with pytest.raises(TensorError, match=r"axis -3 is out of range for a tensor of rank 2"):
            x.transpose(-3, 0)
        with pytest.raises(TensorError, match=r"axis 2 is out of range for a tensor of rank 2"):
            Tensor.cat([x, x], axis=2)

    def test_mean_symbolic_count(self) -> None:
        """mean over a symbolic axis divides by the bound value, not by the upper bound."""
        x = Tensor.placeholder((t, 2))
        for tv in (1, 5, 8):
            a = np.arange(2 * tv, dtype=np.float32).reshape(tv, 2)
            np.testing.assert_allclose(run(x.mean(0), {x: a}, {"t": tv}), a.mean(0))

    def test_shape_shows_symbolic_dims(self) -> None:
        """Shapes carry symbolic expressions that evaluate under a binding."""
        x = Tensor.placeholder((t, s))
        y = x.reshape(-1)[1:].pad([(0, 2)])
        assert evaluate(y.shape[0], {"t": 3, "s": 4}) == 13
