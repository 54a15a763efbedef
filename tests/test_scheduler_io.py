"""Chunk sources (``asyncjit.scheduler``): WAV decoding, read-ahead, early exit, async iterators."""

from __future__ import annotations

import contextlib
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import anyio
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncjit.errors import AudioFormatError
from asyncjit.runtime import Client
from asyncjit.scheduler import (
    HostBatchedStep,
    Rechunker,
    StreamMux,
    array_chunks,
    read_wav_header,
    run_unbatched,
    toy_step,
    wav_chunks,
)


def write_wav(path: Path, pcm: np.ndarray, rate: int = 16000, width: int = 2, channels: int = 1) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def pcm16(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-32768, 32767, n, dtype=np.int16)


@pytest.mark.anyio
async def test_wav_chunks_decode_and_pad(tmp_path: Path) -> None:
    """16-bit mono: chunks equal pcm / 32768, and the last partial chunk is zero-padded."""
    pcm = pcm16(1000)
    write_wav(tmp_path / "a.wav", pcm)
    async with wav_chunks(tmp_path / "a.wav", 256, read_ahead=4, sample_rate=16000) as src:
        got = [c async for c in src]
        assert src.statistics().consumed == 4
    assert [c.shape for c in got] == [(256,)] * 4 and all(c.dtype == np.float32 for c in got)
    want = np.zeros(1024, np.float32)
    want[:1000] = pcm / 32768.0
    assert np.array_equal(np.concatenate(got), want)
    assert read_wav_header(tmp_path / "a.wav").frames == 1000


@pytest.mark.anyio
async def test_wav_stereo_8_and_24_bit(tmp_path: Path) -> None:
    """Stereo mixes to mono; 8-bit and 24-bit PCM scale to [-1, 1)."""
    left, right = pcm16(64, 1), pcm16(64, 2)
    write_wav(tmp_path / "s.wav", np.stack([left, right], axis=1), channels=2)
    u8 = np.arange(64, dtype=np.uint8) * 4
    write_wav(tmp_path / "u8.wav", u8, width=1)
    v24 = np.array([0, 1, -1, 2**23 - 1, -(2**23)], np.int32)
    raw24 = np.frombuffer(v24.astype("<i4").tobytes(), np.uint8).reshape(-1, 4)[:, :3].copy()
    write_wav(tmp_path / "p24.wav", raw24, width=3)
    async with wav_chunks(tmp_path / "s.wav", 64, pad_last=False) as src:
        (stereo,) = [c async for c in src]
    async with wav_chunks(tmp_path / "u8.wav", 64) as src:
        (eight,) = [c async for c in src]
    async with wav_chunks(tmp_path / "p24.wav", 5) as src:
        (twenty_four,) = [c async for c in src]
    assert np.allclose(stereo, (left / 32768.0 + right / 32768.0) / 2, atol=1e-7)
    assert np.allclose(eight, (u8.astype(np.float32) - 128) / 128)
    assert np.allclose(twenty_four, v24 / 2**23)


@pytest.mark.anyio
async def test_reader_errors_are_raised_from_the_context(tmp_path: Path) -> None:
    """A reader error (here a truncated file, found in the worker thread) is raised, not swallowed."""
    write_wav(tmp_path / "r.wav", pcm16(100), rate=8000)
    (tmp_path / "r.wav").write_bytes((tmp_path / "r.wav").read_bytes()[:-40])
    with pytest.raises(AudioFormatError, match=r"'.*r.wav' is truncated: .* declares 100 frames.* holds 80"):
        async with wav_chunks(tmp_path / "r.wav", 64, sample_rate=16000) as src:
            async for _ in src:
                pass


@pytest.mark.anyio
async def test_a_file_at_another_rate_is_resampled_as_it_is_read(tmp_path: Path) -> None:
    """Block by block through soxr's stream resampler equals resampling the whole file at once."""
    from asyncjit.audio import resample

    pcm = (np.sin(np.arange(8000) * 0.05) * 20000).astype(np.int16)
    write_wav(tmp_path / "r.wav", pcm, rate=8000)
    async with wav_chunks(tmp_path / "r.wav", 64, read_ahead=4, sample_rate=16000, pad_last=False) as src:
        got = np.concatenate([c async for c in src])
    whole = resample(pcm, 8000, 16000)
    assert got.size == whole.size // 64 * 64
    np.testing.assert_allclose(got, whole[: got.size], atol=1e-6)


@pytest.mark.anyio
async def test_reads_ahead_while_the_consumer_is_busy_and_stops_on_early_exit(tmp_path: Path) -> None:
    """Before the first chunk is consumed the reader has filled read_ahead chunks; leaving early
    stops it and leaves no task running."""
    write_wav(tmp_path / "long.wav", pcm16(64 * 100))
    before = len(anyio.get_running_tasks())
    async with wav_chunks(tmp_path / "long.wav", 64, read_ahead=6) as src:
        with anyio.fail_after(20):
            while src.statistics().buffered < 6:
                await anyio.sleep(0.005)
        assert src.statistics().consumed == 0
        first = await src.__anext__()
        assert first.shape == (64,)
    assert src.statistics().produced < 100
    assert len(anyio.get_running_tasks()) == before


@pytest.mark.anyio
async def test_fast_reads_stay_on_the_loop_slow_ones_go_to_worker_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is opened in a worker thread; reads from the page cache then run on the loop (no
    thread hop each); once a read is slower than INLINE_READ_SECONDS the next THREADED_READS go
    to worker threads, then the loop tries again. The chunks are the same either way."""
    from asyncjit.scheduler import _io

    pcm = pcm16(64 * 40)
    write_wav(tmp_path / "a.wav", pcm)
    want = (pcm / 32768.0).astype(np.float32).reshape(40, 64)
    hops: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(getattr(fn, "__name__", type(fn).__name__))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(_io.anyio.to_thread, "run_sync", counting)
    # A mock clock: every read takes 0 s, so a loaded machine cannot make one look slow.
    monkeypatch.setattr(_io, "time", SimpleNamespace(perf_counter=lambda: 0.0))

    async def read_all() -> np.ndarray:
        async with wav_chunks(tmp_path / "a.wav", 64, read_ahead=4) as src:  # 2 chunks per read
            return np.stack([c async for c in src])

    np.testing.assert_array_equal(await read_all(), want)
    assert hops == ["open_and_read"]  # the open and first read; 20 more reads, none in a thread

    hops.clear()
    monkeypatch.setattr(_io, "INLINE_READ_SECONDS", -1.0)  # every read on the loop is "slow"
    monkeypatch.setattr(_io, "THREADED_READS", 3)
    np.testing.assert_array_equal(await read_all(), want)
    # 20 more reads (the last one finds the end): loop, 3 threads, loop, 3 threads, ...
    assert hops.count("read_block") == 15 and hops[0] == "open_and_read"


@pytest.mark.anyio
async def test_read_ahead_bounds_chunks_not_items_and_iteration_sees_cancellation() -> None:
    """An item of 100 chunks is handed over in blocks of read_ahead // 2: the source holds about
    read_ahead chunks (at most one block more, the one being consumed), not read_ahead items.
    A consumer in a cancelled scope stops at once, even with chunks of a block still in hand."""

    async def big_items() -> AsyncIterator[np.ndarray]:
        for _ in range(20):
            yield np.zeros(100 * 64, np.float32)

    async with contextlib.aclosing(big_items()) as items, array_chunks(items, 64, read_ahead=8) as src:
        await src.__anext__()
        await anyio.wait_all_tasks_blocked()  # the reader has read all it will before we consume
        st = src.statistics()
        assert st.read_ahead == 8 and st.buffered <= 8 + 4 - 1 and st.produced <= 12, st
        n = 0
        with anyio.CancelScope() as scope:
            scope.cancel()
            async for _ in src:
                n += 1
        assert n == 0


async def _pieces(lengths: list[int]) -> AsyncIterator[np.ndarray]:
    start = 0
    for n in lengths:
        yield np.arange(start, start + n, dtype=np.float64)
        start += n
        await anyio.sleep(0)


@pytest.mark.anyio
async def test_array_chunks_rechunks_and_passes_through() -> None:
    """Arrays of any length become fixed chunks; chunk_samples=None passes them through as float32."""
    async with array_chunks(_pieces([3, 10, 1, 7]), 4) as src:
        got = [c async for c in src]
    assert np.array_equal(np.concatenate(got), np.r_[np.arange(21), 0, 0, 0].astype(np.float32))
    async with array_chunks(_pieces([3, 5])) as src:
        raw = [c async for c in src]
    assert [c.shape for c in raw] == [(3,), (5,)] and raw[0].dtype == np.float32


@pytest.mark.anyio
async def test_array_chunks_source_error_propagates() -> None:
    """An error in the async iterator surfaces from the ``async with``."""

    async def broken() -> AsyncIterator[np.ndarray]:
        yield np.zeros(4)
        raise ConnectionError("socket closed")

    with pytest.raises(ConnectionError, match="socket closed"):
        async with array_chunks(broken(), 4) as src:
            async for _ in src:
                pass


@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 16), st.booleans())
def test_rechunker_preserves_samples(lengths: list[int], n: int, pad: bool) -> None:
    """Concatenated chunks equal the input (plus zero padding, or minus the partial tail)."""
    cutter = Rechunker(n)
    data = np.arange(sum(lengths), dtype=np.float32)
    out: list[np.ndarray] = []
    start = 0
    for k in lengths:
        out += cutter.push(data[start : start + k])
        start += k
    out += cutter.flush(pad)
    flat = np.concatenate(out) if out else np.zeros(0, np.float32)
    assert all(c.shape == (n,) for c in out)
    whole = len(data) // n * n
    if pad and len(data) > whole:
        assert np.array_equal(flat[: len(data)], data) and not flat[len(data) :].any()
    else:
        assert np.array_equal(flat, data[:whole])


@pytest.mark.anyio
async def test_wav_into_stream_mux_matches_reference(tmp_path: Path) -> None:
    """Integration: a WAV file read ahead and stepped through a StreamMux equals the unbatched run."""
    write_wav(tmp_path / "m.wav", pcm16(16 * 20, 3))
    with Client("cpu", inline="never") as client:
        step = HostBatchedStep(client, max_batch_size=4, num_slots=4)
        async with StreamMux(step) as mux, mux.open_stream() as s, wav_chunks(tmp_path / "m.wav", 16) as src:
            pairs = [(c, await s.step(c)) async for c in src]
    ref = run_unbatched(toy_step, [c for c, _ in pairs], np.zeros(4, np.float32))
    assert np.allclose([o for _, o in pairs], ref, atol=1e-6)
