"""``SlotPool``: which rows of the device-side state pool are free, who waits for one, what to reset.

Admission is ordered: a freed slot goes to the oldest backlog waiter, handed over directly, so a
newcomer can never overtake the backlog. Free slots are handed out lowest first, so the slots in
use stay packed at the start of the pool: a ``BatchedStep`` whose pool grows on demand
(``pool_rows``) then holds about as many rows as streams were ever open at once, not
``max_streams``. Slots are reset and handed on by ``service``, which the
mux calls only while no run is in progress: a closing stream's slot may be in the running batch,
and ``BatchedStep.reset_slot`` may only write the pool between runs.
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator

import anyio

from ._errors import AdmissionTimeoutError, BacklogFullError, MuxClosedError
from ._signal import Signal, SignalFactory

__all__ = ["SlotPool"]

Reset = Callable[[int, object | None], None]


class _Admission:
    """A backlog entry: the slot handed over (if any) and the initial state to reset it to."""

    __slots__ = ("signal", "slot", "state")

    def __init__(self, signal: Signal, state: object | None) -> None:
        self.signal = signal
        self.state = state
        self.slot: int | None = None


class SlotPool:
    """``max_streams`` slots, an ordered backlog of at most ``backlog`` waiters, deferred resets.

    Args:
        notify: wakes the service task when it has work (a released slot).
        needs_reset: whether a slot handed out without an initial state must still be reset
            before use (a row the step's pool does not hold yet); default: never.
    """

    def __init__(
        self,
        max_streams: int,
        backlog: int,
        notify: Callable[[], None],
        needs_reset: Callable[[int], bool] | None = None,
    ) -> None:
        self.max_streams = max_streams
        self.backlog_limit = backlog
        self._notify = notify
        self._needs_reset = needs_reset
        self._free: list[int] = list(range(max_streams))  # a heap: lowest slot first
        self._backlog: OrderedDict[_Admission, None] = OrderedDict()
        self._released: list[int] = []
        self._resets: list[tuple[int, object | None]] = []
        self.closed = False

    def __repr__(self) -> str:
        return (
            f"<SlotPool free={len(self._free)}/{self.max_streams} backlog={len(self._backlog)}"
            f"/{self.backlog_limit} releasing={len(self._released)}>"
        )

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def has_pending(self) -> bool:
        """Released slots or initial states wait for ``service`` (which needs no run in flight)."""
        return bool(self._released or self._resets)

    @property
    def waiting(self) -> int:
        """Streams in the backlog."""
        return len(self._backlog)

    # -- the opening task's side ------------------------------------------------------------
    def try_acquire(self, state: object | None) -> int | None:
        """A slot now, or None when none is free or others wait before us (no barging)."""
        if self.closed:
            raise MuxClosedError("the StreamMux has exited; no stream can be opened")
        if self._backlog:
            return None
        released = min(self._released) if self._released else None
        if released is not None and (not self._free or released < self._free[0]):
            # a slot freed since the last service (runs were in flight): lower than any free
            # one, so take it, reset before use like an initial state; under churn with runs
            # in flight the slots in use then stay packed instead of climbing past them
            self._released.remove(released)
            self._resets.append((released, state))
            return released
        if not self._free:
            return None
        slot = heapq.heappop(self._free)
        if state is not None or (self._needs_reset is not None and self._needs_reset(slot)):
            self._resets.append((slot, state))
        return slot

    async def acquire(self, state: object | None, timeout: float | None, signal: SignalFactory) -> int:
        """Wait in the backlog for a slot, at most ``timeout`` seconds (None: no limit).

        Raises:
            BacklogFullError: ``backlog`` streams already wait.
            AdmissionTimeoutError: no slot was handed over within ``timeout``.
        """
        slot = self.try_acquire(state)
        if slot is not None:
            return slot
        if self.closed:
            raise MuxClosedError("the StreamMux has exited; no stream can be opened")
        if len(self._backlog) >= self.backlog_limit:
            raise BacklogFullError(
                f"all {self.max_streams} stream slots are in use and {len(self._backlog)} streams "
                f"already wait (backlog={self.backlog_limit}); retry later or raise max_streams/backlog"
            )
        entry = _Admission(signal(), state)
        self._backlog[entry] = None
        try:
            with _deadline(timeout):
                await entry.signal.wait()
        except BaseException:
            self._abandon(entry)
            raise
        if self.closed:  # a slot handed over just before the mux exited opens nothing either
            self._abandon(entry)
            raise MuxClosedError("the StreamMux exited while this stream waited for a slot")
        if entry.slot is None:  # timed out (a hand-over that raced the timeout still counts)
            self._abandon(entry)
            raise AdmissionTimeoutError(
                f"no stream slot became free within admission_timeout={timeout} s "
                f"({self.max_streams} streams open); retry later or raise max_streams"
            )
        return entry.slot

    def _abandon(self, entry: _Admission) -> None:
        self._backlog.pop(entry, None)
        if entry.slot is not None:  # handed over, but the waiter left: give it back
            self.release(entry.slot)
            entry.slot = None

    def close(self) -> None:
        """Refuse new streams; every backlog waiter wakes up and raises ``MuxClosedError``."""
        self.closed = True
        backlog, self._backlog = self._backlog, OrderedDict()
        for entry in backlog:
            entry.signal.set()

    def release(self, slot: int) -> None:
        """Give ``slot`` back; the service resets it and hands it on between two runs."""
        self._released.append(slot)
        self._notify()

    # -- the service task's side ------------------------------------------------------------
    def service(self, reset: Reset) -> None:
        """Apply initial states, reset released slots and hand them to the backlog in order.

        Pending initial states go first: a stream that got a slot and then failed to open has
        both an initial state and a release queued, and the slot must end up zeroed.
        """
        self._apply_resets(reset)
        if self._released:
            released, self._released = self._released, []
            for slot in released:
                reset(slot, None)  # a freed slot never keeps a stream's state
                if self._backlog:
                    entry, _ = self._backlog.popitem(last=False)
                    entry.slot = slot
                    if entry.state is not None:
                        self._resets.append((slot, entry.state))
                    entry.signal.set()
                else:
                    heapq.heappush(self._free, slot)
            self._apply_resets(reset)

    def _apply_resets(self, reset: Reset) -> None:
        if self._resets:
            resets, self._resets = self._resets, []
            for slot, state in resets:
                reset(slot, state)


@contextlib.contextmanager
def _deadline(timeout: float | None) -> Iterator[None]:
    if timeout is None or math.isinf(timeout):
        yield
        return
    with anyio.move_on_after(timeout):
        yield
