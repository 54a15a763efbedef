"""``vad_mux`` / ``SileroBatchedStep``: the real Silero VAD served to many streams by ``StreamMux``.

Every stream's probabilities are compared with a per-stream ``SileroVad`` fed the same chunks
(itself checked against ONNX Runtime in ``test_silero_vad.py``). Streams join and leave at random
times, more streams than slots (so slots are reused), producers submit ahead (FIFO per stream),
and one injected failure shows that a failing run changes no slot. No timing thresholds.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from asyncjit.errors import DTypeMismatchError, ShapeMismatchError
from asyncjit.models import read_wav, speech_sample_path
from asyncjit.models.silero_vad import HIDDEN, SileroBatchedStep, SileroVad, vad_mux
from asyncjit.runtime import Buffer, Client
from asyncjit.scheduler import BatchedStep, HostBatchedStep, StreamMux, toy_step

pytest.importorskip("onnx")  # load_weights reads the ONNX file of the silero-vad package

TOL = 1e-5
N = 512


@pytest.fixture(scope="module")
def audio() -> npt.NDArray[np.float32]:
    samples, rate = read_wav(speech_sample_path())
    assert rate == 16000
    return samples


@pytest.fixture(scope="module")
def reference() -> SileroVad:
    return SileroVad(16000)


@pytest.fixture
def client() -> Iterator[Client]:
    c = Client("cpu")
    yield c
    c.close()


def stream_audio(audio: npt.NDArray[np.float32], offset: int, chunks: int) -> list[npt.NDArray[np.float32]]:
    """``chunks`` chunks of the speech from chunk ``offset`` (wrapping around)."""
    total = audio.size // N
    frames = audio[: total * N].reshape(total, N)
    return [frames[(offset + i) % total].copy() for i in range(chunks)]


def expected(reference: SileroVad, chunks: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """A fresh stream's probabilities, one chunk at a time."""
    reference.reset()
    return np.array([reference(c) for c in chunks], np.float32)


def test_the_step_is_a_batched_step(client: Client) -> None:
    step = SileroBatchedStep(16000, max_streams=8, max_batch_size=4, client=client)
    assert isinstance(step, BatchedStep)
    assert (step.num_slots, step.max_batch_size, step.chunk_shape) == (8, 4, (512,))
    assert step.chunk_dtype == np.float32
    assert step.pool.shape == (8, step.row_width) and step.row_width == 2 * HIDDEN + 64
    mux = vad_mux(8000, max_streams=3, client=client)
    assert isinstance(mux, StreamMux) and mux.step.chunk_shape == (256,) and mux.max_batch_size == 3
    assert vad_mux(16000, max_streams=256, client=client).max_batch_size == 256


@pytest.mark.anyio
async def test_streams_joining_and_leaving_at_random_match_per_stream_runs(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """14 streams through 5 slots (backlog, slot reuse), random joins, pauses, lengths and
    submit-ahead depths: every stream's results, in order, equal its own unbatched run."""
    rng = random.Random(11)
    plans = [
        (rng.uniform(0, 0.03), rng.randrange(200), rng.randrange(3, 22), rng.choice([1, 1, 3]))
        for _ in range(14)
    ]
    results: dict[int, list[float]] = {}
    mux = vad_mux(16000, max_streams=5, max_batch_size=4, client=client, max_queue_delay=0.001, backlog=16)

    async def one(i: int, start: float, offset: int, length: int, ahead: int) -> None:
        await anyio.sleep(start)
        chunks = stream_audio(audio, offset, length)
        out: list[float] = results.setdefault(i, [])
        async with mux.open_stream() as s:
            pending: list[Any] = []
            for j, c in enumerate(chunks):
                pending.append(await s.submit(c))
                if len(pending) >= ahead:  # FIFO: the oldest result first
                    out.append(float(await pending.pop(0)))
                if j % 5 == 4:
                    await anyio.sleep(rng.uniform(0, 0.004))
            for fut in pending:
                out.append(float(await fut))

    with anyio.fail_after(60):
        async with mux, anyio.create_task_group() as tg:
            for i, plan in enumerate(plans):
                tg.start_soon(one, i, *plan)
    worst = 0.0
    for i, (_, offset, length, _) in enumerate(plans):
        want = expected(reference, stream_audio(audio, offset, length))
        got = np.array(results[i], np.float32)
        assert got.shape == want.shape
        worst = max(worst, float(np.abs(got - want).max()))
    assert worst < TOL, worst
    m = mux.metrics()
    assert m["requests"] == sum(p[2] for p in plans) and m["opened"] == 14
    assert max(int(k) for k in m["batch_size_histogram"]) > 1  # really batched


@pytest.mark.anyio
async def test_a_reused_slot_starts_like_a_fresh_stream(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """One slot: the second stream (same slot, after the first closed) matches a fresh SileroVad,
    and the closed stream's row (state and audio context) was zeroed."""
    first, second = stream_audio(audio, 40, 12), stream_audio(audio, 90, 12)
    async with vad_mux(16000, max_streams=1, client=client) as mux:
        step = mux.step
        assert isinstance(step, SileroBatchedStep)
        async with mux.open_stream() as s:
            slot = s.slot
            for c in first:
                await s.step(c)
            assert slot is not None and step.read_slot(slot).any()
        assert not step.read_slot(slot).any()
        async with mux.open_stream() as s:
            assert s.slot == slot
            got = [float(await s.step(c)) for c in second]
    np.testing.assert_allclose(got, expected(reference, second), atol=TOL, rtol=0)


@pytest.mark.anyio
async def test_a_stream_opened_with_a_state_continues_from_it(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """A row read from one stream, given to a new one, continues that stream exactly; an (h, c)
    pair is accepted too (audio context zeros)."""
    chunks = stream_audio(audio, 5, 20)
    want = expected(reference, chunks)
    async with vad_mux(16000, max_streams=2, client=client) as mux:
        step = mux.step
        assert isinstance(step, SileroBatchedStep)
        async with mux.open_stream() as s:
            head = [float(await s.step(c)) for c in chunks[:8]]
            assert s.slot is not None
            row = step.read_slot(s.slot)
        async with mux.open_stream(row) as s:
            tail = [float(await s.step(c)) for c in chunks[8:]]
        async with mux.open_stream((row[:HIDDEN], row[HIDDEN : 2 * HIDDEN])) as s:
            assert s.slot is not None
            np.testing.assert_array_equal(step.read_slot(s.slot)[: 2 * HIDDEN], row[: 2 * HIDDEN])
            assert not step.read_slot(s.slot)[2 * HIDDEN :].any()
    np.testing.assert_allclose(head + tail, want, atol=TOL, rtol=0)


def test_initial_states_are_checked(client: Client) -> None:
    step = SileroBatchedStep(16000, max_streams=2, client=client)
    with pytest.raises(ShapeMismatchError, match="320"):
        step.check_state(np.zeros(256, np.float32))
    with pytest.raises(ShapeMismatchError, match=r"\(h, c\)"):
        step.check_state((np.zeros(128, np.float32), np.zeros(64, np.float32)))
    with pytest.raises(DTypeMismatchError):
        step.check_state(np.zeros(320, np.int32))
    with pytest.raises(ValueError, match="finite"):
        step.check_state(np.full(320, np.nan, np.float32))
    row = step.check_state(np.ones(320, np.float64))
    assert isinstance(row, np.ndarray) and row.dtype == np.float32


def poisoned_chunks(client: Client, b: int) -> Buffer:
    """A ``float32 [b, 512]`` buffer poisoned by a failed command (``toy_step`` raises on 666.0):
    a plan that reads it fails on the device with that error (runtime invariant 6)."""
    toy = HostBatchedStep(client, toy_step, state_shape=(N,), max_batch_size=b, num_slots=b)
    chunk = np.full((b, 16), 666.0, np.float32)
    slots = np.arange(b, dtype=np.int32)
    args = [client.buffer_from_host(chunk), client.buffer_from_host(slots), toy.pool]
    _, new_pool = toy.plan.execute_nowait(args, {"b": b})
    return new_pool


@pytest.mark.anyio
async def test_a_failing_run_leaves_every_slot_unchanged(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """A batch whose plan fails on the device: its streams get the plan's error, the pool is the
    one before the batch, and retrying the chunk continues exactly."""
    chunks = stream_audio(audio, 17, 10)
    want = expected(reference, chunks)
    mux = vad_mux(16000, max_streams=3, client=client)
    step = mux.step
    assert isinstance(step, SileroBatchedStep)
    execute_nowait = step.plan.execute_nowait
    armed = {"on": False}

    def failing(args: list[Buffer], *rest: Any, **kwargs: Any) -> Any:
        if armed["on"]:
            armed["on"] = False
            args = [poisoned_chunks(client, args[0].shape[0]), *args[1:]]
        return execute_nowait(args, *rest, **kwargs)

    step.plan.execute_nowait = failing  # type: ignore[method-assign]
    async with mux, mux.open_stream() as s:
        got = [float(await s.step(c)) for c in chunks[:5]]
        before = np.array(step.pool.numpy_view())
        armed["on"] = True
        with pytest.raises(ValueError, match="poisoned chunk"):
            await s.step(chunks[5])
        np.testing.assert_array_equal(step.pool.numpy_view(), before)
        got += [float(await s.step(c)) for c in chunks[5:]]
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert mux.metrics()["failed_batches"] == 1


@pytest.mark.anyio
async def test_a_failed_step_in_flight_is_not_seen_by_the_next(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """Pipelined launches: step 1 fails on the device, step 2 (already queued behind it, reading
    the pool step 1 wrote) is re-run on the good pool: only step 1's batch fails, no slot changes
    from it, and later steps continue exactly."""
    a, b = stream_audio(audio, 3, 4), stream_audio(audio, 60, 4)
    step = SileroBatchedStep(16000, max_streams=2, max_batch_size=2, client=client)
    slot0, slot1 = np.array([0], np.int32), np.array([1], np.int32)
    assert (await step.run(a[0][None], slot0)).shape == (1,)
    before = np.array(step.pool.numpy_view())
    execute_nowait = step.plan.execute_nowait

    def poisoning(args: list[Buffer], *rest: Any, **kwargs: Any) -> Any:
        return execute_nowait([poisoned_chunks(client, 1), *args[1:]], *rest, **kwargs)

    step.plan.execute_nowait = poisoning  # type: ignore[method-assign]
    bad = step.launch(a[1][None], slot0)
    step.plan.execute_nowait = execute_nowait  # type: ignore[method-assign]
    good = step.launch(b[0][None], slot1)
    after = step.launch(a[1][None], slot0)
    with pytest.raises(ValueError, match="poisoned chunk"):
        await step.complete(bad)
    np.testing.assert_array_equal(step.pool.numpy_view(), before)
    p_b = [float((await step.complete(good))[0])]
    p_a = [float((await step.complete(after))[0])]
    for c in a[2:]:
        p_a.append(float((await step.run(c[None], slot0))[0]))
    for c in b[1:]:
        p_b.append(float((await step.run(c[None], slot1))[0]))
    np.testing.assert_allclose(p_a, expected(reference, a)[1:], atol=TOL, rtol=0)
    np.testing.assert_allclose(p_b, expected(reference, b), atol=TOL, rtol=0)


@pytest.mark.anyio
async def test_a_step_outlives_a_mux_that_exited_with_steps_in_flight(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """Launches nobody completed (their mux exited) are adopted once finished; the step serves a
    new mux, which waits for them and starts every slot from zeros."""
    chunks = stream_audio(audio, 30, 6)
    step = SileroBatchedStep(16000, max_streams=2, client=client)
    launched = step.launch(chunks[0][None], np.array([0], np.int32))
    step.launch(chunks[1][None], np.array([1], np.int32))  # never completed either
    await launched.out.ready()  # (its pool_out was donated to the second launch: in place)
    with anyio.fail_after(10):
        while True:  # the second launch finishes after the first, on the same in-order queue
            try:
                step.reset_slot(1)
                break
            except RuntimeError:
                await anyio.sleep(0.001)
    assert step.read_slot(0).any() and not step.read_slot(1).any()
    async with StreamMux(step) as mux, mux.open_stream() as s:  # every slot reset at start
        got = [float(await s.step(c)) for c in chunks]
    np.testing.assert_allclose(got, expected(reference, chunks), atol=TOL, rtol=0)
    step.launch(chunks[0][None], np.array([0], np.int32))  # left running for the next mux
    async with StreamMux(step) as mux, mux.open_stream() as s:
        got = [float(await s.step(c)) for c in chunks]
    np.testing.assert_allclose(got, expected(reference, chunks), atol=TOL, rtol=0)


@pytest.mark.anyio
async def test_many_streams_in_one_batch_match(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """32 live streams at once, batches up to 32: results equal per-stream runs; probabilities
    come back as 0-d float32 arrays."""
    streams = {i: stream_audio(audio, 7 * i, 6) for i in range(32)}
    got: dict[int, list[float]] = {}
    async with vad_mux(16000, max_streams=32, client=client) as mux:

        async def one(i: int) -> None:
            async with mux.open_stream() as s:
                for c in streams[i]:
                    p = await s.step(c)
                    assert p.shape == () and p.dtype == np.float32
                    got.setdefault(i, []).append(float(p))

        async with anyio.create_task_group() as tg:
            for i in streams:
                tg.start_soon(functools.partial(one, i))
    for i, chunks in streams.items():
        np.testing.assert_allclose(got[i], expected(reference, chunks), atol=TOL, rtol=0)
    assert max(int(k) for k in mux.metrics()["batch_size_histogram"]) > 8


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.anyio
async def test_1000_streams_10000_chunks_nothing_lost_duplicated_or_reordered(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """1,000 streams (256 slots, the rest in the backlog) x 10 chunks of real speech, each from its
    own sample offset: every stream gets exactly 10 results, in order, each equal to its own
    unbatched ``SileroVad`` run bit for bit (the network is batch invariant, see the silero_vad
    module docstring); the mux counts 10,000 requests and really
    batches; and RSS is flat (< 32 MiB) between two identical rounds, each a fresh ``vad_mux``."""
    streams, chunks = 1000, 10
    # Sample offsets spread over the speech, each on a non-zero sample: the recording has long
    # runs of exact zeros, and streams inside one would all get the same probabilities.
    voiced = np.flatnonzero(audio[: audio.size - chunks * N])
    starts = voiced[np.linspace(0, voiced.size - 1, streams).astype(np.intp)]
    base = np.stack([audio[o : o + chunks * N].reshape(chunks, N) for o in starts])
    want = np.stack([expected(reference, list(base[i])) for i in range(streams)])
    apart = np.zeros((streams, streams), np.float32)  # max |difference| of two streams' references
    for t in range(chunks):
        np.maximum(apart, np.abs(want[:, t, None] - want[None, :, t]), out=apart)
    np.fill_diagonal(apart, np.inf)
    assert apart.min() > 1e-4, apart.min()  # a result given to the wrong stream cannot match

    async def one_round() -> dict[int, list[Any]]:
        got: dict[int, list[Any]] = {}
        mux = vad_mux(
            16000, max_streams=256, backlog=1000, max_queue_delay=0.001, idle_timeout=None, client=client
        )
        async with mux:

            async def one(i: int) -> None:
                async with mux.open_stream() as s:
                    got[i] = [await s.step(c) for c in base[i]]

            async with anyio.create_task_group() as tg:
                for i in range(streams):
                    tg.start_soon(one, i)
        m = mux.metrics()
        assert m["requests"] == streams * chunks and m["opened"] == streams
        assert max(int(k) for k in m["batch_size_histogram"]) > 1  # really batched
        return got

    def check(got: dict[int, list[Any]]) -> None:
        assert sorted(got) == list(range(streams))
        for i in range(streams):
            assert len(got[i]) == chunks, i
            np.testing.assert_array_equal(np.array(got[i], np.float32), want[i], err_msg=f"stream {i}")

    with anyio.fail_after(60):
        first = await one_round()
        before = _rss_bytes()
        second = await one_round()
        after = _rss_bytes()
    check(first)
    check(second)
    assert after - before < 32 * 2**20, f"RSS grew by {(after - before) / 2**20:.1f} MiB"


@pytest.mark.anyio
async def test_the_pool_holds_the_rows_in_use_not_max_streams(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """A 4,096-slot mux serving a few streams keeps a 16-row pool (each batch copies the pool);
    the 17th concurrent stream grows it to 32 between runs, and every stream still equals its
    own ``SileroVad`` run bit for bit. Slots go lowest first, so reuse does not grow it."""
    mux = vad_mux(16000, max_streams=4096, client=client, idle_timeout=None)
    step = mux.step
    assert isinstance(step, SileroBatchedStep) and step.num_slots == 4096
    assert step.pool_rows == 16 and step.pool.shape == (16, step.row_width)
    streams = {i: stream_audio(audio, 11 * i, 5) for i in range(20)}
    got: dict[int, list[float]] = {}
    async with mux:

        async def one(i: int) -> None:
            async with mux.open_stream() as s:
                assert s.slot is not None and s.slot < 20
                got[i] = [float(await s.step(c)) for c in streams[i]]

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
        assert step.pool_rows == 16
        async with anyio.create_task_group() as tg:
            for i in range(3, 20):  # 17 at once
                tg.start_soon(one, i)
        assert step.pool_rows == 32 and step.pool.shape == (32, step.row_width)
    for i, chunks in streams.items():
        np.testing.assert_array_equal(
            np.array(got[i], np.float32), expected(reference, chunks), err_msg=str(i)
        )


@pytest.mark.anyio
async def test_direct_runs_grow_the_pool_and_reject_slots_out_of_range(client: Client) -> None:
    """Used without a mux, a run on a slot beyond the pool's rows grows it (between runs); a
    slot outside 0..num_slots-1 is an IndexError, never a clamped read."""
    step = SileroBatchedStep(16000, max_streams=100, client=client)
    chunk = np.zeros((1, N), np.float32)
    await step.run(chunk, np.array([40], np.int32))
    assert step.pool_rows == 41 and step.read_slot(40).any() and not step.read_slot(90).any()
    for bad in (-1, 100):
        with pytest.raises(IndexError, match=r"0\.\.99"):
            await step.run(chunk, np.array([bad], np.int32))
    step.launch(chunk, np.array([1], np.int32))  # in flight: the pool cannot grow now
    with pytest.raises(IndexError, match="in flight"):
        step.launch(chunk, np.array([60], np.int32))
    await step.settle()


@pytest.mark.anyio
async def test_the_pool_is_updated_in_place(
    client: Client, audio: npt.NDArray[np.float32], reference: SileroVad
) -> None:
    """The slot plan writes its new pool over the donated old one: after the first run (which
    copies the pool made on the host), every run leaves the pool in the same memory, and the
    probabilities still equal the stream's own ``SileroVad`` run bit for bit."""
    step = SileroBatchedStep(16000, max_streams=4, client=client)
    assert step.plan.input_output_aliases == {2: 1}
    chunks = stream_audio(audio, 5, 6)
    slot = np.array([2], np.int32)
    got = [float((await step.run(chunks[0][None], slot))[0])]
    where = np.asarray(step.pool, copy=False).ctypes.data
    for c in chunks[1:]:
        got.append(float((await step.run(c[None], slot))[0]))
        assert step.pool.aliased and np.asarray(step.pool, copy=False).ctypes.data == where
    np.testing.assert_array_equal(np.array(got, np.float32), expected(reference, chunks))
