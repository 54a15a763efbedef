"""Donation that aliases: ``compile(donate=...)`` plans an output over a donated input, and an
execution that donates it writes the output in place (same memory, no new block, no copy).

Checked: which plans alias and which are refused (typed), results equal the non-donating path
(queued, inline, ``CpuExecutable.run``, a serialized round trip), a donated buffer raises on use,
a donation is refused while another device's pending command reads the buffer, and a failed
in-place run leaves the donated data to ``Buffer.reclaim``.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from asyncjit import dtypes
from asyncjit.compiler import CpuExecutable, deserialize
from asyncjit.compiler import compile as compile_plan
from asyncjit.errors import (
    BufferDeletedError,
    DonatedBufferError,
    DonateIndexError,
    DonationError,
)
from asyncjit.runtime import Buffer, Client
from asyncjit.symbolic import Var
from asyncjit.tensor import Tensor
from asyncjit.testing import Gate, host_plan

pytestmark = pytest.mark.anyio

B = Var("b", 1, 8)
ROWS, WIDTH = 16, 4


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("cpu:2") as c:
        yield c


def slot_plan(donate: list[int]) -> CpuExecutable:
    """``(x [b, 4], slots [b], pool [16, 4]) -> (sum [b], pool with rows 2*row + x)``."""
    pool = Tensor.placeholder([ROWS, WIDTH], name="pool")
    slots = Tensor.placeholder([B], dtypes.int32, name="slots")
    x = Tensor.placeholder([B, WIDTH], name="x")
    rows = pool.gather(0, slots)
    new = pool.scatter(0, slots, rows * 2 + x)
    out = (rows * x).sum(axis=1)
    return compile_plan([out, new], [x, slots, pool], [B], name="slots", donate=donate, cache_dir="off")


def data(seed: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, WIDTH)).astype(np.float32)
    slots = rng.permutation(ROWS)[:3].astype(np.int32)
    return x, slots, rng.standard_normal((ROWS, WIDTH)).astype(np.float32)


def address(buf: Buffer) -> int:
    return int(np.asarray(buf, copy=False).ctypes.data)


def test_a_scatter_and_an_elementwise_loop_are_planned_in_place() -> None:
    assert slot_plan([2]).signature.aliases == ((1, 2),)
    assert slot_plan([]).signature.aliases == ()
    y = Tensor.placeholder([B, WIDTH], name="y")
    exe = compile_plan([(y * 2 + 1).exp()], [y], [B], donate=[0], cache_dir="off")
    assert exe.signature.aliases == ((0, 0),)
    # a reduction of y computed by an earlier kernel does not stop the loop that writes over y
    late = compile_plan([y.sum(axis=1, keepdims=True) * y], [y], [B], donate=[0], cache_dir="off")
    assert late.signature.aliases == ((0, 0),)


def test_a_donation_that_cannot_alias_is_refused_at_compile_time() -> None:
    y = Tensor.placeholder([B, WIDTH], name="y")
    with pytest.raises(DonationError, match="no output has its shape"):
        compile_plan([y.sum(axis=1)], [y], [B], donate=[0], cache_dir="off")
    # written by the first kernel, but the second still reads y: writing over y is not safe
    first = y + 1
    with pytest.raises(DonationError, match="still reads"):
        compile_plan([first, (y * first).sum(axis=1)], [y], [B], donate=[0], cache_dir="off")
    # a kernel that reads y at other indices than it writes (a transpose) cannot write over it
    sq = Tensor.placeholder([WIDTH, WIDTH], name="sq")
    with pytest.raises(DonationError):
        compile_plan([sq.permute(1, 0) + 1], [sq], donate=[0], cache_dir="off")
    for bad in ([1], [-1], [0, 0], ["0"]):
        with pytest.raises(DonateIndexError):
            compile_plan([y + 1], [y], [B], donate=bad, cache_dir="off")  # type: ignore[arg-type]


def test_the_plan_is_correct_without_donation() -> None:
    """A caller that passes two buffers (``run``, a bound call) gets the pool copied first."""
    x, slots, pool = data(0)
    want = slot_plan([]).run([x, slots, pool], {"b": 3})
    exe = slot_plan([2])
    got = exe.run([x, slots, pool], {"b": 3})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    again = deserialize(exe.serialize())
    assert again.signature.aliases == ((1, 2),)
    for a, b in zip(again.run([x, slots, pool], {"b": 3}), want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("inline", [True, False])
async def test_a_donated_input_becomes_the_output(client: Client, inline: bool) -> None:
    """Same memory, no new block for it, the same values as without donation, twice in a row;
    the donated buffer raises ``DonatedBufferError`` (a ``BufferDeletedError``) afterwards."""
    exe = slot_plan([2])
    loaded = client.load(exe)
    assert loaded.input_output_aliases == {2: 1}
    x, slots, pool = data(1)
    reference = slot_plan([]).run
    pool_buf = client.buffer_from_host(pool)
    before = address(pool_buf)
    space = client.devices()[0].default_memory_space
    x_buf, s_buf = client.buffer_from_host(x), client.buffer_from_host(slots)
    in_use = space.memory_stats().bytes_in_use
    out, new = await loaded.execute([x_buf, s_buf, pool_buf], {"b": 3}, donate=[2], inline=inline)
    await new.ready()
    grown = space.memory_stats().bytes_in_use - in_use
    assert new.aliased and address(new) == before
    assert grown < pool.nbytes  # only the [b] output was allocated
    want = reference([x, slots, pool], {"b": 3})
    np.testing.assert_array_equal(await new.to_numpy(), want[1])
    np.testing.assert_array_equal(await out.to_numpy(), want[0])
    assert pool_buf.is_deleted()
    with pytest.raises(DonatedBufferError, match="donated"):
        await pool_buf.to_numpy()
    with pytest.raises(BufferDeletedError):
        await loaded.execute([x_buf, s_buf, pool_buf], {"b": 3})
    out2, newer = await loaded.execute([x_buf, s_buf, new], {"b": 3}, donate=[2], inline=inline)
    want2 = reference([x, slots, want[1]], {"b": 3})
    np.testing.assert_array_equal(await newer.to_numpy(), want2[1])
    np.testing.assert_array_equal(await out2.to_numpy(), want2[0])
    assert address(newer) == before


async def test_without_donation_the_input_is_kept(client: Client) -> None:
    loaded = client.load(slot_plan([2]))
    x, slots, pool = data(2)
    pool_buf = client.buffer_from_host(pool)
    args = [client.buffer_from_host(x), client.buffer_from_host(slots), pool_buf]
    _, new = await loaded.execute(args, {"b": 3})
    assert not new.aliased and address(new) != address(pool_buf)
    np.testing.assert_array_equal(await pool_buf.to_numpy(), pool)
    np.testing.assert_array_equal(await new.to_numpy(), slot_plan([]).run([x, slots, pool], {"b": 3})[1])


async def test_a_buffer_another_device_still_reads_is_not_donated(client: Client) -> None:
    """A copy queued on device 1 reads the pool: donating it on device 0 would let the output
    overwrite what that copy has not read yet, so it is refused and nothing is consumed."""
    d0, d1 = client.devices()
    gate = Gate()
    held = client.load(host_plan("gated", gate, n_in=2, width=WIDTH), d1)
    blocker = client.buffer_from_host(np.ones((3, WIDTH), np.float32), d1)
    x, slots, pool = data(3)
    pool_buf = client.buffer_from_host(pool, d0)
    loaded = client.load(slot_plan([2]), d0)
    args = [client.buffer_from_host(x, d0), client.buffer_from_host(slots, d0), pool_buf]
    try:
        await held.execute([blocker, blocker], {"t": 3})  # device 1 is busy until the gate opens
        copy = pool_buf.copy_to_device(d1)  # queued behind it, holding a use of pool_buf
        assert not copy.is_ready()
        with pytest.raises(DonationError, match="still read"):
            await loaded.execute(args, {"b": 3}, donate=[2])
        assert not pool_buf.is_deleted()
    finally:
        gate.open()
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await copy.to_numpy(), pool)
    _, new = await loaded.execute(args, {"b": 3}, donate=[2])  # nothing else reads it now
    assert new.aliased and pool_buf.is_deleted()


async def test_a_reader_awaited_no_longer_counts_against_a_donation(client: Client) -> None:
    """A command's uses drop before its event fires: a task that awaited the copy reading the
    pool may donate the pool at once. Repeated, because the opposite order loses a race only
    now and then (the worker thread releasing after the event woke the task)."""
    d0, d1 = client.devices()
    x, slots, pool = data(4)
    loaded = client.load(slot_plan([2]), d0)
    xb, sb = client.buffer_from_host(x, d0), client.buffer_from_host(slots, d0)
    want = slot_plan([]).run([x, slots, pool], {"b": 3})[1]
    for _ in range(100):
        gate = Gate()
        held = client.load(host_plan("gated", gate, n_in=2, width=WIDTH), d1)
        blocker = client.buffer_from_host(np.ones((3, WIDTH), np.float32), d1)
        pool_buf = client.buffer_from_host(pool, d0)
        await held.execute([blocker, blocker], {"t": 3})
        copy = pool_buf.copy_to_device(d1)  # runs on device 1's worker thread, after the gate
        gate.open()
        with anyio.fail_after(10):
            await copy.ready()
        _, new = await loaded.execute([xb, sb, pool_buf], {"b": 3}, donate=[2])
        assert new.aliased and pool_buf.is_deleted()
        np.testing.assert_array_equal(await new.to_numpy(), want)
        np.testing.assert_array_equal(await copy.to_numpy(), pool)


async def test_a_run_that_never_ran_leaves_the_donated_data_to_reclaim(client: Client) -> None:
    """An execution whose input was poisoned does not run: its aliased output fails, and its
    memory, taken back with ``reclaim``, still holds the donated pool."""
    boom = client.load(host_plan("boom", _boom, n_in=2, width=WIDTH))
    one = client.buffer_from_host(np.ones((3, WIDTH), np.float32))
    (poisoned,) = await boom.execute([one, one], {"t": 3})
    loaded = client.load(slot_plan([2]))
    _, slots, pool = data(4)
    pool_buf = client.buffer_from_host(pool)
    args = [poisoned, client.buffer_from_host(slots), pool_buf]
    _, new = await loaded.execute(args, {"b": 3}, donate=[2])
    with pytest.raises(ValueError, match="boom"):
        await new.ready()
    assert new.aliased
    back = new.reclaim()
    assert new.is_deleted() and back.is_ready() and back.error is None
    np.testing.assert_array_equal(await back.to_numpy(), pool)
    with pytest.raises(DonationError):
        back.reclaim()  # it did not fail


def _boom(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    raise ValueError("boom")


async def test_replicated_executions_update_each_device_in_place(client: Client) -> None:
    """``execute_replicated(donate=...)``: every device writes its output over its own input."""
    loaded = client.load(slot_plan([2]), client.devices())
    per = []
    wants = []
    for k, dev in enumerate(client.devices()):
        x, slots, pool = data(10 + k)
        bufs = [client.buffer_from_host(a, dev) for a in (x, slots, pool)]
        per.append(bufs)
        wants.append(slot_plan([]).run([x, slots, pool], {"b": 3})[1])
    where = [address(bufs[2]) for bufs in per]
    outs = await loaded.execute_replicated(per, {"b": 3}, donate=[2])
    for (_, new), want, addr, bufs in zip(outs, wants, where, per, strict=True):
        assert new.aliased and address(new) == addr and bufs[2].is_deleted()
        np.testing.assert_array_equal(await new.to_numpy(), want)


@pytest.mark.parametrize("same_device", [True, False])
async def test_the_pending_output_of_a_copy_can_be_donated(client: Client, same_device: bool) -> None:
    """A copy still queued (its source not computed yet) writes the memory it was given, even
    when an execution queued behind it takes its output by donation: the device thread kept
    reading the ``Buffer``'s block at run time and died on the ``None`` donation left there
    (found by ``tests/runtime_chaos.py``). The execution reads the copied data (in place on the
    copy's device) and both devices keep serving."""
    d0, d1 = client.devices()
    gate = Gate()
    gated = client.load(host_plan("gate", gate, n_in=1, width=WIDTH), [d0, d1])
    x = np.arange(3 * WIDTH, dtype=np.float32).reshape(3, WIDTH)
    (held,) = await gated.execute([client.buffer_from_host(x, d0)], {"t": 3}, device=d0)
    copied = held.copy_to_device(d1)  # waits on d1's queue for d0's gated run
    double = Tensor.placeholder([3, WIDTH], name="x")
    doubling = client.load(
        compile_plan([double * 2], [double], name="dbl", donate=[0], cache_dir="off"), [d0, d1]
    )
    (out,) = await doubling.execute([copied], device=d1 if same_device else d0, donate=[0])
    assert copied.is_deleted() and not out.is_ready()
    gate.open()
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await out.to_numpy(), x * 2)
    assert out.aliased == same_device  # across devices the donated memory is not the output's space
    for dev in (d0, d1):  # each device thread is still alive
        (again,) = await doubling.execute([client.buffer_from_host(x, dev)], device=dev)
        with anyio.fail_after(10):
            np.testing.assert_array_equal(await again.to_numpy(), x * 2)
