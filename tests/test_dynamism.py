"""Data-dependent dims: ``prefix``, ``x[:count]``, ``nonzero()``, boolean masks, ``compress``,
``unique``, through the reference interpreter, the compiled plan, the runtime and ``jit``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.compiler import compile, deserialize
from asyncjit.errors import TensorError, VarBoundsError
from asyncjit.reference import evaluate
from asyncjit.symbolic import DataVar

RNG = np.random.default_rng(7)


def _both(outs: Sequence[Tensor], ins: Sequence[Tensor], feeds: Sequence[Sequence[np.ndarray]]) -> list[Any]:
    """Run every feed through the reference and one compiled plan; equal shapes and values."""
    exe = compile(list(outs), list(ins))
    results = []
    for feed in feeds:
        ref = evaluate(list(outs), dict(zip(ins, feed, strict=True)))
        got = exe.run(list(feed))
        for r, g in zip(ref, got, strict=True):
            assert r.shape == g.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
        results.append(got)
    return results


class TestPrefix:
    def test_count_becomes_a_dim(self) -> None:
        """``x.prefix(count)`` has a DataVar dim bounded by the axis; later ops loop over it."""
        x = Tensor.placeholder((8, 3), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        y = x.prefix(c)
        assert isinstance(y.shape[0], DataVar) and y.shape[0].max == 8 and y.shape[1] == 3
        outs = [y * 2 + 1, (y * y).sum(0), y.mean(0), y.sum()]
        xv = RNG.standard_normal((8, 3)).astype(np.float32)
        for (a, *_), n in zip(
            _both(outs, [x, c], [[xv, np.array(k)] for k in (0, 1, 5, 8)]), (0, 1, 5, 8), strict=True
        ):
            assert a.shape == (n, 3)
            np.testing.assert_allclose(a, xv[:n] * 2 + 1, rtol=1e-6)

    def test_inner_axis_and_symbolic_input(self) -> None:
        """A prefix of an inner axis of a tensor whose other dims are vars."""
        t = Var("t", 1, 16)
        x = Tensor.placeholder((t, 10), name="x")
        c = Tensor.placeholder((), asyncjit.int32, name="c")
        y = x.prefix(c, axis=1)
        exe = compile([y.sum(1), y], [x, c])
        for tv, n in ((3, 4), (16, 10), (1, 0)):
            xv = RNG.standard_normal((tv, 10)).astype(np.float32)
            s, full = exe.run([xv, np.array(n, np.int32)])
            assert full.shape == (tv, n)
            np.testing.assert_array_equal(full, xv[:, :n])
            np.testing.assert_allclose(s, xv[:, :n].sum(1), rtol=1e-5, atol=1e-6)

    def test_matmul_over_actual_rows(self) -> None:
        """A matmul reads only the rows that exist (its M is the data-dependent size)."""
        x = Tensor.placeholder((32, 8), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        w = Tensor.const(RNG.standard_normal((8, 4)).astype(np.float32))
        y = (x.prefix(c) @ w).tanh()
        xv = RNG.standard_normal((32, 8)).astype(np.float32)
        (out,) = _both([y], [x, c], [[xv, np.array(13)]])[0]
        assert out.shape == (13, 4)

    def test_chained_sizes(self) -> None:
        """A prefix of a prefix: two sizes, the second bounded by the first."""
        x = Tensor.placeholder((10,), name="x")
        a = Tensor.placeholder((), asyncjit.int64, name="a")
        b = Tensor.placeholder((), asyncjit.int64, name="b")
        y = x.prefix(a)[:b]
        exe = compile([y], [x, a, b])
        xv = np.arange(10, dtype=np.float32)
        np.testing.assert_array_equal(exe.run([xv, np.array(6), np.array(4)])[0], xv[:4])
        np.testing.assert_array_equal(exe.run([xv, np.array(3), np.array(4)])[0], xv[:3])

    @pytest.mark.parametrize("count", [11, -1])
    def test_out_of_bound_count_raises(self, count: int) -> None:
        """A count above the given bound (or negative) is a VarBoundsError from the run naming
        the op, in the reference and the compiled plan alike; the plan keeps working after."""
        x = Tensor.placeholder((16,), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        y = x.prefix(c, bound=10) * 2
        xv = np.ones(16, np.float32)
        with pytest.raises(VarBoundsError, match="prefix"):
            evaluate(y, {x: xv, c: np.array(count)})
        exe = compile([y], [x, c])
        with pytest.raises(VarBoundsError, match="prefix computed"):
            exe.run([xv, np.array(count)])
        assert exe.run([xv, np.array(10)])[0].shape == (10,)

    def test_bad_prefix_arguments(self) -> None:
        """A float count, a non-scalar count or a negative bound are TensorErrors at trace time."""
        x = Tensor.placeholder((4,), name="x")
        with pytest.raises(TensorError):
            x.prefix(Tensor.placeholder((), asyncjit.float32, name="f"))
        with pytest.raises(TensorError):
            x.prefix(Tensor.placeholder((2,), asyncjit.int64, name="v"))
        with pytest.raises(TensorError):
            x.prefix(Tensor.placeholder((), asyncjit.int64, name="c"), bound=-1)

    def test_serialized_plan_keeps_sizes(self) -> None:
        """A serialized plan with a data-dependent size still returns actual shapes."""
        x = Tensor.placeholder((8,), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        exe = deserialize(compile([x.prefix(c, bound=5) + 1], [x, c]).serialize())
        assert exe.run([np.zeros(8, np.float32), np.array(3)])[0].shape == (3,)
        with pytest.raises(VarBoundsError):
            exe.run([np.zeros(8, np.float32), np.array(6)])


class TestSlicing:
    @pytest.mark.parametrize("stop", [-20, -3, 0, 4, 9, 100])
    @pytest.mark.parametrize("start", [0, 2])
    def test_slice_with_computed_stop_follows_numpy(self, start: int, stop: int) -> None:
        """``x[a:count]`` with a computed stop: negative counts from the end, clamped to the axis."""
        x = Tensor.placeholder((9, 2), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        xv = RNG.standard_normal((9, 2)).astype(np.float32)
        (out,) = _both([x[start:c]], [x, c], [[xv, np.array(stop)]])[0]
        np.testing.assert_array_equal(out, xv[start:stop])

    def test_slice_stop_from_graph(self) -> None:
        """The stop is computed in the graph: the number of positive entries."""
        x = Tensor.placeholder((12,), name="x")
        count = (x > 0).cast(asyncjit.int64).sum()
        xv = RNG.standard_normal(12).astype(np.float32)
        (out,) = _both([x[:count]], [x], [[xv]])[0]
        np.testing.assert_array_equal(out, xv[: int((xv > 0).sum())])


class TestNonzeroMasks:
    def test_nonzero_without_size(self) -> None:
        """``nonzero()`` gives ``[n, ndim]`` with n data-dependent; the padded form stays."""
        x = Tensor.placeholder((4, 5), name="x")
        idx = x.nonzero()
        padded, count = x.nonzero(size=6)
        xv = (RNG.standard_normal((4, 5)) > 0.3).astype(np.float32)
        for feed in (xv, np.zeros_like(xv), np.ones_like(xv)):
            got, p, n = _both([idx, padded, count], [x], [[feed]])[0]
            np.testing.assert_array_equal(got, np.argwhere(feed))
            assert p.shape == (6, 2) and int(n) == int((feed != 0).sum())

    def test_nonzero_bound(self) -> None:
        """More hits than the given bound: VarBoundsError naming nonzero."""
        x = Tensor.placeholder((10,), name="x")
        exe = compile([x.nonzero(bound=3)], [x])
        assert exe.run([np.array([0, 1, 0, 1, 1, 0, 0, 0, 0, 0], np.float32)])[0].shape == (3, 1)
        with pytest.raises(VarBoundsError, match="nonzero"):
            exe.run([np.ones(10, np.float32)])

    def test_boolean_mask(self) -> None:
        """``x[mask]`` over leading dims, as numpy."""
        x = Tensor.placeholder((6, 4, 3), name="x")
        m = Tensor.placeholder((6, 4), asyncjit.bool_, name="m")
        xv = RNG.standard_normal((6, 4, 3)).astype(np.float32)
        mv = RNG.standard_normal((6, 4)) > 0
        (out, _total) = _both([x[m], x[m].sum()], [x, m], [[xv, mv]])[0]
        np.testing.assert_array_equal(out, xv[mv])
        (out2,) = _both([x[x.sum((1, 2)) > 0]], [x], [[xv]])[0]
        np.testing.assert_array_equal(out2, xv[xv.sum((1, 2)) > 0])

    def test_compress(self) -> None:
        """``compress`` along an axis and flattened, as numpy (a short condition too)."""
        x = Tensor.placeholder((3, 5), name="x")
        cond = Tensor.placeholder((5,), asyncjit.bool_, name="c")
        short = Tensor.placeholder((2,), asyncjit.bool_, name="s")
        xv = RNG.standard_normal((3, 5)).astype(np.float32)
        cv = np.array([True, False, True, True, False])
        sv = np.array([False, True])
        a, b, c = _both(
            [x.compress(cond, 1), x.compress(cond), x.compress(short, 0)], [x, cond, short], [[xv, cv, sv]]
        )[0]
        np.testing.assert_array_equal(a, np.compress(cv, xv, 1))
        np.testing.assert_array_equal(b, np.compress(cv, xv))
        np.testing.assert_array_equal(c, np.compress(sv, xv, 0))

    def test_compress_ignores_condition_entries_past_the_axis(self) -> None:
        """ONNX ``Compress``: a condition longer than the axis (or the flattened tensor) has its
        extra entries ignored; they once selected the last slice again, or an empty axis's
        padding (found comparing mutated ONNX models with ONNX Runtime)."""
        cond = Tensor.placeholder((4,), asyncjit.bool_, name="c")
        cv = np.array([False, True, True, True])
        for shape in [(2, 3), (0, 2), (3,)]:
            x = Tensor.placeholder(shape, name="x")
            xv = RNG.standard_normal(shape).astype(np.float32)
            axis = 0 if len(shape) == 2 and shape[0] else None
            (got,) = _both([x.compress(cond, axis)], [x, cond], [[xv, cv]])[0]
            n = xv.shape[0] if axis == 0 else xv.size
            np.testing.assert_array_equal(got, np.compress(cv[:n], xv, axis))

    @pytest.mark.parametrize("dtype", [np.int32, np.float32])
    def test_unique(self, dtype: Any) -> None:
        """Sorted distinct values; NaNs count once, sorted last."""
        x = Tensor.placeholder((12,), dtype, name="x")
        vals = RNG.integers(-3, 4, 12).astype(dtype)
        if dtype == np.float32:
            vals[[2, 7]] = np.nan
        (out,) = _both([x.unique()], [x], [[vals]])[0]
        np.testing.assert_array_equal(out, np.unique(vals, equal_nan=True))


class TestRuntime:
    @pytest.mark.parametrize("inline", [True, False])
    def test_buffers_get_actual_shapes(self, inline: bool) -> None:
        """Output Buffers have their actual shape once ready; an out-of-bound size poisons them."""
        x = Tensor.placeholder((8, 3), name="x")
        c = Tensor.placeholder((), asyncjit.int64, name="c")
        exe = compile([x.prefix(c, bound=6) + 1], [x, c])
        xv = RNG.standard_normal((8, 3)).astype(np.float32)
        with asyncjit.runtime.Client() as client:
            le = client.load(exe)
            bx = client.buffer_from_host(xv)
            (out,) = le.execute_blocking([bx, client.buffer_from_host(np.array(4))], inline=inline)
            got = out.to_numpy_blocking()
            assert out.shape == (4, 3)
            np.testing.assert_allclose(got, xv[:4] + 1)
            (bad,) = le.execute_blocking([bx, client.buffer_from_host(np.array(7))], inline=inline)
            with pytest.raises(VarBoundsError, match="prefix"):
                bad.to_numpy_blocking()

    def test_jit_boolean_mask(self) -> None:
        """``jit`` of a function with a boolean mask returns the actual rows."""

        @asyncjit.jit
        def positive(x: Tensor) -> Tensor:
            return x[x > 0] * 2

        xv = RNG.standard_normal(20).astype(np.float32)
        np.testing.assert_allclose(np.asarray(positive(xv).to_numpy_blocking()), xv[xv > 0] * 2)

    def test_reference_device(self) -> None:
        """The reference device runs plans with data-dependent sizes too."""
        from asyncjit.compiler import ReferenceExecutable

        x = Tensor.placeholder((8,), name="x")
        exe = ReferenceExecutable([x[x > 0]], [x])
        xv = RNG.standard_normal(8).astype(np.float32)
        with asyncjit.runtime.Client() as client:
            (out,) = client.load(exe).execute_blocking([client.buffer_from_host(xv)])
            np.testing.assert_array_equal(out.to_numpy_blocking(), xv[xv > 0])


def test_bound_call_returns_actual_shapes() -> None:
    """``CpuExecutable.bind``: outputs() are views of the actual shapes; a bad size raises."""
    x = Tensor.placeholder((8,), name="x")
    exe = compile([x.nonzero(bound=4)], [x])
    xv = np.array([0, 1, 0, 2, 0, 0, 3, 0], np.float32)
    out = np.empty((4, 1), np.int64)
    call = exe.bind([xv], [out])
    call()
    np.testing.assert_array_equal(call.outputs()[0], np.argwhere(xv))
    xv[:] = 1
    with pytest.raises(VarBoundsError, match="nonzero"):
        call()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class TestUnbounded:
    def _graph(self) -> tuple[Tensor, list[Tensor], np.ndarray]:
        u = Var("u", 1, None)
        x = Tensor.placeholder((u, 8), name="x")
        w = RNG.standard_normal((8, 4)).astype(np.float32)
        y = ((x * 2 + 1).tanh() @ Tensor.const(w)).relu()
        return x, [y, y.sum(0), y.max()], w

    def test_var_without_max(self) -> None:
        """``Var(name, min, None)`` is unbounded; bad bounds are still VarBoundsErrors."""
        u = Var("u", 1, None)
        assert u.unbounded and repr(u) == "Var('u', 1, None)" and not Var("b", 1, 4).unbounded
        with pytest.raises(VarBoundsError):
            Var("v", 0, None)

    def test_one_plan_serves_any_size(self) -> None:
        """Sizes 1, 1,000 and 1,000,000 from one compile, equal to numpy."""
        x, outs, w = self._graph()
        exe = compile(outs, [x])
        for n in (1, 1000, 1_000_000):
            xv = RNG.standard_normal((n, 8)).astype(np.float32)
            y, s, m = exe.run([xv])
            want = np.maximum(np.tanh(xv * 2 + 1) @ w, 0)
            assert y.shape == (n, 4)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(s, want.sum(0, dtype=np.float64), rtol=1e-4)
            assert float(m) == pytest.approx(float(want.max()), rel=1e-5)
            if n == 1000:
                ref = evaluate(outs, {x: xv}, {"u": n})
                for r, g in zip(ref, (y, s, m), strict=True):
                    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)

    def test_arena_is_reused_and_rss_stays_flat(self) -> None:
        """The dynamic arena grows to the largest size seen, then every run reuses it: RSS does
        not grow over 2,000 runs at mixed sizes."""
        x, outs, _ = self._graph()
        exe = compile(outs, [x])
        sizes = RNG.integers(1, 20_000, 2000)
        feeds = {int(n): RNG.standard_normal((int(n), 8)).astype(np.float32) for n in (1, 20_000)}
        exe.run([feeds[20_000]])
        launcher = exe._thread_launcher()
        arena = launcher._dyn_arena  # type: ignore[union-attr]
        before = _rss_bytes()
        big = feeds[20_000]
        for n in sizes:
            exe.run([big[: int(n)]])
        assert launcher._dyn_arena is arena  # type: ignore[union-attr]
        assert _rss_bytes() - before < 16 << 20

    def test_bad_sizes_are_typed_errors(self) -> None:
        """A negative or missing size for an unbounded var is a VarBoundsError before native code."""
        x, outs, _ = self._graph()
        exe = compile(outs, [x])
        with pytest.raises(VarBoundsError, match="unbounded"):
            exe.signature.var_values({})
        with pytest.raises(VarBoundsError):
            exe.signature.var_values({"u": -5})

    def test_runtime_and_serialized(self) -> None:
        """Buffers of unbounded outputs are allocated per run; a serialized plan keeps the var."""
        x, outs, w = self._graph()
        exe = deserialize(compile(outs[:1], [x]).serialize())
        with asyncjit.runtime.Client() as client:
            le = client.load(exe)
            for n in (3, 5000, 7):
                xv = RNG.standard_normal((n, 8)).astype(np.float32)
                (out,) = le.execute_blocking([client.buffer_from_host(xv)])
                got = out.to_numpy_blocking()
                assert got.shape == (n, 4)
                np.testing.assert_allclose(got, np.maximum(np.tanh(xv * 2 + 1) @ w, 0), rtol=1e-4, atol=1e-4)

    def test_data_dependent_size_of_unbounded_axis_needs_a_bound(self) -> None:
        """``x[mask]`` over an unbounded axis needs ``bound=`` (there is no shape to derive it from)."""
        u = Var("u", 1, None)
        x = Tensor.placeholder((u,), name="x")
        with pytest.raises(TensorError, match="bound"):
            x.nonzero()
        exe = compile([x.nonzero(bound=100)], [x])
        xv = np.zeros(5000, np.float32)
        xv[[3, 4000]] = 1
        np.testing.assert_array_equal(exe.run([xv])[0], [[3], [4000]])


def test_same_graph_built_twice_hits_the_plan_cache() -> None:
    """Data-dependent sizes get fresh names per build; compile keys them by position instead."""

    def build() -> Any:
        x = Tensor.placeholder((64,), name="x")
        return compile([x[x > 0] * 2], [x])

    assert build() is build()


def test_pending_output_is_refused_as_an_input_until_ready() -> None:
    """An output whose shape is data-dependent cannot feed another plan before it is ready (its
    shape is still the bound's); once ready it can."""
    import threading

    from asyncjit.compiler._executable import ArgSpec
    from asyncjit.devices import HostExecutable
    from asyncjit.errors import ShapeMismatchError

    gate = threading.Event()

    def hold(a: np.ndarray) -> np.ndarray:
        assert gate.wait(10)
        return a

    spec = ArgSpec("a", (8,), asyncjit.float32)
    held = HostExecutable.build("gate", hold, [spec], [ArgSpec("out", (8,), asyncjit.float32)])
    x = Tensor.placeholder((8,), name="x")
    exe = compile([x[x > 0]], [x])
    n = Var("n", 1, 8)
    y = Tensor.placeholder((n,), name="y")
    double = compile([y * 2], [y])
    xv = np.array([1, -1, 2, 0, 3, -2, 0, 4], np.float32)
    with asyncjit.runtime.Client() as client:
        (first,) = client.load(held).execute_blocking([client.buffer_from_host(xv)], inline=False)
        (out,) = client.load(exe).execute_blocking([first], inline=False)
        with pytest.raises(ShapeMismatchError, match="ready"):
            client.load(double).execute_blocking([out])
        gate.set()
        out.block_until_ready()
        assert out.shape == (4,)
        (twice,) = client.load(double).execute_blocking([out], {"n": 4})
        np.testing.assert_array_equal(twice.to_numpy_blocking(), [2, 4, 6, 8])
