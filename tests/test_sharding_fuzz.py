"""Sharded ``jit`` over ``cpu:2`` equals the one-device ``jit`` on the fuzz graphs.

Each random graph (``tests/strategies.graph_cases``) is replayed inside a jitted function; the
inputs whose axis 0 has the first input's length (>= 2) are split over two devices, the others
replicated. Graphs whose ops keep rows apart run one shard per device; the rest (a reduction over
the split axis, a reshape to fixed sizes...) run whole on one device. Both must give the
single-device answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from strategies import assert_outputs_match, graph_cases
from strategies_case import GraphCase

from asyncjit import Client, Sharding, Tensor, jit
from asyncjit.errors import JitError
from asyncjit.graph import Node, as_node, make_node
from asyncjit.passes import Graph, refine
from asyncjit.testing import capture_events


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client("cpu:2")
    yield c
    c.close()


def _replayer(case: GraphCase, split: list[int], whole: list[int]) -> Any:
    """``f(a, r)``: the case's graph (vars fixed at its bindings) on new inputs; ``a`` holds the
    inputs to split, ``r`` the others, by placeholder index."""
    graph = refine(
        Graph.of([as_node(o) for o in case.outputs], [as_node(p) for p in case.placeholders]),
        case.var_values(),
    )

    def f(a: tuple[Tensor, ...], r: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        memo: dict[int, Node] = {}
        for i, t in zip(split, a, strict=True):
            memo[graph.inputs[i].id] = as_node(t)
        for i, t in zip(whole, r, strict=True):
            memo[graph.inputs[i].id] = as_node(t)
        for node in graph.nodes:
            if node.id not in memo:
                memo[node.id] = make_node(node.op, [memo[i.id] for i in node.inputs], **dict(node.attrs))
        return tuple(Tensor(memo[o.id]) for o in graph.outputs)

    return f


def _check(client: Client, case: GraphCase) -> bool:
    """Sharded vs one-device results of ``case``; True when the sharded call ran split."""
    feed = [case.inputs[p] for p in case.placeholders]
    lead = feed[0].shape[0] if feed[0].ndim else 0
    split = [i for i, x in enumerate(feed) if x.ndim and x.shape[0] == lead and lead >= 2]
    whole = [i for i in range(len(feed)) if i not in split]
    a = tuple(feed[i] for i in split)
    r = tuple(feed[i] for i in whole)
    one = jit(_replayer(case, split, whole), device=client.device(0))
    many = jit(
        _replayer(case, split, whole), in_shardings={"a": Sharding.split(client.devices(), 0, ragged=True)}
    )
    try:
        want = [np.asarray(b) for b in one(a, r)]
    except JitError as exc:
        with pytest.raises(type(exc)):
            [np.asarray(b) for b in many(a, r)]
        return False
    with capture_events() as events:
        got = [np.asarray(b) for b in many(a, r)]
    assert_outputs_match(got, want, case.describe())
    fallback = [e for e in events if e.get("event") == "jit.shard_fallback"]
    assert len(fallback) <= 1 and (fallback or split)  # split plans log nothing; whole ones say why
    return not fallback


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(case=graph_cases(max_steps=5))
def test_sharded_jit_equals_one_device(client: Client, case: GraphCase) -> None:
    _check(client, case)


ROW_KINDS = (
    "unary",
    "binary",
    "scalar_binary",
    "where",
    "cast",
    "reduce",
    "matmul",
    "permute",
    "cat",
    "const",
)
"""Op kinds that keep rows apart when they do not act on the split axis: graphs that mostly split."""


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(case=graph_cases(kinds=ROW_KINDS, max_steps=5, max_vars=0))
def test_sharded_jit_equals_one_device_on_row_wise_graphs(client: Client, case: GraphCase) -> None:
    first = case.inputs[case.placeholders[0]]
    assume(first.ndim >= 1 and first.shape[0] >= 2)
    _check(client, case)


def test_the_fuzz_slice_exercises_both_paths(client: Client) -> None:
    """A graph of elementwise ops runs split; one that sums over the split axis runs whole."""
    s = Sharding.split(client.devices(), 0)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    rows = jit(lambda x: (x * 2.0).exp().sum(axis=1), in_shardings=s)
    cols = jit(lambda x: x.sum(axis=0), in_shardings=s)
    with capture_events() as events:
        out_rows, out_cols = rows(x), cols(x)
    assert out_rows.sharding == s and len(out_rows.shards) == 2
    assert out_cols.sharding.devices == (client.device(0),)
    np.testing.assert_allclose(np.asarray(out_rows), np.exp(x * 2).sum(1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out_cols), x.sum(0), rtol=1e-6)
    reasons = [e["reason"] for e in events if e.get("event") == "jit.shard_fallback"]
    assert reasons == ["a reduction over the split axis"]
