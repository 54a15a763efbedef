"""``BatchedStep``: the contract between ``StreamMux`` and a recurrent plan that serves many streams.

A batched step owns a *slot pool*: ``num_slots`` rows of per-stream state that stay on the device.
One ``run`` steps ``b`` streams at once: the plan gathers their rows by slot index, steps, and
scatters the new rows back inside the compiled plan (an index input), so no stream's state is
copied through Python. The Silero VAD plan (``build_step_slots``) and ``HostBatchedStep`` both
have this shape: ``(chunks [b, ...], slots [b], pool) -> (out [b, ...], new_pool)``.

What the mux guarantees to an implementation, so that it can stay simple:

* one thread, no overlap: every method is called on the event loop's thread, one ``run`` at a
  time (by the service task), and ``reset_slot`` never while a ``run`` is in progress (by the
  service task, or by the task that opens or closes a stream), so it may write the pool in place;
* within one ``run`` the slots are distinct, ``1 <= b <= max_batch_size``, and every slot belongs
  to an open stream; a slot is reset (to zeros, or to a stream's initial state) before reuse;
* ``chunks`` and ``slots`` are the mux's reusable arrays: read them during ``run``, do not keep them.

What the mux expects back:

* ``run`` returns ``[b, ...]`` outputs in the order of ``slots``; row ``i`` goes to stream ``i``;
* a ``run`` that raises changes no slot (the error fails that batch's requests, the mux keeps
  serving, and a later step of those streams continues from their previous state).

**Optional pipelining.** A step may also offer ``launch(chunks, slots) -> handle`` (synchronous:
enqueue the step on the device, copying the inputs) and ``async complete(handle) -> out``. The
mux then keeps up to ``pipeline_depth`` launches in flight, calls ``complete`` in launch order,
and calls ``reset_slot`` only when nothing is in flight. A launch may read a pool that earlier
launches have not finished writing (the device queue is in order); a failed launch must still
change no slot and fail only its own batch (``SileroBatchedStep`` re-runs a launch that read the
output of a failed one). ``run`` stays required (``complete(launch(...))``). An optional
``async settle()`` waits for launches left uncompleted by a mux that exited; a mux calls it when
it starts, then resets every slot the pool holds (a step may serve one mux after another).

**Optional growing pool.** A step may expose ``pool_rows``, the rows its pool holds now (fewer
than ``num_slots``: a step whose runs copy the whole pool should hold only the rows in use). The
mux hands out the lowest free slots, and for a slot at or beyond ``pool_rows`` it calls
``reset_slot`` (between runs) before the slot's first step, which lets the step grow the pool
(``DevicePool`` does).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["BatchedStep"]


@runtime_checkable
class BatchedStep(Protocol):
    """One recurrent plan serving many streams; per-stream state lives in a device-side slot pool."""

    @property
    def max_batch_size(self) -> int:
        """The upper bound of the plan's batch var: the most streams one ``run`` may step."""
        ...

    @property
    def num_slots(self) -> int:
        """Rows in the slot pool (a mux's ``max_streams`` must not exceed it)."""
        ...

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """The per-stream input of one step (512 samples for Silero VAD at 16 kHz)."""
        ...

    @property
    def chunk_dtype(self) -> np.dtype[Any]:
        """The dtype of a chunk; the mux converts within a dtype kind (float64 -> float32)."""
        ...

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        """Step the ``b = len(slots)`` streams whose state is in ``slots`` once; return ``[b, ...]``.

        Returns only when the outputs are on the host (one loop wake-up for the whole batch).

        Raises:
            Exception: the plan's original error; no slot may have changed.
        """
        ...

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        """Initialise ``slot`` to zeros (``state=None``) or to ``state`` as returned by ``check_state``."""
        ...

    def check_state(self, state: object) -> object:
        """Validate (and convert) a stream's initial state when the stream is opened.

        Raises:
            ValueError: the state has the wrong shape or dtype for a slot (a ``ShapeMismatchError``).
        """
        ...
