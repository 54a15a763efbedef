"""Dispatched partitions on devices: plugins chosen per device kind and per compile; the dispatch
runtime runs on the device actor's thread, in queue order with the plan's CPU kernels."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from asyncjit import Tensor, Var
from asyncjit.compiler import CompiledResult
from asyncjit.devices import compile_for_cpu, set_device_plugins
from asyncjit.plugins import Plugin
from asyncjit.runtime import Client

pytestmark = pytest.mark.anyio


class Recorder(Plugin):
    """Claims ``exp``; its runtime records the thread and the first input value of each call."""

    name = "recorder"
    ops = frozenset({"exp"})

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, float]] = []

    def compile(self, partitions: Sequence[Any]) -> CompiledResult:
        return CompiledResult(b"", [str(i) for i in range(len(partitions))])

    def load(self, bytecode: bytes) -> None:
        return None

    def invoke(self, handle: Any, entry: str, inputs: Any, outputs: Any, vars: Any) -> None:
        self.calls.append((threading.get_ident(), float(inputs[0].flat[0])))
        np.exp(inputs[0], out=outputs[0])


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("cpu") as c:
        yield c


def _program() -> tuple[list[Tensor], list[Tensor]]:
    t = Var("t", 1, 8)
    x = Tensor.placeholder((t, 4), name="x")
    return [((x * 0.5).exp() - 1.0) * 0.1], [x]


def test_plugins_per_device_kind_and_per_compile() -> None:
    plugin = Recorder()
    set_device_plugins("cpu", [plugin])
    try:
        assert compile_for_cpu(_program(), name="kind_default").dispatch
        assert not compile_for_cpu(_program(), name="kind_default", plugins=[]).dispatch
    finally:
        set_device_plugins("cpu", ())
    assert not compile_for_cpu(_program(), name="kind_default").dispatch


async def test_dispatch_runs_on_the_device_thread_in_queue_order(client: Client) -> None:
    plugin = Recorder()
    loaded = client.compile(_program(), plugins=[plugin])
    x = client.buffer_from_host(np.zeros((3, 4), np.float32))
    chain = []
    for _ in range(6):  # each step reads the previous step's buffer: queue order is data order
        (x,) = await loaded.execute([x], {"t": 3}, inline=False)
        chain.append(x)
    with anyio.fail_after(30):
        got = await chain[-1].to_numpy()
    want = np.zeros((3, 4), np.float32)
    seen = []
    for _ in range(6):
        seen.append(float(want.flat[0]) * 0.5)
        want = ((np.exp(want * 0.5) - 1.0) * 0.1).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose([v for _, v in plugin.calls], seen, rtol=1e-6)  # in queue order
    assert threading.get_ident() not in {t for t, _ in plugin.calls}  # the device thread ran them
