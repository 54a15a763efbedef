"""Shardings, ``ShardedBuffer``, ``device_put``, replicated and sharded execution, sharded ``jit``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import asyncjit as aj
from asyncjit import Client, ShardedBuffer, Sharding, Tensor, jit
from asyncjit.compiler import compile as compile_graph
from asyncjit.errors import (
    ArgumentTypeError,
    BufferDeletedError,
    DeviceMismatchError,
    InvalidArgumentError,
    ShardingError,
)
from asyncjit.graph import as_node
from asyncjit.passes import split_axes
from asyncjit.profiler import trace
from asyncjit.runtime import LoadedExecutable
from asyncjit.symbolic import Var
from asyncjit.testing import Gate, host_plan, host_waits

B = Var("b", 1, 8)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client("cpu:2")
    yield c
    c.close()


def _scale(client: Client) -> LoadedExecutable:
    x = Tensor.placeholder((B, 3), aj.float32)
    return client.load(compile_graph([x * 2.0 + 1.0], [x], name="scale"), client.devices())


# -- Sharding and device_put ---------------------------------------------------------------------


def test_split_and_replicated_regions(client: Client) -> None:
    s = Sharding.split(client.devices(), 1)
    assert s.indices((2, 6)) == [(slice(0, 2), slice(0, 3)), (slice(0, 2), slice(3, 6))]
    r = Sharding.replicated(client.devices())
    assert r.is_replicated and r.indices((2, 6)) == [(slice(0, 2), slice(0, 6))] * 2
    assert Sharding.split(client.devices(), ragged=True).shard_sizes(5) == (3, 2)
    assert Sharding.split(client.devices(), -1).resolved_axis(3) == 2


def test_device_put_round_trips_every_sharding(client: Client) -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for s in (
        Sharding.split(client.devices(), 0),
        Sharding.split(client.devices(), 1),
        Sharding.replicated(client.devices()),
    ):
        sx = client.device_put(x, s)
        assert isinstance(sx, ShardedBuffer) and sx.shape == (4, 6) and sx.sharding == s
        assert [b.device for b in sx.shards] == list(client.devices())
        np.testing.assert_array_equal(np.asarray(sx), x)
    assert np.asarray(sx.shards[1]).shape == (4, 6)  # a replicated shard is the whole array


def test_large_arrays_are_copied_one_thread_per_shard(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``PARALLEL_COPY_BYTES`` each shard's copy (in and out) runs on its own thread; the
    values, dtypes and layouts are those of the one-thread copy, and the call returns only after
    every copy ended (the host array may change right after)."""
    from asyncjit.runtime import _hostcopy

    threads: set[str] = set()
    copy = np.copyto

    def watched(dst: np.ndarray, src: np.ndarray) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.01)  # both copies in flight at once, so both threads take one
        copy(dst, src)

    monkeypatch.setattr(_hostcopy, "PARALLEL_COPY_BYTES", 1024)
    monkeypatch.setattr(np, "copyto", watched)
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.int8, np.float64, np.bool_):
        x = (rng.standard_normal((6, 40, 33)) * 50).astype(dtype)
        for s in (
            Sharding.split(client.devices(), 0),
            Sharding.split(client.devices(), 2, ragged=True),  # strided slices, the last shorter
            Sharding.replicated(client.devices()),
        ):
            threads.clear()
            src = x.copy()
            sx = client.device_put(src, s)
            src[...] = 0  # the call copied everything before it returned
            assert len(threads) == 2 and any(t.startswith("asyncjit-hostcopy") for t in threads)
            for b, idx in zip(sx.shards, s.indices(x.shape), strict=True):
                np.testing.assert_array_equal(np.asarray(b), x[idx])
            threads.clear()
            back = np.asarray(sx)
            assert back.dtype == x.dtype
            np.testing.assert_array_equal(back, x)
            if not s.is_replicated:
                assert len(threads) == 2  # the gather, one thread per shard too


def test_a_failed_shard_copy_is_raised_after_every_copy_ended(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncjit.runtime import _hostcopy

    ended: list[str] = []

    def fails() -> None:
        time.sleep(0.02)
        ended.append("fails")
        raise OSError("copy failed")

    def works() -> None:
        time.sleep(0.05)
        ended.append("works")

    with pytest.raises(OSError, match="copy failed"):
        _hostcopy.run_copies([fails, works], 1 << 30)
    assert sorted(ended) == ["fails", "works"]  # not raised while the other copy still ran
    with pytest.raises(OSError, match="copy failed"):
        _hostcopy.run_copies([works, fails, works], 1 << 30)  # more copies than helper threads
    assert ended.count("works") == 3
    ended.clear()
    _hostcopy.run_copies([works, works], 10)  # small: on the calling thread, one after the other
    assert ended == ["works", "works"]


def test_reshard_moves_device_to_device(client: Client) -> None:
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    rows = client.device_put(x, Sharding.split(client.devices(), 0, ragged=True))
    cols = client.device_put(rows, Sharding.split(client.devices(), 1))
    assert isinstance(cols, ShardedBuffer)
    np.testing.assert_array_equal(np.asarray(cols.shards[1]), x[:, 3:])
    whole = client.device_put(cols, client.device(1))
    assert isinstance(whole, aj.Buffer) and whole.device is client.device(1)
    np.testing.assert_array_equal(np.asarray(whole), x)
    same = client.device_put(rows, rows.sharding)
    assert same is rows


def test_reshard_waits_for_a_pending_source_on_the_target_queue(client: Client) -> None:
    """The copy is ordered after the source's event on the target device; the host never waits."""
    gate = Gate()
    plan = host_plan("gated", gate, n_in=1)
    loaded = client.load(plan, client.device(0))
    src = client.buffer_from_host(np.ones((4, 4), np.float32), client.device(0))
    with trace() as tr:
        with host_waits() as waits:
            (pending,) = loaded.execute_nowait([src], {"t": 4})
            moved = client.device_put(pending, Sharding.replicated(client.devices()))
            assert isinstance(moved, ShardedBuffer) and not moved.is_ready()  # returned at once
            deadline = time.monotonic() + 20
            while pending._event._callbacks is None and time.monotonic() < deadline:
                time.sleep(0.001)  # until cpu:1's queue waits on the event (it registers a callback)
            gate.open()
        assert waits == []
        np.testing.assert_array_equal(np.asarray(moved.shards[1]), np.ones((4, 4), np.float32))
    spans = {(e["name"], e["args"].get("device")) for e in tr.events if e.get("ph") == "X"}
    assert ("wait for cpu:0", "1") in spans and ("d2d", "1") in spans


def test_bad_shardings_are_typed(client: Client) -> None:
    with pytest.raises(ShardingError, match="does not divide over 2 devices"):
        client.device_put(np.zeros((5, 2)), Sharding.split(client.devices()))
    with pytest.raises(ShardingError, match="empty shard"):
        client.device_put(np.zeros((1, 2)), Sharding.split(client.devices(), ragged=True))
    with pytest.raises(ShardingError, match="out of range"):
        client.device_put(np.zeros((4, 2)), Sharding.split(client.devices(), 2))
    with pytest.raises(InvalidArgumentError, match="each device once"):
        Sharding.split([client.device(0), client.device(0)])
    with pytest.raises(InvalidArgumentError, match="at least one device"):
        Sharding.split([])
    with pytest.raises(ArgumentTypeError):
        Sharding.split(["cpu:0"])  # type: ignore[list-item]
    other = Client("cpu")
    try:
        with pytest.raises(DeviceMismatchError, match="one client"):
            Sharding.split([client.device(0), other.device(0)])
        with pytest.raises(DeviceMismatchError, match="another client"):
            other.device_put(np.zeros(4), Sharding.split(client.devices()))
    finally:
        other.close()


# -- replicated and sharded execution -----------------------------------------------------------


@pytest.mark.anyio
async def test_execute_replicated_runs_each_list_on_its_device(client: Client) -> None:
    loaded = _scale(client)
    xs = [np.full((2, 3), i, np.float32) for i in range(2)]
    args = [[client.buffer_from_host(x, d)] for x, d in zip(xs, client.devices(), strict=True)]
    outs = await loaded.execute_replicated(args, {"b": 2})
    assert [o[0].device for o in outs] == list(client.devices())
    for x, (o,) in zip(xs, outs, strict=True):
        np.testing.assert_array_equal(await o.to_numpy(), x * 2 + 1)


@pytest.mark.anyio
async def test_execute_replicated_rejects_mismatched_devices(client: Client) -> None:
    loaded = _scale(client)
    on0 = client.buffer_from_host(np.zeros((2, 3), np.float32), client.device(0))
    with pytest.raises(DeviceMismatchError, match=r"argument 0 for device cpu:1 .* lives on device cpu:0"):
        await loaded.execute_replicated([[on0], [on0]], {"b": 2})
    with pytest.raises(DeviceMismatchError, match="loaded on 2 devices"):
        await loaded.execute_replicated([[on0]], {"b": 2})
    with pytest.raises(DeviceMismatchError, match="3 var mappings for 2 devices"):
        await loaded.execute_replicated([[on0], [on0]], [{"b": 2}] * 3)
    assert client.device(0).statistics().in_flight == 0  # nothing was enqueued


@pytest.mark.anyio
async def test_donated_buffer_used_again_names_the_device(client: Client) -> None:
    loaded = _scale(client)
    args = [[client.buffer_from_host(np.zeros((2, 3), np.float32), d)] for d in client.devices()]
    await loaded.execute_replicated(args, {"b": 2}, donate=[0])
    with pytest.raises(BufferDeletedError, match=r"cpu:0.*donated"):
        await loaded.execute_replicated(args, {"b": 2})


@pytest.mark.anyio
async def test_execute_sharded_over_sharded_buffers(client: Client) -> None:
    loaded = _scale(client)
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    sx = client.device_put(x, Sharding.split(client.devices(), ragged=True))
    (out,) = await loaded.execute_sharded([sx])
    assert isinstance(out, ShardedBuffer) and out.shape == (5, 3)
    assert [b.shape for b in out.shards] == [(3, 3), (2, 3)]  # each device's var from its shard
    np.testing.assert_array_equal(await out.to_numpy(), x * 2 + 1)
    single = await loaded.execute_sharded(
        [client.buffer_from_host(x, client.device(1))], client.device(1), {"b": 5}
    )
    np.testing.assert_array_equal(await single[0].to_numpy(), x * 2 + 1)


@pytest.mark.anyio
async def test_execute_sharded_on_other_devices_is_typed(client: Client) -> None:
    x = Tensor.placeholder((B, 3), aj.float32)
    on_one = client.load(compile_graph([x + 1.0], [x]), client.device(0))
    sx = client.device_put(np.zeros((4, 3), np.float32), Sharding.split(client.devices()))
    with pytest.raises(DeviceMismatchError, match="sharded over"):
        await on_one.execute_sharded([sx])
    with pytest.raises(ArgumentTypeError, match="needs a device"):
        await on_one.execute_sharded([client.buffer_from_host(np.zeros((4, 3), np.float32))])


# -- sharded jit -----------------------------------------------------------------------------------


def test_split_axes_rules() -> None:
    v = Var("shard", 1, 4)
    x = Tensor.placeholder((v, 3), aj.float32)
    w = Tensor.placeholder((3, 5), aj.float32)
    y = (x @ w).relu()
    axes, why = split_axes([as_node(y), as_node(y.sum(axis=1))], {as_node(x): 0, as_node(w): None}, v)
    assert axes == (0, 0) and why == ""
    assert split_axes([as_node(x.sum(axis=0))], {as_node(x): 0}, v) == (
        None,
        "a reduction over the split axis",
    )
    assert split_axes([as_node(x.T)], {as_node(x): 0}, v) == ((1,), "")
    axes, why = split_axes([as_node(w.T @ x.T)], {as_node(x): 0, as_node(w): None}, v)
    assert axes is None and "matmul" in why


def test_sharded_jit_splits_a_batch(client: Client) -> None:
    s = Sharding.split(client.devices(), 0)
    w = np.random.default_rng(0).random((8, 4), np.float32)
    f = jit(lambda x, w: ((x @ w).relu(), x.sum(axis=1)), in_shardings={"x": s})
    x = np.random.default_rng(1).random((6, 8), np.float32)
    a, b = f(x, w)
    assert a.sharding == s and b.sharding == s
    np.testing.assert_allclose(np.asarray(a), np.maximum(x @ w, 0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(b), x.sum(1), rtol=1e-5)
    f(x + 1, w)
    assert f.cache_size() == 1


def test_sharded_jit_out_shardings_and_sharded_arguments(client: Client) -> None:
    rep = Sharding.replicated(client.devices())
    s = Sharding.split(client.devices(), 0)
    f = jit(lambda x: x * 3.0, in_shardings=s, out_shardings=rep)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    y = f(x)
    assert y.sharding == rep
    np.testing.assert_array_equal(np.asarray(y.shards[1]), x * 3)
    g = jit(lambda x: x + 1.0, out_shardings=Sharding.split(client.devices(), 1))
    z = g(client.device_put(x, s))  # the argument's own sharding
    np.testing.assert_array_equal(np.asarray(z.shards[1]), x[:, 1:] + 1)


def test_sharded_jit_bad_input(client: Client) -> None:
    s = Sharding.split(client.devices(), 0)
    f = jit(lambda x, y: x + y, in_shardings={"x": s, "y": Sharding.split(client.devices()[:1])})
    with pytest.raises(DeviceMismatchError, match="different device lists"):
        f(np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))
    g = jit(lambda x: x * 2.0, in_shardings=s)
    with pytest.raises(ShardingError, match="does not divide"):
        g(np.zeros((3, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match="cannot be combined"):
        jit(lambda x: x, in_shardings=s, dynamic={"x": {0: ("n", 1, 8)}})
    with pytest.raises(ArgumentTypeError):
        jit(lambda x: x, in_shardings={"x": "cpu:0"})


@pytest.mark.anyio
async def test_sharded_jit_aio(client: Client) -> None:
    f = jit(lambda x: x.exp(), in_shardings=Sharding.split(client.devices(), 0))
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(4, 2)
    y = await f.aio(x)
    assert y.is_ready()
    np.testing.assert_allclose(await y.to_numpy(), np.exp(x), rtol=1e-6)
