"""``Device``: an actor with one worker thread, an in-order command queue and two memory spaces.

Commands run in the order they were submitted. A command waits only for inputs that another
device produces, through their events, on this device's thread (invariant 5); the host never
syncs. Launchers release the GIL, so two devices compute in parallel with each other and with
the event loop.

**Inline fast path.** Handing a command to the worker and waking the loop back costs a thread
hop each way (35-65 µs here), more than a small step. When the queue is idle and every input is
ready, a command may run on the caller's thread instead: always if the caller asks, or in
``auto`` mode when the plan's measured run time (or ``flops_estimate`` at a calibrated rate)
is below the hop cost measured when the device started. ``_exec_lock`` guarantees that the
worker and an inline caller never run a launcher at the same time. ``LoadedExecutable`` runs its
inline executions *directly* (``begin_inline``/``end_inline``): no command, queue or event, one
lock round trip; ``submit(cmd, inline=True)`` is the general form used by copies.

**The worker** releases the GIL for the whole native call (ctypes ``CFUNCTYPE``); between
calls it runs only per-command bookkeeping and never loops in Python over data, so the loop
rarely waits for the GIL: ``benchmarks/runtime.py`` measures checkpoint gaps with both devices
running kernels equal to an idle loop's (p99 tens of microseconds here). An asyncio or trio loop
releases the GIL in every poll, so a finishing kernel does not wait a switch interval either.

**Backpressure.** At most ``max_in_flight`` commands (32, as in PJRT) are submitted and not
finished; ``LoadedExecutable.execute`` awaits a slot, ``execute_nowait`` raises ``WouldBlock``.
Transfers and copies are not held back: they are small and must never block deletion paths.
"""

from __future__ import annotations

import queue
import statistics as _stats
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import attrs
import numpy as np

from .._log import get_logger
from ..errors import ClosedError, DeviceError, InvalidArgumentError
from ..profiler import _state as _trace
from ._commands import Command, ExecuteCommand, Noop
from ._description import Attribute, DeviceDescription, host_attributes
from ._events import READY, Event
from ._memory import MemoryKind, MemorySpace, MemoryStats
from ._uses import release_uses
from ._wakeup import wait_event

if TYPE_CHECKING:
    from ..devices import DeviceKind
    from ._buffer import Buffer
    from ._client import Client

__all__ = ["Device", "DeviceStatistics", "InlinePolicy"]

_log = get_logger("asyncjit.runtime")

InlinePolicy = Literal["auto", "always", "never"]

_BATCH = 32
"""Most finished commands a worker holds before publishing them."""


@attrs.frozen
class DeviceStatistics:
    """A snapshot of one device's queue."""

    id: int
    kind: str
    in_flight: int
    max_in_flight: int
    submitted: int
    completed: int
    inline: int
    failed: int
    hop_us: float
    closed: bool


_flops_per_ns: float | None = None


def _host_flops_per_ns() -> float:
    """A rough rate for plans known only by ``flops_estimate``; measured once per process."""
    global _flops_per_ns
    if _flops_per_ns is None:
        a = np.ones((96, 96), np.float32)
        a @ a  # warm up
        t0 = time.perf_counter_ns()
        for _ in range(4):
            a @ a
        dt = max(time.perf_counter_ns() - t0, 1)
        _flops_per_ns = 4 * 2 * 96**3 / dt
    return _flops_per_ns


class Device:
    """One device actor. Create through ``Client``; do not construct directly."""

    def __init__(
        self,
        client: Client,
        id: int,
        kind: DeviceKind,
        *,
        max_in_flight: int = 32,
        inline: InlinePolicy = "auto",
    ) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise InvalidArgumentError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if inline not in ("auto", "always", "never"):
            raise InvalidArgumentError(f"inline must be 'auto', 'always' or 'never', got {inline!r}")
        self.client = client
        self.id = id
        self.kind = kind.name
        self.device_kind = kind
        self.max_in_flight = max_in_flight
        self.inline_policy: InlinePolicy = inline
        self._spaces = {k: MemorySpace(self, k) for k in MemoryKind}
        self._device_space = self._spaces[MemoryKind.DEVICE]  # an Enum key costs a Python __hash__
        self._queue: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._state = threading.Lock()
        self._exec_lock = threading.Lock()
        self._in_flight = 0
        self._slot_event: Event | None = None
        self._closed = False
        self._cancel = False
        self._stopped = Event()
        self._submitted = 0
        self._completed = 0
        self._inline = 0
        self._failed = 0
        self._direct = 0  # inline executions that bypass submit(); changed under _exec_lock only
        self._direct_failed = 0
        self.hop_ns = 0.0  # calibrated below, once the worker runs
        self._thread = threading.Thread(target=self._work, name=f"asyncjit-{self.kind}-{id}", daemon=True)
        self._thread.start()
        self.hop_ns = self._calibrate()
        self.flops_per_ns = _host_flops_per_ns()
        _log.info("device.start", device=id, kind=self.kind, hop_us=round(self.hop_ns / 1e3, 1))

    # -- identity and memory --------------------------------------------------------------------
    process_index = 0
    """The process that owns this device: every device a ``Client`` starts is its own (0)."""

    @property
    def description(self) -> DeviceDescription:
        """id, kind, process index and attributes (CPU model, cores, NUMA node, vector flags)."""
        return DeviceDescription(self.id, self.kind, self.process_index, host_attributes())

    @property
    def attributes(self) -> Mapping[str, Attribute]:
        return host_attributes()

    @property
    def is_addressable(self) -> bool:
        """True when this process can read and write the device's memory (its client's process)."""
        return self.process_index == self.client.process_index

    def __repr__(self) -> str:
        s = self.statistics()
        state = "closed" if s.closed else "open"
        return f"<Device {self.kind}:{self.id} {state} in_flight={s.in_flight}/{s.max_in_flight}>"

    def memory_spaces(self) -> tuple[MemorySpace, ...]:
        return tuple(self._spaces.values())

    @property
    def default_memory_space(self) -> MemorySpace:
        return self._device_space

    def memory_space(self, kind: MemoryKind | str) -> MemorySpace:
        return self._spaces[MemoryKind(kind)]

    def memory_stats(self) -> MemoryStats:
        """Statistics of the ``device`` memory space (``memory_space('pinned_host')`` for the others)."""
        return self.default_memory_space.memory_stats()

    def statistics(self) -> DeviceStatistics:
        with self._state:
            return DeviceStatistics(
                self.id,
                self.kind,
                self._in_flight,
                self.max_in_flight,
                self._submitted + self._direct,
                self._completed + self._direct,
                self._inline + self._direct,
                self._failed + self._direct_failed,
                round(self.hop_ns / 1e3, 2),
                self._closed,
            )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- submission -----------------------------------------------------------------------------
    def is_full(self) -> bool:
        return self._in_flight >= self.max_in_flight

    def slot_event(self) -> Event:
        """An event set when a slot frees up (already set if one is free or the device closed)."""
        with self._state:
            if self._in_flight < self.max_in_flight or self._closed:
                return READY
            if self._slot_event is None:
                self._slot_event = Event()
            return self._slot_event

    async def wait_for_slot(self) -> None:
        while self._in_flight >= self.max_in_flight and not self._closed:
            await wait_event(self.slot_event())

    def wait_for_slot_blocking(self) -> None:
        while self._in_flight >= self.max_in_flight and not self._closed:
            self.slot_event().wait_blocking()

    def check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"device {self.kind}:{self.id} is closed; no more work can be submitted")

    def enqueue(self, cmd: Command) -> None:
        """``submit(cmd, inline=False)``: the queued path of ``execute``, without the inline test.

        Raises:
            ClosedError: the device (its client) was closed.
        """
        with self._state:
            if self._closed:
                raise ClosedError(f"device {self.kind}:{self.id} is closed; no more work can be submitted")
            self._in_flight += 1
            self._submitted += 1
            self._queue.put(cmd)

    def submit(self, cmd: Command, inline: bool) -> None:
        """Enqueue ``cmd``, or run it here and now if ``inline`` and the device is idle.

        Raises:
            ClosedError: the device (its client) was closed.
        """
        with self._state:
            if self._closed:
                raise ClosedError(f"device {self.kind}:{self.id} is closed; no more work can be submitted")
            self._in_flight += 1
            self._submitted += 1
            # Idle means nothing submitted before us is unfinished, so running here keeps order.
            run_here = (
                inline
                and self._in_flight == 1
                and cmd.inputs_ready()
                and self._exec_lock.acquire(blocking=False)
            )
            if not run_here:
                self._queue.put(cmd)
                return
            self._inline += 1
        try:
            bad = cmd.wait_inputs()  # all done: this only finds a poisoned input
            if bad is not None:
                error = None
            else:
                try:
                    error = cmd.run() if _trace.active is None else _trace.active.command(self, cmd)
                except Exception as exc:
                    error = self._broken(cmd, exc)
        finally:
            self._exec_lock.release()
        self._finish(cmd, error, bad)

    def begin_inline(self) -> bool:
        """Take the device for a command run on this thread, if it is idle; then ``end_inline``.

        Idle: nothing submitted is unfinished, so running now keeps queue order. Anything
        submitted meanwhile is ordered after us and its run waits for ``_exec_lock``, which we
        hold. One lock round trip, no queue, no event: the execute fast path.
        """
        lock = self._exec_lock
        if lock.acquire(blocking=False):
            if self._in_flight == 0 and not self._closed:
                return True
            lock.release()
        return False

    def end_inline(self, ran: bool, failed: bool) -> None:
        """Count the command started by ``begin_inline`` (if it ``ran``); give the device back."""
        if ran:
            self._direct += 1
            if failed:
                self._direct_failed += 1
        self._exec_lock.release()

    def _broken(self, cmd: Command, exc: Exception) -> DeviceError:
        """A command's ``run`` raised instead of returning its error: asyncjit's own bug. Its
        outputs fail with a ``DeviceError`` naming it (the original as ``__cause__``), it is
        logged at error level, and the device keeps serving: one broken command must not end
        the thread every later command on this device waits for (the traceback is in the log)."""
        _log.error("command.crashed", device=self.id, command=cmd.label, error=repr(exc), exc_info=exc)
        err = DeviceError(
            f"device {self.kind}:{self.id}: a {cmd.label} command failed inside asyncjit ({exc!r}); "
            "its outputs hold no data. Please report it"
        )
        exc.__traceback__ = None  # logged above; its frames hold the command, thus its buffers
        err.__cause__ = exc
        return err

    def _log_failure(self, cmd: Command, error: BaseException) -> None:
        _log.warning(
            "command.failed",
            device=self.id,
            command=cmd.label,
            plan=getattr(getattr(cmd, "timing", None), "plan", None),
            error=repr(error),
        )

    def _finish(self, cmd: Command, error: BaseException | None, bad: Event | None) -> None:
        if error is not None:
            self._log_failure(cmd, error)
        if not cmd.counted:
            cmd.finish(error, bad)
            return
        # Counters first: whoever sees the outputs ready also sees them counted as completed.
        with self._state:
            self._in_flight -= 1
            self._completed += 1
            if error is not None or bad is not None:
                self._failed += 1
            slot = self._slot_event
            if slot is not None and self._in_flight < self.max_in_flight:
                self._slot_event = None
            else:
                slot = None
        cmd.finish(error, bad)
        if slot is not None:
            slot.set()

    # -- the worker -----------------------------------------------------------------------------
    def _work(self) -> None:
        """Run commands in order; publish their completions in batches.

        Finished commands are *published* (counters, events, uses released, one state-lock round
        trip for the batch) when the queue runs dry, before a command that is not known to be
        cheap, before waiting for an input, and every ``_BATCH`` commands. So a burst of small
        commands costs one lock round trip and, for awaiting tasks, one loop wake-up (the waker
        coalesces the posts), while a completion is never held back behind a long kernel.
        """
        q = self._queue
        get = q.get
        exec_lock = self._exec_lock
        done: list[tuple[Command, BaseException | None, Event | None]] = []
        cmd: Command | None = None
        b: Buffer | None = None
        ev: Event | None = None
        while True:
            if done and (q.empty() or len(done) >= _BATCH):
                self._publish(done)
                done = []
            cmd = b = ev = None  # hold no buffer while idle: dropping one frees its memory
            cmd = get()
            if cmd is None:
                break
            if self._cancel and cmd.counted:
                closed = ClosedError(f"device {self.kind}:{self.id} was closed before this command ran")
                done.append((cmd, closed, None))
                continue
            bad = None
            for b in cmd.inputs:  # cmd.wait_inputs(), spelled out: this loop runs per command
                ev = b._event
                if not ev._done:
                    if done:  # it may be ours, finished but unpublished
                        self._publish(done)
                        done = []
                    # only another device's output can still be pending: this queue waits for
                    # its event (a device-side wait, as a GPU stream waits; the host never does)
                    if _trace.active is None:
                        ev.wait_blocking()
                    elif not ev._done:
                        _trace.active.device_wait(self, b, ev)
                if bad is None and ev._error is not None:
                    bad = ev
            error = None
            if bad is None:
                if done and not cmd.cheap(self.hop_ns or 50_000.0):
                    self._publish(done)
                    done = []
                with exec_lock:
                    try:
                        error = cmd.run() if _trace.active is None else _trace.active.command(self, cmd)
                    except Exception as exc:
                        error = self._broken(cmd, exc)
            done.append((cmd, error, bad))
        if done:
            self._publish(done)
        self._stopped.set()
        _log.info("device.stop", device=self.id, kind=self.kind, completed=self._completed)

    def _publish(self, done: list[tuple[Command, BaseException | None, Event | None]]) -> None:
        """Count, signal and release a batch of finished commands (counters first, as ``_finish``)."""
        n = failed = 0
        for cmd, error, bad in done:
            if cmd.counted:
                n += 1
                if error is not None or bad is not None:
                    failed += 1
            if error is not None:
                self._log_failure(cmd, error)
        with self._state:
            self._in_flight -= n
            self._completed += n
            self._failed += failed
            slot = self._slot_event
            if slot is not None and self._in_flight < self.max_in_flight:
                self._slot_event = None
            else:
                slot = None
        # Uses drop before events fire (as ``Command.finish``): a task woken by an event may
        # donate a buffer at once and must not count the finished command as still reading it.
        held: list[Buffer] = []
        written: list[Buffer] = []
        for cmd, _, _ in done:
            if type(cmd) is ExecuteCommand:  # the common case: one lock round trip for the batch
                held += cmd.inputs
                held += cmd.outputs
                written += cmd.outputs
        if held:
            release_uses(held, written)
        for cmd, error, bad in done:
            if type(cmd) is ExecuteCommand:
                cmd.signal(error, bad)
            else:
                cmd.finish(error, bad)
        if slot is not None:
            slot.set()

    def _calibrate(self, rounds: int = 15) -> float:
        """Median round trip of a no-op through the worker: what the inline path saves."""
        times = []
        for _ in range(rounds):
            ev = Event()
            t0 = time.perf_counter_ns()
            self._queue.put(Noop(ev, (), ()))
            ev.wait_blocking()
            times.append(time.perf_counter_ns() - t0)
        return float(_stats.median(times))

    # -- closing --------------------------------------------------------------------------------
    def begin_close(self, cancel_pending: bool = False) -> Event:
        """Refuse new work; the worker finishes (or with ``cancel_pending`` fails) what is queued."""
        with self._state:
            first = not self._closed
            self._closed = True
            if cancel_pending:
                self._cancel = True
            slot, self._slot_event = self._slot_event, None
        if first:
            self._queue.put(None)
        if slot is not None:
            slot.set()  # waiters for a slot wake up and see ClosedError
        return self._stopped

    def close(self, cancel_pending: bool = False) -> None:
        """Blocking: stop accepting work, drain the queue, join the worker."""
        self.begin_close(cancel_pending).wait_blocking()
        self._thread.join()

    async def aclose(self, cancel_pending: bool = False) -> None:
        await wait_event(self.begin_close(cancel_pending))
        self._thread.join()  # the worker has set _stopped as its last act: this returns at once
