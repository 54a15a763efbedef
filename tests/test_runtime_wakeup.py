"""Loop wake-ups (``runtime._wakeup``): coalescing, no cost for unawaited buffers, cancellation."""

from __future__ import annotations

import threading

import anyio
import pytest

from asyncjit.runtime import Event, current_waker, wait_event

pytestmark = pytest.mark.anyio


def fire(events: list[Event]) -> None:
    for e in events:
        e.set()


# Move to tests/conftest.py once the lead adopts it: every async test on both backends.
async def test_one_wakeup_serves_a_batch_of_completions() -> None:
    """Events fired by a thread while the loop is busy are delivered by a single loop callback."""
    waker = current_waker()
    assert current_waker() is waker  # one adapter per loop
    events = [Event() for _ in range(20)]
    woken: list[int] = []

    async def waiter(i: int) -> None:
        await wait_event(events[i])
        woken.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(waiter, i)
        await anyio.wait_all_tasks_blocked()  # every waiter is registered
        before = waker.statistics()
        t = threading.Thread(target=fire, args=(events,))
        t.start()
        t.join()  # deliberately blocks the loop so that all 20 completions arrive together
    after = waker.statistics()
    assert sorted(woken) == list(range(20))
    assert after.posts - before.posts == 20
    assert after.wakeups - before.wakeups == 1
    assert after.pending == 0


async def test_unawaited_events_cost_no_wakeup() -> None:
    """Firing an event nobody awaits posts nothing to the loop."""
    waker = current_waker()
    before = waker.statistics()
    events = [Event() for _ in range(10)]
    t = threading.Thread(target=fire, args=(events,))
    t.start()
    t.join()
    await anyio.sleep(0)
    assert waker.statistics() == before
    await wait_event(events[0])  # done already: returns without registering
    assert waker.statistics() == before


async def test_cancel_after_completion_was_posted() -> None:
    """A waiter cancelled after its wake-up was queued (but before it ran) is not woken twice."""
    ev = Event()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def waiter() -> None:
                await wait_event(ev)

            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()  # the waiter is registered
            # Fire and cancel in the same loop turn: the drain and the cancellation race.
            t = threading.Thread(target=ev.set)
            t.start()
            t.join()
            scope.cancel()
    assert ev.is_set()
    await anyio.wait_all_tasks_blocked()  # a stray double wake-up would raise inside the loop here
    assert current_waker().statistics().pending == 0


async def test_wait_event_does_not_raise_the_error() -> None:
    """``wait_event`` only waits; buffers decide whether to raise."""
    ev = Event()
    ev.fail(ValueError("x"))
    await wait_event(ev)
    with pytest.raises(ValueError):
        ev.raise_if_failed()
    assert "failed" in repr(ev) and "posts=" in repr(current_waker())


def test_no_loop_means_no_waker() -> None:
    """Outside asyncio and trio ``current_waker`` says so."""
    with pytest.raises(RuntimeError, match="asyncio or trio"):
        current_waker()


def test_blocking_wait_times_out() -> None:
    """``Event.wait_blocking`` with a timeout returns False and leaves no callback behind."""
    ev = Event()
    assert not ev.wait_blocking(0.01)
    assert not ev._callbacks
    ev.set()
    assert ev.wait_blocking(0.01)
