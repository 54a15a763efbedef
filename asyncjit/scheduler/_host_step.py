"""``HostBatchedStep``: a ``BatchedStep`` from a numpy step function, run as a plan on a device.

``fn(chunks [b, *chunk_shape], states [b, *state_shape]) -> (out [b, *out_shape], new_states)``
is wrapped in a ``HostExecutable`` over ``(chunks, slots, pool) -> (out, new_pool)``, the same
signature as the Silero VAD slot plan, and executed on a real device queue with futures and
wake-ups. It is the reference implementation of the protocol (tests, benchmarks, custom host
ops), and ``run_unbatched`` steps the same function one stream at a time for comparison.

State lives in a ``DevicePool``: failure is atomic (the new pool is committed only when the run
succeeded, so a failed batch changes no slot), and ``launch``/``complete`` let the mux pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import dtypes
from ..compiler._executable import ArgSpec
from ..devices import HostExecutable
from ..errors import ShapeMismatchError
from ..runtime import Client, Device
from ..symbolic import Var
from ._device_pool import PooledStep

__all__ = ["HostBatchedStep", "StepFunction", "run_unbatched", "toy_step"]

StepFunction = Callable[[npt.NDArray[Any], npt.NDArray[Any]], tuple[npt.NDArray[Any], npt.NDArray[Any]]]


def toy_step(chunks: npt.NDArray[Any], states: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """A small recurrence for tests and benchmarks: ``s = tanh(0.5 s + mean(chunk) + w)``, out = sum(s).

    ``w`` (one weight per state element) makes every element differ; a chunk whose first value
    is exactly 666.0 raises ``ValueError``, to exercise failing batches.
    """
    if np.any(chunks[:, 0] == 666.0):
        raise ValueError("toy_step: poisoned chunk (first sample 666.0)")
    w = np.linspace(-0.5, 0.5, states.shape[-1], dtype=np.float32)
    new = np.tanh(states * np.float32(0.5) + chunks.mean(axis=-1, keepdims=True, dtype=np.float32) + w)
    return new.sum(axis=-1, dtype=np.float32), new.astype(np.float32)


def _slot_plan(
    fn: StepFunction, chunks: npt.NDArray[Any], slots: npt.NDArray[Any], pool: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    out, new_states = fn(chunks, pool[slots])
    new_pool = pool.copy()
    new_pool[slots] = new_states
    return out, new_pool


class HostBatchedStep(PooledStep):
    """A slot-pool ``BatchedStep`` whose plan body is ``fn`` in numpy, on ``device`` of ``client``.

    Args:
        fn: the batched step (see the module docstring); must accept any ``b`` in bounds.
        chunk_shape, state_shape, out_shape: per-stream shapes (float32).
        max_batch_size: the bound of the plan's batch var ``b``.
        num_slots: rows in the slot pool.
    """

    def __init__(
        self,
        client: Client,
        fn: StepFunction = toy_step,
        *,
        chunk_shape: Sequence[int] = (16,),
        state_shape: Sequence[int] = (4,),
        out_shape: Sequence[int] = (),
        max_batch_size: int = 64,
        num_slots: int = 256,
        device: Device | int | None = None,
        name: str = "host_step",
    ) -> None:
        f32 = dtypes.float32
        b = Var("b", 1, max_batch_size)
        self._chunk_shape = tuple(int(d) for d in chunk_shape)
        self._state_shape = tuple(int(d) for d in state_shape)
        pool_shape = (num_slots, *self._state_shape)
        exe = HostExecutable.build(
            name,
            functools.partial(_slot_plan, fn),
            [
                ArgSpec("chunks", (b, *self._chunk_shape), f32),
                ArgSpec("slots", (b,), dtypes.int32),
                ArgSpec("pool", pool_shape, f32),
            ],
            [ArgSpec("out", (b, *out_shape), f32), ArgSpec("new_pool", pool_shape, f32)],
            [b],
        )
        self.client = client
        self.plan = client.load(exe, device)
        self.device = self.plan.devices()[0]
        self._attach_pool(
            client,
            self.plan,
            self.device,
            np.zeros(pool_shape, np.float32),
            "b",
            max_batch=max_batch_size,
            chunk_shape=self._chunk_shape,
        )

    def __repr__(self) -> str:
        return (
            f"<HostBatchedStep {self.plan.plan} b<={self._max_batch} slots={self._num_slots} "
            f"on {self.device.kind}:{self.device.id}>"
        )

    def check_state(self, state: object) -> object:
        arr = np.asarray(state, dtype=np.float32)
        if arr.shape != self._state_shape:
            raise ShapeMismatchError(
                f"{self!r}: a slot state must have shape {self._state_shape}, got {arr.shape}"
            )
        return arr


def run_unbatched(
    fn: StepFunction,
    chunks: Sequence[npt.NDArray[Any]],
    state: npt.NDArray[Any],
) -> list[npt.NDArray[Any]]:
    """The reference: step one stream through ``chunks`` with ``b = 1``, in numpy on the host."""
    s = np.asarray(state, np.float32)[None]
    outs = []
    for c in chunks:
        out, s = fn(np.asarray(c, np.float32)[None], s)
        outs.append(np.asarray(out[0]))
    return outs
