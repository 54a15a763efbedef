"""Many steps from one task: ``StreamMux.submit_many`` / ``wait_all`` / ``step_many``.

A server that owns many streams in one task (a connection pool) would otherwise submit and
await one step at a time, paying a task switch and a loop iteration per step. These helpers
queue one step on each of many streams in one call and park the task once: a ``StepGroup``
counts its unfinished futures down as the mux resolves them and wakes the task when the last
one is done, so a group costs one wake-up however many batches and resolve slices it spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ShapeMismatchError, WouldBlock
from ._signal import Signal
from ._stream import DONE, OPEN, MuxStream, StepFuture

if TYPE_CHECKING:
    from ._mux import StreamMux

__all__ = ["StepGroup", "notify_when_done", "submit_many", "submit_many_nowait", "unnotify", "wait_all"]


class StepGroup:
    """Wakes one task when its last unfinished ``StepFuture`` is done (set by the mux)."""

    __slots__ = ("_left", "_signal")

    def __init__(self, left: int, signal: Signal) -> None:
        self._left = left
        self._signal = signal

    def _one_done(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._signal.set()


def _chunk_list(mux: StreamMux, streams: Sequence[MuxStream], chunks: Any, copy: bool = True) -> list[Any]:
    """The chunks as private copies in the plan's dtype (checked before anything is queued);
    ``copy=False``: rows of a block the caller hands over, kept as they are when they fit."""
    n = len(streams)
    if isinstance(chunks, np.ndarray):
        if chunks.ndim != len(mux._chunk_shape) + 1 or chunks.shape[0] != n:
            raise ShapeMismatchError(
                f"{mux.name}: chunks for {n} streams must have shape ({n}, *{mux._chunk_shape}), "
                f"got {chunks.shape}"
            )
        if chunks.dtype == mux._chunk_dtype and chunks.shape[1:] == mux._chunk_shape:
            return list(chunks.copy() if copy else chunks)  # one copy for the block; each step keeps a row
        return [mux._coerce(c) for c in chunks]  # rows are views: _coerce copies each
    items = list(chunks)
    if len(items) != n:
        raise ShapeMismatchError(f"{mux.name}: {len(items)} chunks for {n} streams; give one per stream")
    return [mux._coerce(c) for c in items]


def submit_many_nowait(
    mux: StreamMux,
    streams: Sequence[MuxStream],
    chunks: npt.ArrayLike | Sequence[npt.ArrayLike],
    copy: bool = True,
) -> list[StepFuture]:
    """All or nothing: every stream is usable and has room for its steps, or nothing is queued."""
    coerced = _chunk_list(mux, streams, chunks, copy)
    depth = mux.queue_depth
    counts: dict[MuxStream, int] = {}
    for s in streams:
        counts[s] = counts.get(s, 0) + 1
    for s, k in counts.items():
        s._check_usable()
        if len(s._queue) + k > depth:
            raise WouldBlock(
                f"{s!r}: no room for {k} more step(s) (queue_depth={depth}); await submit_many() "
                "to wait for room"
            )
    if len(counts) == 1:  # one stream's block (a server connection's read)
        return streams[0]._enqueue_rows(coerced)
    return [s._enqueue(c) for s, c in zip(streams, coerced, strict=True)]


async def submit_many(
    mux: StreamMux, streams: Sequence[MuxStream], chunks: npt.ArrayLike | Sequence[npt.ArrayLike]
) -> list[StepFuture]:
    """Queue in order, waiting for room where a stream's queue is full; cancelled: withdrawn.

    A run of steps for one stream waits once for room for the whole run (or a full queue's
    worth), not once per step: a producer behind the mux (a server's connection catching up on
    a backlog) then costs one wake-up per block instead of one per step."""
    coerced = _chunk_list(mux, streams, chunks)
    futures: list[StepFuture] = []
    depth = mux.queue_depth
    n = len(coerced)
    try:
        i = 0
        while i < n:
            s = streams[i]
            if s._status == OPEN and len(s._queue) < depth:
                futures.append(s._enqueue(coerced[i]))
                i += 1
                continue
            run = 1
            while i + run < n and run < depth and streams[i + run] is s:
                run += 1
            await s._wait_room(run)
    except BaseException:
        for fut in futures:  # a half-submitted group: the queued steps never run
            fut.cancel()
        raise
    return futures


async def wait_all(mux: StreamMux, futures: Sequence[StepFuture]) -> None:
    """Park until every future is done (one wake-up); cancelled: each unfinished one is abandoned."""
    signal = mux._signal()
    left = notify_when_done(futures, signal)
    if not left:
        return
    try:
        await signal.wait()
    except BaseException:
        unnotify(left)
        raise


def notify_when_done(futures: Sequence[StepFuture], signal: Signal) -> list[StepFuture]:
    """Set ``signal`` once every future is done, without a task waiting for it meanwhile (a
    server's responder parked on its own signal): the futures it watches (none: set now)."""
    left = [f for f in futures if f._state < DONE]
    if not left:
        signal.set()
        return left
    group = StepGroup(len(left), signal)
    for f in left:
        if f._group is not None:
            raise RuntimeError(f"{f!r} is already awaited by another wait_all")
        f._group = group
    return left


def unnotify(futures: Sequence[StepFuture]) -> None:
    """Undo ``notify_when_done`` (its waiter was cancelled): abandon what is still unfinished."""
    for f in futures:
        f._group = None
        if f._state < DONE:
            f._abandon()
