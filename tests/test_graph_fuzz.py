"""Random small graphs through the Tensor API: the reference interpreter against an independent
numpy oracle (``tests/strategies.py``), over every op kind and bindings at and between the bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_outputs_match, bindings_for, graph_cases
from strategies_case import GraphCase
from strategies_kinds import ALL_KINDS

from asyncjit import reference
from asyncjit.symbolic import evaluate

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _check(case: GraphCase, bindings: dict[str, int], feed: dict[object, np.ndarray]) -> None:
    got = reference.evaluate(case.outputs, feed, case.var_values(bindings))
    want = case.expected(feed, bindings)  # type: ignore[arg-type]
    for out, g in zip(case.outputs, got, strict=True):
        assert tuple(evaluate(d, bindings) for d in out.shape) == g.shape
        assert g.dtype == out.dtype.np
    assert_outputs_match(got, want, f"{case.describe()} at {bindings}")


@FUZZ
@given(graph_cases())
def test_reference_matches_oracle(case: GraphCase) -> None:
    """Every op kind mixed at random: reference.evaluate equals the numpy oracle at the drawn binding."""
    _check(case, case.bindings, case.inputs)  # type: ignore[arg-type]


@FUZZ
@given(graph_cases(max_steps=4), st.data())
def test_one_graph_many_bindings(case: GraphCase, data: st.DataObject) -> None:
    """A graph built once is right at other bindings too (its topology never depends on them)."""
    other = data.draw(bindings_for(case.variables))
    _check(case, other, case.make_inputs(other, seed=1))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_KINDS).flatmap(lambda kind: graph_cases(kinds=(kind,), max_steps=3)))
def test_each_kind_alone(case: GraphCase) -> None:
    """Each op kind on its own (so a failure names the kind that broke)."""
    _check(case, case.bindings, case.inputs)  # type: ignore[arg-type]
