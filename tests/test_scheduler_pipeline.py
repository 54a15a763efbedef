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


@pytest.mark.anyio
async def test_stages_hand_over_on_device_queues_and_the_host_never_waits(client: Client) -> None:
    """Stage 2's device receives stage 1's output on its own queue (a ``d2d`` after a device-side
    wait for cpu:0), queued while stage 1 is still held; no host thread blocks on an event."""
    from asyncjit.profiler import trace
    from asyncjit.testing import Gate, host_plan, host_waits

    dev0, dev1 = client.devices()
    gate = Gate()
    s1 = execute_stage("held", client.load(host_plan("held", gate, n_in=1), dev0), vars={"t": 2})
    s2 = execute_stage("double", client.load(host_plan("double", double, n_in=1), dev1), vars={"t": 2})
    results: list[np.ndarray] = []

    async def sink(buf: Buffer) -> None:
        results.append(await buf.to_numpy())

    feed = [client.buffer_from_host(np.full((2, 4), i, np.float32), dev0) for i in range(3)]
    with trace() as tr, host_waits() as waits:
        async with anyio.create_task_group() as tg:
            tg.start_soon(Pipeline([s1, s2]).run, feed, sink)
            with anyio.fail_after(20):
                while dev1.statistics().in_flight < 2:  # the receive and the execute, queued
                    await anyio.sleep(0.001)
            assert not results and not gate._event.is_set()
            gate.open()
    assert waits == []
    assert [r[0, 0] for r in results] == [0.0, 2.0, 4.0]
    spans = [e for e in tr.events if e.get("ph") == "X" and e["args"].get("device") == str(dev1.id)]
    copies = [e for e in spans if e["name"] == "d2d"]
    held = [
        e for e in tr.events if e.get("ph") == "X" and e["name"] == "execute" and e["args"]["device"] == "0"
    ]
    assert len(copies) == 3 and len(held) == 3
    for copy, done in zip(copies, held, strict=True):  # each receive ran once its item's event fired
        assert copy["ts"] >= done["ts"] + done["dur"] - 1
    # waits for cpu:0's outputs, if the receive got there first, are spans on cpu:1's queue only
    queue_waits = [e for e in tr.events if e.get("ph") == "X" and e["name"].startswith("wait for")]
    assert all(e["name"] == "wait for cpu:0" and e["args"]["device"] == "1" for e in queue_waits)
