"""The passes that remove dynamism, each on its own: ``refine_arguments``, ``refine_shapes``,
``canonicalize_dynamism``; and ``optimize_graph``/``compile`` running them."""

from __future__ import annotations

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.compiler import compile
from asyncjit.errors import ShapeMismatchError, VarBoundsError
from asyncjit.passes import Graph, canonicalize_dynamism, optimize_graph, refine_arguments, refine_shapes
from asyncjit.symbolic import DataVar


def _graph() -> tuple[Var, Tensor, Graph]:
    t = Var("t", 1, 4096)
    x = Tensor.placeholder((t, 8), name="x")
    y = (x + 1).reshape(t * 2, 4).sum(0)
    return t, x, Graph.of([y.node, (x[:, :3] * 2).node], [x.node])


class TestRefineArguments:
    def test_records_without_propagating(self) -> None:
        """Refinements are checked and kept pending; no node changes yet (a pure function)."""
        _, x, g = _graph()
        g1 = refine_arguments(g, {"x": (16, 8)})
        assert g1.pending == {"t": 16}
        assert g1.inputs == g.inputs and g1.outputs == g.outputs and g.pending == {}
        g2 = refine_arguments(g, {x: ((2, 64), None)})
        assert g2.pending == {"t": Var("t", 2, 64)}

    def test_two_refinements_intersect(self) -> None:
        """Refining one var twice keeps what both allow."""
        _, _, g = _graph()
        g1 = refine_arguments(refine_arguments(g, {"x": ((1, 100), 8)}), {"x": ((50, 200), None)})
        assert g1.pending == {"t": Var("t", 50, 100)}
        with pytest.raises(VarBoundsError, match="disjoint"):
            refine_arguments(g1, {"x": ((300, 400), 8)})

    @pytest.mark.parametrize(
        ("shape", "error"),
        [
            ((16, 9), ShapeMismatchError),  # a static dim given another size
            ((16,), ShapeMismatchError),  # another rank
            ((5000, 8), VarBoundsError),  # outside the var's bounds
            ((0, 8), VarBoundsError),
            (("a", 8), Exception),
        ],
    )
    def test_incompatible_refinements_are_typed_errors(self, shape: tuple[object, ...], error: type) -> None:
        """A refinement the argument cannot take raises, naming the input and dim."""
        _, _, g = _graph()
        with pytest.raises(error, match="x"):
            refine_arguments(g, {"x": shape})

    def test_unknown_input(self) -> None:
        _, _, g = _graph()
        with pytest.raises(ShapeMismatchError, match="no single input"):
            refine_arguments(g, {"y": (1, 8)})


class TestRefineShapes:
    def test_propagates_ints_and_ranges(self) -> None:
        """Pending refinements reach every shape and symbolic attr; int vars leave graph.vars."""
        _, _, g = _graph()
        g16 = refine_shapes(refine_arguments(g, {"x": (16, 8)}))
        assert g16.vars == () and g16.pending == {}
        assert all(all(isinstance(d, int) for d in n.shape) for n in g16.nodes)
        reshape = next(n for n in g16.nodes if n.op == "reshape" and n.shape[0] == 32)
        assert reshape.shape == (32, 4)
        narrow = refine_shapes(refine_arguments(g, {"x": ((1, 64), 8)}))
        assert narrow.vars == (Var("t", 1, 64),) and narrow.inputs[0].shape[0] == Var("t", 1, 64)

    def test_degenerate_vars_become_ints(self) -> None:
        """A var with min == max is an int after refine_shapes, with nothing pending."""
        x = Tensor.placeholder((Var("u", 3, 3), 2), name="x")
        g = refine_shapes(Graph.of([(x * 2).node], [x.node]))
        assert g.inputs[0].shape == (3, 2) and g.vars == ()

    def test_results_equal_the_dynamic_graph(self) -> None:
        """The refined graph computes what the dynamic one does at that size."""
        _, x, g = _graph()
        xv = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
        ref = asyncjit.reference.evaluate(list(g.outputs), {x: xv}, {"t": 16})
        g16 = refine_shapes(refine_arguments(g, {"x": (16, 8)}))
        got = asyncjit.reference.evaluate(list(g16.outputs), {g16.inputs[0]: xv})
        for r, v in zip(ref, got, strict=True):
            np.testing.assert_array_equal(r, v)


class TestCanonicalizeDynamism:
    def test_constant_count_prefix_becomes_a_shrink(self) -> None:
        """``prefix`` by a constant in range is a static ``shrink``; its size an int downstream."""
        x = Tensor.placeholder((10, 4), name="x")
        z = x.prefix(Tensor.const(np.array(3))) * 2
        g = canonicalize_dynamism(Graph.of([z.node, z.mean(0).node], [x.node]))
        assert "prefix" not in {n.op for n in g.nodes} and g.outputs[0].shape == (3, 4)
        assert not any(isinstance(d, DataVar) for n in g.nodes for d in n.shape)
        xv = np.arange(40, dtype=np.float32).reshape(10, 4)
        a, m = asyncjit.reference.evaluate(list(g.outputs), {g.inputs[0]: xv})
        np.testing.assert_array_equal(a, xv[:3] * 2)
        np.testing.assert_allclose(m, (xv[:3] * 2).mean(0))

    def test_out_of_range_or_data_counts_stay_dynamic(self) -> None:
        """A constant count above the bound, or a computed one, stays a prefix (the run checks)."""
        x = Tensor.placeholder((10,), name="x")
        big = x.prefix(Tensor.const(np.array(9)), bound=5)
        data = x[: (x > 0).cast(asyncjit.int64).sum()]
        g = canonicalize_dynamism(Graph.of([big.node, data.node], [x.node]))
        assert sum(n.op == "prefix" for n in g.nodes) == 2

    def test_optimize_graph_and_compile_use_the_passes(self) -> None:
        """``optimize_graph`` refines pending arguments and canonicalizes; a compiled refined
        graph takes the refined shape only."""
        t = Var("t", 1, 64)
        x = Tensor.placeholder((t, 4), name="x")
        n = Tensor.from_dim(t, asyncjit.int64) // 2
        y = x[:n] + 1
        g = refine_arguments(Graph.of([y.node], [x.node]), {"x": (8, 4)})
        opt = optimize_graph(g)
        assert "prefix" not in {n.op for n in opt.nodes} and opt.outputs[0].shape == (4, 4)
        exe = compile([opt.outputs[0]], [opt.inputs[0]])
        (out,) = exe.run([np.ones((8, 4), np.float32)])
        np.testing.assert_array_equal(out, np.full((4, 4), 2, np.float32))
