"""A short fixed slice of ``tests/runtime_chaos.py``: two threads run random programs of
buffer operations (puts, queued and inline executions that donate or not, failing runs,
copies between the two devices, deletes, reclaims, reads) on one client, then close it with
work queued; every read equals a numpy model, every error is typed, nothing hangs.
``make fuzz-runtime`` runs it longer."""

from __future__ import annotations

import pytest
from runtime_chaos import OPS, run

pytestmark = pytest.mark.timeout(300)


def test_random_buffer_programs_match_the_model() -> None:
    r = run(seed=5, rounds=400)
    assert r["bad"] == []
    assert set(r["ops"]) == set(OPS) and all(r["ops"].values())
    assert r["reads"] > 1000
    for error in ("IndexOutOfRangeError", "BufferDeletedError"):
        assert r["errors"].get(error, 0) > 0, error
