"""``JitRecurrent``: layout check, stepping with host state, reset, async steps, timings."""

from __future__ import annotations

import numpy as np
import pytest

import asyncjit
from asyncjit import InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor
from asyncjit.errors import OutputLayoutMismatchError

HIDDEN = 4


class ToyCell(JitWrapper[int]):
    """h' = tanh(0.5*h + x), c' = c + x, head = [sum(h'), max(c')]: output [head(2) | h | c]."""

    x = asyncjit.Input()
    h = asyncjit.Input()
    c = asyncjit.Input()

    def build(self, model: int, x: Tensor, h: Tensor, c: Tensor) -> Tensor:
        h2 = (h * 0.5 + x).tanh()
        c2 = c + x
        head = Tensor.cat([h2.sum(axis=1, keepdims=True), c2.max(axis=1, keepdims=True)], axis=1)
        return Tensor.cat([head, h2, c2], axis=1)

    def pack_state(self, state: LstmState) -> None:
        self.h_mut()[0] = state.h
        self.c_mut()[0] = state.c


def _numpy_step(x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h2 = np.tanh(0.5 * h + x)
    c2 = c + x
    return np.array([h2.sum(), c2.max()]), h2, c2


@pytest.fixture(scope="module")
def cell() -> ToyCell:
    jit = ToyCell(0)
    jit.prepare(InputSpec.f32((1, HIDDEN)), InputSpec.f32((1, HIDDEN)), InputSpec.f32((1, HIDDEN)))
    return jit


def test_state_helpers() -> None:
    """LstmState.zeros sizes both halves; copy is independent."""
    s = LstmState.zeros(3, 5)
    assert s.h.shape == (3,) and s.c.shape == (5,) and s.h.dtype == np.float32
    t = s.copy()
    t.h[0] = 1
    assert s.h[0] == 0


def test_layout_mismatch_is_caught_at_construction(cell: ToyCell) -> None:
    """A head length that does not add up raises OutputLayoutMismatchError."""
    with pytest.raises(OutputLayoutMismatchError, match=r"1 \+ 4 \+ 4 = 9"):
        JitRecurrent(cell, LstmState.zeros(HIDDEN), head_len=1)
    with pytest.raises(OutputLayoutMismatchError):
        JitRecurrent(cell, LstmState.zeros(HIDDEN + 1), head_len=2)


def test_steps_match_numpy_and_update_state_in_place(cell: ToyCell) -> None:
    """Each step returns the head; the host state follows the numpy recurrence."""
    rnn = JitRecurrent(cell, LstmState.zeros(HIDDEN), head_len=2)
    assert isinstance(rnn, JitRecurrent) and isinstance(cell, asyncjit.RecurrentJit)
    h_ref, c_ref = np.zeros(HIDDEN), np.zeros(HIDDEN)
    rng = np.random.default_rng(0)
    h_array = rnn.state.h
    for _ in range(5):
        x = rng.standard_normal(HIDDEN).astype(np.float32)

        def write(j: ToyCell, x: np.ndarray = x) -> None:
            j.x_mut()[0] = x

        head = rnn.step(write)
        want, h_ref, c_ref = _numpy_step(x, h_ref, c_ref)
        np.testing.assert_allclose(head, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rnn.state.h, h_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rnn.state.c, c_ref, rtol=1e-5, atol=1e-6)
    assert rnn.state.h is h_array  # updated in place
    assert head.dtype == np.float32
    assert rnn.last_timing is not None and rnn.last_timing.exec >= 0


def test_reset_zeroes_state_without_touching_the_jit(cell: ToyCell) -> None:
    """After reset, the same inputs give the same output as a fresh sequence."""
    rnn = JitRecurrent(cell, LstmState.zeros(HIDDEN), head_len=2)
    x = np.full(HIDDEN, 0.3, np.float32)

    def write(j: ToyCell) -> None:
        j.x_mut()[0] = x

    first = rnn.step(write).copy()
    rnn.step(write)
    rnn.reset()
    assert not rnn.state.h.any() and not rnn.state.c.any()
    np.testing.assert_array_equal(rnn.step(write), first)


@pytest.mark.anyio
async def test_step_async_matches_step(cell: ToyCell) -> None:
    """step_async awaits the replay and gives the same values as step."""
    a = JitRecurrent(cell, LstmState.zeros(HIDDEN), head_len=2)
    b = JitRecurrent(cell, LstmState.zeros(HIDDEN), head_len=2)
    x = np.linspace(-1, 1, HIDDEN, dtype=np.float32)

    def write(j: ToyCell) -> None:
        j.x_mut()[0] = x

    for _ in range(3):
        sync = a.step(write).copy()
        got = await b.step_async(write)
        np.testing.assert_allclose(got, sync)
