"""Memory kinds: ``device``, ``pinned_host`` (mlock, or a logged fallback), ``unpinned_host``;
plan outputs placed in a host space; per-space accounting of buffers and bytes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import asyncjit as aj
from asyncjit import Client, Tensor
from asyncjit.compiler import compile as compile_graph
from asyncjit.errors import InvalidArgumentError
from asyncjit.runtime import MemoryKind, _memory
from asyncjit.testing import capture_events


@pytest.fixture
def client() -> Iterator[Client]:
    c = Client("cpu:2")
    yield c
    c.close()


def test_three_kinds_per_device(client: Client) -> None:
    d = client.device(1)
    assert [s.kind for s in d.memory_spaces()] == list(MemoryKind)
    assert {s.kind.value for s in d.memory_spaces()} == {"device", "pinned_host", "unpinned_host"}
    assert d.memory_space("unpinned_host").device is d


def test_pinned_host_locks_its_pages(client: Client) -> None:
    space = client.device(0).memory_space("pinned_host")
    x = np.arange(16384, dtype=np.float32)  # 64 KiB: within the smallest usual RLIMIT_MEMLOCK
    buf = client.buffer_from_host(x, memory_space=space)
    stats = space.memory_stats()
    assert stats.bytes_in_use == 65536 and stats.blocks_in_use == 1
    if space.pin_error is None:
        assert stats.bytes_pinned == 65536
        assert buf._block is not None and buf._block.addr % 4096 == 0  # its own pages
    np.testing.assert_array_equal(np.asarray(buf), x)
    buf.delete()
    assert space.memory_stats().bytes_in_use == 0
    space.trim()
    assert space.memory_stats().bytes_pinned == 0


def test_pinning_refused_falls_back_with_a_logged_reason(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refuse(addr: int, size: int) -> str:
        calls.append(size)
        return f"mlock of {size} bytes failed: Cannot allocate memory (RLIMIT_MEMLOCK 65536 bytes)"

    monkeypatch.setattr(_memory, "_mlock", refuse)
    space = client.device(1).memory_space("pinned_host")
    with capture_events() as events:
        a = client.buffer_from_host(np.ones(1024, np.float32), memory_space=space)
        b = client.buffer_from_host(np.ones(4096, np.float32), memory_space=space)
    failed = [e for e in events if e["event"] == "memory.pin_failed"]
    assert (
        len(failed) == 1 and "RLIMIT_MEMLOCK" in failed[0]["reason"] and failed[0]["space"] == "1:pinned_host"
    )
    assert len(calls) == 1  # asked once; later blocks are plain pages
    assert space.pin_error is not None and space.memory_stats().bytes_pinned == 0
    assert np.asarray(a).sum() == 1024 and np.asarray(b).sum() == 4096


@pytest.mark.anyio
async def test_a_plan_places_chosen_outputs_in_host_spaces(client: Client) -> None:
    x = Tensor.placeholder((4, 4), aj.float32)
    exe = compile_graph([x + 1.0, x * 2.0, x - 1.0], [x])
    dev = client.device(1)
    loaded = client.load(exe, dev, output_memory_kinds={1: "pinned_host", 2: MemoryKind.UNPINNED_HOST})
    assert loaded.output_memory_kinds == (MemoryKind.DEVICE, MemoryKind.PINNED_HOST, MemoryKind.UNPINNED_HOST)
    arr = np.arange(16, dtype=np.float32).reshape(4, 4)
    for inline in (True, False):
        a, b, c = await loaded.execute([client.buffer_from_host(arr, dev)], inline=inline)
        assert [o.memory_space.kind for o in (a, b, c)] == list(loaded.output_memory_kinds)
        assert all(o.device is dev for o in (a, b, c))
        np.testing.assert_array_equal(await b.to_numpy(), arr * 2)
        np.testing.assert_array_equal(await c.to_numpy(), arr - 1)
    assert dev.memory_space("pinned_host").memory_stats().blocks_in_use >= 1
    plain = client.load(exe, dev)
    assert plain.output_memory_kinds == (MemoryKind.DEVICE,) * 3


def test_bad_output_memory_kinds(client: Client) -> None:
    x = Tensor.placeholder((2,), aj.float32)
    exe = compile_graph([x + 1.0], [x])
    with pytest.raises(InvalidArgumentError, match="unknown memory kind 'gpu'"):
        client.load(exe, output_memory_kinds={0: "gpu"})
    with pytest.raises(InvalidArgumentError, match="names output 3"):
        client.load(exe, output_memory_kinds={3: "pinned_host"})


def test_copies_between_memory_spaces(client: Client) -> None:
    x = np.arange(6, dtype=np.int32)
    buf = client.buffer_from_host(x, client.device(0))
    for kind in MemoryKind:
        moved = buf.copy_to_memory_space(client.device(1).memory_space(kind))
        assert moved.memory_space.kind is kind
        np.testing.assert_array_equal(np.asarray(moved), x)
