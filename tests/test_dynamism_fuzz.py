"""Differential fuzzing with dynamism: random graphs with data-dependent sizes (boolean masks,
``x[:count]``) and with every var unbounded, compiled == reference (``tests/fuzzing.py``)."""

from __future__ import annotations

from fuzzing import check_case
from hypothesis import HealthCheck, given, settings
from strategies import DYNAMIC_KINDS, graph_cases, unbounded_case
from strategies_case import VALUE_PROFILES, GraphCase


def _check(case: GraphCase, paths: tuple[str, ...]) -> None:
    _, found = check_case(case, paths=paths)
    assert not found, "\n".join([case.describe(), *map(str, found)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_cases(kinds=DYNAMIC_KINDS, max_steps=6, profiles=VALUE_PROFILES, max_bound=12))
def test_data_dependent_sizes_match_reference(case: GraphCase) -> None:
    """Masks and computed slice stops, then elementwise ops, casts and reductions over them."""
    _check(case, ("compile", "execute"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_cases(max_steps=5, profiles=VALUE_PROFILES, max_bound=24))
def test_unbounded_vars_match_reference(case: GraphCase) -> None:
    """Every op kind with its vars declared unbounded: one plan per graph, sized per run."""
    _check(unbounded_case(case), ("compile", "fixed", "execute"))
