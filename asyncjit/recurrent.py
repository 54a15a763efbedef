"""``JitRecurrent``: a prepared jit plus host-side LSTM state, stepped one chunk at a time.

The wrapped jit's output must be one flat float32 block ``[head | h | c]`` along its last axis.
``JitRecurrent`` checks that once, at construction (``OutputLayoutMismatchError`` otherwise), so
a build that drifts from the layout fails loudly instead of silently mis-splitting state.

Each ``step(pack_inputs)``: ``pack_inputs(jit)`` writes the step's inputs through the jit's
``*_mut`` views; ``jit.pack_state(state)`` copies the host state into the jit's state inputs;
``jit.execute_step()`` replays; the output is split, the host state updated in place, and the head
returned as a float32 array. ``reset()`` zeroes the state without touching the jit.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import attrs
import numpy as np

from .errors import (
    ArgumentTypeError,
    DTypeMismatchError,
    InvalidArgumentError,
    OutputLayoutMismatchError,
    ShapeMismatchError,
)

__all__ = ["JitRecurrent", "LstmState", "RecurrentJit", "StepTiming"]


def _f32(value: Any) -> np.ndarray:
    try:
        return np.array(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DTypeMismatchError(f"LstmState holds float32 arrays; cannot convert {value!r}: {exc}") from None


@attrs.define(eq=False)
class LstmState:
    """Recurrent state ``h`` and ``c`` as flat float32 arrays (updated in place by ``step``)."""

    h: np.ndarray = attrs.field(converter=_f32)
    c: np.ndarray = attrs.field(converter=_f32)

    @classmethod
    def zeros(cls, hidden: int, c_size: int | None = None) -> LstmState:
        """Zero state with ``len(h) == hidden`` and ``len(c) == c_size`` (default ``hidden``)."""
        return cls(np.zeros(hidden, np.float32), np.zeros(hidden if c_size is None else c_size, np.float32))

    def copy(self) -> LstmState:
        return LstmState(self.h.copy(), self.c.copy())

    def zero_(self) -> None:
        self.h[:] = 0
        self.c[:] = 0


@runtime_checkable
class RecurrentJit(Protocol):
    """What ``JitRecurrent`` needs from a prepared jit (``JitWrapper`` provides the last two)."""

    def pack_state(self, state: LstmState) -> None:
        """Copy ``state.h`` and ``state.c`` into the jit's state input buffers."""

    def execute_step(self) -> None:
        """Replay the plan once."""

    def output_buffer(self) -> Any:
        """The output ``Buffer`` of the latest step."""


@attrs.frozen
class StepTiming:
    """Seconds spent in the last step: packing inputs and state, replaying, reading back."""

    pack: float
    exec: float
    read: float


J = TypeVar("J", bound=RecurrentJit)


class JitRecurrent(Generic[J]):
    """Steps a recurrent jit, keeping its state on the host between steps."""

    def __init__(self, jit: J, state: LstmState, head_len: int) -> None:
        """Wrap ``jit`` with initial ``state``; ``head_len`` float32 elements precede ``h``.

        Raises:
            OutputLayoutMismatchError: the output is not float32 of exactly
                ``head_len + len(h) + len(c)`` elements along its last axis.
        """
        if isinstance(head_len, bool) or not isinstance(head_len, int) or head_len < 0:
            raise InvalidArgumentError(f"head_len must be an int >= 0, got {head_len!r}")
        if not isinstance(jit, RecurrentJit):
            raise ArgumentTypeError(
                f"JitRecurrent wraps a RecurrentJit (pack_state, execute_step, output_buffer), "
                f"got {type(jit).__qualname__}"
            )
        if not isinstance(state, LstmState):
            raise ArgumentTypeError(f"state must be an LstmState, got {type(state).__qualname__}")
        self.jit = jit
        self.state = state
        self.head_len = head_len
        self.last_timing: StepTiming | None = None
        self._sizes = (state.h.size, state.c.size)
        out = jit.output_buffer()
        want = head_len + state.h.size + state.c.size
        shape = tuple(out.shape)
        got = int(np.prod(shape)) if shape else 1
        if out.dtype.name != "float32" or got != want:
            raise OutputLayoutMismatchError(
                f"{type(jit).__qualname__} output is {out.dtype.name}{shape} ({got} elements); "
                f"JitRecurrent needs float32 [head | h | c] = {head_len} + {state.h.size} + "
                f"{state.c.size} = {want} elements"
            )

    def __repr__(self) -> str:
        return f"<JitRecurrent {type(self.jit).__qualname__} head={self.head_len} hidden={self.state.h.size}>"

    def _check_pack(self, pack_inputs: object) -> None:
        if pack_inputs is not None and not callable(pack_inputs):
            raise ArgumentTypeError(
                f"{self!r}: pack_inputs must be a function of the jit (or None), "
                f"got {type(pack_inputs).__name__}"
            )

    def _check_state(self) -> None:
        """The state may be replaced between steps (``state.h = ...``), but not resized: the
        output layout ``[head | h | c]`` was checked against the sizes at construction."""
        state = self.state
        if not isinstance(state, LstmState):
            raise ArgumentTypeError(f"{self!r}: state must be an LstmState, got {type(state).__qualname__}")
        if (state.h.size, state.c.size) != self._sizes:
            raise ShapeMismatchError(
                f"{self!r}: state h/c have {state.h.size}/{state.c.size} elements; this plan's "
                f"output holds h/c of {self._sizes[0]}/{self._sizes[1]} (make a new JitRecurrent "
                "for another state size)"
            )

    def _read(self) -> np.ndarray:
        out = self.jit.output_buffer()
        flat: np.ndarray = out.to_numpy_blocking().reshape(-1)
        h_end = self.head_len + self.state.h.size
        self.state.h[:] = flat[self.head_len : h_end]
        self.state.c[:] = flat[h_end:]
        return flat[: self.head_len]

    def step(self, pack_inputs: Callable[[J], object] | None = None) -> np.ndarray:
        """Run one iteration and return the head (a float32 array of ``head_len``)."""
        t0 = time.perf_counter()
        self._check_state()
        self._check_pack(pack_inputs)
        if pack_inputs is not None:
            pack_inputs(self.jit)
        self.jit.pack_state(self.state)
        t1 = time.perf_counter()
        self.jit.execute_step()
        t2 = time.perf_counter()
        head = self._read()
        self.last_timing = StepTiming(t1 - t0, t2 - t1, time.perf_counter() - t2)
        return head

    async def step_async(
        self, pack_inputs: Callable[[J], object | Awaitable[object]] | None = None
    ) -> np.ndarray:
        """``step`` for event-loop callers: the replay is awaited, never blocking the loop."""
        t0 = time.perf_counter()
        self._check_state()
        self._check_pack(pack_inputs)
        if pack_inputs is not None:
            result = pack_inputs(self.jit)
            if isinstance(result, Awaitable):
                await result
        self.jit.pack_state(self.state)
        t1 = time.perf_counter()
        run_async = getattr(self.jit, "execute_step_async", None)
        if run_async is not None:
            await run_async()
        else:
            self.jit.execute_step()
        t2 = time.perf_counter()
        head = self._read()
        self.last_timing = StepTiming(t1 - t0, t2 - t1, time.perf_counter() - t2)
        return head

    def reset(self) -> None:
        """Zero the host state for a new sequence; the jit and its plan are untouched."""
        self.state.zero_()
