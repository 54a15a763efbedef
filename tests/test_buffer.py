"""``Buffer`` and ``Client.buffer_from_host``: the four host-buffer semantics, views, copies, lifetime."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import numpy as np
import pytest

from asyncjit import dtypes
from asyncjit.compiler._executable import ArgSpec
from asyncjit.devices import HostExecutable
from asyncjit.errors import BufferDeletedError, ClosedError, DeviceError, WouldBlock
from asyncjit.runtime import Buffer, Client, HostBufferSemantics, MemoryKind, default_client, host_array

S = HostBufferSemantics


# Move to tests/conftest.py once the lead adopts it: every async test on both backends.
@pytest.fixture
def client() -> Iterator[Client]:
    with Client("cpu:2") as c:
        yield c


def gate_plan(gate: threading.Event) -> HostExecutable:
    """A plan that blocks its device until ``gate`` is set: makes "not ready yet" deterministic."""

    def fn(a: np.ndarray) -> np.ndarray:
        assert gate.wait(10)
        return a

    spec = ArgSpec("a", (4,), dtypes.float32)
    return HostExecutable.build("gate", fn, [spec], [ArgSpec("out", (4,), dtypes.float32)])


class TestHostBufferSemantics:
    def test_immutable_only_during_call_copies_now(self, client: Client) -> None:
        """The array may be changed right after the call; the buffer keeps the old values."""
        a = np.arange(4, dtype=np.float32)
        done: list[bool] = []
        buf = client.buffer_from_host(a, on_done_with_host_buffer=lambda: done.append(True))
        a[:] = -1
        assert buf.is_ready() and done == [True] and not buf.aliases_host
        np.testing.assert_array_equal(buf.to_numpy_blocking(), np.arange(4, dtype=np.float32))

    def test_immutable_until_transfer_completes_copies_later(self, client: Client) -> None:
        """The copy runs on the device queue; ``on_done_with_host_buffer`` says when it is over."""
        gate = threading.Event()
        ex = client.load(gate_plan(gate))
        blocker = ex.execute_nowait([client.buffer_from_host(np.zeros(4, np.float32))], inline=False)
        a = np.arange(4, dtype=np.float32)
        done = threading.Event()
        buf = client.buffer_from_host(
            a, semantics=S.IMMUTABLE_UNTIL_TRANSFER_COMPLETES, on_done_with_host_buffer=done.set
        )
        assert not buf.is_ready() and not done.is_set()
        gate.set()
        np.testing.assert_array_equal(buf.to_numpy_blocking(10), a)
        assert done.wait(10)
        blocker[0].block_until_ready(10)

    def test_immutable_zero_copy_aliases_aligned_arrays(self, client: Client) -> None:
        """No copy for a C-contiguous 64-byte aligned array: the buffer reads the array's memory."""
        a = host_array((4,), np.float32)
        buf = client.buffer_from_host(a, semantics=S.IMMUTABLE_ZERO_COPY)
        assert buf.aliases_host and buf.is_ready()
        view = buf.numpy_view()
        assert np.shares_memory(view, a) and not view.flags.writeable
        assert client.device(0).memory_stats().bytes_external == 16

    def test_zero_copy_falls_back_to_a_copy(self, client: Client) -> None:
        """Unaligned, strided or read-only (for mutable) arrays are copied, as PJRT does."""
        base = host_array((9,), np.float32)
        for arr, sem in [
            (base[1:5], S.IMMUTABLE_ZERO_COPY),
            (base[::2], S.IMMUTABLE_ZERO_COPY),
            (np.frombuffer(bytes(64), np.float32), S.MUTABLE_ZERO_COPY),
        ]:
            buf = client.buffer_from_host(arr, semantics=sem)
            assert not buf.aliases_host
            np.testing.assert_array_equal(buf.to_numpy_blocking(), arr)

    def test_mutable_zero_copy_view_is_the_array(self, client: Client) -> None:
        """The runtime may write it and so may you, between uses."""
        a = host_array((4,), np.float32)
        released = threading.Event()
        buf = client.buffer_from_host(a, semantics=S.MUTABLE_ZERO_COPY, on_done_with_host_buffer=released.set)
        assert buf.numpy_view() is a
        a[:] = 7
        np.testing.assert_array_equal(buf.to_numpy_blocking(), np.full(4, 7, np.float32))
        buf.delete()
        del buf
        assert released.wait(10)

    def test_dtypes(self, client: Client) -> None:
        """float64 stays float64; complex is refused; ``dtype=`` converts, as a copy."""
        assert client.buffer_from_host(np.zeros(3)).dtype.name == "float64"
        with pytest.raises(TypeError, match="complex64"):
            client.buffer_from_host(np.zeros(3, np.complex64))
        src = np.zeros(3)
        buf = client.buffer_from_host(src, dtype="float32", semantics=S.MUTABLE_ZERO_COPY)
        src[:] = 5  # the converted copy, not ``src``, is what the buffer may alias
        assert buf.dtype == dtypes.float32
        np.testing.assert_array_equal(buf.to_numpy_blocking(), np.zeros(3, np.float32))

    def test_closed_client_refuses_transfers(self) -> None:
        """A closed client raises ``ClosedError``."""
        c = Client("cpu")
        c.close()
        with pytest.raises(ClosedError):
            c.buffer_from_host(np.zeros(3, np.float32))


class TestAccess:
    @pytest.mark.anyio
    async def test_ready_to_numpy_and_views(self, client: Client) -> None:
        """Awaiting, copying out, and zero-copy views of computed buffers."""
        gate = threading.Event()
        ex = client.load(gate_plan(gate))
        (y,) = await ex.execute([client.buffer_from_host(np.arange(4, dtype=np.float32))])
        with pytest.raises(WouldBlock):
            y.numpy_view()
        with pytest.raises(TimeoutError):
            y.block_until_ready(0.01)
        gate.set()
        with anyio.fail_after(10):
            out = await y.to_numpy()
        out[:] = 0  # a copy of our own
        view = y.numpy_view()
        np.testing.assert_array_equal(view, np.arange(4, dtype=np.float32))
        y.delete()
        np.testing.assert_array_equal(view, np.arange(4, dtype=np.float32))  # exported: not reused
        space = client.device(0).default_memory_space
        assert all(b.addr != view.ctypes.data for blocks in space._free.values() for b in blocks)

    @pytest.mark.anyio
    async def test_copy_to_host_async(self, client: Client) -> None:
        """The device-to-host copy can start early, on the device queue."""
        buf = client.buffer_from_host(np.arange(4, dtype=np.float32))
        buf.copy_to_host_async()
        buf.copy_to_host_async()  # idempotent
        with anyio.fail_after(10):
            np.testing.assert_array_equal(await buf.to_numpy(), np.arange(4, dtype=np.float32))
            np.testing.assert_array_equal(await buf.to_numpy(), np.arange(4, dtype=np.float32))

    @pytest.mark.anyio
    async def test_copies_between_devices_and_memory_spaces(self, client: Client) -> None:
        """``copy_to_device`` and ``copy_to_memory_space`` return at once and wait on the source."""
        gate = threading.Event()
        ex = client.load(gate_plan(gate))
        (y,) = await ex.execute([client.buffer_from_host(np.arange(4, dtype=np.float32))])
        z = y.copy_to_device(client.device(1))
        pinned = z.copy_to_memory_space(client.device(1).memory_space(MemoryKind.PINNED_HOST))
        assert not z.is_ready() and z.device is client.device(1)
        assert pinned.memory_space.kind is MemoryKind.PINNED_HOST
        gate.set()
        with anyio.fail_after(10):
            np.testing.assert_array_equal(await pinned.to_numpy(), np.arange(4, dtype=np.float32))

    @pytest.mark.anyio
    async def test_deleted_buffer_refuses_every_use(self, client: Client) -> None:
        """After ``delete`` every access raises ``BufferDeletedError``."""
        buf = client.buffer_from_host(np.zeros(4, np.float32))
        buf.delete()
        for call in (buf.numpy_view, buf.block_until_ready, buf.to_numpy_blocking, buf.copy_to_host_async):
            with pytest.raises(BufferDeletedError):
                call()
        with pytest.raises(BufferDeletedError):
            await buf.to_numpy()
        with pytest.raises(BufferDeletedError):
            buf.copy_to_device(client.device(1))
        assert "deleted" in repr(buf) and buf.statistics().deleted

    def test_garbage_collected_buffers_return_their_memory(self, client: Client) -> None:
        """Dropping the last reference frees the block (no ``delete`` needed)."""
        space = client.device(0).default_memory_space
        before = space.memory_stats().bytes_in_use
        buf = client.buffer_from_host(np.zeros(100, np.float32))
        assert space.memory_stats().bytes_in_use > before
        del buf
        assert space.memory_stats().bytes_in_use == before

    def test_writable_views(self, client: Client) -> None:
        """``writable=True`` writes into owned memory; immutable host arrays refuse."""
        buf = client.buffer_from_host(np.zeros(4, np.float32))
        buf.numpy_view(writable=True)[:] = 3
        np.testing.assert_array_equal(buf.to_numpy_blocking(), np.full(4, 3, np.float32))
        frozen = client.buffer_from_host(host_array(4, np.float32), semantics=S.IMMUTABLE_ZERO_COPY)
        with pytest.raises(DeviceError, match="immutable"):
            frozen.numpy_view(writable=True)

    def test_default_client_is_shared(self) -> None:
        """``default_client()`` is created once and replaced only after being closed."""
        c = default_client()
        assert default_client() is c and not c.closed

    def test_description(self, client: Client) -> None:
        """Shape, dtype, sizes and placement."""
        buf = client.buffer_from_host(np.zeros((2, 3), np.int32), client.device(1))
        assert (buf.shape, buf.ndim, buf.size, buf.nbytes) == ((2, 3), 2, 6, 24)
        assert buf.device is client.device(1) and buf.memory_space.kind is MemoryKind.DEVICE
        assert isinstance(buf, Buffer) and "int32[2, 3]" in repr(buf) and buf.client is client
        assert buf.id != client.buffer_from_host(np.zeros(1, np.int32)).id
