"""``Event``: the completion of one device command, set once by a worker, awaited by many.

An event is the runtime's only synchronisation object. Output buffers of one command share
it; other devices wait on it (invariant 5: cross-device events, no host sync); loops wait on it
through a ``Waker`` (``_wakeup.py``); scripts wait on it with a blocking call. It costs four
slots (the lock is shared by all events), and firing it with nobody waiting wakes nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Final

from .._log import get_logger

__all__ = ["Event"]

_log = get_logger("asyncjit.runtime")


_events_lock = threading.Lock()


class Event:
    """Done or failed, once. Errors are values: the original exception and traceback are kept."""

    __slots__ = ("_callbacks", "_done", "_error", "_tb")

    # One lock for every event: held for a few stores, never while a callback runs, and one
    # event per command no longer allocates a lock.
    _lock = _events_lock

    def __init__(self) -> None:
        self._done = False
        self._error: BaseException | None = None
        self._tb: TracebackType | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error is not None else "done")
        return f"<Event {state}>"

    # -- state ------------------------------------------------------------------------------
    def is_set(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        """The exception that poisoned this event, or None (also None while pending)."""
        return self._error

    def raise_if_failed(self) -> None:
        """Re-raise the original error with its original traceback (not one grown per raise)."""
        if self._error is not None:
            raise self._error.with_traceback(self._tb)

    # -- firing (any thread) ------------------------------------------------------------------
    def set(self) -> None:
        self._finish(None)

    def fail(self, error: BaseException, tb: TracebackType | None = None) -> None:
        """Poison: keep ``error`` and its traceback (``tb`` when forwarding another event's)."""
        self._finish(error, tb if tb is not None else error.__traceback__)

    def poison_from(self, other: Event) -> None:
        """Fail with exactly the error (and traceback) that failed ``other``."""
        assert other._error is not None
        self._finish(other._error, other._tb)

    def _finish(self, error: BaseException | None, tb: TracebackType | None = None) -> None:
        with self._lock:
            if self._done:
                return
            self._error = error
            self._tb = tb
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for cb in callbacks:
                try:
                    cb()
                except BaseException as exc:  # a broken waiter must not kill a device worker
                    _log.error("event.callback_failed", error=repr(exc))

    # -- waiting ------------------------------------------------------------------------------
    def add_callback(self, cb: Callable[[], None]) -> bool:
        """Call ``cb()`` (on the firing thread) when done; False, without calling, if done already."""
        with self._lock:
            if self._done:
                return False
            if self._callbacks is None:
                self._callbacks = [cb]
            else:
                self._callbacks.append(cb)
            return True

    def remove_callback(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if self._callbacks is not None:
                with contextlib.suppress(ValueError):
                    self._callbacks.remove(cb)

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """Block this thread until done; False on timeout. For workers and scripts only."""
        if self._done:
            return True
        gate = threading.Lock()
        gate.acquire()
        if not self.add_callback(gate.release):
            return True
        if gate.acquire(timeout=-1 if timeout is None else timeout):
            return True
        self.remove_callback(gate.release)
        return self._done


def _completed() -> Event:
    ev = Event()
    ev.set()
    return ev


READY: Final[Event] = _completed()
"""Shared by every buffer that is ready when created (host copies made during the call)."""
