"""A short fixed slice of ``tests/serve_chaos.py``: misbehaving clients (resets, half-closes,
garbage, frames cut short, absurd formats, the same on the WebSocket port) beside a good stream,
on every loop; no connection ends as a crash or ``internal_error``, the good stream keeps its
edges, nothing stays open. ``make fuzz-serve`` runs it longer."""

from __future__ import annotations

import pytest
from serve_helpers import BACKENDS

pytest.importorskip("wyoming")
pytest.importorskip("websockets")

from serve_chaos import KINDS, run

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("backend", BACKENDS)
def test_misbehaving_clients_never_crash_a_connection(backend: str) -> None:
    r = run(backend, seed=11, rounds=4, clients=40)
    assert r["bad"] == []
    assert set(r["kinds"]) == set(KINDS)  # every kind of misbehaviour was tried
    assert r["reasons"].get("bad_frame", 0) > 0 and r["reasons"].get("done", 0) > 0
