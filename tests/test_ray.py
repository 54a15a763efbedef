"""``asyncjit.ray`` on a local Ray cluster (``ray.init(num_cpus=2)``, started once per module):
remote devices (buffers there, awaited here, actor-to-actor transfers, typed errors, timeouts)
and ``serve_streams`` (equal to one process, a replica killed mid-run fails only its streams)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import anyio
import numpy as np
import pytest

pytest.importorskip("ray", reason="the Ray tests need the ray extra")
import ray

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.errors import (
    BufferDeletedError,
    DeviceError,
    DTypeMismatchError,
    RemoteDeviceError,
    RemoteTimeoutError,
    ReplicaDiedError,
    ServiceFullError,
    VarBoundsError,
)
from asyncjit.models import read_audio, speech_sample_path
from asyncjit.models.silero_vad import vad_mux
from asyncjit.ray import RayDevice, await_ref, serve_streams

pytestmark = [
    pytest.mark.timeout(600),
    # ray.init starts its processes by fork + exec; JAX (loaded by earlier tests in the same
    # run) warns at every fork because a fork *without* exec could deadlock its threads.
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        # a loaded CI machine can take long to start a worker process; be generous
        _system_config={"worker_register_timeout_seconds": 180},
    )
    try:
        yield
    finally:
        ray.shutdown()


def _plan() -> asyncjit.compiler.Executable:
    t = Var("t", 1, 64)
    x = Tensor.placeholder((t,), asyncjit.float32, name="x")
    return asyncjit.compiler.compile([x * 2 + 1], [x])


@pytest.fixture(scope="module")
def devices() -> Iterator[tuple[RayDevice, RayDevice]]:
    a, b = RayDevice.start(num_cpus=0, timeout=180), RayDevice.start(num_cpus=0, timeout=180)
    yield a, b
    a.close()
    b.close()


@pytest.mark.anyio
async def test_remote_buffers_are_awaited_and_move_actor_to_actor(
    devices: tuple[RayDevice, RayDevice],
) -> None:
    a, b = devices
    exe = _plan()
    ra, rb = a.load(exe), b.load(exe)
    x = np.arange(7, dtype=np.float32)
    (y,) = ra.execute([a.buffer_from_host(x)], {"t": 7})
    assert y.shape == (7,) and y.dtype == np.float32 and y.device is a
    with pytest.raises(DeviceError, match="not addressable"):
        y.numpy_view()
    (z,) = rb.execute([y.copy_to_device(b)])  # queued behind the transfer on b, nothing waited here
    np.testing.assert_array_equal(await z.to_numpy(), (x * 2 + 1) * 2 + 1)
    np.testing.assert_array_equal(await y.to_numpy(), x * 2 + 1)
    (out,) = await ra.run_async([x])
    np.testing.assert_array_equal(out, x * 2 + 1)
    out[0] = 5.0  # the caller's own array
    attrs = a.attributes
    assert attrs["kind"] == "cpu" and attrs["cores"] >= 1 and attrs["pid"] > 0


def test_bad_input_is_refused_here_before_anything_is_sent(devices: tuple[RayDevice, RayDevice]) -> None:
    a, b = devices
    ra = a.load(_plan())
    good = a.buffer_from_host(np.ones(4, np.float32))
    with pytest.raises(DTypeMismatchError, match="float32"):
        ra.execute([a.buffer_from_host(np.ones(4, np.float64))])
    with pytest.raises(DeviceError, match="copy_to_device"):
        ra.execute([b.buffer_from_host(np.ones(4, np.float32))])
    with pytest.raises(VarBoundsError):
        ra.execute([a.buffer_from_host(np.ones(65, np.float32))])
    (y,) = ra.execute([good], donate=[0])
    with pytest.raises(BufferDeletedError, match="donated"):
        ra.execute([good])
    np.testing.assert_array_equal(y.to_numpy_blocking(), np.full(4, 3.0, np.float32))


@pytest.mark.anyio
async def test_dead_device_and_slow_answers_are_typed_and_bounded() -> None:
    dev = RayDevice.start(num_cpus=0, timeout=180)
    buf = dev.buffer_from_host(np.ones(3, np.float32))
    np.testing.assert_array_equal(await buf.to_numpy(), np.ones(3, np.float32))
    dev.close()
    # refused at once, never answered by the dying actor (ray.kill is asynchronous)
    with pytest.raises(RemoteDeviceError, match=dev.name):
        await buf.to_numpy()
    with pytest.raises(RemoteDeviceError, match=dev.name):
        dev.buffer_from_host(np.ones(3, np.float32))
    with pytest.raises(RemoteDeviceError, match=dev.name):
        buf.to_numpy_blocking()

    @ray.remote(num_cpus=0)
    def slow() -> int:
        time.sleep(20)
        return 1

    ref = slow.remote()
    started = time.monotonic()
    with pytest.raises(RemoteTimeoutError, match=r"within 0\.2 s"):
        await await_ref(ref, timeout=0.2, where="slow task")
    with anyio.move_on_after(0.2):  # cancellable like any other wait
        await await_ref(ref, timeout=None, where="slow task")
    assert time.monotonic() - started < 15
    ray.cancel(ref, force=True)


def _chunks(n: int) -> np.ndarray:
    wave = read_audio(speech_sample_path())
    return np.ascontiguousarray(wave[16000 : 16000 + 512 * n].reshape(n, 512))


async def _local(streams: int, chunks: np.ndarray) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    async with vad_mux(max_streams=streams) as mux:

        async def one(i: int) -> None:
            async with mux.open_stream() as s:
                out[i] = [float(await s.step(np.roll(c, i))) for c in chunks]

        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, i)
    return out


@pytest.mark.anyio
async def test_two_replicas_serve_512_streams_equal_to_one_process() -> None:
    chunks = _chunks(4)
    got: dict[int, list[float]] = {}
    factory = functools.partial(vad_mux, max_streams=256)
    async with serve_streams(factory, replicas=2, max_streams=256, num_cpus=0.5, timeout=180) as svc:

        async def one(i: int) -> None:
            async with svc.open_stream() as s:
                got[i] = [float(await s.step(np.roll(c, i))) for c in chunks]

        async with anyio.create_task_group() as tg:
            for i in range(512):
                tg.start_soon(one, i)
        stats = svc.statistics()
        with pytest.raises(ServiceFullError):
            for _ in range(513):
                svc.open_stream()
    assert [s["steps"] for s in stats] == [1024, 1024]
    assert all(s["calls"] < 1024 / 8 for s in stats)  # steps travel in batches, not one call each
    assert got == await _local(512, chunks)


@pytest.mark.anyio
async def test_a_killed_replica_fails_only_its_streams_and_is_replaced() -> None:
    chunks = _chunks(12)
    results: dict[int, list[float]] = {}
    failed: dict[int, BaseException] = {}
    replica_of: dict[int, int] = {}
    factory = functools.partial(vad_mux, max_streams=16)
    async with serve_streams(factory, replicas=2, max_streams=16, num_cpus=0.5, timeout=180) as svc:
        started = anyio.Event()
        killed = anyio.Event()

        async def one(i: int) -> None:
            async with svc.open_stream() as s:
                replica_of[i] = s.replica.index
                out = []
                try:
                    for k, c in enumerate(chunks):
                        if k == 4:
                            started.set()
                            await killed.wait()
                        out.append(float(await s.step(np.roll(c, i))))
                except ReplicaDiedError as exc:
                    failed[i] = exc
                    return
                results[i] = out

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
            await started.wait()
            victim = svc._replicas[0]
            ray.kill(victim.actor)
            killed.set()
        assert set(failed) == {i for i, r in replica_of.items() if r == victim.index} != set()
        assert set(results) == {i for i, r in replica_of.items() if r != victim.index} != set()
        assert "died" in str(next(iter(failed.values())))
        with anyio.fail_after(60):
            while len(svc.statistics()) < 2:
                await anyio.sleep(0.05)
        assert svc.replaced == 1 and victim.index not in [s["replica"] for s in svc.statistics()]
        async with svc.open_stream() as s:  # the replacement takes new streams
            np.testing.assert_allclose(float(await s.step(chunks[0])), (await _local(1, chunks[:1]))[0][0])
    ref = await _local(16, chunks)
    assert all(results[i] == ref[i] for i in results)
