"""A short fixed slice of ``tests/mux_chaos.py``: streams that cancel, time out, poison batches,
send refused chunks, go idle, close with steps queued or leave, and muxes that exit under them,
on every loop, over a numpy step and over an ONNX model's compiled one; every result is checked
bit by bit against the steps its stream ran, every error is typed, no round hangs and no exited
mux keeps a stream. ``make fuzz-mux`` runs it longer."""

from __future__ import annotations

import pytest
from chaos_common import LOOP_PARAMS
from mux_chaos import ACTIONS, STEPS, run

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("backend", LOOP_PARAMS)
def test_misbehaving_streams_never_break_the_mux(backend: str, step: str) -> None:
    """Over a numpy step (failed batches raise in the step) and over ``recurrent_step`` of an
    ONNX model (a compiled slot plan, its pool updated in place; failed runs index out of range)."""
    if step == "onnx":
        pytest.importorskip("onnx")
    r = run(backend, seed=7, rounds=40, step_kind=step)
    assert r["bad"] == []
    assert set(r["actions"]) == set(ACTIONS)  # every kind of misbehaviour was tried
    assert r["results"] > 100  # and plenty of results were checked
    for error in ("MuxClosedError", "StreamClosedError", "AudioFormatError", "ShapeMismatchError"):
        assert r["errors"].get(error, 0) > 0, error
