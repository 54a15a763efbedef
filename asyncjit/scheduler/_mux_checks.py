"""What a ``StreamMux`` refuses: options out of range when it is made, and chunks with a NaN or
infinite sample when their batch is packed (they would poison a stream's recurrent state)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import AudioFormatError, InvalidArgumentError
from ._errors import MuxClosedError
from ._protocol import BatchedStep
from ._signal import Parker, Signal
from ._stream import StepFuture

if TYPE_CHECKING:
    from ._mux import StreamMux


def refuse_non_finite(
    mux: StreamMux,
    batch: list[StepFuture],
    chunks: npt.NDArray[Any],
    slots: npt.NDArray[np.int32],
    finite: npt.NDArray[np.bool_],
) -> tuple[list[StepFuture], npt.NDArray[Any], npt.NDArray[np.int32]]:
    """Fail the steps whose chunk has a NaN or inf sample, which would poison the stream's
    recurrent state for good; the batch goes on without them (it may become empty).

    Checked once per batch, not per submit: one vectorised test of the packed chunks costs a
    hundredth of one test per chunk. The refused steps never run, so their streams' states
    stay as they were and their later steps go on in order.
    """
    finite = finite.reshape(len(batch), -1)
    good = np.asarray(finite.all(axis=1))
    keep = []
    for i, fut in enumerate(batch):
        if good[i]:
            keep.append(i)
            continue
        mux._metrics.refused += 1
        first = int(np.flatnonzero(~finite[i])[0])
        fut._fail(
            AudioFormatError(
                f"{mux.name}: a chunk of {fut.stream.name} has a NaN or infinite sample (first at "
                f"index {first}); it would corrupt the stream's state, so it was not run. Clean or "
                "replace the samples."
            )
        )
    k = len(keep)
    chunks[:k] = chunks[keep]
    slots[:k] = slots[keep]
    return [batch[i] for i in keep], chunks[:k], slots[:k]


def check_config(mux: StreamMux, step: BatchedStep, backlog: int | None) -> None:
    """Raises ``InvalidArgumentError`` (a ``ValueError``) naming the first bad option."""
    counts = {
        "max_streams": mux.max_streams,
        "max_batch_size": mux.max_batch_size,
        "queue_depth": mux.queue_depth,
        "pipeline_depth": mux.pipeline_depth,
        "backlog": 0 if backlog is None else backlog,
    }
    for label, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"{label} must be an int, got {value!r}")
    if not 1 <= mux.max_streams <= step.num_slots:
        raise InvalidArgumentError(
            f"max_streams must be in [1, {step.num_slots}] (the plan's slots), got {mux.max_streams}"
        )
    if not 1 <= mux.max_batch_size <= step.max_batch_size:
        raise InvalidArgumentError(
            f"max_batch_size must be in [1, {step.max_batch_size}] (the plan's batch bound), "
            f"got {mux.max_batch_size}"
        )
    if not mux.max_queue_delay >= 0:
        raise InvalidArgumentError(f"max_queue_delay must be >= 0 seconds, got {mux.max_queue_delay}")
    for label, seconds, low in (
        ("idle_timeout", mux.idle_timeout, "> 0"),
        ("admission_timeout", mux.admission_timeout, ">= 0"),
        ("metrics_interval", mux.metrics_interval, "> 0"),
    ):
        if seconds is not None and not (seconds > 0 if low == "> 0" else seconds >= 0):
            raise InvalidArgumentError(f"{label} must be {low} seconds or None, got {seconds}")
    if mux.queue_depth < 1:
        raise InvalidArgumentError(f"queue_depth must be >= 1, got {mux.queue_depth}")
    if backlog is not None and backlog < 0:
        raise InvalidArgumentError(f"backlog must be >= 0, got {backlog}")
    if mux.pipeline_depth < 1:
        raise InvalidArgumentError(f"pipeline_depth must be >= 1, got {mux.pipeline_depth}")


def not_running() -> Signal:
    raise MuxClosedError("the StreamMux is not running; enter it with `async with mux:`")


async def _not_running_park(holder: object) -> None:
    raise MuxClosedError("the StreamMux is not running; enter it with `async with mux:`")


NOT_RUNNING_PARKER = Parker(None, _not_running_park)


def not_running_clock() -> float:
    raise MuxClosedError("the StreamMux is not running; enter it with `async with mux:`")
