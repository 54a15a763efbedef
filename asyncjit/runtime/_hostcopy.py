"""Host copies of a sharded array, one thread per shard: each device's transfer runs on its own core.

Placing a host array on a split sharding copies one slice per device, and gathering a
``ShardedBuffer`` copies one shard per device back. Done one after another on the calling thread,
those copies are the serial part of a data-parallel call: a 4 MB slice takes 0.3 ms from a warm
cache and 0.7 ms after an idle pause here, while the devices then compute their halves at once.
So, like an accelerator's per-device copy engines, each shard's copy runs on its own thread:
the caller copies the first, helper threads (started once, blocked on a queue between uses) the
others, and the call returns when all are done, so the host array is read only during the call
as ``IMMUTABLE_ONLY_DURING_CALL`` promises. ``ctypes.memmove`` and numpy's copies release the
GIL, so the threads copy at the same time. Small arrays copy on the caller: waking a helper costs
tens of microseconds.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence

__all__ = ["PARALLEL_COPY_BYTES", "run_copies"]

PARALLEL_COPY_BYTES = 1 << 20
"""Fewest bytes in all shards for helper threads to copy (below: the caller copies them all)."""

_batches: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
_lock = threading.Lock()
_helpers = 0


class _Batch:
    """One call's copies: the caller and the helpers take them in turn until none is left."""

    def __init__(self, copies: Sequence[Callable[[], None]]) -> None:
        self._copies = list(copies)
        self._next = 0
        self._left = len(self._copies)
        self._cond = threading.Condition(threading.Lock())
        self.error: BaseException | None = None

    def work(self) -> None:
        """Run copies until none is left to start; record the first error."""
        while True:
            with self._cond:
                if self._next == len(self._copies):
                    return
                copy = self._copies[self._next]
                self._next += 1
            error: BaseException | None = None
            try:
                copy()
            except BaseException as exc:  # handed to the caller, which raises it
                error = exc
            with self._cond:
                if error is not None and self.error is None:
                    self.error = error
                self._left -= 1
                if self._left == 0:
                    self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            while self._left:
                self._cond.wait()


def _helper() -> None:
    while True:
        _batches.get().work()


def _ensure_helpers(n: int) -> None:
    global _helpers
    with _lock:
        while _helpers < n:
            threading.Thread(target=_helper, name=f"asyncjit-hostcopy-{_helpers}", daemon=True).start()
            _helpers += 1


def _after_fork() -> None:
    """A forked child has none of the parent's helper threads: start its own when needed."""
    global _batches, _lock, _helpers
    _batches, _lock, _helpers = queue.SimpleQueue(), threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def run_copies(copies: Sequence[Callable[[], None]], nbytes: int) -> None:
    """Run ``copies`` (one per shard), in parallel when they move ``PARALLEL_COPY_BYTES`` or more
    and the process may use more than one core; raises the first copy's error after all ended."""
    from ..codegen._parallel import available_cores

    if len(copies) < 2 or nbytes < PARALLEL_COPY_BYTES or available_cores() < 2:
        for copy in copies:
            copy()
        return
    helpers = min(len(copies) - 1, available_cores() - 1)
    _ensure_helpers(helpers)
    batch = _Batch(copies)
    for _ in range(helpers):
        _batches.put(batch)
    batch.work()
    batch.wait()  # the helpers read the caller's array: never return before they are done
    if batch.error is not None:
        raise batch.error
