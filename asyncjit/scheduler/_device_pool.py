"""``DevicePool``: a slot pool on the device, threaded through a ``(chunks, slots, pool) -> (out,
new_pool)`` plan, with pipelined launches and failures that change no slot.

**In place.** A plan compiled with ``donate=[2]`` writes ``new_pool`` over ``pool``
(``LoadedExecutable.input_output_aliases``): each launch donates the pool, the plan's scatter
writes only the batch's rows, and the output takes the pool's memory, so a step costs the batch,
not the pool. Launches chain in the device's in-order queue, each reading what the previous one
wrote. A launch that fails before it runs (a poisoned input: the way a batch fails) writes
nothing, and neither do the launches queued behind it (they read its poisoned pool): the pool's
memory is taken back from the last of them (``Buffer.reclaim``), and those later launches are
run again, in order, before anything else is enqueued. A failure inside the plan itself (a
plugin's kernel raising mid-run) may leave the failed batch's rows part-written.

**Double-buffered** (a plan without that alias): each launch reads the pool the previous launch
writes and its ``new_pool`` output is the next one's input. ``complete`` commits a launch's pool
only when it succeeded; a failed launch is forgotten, and a launch that read its (poisoned)
output is run again on the last good pool. Both ``SileroBatchedStep`` and ``HostBatchedStep``
keep their state this way; the first in place.

**Rows on demand.** A run of a double-buffered plan writes a whole new pool, so a pool of
``num_slots`` rows would cost a copy of every slot per batch whatever the number of streams. A
plan whose pool has a row var (``[p, width]``, ``p`` in ``1..num_slots``) gets a pool of
``pool_rows`` rows, grown (at least doubling, zero rows added) by ``reset_slot`` when a slot at or
beyond it is first used; the mux hands out the lowest free slots and resets such a slot before
its first step, between runs. 256 streams on a ``max_streams=4096`` Silero VAD mux then cost what
256 slots cost.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from ..codegen._parallel import pin_threads
from ..errors import DTypeMismatchError, InvalidArgumentError, SlotIndexError
from ..runtime import Buffer, Client, Device, LoadedExecutable

__all__ = [
    "DevicePool",
    "Launched",
    "PooledStep",
]


class Launched:
    """One launched step: its input buffers (kept for a re-run) and its outputs."""

    __slots__ = ("b", "chunks", "out", "pool_in", "pool_out", "seq", "slots")

    def __init__(
        self,
        chunks: Buffer,
        slots: Buffer,
        b: int,
        pool_in: Buffer,
        out: Buffer,
        pool_out: Buffer,
        seq: int = 0,
    ) -> None:
        self.seq = seq  # launch order
        self.chunks = chunks
        self.slots = slots
        self.b = b
        self.pool_in = pool_in
        self.out = out
        self.pool_out = pool_out

    def __repr__(self) -> str:
        return f"<Launched b={self.b} ready={self.out.is_ready()}>"


class DevicePool:
    """The pool buffer(s) of one plan on one device.

    Args:
        plan: a loaded plan ``(chunks [b, ...], slots [b], pool) -> (out [b, ...], new_pool)``.
        pool: the initial pool (host array, copied to ``device``): all ``num_slots`` rows, or
            its first rows when the plan has a ``row_var``.
        batch_var: the name of the plan's batch var (None when the batch size is fixed).
        row_var: the name of the plan's pool-rows var (None: the pool always has every row).
        num_slots: rows the pool may grow to (default: the initial pool's rows).
    """

    def __init__(
        self,
        client: Client,
        plan: LoadedExecutable,
        device: Device,
        pool: npt.NDArray[Any],
        batch_var: str | None,
        row_var: str | None = None,
        num_slots: int | None = None,
    ) -> None:
        self.client = client
        self.plan = plan
        self.device = device
        self.batch_var = batch_var
        self.row_var = row_var
        self.num_slots = int(pool.shape[0]) if num_slots is None else num_slots
        self.rows = int(pool.shape[0])  # rows the pool holds now (== num_slots without row_var)
        # ``_committed``: the pool after the last successful completed step (what slots hold);
        # ``_head``: what the next launch reads (the output of the latest launch). The same
        # buffer whenever nothing is in flight.
        self._committed: Buffer = client.buffer_from_host(pool, device)
        self._head = self._committed
        self._host_pool: Buffer | None = self._committed  # made on the host (see ``_donation``)
        # in place: the plan writes new_pool over the donated pool (input 2 -> output 1)
        self.in_place = plan.input_output_aliases.get(2) == 1
        self._donate: tuple[int, ...] = (2,) if self.in_place else ()
        self._seq = itertools.count()
        self._flight: list[Launched] = []  # in place: launched, not completed, in launch order
        self._stale: list[Launched] = []  # in place: launched behind a failure, to run again

    @property
    def pool(self) -> Buffer:
        """The pool after the last successful step; in place, read it between runs (a run in
        flight was donated that buffer: its memory is that run's output now)."""
        return self._committed

    @property
    def in_flight(self) -> bool:
        return self._head is not self._committed or bool(self._stale)

    def _vars(self, b: int) -> dict[str, int] | None:
        values = {}
        if self.batch_var is not None:
            values[self.batch_var] = b
        if self.row_var is not None:
            values[self.row_var] = self.rows
        return values or None

    def launch(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> Launched:
        """Enqueue one step now (the inputs are copied); ``complete`` it in launch order.

        Raises:
            SlotIndexError: (an ``IndexError``) a slot outside ``0..num_slots-1``, or beyond the
                rows a growing pool holds while steps are in flight (``reset_slot`` it between
                runs first; between runs the pool grows here).
        """
        if len(slots):
            lo, hi = int(slots.min()), int(slots.max())
            if lo < 0 or hi >= self.num_slots:
                raise SlotIndexError(f"{self.plan!r}: slots must be in 0..{self.num_slots - 1}, got {slots}")
            if hi >= self.rows:
                if self.in_flight:
                    raise SlotIndexError(
                        f"{self.plan!r}: slot {hi} is beyond the pool's {self.rows} rows while steps "
                        "are in flight; reset_slot() it between runs first"
                    )
                self._grow(hi + 1)
        client, dev = self.client, self.device
        chunk_buf = client.buffer_from_host(chunks, dev)
        slot_buf = client.buffer_from_host(slots, dev)
        if self._stale:
            self._rerun_stale()
        pool_in = self._head
        out, pool_out = self.plan.execute_nowait(
            [chunk_buf, slot_buf, pool_in], self._vars(len(slots)), donate=self._donation()
        )
        self._head = pool_out
        h = Launched(chunk_buf, slot_buf, len(slots), pool_in, out, pool_out, next(self._seq))
        if self.in_place:
            self._flight.append(h)
        return h

    async def complete(self, launched: Launched) -> npt.NDArray[Any]:
        """The outputs of a launched step, on the host (one loop wake-up).

        Raises:
            Exception: the step's own error; the pool stays as before it.
        """
        h = launched
        if self.in_place:
            return await self._complete_in_place(h)
        if h.pool_in is not self._committed:  # it read the pool of a failed step: run it again
            with contextlib.suppress(Exception):
                await h.out.ready()
            was_head = self._head is h.pool_out
            h.pool_in = self._committed
            h.out, h.pool_out = self.plan.execute_nowait([h.chunks, h.slots, h.pool_in], self._vars(h.b))
            if was_head:
                self._head = h.pool_out
        try:
            await h.out.ready()  # both outputs complete with one event; raises the plan's error
        except Exception:
            if self._head is h.pool_out:
                self._head = self._committed  # later launches read the last good pool
            raise
        self._committed = h.pool_out
        return await h.out.to_numpy()

    async def _complete_in_place(self, h: Launched) -> npt.NDArray[Any]:
        if h in self._stale:
            self._rerun_stale()
        try:
            await h.out.ready()  # both outputs complete with one event; raises the plan's error
        except Exception:
            await self._take_back(h)
            raise
        finally:
            # launches before ``h`` were completed (or abandoned, and finished before it)
            self._flight = [f for f in self._flight if f.seq > h.seq]
        self._committed = h.pool_out
        return await h.out.to_numpy()

    async def _take_back(self, failed: Launched) -> None:
        """After ``failed`` failed: every launch behind it read its poisoned pool and wrote
        nothing; recover the last good pool and queue them to run again."""
        with contextlib.suppress(Exception):
            await self._head.ready()
        self._recover()
        self._stale = [f for f in self._flight if f.seq > failed.seq]

    def _recover(self) -> None:
        """The head failed (and finished): the last good pool is ``_committed`` if it was not
        donated, else the memory of the head, which took it over and wrote nothing."""
        if self._head.error is None or self._head is self._committed:
            return
        if self._committed.is_deleted():
            self._committed = self._head = self._head.reclaim()
        else:
            self._head = self._committed

    def _donation(self) -> tuple[int, ...]:
        """Donate the head unless it is a pool made on the host (sized for its rows, not the
        plan's capacity, so the output could not take its memory): that launch copies it."""
        return self._donate if self._head is not self._host_pool else ()

    def _rerun_stale(self) -> None:
        """Launch again, in order and on the taken-back pool, the launches behind a failure."""
        stale, self._stale = self._stale, []
        for h in stale:
            h.pool_in = self._head
            h.out, h.pool_out = self.plan.execute_nowait(
                [h.chunks, h.slots, h.pool_in], self._vars(h.b), donate=self._donation()
            )
            self._head = h.pool_out

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        return await self.complete(self.launch(chunks, slots))

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        """Zero ``slot`` or set it to ``state``, in place; only while nothing is in flight
        (launches left uncompleted but finished are adopted first, see ``_settle``).

        Raises:
            RuntimeError: a step is still running (the mux never does this).
        """
        self._check_slot(slot)
        self._settle()
        if slot >= self.rows:
            self._grow(slot + 1)
        view = self._committed.numpy_view(writable=True)
        view[slot] = 0.0 if state is None else state

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise SlotIndexError(f"{self.plan!r}: slot {slot} is outside 0..{self.num_slots - 1}")

    def _grow(self, rows: int) -> None:
        """A pool of at least ``rows`` rows (at least double, at most ``num_slots``), new rows zero;
        only between runs (``reset_slot``'s caller checked)."""
        assert self.row_var is not None and rows <= self.num_slots  # callers checked the slot
        new_rows = min(self.num_slots, max(rows, 2 * self.rows))
        old = self._committed.numpy_view()
        grown = np.zeros((new_rows, *old.shape[1:]), old.dtype)
        grown[: self.rows] = old
        self._committed = self._head = self.client.buffer_from_host(grown, self.device)
        self._host_pool = self._committed
        self.rows = new_rows

    async def settle(self) -> None:
        """Wait until every launch finished, then adopt them (``_settle``)."""
        with contextlib.suppress(Exception):
            await self._head.ready()
        self._settle()

    def _settle(self) -> None:
        """Adopt launches nobody completed (a mux exited while they ran) once they finished:
        their state stands, like a step whose waiter was cancelled mid-batch; a failed one is
        dropped. Only then may the pool be written in place.

        Raises:
            RuntimeError: a launch is still running.
        """
        self._stale = []  # launches nobody will complete: dropped, like failed ones
        head = self._head
        if head is self._committed:
            self._flight = []
            return
        if not head.is_ready():
            raise RuntimeError(f"{self.plan!r}: the slot pool is written while a step is in flight")
        self._flight = []
        if head.error is None:
            self._committed = head
        elif self.in_place:  # the failed chain wrote nothing: its memory holds the last good pool
            self._recover()
        else:
            self._head = self._committed

    def read_slot(self, slot: int) -> npt.NDArray[Any]:
        """A copy of ``slot``'s state after the last successful step (zeros for a row the pool
        does not hold yet)."""
        self._check_slot(slot)
        view = self._committed.numpy_view()
        if slot >= self.rows:
            return np.zeros(view.shape[1:], view.dtype)
        return np.array(view[slot])


class PooledStep:
    """The ``BatchedStep`` machinery of steps whose per-stream state is a ``DevicePool``.

    A subclass compiles and loads its plan, calls ``_attach_pool``, and adds ``check_state``;
    runs, pipelined launches, slot resets and reads all go through the pool.
    """

    _max_batch: int
    _num_slots: int
    _chunk_shape: tuple[int, ...]
    _pool: DevicePool

    def _state_array(self, value: object, what: str) -> npt.NDArray[np.float32]:
        """A caller's state (or part of one) as float32, for ``check_state``: a non-float array
        or a NaN/inf would reach every later step of the stream, so both are refused here."""
        arr = np.asarray(value)
        if arr.dtype.kind != "f":
            raise DTypeMismatchError(f"{self!r}: {what} must be float32, got {arr.dtype}")
        if not np.isfinite(arr).all():
            raise InvalidArgumentError(f"{self!r}: {what} must be finite (it holds NaN or inf)")
        return arr.astype(np.float32, copy=False)

    def _attach_pool(
        self,
        client: Client,
        plan: LoadedExecutable,
        device: Device,
        initial: npt.NDArray[np.float32],
        batch_var: str | None,
        *,
        max_batch: int,
        chunk_shape: tuple[int, ...],
        row_var: str | None = None,
        num_slots: int | None = None,
    ) -> None:
        self._max_batch = max_batch
        self._num_slots = int(initial.shape[0]) if num_slots is None else num_slots
        self._chunk_shape = chunk_shape
        self._pool = DevicePool(client, plan, device, initial, batch_var, row_var, self._num_slots)
        # one thread per kernel: the mux's event loop holds the other core, and a split kernel's
        # helper (spinning after its part) would take it from the loop
        loaded = getattr(getattr(plan, "executable", None), "_loaded", None)
        if loaded is not None:
            pin_threads(loaded, 1)

    @property
    def max_batch_size(self) -> int:
        return self._max_batch

    @property
    def num_slots(self) -> int:
        return self._num_slots

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self._chunk_shape

    @property
    def chunk_dtype(self) -> np.dtype[Any]:
        return np.dtype(np.float32)

    @property
    def pool(self) -> Buffer:
        """The slot pool on the device after the last successful run (``pool_rows`` rows); read
        it between runs (a pool updated in place is donated to the next run)."""
        return self._pool.pool

    @property
    def pool_rows(self) -> int:
        """Rows the pool holds now: ``num_slots``, or fewer for a plan whose pool grows on
        demand (a slot at or beyond it is reset, which grows the pool, before its first step)."""
        return self._pool.rows

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        """Step the streams in ``slots`` on ``chunks``; the new pool replaces the old only on success."""
        return await self._pool.run(chunks, slots)

    def launch(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> Launched:
        """Enqueue a run now; ``complete`` it in launch order (``BatchedStep`` pipelining)."""
        return self._pool.launch(chunks, slots)

    async def complete(self, launched: Launched) -> npt.NDArray[Any]:
        return await self._pool.complete(launched)

    async def settle(self) -> None:
        """Wait for launches nobody completed (a mux exited while they ran); ``StreamMux`` calls
        it when it starts, before it resets every slot."""
        await self._pool.settle()

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        """Zero ``slot``, or set it to a state from ``check_state``; only between runs (the mux's
        guarantee), when the current pool is ready and no command reads it."""
        self._pool.reset_slot(slot, state)

    def read_slot(self, slot: int) -> npt.NDArray[Any]:
        """A copy of ``slot``'s state (between runs): for tests and debugging."""
        return self._pool.read_slot(slot)
