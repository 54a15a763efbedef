"""``MuxStream`` (one live stream of a ``StreamMux``) and ``StepFuture`` (one submitted step).

A stream owns a bounded FIFO of submitted steps; the mux takes at most one step per stream per
batch, always the oldest, so results come back in submission order. When the FIFO is full,
``submit`` waits (backpressure on the producer) and ``submit_nowait`` raises ``WouldBlock``.

**Cancellation.** Cancelling the task that awaits a step (``await s.step(c)`` or ``await fut``)
cancels the step, with one of two outcomes, decided by whether it was already batched:

* not yet batched: it is withdrawn and never runs; the stream's state is as if it was never sent;
* batched (its run is in progress): the run completes and the stream's state *is* advanced by
  that chunk; only the result is dropped (counted as ``dropped_results``).

Either way the stream stays usable and other streams are unaffected. ``StepFuture.cancel()``
gives the first outcome explicitly and says whether it happened.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import JitError, WouldBlock
from ._errors import StepCancelledError, StreamBusyError
from ._signal import Signal

if TYPE_CHECKING:
    from ._many import StepGroup
    from ._mux import StreamMux

__all__ = ["MuxStream", "StepFuture", "StreamStatistics", "resolve_rows", "trio_resolve_rows"]

PENDING: Final = 0
BATCHED: Final = 1
DONE: Final = 2
CANCELLED: Final = 3
_STATE_NAMES = ("pending", "batched", "done", "cancelled")


class StepFuture:
    """The result of one submitted step: ``await`` it; ``cancel()`` it while it is not batched."""

    __slots__ = ("_error", "_group", "_state", "_tb", "_value", "_waiter", "arrival", "chunk", "stream")

    def __init__(self, stream: MuxStream, chunk: npt.NDArray[Any], arrival: float) -> None:
        self.stream = stream
        self.chunk: npt.NDArray[Any] | None = chunk
        self.arrival = arrival
        self._waiter: Any = None  # set by the task parked on it (see ``Parker``; a group waits without one)
        self._state = PENDING
        self._value: npt.NDArray[Any] | None = None
        self._error: BaseException | None = None
        self._tb: TracebackType | None = None
        self._group: StepGroup | None = None  # set while a wait_all waits for it

    def __repr__(self) -> str:
        failed = " failed" if self._error is not None else ""
        return f"<StepFuture {self.stream.name} {_STATE_NAMES[self._state]}{failed}>"

    def done(self) -> bool:
        """True once it has a result or an error, or was cancelled."""
        return self._state >= DONE

    def cancelled(self) -> bool:
        return self._state == CANCELLED

    def cancel(self) -> bool:
        """Withdraw the step if it is not batched yet; True if it will never run."""
        if self._state == PENDING:
            self.stream._withdraw(self)
            return True
        return self._state == CANCELLED

    def result(self) -> npt.NDArray[Any]:
        """The step's output row (``out[i, ...]`` of its batch), without waiting.

        Raises:
            WouldBlock: not done yet (``await`` the future instead).
            StepCancelledError: it was cancelled before it ran.
            Exception: the batch's original error, or the reason the stream or mux closed.
        """
        state = self._state
        if state == DONE:
            if self._error is not None:
                raise self._error.with_traceback(self._tb)
            assert self._value is not None
            return self._value
        if state == CANCELLED:
            raise StepCancelledError(f"{self!r} was cancelled before it was batched; it never ran")
        raise WouldBlock(f"{self!r} has no result yet; await it")

    def __await__(self) -> Generator[Any, None, npt.NDArray[Any]]:
        return self._wait().__await__()

    async def _wait(self) -> npt.NDArray[Any]:
        if self._state < DONE:
            if self._waiter is not None and not self._waiter.done():
                raise RuntimeError(f"{self!r} is already awaited by another task")
            try:
                await self.stream._mux._parker.park(self)
            except BaseException:
                self._abandon()
                raise
        return self.result()

    def _abandon(self) -> None:
        """The awaiting task was cancelled (see the module docstring for the semantics): a
        step that ran (batched, or done with a result its task will not take) is a dropped
        result."""
        if self._state == PENDING:
            self.stream._withdraw(self)
        elif self._state == BATCHED or (self._state == DONE and self._error is None):
            self.stream._mux._metrics.dropped += 1

    # -- the mux's side ----------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._group is not None:
            self._group._one_done()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._tb = error.__traceback__
        self._state = DONE
        self.chunk = None
        self._wake()

    def _mark_cancelled(self) -> None:
        self._state = CANCELLED
        self.chunk = None
        self._wake()


def _rows(out: npt.NDArray[Any], lo: int, hi: int) -> Any:
    """The rows ``out[i, ...]`` for ``i`` in ``lo..hi-1``: iterating an array of two or more dims
    yields those views from C; a 1-D one would yield numpy scalars where ``out[i, ...]`` is a
    0-d array."""
    return out[lo:hi] if getattr(out, "ndim", 0) > 1 else [out[i, ...] for i in range(lo, hi)]


def resolve_rows(batch: list[StepFuture], out: npt.NDArray[Any], lo: int, hi: int) -> None:
    """Give ``batch[i]`` its row ``out[i, ...]`` for ``i`` in ``lo..hi-1`` and wake its waiter
    (unless that wait was cancelled: its waiter is done then), one loop for the batch."""
    for fut, row in zip(batch[lo:hi], _rows(out, lo, hi), strict=True):
        fut._value = row
        fut._state = DONE
        waiter = fut._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if fut._group is not None:
            fut._group._one_done()


@functools.cache
def trio_resolve_rows() -> Callable[[list[StepFuture], npt.NDArray[Any], int, int], None]:
    """``resolve_rows`` for a mux on trio, where every waiter is the parker's ``TrioWaiter``:
    its task is rescheduled here, not through two method calls per step (``done`` and
    ``set_result`` are Python there, where an asyncio future's are C)."""
    import trio

    reschedule = trio.lowlevel.reschedule

    def resolve(batch: list[StepFuture], out: npt.NDArray[Any], lo: int, hi: int) -> None:
        for fut, row in zip(batch[lo:hi], _rows(out, lo, hi), strict=True):
            fut._value = row
            fut._state = DONE
            waiter = fut._waiter
            if waiter is not None:
                task = waiter.task  # None: woken already, or its wait was cancelled
                if task is not None:
                    waiter.task = None
                    reschedule(task)
            if fut._group is not None:
                fut._group._one_done()

    return resolve


@attrs.frozen
class StreamStatistics:
    """A snapshot of one stream."""

    name: str
    status: str
    slot: int | None
    queued: int
    queue_depth: int
    submitted: int
    last_active: float
    """The mux clock when the stream was admitted, last had a step batched or withdrawn, or was
    found with steps waiting by the idle check: its idle time counts from here."""


NEW: Final = "new"
WAITING: Final = "waiting"
OPEN: Final = "open"
CLOSED: Final = "closed"


class MuxStream:
    """One live stream: ``async with mux.open_stream() as s: out = await s.step(chunk)``.

    Create through ``StreamMux.open_stream`` (admitted when entered) or ``open_stream_nowait``.
    """

    __slots__ = (
        "_closed_by",
        "_last_active",
        "_mux",
        "_queue",
        "_room",
        "_room_for",
        "_status",
        "_submitted",
        "name",
        "slot",
        "state",
    )

    def __init__(self, mux: StreamMux, name: str, state: object | None) -> None:
        self._mux = mux
        self.name = name
        self.state = state  # the initial state (checked); dropped once the stream is admitted
        self.slot: int | None = None
        self._status = NEW
        self._queue: deque[StepFuture] = deque()
        self._room: Signal | None = None
        self._room_for = 1  # the free places the task waiting on _room needs before it is woken
        self._submitted = 0
        self._last_active = 0.0
        self._closed_by: tuple[type[JitError], str] | None = None

    def __repr__(self) -> str:
        return (
            f"<MuxStream {self.name} {self._status} slot={self.slot} "
            f"queued={len(self._queue)}/{self._mux.queue_depth} submitted={self._submitted}>"
        )

    def statistics(self) -> StreamStatistics:
        return StreamStatistics(
            self.name,
            self._status,
            self.slot,
            len(self._queue),
            self._mux.queue_depth,
            self._submitted,
            self._last_active,
        )

    @property
    def closed(self) -> bool:
        return self._status == CLOSED

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> MuxStream:
        if self._status == NEW:
            self._status = WAITING
            try:
                await self._mux._admit(self)
            except BaseException:
                self._status = CLOSED
                raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Free the slot (reset by the mux) and fail steps not yet batched. Idempotent."""
        self._mux._close_stream(self, None)

    async def aclose(self) -> None:
        self.close()

    # -- steps -------------------------------------------------------------------------------
    async def step(self, chunk: npt.ArrayLike) -> npt.NDArray[Any]:
        """Submit ``chunk`` and wait for its output (the simple path).

        A checkpoint: it always waits for the mux's service task to run the batch. ``chunk`` is
        read when its batch is packed, not copied first: do not write to it while this waits
        (``submit`` copies, for a caller that reuses its buffer before the step runs).

        Raises:
            StreamIdleError, StreamClosedError, MuxClosedError: the stream cannot step.
            ShapeMismatchError, DTypeMismatchError: ``chunk`` does not fit the plan.
            AudioFormatError: ``chunk`` has a NaN or inf sample (found when it is batched; it
                never runs and the stream's state stays as before it).
            Exception: the batch's original error.
        """
        mux = self._mux
        queue = self._queue
        if self._status == OPEN and len(queue) < mux.queue_depth:
            # submit_nowait's common case and _enqueue, inlined; no copy: the batch is packed
            # while we await. A chunk of the plan's dtype and shape passes three comparisons.
            if (
                type(chunk) is not np.ndarray
                or chunk.dtype != mux._chunk_dtype
                or chunk.shape != mux._chunk_shape
            ):
                chunk = mux._coerce(chunk, copy=False)
            fut = StepFuture(self, chunk, mux._clock())
            queue.append(fut)
            self._submitted += 1
            if len(queue) == 1:
                mux._on_ready(self)
        else:
            fut = await self.submit(chunk)
        if fut._state < DONE:  # StepFuture._wait, inlined: no coroutine per step on asyncio
            parker = mux._parker
            loop = parker.loop
            try:
                if loop is not None:
                    waiter = fut._waiter = loop.create_future()
                    await waiter
                else:
                    waiter = fut._waiter = parker.new_waiter()
                    await parker.wait(waiter.abort)
            except BaseException:
                fut._abandon()
                raise
        value = fut._value  # set only with a result: result()'s common case, inlined
        return value if value is not None else fut.result()

    async def submit(self, chunk: npt.ArrayLike) -> StepFuture:
        """Queue ``chunk`` and return its future; waits while ``queue_depth`` steps are queued.

        A chunk with NaN or inf samples is found when its batch is packed: its future then fails
        with ``AudioFormatError`` and the step never runs.

        A checkpoint only when it waits for room (so a producer far ahead of the mux is slowed down).
        """
        while True:
            self._check_usable()
            if len(self._queue) < self._mux.queue_depth:
                return self._enqueue(self._mux._coerce(chunk))
            if self._room is not None:
                raise StreamBusyError(f"{self!r}: another task already waits to submit on this stream")
            room = self._room = self._mux._signal()
            try:
                await room.wait()
            finally:
                self._room = None

    async def _wait_room(self, k: int) -> None:
        """Wait until ``k`` more steps fit in the queue (``k <= queue_depth``), woken once for
        all of them rather than once per step the mux takes (a block submitted by one task)."""
        while True:
            self._check_usable()
            if len(self._queue) + k <= self._mux.queue_depth:
                return
            if self._room is not None:
                raise StreamBusyError(f"{self!r}: another task already waits to submit on this stream")
            room = self._room = self._mux._signal()
            self._room_for = k
            try:
                await room.wait()
            finally:
                self._room = None
                self._room_for = 1

    def submit_nowait(self, chunk: npt.ArrayLike) -> StepFuture:
        """``submit`` without waiting.

        Raises:
            WouldBlock: ``queue_depth`` steps are already queued.
        """
        self._check_usable()
        if len(self._queue) >= self._mux.queue_depth:
            raise WouldBlock(
                f"{self!r}: {self._mux.queue_depth} steps are queued (queue_depth); await "
                "submit() or step() to wait for room"
            )
        return self._enqueue(self._mux._coerce(chunk))

    # -- internals ---------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._status == OPEN:
            return
        if self._closed_by is not None:
            cls, message = self._closed_by
            raise cls(message)
        raise WouldBlock(f"{self!r} is not admitted yet; use `async with mux.open_stream() as s`")

    def _enqueue(self, arr: npt.NDArray[Any]) -> StepFuture:
        """Queue a chunk already coerced by the mux (a private copy in the plan's dtype).

        The stream's activity is not touched: a stream with queued steps is never idle (the mux
        refreshes it when it looks), and taking a step into a batch refreshes it."""
        mux = self._mux
        fut = StepFuture(self, arr, mux._clock())
        q = self._queue
        q.append(fut)
        self._submitted += 1
        if len(q) == 1:
            mux._on_ready(self)
        return fut

    def _enqueue_rows(self, rows: list[npt.NDArray[Any]]) -> list[StepFuture]:
        """``_enqueue`` for a block of chunks (room checked by the caller): one clock reading for
        all of them."""
        mux = self._mux
        now = mux._clock()
        futures = [StepFuture(self, arr, now) for arr in rows]
        q = self._queue
        was_empty = not q
        q.extend(futures)
        self._submitted += len(futures)
        if was_empty and q:
            mux._on_ready(self)
        return futures

    def _withdraw(self, fut: StepFuture) -> None:
        """Remove a step that is not batched (cancelled by its waiter or by ``cancel()``): the
        stream was active when it sent it (its idle time counts from now)."""
        self._queue.remove(fut)
        mux = self._mux
        self._last_active = mux._clock()
        if self in mux._activity:
            mux._activity.move_to_end(self)
        fut._mark_cancelled()
        mux._metrics.cancelled += 1
        if not self._queue:
            mux._on_unready(self)
        self._wake_producer()

    def _wake_producer(self) -> None:
        room = self._room
        if room is not None:
            self._room = None
            room.set()
