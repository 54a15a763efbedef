"""``StreamMux`` (``asyncjit.scheduler``): batching, ordering, admission, lifecycle, cancellation, errors.

The plan is ``HostBatchedStep`` over ``toy_step`` on a real ``Client`` device (queued path, so
device threads, futures and coalesced wake-ups run for real); every stream's outputs are compared
with ``run_unbatched``, the same recurrence stepped one stream at a time in numpy. No timing
thresholds that a loaded machine can break: timer semantics run on trio's ``MockClock``; real-time
tests only check lower bounds or use generous ``fail_after`` limits.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

import asyncjit.scheduler as sched
from asyncjit.errors import DTypeMismatchError, JitError, ShapeMismatchError, WouldBlock
from asyncjit.runtime import Client
from asyncjit.scheduler import (
    AdmissionTimeoutError,
    BacklogFullError,
    BatchedStep,
    HostBatchedStep,
    MuxClosedError,
    StepCancelledError,
    StreamClosedError,
    StreamIdleError,
    StreamMux,
    run_unbatched,
    toy_step,
)
from asyncjit.testing import capture_events

ZERO = np.zeros(4, np.float32)


@pytest.fixture
def client() -> Iterator[Client]:
    c = Client("cpu", inline="never")
    yield c
    c.close()


def chunks_for(seed: int, n: int) -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(16).astype(np.float32) for _ in range(n)]


def close_to(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and bool(np.allclose(np.array(got), np.array(want), atol=1e-5, rtol=0))


class Gate:
    """A step function that, while armed, holds its device until released: a batch 'in the middle'."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, chunks: npt.NDArray[Any], states: npt.NDArray[Any]) -> Any:
        if self.armed:
            self.entered.set()
            assert self.release.wait(20), "gate never released"
        return toy_step(chunks, states)

    async def wait_entered(self) -> None:
        assert await anyio.to_thread.run_sync(self.entered.wait, 20)

    def open(self) -> None:
        self.armed = False
        self.release.set()


class Recording:
    """A ``BatchedStep`` wrapper that records the slots of every run."""

    def __init__(self, inner: HostBatchedStep) -> None:
        self.inner = inner
        self.max_batch_size = inner.max_batch_size
        self.num_slots = inner.num_slots
        self.chunk_shape = inner.chunk_shape
        self.chunk_dtype = inner.chunk_dtype
        self.batches: list[list[int]] = []

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        self.batches.append([int(s) for s in slots])
        return await self.inner.run(chunks, slots)

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        self.inner.reset_slot(slot, state)

    def check_state(self, state: object) -> object:
        return self.inner.check_state(state)


# -- correctness against the unbatched reference ----------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("seed", [1, 2])
async def test_batched_results_equal_unbatched_with_random_join_and_leave(client: Client, seed: int) -> None:
    """Streams join and leave at random times; each one's outputs equal its own unbatched run."""
    step = HostBatchedStep(client, max_batch_size=8, num_slots=12)
    rng = random.Random(seed)
    plans = {i: (rng.uniform(0, 0.02), chunks_for(seed * 100 + i, rng.randint(1, 25))) for i in range(30)}
    got: dict[int, list[Any]] = {}
    async with StreamMux(step, max_streams=12, backlog=30, max_queue_delay=0.001) as mux:

        async def one(i: int) -> None:
            start, chunks = plans[i]
            await anyio.sleep(start)
            async with mux.open_stream(name=f"s{i}") as s:
                outs = []
                for c in chunks:
                    outs.append(await s.step(c))
                    if rng.random() < 0.1:
                        await anyio.sleep(rng.uniform(0, 0.003))
                got[i] = outs

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in plans:
                    tg.start_soon(one, i)
        m = mux.metrics()
    for i, (_, chunks) in plans.items():
        assert close_to(got[i], run_unbatched(toy_step, chunks, ZERO)), i
    assert m["requests"] == sum(len(c) for _, c in plans.values())
    assert max(m["batch_size_histogram"]) > 1, "streams were never batched together"


@pytest.mark.anyio
async def test_initial_state_policy_zeros_or_given(client: Client) -> None:
    """A stream starts from zeros or from the state it is opened with; a bad state fails at open."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    init = np.array([0.5, -0.25, 0.1, 0.9], np.float32)
    chunks = chunks_for(7, 5)
    async with StreamMux(step) as mux:
        async with mux.open_stream(init) as s1, mux.open_stream() as s2:
            a = [await s1.step(c) for c in chunks]
            b = [await s2.step(c) for c in chunks]
        with pytest.raises(ShapeMismatchError, match=r"shape \(4,\)"):
            mux.open_stream(np.zeros(3))
    assert close_to(a, run_unbatched(toy_step, chunks, init))
    assert close_to(b, run_unbatched(toy_step, chunks, ZERO))


@pytest.mark.anyio
async def test_chunks_are_checked_and_copied(client: Client) -> None:
    """Wrong shapes and integer PCM raise; float64 converts; mutating a chunk after submit is safe."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    async with StreamMux(step) as mux, mux.open_stream() as s:
        with pytest.raises(ShapeMismatchError, match=r"shape \(16,\)"):
            s.submit_nowait(np.zeros(15, np.float32))
        with pytest.raises(DTypeMismatchError, match="32768"):
            s.submit_nowait(np.zeros(16, np.int16))
        c, d = chunks_for(3, 2)
        fut = s.submit_nowait(c.astype(np.float64))
        want = [c.copy(), d.copy()]
        fut_d = s.submit_nowait(d)  # the plan's dtype already: a private copy all the same
        d[:] = 1e6
        outs = [await fut, await fut_d]
    assert close_to(outs, run_unbatched(toy_step, want, ZERO))


@pytest.mark.anyio
async def test_step_reads_its_chunk_when_the_batch_is_packed(client: Client) -> None:
    """``step`` queues the caller's array itself (its caller waits until the batch is packed, so
    no copy is needed): what it computes is the array as it is when the batch goes."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    a, b = chunks_for(5, 2)
    late = a + 1
    got: dict[str, Any] = {}
    # one batch at a time: it goes when both open streams are ready, not before
    mux = StreamMux(step, max_queue_delay=60.0, pipeline_depth=1)
    async with mux, mux.open_stream() as s1, mux.open_stream() as s2:

        async def first() -> None:
            got["a"] = await s1.step(a)

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await anyio.wait_all_tasks_blocked()
            assert mux.statistics().ready_streams == 1  # s1's step waits for s2's
            a[:] = late
            got["b"] = await s2.step(b)
    assert close_to([got["a"]], run_unbatched(toy_step, [late], ZERO))
    assert close_to([got["b"]], run_unbatched(toy_step, [b], ZERO))


# -- batch formation ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_fifo_per_stream_and_one_step_per_stream_per_batch(client: Client) -> None:
    """Many queued steps of one stream run one per batch, in submission order."""
    rec = Recording(HostBatchedStep(client, max_batch_size=8, num_slots=8))
    chunks = chunks_for(11, 12)
    async with StreamMux(rec, queue_depth=12, max_queue_delay=0) as mux, mux.open_stream() as s:
        futs = [s.submit_nowait(c) for c in chunks]
        order: list[int] = []

        async def wait(i: int) -> None:
            await futs[i]
            order.append(i)

        async with anyio.create_task_group() as tg:
            for i in reversed(range(len(futs))):
                tg.start_soon(wait, i)
        outs = [f.result() for f in futs]
    assert close_to(outs, run_unbatched(toy_step, chunks, ZERO))
    assert all(len(b) == 1 for b in rec.batches) and len(rec.batches) == 12
    assert order == sorted(order), "results resolved out of submission order"


@pytest.mark.anyio
async def test_no_stream_starves_behind_a_long_backlog(client: Client) -> None:
    """With 32 streams each far ahead, batches go round robin: every stream runs within 8 batches."""
    rec = Recording(HostBatchedStep(client, max_batch_size=4, num_slots=32))
    data = {i: chunks_for(i, 8) for i in range(32)}
    async with StreamMux(rec, queue_depth=8, max_queue_delay=0) as mux:
        streams = [mux.open_stream_nowait(name=f"s{i}") for i in range(32)]
        futs = {i: [streams[i].submit_nowait(c) for c in data[i]] for i in range(32)}
        with anyio.fail_after(30):
            outs = {i: [await f for f in futs[i]] for i in range(32)}
        for s in streams:
            s.close()
    for i in range(32):
        assert close_to(outs[i], run_unbatched(toy_step, data[i], ZERO))
    slots = [s.slot for s in streams]  # a closed stream still shows the slot it had
    assert all(len(b) == 4 and len(set(b)) == 4 for b in rec.batches)
    for window in range(0, 64, 8):  # each window of 8 batches serves every stream exactly once
        served = [s for b in rec.batches[window : window + 8] for s in b]
        assert sorted(served) == list(range(32)) == sorted(s for s in slots if s is not None)


def test_queue_delay_timer_starts_at_first_waiting_request() -> None:
    """On a mock clock: a partial batch goes exactly max_queue_delay after its *first* step arrived;
    a full batch, or one holding every open stream, goes at once."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    client = Client("cpu", inline="always")  # no device-thread waits: virtual time stays exact
    step = HostBatchedStep(client, max_batch_size=3, num_slots=8)
    x = chunks_for(1, 1)[0]
    times: dict[str, float] = {}

    async def main() -> None:
        # one batch at a time: with two in flight, a batch of 4 open streams is full at 2
        async with StreamMux(
            step, max_queue_delay=1.0, idle_timeout=None, metrics_interval=None, pipeline_depth=1
        ) as mux:
            a, b, c, d = (mux.open_stream_nowait() for _ in range(4))
            t0 = trio.current_time()
            fa = a.submit_nowait(x)
            await trio.sleep(0.4)
            fb = b.submit_nowait(x)
            await fa
            times["partial"] = trio.current_time() - t0
            assert fb.done()
            t1 = trio.current_time()
            await trio.testing.wait_all_tasks_blocked()
            fs = [s.submit_nowait(x) for s in (a, b, c)]  # max_batch_size=3: full
            for f in fs:
                await f
            times["full"] = trio.current_time() - t1
            d.close()
            c.close()
            t2 = trio.current_time()
            fs = [s.submit_nowait(x) for s in (a, b)]  # every open stream is waiting
            for f in fs:
                await f
            times["all_open"] = trio.current_time() - t2
            m = mux.metrics()
        assert m["batch_size_histogram"] == {2: 2, 3: 1}
        assert m["queue_delay_ms"]["max"] == pytest.approx(1000.0)

    try:
        trio.run(main, clock=MockClock(autojump_threshold=0))
    finally:
        client.close()
    assert times["partial"] == pytest.approx(1.0)
    assert times["full"] == 0.0
    assert times["all_open"] == 0.0


def test_pipelined_batches_hold_at_most_the_open_streams_over_the_depth() -> None:
    """With two batches in flight, a batch is full at half the open streams (rounded up) or
    ``max_batch_size``: a batch of every open stream would leave nothing to form while it runs.
    Closing streams shrinks the cap; a lone open stream still goes at once."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    client = Client("cpu", inline="always")
    step = HostBatchedStep(client, max_batch_size=8, num_slots=8)
    x = chunks_for(3, 1)[0]
    waits: list[float] = []

    async def main() -> None:
        async with StreamMux(step, max_queue_delay=1.0, idle_timeout=None, metrics_interval=None) as mux:
            assert mux.pipeline_depth == 2
            streams = [mux.open_stream_nowait() for _ in range(6)]
            for n_submit in (3, 4):  # cap 3: three go at once; of four, three go, then one waits
                t0 = trio.current_time()
                for f in [s.submit_nowait(x) for s in streams[:n_submit]]:
                    await f
                waits.append(trio.current_time() - t0)
                await trio.testing.wait_all_tasks_blocked()
            for s in streams[1:]:
                s.close()
            t0 = trio.current_time()
            await streams[0].step(x)
            waits.append(trio.current_time() - t0)
            hist = mux.metrics()["batch_size_histogram"]
        assert hist == {3: 2, 1: 2}, hist

    try:
        trio.run(main, clock=MockClock(autojump_threshold=0))
    finally:
        client.close()
    assert waits == [0.0, pytest.approx(1.0), 0.0]


def test_queue_delay_holds_when_opening_streams_grows_the_cap() -> None:
    """A batch that was full under a cap of 2 is not full once two more streams open (cap 3): it
    must still go by ``max_queue_delay`` after its oldest step arrived, not after it was taken."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    class GatedStep:  # pure Python and trio events: virtual time stays exact
        max_batch_size, num_slots, chunk_shape, chunk_dtype = 8, 8, (4,), np.dtype(np.float32)

        def __init__(self) -> None:
            self.launches: list[tuple[float, list[int], Any]] = []
            self.gated = True

        def reset_slot(self, slot: int, state: object | None = None) -> None: ...

        def check_state(self, state: object) -> object:
            return state

        def launch(self, chunks: Any, slots: Any) -> Any:
            done = trio.Event()
            if not self.gated:
                done.set()
            self.launches.append((trio.current_time(), [int(i) for i in slots], done))
            return np.zeros(len(slots), np.float32), done

        async def complete(self, handle: Any) -> Any:
            out, done = handle
            await done.wait()
            return out

        async def run(self, chunks: Any, slots: Any) -> Any:
            return await self.complete(self.launch(chunks, slots))

    step = GatedStep()
    x = np.ones(4, np.float32)
    launched_at: dict[str, float] = {}

    async def main() -> None:
        async with StreamMux(step, max_queue_delay=10.0, idle_timeout=None, metrics_interval=None) as mux:
            a, b, c, d = (mux.open_stream_nowait() for _ in range(4))  # cap 2
            for s in (a, b, c, d):
                s.submit_nowait(x)
            second = {s: s.submit_nowait(x) for s in (a, b, c, d)}  # all queued at t=0
            await trio.sleep(5)
            step.launches[0][2].set()  # [a, b] done at t=5: [a, b] again
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(1)
            mux.open_stream_nowait(), mux.open_stream_nowait()  # t=6: cap 3, c and d not full
            step.gated = False  # from now on every launch completes at once
            step.launches[1][2].set()
            step.launches[2][2].set()
            await second[c]
            launched_at["c2"] = next(t for t, slots, _ in step.launches[3:] if c.slot in slots)
            for fut in second.values():
                await fut

    trio.run(main, clock=MockClock(autojump_threshold=0))
    assert launched_at["c2"] == pytest.approx(10.0)


@pytest.mark.anyio
async def test_queue_delay_real_clock_bounds(client: Client) -> None:
    """Real clock, lower bounds only: a lone step of three open streams waits for max_queue_delay;
    a full batch does not wait for a 60 s delay."""
    step = HostBatchedStep(client, max_batch_size=2, num_slots=4)
    x = chunks_for(2, 1)[0]
    async with StreamMux(step, max_queue_delay=0.05) as mux:  # batches of 2 (3 streams over 2)
        _c = mux.open_stream_nowait()
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        t0 = anyio.current_time()
        await a.step(x)
        assert anyio.current_time() - t0 >= 0.045
    async with StreamMux(step, max_queue_delay=60) as mux:
        a, b, _c = mux.open_stream_nowait(), mux.open_stream_nowait(), mux.open_stream_nowait()
        with anyio.fail_after(20):
            fa, fb = a.submit_nowait(x), b.submit_nowait(x)
            await fa
            await fb


# -- admission --------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_backlog_admits_in_order(client: Client) -> None:
    """With max_streams=2, later streams wait in the backlog and are admitted first come, first served.

    Admitted streams hold their slot until released, so each freed pair of slots must go to the
    next two streams of the backlog, whatever order the scheduler runs their tasks in.
    """
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    admitted: list[int] = []
    release = {i: anyio.Event() for i in range(6)}
    async with StreamMux(step, max_streams=2, backlog=10) as mux:
        holders = [mux.open_stream_nowait(), mux.open_stream_nowait()]
        with pytest.raises(WouldBlock):
            mux.open_stream_nowait()

        async def wait_turn(i: int) -> None:
            async with mux.open_stream() as s:
                admitted.append(i)
                await release[i].wait()
                await s.step(chunks_for(i, 1)[0])

        async def admitted_count(n: int) -> None:
            with anyio.fail_after(10):
                while len(admitted) < n:
                    await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(wait_turn, i)
                with anyio.fail_after(10):  # enqueue in order
                    while mux.statistics().backlog < i + 1:
                        await anyio.sleep(0.001)
            assert admitted == []
            for h in holders:
                h.close()
            for pair in ((0, 1), (2, 3), (4, 5)):
                await admitted_count(pair[1] + 1)
                assert sorted(admitted[pair[0] :]) == list(pair), admitted
                for i in pair:
                    release[i].set()
        with anyio.fail_after(10):  # closed slots are reset and freed by the service task
            while mux.statistics().free_slots < 2:
                await anyio.sleep(0.001)
        assert mux.statistics().backlog == 0


@pytest.mark.anyio
async def test_non_finite_chunks_are_refused(client: Client) -> None:
    """A NaN or infinite sample is a typed error for that step (it would poison the stream's
    state): it never runs, the other steps of its batch do, and the stream goes on from the state
    before it."""
    from asyncjit.errors import AudioFormatError

    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    async with StreamMux(step, max_streams=2) as mux, mux.open_stream() as s:
        chunk = chunks_for(0, 1)[0].copy()
        chunk[3] = np.nan
        with pytest.raises(AudioFormatError, match="first at index 3"):
            await s.step(chunk)
        chunk[3], chunk[7] = 1.0, -np.inf
        with pytest.raises(AudioFormatError, match="first at index 7"):
            await s.step(chunk)
        ok = await s.step(chunks_for(0, 1)[0])
        assert np.isfinite(np.asarray(ok)).all()

    # in one batch with good chunks: only the bad step fails; every state is as if it was not sent
    cs = chunks_for(5, 3)
    async with StreamMux(step, max_streams=2, pipeline_depth=1, max_queue_delay=1.0) as mux:
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        bad = cs[1].copy()
        bad[5] = np.inf
        fa0, fb0 = a.submit_nowait(cs[0]), b.submit_nowait(bad)
        fa1, fb1 = a.submit_nowait(cs[1]), b.submit_nowait(cs[2])
        ra0 = await fa0
        with pytest.raises(AudioFormatError, match="first at index 5"):
            await fb0
        ra1, rb1 = await fa1, await fb1
        m = mux.metrics()
        assert m["batch_size_histogram"] == {1: 1, 2: 1}  # [a0 (b0 refused)], [a1, b1]
        assert m["refused_requests"] == 1 and m["requests"] == 3 and m["failed_requests"] == 0
    assert close_to([ra0, ra1], run_unbatched(toy_step, cs[:2], ZERO))
    assert close_to([rb1], run_unbatched(toy_step, [cs[2]], ZERO))


@pytest.mark.anyio
async def test_backlog_full_raises_at_once(client: Client) -> None:
    """With every slot taken and the backlog full, opening another stream raises at once; the
    stream waiting in the backlog is admitted when a slot frees."""
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    async with StreamMux(step, max_streams=1, backlog=1) as mux:
        holder = mux.open_stream_nowait()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_enter_and_leave, mux)
                while mux.statistics().backlog < 1:
                    await anyio.sleep(0)
                with pytest.raises(BacklogFullError, match="backlog=1"):
                    async with mux.open_stream():
                        pass
                holder.close()
        m = mux.metrics()
    assert m["backlog_rejected"] == 1 and m["admission_timeouts"] == 0


def test_admission_timeout_on_a_mock_clock() -> None:
    """A stream waiting in the backlog raises AdmissionTimeoutError exactly admission_timeout
    after it asked (virtual time: a loaded machine cannot move the deadline)."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    client = Client("cpu", inline="always")  # no device-thread waits: virtual time stays exact
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    waited: list[float] = []

    async def main() -> None:
        async with StreamMux(
            step, max_streams=1, backlog=1, admission_timeout=5.0, idle_timeout=None, metrics_interval=None
        ) as mux:
            holder = mux.open_stream_nowait()
            t0 = trio.current_time()
            with pytest.raises(AdmissionTimeoutError, match=r"admission_timeout=5\.0"):
                async with mux.open_stream():
                    pass
            waited.append(trio.current_time() - t0)
            holder.close()
            async with mux.open_stream() as s:  # the slot is free: admitted at once
                await s.step(np.zeros(16, np.float32))
            assert mux.metrics()["admission_timeouts"] == 1

    try:
        trio.run(main, clock=MockClock(autojump_threshold=0))
    finally:
        client.close()
    assert waited == [pytest.approx(5.0)]


async def _enter_and_leave(mux: StreamMux) -> None:
    async with mux.open_stream() as s:
        await s.step(np.zeros(16, np.float32))


# -- lifecycle ----------------------------------------------------------------------------------
def test_idle_timeout_raises_logs_and_frees_slot() -> None:
    """An idle stream is closed exactly idle_timeout after its last step (mock clock): its next
    call raises StreamIdleError, the event is logged, its slot is reset and handed to the backlog."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    client = Client("cpu", inline="always")  # no device-thread waits: virtual time stays exact
    step = HostBatchedStep(client, max_batch_size=2, num_slots=1)
    chunks = chunks_for(5, 3)
    out: list[Any] = []
    times: dict[str, float] = {}

    async def main() -> None:
        async with StreamMux(step, max_streams=1, idle_timeout=10.0, backlog=1, metrics_interval=None) as mux:
            s = mux.open_stream_nowait(name="sleepy")
            await s.step(chunks[0])
            t0 = trio.current_time()
            slot = s.slot
            assert slot is not None
            assert np.any(step.read_slot(slot) != 0)
            async with trio.open_nursery() as nursery:
                # A second stream waits in the backlog: the expiry hands it the slot.
                nursery.start_soon(_enter_and_leave, mux)
                await trio.sleep(9.5)
                assert mux.metrics()["idle_expired"] == 0 and mux.statistics().backlog == 1
            times["admitted"] = trio.current_time() - t0
            assert mux.metrics()["idle_expired"] == 1
            with pytest.raises(StreamIdleError, match=r"idle_timeout=10\.0"):
                await s.step(chunks[1])
            with pytest.raises(StreamIdleError):
                s.submit_nowait(chunks[1])
            s.close()  # closing an expired stream is fine
            async with mux.open_stream() as fresh:  # slot reset: a fresh stream starts from zeros
                out.append(await fresh.step(chunks[2]))

    try:
        with capture_events() as logs:
            trio.run(main, clock=MockClock(autojump_threshold=0))
    finally:
        client.close()
    assert times["admitted"] == pytest.approx(10.0)
    assert close_to(out, run_unbatched(toy_step, [chunks[2]], ZERO))
    events = [e for e in logs if e["event"] == "stream.idle_timeout"]
    assert len(events) == 1 and events[0]["stream"] == "sleepy" and events[0]["log_level"] == "warning"


def test_idle_time_counts_from_a_withdrawn_step() -> None:
    """A withdrawn step counts as its stream's activity: the idle timeout runs from the
    withdrawal, not from the step (or admission) before it."""
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    client = Client("cpu", inline="always")
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    chunks = chunks_for(7, 2)
    seen: dict[str, Any] = {}

    async def main() -> None:
        # two open streams, a long max_queue_delay, one batch at a time: a lone step waits
        async with StreamMux(
            step, max_streams=2, idle_timeout=10.0, max_queue_delay=60.0, pipeline_depth=1
        ) as mux:
            a = mux.open_stream_nowait(name="a")
            b = mux.open_stream_nowait(name="b")
            await trio.sleep(8.0)
            fut = a.submit_nowait(chunks[0])
            await trio.sleep(1.5)
            seen["withdrawn"] = fut.cancel()  # at t=9.5, still queued
            await trio.sleep(1.0)  # t=10.5: b (never stepped) expired at 10
            seen["b_at_10.5"], seen["a_at_10.5"] = b.closed, a.closed
            await trio.sleep(8.5)  # t=19
            seen["a_at_19"] = a.closed
            await trio.sleep(1.0)  # t=20: ten seconds after the withdrawal
            seen["a_at_20"] = a.closed

    try:
        trio.run(main, clock=MockClock(autojump_threshold=0))
    finally:
        client.close()
    assert seen["withdrawn"]
    assert seen["b_at_10.5"] and not seen["a_at_10.5"]
    assert not seen["a_at_19"] and seen["a_at_20"]


@pytest.mark.anyio
async def test_closed_stream_and_exited_mux_raise(client: Client) -> None:
    """Steps after close raise StreamClosedError; a mux not running refuses streams; its exit
    fails queued steps."""
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    mux = StreamMux(step, max_queue_delay=60)
    with pytest.raises(MuxClosedError, match="async with mux"):
        mux.open_stream_nowait()
    async with mux:
        async with mux.open_stream() as s:
            await s.step(np.zeros(16, np.float32))
        with pytest.raises(StreamClosedError, match="closed by your code"):
            await s.step(np.zeros(16, np.float32))
        a, _b = mux.open_stream_nowait(), mux.open_stream_nowait()
        pending = a.submit_nowait(np.zeros(16, np.float32))  # waits 60 s for a batch partner
    with pytest.raises(MuxClosedError):
        pending.result()
    with pytest.raises(MuxClosedError):
        await a.step(np.zeros(16, np.float32))
    with pytest.raises(RuntimeError, match="entered once"):
        async with mux:
            pass


@pytest.mark.anyio
async def test_a_slot_handed_over_as_the_mux_exits_opens_no_stream(client: Client) -> None:
    """A backlog waiter handed a freed slot that resumes only after the mux exited gets
    ``MuxClosedError``: it was opened on an exited mux, whose steps nothing would ever run
    (found by ``tests/mux_chaos.py``: a stream task waiting forever in ``step``)."""
    step = HostBatchedStep(client, max_batch_size=2, num_slots=1)
    mux = StreamMux(step, max_streams=1)
    opened: list[BaseException | None] = []

    async def waiter() -> None:
        try:
            async with mux.open_stream() as s:
                with anyio.fail_after(5):
                    await s.step(np.zeros(16, np.float32))
            opened.append(None)
        except (MuxClosedError, TimeoutError) as exc:
            opened.append(exc)

    async with anyio.create_task_group() as tg, mux:
        first = mux.open_stream_nowait()
        tg.start_soon(waiter)
        while mux.statistics().backlog == 0:
            await anyio.sleep(0.001)
        first.close()  # the slot goes to the waiter at once; the mux exits before it resumes
        assert mux.statistics().backlog == 0
    assert len(opened) == 1 and isinstance(opened[0], MuxClosedError), opened
    assert mux.statistics().active_streams == 0


@pytest.mark.anyio
async def test_exiting_a_pipelined_mux_with_a_batch_in_flight_leaves_the_pool_alone(client: Client) -> None:
    """The exit cancels the task that completes batches while one still runs; a service task
    woken just before (a step queued) must not take the emptied in-flight list for a finished
    one and write the slot pool (on trio the exit raised ``RuntimeError: the slot pool is
    written while a step is in flight``, found by ``tests/mux_chaos.py``). The next mux on the
    same step adopts the batch once it finished."""
    gate = threading.Event()

    def slow(chunks: npt.NDArray[Any], states: npt.NDArray[Any]) -> Any:
        gate.wait(10)
        return toy_step(chunks, states)

    step = HostBatchedStep(client, slow, max_batch_size=4, num_slots=4)
    for _ in range(12):  # trio runs a batch of woken tasks in either order: try both
        gate.clear()
        mux = StreamMux(step, max_queue_delay=0, pipeline_depth=2)
        async with mux:
            a, b, c = (mux.open_stream_nowait() for _ in range(3))
            ran = a.submit_nowait(np.ones(16, np.float32))
            while not mux._inflight:
                await anyio.lowlevel.checkpoint()
            c.close()  # its slot waits to be reset until nothing is in flight
            queued = b.submit_nowait(np.ones(16, np.float32))  # wakes the service; exit at once
        gate.set()
        await step.settle()
        for fut in (ran, queued):
            with pytest.raises(MuxClosedError):
                fut.result()
    async with StreamMux(step) as mux, mux.open_stream() as s:
        assert close_to([await s.step(np.ones(16, np.float32))], run_unbatched(toy_step, [np.ones(16)], ZERO))


@pytest.mark.anyio
async def test_backpressure_submit_waits_and_nowait_raises(client: Client) -> None:
    """A full stream queue: submit_nowait raises WouldBlock, submit waits for room."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=2, num_slots=2)
    chunks = chunks_for(9, 4)
    # one batch in flight: with pipelining, f1 would be launched behind the held f0, making room
    mux_ = StreamMux(step, queue_depth=2, max_queue_delay=0, pipeline_depth=1)
    async with mux_ as mux, mux.open_stream() as s:
        gate.armed = True
        try:
            f0 = s.submit_nowait(chunks[0])
            await gate.wait_entered()  # f0 is running; two more fill the queue
            f1, f2 = s.submit_nowait(chunks[1]), s.submit_nowait(chunks[2])
            with pytest.raises(WouldBlock, match="queue_depth"):
                s.submit_nowait(chunks[3])
            got: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def producer() -> None:
                    got.append(await s.submit(chunks[3]))

                tg.start_soon(producer)
                await anyio.wait_all_tasks_blocked()  # the producer is parked in submit
                assert got == [], "submit did not wait for room"
                gate.open()
        finally:
            gate.open()
        outs = [await f for f in (f0, f1, f2, got[0])]
    assert close_to(outs, run_unbatched(toy_step, chunks, ZERO))


# -- cancellation -------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_cancel_in_the_middle_of_a_batch(client: Client) -> None:
    """A batched step whose waiter is cancelled: the batch completes, other streams get results,
    the cancelled stream's state *did* advance, its result is dropped."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca, cb = chunks_for(1, 3), chunks_for(2, 3)
    async with StreamMux(step, max_queue_delay=0, pipeline_depth=1) as mux:  # both in one batch
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        await a.step(ca[0])
        await b.step(cb[0])
        gate.armed = True
        try:
            fa, fb = a.submit_nowait(ca[1]), b.submit_nowait(cb[1])  # one batch of both
            async with anyio.create_task_group() as tg:

                async def wait_a(scope: anyio.CancelScope) -> None:
                    with scope:
                        await fa

                scope = anyio.CancelScope()
                tg.start_soon(wait_a, scope)
                await gate.wait_entered()
                scope.cancel()
            assert not fa.cancel(), "a batched step cannot be withdrawn"
        finally:
            gate.open()
        rb1 = await fb
        ra2 = await a.step(ca[2])
        rb2 = await b.step(cb[2])
        m = mux.metrics()
    assert m["dropped_results"] == 1 and m["cancelled"] == 0
    assert m["batch_size_histogram"] == {1: 4, 2: 1}
    assert close_to([ra2], run_unbatched(toy_step, ca, ZERO)[2:])  # ca[1] was applied
    assert close_to([rb1, rb2], run_unbatched(toy_step, cb, ZERO)[1:])


@pytest.mark.anyio
async def test_cancelling_a_task_in_step_while_its_batch_runs(client: Client) -> None:
    """``await stream.step(chunk)`` cancelled while its batch runs (the same outcome as awaiting
    the future): the state advances, the result is dropped, the stream steps on."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca = chunks_for(6, 3)
    async with StreamMux(step, max_queue_delay=0) as mux:
        a = mux.open_stream_nowait()
        await a.step(ca[0])
        gate.armed = True
        try:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def stepping() -> None:
                    with scope:
                        await a.step(ca[1])
                    assert scope.cancelled_caught

                tg.start_soon(stepping)
                await gate.wait_entered()
                scope.cancel()
        finally:
            gate.open()
        ra2 = await a.step(ca[2])
        m = mux.metrics()
    assert m["dropped_results"] == 1 and m["cancelled"] == 0
    assert close_to([ra2], run_unbatched(toy_step, ca, ZERO)[2:])


@pytest.mark.anyio
async def test_cancelled_step_not_yet_batched_never_runs(client: Client) -> None:
    """A step cancelled while waiting for a batch is withdrawn: the stream continues as if never sent."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca, cb = chunks_for(3, 2), chunks_for(4, 3)
    # one batch in flight, so b's step waits unbatched while a's is held at the gate
    async with StreamMux(step, max_queue_delay=0, pipeline_depth=1) as mux:
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        gate.armed = True
        try:
            fa = a.submit_nowait(ca[0])  # runs alone and is held at the gate
            await gate.wait_entered()
            with anyio.move_on_after(0.02):
                await b.step(cb[0])  # waits for the next batch, then is cancelled
            explicit = b.submit_nowait(cb[1])
            assert explicit.cancel() and explicit.cancelled()
        finally:
            gate.open()
        await fa
        rb = await b.step(cb[2])
        ra = await a.step(ca[1])
        with pytest.raises(StepCancelledError):
            explicit.result()
        m = mux.metrics()
    assert m["cancelled"] == 2 and m["dropped_results"] == 0
    assert close_to([rb], run_unbatched(toy_step, [cb[2]], ZERO))
    assert close_to([ra], run_unbatched(toy_step, ca, ZERO)[1:])


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_failing_batch_fails_its_steps_and_mux_keeps_serving(client: Client) -> None:
    """A plan error fails every step of that batch with the original error; states stay as before."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    ca, cb = chunks_for(1, 3), chunks_for(2, 3)
    poison = np.full(16, 666.0, np.float32)
    async with StreamMux(step, max_queue_delay=0, pipeline_depth=1) as mux:  # a and b in one batch
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        ra0, rb0 = await _both(a.submit_nowait(ca[0]), b.submit_nowait(cb[0]))
        fa, fb = a.submit_nowait(poison), b.submit_nowait(cb[1])
        for f in (fa, fb):
            with pytest.raises(ValueError, match="poisoned chunk") as info:
                await f
        assert "toy_step" in "".join(str(x) for x in info.traceback)
        ra1, rb1 = await _both(a.submit_nowait(ca[1]), b.submit_nowait(cb[2]))
        m = mux.metrics()
    assert close_to([ra0, ra1], run_unbatched(toy_step, ca[:2], ZERO))
    assert close_to([rb0, rb1], run_unbatched(toy_step, [cb[0], cb[2]], ZERO))  # cb[1] failed: no update
    assert m["failed_batches"] == 1 and m["failed_requests"] == 2


async def _both(f: sched.StepFuture, g: sched.StepFuture) -> tuple[Any, Any]:
    return await f, await g


# -- scale and memory ----------------------------------------------------------------------------
def _rss_bytes() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.anyio
async def test_1000_streams_10000_chunks_nothing_lost_duplicated_or_reordered(client: Client) -> None:
    """1,000 streams (256 slots, the rest in the backlog) x 10 chunks: every result exact and in
    order, and memory flat between two identical rounds."""
    step = HostBatchedStep(client, max_batch_size=64, num_slots=256)
    base = np.random.default_rng(0).standard_normal((1000, 10, 16)).astype(np.float32)
    want = {i: run_unbatched(toy_step, list(base[i]), ZERO) for i in range(1000)}

    async def one_round() -> dict[int, list[Any]]:
        got: dict[int, list[Any]] = {}
        async with StreamMux(step, max_streams=256, backlog=1000, max_queue_delay=0.001) as mux:

            async def one(i: int) -> None:
                async with mux.open_stream() as s:
                    got[i] = [await s.step(c) for c in base[i]]

            async with anyio.create_task_group() as tg:
                for i in range(1000):
                    tg.start_soon(one, i)
            assert mux.metrics()["requests"] == 10_000
        return got

    with anyio.fail_after(50):
        await one_round()
        before = _rss_bytes()
        got = await one_round()
        after = _rss_bytes()
    assert sorted(got) == list(range(1000))
    for i in range(1000):
        assert close_to(got[i], want[i]), i
    assert after - before < 32 * 2**20, f"RSS grew by {(after - before) / 2**20:.1f} MiB"


# -- observing and configuration ----------------------------------------------------------------
@pytest.mark.anyio
async def test_statistics_metrics_and_repr(client: Client) -> None:
    """statistics(), metrics() and repr() show the state of the mux and its streams."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    async with StreamMux(step, name="vad", max_queue_delay=0) as mux, mux.open_stream(name="s1") as s:
        await s.step(np.zeros(16, np.float32))
        st = mux.statistics()
        assert (st.name, st.running, st.active_streams, st.free_slots, st.batches) == ("vad", True, 1, 3, 1)
        m = mux.metrics()
        assert m["batch_size_histogram"] == {1: 1} and m["requests"] == 1
        assert set(m["queue_delay_ms"]) == {"p50", "p99", "max"} and m["step_ms"]["p50"] > 0
        assert "vad running streams=1/4" in repr(mux)
        assert repr(s).startswith("<MuxStream s1 open slot=0") and s.statistics().submitted == 1
    assert isinstance(step, BatchedStep)


def test_config_is_validated(client: Client) -> None:
    """Sizes beyond the plan's bounds and negative delays raise ValueError at construction."""
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_streams": 5}, "max_streams"),
        ({"max_batch_size": 8}, "max_batch_size"),
        ({"max_queue_delay": -1}, "max_queue_delay"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"queue_depth": 0}, "queue_depth"),
        ({"backlog": -1}, "backlog"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            StreamMux(step, **kwargs)


def test_exports_are_unique_and_errors_are_jit_errors() -> None:
    """Every public scheduler name resolves once; its errors share the JitError base."""
    assert len(sched.__all__) == len(set(sched.__all__))
    for name in sched.__all__:
        assert hasattr(sched, name), name
    for cls in (StreamIdleError, StreamClosedError, MuxClosedError, AdmissionTimeoutError, BacklogFullError):
        assert issubclass(cls, JitError)
    assert issubclass(AdmissionTimeoutError, TimeoutError)


@pytest.mark.anyio
async def test_error_in_the_mux_body_propagates_unwrapped(client: Client) -> None:
    """An exception raised inside ``async with mux`` comes out as itself, not an ExceptionGroup,
    and leaves no service task behind."""
    step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
    before = len(anyio.get_running_tasks())
    with pytest.raises(KeyError, match="from the body"):
        async with StreamMux(step) as mux, mux.open_stream() as s:
            await s.step(np.zeros(16, np.float32))
            raise KeyError("from the body")
    assert len(anyio.get_running_tasks()) == before


def test_slots_are_handed_out_lowest_first() -> None:
    """Free slots go lowest first (a growing pool stays packed); a slot the step's pool does not
    hold yet is reset before use even without an initial state."""
    from asyncjit.scheduler._slots import SlotPool

    pool = SlotPool(8, backlog=0, notify=lambda: None, needs_reset=lambda slot: slot >= 2)
    assert [pool.try_acquire(None) for _ in range(3)] == [0, 1, 2]
    resets: list[tuple[int, object]] = []
    pool.service(lambda slot, state: resets.append((slot, state)))
    assert resets == [(2, None)]  # 0 and 1 were held: no reset
    pool.release(1)
    pool.release(0)
    pool.service(lambda slot, state: None)
    assert pool.try_acquire(None) == 0 and pool.try_acquire("s") == 1 and pool.try_acquire(None) == 3

    # a slot released while runs are in flight (not serviced yet) is lower than every free one:
    # it is taken, with a reset queued, instead of climbing past it
    pool.service(lambda slot, state: None)  # the initial state of 1 and the reset of 3
    pool.release(1)
    assert pool.try_acquire(None) == 1 and pool.has_pending
    resets.clear()
    pool.service(lambda slot, state: resets.append((slot, state)))
    assert resets == [(1, None)]


@pytest.mark.anyio
async def test_churn_with_runs_in_flight_keeps_the_slots_in_use_packed(client: Client) -> None:
    """Streams that close and reopen while batches are in flight reuse the lowest slots: the
    highest slot stays below the most streams ever open at once (a growing pool stays small)."""
    step = HostBatchedStep(client, max_batch_size=16, num_slots=256)
    seen: list[int] = []
    open_now = peak = 0
    async with StreamMux(step, max_queue_delay=0.0005) as mux:

        async def worker(i: int) -> None:
            nonlocal open_now, peak
            for c in chunks_for(i, 12):
                async with mux.open_stream() as s:
                    open_now += 1
                    peak = max(peak, open_now)
                    assert s.slot is not None
                    seen.append(s.slot)
                    await s.step(c)
                    open_now -= 1

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(worker, i)
    assert peak <= 16 and max(seen) < peak, (max(seen), peak)


# -- many steps from one task (a connection pool) -------------------------------------------------
@pytest.mark.anyio
async def test_step_many_from_one_task_equals_unbatched(client: Client) -> None:
    """One task drives 12 streams with step_many (list and stacked-array chunks, a stream twice
    in a group): each stream's outputs equal its own unbatched run, in order."""
    step = HostBatchedStep(client, max_batch_size=8, num_slots=12)
    plans = [chunks_for(700 + i, 6) for i in range(12)]
    got: list[list[Any]] = [[] for _ in plans]
    async with StreamMux(step, max_queue_delay=0.001) as mux:
        streams = [mux.open_stream_nowait() for _ in plans]
        for k in range(0, 6, 2):
            outs = await mux.step_many(streams, np.stack([p[k] for p in plans]))
            for i, out in enumerate(outs):
                got[i].append(out)
            outs = await mux.step_many(streams, [p[k + 1] for p in plans])
            for i, out in enumerate(outs):
                got[i].append(out)
        twice = await mux.step_many([streams[0], streams[0]], [plans[0][0], plans[0][1]])
        m = mux.metrics()
    for i, chunks in enumerate(plans):
        assert close_to(got[i], run_unbatched(toy_step, chunks, ZERO)), i
    # stream 0 went on from its 6th state with two more steps, in list order
    assert close_to(twice, run_unbatched(toy_step, plans[0] + plans[0][:2], ZERO)[6:])
    assert m["requests"] == 12 * 6 + 2


@pytest.mark.anyio
async def test_submit_many_nowait_is_all_or_nothing_and_wait_all_keeps_errors_apart(client: Client) -> None:
    step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
    ca, cb = chunks_for(31, 3), chunks_for(32, 3)
    async with StreamMux(step, max_queue_delay=0, queue_depth=2) as mux:
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        with pytest.raises(ShapeMismatchError):
            mux.submit_many_nowait([a, b], [ca[0]])  # one chunk for two streams
        with pytest.raises(ShapeMismatchError):
            mux.submit_many_nowait([a, b], np.zeros((2, 3), np.float32))
        with pytest.raises(WouldBlock):
            mux.submit_many_nowait([a, a, a, b], [ca[0], ca[1], ca[2], cb[0]])
        assert a.statistics().queued == 0 and b.statistics().queued == 0  # nothing was queued
        bad = cb[0].copy()
        bad[3] = np.nan
        futs = mux.submit_many_nowait([a, b], [ca[0], bad])
        await mux.wait_all(futs)
        assert all(f.done() for f in futs)
        assert close_to([futs[0].result()], run_unbatched(toy_step, ca[:1], ZERO))
        with pytest.raises(JitError, match="NaN"):
            futs[1].result()
        b.close()
        with pytest.raises(StreamClosedError):
            await mux.step_many([a, b], [ca[1], cb[1]])
        assert a.statistics().queued == 0  # a's step was withdrawn with the group
        await mux.wait_all([])  # nothing to wait for
        rest = await mux.step_many([a], [ca[1]])
    assert close_to(rest, run_unbatched(toy_step, ca[:2], ZERO)[1:])


@pytest.mark.anyio
async def test_submit_many_waits_once_for_room_for_a_block(client: Client) -> None:
    """A block for one stream whose queue is full takes the places free, then waits until the
    rest fits (one wake-up, not one per step the mux takes); all queued in order, and equal to
    the unbatched run."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca = chunks_for(51, 8)
    async with StreamMux(step, max_queue_delay=0, pipeline_depth=1, queue_depth=4) as mux:
        a = mux.open_stream_nowait()
        gate.armed = True
        first = mux.submit_many_nowait([a] * 4, ca[:4])  # a full queue; the first step is batched
        wakes = 0
        room_set = type(a)._wake_producer

        def counting(stream: Any) -> None:
            nonlocal wakes
            wakes += 1
            room_set(stream)

        type(a)._wake_producer = counting  # type: ignore[method-assign]
        try:
            async with anyio.create_task_group() as tg:
                later: list[Any] = []

                async def block() -> None:
                    later.extend(await mux.submit_many([a] * 4, ca[4:]))

                await gate.wait_entered()  # step 1 runs: 3 queued, room for 1 of the 4
                tg.start_soon(block)
                await anyio.sleep(0.01)
                assert not later and a.statistics().queued == 4  # the 5th, then a wait for 3
                gate.open()
        finally:
            type(a)._wake_producer = room_set  # type: ignore[method-assign]
        await mux.wait_all(first + later)
        assert wakes == 1  # woken once, when the other three fit
    assert close_to([f.result() for f in first + later], run_unbatched(toy_step, ca, ZERO))


@pytest.mark.anyio
async def test_wait_all_cancelled_abandons_its_steps(client: Client) -> None:
    """A cancelled wait_all: batched steps run (state advances, result dropped), others withdrawn."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca, cb = chunks_for(41, 3), chunks_for(42, 3)
    async with StreamMux(step, max_queue_delay=0, pipeline_depth=1) as mux:
        a, b = mux.open_stream_nowait(), mux.open_stream_nowait()
        await mux.step_many([a, b], [ca[0], cb[0]])
        gate.armed = True
        try:
            futs = await mux.submit_many([a, b, a], [ca[1], cb[1], ca[2]])  # ca[2] waits for a's turn
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def cancel_when_batched() -> None:
                        await gate.wait_entered()
                        scope.cancel()

                    tg.start_soon(cancel_when_batched)
                    await mux.wait_all(futs)
            assert scope.cancelled_caught
        finally:
            gate.open()
        assert futs[2].cancelled() and not futs[0].cancelled()
        ra = await a.step(ca[2])
        m = mux.metrics()
    assert m["dropped_results"] == 2 and m["cancelled"] == 1
    assert close_to([ra], run_unbatched(toy_step, ca, ZERO)[2:])  # ca[1] was applied, ca[2] once


# -- the per-step wake-up and the metrics ring ------------------------------------------------------
@pytest.mark.anyio
async def test_a_future_awaited_by_two_tasks_refuses_the_second(client: Client) -> None:
    """One task parks on a step's future; a second ``await`` of it is a ``RuntimeError`` (not a
    lost wake-up), and the first still gets its result."""
    gate = Gate()
    step = HostBatchedStep(client, gate, max_batch_size=4, num_slots=4)
    ca = chunks_for(21, 1)
    got: list[Any] = []
    async with StreamMux(step, max_queue_delay=0) as mux:
        a = mux.open_stream_nowait()
        gate.armed = True
        fut = a.submit_nowait(ca[0])
        try:
            async with anyio.create_task_group() as tg:

                async def first() -> None:
                    got.append(await fut)

                tg.start_soon(first)
                await gate.wait_entered()
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(RuntimeError, match="already awaited"):
                    await fut
                gate.open()
        finally:
            gate.open()
    assert close_to(got, run_unbatched(toy_step, ca, ZERO))


class CancelsWhileResolving(Recording):
    """Cancels a scope as its first run returns: the mux sets that batch's results right after,
    before any waiting task runs, so the cancelled task's wake-up is already withdrawn then."""

    def __init__(self, inner: HostBatchedStep, scope: anyio.CancelScope) -> None:
        super().__init__(inner)
        self.scope = scope

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        out = await super().run(chunks, slots)
        if len(self.batches) == 1:
            self.scope.cancel()
        return out


@pytest.mark.anyio
async def test_a_step_cancelled_as_its_batch_is_resolved_does_not_break_the_batch(client: Client) -> None:
    """A waiting task cancelled between its batch's return and the setting of its result: the
    result is not delivered to it (its wait was withdrawn), every other stream of the batch gets
    its own, and the stream and the mux step on."""
    scope = anyio.CancelScope()
    step = CancelsWhileResolving(HostBatchedStep(client, max_batch_size=8, num_slots=8), scope)
    chunks = [chunks_for(30 + i, 3) for i in range(8)]
    outs: dict[int, list[Any]] = {i: [] for i in range(8)}
    async with StreamMux(step, max_queue_delay=0.05) as mux:
        streams = [mux.open_stream_nowait() for _ in range(8)]

        async def run(i: int) -> None:
            if i == 1:
                with scope:
                    await streams[1].step(chunks[1][0])
                assert scope.cancelled_caught
            else:
                outs[i].append(await streams[i].step(chunks[i][0]))
            for c in chunks[i][1:]:
                outs[i].append(await streams[i].step(c))

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(run, i)
        m = mux.metrics()
    want = {i: run_unbatched(toy_step, chunks[i], ZERO) for i in range(8)}
    assert close_to(outs[1], want[1][1:]), "stream 1's state advanced by its first chunk"
    for i in (0, *range(2, 8)):
        assert close_to(outs[i], want[i]), i
    assert len(step.batches[0]) == 8
    assert m["dropped_results"] == 1 and m["cancelled"] == 0  # it ran: its result was dropped


class InstantPipelined:
    """A pipelined step that computes nothing: ``complete`` returns after one checkpoint."""

    max_batch_size = 64
    num_slots = 80
    chunk_shape = (1,)
    chunk_dtype = np.dtype(np.float32)

    def launch(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        return chunks.copy()

    async def complete(self, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        await anyio.lowlevel.checkpoint()
        return out

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        return await self.complete(self.launch(chunks, slots))

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        pass

    def check_state(self, state: object) -> object:
        return state


@pytest.mark.anyio
async def test_leaving_the_mux_between_resolve_slices_wakes_every_step_of_the_batch() -> None:
    """The pipelined service resolves a batch in slices with a checkpoint between them; a mux
    left at that checkpoint still hands the rest of the batch its results (computed already),
    so no task stays parked on a step of it."""
    outcome = {"ok": 0, "closed": 0}
    mux = StreamMux(InstantPipelined(), max_queue_delay=1.0, idle_timeout=None)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as outer, mux:
            streams = [mux.open_stream_nowait() for _ in range(80)]  # batches of 40

            async def one(s: sched.MuxStream) -> None:
                try:
                    await s.step(np.zeros(1, np.float32))
                    outcome["ok"] += 1
                except MuxClosedError:
                    outcome["closed"] += 1

            first = streams[0].submit_nowait(np.zeros(1, np.float32))  # in the first slice
            for s in streams[1:40]:
                outer.start_soon(one, s)
            await first  # resumed by the first slice: leave the mux before the others
    assert outcome["ok"] + outcome["closed"] == 39


def test_metrics_ring_extend_equals_adding_one_by_one() -> None:
    """``Ring.extend`` (a batch's queue delays by slices) leaves the ring exactly as ``add`` per
    value would, across wrap-arounds and blocks longer than the ring."""
    from asyncjit.scheduler._metrics import Ring

    rng = random.Random(5)
    for _ in range(2000):
        size = rng.randint(1, 9)
        one, block = Ring(size), Ring(size)
        for _ in range(rng.randint(0, 6)):
            values = [rng.random() for _ in range(rng.randint(0, 25))]
            for v in values:
                one.add(v)
            block.extend(values)
            assert (one._data, one._i, len(one)) == (block._data, block._i, len(block))
            assert one.percentiles([50, 99]) == block.percentiles([50, 99])
