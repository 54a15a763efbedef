"""Helpers for testing code built on asyncjit, and a conformance check for device backends.

* ``Gate``: a plan body that holds its device until ``open()``, so a test can make queue states
  (busy, backlogged, full) deterministic instead of racing real kernels.
* ``host_plan``: a small ``HostExecutable`` over ``(t, width)`` float32 inputs, from numpy code.
* ``host_waits``: records every blocking wait on a runtime event by a thread that is not a
  device queue, to check that async code (a pipeline, a mux) never makes the host wait.
* ``check_device_conformance``: the runtime's promises (DESIGN.md invariants 5-8) checked on one
  device of a client, on whichever loop (asyncio or trio) runs it. A device backend, or a new
  runtime path, passes it before it ships; ``tests/test_testing.py`` runs it on every built-in kind.

Like ``trio.testing``, this module is for tests: it may block a device on purpose.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from . import dtypes
from ._log import capture_events
from .compiler._executable import ArgSpec
from .devices import HostExecutable
from .errors import BufferDeletedError
from .plugins._conformance import check_plugin_conformance as check_plugin_conformance
from .runtime import Client, Device
from .symbolic import Var

__all__ = [
    "Gate",
    "capture_events",
    "check_device_conformance",
    "check_plugin_conformance",
    "host_plan",
    "host_waits",
]

T = Var("t", 1, 8)
"""The var of ``host_plan`` plans: rows, 1 to 8."""


class Gate:
    """``fn(*inputs)`` that blocks the device running it until ``open()``, then returns input 0.

    Blocking waits in ``threading.Event.wait``, which releases the GIL, as native code does.
    """

    def __init__(self, timeout: float = 10.0) -> None:
        self._event = threading.Event()
        self._timeout = timeout
        self.entered = threading.Event()
        """Set once a device started running the gated plan."""

    def __call__(self, *inputs: npt.NDArray[Any]) -> npt.NDArray[Any]:
        self.entered.set()
        if not self._event.wait(self._timeout):
            raise TimeoutError(f"Gate was not opened within {self._timeout} s")
        return inputs[0]

    def open(self) -> None:
        self._event.set()


@contextmanager
def host_waits() -> Iterator[list[str]]:
    """The names of threads that blocked on a pending runtime event inside the block.

    Device queue workers (threads named ``asyncjit-<kind>-<id>``) are not counted: a queue
    waiting for another device's output is how cross-device order is kept. Anything else
    (``block_until_ready``, ``to_numpy_blocking``, ``execute_blocking`` on a full queue) on any
    other thread is recorded once per wait.
    """
    from .runtime import Event

    waits: list[str] = []
    original = Event.wait_blocking

    def recording(self: Event, timeout: float | None = None) -> bool:
        if not self._done:
            name = threading.current_thread().name
            if not name.startswith("asyncjit-"):
                waits.append(name)
        return original(self, timeout)

    Event.wait_blocking = recording  # type: ignore[method-assign]
    try:
        yield waits
    finally:
        Event.wait_blocking = original  # type: ignore[method-assign]


def host_plan(name: str, fn: Callable[..., Any], n_in: int = 2, width: int = 4) -> HostExecutable:
    """A plan of ``n_in`` float32 ``(t, width)`` inputs and one such output, computed by ``fn``."""
    ins = [ArgSpec(f"x{i}", (T, width), dtypes.float32) for i in range(n_in)]
    return HostExecutable.build(name, fn, ins, [ArgSpec("out", (T, width), dtypes.float32)], [T])


def _add(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.add(a, b)


def _fail(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    raise _ConformanceProbeError("injected failure")


class _ConformanceProbeError(RuntimeError):
    """The error the conformance check injects, so it can recognise it downstream."""


def _check(cond: bool, what: str, device: Device) -> None:
    if not cond:
        raise AssertionError(f"{device!r} does not conform: {what}")


async def check_device_conformance(client: Client, device: Device | int = 0, rows: int = 3) -> None:
    """Check the runtime's promises on ``device``; raises ``AssertionError`` naming the first broken one.

    Checked: outputs return before they are computed and are awaitable; commands run in
    submission order, inline or queued; a failure poisons a chain of three and the device then
    serves a healthy command (errors are values); an input deleted while in flight keeps its
    memory until the command finishes and cannot be used again; counters and memory balance.
    The device must be idle when called; it is idle again on return.
    """
    dev = client.device(device) if isinstance(device, int) else device
    add = client.load(host_plan("conformance_add", _add), dev)
    fail = client.load(host_plan("conformance_fail", _fail), dev)
    gate = Gate()
    gated = client.load(host_plan("conformance_gate", gate), dev)
    vars_ = {"t": rows}
    space = dev.default_memory_space
    stats0 = dev.statistics()
    in_use0 = space.memory_stats().bytes_in_use
    one = client.buffer_from_host(np.ones((rows, 4), np.float32), dev)

    # Outputs return before they are computed; queue order holds whichever path each takes.
    (held,) = await gated.execute([one, one], vars_, inline=False)
    _check(not held.is_ready(), "an output was ready before its command could run", dev)
    y = held
    for i in range(6):
        (y,) = await add.execute([y, one], vars_, inline=i % 2 == 0)
    _check(not y.is_ready(), "a command ran ahead of an earlier one on the same queue", dev)
    gate.open()
    got = await y.to_numpy()
    _check(bool(np.all(got == 7.0)), f"a chain of seven gave {got.ravel()[:4]}, not 7.0", dev)

    # Errors are values: a failure poisons a chain of three; the device keeps serving.
    (p,) = await fail.execute([one, one], vars_, inline=False)
    for _ in range(2):
        (p,) = await add.execute([p, one], vars_)
    try:
        await p.ready()
    except _ConformanceProbeError:
        pass
    else:
        raise AssertionError(f"{dev!r} does not conform: a poisoned chain completed without its error")
    (h,) = await add.execute([one, one], vars_)
    _check(bool(np.all(await h.to_numpy() == 2.0)), "a healthy command after a failure was wrong", dev)

    # Deletion is lazy: memory of an input deleted in flight outlives the command.
    gate2 = Gate()
    gated2 = client.load(host_plan("conformance_gate2", gate2), dev)
    x = client.buffer_from_host(np.full((rows, 4), 5.0, np.float32), dev)
    (z,) = await gated2.execute([x, one], vars_, inline=False)
    x.delete()
    try:
        await add.execute([x, one], vars_)
    except BufferDeletedError:
        pass
    else:
        raise AssertionError(f"{dev!r} does not conform: a deleted buffer was accepted as an input")
    gate2.open()
    _check(bool(np.all(await z.to_numpy() == 5.0)), "a deleted input's memory changed in flight", dev)

    # Counters and memory balance once every buffer made here is gone. An error that was raised
    # refers to the frames it passed through, and they to the poisoned buffers: as with asyncio
    # futures, such cycles are the garbage collector's to free.
    del held, y, p, h, x, z
    gc.collect()
    await _settle(dev)
    stats = dev.statistics()
    _check(stats.in_flight == 0, f"{stats.in_flight} commands still in flight", dev)
    _check(stats.submitted == stats.completed, "submitted and completed counts differ", dev)
    _check(stats.failed - stats0.failed == 3, f"{stats.failed - stats0.failed} failures counted, not 3", dev)
    one.delete()
    in_use = space.memory_stats().bytes_in_use
    _check(in_use == in_use0, f"{in_use - in_use0} bytes still in use after every buffer went", dev)


async def _settle(dev: Device) -> None:
    """Wait (without blocking the loop) until the device's counters show nothing in flight."""
    with anyio.fail_after(10):
        while dev.statistics().in_flight:
            await anyio.sleep(0.001)
