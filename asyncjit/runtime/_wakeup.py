"""Waking event-loop tasks from device threads: one adapter per loop, one wake-up per batch.

Measured on the target machine: asyncio ``call_soon_threadsafe`` costs 35-45 µs, trio
``run_sync_soon`` 52-63 µs, ``anyio.to_thread.run_sync`` ~100 µs. So a worker never calls into
the loop per command. It appends the waiter to the loop's pending list and schedules a single
drain callback only when none is scheduled; that drain wakes every waiter finished since the
last one (invariant 5). A buffer nobody awaits registers no waiter and costs no wake-up.

The adapter is picked once per loop (a weak map keyed by the asyncio loop, a ``RunVar`` on
trio), never by asking anyio or sniffio on each await (STYLE.md section 3).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
import weakref
from asyncio.events import _get_running_loop
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from ..profiler import _state as _trace
from ._events import Event

if TYPE_CHECKING:
    import trio

__all__ = ["AsyncioWaker", "TrioWaker", "Waker", "WakerStatistics", "current_waker", "wait_event"]

T = TypeVar("T")


@attrs.frozen
class WakerStatistics:
    """``posts`` waiters woken through ``wakeups`` loop callbacks; ``pending`` not yet drained."""

    backend: str
    posts: int
    wakeups: int
    pending: int


class Waker(abc.ABC, Generic[T]):
    """Wakes tasks of one event loop from any thread, coalescing wake-ups into one callback."""

    backend: str = "?"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[T] = []
        self._scheduled = False
        self._posts = 0
        self._wakeups = 0

    def post(self, item: T) -> None:
        """Thread-safe: queue ``item`` for waking; schedule a drain only if none is pending."""
        with self._lock:
            self._pending.append(item)
            self._posts += 1
            if self._scheduled:
                return
            self._scheduled = True
        self._schedule()

    def _drain(self) -> None:
        with self._lock:
            items, self._pending = self._pending, []
            self._scheduled = False
            self._wakeups += 1
        if _trace.active is not None:
            _trace.active.instant("loop.wakeup", "loop", backend=self.backend, resolved=len(items))
        for item in items:
            self._wake(item)

    def statistics(self) -> WakerStatistics:
        with self._lock:
            return WakerStatistics(self.backend, self._posts, self._wakeups, len(self._pending))

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<{type(self).__name__} posts={s.posts} wakeups={s.wakeups} pending={s.pending}>"

    @abc.abstractmethod
    def _schedule(self) -> None:
        """Ask the loop, from any thread, to call ``_drain`` soon."""

    @abc.abstractmethod
    def _wake(self, item: T) -> None:
        """On the loop: resume the task behind ``item`` unless it was cancelled."""

    @abc.abstractmethod
    async def wait(self, event: Event) -> None:
        """Suspend the current task until ``event`` fires (does not raise its error)."""


class AsyncioWaker(Waker["asyncio.Future[None]"]):
    backend = "asyncio"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop

    def _schedule(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to wake
            self._loop.call_soon_threadsafe(self._drain)

    def _wake(self, item: asyncio.Future[None]) -> None:
        if not item.done():
            item.set_result(None)

    async def wait(self, event: Event) -> None:
        fut: asyncio.Future[None] = self._loop.create_future()
        cb = partial(self.post, fut)
        if not event.add_callback(cb):
            return
        try:
            await fut
        except BaseException:
            event.remove_callback(cb)  # cancelled: leave the event as we found it
            raise


class _TrioWaiter:
    __slots__ = ("aborted", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.aborted = False


class TrioWaker(Waker[_TrioWaiter]):
    backend = "trio"

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        super().__init__()
        self._token = token

    def _schedule(self) -> None:
        import trio

        with contextlib.suppress(trio.RunFinishedError):  # the run is over: nobody to wake
            self._token.run_sync_soon(self._drain)

    def _wake(self, item: _TrioWaiter) -> None:
        import trio

        if not item.aborted:
            trio.lowlevel.reschedule(item.task)

    async def wait(self, event: Event) -> None:
        import trio

        waiter = _TrioWaiter(trio.lowlevel.current_task())
        cb = partial(self.post, waiter)
        if not event.add_callback(cb):
            return

        def abort(_: Any) -> trio.lowlevel.Abort:
            # Runs on the trio thread, as does _wake: setting the flag first means a drain
            # already queued will skip this task instead of rescheduling it twice.
            waiter.aborted = True
            event.remove_callback(cb)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


_asyncio_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncioWaker] = (
    weakref.WeakKeyDictionary()
)
_trio_var: Any = None


def current_waker() -> Waker[Any]:
    """The waker of the running loop (asyncio or trio), created once per loop.

    Raises:
        RuntimeError: when called outside asyncio or trio.
    """
    loop = _get_running_loop()
    if loop is not None:
        waker = _asyncio_wakers.get(loop)
        if waker is None:
            waker = _asyncio_wakers[loop] = AsyncioWaker(loop)
        return waker
    return _current_trio_waker()


def _current_trio_waker() -> Waker[Any]:
    global _trio_var
    try:
        import trio
    except ImportError:  # pragma: no cover - trio is optional
        raise RuntimeError("asyncjit awaitables need a running asyncio or trio loop") from None
    if _trio_var is None:
        _trio_var = trio.lowlevel.RunVar("asyncjit_waker")
    try:
        found: TrioWaker = _trio_var.get()
        return found
    except LookupError:
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:  # not inside trio.run either
        raise RuntimeError("asyncjit awaitables need a running asyncio or trio loop") from None
    waker = TrioWaker(token)
    _trio_var.set(waker)
    return waker


async def wait_event(event: Event) -> None:
    """Wait for ``event`` on the running loop; returns at once (no checkpoint) if it is done."""
    if not event._done:
        await current_waker().wait(event)
