"""``Signal``: a one-shot wake-up for one task of the running loop, its backend chosen once.

The mux creates one per request, per backlog waiter and per service sleep. ``anyio.Event()``
looks the backend up on every construction (1.4 µs against 0.3 µs for a bare asyncio future,
STYLE.md section 3), so ``signal_factory()`` is called once when a mux starts and returns the
asyncio or trio class bound to that loop. Signals are set only from the loop's own thread (device
completions reach the loop through the runtime's coalescing ``Waker`` first), so they need no lock.

``wait()`` returns at once, without a checkpoint, when the signal is already set; otherwise it
parks the task until ``set()``. One waiter at a time: a second raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import functools
from asyncio.events import _get_running_loop
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Parker", "Signal", "SignalFactory", "loop_clock", "parker", "signal_factory"]


class Signal(Protocol):
    """Set once by anyone on the loop; awaited by one task."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


SignalFactory = Callable[[], Signal]


class AsyncioSignal:
    """A lazily created ``loop.create_future()``; a cancelled wait leaves the signal reusable."""

    __slots__ = ("_fut", "_loop", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fut: asyncio.Future[None] | None = None
        self._set = False

    def __repr__(self) -> str:
        return f"<AsyncioSignal {'set' if self._set else 'clear'}>"

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._fut is not None:
            raise RuntimeError("this signal already has a waiting task")
        fut = self._fut = self._loop.create_future()
        try:
            await fut
        finally:
            self._fut = None


@functools.cache
def _trio_signal_class() -> type[Signal]:
    """Built on first use so that asyncio-only programs never import trio."""
    import trio

    reschedule = trio.lowlevel.reschedule
    current_task = trio.lowlevel.current_task
    wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
    succeeded = trio.lowlevel.Abort.SUCCEEDED

    class TrioSignal:
        __slots__ = ("_set", "_task")

        def __init__(self) -> None:
            self._set = False
            self._task: trio.lowlevel.Task | None = None

        def __repr__(self) -> str:
            return f"<TrioSignal {'set' if self._set else 'clear'}>"

        def set(self) -> None:
            if self._set:
                return
            self._set = True
            task = self._task
            if task is not None:
                self._task = None
                reschedule(task)

        def is_set(self) -> bool:
            return self._set

        async def wait(self) -> None:
            if self._set:
                return
            if self._task is not None:
                raise RuntimeError("this signal already has a waiting task")
            self._task = current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._task = None
                return succeeded

            await wait_task_rescheduled(abort)

    return TrioSignal


class Parker:
    """How one task parks on a ``Waiter`` held by an object (``holder._waiter``) until someone
    calls ``waiter.set_result(None)``: the mux's per-step wake-up, with no ``Signal`` and no
    coroutine made per step on asyncio.

    ``park(holder)`` does it in a coroutine of its own; the mux's per-step path does it inline,
    one coroutine frame less to suspend and resume through (on asyncio 1.2x less loop CPU per
    step than a ``Signal``): with ``loop`` (the running asyncio loop) as ``w = holder._waiter =
    loop.create_future(); await w``, on trio (``loop`` None) as ``w = holder._waiter =
    new_waiter(); await wait(w.abort)``. Either waiter answers ``done()`` (set, or its wait was
    cancelled: do not set it) and ``set_result(None)``.
    """

    __slots__ = ("loop", "new_waiter", "park", "wait")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        park: Callable[[Any], Any],
        new_waiter: Callable[[], Any] = lambda: None,
        wait: Callable[[Any], Any] = lambda abort: None,
    ) -> None:
        self.loop = loop
        self.park = park
        self.new_waiter = new_waiter  # trio: the current task's waiter (unused with ``loop``)
        self.wait = wait  # trio: ``wait_task_rescheduled``


async def _park_asyncio(holder: Any) -> None:
    fut = holder._waiter = asyncio.get_running_loop().create_future()
    await fut


@functools.cache
def _trio_parker() -> Parker:
    import trio

    reschedule = trio.lowlevel.reschedule
    current_task = trio.lowlevel.current_task
    wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
    succeeded = trio.lowlevel.Abort.SUCCEEDED

    class TrioWaiter:
        """A parked trio task, woken at most once (a cancelled wait forgets the task). The mux
        resolves a batch by reading and clearing ``task`` itself (``trio_resolve_rows``)."""

        __slots__ = ("task",)

        def __init__(self, task: Any) -> None:
            self.task = task

        def done(self) -> bool:
            return self.task is None

        def set_result(self, _: None) -> None:
            task = self.task
            if task is not None:
                self.task = None
                reschedule(task)

        def abort(self, _: Any) -> Any:
            self.task = None
            return succeeded

    def new_waiter() -> TrioWaiter:
        return TrioWaiter(current_task())

    async def park(holder: Any) -> None:
        waiter = holder._waiter = TrioWaiter(current_task())
        await wait_task_rescheduled(waiter.abort)

    return Parker(None, park, new_waiter, wait_task_rescheduled)


def parker() -> Parker:
    """The ``Parker`` of the running loop (asyncio or trio).

    Raises:
        RuntimeError: when called outside a running asyncio or trio loop.
    """
    loop = _get_running_loop()
    if loop is not None:
        return Parker(loop, _park_asyncio)
    signal_factory()  # the same check and error outside a loop
    return _trio_parker()


def signal_factory() -> SignalFactory:
    """The ``Signal`` constructor for the running loop (asyncio or trio).

    Raises:
        RuntimeError: when called outside a running asyncio or trio loop.
    """
    loop = _get_running_loop()
    if loop is not None:
        return functools.partial(AsyncioSignal, loop)
    try:
        import trio

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        raise RuntimeError("StreamMux needs a running asyncio or trio event loop") from None
    return _trio_signal_class()


def loop_clock() -> Callable[[], float]:
    """The running loop's clock (what anyio deadlines use), picked once: ``loop.time`` or trio's.

    On trio, the run's clock object's own ``current_time`` (a mock clock in tests): one call
    instead of three layers through ``trio.current_time``, which the mux calls once per step.
    """
    loop = _get_running_loop()
    if loop is not None:
        return loop.time
    import trio

    return trio.lowlevel.current_clock().current_time
