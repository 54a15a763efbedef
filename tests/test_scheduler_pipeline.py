"""``Pipeline`` (``asyncjit.scheduler``): stages across devices, no host sync, structured failure."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import numpy as np
import pytest

from asyncjit import dtypes
from asyncjit.compiler._executable import ArgSpec
from asyncjit.devices import HostExecutable
from asyncjit.runtime import Buffer, Client
from asyncjit.scheduler import Pipeline, Stage, execute_stage

F32 = dtypes.float32


def plan(name: str, fn: Any) -> HostExecutable:
    return HostExecutable.build(name, fn, [ArgSpec("x", (4,), F32)], [ArgSpec("out", (4,), F32)])


def double(x: np.ndarray) -> Any:
    return x * 2


def add_one(x: np.ndarray) -> Any:
    return x + 1


def boom(x: np.ndarray) -> Any:
    raise ValueError("plan boom")


@pytest.fixture
def client() -> Iterator[Client]:
    c = Client("cpu:2", inline="never")
    yield c
    c.close()


def items(n: int) -> list[np.ndarray]:
    return [np.full(4, i - n // 2, np.float32) for i in range(n)]


@pytest.mark.anyio
async def test_two_devices_with_a_gate(client: Client) -> None:
    """Stage 1 on cpu:0, a gate that drops non-positive items, stage 2 on cpu:1; order is kept."""
    dev0, dev1 = client.devices()
    s1 = execute_stage("double", client.load(plan("double", double), dev0))
    s2 = execute_stage("add_one", client.load(plan("add_one", add_one), dev1))

    async def gate(buf: Buffer) -> Buffer | None:
        x = await buf.to_numpy()
        return buf if x[0] > 0 else None

    results: list[np.ndarray] = []

    async def sink(buf: Buffer) -> None:
        assert buf.device is dev1
        results.append(await buf.to_numpy())

    src = [client.buffer_from_host(x, dev0) for x in items(10)]
    pipe = Pipeline([s1, Stage("gate", gate), s2])
    stats = await pipe.run(src, sink)
    want = [x * 2 + 1 for x in items(10) if x[0] * 2 > 0]
    assert len(results) == len(want) and all(np.array_equal(a, b) for a, b in zip(results, want, strict=True))
    assert stats.fed == 10 and stats.delivered == len(want)
    assert [s.dropped for s in stats.stages] == [0, 10 - len(want), 0]
    assert "double -> gate -> add_one" in repr(pipe)


@pytest.mark.anyio
async def test_buffers_move_between_devices_without_host_sync(client: Client) -> None:
    """Stage 2 enqueues on cpu:1 while stage 1's output on cpu:0 is still being computed."""
    dev0, dev1 = client.devices()
    release = threading.Event()

    def held_double(x: np.ndarray) -> Any:
        assert release.wait(20)
        return x * 2

    s1 = execute_stage("held", client.load(plan("held", held_double), dev0))
    seen_pending: list[bool] = []
    exe2 = client.load(plan("add_one", add_one), dev1)

    async def s2(buf: Buffer) -> Buffer:
        seen_pending.append(not buf.is_ready())
        out = (await exe2.execute([buf]))[0]
        seen_pending.append(not out.is_ready())
        release.set()  # only now may stage 1's plan finish
        return out

    results: list[np.ndarray] = []

    async def sink(buf: Buffer) -> None:
        results.append(await buf.to_numpy())

    try:
        with anyio.fail_after(20):
            await Pipeline([s1, Stage("add_one", s2)]).run(
                [client.buffer_from_host(np.ones(4, np.float32), dev0)], sink
            )
    finally:
        release.set()
    assert seen_pending == [True, True]
    assert np.array_equal(results[0], np.full(4, 3, np.float32))


@pytest.mark.anyio
async def test_failing_stage_stops_pipeline_with_its_error_and_no_task_left(client: Client) -> None:
    """A stage raising stops an endless pipeline with that very error; every stage task has ended."""
    ended: list[str] = []

    async def endless() -> AsyncIterator[int]:
        i = 0
        try:
            while True:
                yield i
                i += 1
                await anyio.sleep(0)
        finally:
            ended.append("source")

    async def ok(x: int) -> int:
        try:
            await anyio.sleep(0)
            return x
        except BaseException:
            ended.append("ok")
            raise

    async def bad(x: int) -> int:
        if x == 20:
            raise KeyError("stage failed at 20")
        return x

    before = len(anyio.get_running_tasks())
    with pytest.raises(KeyError, match="stage failed at 20") as info:
        await Pipeline([Stage("ok", ok), Stage("bad", bad), Stage("ok2", ok)]).run(endless())
    assert "raised in pipeline stage 'bad'" in (info.value.__notes__ or [])
    assert len(anyio.get_running_tasks()) == before


@pytest.mark.anyio
async def test_poisoned_device_buffer_surfaces_in_the_sink(client: Client) -> None:
    """A plan failing on cpu:0 poisons its output; stage 2 on cpu:1 and the sink get the original error."""
    dev0, dev1 = client.devices()
    s1 = execute_stage("boom", client.load(plan("boom", boom), dev0))
    s2 = execute_stage("add_one", client.load(plan("add_one", add_one), dev1))

    async def sink(buf: Buffer) -> None:
        await buf.to_numpy()

    with pytest.raises(ValueError, match="plan boom"):
        await Pipeline([s1, s2]).run([client.buffer_from_host(np.ones(4, np.float32), dev0)], sink)


@pytest.mark.anyio
async def test_cancelling_the_pipeline_cancels_every_stage() -> None:
    """A pipeline cancelled from outside returns control with no stage task left."""

    async def slow(x: int) -> int:
        await anyio.sleep(10)
        return x

    before = len(anyio.get_running_tasks())
    with anyio.move_on_after(0.05) as scope:
        await Pipeline([Stage("slow", slow)]).run(range(100))
    assert scope.cancelled_caught
    assert len(anyio.get_running_tasks()) == before


def test_pipeline_needs_stages() -> None:
    """An empty pipeline is a ValueError; (name, fn) pairs are accepted as stages."""
    with pytest.raises(ValueError, match="at least one stage"):
        Pipeline([])

    async def f(x: int) -> int:
        return x

    assert Pipeline([("f", f)]).stages[0].name == "f"
