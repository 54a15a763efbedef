"""``StreamMux``: many live streams served by one batched recurrent plan.

``async with mux:`` runs one service task. Producers append steps to their stream's FIFO; the
service forms a batch of at most one step per ready stream, oldest stream first (round robin, so
no stream starves), runs the plan once for all of them, and resolves every future of the batch
itself: one loop wake-up (the plan's completion) per batch, never one per waiter.

**When a batch goes.** As soon as a full batch of streams is ready (``max_batch_size``; less
with pipelining, below), or every open stream is
ready (the batch cannot grow), or ``max_queue_delay`` has passed since the oldest waiting step
arrived. The service sleeps on a signal with that deadline; producers wake it only when a batch
starts forming or becomes full (no polling, no busy wait). One batch is in flight at a time:
steps that arrive meanwhile wait for the next, which keeps each stream's steps in order and lets
``BatchedStep`` implementations touch the pool between runs.

**Pipelining.** A step that also offers ``launch``/``complete`` (see ``BatchedStep``) gets up to
``pipeline_depth`` batches in flight: the next batch is enqueued on the device while the
previous one computes (the device queue is in order, and each batch reads the pool the previous
one writes), and a second task resolves results in launch order. The device then never waits for
the loop's Python between batches. So that there is always a next batch to form, a batch then
holds at most the open streams divided by ``pipeline_depth`` (and at most ``max_batch_size``):
256 open streams go in batches of 128 with the default depth of 2. Slots are reset only when
nothing is in flight.

**Between runs** the service frees and resets released slots, admits backlog waiters in order,
applies initial states, and closes streams idle for ``idle_timeout``: never silently, their
next call raises ``StreamIdleError`` and a ``stream.idle_timeout`` warning is logged.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import numpy as np
import numpy.typing as npt

from .._log import get_logger
from ..errors import (
    DTypeMismatchError,
    JitError,
    ShapeMismatchError,
    WouldBlock,
)
from ..profiler import _state as _trace
from . import _many
from ._errors import MuxClosedError, StreamClosedError, StreamIdleError
from ._groups import single_failure
from ._metrics import MuxMetrics
from ._mux_checks import NOT_RUNNING_PARKER, check_config, not_running, not_running_clock, refuse_non_finite
from ._protocol import BatchedStep
from ._signal import Parker, Signal, SignalFactory, loop_clock, parker, signal_factory
from ._slots import SlotPool
from ._stream import BATCHED, CLOSED, OPEN, MuxStream, StepFuture, resolve_rows, trio_resolve_rows

__all__ = ["MuxStatistics", "StreamMux"]

_log = get_logger("asyncjit.scheduler")

RESOLVE_SLICE = 32
"""Waiting tasks the pipelined service resumes per loop iteration (see ``_complete_runs``)."""
_ids = itertools.count(1)


@attrs.frozen
class MuxStatistics:
    """A snapshot of a mux: gauges and totals (``metrics()`` adds histograms and percentiles)."""

    name: str
    running: bool
    active_streams: int
    max_streams: int
    backlog: int
    ready_streams: int
    free_slots: int
    batches: int
    requests: int


class StreamMux:
    """Serve one ``BatchedStep`` to up to ``max_streams`` concurrent streams.

    Args:
        step: the batched recurrent plan and its slot pool (see ``BatchedStep``).
        max_streams: streams open at once (default ``step.num_slots``); more wait in the backlog.
        max_batch_size: streams per run (default and at most ``step.max_batch_size``).
        max_queue_delay: seconds the oldest waiting step may wait for the batch to fill.
        idle_timeout: seconds without a step after which a stream is closed (None: never).
        backlog: streams that may wait for a slot (default ``max_streams``); more raise
            ``BacklogFullError``.
        admission_timeout: seconds a stream waits in the backlog before ``AdmissionTimeoutError``
            (None: no limit).
        queue_depth: steps a stream may have queued before ``submit`` waits.
        metrics_interval: seconds between ``mux.metrics`` info events while serving (default
            None: one event when the mux exits; ``mux.metrics()`` gives them on demand).
        pipeline_depth: batches in flight at once when the step supports ``launch``/``complete``
            (1: one at a time; ignored for steps with ``run`` only).
        name: shown in logs and ``repr``.

    Raises:
        ValueError: a size or delay out of range, or larger than the plan supports.
    """

    def __init__(
        self,
        step: BatchedStep,
        *,
        max_streams: int | None = None,
        max_batch_size: int | None = None,
        max_queue_delay: float = 0.002,
        idle_timeout: float | None = 60.0,
        backlog: int | None = None,
        admission_timeout: float | None = None,
        queue_depth: int = 4,
        metrics_interval: float | None = None,
        pipeline_depth: int = 2,
        name: str | None = None,
    ) -> None:
        self.step = step
        self.max_streams = step.num_slots if max_streams is None else max_streams
        self.max_batch_size = step.max_batch_size if max_batch_size is None else max_batch_size
        self.max_queue_delay = max_queue_delay
        self.idle_timeout = idle_timeout
        self.admission_timeout = admission_timeout
        self.queue_depth = queue_depth
        self.metrics_interval = metrics_interval
        pipelined = callable(getattr(step, "launch", None)) and callable(getattr(step, "complete", None))
        self.pipeline_depth = pipeline_depth if pipelined else 1
        self.name = name if name is not None else f"mux{next(_ids)}"
        check_config(self, step, backlog)
        self._chunk_shape = tuple(step.chunk_shape)
        self._chunk_dtype = np.dtype(step.chunk_dtype)
        backlog = self.max_streams if backlog is None else backlog
        # a pool that grows (``pool_rows``): a slot beyond its rows is reset before first use
        grows = hasattr(step, "pool_rows")
        needs_reset = (lambda slot: slot >= step.pool_rows) if grows else None  # type: ignore[attr-defined]
        self._slots = SlotPool(self.max_streams, backlog, self._notify, needs_reset)
        self._metrics = MuxMetrics(self.max_batch_size)
        # Ready streams (a step queued, not in the running batch), oldest first; ordered sets.
        self._ready: OrderedDict[MuxStream, None] = OrderedDict()
        self._activity: OrderedDict[MuxStream, None] = OrderedDict()  # least recently active first
        self._first_wait: float | None = None  # arrival of the oldest step waiting in _ready
        self._n_open = 0
        self._cap = 1  # streams per batch now: see _update_cap
        self._stream_ids = itertools.count(1)
        # Reused batch inputs (BatchedStep.run must not keep them).
        self._chunks = np.zeros((self.max_batch_size, *self._chunk_shape), self._chunk_dtype)
        self._slot_index = np.zeros(self.max_batch_size, np.int32)
        self._running = False
        self._in_run = False
        # pipelined service: launched batches in launch order, and how many streams they hold
        self._inflight: deque[tuple[list[StepFuture], Any, float]] = deque()
        self._inflight_streams = 0
        self._completer_wake: Signal | None = None
        self._exited = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._signal: SignalFactory = not_running
        self._parker: Parker = NOT_RUNNING_PARKER  # how a step's task waits for its result
        # how a batch's results reach their waiters (picked per loop)
        self._resolve: Callable[[list[StepFuture], npt.NDArray[Any], int, int], None] = resolve_rows
        self._clock: Callable[[], float] = not_running_clock
        self._wake: Signal | None = None
        self._sleeping = False
        self._next_log = math.inf

    def __repr__(self) -> str:
        s = self.statistics()
        state = "running" if s.running else ("exited" if self._exited else "idle")
        return (
            f"<StreamMux {self.name} {state} streams={s.active_streams}/{s.max_streams} "
            f"backlog={s.backlog} ready={s.ready_streams} batches={s.batches}>"
        )

    # -- running -----------------------------------------------------------------------------
    async def __aenter__(self) -> StreamMux:
        if self._running or self._exited:
            raise RuntimeError(f"{self!r} can be entered once; create a new StreamMux")
        self._signal = signal_factory()
        self._parker = parker()
        self._resolve = resolve_rows if self._parker.loop is not None else trio_resolve_rows()
        self._clock = loop_clock()
        # A step may have served an earlier mux: wait for what that one left running, then
        # start every stream from zeros (a freed slot is reset, but not the ones held at exit).
        settle = getattr(self.step, "settle", None)
        if settle is not None:
            await settle()
        held = min(self.max_streams, getattr(self.step, "pool_rows", self.max_streams))
        for slot in range(held):  # rows a growing pool does not hold yet are reset on first use
            self.step.reset_slot(slot)
        if self.metrics_interval is not None:
            self._next_log = self._clock() + self.metrics_interval
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._running = True
        if self.pipeline_depth > 1:
            tg.start_soon(self._serve_pipelined, name=f"StreamMux {self.name} service")
            tg.start_soon(self._complete_runs, name=f"StreamMux {self.name} results")
        else:
            tg.start_soon(self._serve, name=f"StreamMux {self.name} service")
        _log.info("mux.start", mux=self.name, max_streams=self.max_streams, max_batch=self.max_batch_size)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg = self._tg
        assert tg is not None
        self._shutdown()
        tg.cancel_scope.cancel()
        failure: BaseException | None = None
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            failure = single_failure(group)
            if failure is None:
                raise
        finally:
            _log.info("mux.metrics", mux=self.name, final=True, **self.metrics())
        raise failure  # outside the handler: your body's exception itself, not a group

    def _shutdown(self) -> None:
        """Refuse new work; fail every queued step and backlog waiter with ``MuxClosedError``."""
        self._running = False
        self._exited = True
        self._slots.close()
        for stream in list(self._activity):
            self._close_stream(stream, (MuxClosedError, f"the StreamMux {self.name} has exited"))

    # -- opening streams ---------------------------------------------------------------------
    def open_stream(self, state: object | None = None, *, name: str | None = None) -> MuxStream:
        """A stream admitted when entered: ``async with mux.open_stream() as s``.

        Entering waits in the backlog when ``max_streams`` are open.

        Args:
            state: the initial state of its slot (checked now by ``step.check_state``); None: zeros.

        Raises (on entering):
            BacklogFullError, AdmissionTimeoutError, MuxClosedError.
        """
        return MuxStream(self, self._stream_name(name), self._checked(state))

    def open_stream_nowait(self, state: object | None = None, *, name: str | None = None) -> MuxStream:
        """An admitted stream, or ``WouldBlock`` when no slot is free now (or others wait).

        Close it with ``close()`` or use it in ``async with``.
        """
        stream = MuxStream(self, self._stream_name(name), self._checked(state))
        self._check_running()
        slot = self._slots.try_acquire(stream.state)
        if slot is None:
            raise WouldBlock(
                f"{self!r}: no stream slot is free (or others wait first); use `async with open_stream()`"
            )
        self._activate(stream, slot)
        return stream

    # -- many steps from one task -----------------------------------------------------------
    async def submit_many(
        self, streams: Sequence[MuxStream], chunks: npt.ArrayLike | Sequence[npt.ArrayLike]
    ) -> list[StepFuture]:
        """Queue one step per entry of ``streams`` (``chunks[i]`` on ``streams[i]``; a stream may
        appear more than once, its steps then run in list order) and return their futures.

        For a task that owns many streams (a connection pool): with ``wait_all`` it costs one
        task wake-up for the whole group instead of one per step. ``chunks`` is a sequence of
        chunks or one array ``[len(streams), *chunk_shape]``. Waits for room where a stream has
        ``queue_depth`` steps queued; if cancelled meanwhile, the steps it queued are withdrawn.

        Raises:
            ShapeMismatchError, DTypeMismatchError: a chunk does not fit (nothing is queued).
            StreamIdleError, StreamClosedError, MuxClosedError: a stream cannot step (the steps
                queued before it are withdrawn).
        """
        return await _many.submit_many(self, streams, chunks)

    def submit_many_nowait(
        self,
        streams: Sequence[MuxStream],
        chunks: npt.ArrayLike | Sequence[npt.ArrayLike],
        *,
        copy: bool = True,
    ) -> list[StepFuture]:
        """``submit_many`` without waiting, all or nothing.

        Args:
            copy: False when ``chunks`` is an array the caller hands over and never touches
                again (a server's freshly converted audio): its rows are queued as they are,
                without the copy that protects a caller reusing its buffer.

        Raises:
            WouldBlock: a stream has no room for its steps (nothing is queued).
            and the errors of ``submit_many``, before anything is queued.
        """
        return _many.submit_many_nowait(self, streams, chunks, copy)

    async def wait_all(self, futures: Sequence[StepFuture]) -> None:
        """Wait until every future (of this mux) is done, with one wake-up; read each with
        ``fut.result()``, so one failed step does not hide the others' results.

        Cancelled: each unfinished future is treated as a cancelled ``await fut`` (withdrawn if
        not batched yet, its result dropped if it is running).

        Raises:
            RuntimeError: a future is already awaited by another ``wait_all``.
        """
        await _many.wait_all(self, futures)

    async def step_many(
        self, streams: Sequence[MuxStream], chunks: npt.ArrayLike | Sequence[npt.ArrayLike]
    ) -> list[npt.NDArray[Any]]:
        """``submit_many``, ``wait_all``, then every result in order.

        Raises:
            Exception: the first failed step's error, after all are done (use ``submit_many`` and
                ``wait_all`` to handle steps one by one); and the errors of ``submit_many``.
        """
        futures = await _many.submit_many(self, streams, chunks)
        await _many.wait_all(self, futures)
        return [fut.result() for fut in futures]

    def _stream_name(self, name: str | None) -> str:
        return name if name is not None else f"{self.name}/s{next(self._stream_ids)}"

    def _checked(self, state: object | None) -> object | None:
        return None if state is None else self.step.check_state(state)

    def _check_running(self) -> None:
        if not self._running:
            why = "has exited" if self._exited else "is not running; enter it with `async with mux:`"
            raise MuxClosedError(f"StreamMux {self.name} {why}")

    async def _admit(self, stream: MuxStream) -> None:
        self._check_running()
        try:
            slot = await self._slots.acquire(stream.state, self.admission_timeout, self._signal)
        except JitError as exc:
            if isinstance(exc, TimeoutError):
                self._metrics.admission_timeouts += 1
            elif not isinstance(exc, MuxClosedError):
                self._metrics.backlog_rejected += 1
            _log.warning("stream.rejected", mux=self.name, stream=stream.name, reason=type(exc).__name__)
            raise
        self._activate(stream, slot)

    def _activate(self, stream: MuxStream, slot: int) -> None:
        stream.slot = slot
        stream.state = None
        stream._status = OPEN
        stream._last_active = self._clock()
        self._activity[stream] = None
        self._n_open += 1
        self._update_cap()
        self._metrics.opened += 1
        self._service_slots()
        if self._sleeping and self._wake is not None:
            self._wake.set()  # a new idle deadline, and "every stream ready" may no longer hold

    # -- closing streams ---------------------------------------------------------------------
    def _close_stream(self, stream: MuxStream, reason: tuple[type[JitError], str] | None) -> None:
        """Close ``stream`` (idempotent); queued steps fail with ``reason`` (default: closed by you)."""
        if stream._status != OPEN:
            if stream._closed_by is None:
                stream._status = CLOSED
                stream._closed_by = (StreamClosedError, f"{stream.name} was closed before it was admitted")
            return
        if reason is None:
            reason = (StreamClosedError, f"{stream.name} was closed by your code; open a new stream")
        stream._status = CLOSED
        stream._closed_by = reason
        queue = stream._queue
        if queue:
            cls, message = reason
            for fut in queue:
                fut._fail(cls(f"{message} (this step was never run)"))
            queue.clear()
            self._on_unready(stream)
        self._activity.pop(stream, None)
        self._n_open -= 1
        self._update_cap()
        self._metrics.closed += 1
        stream._wake_producer()
        assert stream.slot is not None
        if self._running:
            self._slots.release(stream.slot)
            self._service_slots()

    def _service_slots(self) -> None:
        """Reset and hand on released slots now, unless a run is in progress (then the service
        does it right after the run: the pool may not be written meanwhile)."""
        if not self._in_run:
            self._slots.service(self.step.reset_slot)

    def _expire_idle(self, now: float) -> None:
        """Close streams idle for ``idle_timeout``; called between runs, so their slot is not in use."""
        timeout = self.idle_timeout
        if timeout is None:
            return
        limit = now - timeout
        activity = self._activity
        while activity:
            stream = next(iter(activity))
            if stream._last_active > limit:
                return
            if stream._queue:  # it waits for us, it is not idle
                stream._last_active = now
                activity.move_to_end(stream)
                continue
            idle = now - stream._last_active
            self._metrics.idle_expired += 1
            _log.warning(
                "stream.idle_timeout",
                mux=self.name,
                stream=stream.name,
                slot=stream.slot,
                idle_s=round(idle, 3),
                idle_timeout=timeout,
            )
            message = (
                f"{stream.name} sent no step for {idle:.3f} s (idle_timeout={timeout} s); the mux "
                "closed it and freed its slot. Open a new stream, or raise idle_timeout"
            )
            self._close_stream(stream, (StreamIdleError, message))

    # -- producers' side ---------------------------------------------------------------------
    def _coerce(self, chunk: npt.ArrayLike, copy: bool = True) -> npt.NDArray[Any]:
        """``chunk`` checked, in the plan's dtype (a float64 chunk becomes float32).

        A private copy, unless ``copy`` is False: ``step`` queues the caller's own array, which
        it reads when the batch is packed, while the caller still awaits the result.
        """
        dtype = self._chunk_dtype
        if type(chunk) is np.ndarray and chunk.dtype == dtype and chunk.shape == self._chunk_shape:
            return chunk.copy() if copy else chunk  # the common case, checked in three comparisons
        arr = np.asarray(chunk)
        if arr.dtype != dtype and arr.dtype.kind != dtype.kind:
            pcm = arr.dtype.kind in "iu"
            hint = " (scale integer PCM first: pcm.astype(np.float32) / 32768)" if pcm else ""
            raise DTypeMismatchError(f"{self.name}: a chunk must be {dtype}, got {arr.dtype}{hint}")
        if arr.shape != self._chunk_shape:
            raise ShapeMismatchError(
                f"{self.name}: a chunk must have shape {self._chunk_shape}, got {arr.shape}"
            )
        return np.array(arr, dtype=dtype, copy=True if copy else None)

    def _update_cap(self) -> None:
        """Streams per batch: ``max_batch_size``, or with pipelining at most the open streams
        split over ``pipeline_depth`` batches.

        A stream is in at most one batch at a time, so one batch holding every open stream leaves
        nothing to form while it runs: the device then waits for the loop's Python between
        batches and the loop for the device (256 streams in batches of 256: 44k chunks/s; in two
        batches of 128 that overlap: 83k on the Silero VAD, 2 cores).
        """
        depth = self.pipeline_depth
        cap = self.max_batch_size
        if depth > 1:
            cap = min(cap, max(1, -(-self._n_open // depth)))
        if cap > self._cap and self._ready:
            # a batch that was full is not any more: its deadline counts from its oldest step
            # again (_take_batch set it to the take time), so max_queue_delay still holds
            self._first_wait = min(s._queue[0].arrival for s in self._ready)
        self._cap = cap

    def _on_ready(self, stream: MuxStream) -> None:
        ready = self._ready
        ready[stream] = None
        n = len(ready)
        if n == 1:
            self._first_wait = stream._queue[0].arrival
        if self._sleeping and (n == 1 or n >= self._cap or n >= self._n_open - self._inflight_streams):
            self._notify()

    def _on_unready(self, stream: MuxStream) -> None:
        self._ready.pop(stream, None)
        if not self._ready:
            self._first_wait = None

    def _notify(self) -> None:
        wake = self._wake
        if self._sleeping and wake is not None:
            wake.set()

    # -- the service -------------------------------------------------------------------------
    async def _serve(self) -> None:
        delay = self.max_queue_delay
        while self._running:  # see _serve_pipelined: nothing more once the mux exits
            now = self._clock()
            if now >= self._next_log:
                self._next_log = now + (self.metrics_interval or math.inf)
                _log.info("mux.metrics", mux=self.name, **self.metrics())
            self._expire_idle(now)
            self._slots.service(self.step.reset_slot)
            deadline = math.inf
            if self.idle_timeout is not None and self._activity:
                deadline = next(iter(self._activity))._last_active + self.idle_timeout
            n = len(self._ready)
            if n:
                assert self._first_wait is not None
                due = self._first_wait + delay
                if n >= self.max_batch_size or n >= self._n_open or now >= due:
                    await self._run_batch(now)
                    continue
                deadline = min(deadline, due)
            await self._sleep(min(deadline, self._next_log))

    async def _sleep(self, deadline: float) -> None:
        wake = self._wake = self._signal()
        self._sleeping = True
        try:
            if deadline == math.inf:
                await wake.wait()
            else:
                with anyio.CancelScope(deadline=deadline):
                    await wake.wait()
        finally:
            self._sleeping = False

    def _take_batch(self, now: float) -> tuple[list[StepFuture], list[Any], list[Any]]:
        """Pop the oldest step of up to ``_cap`` ready streams, oldest stream first: the steps,
        their chunks and their streams' slots, gathered in one pass over the batch."""
        ready = self._ready
        batch: list[StepFuture] = []
        chunks: list[Any] = []
        index: list[Any] = []
        again: list[MuxStream] = []
        activity = self._activity
        depth = self.queue_depth
        popitem = ready.popitem
        for _ in range(min(len(ready), self._cap)):
            stream, _ = popitem(last=False)
            queue = stream._queue
            fut = queue.popleft()
            fut._state = BATCHED
            batch.append(fut)
            chunks.append(fut.chunk)
            fut.chunk = None  # the list holds it until it is packed
            index.append(stream.slot)  # batched streams are open: a slot each
            stream._last_active = now
            activity.move_to_end(stream)
            if queue:
                again.append(stream)
            if stream._room is not None and len(queue) + stream._room_for <= depth:
                stream._wake_producer()
        self._metrics.queue_delay.extend([now - fut.arrival for fut in batch])
        for stream in again:  # streams with more steps queue up again, behind every other stream
            ready[stream] = None
        if not ready:
            self._first_wait = None
        elif len(ready) < self._cap:
            self._first_wait = min(s._queue[0].arrival for s in ready)
        else:
            self._first_wait = now  # the next batch is full already: it goes at once
        return batch, chunks, index

    def _pack_batch(self, now: float) -> tuple[list[StepFuture], npt.NDArray[Any], npt.NDArray[np.int32]]:
        """Take the next batch and pack its chunks and slot indices into the reused arrays."""
        batch, parts, index = self._take_batch(now)
        b = len(batch)
        if _trace.active is not None:
            _trace.active.instant("mux.batch", "mux", mux=self.name, size=b, waiting=len(self._ready))
        chunks = self._chunks[:b]
        slots = self._slot_index[:b]
        if self._chunk_shape and chunks.size:  # one copy into the reused array (np.stack: 2x)
            np.concatenate(parts, out=chunks.reshape(-1, *self._chunk_shape[1:]))
        else:
            np.stack(parts, out=chunks)
        slots[:] = index
        if self._chunk_dtype.kind == "f":
            finite = np.isfinite(chunks)
            if not finite.all():
                return refuse_non_finite(self, batch, chunks, slots, finite)
        return batch, chunks, slots

    async def _run_batch(self, now: float) -> None:
        batch, chunks, slots = self._pack_batch(now)
        b = len(batch)
        if not b:
            return
        t0 = self._clock()
        self._in_run = True
        try:
            out = await self.step.run(chunks, slots)
            if len(out) != b:
                raise ShapeMismatchError(
                    f"{self.step!r}.run returned {len(out)} rows for a batch of {b} streams"
                )
        except Exception as exc:
            self._metrics.record_batch(b, self._clock() - t0, failed=True)
            _log.warning("mux.batch_failed", mux=self.name, batch=b, error=repr(exc))
            for fut in batch:
                fut._fail(exc)
            return
        except BaseException:  # the mux is exiting while this batch runs
            for fut in batch:
                fut._fail(MuxClosedError(f"the StreamMux {self.name} exited while this step ran"))
            raise
        finally:
            self._in_run = False
        self._metrics.record_batch(b, self._clock() - t0, failed=False)
        self._resolve(batch, out, 0, b)  # the waiting tasks run in the next loop iteration

    # -- the pipelined service ---------------------------------------------------------------
    async def _serve_pipelined(self) -> None:
        """``_serve`` with up to ``pipeline_depth`` batches in flight (``_complete_runs`` resolves them).

        A batch may go while others run once it is full, or when every open stream not in flight
        is in it (waiting could not grow it before a running batch returns), or at its deadline.
        Released slots and initial states are applied only when nothing is in flight: launching
        pauses until then. Once the mux exits it does nothing more: the exit cancels
        ``_complete_runs``, which then forgets the batches still running (the next mux on the
        step adopts them), and a service woken just before must not take that for "nothing in
        flight" and write the pool under them.
        """
        delay = self.max_queue_delay
        inflight = self._inflight
        depth = self.pipeline_depth
        slots = self._slots
        while self._running:
            now = self._clock()
            if now >= self._next_log:
                self._next_log = now + (self.metrics_interval or math.inf)
                _log.info("mux.metrics", mux=self.name, **self.metrics())
            self._expire_idle(now)
            if not inflight:
                slots.service(self.step.reset_slot)
            deadline = math.inf
            if self.idle_timeout is not None and self._activity:
                deadline = next(iter(self._activity))._last_active + self.idle_timeout
            n = len(self._ready)
            if n and len(inflight) < depth and not (inflight and slots.has_pending):
                assert self._first_wait is not None
                due = self._first_wait + delay
                if n >= self._cap or n >= self._n_open - self._inflight_streams or now >= due:
                    self._launch_batch(now)
                    continue
                deadline = min(deadline, due)
            await self._sleep(min(deadline, self._next_log))

    def _launch_batch(self, now: float) -> None:
        batch, chunks, slots = self._pack_batch(now)
        b = len(batch)
        if not b:
            return
        t0 = self._clock()
        try:
            handle = self.step.launch(chunks, slots)  # type: ignore[attr-defined]
        except Exception as exc:
            self._batch_failed(batch, exc, t0)
            return
        self._inflight.append((batch, handle, t0))
        self._inflight_streams += b
        self._in_run = True
        wake = self._completer_wake
        if wake is not None:
            self._completer_wake = None
            wake.set()

    async def _complete_runs(self) -> None:
        """Await launched batches in launch order and resolve their futures."""
        inflight = self._inflight
        try:
            while True:
                if not inflight:
                    wake = self._completer_wake = self._signal()
                    await wake.wait()
                    continue
                batch, handle, t0 = inflight[0]
                b = len(batch)
                try:
                    out = await self.step.complete(handle)  # type: ignore[attr-defined]
                    if len(out) != b:
                        raise ShapeMismatchError(
                            f"{self.step!r}.complete returned {len(out)} rows for a batch of {b} streams"
                        )
                except Exception as exc:
                    self._retire()
                    self._batch_failed(batch, exc, t0)
                    continue
                self._retire()
                self._metrics.record_batch(b, self._clock() - t0, failed=False)
                # Resolve in slices with a checkpoint between them: each loop iteration then
                # resumes at most RESOLVE_SLICE waiting tasks, so timers and other tasks on the
                # loop are not held up behind a whole batch of them (event-loop lag).
                for start in range(0, b, RESOLVE_SLICE):
                    if start:
                        try:
                            await anyio.lowlevel.checkpoint()
                        except BaseException:  # exiting: this batch has left _inflight, and
                            self._resolve(batch, out, start, b)  # its results are computed
                            raise
                    self._resolve(batch, out, start, min(b, start + RESOLVE_SLICE))
        except BaseException:  # the mux is exiting while batches run
            for batch, _, _ in inflight:
                for fut in batch:
                    fut._fail(MuxClosedError(f"the StreamMux {self.name} exited while this step ran"))
            inflight.clear()
            self._inflight_streams = 0
            self._in_run = False
            raise

    def _retire(self) -> None:
        batch, _, _ = self._inflight.popleft()
        self._inflight_streams -= len(batch)
        self._in_run = bool(self._inflight)
        self._notify()  # room for another batch; slots may be serviced when nothing is in flight

    def _batch_failed(self, batch: list[StepFuture], exc: Exception, t0: float) -> None:
        self._metrics.record_batch(len(batch), self._clock() - t0, failed=True)
        _log.warning("mux.batch_failed", mux=self.name, batch=len(batch), error=repr(exc))
        for fut in batch:
            fut._fail(exc)

    # -- observing ---------------------------------------------------------------------------
    def statistics(self) -> MuxStatistics:
        m = self._metrics
        return MuxStatistics(
            self.name,
            self._running,
            self._n_open,
            self.max_streams,
            self._slots.waiting,
            len(self._ready),
            self._slots.free,
            m.batches,
            m.requests,
        )

    def metrics(self) -> dict[str, Any]:
        """Batch-size histogram, queue delay and step time percentiles (ms), counters and gauges."""
        return self._metrics.as_dict(
            active_streams=self._n_open,
            max_streams=self.max_streams,
            backlog=self._slots.waiting,
            ready_streams=len(self._ready),
            free_slots=self._slots.free,
        )
