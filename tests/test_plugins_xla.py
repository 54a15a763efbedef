"""The ``xla`` plugin: partitions exported with ``jax.export`` (StableHLO bytecode), mixed with CPU
kernels, against the reference; symbolic batch dims; serialized plans keep the bytecode."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import compile, deserialize, partition
from asyncjit.graph import as_node
from asyncjit.passes import Graph
from asyncjit.testing import check_plugin_conformance

pytest.importorskip("jax", reason="the xla plugin needs the jax extra")

from asyncjit.plugins._xla import XlaPlugin


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def test_mixed_graph_equals_reference_and_survives_serialization() -> None:
    b = Var("b", 1, 6)
    x = Tensor.placeholder((b, 8), name="x")
    w = Tensor.const(np.linspace(-1, 1, 40, dtype=np.float32).reshape(8, 5))
    h = (x @ w).tanh()
    g = h.gelu()  # no JAX translation here: the CPU runs it between two XLA partitions
    outs = [(g * h).sum(axis=1, keepdims=True), h.permute((1, 0)), g]
    exe = compile(outs, [x], plugins=[XlaPlugin(claim_all=True)])
    assert [p.plugin for p in exe.payloads] == ["xla"] and len(exe.dispatch) == 2
    again = deserialize(exe.serialize(), plugins=[XlaPlugin(claim_all=True)])
    for n in (1, 4, 6):
        xv = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        want = reference.evaluate(outs, {x: xv}, {"b": n})
        for runner in (exe, again):
            for got, ref in zip(runner.run([xv], {"b": n}), want, strict=True):
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_symbolic_sizes_in_attributes_fall_back_with_a_reason() -> None:
    b = Var("b", 1, 6)
    x = Tensor.placeholder((b, 4), name="x")
    y = x.reshape(4 * b).exp()
    graph = Graph.of([as_node(y)], [as_node(x)])
    result = partition(graph, [XlaPlugin(claim_all=True)])
    reasons = [f.reason for f in result.fallbacks if f.node.op == "reshape"]
    assert reasons and "symbolic expression" in reasons[0]  # 4 * b is not a plain var


def test_conformance() -> None:
    report = check_plugin_conformance(XlaPlugin(claim_all=True))
    assert set(report.claimed) == {"chain", "diamond", "matmul", "reduce"}
