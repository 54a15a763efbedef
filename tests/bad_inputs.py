"""What every row of the bad-input tables of ``test_bad_inputs.py`` acts on.

``Env`` is built once per test module (one compiled plan with a var ``t``, two clients, shared
buffers, and factories for wrappers, recurrent cells and the Silero VAD); ``Case`` is one row:
an id, a call on the ``Env``, the ``JitError`` subclass it must raise (``None``: the call is
valid and must succeed) and a fragment of the message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

import asyncjit
from asyncjit import Client, InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor, Var
from asyncjit.compiler import CpuExecutable, compile
from asyncjit.errors import (
    JitError,
)
from asyncjit.models.silero_vad import SileroBatchedStep, SileroVad
from asyncjit.runtime import Buffer, LoadedExecutable
from asyncjit.scheduler import HostBatchedStep

T = Var("t", 1, 8)


@attrs.frozen
class Model:
    gain: float = 2.0


class AffineJit(JitWrapper[Model]):
    """x[:t] * gain + bias, summed: one input pair, one var."""

    x = asyncjit.Input()
    bias = asyncjit.Input()
    t = asyncjit.VarSpec(1, 8)

    def build(self, model: Model, x: Tensor, bias: Tensor, t: Var) -> Tensor:
        return (x[:t] * model.gain + bias).sum(axis=0)


class StateJit(JitWrapper[Model]):
    """A recurrent cell with output ``[head(1) | h(4) | c(4)]``."""

    h = asyncjit.Input()
    c = asyncjit.Input()

    def build(self, model: Model, h: Tensor, c: Tensor) -> Tensor:
        head = h.sum(axis=0).reshape(1)
        return Tensor.cat([head, h * 0.5, c + 1.0], axis=0)

    def pack_state(self, state: LstmState) -> None:
        self.h_mut()[:] = state.h
        self.c_mut()[:] = state.c


class Env:
    """What the rows act on, built once for the module."""

    def __init__(self) -> None:
        x = Tensor.placeholder((T, 4), name="x")
        y = Tensor.placeholder((4,), name="y")
        self.exe: CpuExecutable = compile(x * 2.0 + y, [x, y], name="bad_inputs")
        self.client = Client("cpu")
        self.other = Client("cpu")
        self.loaded: LoadedExecutable = self.client.load(self.exe)
        self.x = np.ones((3, 4), np.float32)
        self.y = np.full(4, 0.5, np.float32)
        self.bx = self.client.buffer_from_host(self.x)
        self.by = self.client.buffer_from_host(self.y)
        self._vad: SileroVad | None = None
        self._slot_step: SileroBatchedStep | None = None

    def fresh(self, arr: Any, client: Client | None = None) -> Buffer:
        return (client or self.client).buffer_from_host(arr)

    def deleted(self, client: Client | None = None, arr: Any = None) -> Buffer:
        b = self.fresh(self.x if arr is None else arr, client)
        b.delete()
        return b

    def pair(self) -> list[Buffer]:
        """Fresh, donatable inputs: a row that donates must not consume the shared buffers."""
        S = asyncjit.HostBufferSemantics
        return [
            self.client.buffer_from_host(a.copy(), semantics=S.MUTABLE_ZERO_COPY) for a in (self.x, self.y)
        ]

    def donated(self) -> Buffer:
        b = self.fresh(self.x)
        self.loaded.execute_blocking([b, self.by], {"t": 3}, donate=[0])
        return b

    def closed_client(self) -> Client:
        c = Client("cpu")
        c.close()
        return c

    def wrapper(self) -> AffineJit:
        return AffineJit(Model())

    def prepared(self) -> AffineJit:
        return AffineJit(Model()).prepare(InputSpec.f32((8, 4)), InputSpec.f32((4,)))

    def host_step(self) -> HostBatchedStep:
        return HostBatchedStep(self.client, max_batch_size=4, num_slots=4)

    def vad(self) -> SileroVad:
        if self._vad is None:
            self._vad = SileroVad(16000)
        return self._vad

    def slot_step(self) -> SileroBatchedStep:
        if self._slot_step is None:
            self._slot_step = SileroBatchedStep(16000, max_streams=2, client=self.client)
        return self._slot_step

    def recurrent(self) -> JitRecurrent[StateJit]:
        j = StateJit(Model()).prepare(InputSpec.f32((4,)), InputSpec.f32((4,)))
        return JitRecurrent(j, LstmState.zeros(4), head_len=1)


@attrs.frozen
class Case:
    id: str
    call: Callable[[Env], object]
    error: type[JitError] | None
    match: str = ""
