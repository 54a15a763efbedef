"""The execute fast paths: direct inline runs and batched completions of the worker.

Both paths skip work the general path does (no command or event inline; one publication per
batch of finished commands), so these tests pin the invariants they must keep: errors are values,
deleted inputs raise before any launcher call, the device is never left held, queue order and
poisoning hold inside a batch, memory and counters balance.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import pytest

from asyncjit import dtypes
from asyncjit.compiler._executable import ArgSpec
from asyncjit.devices import HostExecutable
from asyncjit.errors import BufferDeletedError
from asyncjit.runtime import Buffer, Client
from asyncjit.symbolic import Var

pytestmark = pytest.mark.anyio

T = Var("t", 1, 8)
F32 = dtypes.float32


def plan(name: str, fn: Any) -> HostExecutable:
    ins = [ArgSpec(f"x{i}", (T, 4), F32) for i in range(2)]
    return HostExecutable.build(name, fn, ins, [ArgSpec("out", (T, 4), F32)], [T])


def add(a: np.ndarray, b: np.ndarray) -> Any:
    return a + b


def boom(a: np.ndarray, b: np.ndarray) -> Any:
    raise ValueError("boom")


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("cpu:2") as c:
        yield c


def host(client: Client, value: float) -> Buffer:
    return client.buffer_from_host(np.full((3, 4), value, np.float32))


async def test_inline_failure_poisons_outputs_and_the_device_keeps_serving(client: Client) -> None:
    bad = client.load(plan("boom", boom))
    good = client.load(plan("add", add))
    x = host(client, 1.0)
    (y,) = await bad.execute([x, x], {"t": 3}, inline=True)
    assert y.is_ready() and isinstance(y.error, ValueError)
    with pytest.raises(ValueError, match="boom"):
        await y.ready()
    (z,) = await good.execute([y, x], {"t": 3}, inline=True)  # a poisoned input: forwarded
    with pytest.raises(ValueError, match="boom"):
        await z.ready()
    (w,) = await good.execute([x, x], {"t": 3}, inline=True)
    np.testing.assert_array_equal(await w.to_numpy(), np.full((3, 4), 2.0, np.float32))
    stats = client.device(0).statistics()
    assert stats.failed == 2 and stats.submitted == stats.completed == 3 and stats.in_flight == 0


async def test_inline_with_a_deleted_input_raises_and_releases_the_device(client: Client) -> None:
    ex = client.load(plan("add", add))
    x, live = host(client, 1.0), host(client, 2.0)
    x.delete()
    for _ in range(3):
        with pytest.raises(BufferDeletedError):
            await ex.execute([live, x], {"t": 3}, inline=True)
    assert live.statistics().pending_uses == 0  # the use taken of the live input was given back
    with anyio.fail_after(10):  # the exec lock was released: both paths still run
        (y,) = await ex.execute([live, live], {"t": 3}, inline=True)
        (z,) = await ex.execute([live, live], {"t": 3}, inline=False)
        await z.ready()
    assert y.is_ready()
    assert client.device(0).statistics().in_flight == 0


async def test_a_queued_chain_on_one_device_keeps_order_and_poison(client: Client) -> None:
    """Each command reads the previous one's output, unpublished in the worker's batch."""
    ex = client.load(plan("add", add))
    bad = client.load(plan("boom", boom))
    one = host(client, 1.0)
    y = host(client, 0.0)
    for _ in range(50):
        (y,) = await ex.execute([y, one], {"t": 3}, inline=False)
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await y.to_numpy(), np.full((3, 4), 50.0, np.float32))
    (p,) = await bad.execute([y, one], {"t": 3}, inline=False)
    for _ in range(5):
        (p,) = await ex.execute([p, one], {"t": 3}, inline=False)
    (h,) = await ex.execute([one, one], {"t": 3}, inline=False)
    with anyio.fail_after(10), pytest.raises(ValueError, match="boom"):
        await p.ready()
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await h.to_numpy(), np.full((3, 4), 2.0, np.float32))


async def test_memory_and_counters_balance_over_both_paths(client: Client) -> None:
    ex = client.load(plan("add", add))
    x = host(client, 1.0)
    space = client.device(0).default_memory_space
    before = space.memory_stats().bytes_in_use
    outs = []
    for i in range(40):
        outs += await ex.execute([x, x], {"t": 3}, inline=i % 2 == 0)
    with anyio.fail_after(10):
        for o in outs:
            await o.ready()
        while client.device(0).statistics().in_flight:
            await anyio.sleep(0.001)
    stats = client.device(0).statistics()
    assert stats.submitted == stats.completed == 40 and stats.failed == 0
    assert stats.inline >= 1
    del outs, o
    # Freed after every queued use finishes (invariant 8): a finished command can still be held for
    # a moment by the worker's unpublished completion batch or a pending loop wake-up, so wait for
    # the memory to come back rather than expecting it at the same instant.
    with anyio.fail_after(10):
        while space.memory_stats().bytes_in_use != before:
            gc.collect()
            await anyio.sleep(0.001)
    assert space.memory_stats().bytes_in_use == before
