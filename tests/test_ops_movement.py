"""Movement and index ops, run by the reference interpreter, against direct numpy.

Reshape, permute, expand, shrink, pad, cat/stack/split, then gather, scatter and nonzero; each
at the minimum, maximum and a middle binding of its symbolic dims (see ``ops_helpers.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ops_helpers import bindings, close, concrete, data, ph, run, s, t

from asyncjit import Tensor, reference
from asyncjit import dtypes as dt
from asyncjit.graph import make_node
from asyncjit.symbolic import Dim, evaluate, smin

# ---------------------------------------------------------------------------------------------
# movement


class TestMovement:
    @bindings
    @pytest.mark.parametrize(
        ("src", "dst"),
        [
            ((2, t, 3), (2, 3 * t)),
            ((2, t, 3), (6 * t,)),
            ((s, t), (s * t, 1)),
            ((t,), (1, t, 1)),
            ((4, t), (2, 2, t)),
            ((), (1, 1)),
        ],
    )
    def test_reshape(self, b: dict[str, int], src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> None:
        """reshape keeps row-major order for symbolic sizes whose element count is provably equal."""
        x = ph(src)
        a = data(src, b)
        close(run(x.reshape(*dst), {x: a}, b), a.reshape(concrete(dst, b)))

    @bindings
    def test_reshape_infers_minus_one(self, b: dict[str, int]) -> None:
        """One -1 is inferred, also when it is symbolic."""
        x = ph((s, t, 4))
        a = data((s, t, 4), b)
        out = x.reshape(s, -1)
        assert out.shape == (s, 4 * t)
        close(run(out, {x: a}, b), a.reshape(b["s"], -1))
        assert x.reshape(-1, 2).shape == (2 * s * t, 2)

    def test_reshape_errors(self) -> None:
        """Element counts that are not provably equal are rejected naming both shapes."""
        with pytest.raises(
            ValueError,
            match=r"reshape \(2, t\) -> \(t, 3\): element counts 2\*t and 3\*t are not provably equal",
        ):
            ph((2, t)).reshape(t, 3)
        with pytest.raises(ValueError, match=r"at most one -1"):
            ph((4,)).reshape(-1, -1)
        with pytest.raises(ValueError, match=r"cannot reshape \(5,\) to \[2, -1\]"):
            ph((5,)).reshape(2, -1)

    @bindings
    @pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0)])
    def test_permute(self, b: dict[str, int], order: tuple[int, ...]) -> None:
        """permute matches np.transpose; T reverses all axes."""
        x = ph((s, t, 3))
        a = data((s, t, 3), b)
        close(run(x.permute(*order), {x: a}, b), np.transpose(a, order))
        close(run(x.T, {x: a}, b), a.T)
        close(run(x.transpose(0, 2), {x: a}, b), np.swapaxes(a, 0, 2))

    def test_permute_errors(self) -> None:
        """A non-permutation is rejected."""
        with pytest.raises(ValueError, match=r"permute order \(0, 0\) is not a permutation of 2 axes"):
            make_node("permute", (ph((2, 3)).node,), order=(0, 0))

    @bindings
    @pytest.mark.parametrize(
        ("src", "dst"),
        [((1,), (t,)), ((1, 3), (s, 3)), ((t, 1), (2, t, s)), ((), (t, 2)), ((1, 1), (t - 1, 1))],
    )
    def test_expand(self, b: dict[str, int], src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> None:
        """expand broadcasts size-1 dims (and new leading dims) to symbolic sizes."""
        x = ph(src)
        a = data(src, b)
        close(run(x.expand(*dst), {x: a}, b), np.broadcast_to(a, concrete(dst, b)))

    def test_expand_errors(self) -> None:
        """Expanding a dim that is not 1 is rejected naming both shapes."""
        with pytest.raises(ValueError, match=r"cannot broadcast shapes \(2, 3\) and \(2, 4\): dim 3 vs 4"):
            ph((2, 3)).expand(2, 4)
        with pytest.raises(ValueError, match=r"cannot broadcast \(2, 3\) to \(3,\)"):
            ph((2, 3)).expand(3)

    @bindings
    @pytest.mark.parametrize(
        "slices",
        [
            [(0, t), None],
            [(1, t + 1), (1, 3)],
            [(t // 2, t), None],
            [(0, smin(t, 2)), (2, 4)],
        ],
    )
    def test_shrink(self, b: dict[str, int], slices: list[Any]) -> None:
        """shrink keeps [start, stop) per axis with symbolic starts and stops."""
        x = ph((t + 1, 4))
        a = data((t + 1, 4), b)
        idx = tuple(
            slice(None) if sl is None else slice(evaluate(sl[0], b), evaluate(sl[1], b)) for sl in slices
        )
        close(run(x.shrink(slices), {x: a}, b), a[idx])

    def test_shrink_out_of_range(self) -> None:
        """A range not provably inside the axis is rejected at the call."""
        with pytest.raises(
            ValueError, match=r"shrink axis 0 of \(t,\): \[1:t \+ 1\] is not provably within \[0:t\]"
        ):
            ph((t,)).shrink([(1, t + 1)])
        with pytest.raises(ValueError, match=r"shrink needs 2 \(start, stop\) pairs, got 1"):
            ph((2, 3)).shrink([(0, 1)])

    def test_shrink_step(self) -> None:
        """The op supports steps (used by strided slicing)."""
        x = ph((t,))
        node = make_node("shrink", (x.node,), slices=((1, t, 2),))
        assert node.shape == (t // 2,)
        got = reference.evaluate(node, {x: np.arange(6, dtype=np.float32)}, {"t": 6})
        np.testing.assert_array_equal(got, [1, 3, 5])

    @bindings
    @pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
    @pytest.mark.parametrize("pads", [[(1, 2), None], [(0, 1), (2, 0)], [None, (1, 1)]])
    def test_pad(self, b: dict[str, int], mode: str, pads: list[Any]) -> None:
        """pad matches np.pad for constant, reflect and edge modes."""
        shape = (t + 2, 3)
        x = ph(shape)
        a = data(shape, b)
        widths = [(0, 0) if p is None else p for p in pads]
        out = x.pad(pads, mode=mode, value=1.5) if mode == "constant" else x.pad(pads, mode=mode)
        want = (
            np.pad(a, widths, mode=mode, constant_values=1.5)
            if mode == "constant"
            else np.pad(a, widths, mode=mode)
        )
        close(run(out, {x: a}, b), want)

    @bindings
    def test_pad_symbolic_width(self, b: dict[str, int]) -> None:
        """Constant pads may have symbolic widths (pad to a bound)."""
        x = ph((t,))
        a = data((t,), b)
        out = x.pad([(0, 6 - t)])
        assert out.shape == (6,)
        close(run(out, {x: a}, b), np.pad(a, (0, 6 - b["t"])))

    def test_pad_int_value_and_nan(self) -> None:
        """The pad value is cast like a cast op: 2.7 into int32 is 2, NaN into int is 0."""
        x = ph((2,), dt.int32)
        a = np.array([5, 6], np.int32)
        np.testing.assert_array_equal(run(x.pad([(1, 1)], value=2.7), {x: a}, {}), [2, 5, 6, 2])
        np.testing.assert_array_equal(run(x.pad([(1, 0)], value=float("nan")), {x: a}, {}), [0, 5, 6])

    def test_pad_errors(self) -> None:
        """Reflect widths must stay below the dim; modes are checked; widths cannot be negative."""
        with pytest.raises(
            ValueError, match=r"reflect pad axis 0: widths \(2, 0\) must be < the dim t for every binding"
        ):
            ph((t,)).pad([(2, 0)], mode="reflect")
        with pytest.raises(
            ValueError, match=r"pad mode must be one of \('constant', 'reflect', 'edge'\), got 'wrap'"
        ):
            ph((3,)).pad([(1, 0)], mode="wrap")
        with pytest.raises(ValueError, match=r"pad axis 0: widths \(-1, 0\) can be negative"):
            ph((3,)).pad([(-1, 0)])
        with pytest.raises(ValueError, match=r"edge pad axis 0: dim t - 1 can be empty"):
            ph((t - 1,)).pad([(1, 0)], mode="edge")

    @bindings
    @pytest.mark.parametrize("axis", [0, 1, -1])
    def test_cat(self, b: dict[str, int], axis: int) -> None:
        """cat joins along an axis with symbolic sizes; dtypes promote."""
        shapes_: list[tuple[Dim, ...]] = [(t, 2), (t, 2), (t, 2)]
        ax = axis % 2
        shapes_[1] = tuple(s if i == ax else d for i, d in enumerate(shapes_[1]))
        shapes_[2] = tuple(3 if i == ax else d for i, d in enumerate(shapes_[2]))
        xs = [ph(shapes_[0]), ph(shapes_[1], dt.int32), ph(shapes_[2])]
        arrays = [data(shapes_[0], b, seed=1), data(shapes_[1], b, np.int32, 2), data(shapes_[2], b, seed=3)]
        out = Tensor.cat(xs, axis)
        close(
            run(out, dict(zip(xs, arrays, strict=True)), b),
            np.concatenate([a.astype(np.float32) for a in arrays], axis),
        )

    def test_cat_errors(self) -> None:
        """Other dims must be provably equal; an empty list is rejected."""
        with pytest.raises(ValueError, match=r"cat along axis 0: shapes \(2, t\) and \(2, s\) differ"):
            Tensor.cat([ph((2, t)), ph((2, s))])
        with pytest.raises(ValueError, match=r"cat needs at least one tensor"):
            Tensor.cat([])

    @bindings
    def test_stack_split_chunk(self, b: dict[str, int]) -> None:
        """stack, split and chunk are compositions of reshape, cat and shrink."""
        x, y = ph((t, 4)), ph((t, 4))
        a, c = data((t, 4), b, seed=1), data((t, 4), b, seed=2)
        close(run(Tensor.stack([x, y], 1), {x: a, y: c}, b), np.stack([a, c], 1))
        p, q = x.split([1, 3], axis=1)
        close(run(p, {x: a}, b), a[:, :1])
        close(run(q, {x: a}, b), a[:, 1:])
        _, v = x.chunk(2)
        close(run(v, {x: a}, b), a[:, 2:])
        close(
            run(x.glu(), {x: a}, b),
            (a[:, :2] / (1 + np.exp(-a[:, 2:].astype(np.float64)))).astype(np.float32),
            rtol=1e-6,
        )


# ---------------------------------------------------------------------------------------------
# gather / scatter / nonzero


class TestIndexOps:
    @bindings
    @pytest.mark.parametrize("axis", [0, 1])
    @pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
    def test_gather_clamps(self, b: dict[str, int], axis: int, idx_dtype: Any) -> None:
        """gather selects along an axis; out-of-range indices (negative too) clamp into range."""
        x = ph((t, 3))
        a = data((t, 3), b)
        idx = np.array([0, 2, -1, 7, 1], idx_dtype)
        i = ph((5,), idx_dtype)
        n = a.shape[axis]
        want = np.take(a, np.clip(idx, 0, n - 1), axis=axis)
        close(run(x.gather(axis, i), {x: a, i: idx}, b), want)

    @bindings
    def test_gather_symbolic_count(self, b: dict[str, int]) -> None:
        """The index length may be symbolic; index_select is the same op."""
        x = ph((4, 2))
        i = ph((t,), dt.int32)
        a, idx = data((4, 2), b), np.arange(b["t"], dtype=np.int32) % 4
        close(run(x.index_select(0, i), {x: a, i: idx}, b), a[idx])

    @bindings
    @pytest.mark.parametrize("axis", [0, 1])
    def test_scatter(self, b: dict[str, int], axis: int) -> None:
        """scatter writes rows; out-of-range indices are dropped and the last write wins."""
        x = ph((t, 3))
        a = data((t, 3), b)
        idx = np.array([0, -1, 0, 9], np.int32)
        src_shape = (4, 3) if axis == 0 else (t, 4)
        src = ph(src_shape)
        sv = data(src_shape, b, seed=7)
        want = a.copy()
        for j, target in enumerate(idx):
            if 0 <= target < a.shape[axis]:
                if axis == 0:
                    want[target] = sv[j]
                else:
                    want[:, target] = sv[:, j]
        close(run(x.scatter(axis, Tensor.const(idx), src), {x: a, src: sv}, b), want)

    def test_index_errors(self) -> None:
        """Indices must be 1-D ints; src must match; gathering from a possibly empty axis is rejected."""
        with pytest.raises(ValueError, match=r"gather: index must be a 1-D int tensor, got float32\(3,\)"):
            ph((4,)).gather(0, ph((3,)))
        with pytest.raises(ValueError, match=r"scatter: src shape \(2, 2\) must be \(3, 2\)"):
            ph((4, 2)).scatter(0, ph((3,), dt.int32), ph((2, 2)))
        with pytest.raises(ValueError, match=r"gather: axis 0 of \(t - 1,\) can be empty"):
            ph((t - 1,)).gather(0, ph((1,), dt.int32))

    @bindings
    @pytest.mark.parametrize("size", [0, 2, 20])
    @pytest.mark.parametrize("shape", [(), (t,), (2, t)], ids=["scalar", "t", "2xt"])
    def test_nonzero(self, b: dict[str, int], size: int, shape: tuple[Dim, ...]) -> None:
        """nonzero returns the first `size` hits in row-major order, padded with the fill, and the count."""
        x = ph(shape, dt.int32)
        a = data(shape, b, np.int32) % 2
        idx, count = x.nonzero(size, fill_value=-1)
        got_idx, got_count = run([idx, count], {x: a}, b)
        hits = np.argwhere(np.atleast_1d(a))
        want = np.full((size, max(len(shape), 1)), -1, np.int64)
        want[: min(size, len(hits))] = hits[:size]
        close(got_idx, want)
        close(got_count, np.array(len(hits), np.int64))
