"""``MemorySpace``: alignment, size classes, reuse of freed blocks, accounting."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncjit.runtime import ALIGNMENT, Client, MemoryKind, MemorySpace, host_array
from asyncjit.runtime._memory import size_class


@pytest.fixture
def space() -> Iterator[MemorySpace]:
    with Client("cpu") as c:
        yield c.device(0).default_memory_space


@given(st.integers(0, 1 << 30))
def test_size_class_covers_request_with_bounded_waste(n: int) -> None:
    """Classes are 64-byte multiples, at least the request, at most 25% (or 63 bytes) above it."""
    c = size_class(n)
    assert c >= max(n, ALIGNMENT) and c % ALIGNMENT == 0
    assert c - max(n, ALIGNMENT) < max(ALIGNMENT, n // 4 + 1)


def test_allocations_are_aligned_ints(space: MemorySpace) -> None:
    """Addresses are Python ints, 64-byte aligned, and back the block's array."""
    for n in (1, 63, 64, 1000, 5000, 1 << 20):
        b = space.allocate(n)
        assert type(b.addr) is int and b.addr % ALIGNMENT == 0
        assert b.array.ctypes.data == b.addr and b.size >= n
        space.release(b)


def test_freed_blocks_are_reused_by_size_class(space: MemorySpace) -> None:
    """A request of the same class gets the freed block back; accounting follows."""
    a = space.allocate(1000)
    addr = a.addr
    space.release(a)
    stats = space.memory_stats()
    assert stats.bytes_in_use == 0 and stats.bytes_cached == a.size == stats.bytes_reserved
    b = space.allocate(1000 - 10)
    assert b.addr == addr and space.memory_stats().num_reuses == 1
    c = space.allocate(1000)
    assert c.addr != addr
    stats = space.memory_stats()
    assert stats.bytes_in_use == stats.peak_bytes_in_use == 2 * a.size and stats.blocks_in_use == 2
    space.release(b)
    space.release(c)
    assert space.trim() == 2 * a.size and space.memory_stats().bytes_reserved == 0


def test_exported_blocks_are_not_reused(space: MemorySpace) -> None:
    """A block whose memory a numpy view may still show is dropped, not recycled."""
    a = space.allocate(256)
    a.exported = True
    space.release(a)
    assert space.memory_stats().bytes_cached == 0
    b = space.allocate(256)
    assert b is not a and space.memory_stats().num_reuses == 0


def test_external_blocks_are_accounted_apart(space: MemorySpace) -> None:
    """Zero-copy host arrays count as external bytes, never enter the free lists."""
    arr = host_array((16,), np.float32)
    b = space.wrap(arr)
    assert b.addr == arr.ctypes.data and space.memory_stats().bytes_external == 64
    space.release(b)
    stats = space.memory_stats()
    assert stats.bytes_external == 0 and stats.bytes_cached == 0


def test_host_array_is_aligned_and_zeroed() -> None:
    """``host_array`` makes arrays that zero-copy semantics can alias."""
    for shape in ((3,), (5, 7), 11):
        a = host_array(shape, np.int32)
        assert a.ctypes.data % ALIGNMENT == 0 and a.flags.c_contiguous and not a.any()


def test_each_device_has_both_memory_kinds() -> None:
    """``device``, ``pinned_host`` and ``unpinned_host`` spaces per device, listed by the client."""
    with Client("cpu:2") as c:
        spaces = c.memory_spaces()
        assert len(spaces) == 2 * len(MemoryKind) == 6
        assert {s.kind for s in spaces} == set(MemoryKind)
        d = c.device(1)
        pinned = d.memory_space("pinned_host")
        assert pinned.device is d and "pinned_host" in repr(pinned)
        assert d.memory_stats() == d.default_memory_space.memory_stats()


def test_shapes_too_large_to_plan_are_sized_per_run() -> None:
    """Vars bounded by 2^31 and 2^33: the buffers' capacity at the bounds (2^64 elements) is not
    planned (in 64-bit integers it wrapped to 0, and a 64x64 run wrote past a 128-byte arena);
    they are sized per run from the var values, like buffers over unbounded vars, and every run
    is right."""
    from asyncjit import Tensor, Var
    from asyncjit.compiler import compile
    from asyncjit.compiler._executable import ArgSpec
    from asyncjit.dtypes import float32
    from asyncjit.symbolic import MAX_PLANNED_ELEMENTS, is_planned

    a, b = Var("a", 1, 2**31), Var("b", 1, 2**33)
    spec = ArgSpec("y", (a, b), float32)
    assert spec.capacity == 2**64 * 4 and not spec.bounded and not is_planned((a, b))
    assert is_planned((Var("c", 1, MAX_PLANNED_ELEMENTS),)) and is_planned((0, 2**50))
    x = Tensor.placeholder((a, b), np.float32, "x")
    z = x.cumsum(1)  # its own kernel: an intermediate buffer, then read by two more
    y = z.exp() + z.cumsum(0)
    exe = compile([y], [x])
    assert exe.arena_bytes < 1 << 20
    for shape in [(64, 64), (3, 1000), (1, 1)]:
        v = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        want = np.exp(np.cumsum(v, 1)) + np.cumsum(np.cumsum(v, 1), 0)
        np.testing.assert_allclose(exe.run([v])[0], want, rtol=1e-4, atol=1e-4)


def test_a_static_dim_over_2_62_is_refused() -> None:
    """Generated code indexes with 64-bit integers: an empty tensor of dims 0 and 2^70 would
    wrap its strides, so the graph refuses the dim when the node is made."""
    from asyncjit import Tensor
    from asyncjit.errors import TensorError

    x = Tensor.placeholder((0, 4), np.float32, "x")
    with pytest.raises(TensorError, match="larger than 2\\^62"):
        x.reshape(0, 2**70)


def test_a_plugin_never_claims_a_buffer_sized_per_run() -> None:
    """A dispatch plugin's buffers are views into the arena planned at the bounds: an op over a
    shape sized per run (here bounded, but over 2^48 elements at the bounds) stays on the CPU
    compiler. (Claimed, its views pointed at the arena's start: wrong values, then a crash.)"""
    import sys
    from pathlib import Path

    from asyncjit import Tensor, Var
    from asyncjit.compiler import compile

    sys.path.insert(0, str(Path(__file__).parent))
    from test_partition import NumpyDispatch

    a, b = Var("a", 1, 2**20), Var("b", 1, 2**30)
    x = Tensor.placeholder((a, b), np.float32, "x")
    z = x.cumsum(1).relu().cumsum(0)
    plugin = NumpyDispatch(ops=["relu"])
    exe = compile([z], [x], plugins=[plugin])
    assert not plugin.programs  # nothing claimed
    v = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(
        exe.run([v])[0], np.cumsum(np.maximum(np.cumsum(v, 1), 0), 0), rtol=1e-4, atol=1e-3
    )


def test_an_unmappable_pinned_output_is_an_out_of_memory_error() -> None:
    """An output in ``pinned_host`` memory too large to map: a typed ``OutOfMemoryError``, and
    the space's counters say nothing was allocated."""
    from asyncjit import Tensor, Var
    from asyncjit.compiler import compile
    from asyncjit.errors import OutOfMemoryError

    n = Var("n", 1, 2**61)
    x = Tensor.placeholder((1,), np.float32, "x")
    exe = compile([x.expand(n) + 1.0], [x])
    client = Client("cpu")
    loaded = client.load(exe, output_memory_kinds={0: "pinned_host"})
    space = client.devices()[0].memory_space("pinned_host")
    before = space.memory_stats().bytes_in_use
    for size in (2**50, 2**61):  # 4 PiB (mmap refuses), 8 EiB (more than a ssize_t)
        with pytest.raises(OutOfMemoryError):
            loaded.execute_blocking([client.buffer_from_host(np.ones(1, np.float32))], {"n": size})
    assert space.memory_stats().bytes_in_use == before
