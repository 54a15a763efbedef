"""What the chaos fuzzers (``serve_chaos``, ``mux_chaos``, ``runtime_chaos``) and their tests
share: the event loops to run on, and which rounds to run (a count, a time, or one to replay)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from asyncjit._loops import LOOP_NAMES, uvloop_installed

__all__ = ["LOOP_PARAMS", "add_counts", "installed_loops", "round_indices"]

LOOP_PARAMS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(
            not uvloop_installed(), reason="uvloop is not installed (the serve extra has it)"
        ),
    )
    if name == "uvloop"
    else name
    for name in LOOP_NAMES
]
"""``LOOP_NAMES`` for ``pytest.mark.parametrize``: uvloop skipped with its reason where missing."""


def installed_loops() -> list[str]:
    """``LOOP_NAMES`` that run here (uvloop only where installed)."""
    return [name for name in LOOP_NAMES if name != "uvloop" or uvloop_installed()]


def round_indices(rounds: int | None, seconds: float, only: int | None = None) -> Iterator[int]:
    """The rounds to run: ``only`` alone (a replay), else 0, 1, ... for ``rounds`` rounds, or
    (``rounds`` None) until ``seconds`` have passed."""
    if only is not None:
        yield only
        return
    t0 = time.monotonic()
    index = 0
    while index < rounds if rounds is not None else time.monotonic() - t0 < seconds:
        yield index
        index += 1


def add_counts(into: dict[str, int], more: dict[str, int]) -> None:
    """Add the counts of ``more`` to ``into``, key by key."""
    for key, n in more.items():
        into[key] = into.get(key, 0) + n
