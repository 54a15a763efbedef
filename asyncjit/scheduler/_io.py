"""Chunk sources that read ahead of the compute: WAV files and any async iterator of arrays.

A ``ChunkSource`` is an async iterator of fixed-size float32 chunks, filled by a background task
into a bounded buffer of about ``read_ahead`` chunks, so a read (a file read in a worker thread,
or the next item of a network iterator) runs while the consumer computes on earlier chunks. A
WAV file is opened (and first read) in a worker thread, then read ``read_ahead // 2`` chunks at a
time, so reads are amortised and the next one starts while half the buffer is still there to
consume; reads run on the loop while they are fast (the page cache) and in worker threads once
one was slow (``INLINE_READ_SECONDS``). The chunks of one read cross to the consumer as one
block (one memory-stream item of at most ``read_ahead // 2`` chunks, not one per chunk): with
hundreds of streams each reading its own file, per-chunk hand-offs and thread hops were what the
loop spent its time on (200 WAV streams through one ``StreamMux``: 15k chunks/s with reads of 4
chunks handed over one by one; see ``examples/many_streams.py``).

Use it as a context manager, which owns the background task (structured concurrency)::

    async with wav_chunks("speech.wav", 512, sample_rate=16000) as chunks:
        async for chunk in chunks:
            prob = await stream.step(chunk)

Leaving early stops the reader; a read error is raised from the ``async with``.
"""

from __future__ import annotations

import contextlib
import time
import wave
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from os import PathLike
from types import TracebackType

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import numpy as np
import numpy.typing as npt
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._groups import single_failure

INLINE_READ_SECONDS = 2e-3
"""WAV reads (and decodes) run on the loop's thread while each takes less than this, the loop-lag
budget: a worker-thread round trip costs 35-65 us of loop wake-up and, with hundreds of streams,
GIL contention among the workers, far more than a read from the page cache (12-25 us for 16
chunks; 200 WAV streams through one ``StreamMux``: 46k chunks/s with every read in a worker
thread, 58-60k with later reads on the loop). The bound is generous because a read on a busy
loop also waits for the GIL (up to 2.4 ms measured). A slower read (a cold disk, a network file
system) sends the next ``THREADED_READS`` to worker threads, then one is tried on the loop again."""
THREADED_READS = 8

__all__ = [
    "ChunkSource",
    "ChunkSourceStatistics",
    "Rechunker",
    "WavHeader",
    "array_chunks",
    "read_wav_header",
    "wav_chunks",
]

Chunk = npt.NDArray[np.float32]
Emit = Callable[[list[Chunk]], Awaitable[None]]
Filler = Callable[[Emit], Awaitable[None]]
"""A producer: ``await emit(chunks)`` for each block of chunks, in order; ``emit`` waits while the
buffer is full."""


@attrs.frozen
class ChunkSourceStatistics:
    name: str
    produced: int
    consumed: int
    buffered: int
    read_ahead: int


class ChunkSource:
    """An async iterator of chunks produced ahead by a background task (see the module docstring)."""

    def __init__(self, name: str, fill: Filler, read_ahead: int, block: int = 1) -> None:
        if read_ahead < 1:
            raise ValueError(f"read_ahead must be >= 1 chunk, got {read_ahead}")
        self.name = name
        self.read_ahead = read_ahead
        self._fill = fill
        self._block = max(1, min(block, read_ahead))  # chunks per memory-stream item, at most
        self._blocks = max(1, read_ahead // self._block)  # items buffered: ~read_ahead chunks
        self._recv: MemoryObjectReceiveStream[list[Chunk]] | None = None
        self._local: deque[Chunk] = deque()  # the rest of the block being consumed
        self._tg: anyio.abc.TaskGroup | None = None
        self.produced = 0
        self.consumed = 0

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<ChunkSource {self.name} consumed={s.consumed} buffered={s.buffered}/{s.read_ahead}>"

    def statistics(self) -> ChunkSourceStatistics:
        buffered = self.produced - self.consumed
        return ChunkSourceStatistics(self.name, self.produced, self.consumed, buffered, self.read_ahead)

    async def __aenter__(self) -> ChunkSource:
        if self._tg is not None:
            raise RuntimeError(f"{self!r} is already open")
        send, recv = anyio.create_memory_object_stream[list[Chunk]](self._blocks)
        self._recv = recv
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._run_fill, send, name=f"ChunkSource {self.name} reader")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, recv = self._tg, self._recv
        assert tg is not None and recv is not None
        recv.close()  # a reader blocked on a full buffer stops
        tg.cancel_scope.cancel()
        failure: BaseException | None = None
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            failure = single_failure(group)
            if failure is None:
                raise
        raise failure  # outside the handler: the reader's own error, not a group

    async def _run_fill(self, send: MemoryObjectSendStream[list[Chunk]]) -> None:
        block = self._block

        async def emit(chunks: list[Chunk]) -> None:
            if isinstance(chunks, np.ndarray):  # one chunk, as fillers before blocks passed it
                chunks = [chunks]
            for i in range(0, len(chunks), block):  # never more than ``block`` per item
                part = chunks[i : i + block]
                await send.send(part)
                self.produced += len(part)

        async with send:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._fill(emit)  # suppressed: the consumer left early

    def __aiter__(self) -> ChunkSource:
        return self

    async def __anext__(self) -> Chunk:
        local = self._local
        if local:  # from the block received last: no wait, but cancellation still reaches here
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            recv = self._recv
            if recv is None:
                raise RuntimeError(f"{self!r}: iterate inside `async with` (it owns the reader task)")
            try:
                local.extend(await recv.receive())
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
        self.consumed += 1
        return local.popleft()


class Rechunker:
    """Cuts a stream of 1-D arrays of any lengths into float32 chunks of ``chunk_samples``."""

    def __init__(self, chunk_samples: int) -> None:
        if chunk_samples < 1:
            raise ValueError(f"chunk_samples must be >= 1, got {chunk_samples}")
        self.chunk_samples = chunk_samples
        self._pending: list[Chunk] = []
        self._count = 0

    def push(self, samples: npt.ArrayLike) -> list[Chunk]:
        """Add samples; return the chunks now complete."""
        arr = np.asarray(samples, dtype=np.float32).reshape(-1)
        if arr.size:
            self._pending.append(arr)
            self._count += arr.size
        n = self.chunk_samples
        if self._count < n:
            return []
        data = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        whole = (data.size // n) * n
        # one copy for the block (never alias the caller's array), then rows of it
        chunks = list(data[:whole].reshape(-1, n).copy())
        rest = data[whole:]
        self._pending = [rest.copy()] if rest.size else []
        self._count = rest.size
        return chunks

    def flush(self, pad: bool = True) -> list[Chunk]:
        """The last partial chunk, zero-padded (``pad``) or dropped."""
        if not self._count or not pad:
            self._pending, self._count = [], 0
            return []
        last = np.zeros(self.chunk_samples, np.float32)
        data = np.concatenate(self._pending)
        last[: data.size] = data
        self._pending, self._count = [], 0
        return [last]


@attrs.frozen
class WavHeader:
    sample_rate: int
    channels: int
    sample_width: int
    frames: int


def read_wav_header(path: str | PathLike[str]) -> WavHeader:
    """Rate, channels, bytes per sample and frame count of a PCM WAV file (blocking, small)."""
    with wave.open(str(path), "rb") as w:
        return WavHeader(w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes())


class _WavReader:
    """Blocking reads of float32 mono samples in [-1, 1); run in a worker thread."""

    def __init__(self, path: str, sample_rate: int | None) -> None:
        self._wav = wave.open(path, "rb")  # noqa: SIM115 - closed by close(), after many reads
        try:
            self.rate = self._wav.getframerate()
            self.channels = self._wav.getnchannels()
            self.width = self._wav.getsampwidth()
            if sample_rate is not None and self.rate != sample_rate:
                raise ValueError(
                    f"{path}: sample rate is {self.rate} Hz, expected {sample_rate} Hz (resample first)"
                )
            if self.width not in (1, 2, 3, 4):
                raise ValueError(
                    f"{path}: {8 * self.width}-bit samples are not supported (8/16/24/32-bit PCM)"
                )
        except BaseException:
            self._wav.close()
            raise

    def read(self, frames: int) -> npt.NDArray[np.float32]:
        raw = self._wav.readframes(frames)
        return _decode(raw, self.width, self.channels)

    def close(self) -> None:
        self._wav.close()


def _decode(raw: bytes, width: int, channels: int) -> npt.NDArray[np.float32]:
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    else:
        x = (np.frombuffer(raw, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return x.astype(np.float32, copy=False)


def wav_chunks(
    path: str | PathLike[str],
    chunk_samples: int,
    *,
    read_ahead: int = 32,
    sample_rate: int | None = None,
    pad_last: bool = True,
) -> ChunkSource:
    """Chunks of a PCM WAV file (mono mix, float32 in [-1, 1)), read ahead in a worker thread.

    Args:
        read_ahead: chunks buffered ahead of the consumer (32 x 512 samples: 64 KiB, 1 s at
            16 kHz); each worker-thread read fetches half of them.
        sample_rate: if given, a file at another rate raises ``ValueError`` (no resampling).
        pad_last: zero-pad the last partial chunk (else drop it).
    """
    file = str(path)
    chunks_per_read = max(1, read_ahead // 2)
    per_read = chunks_per_read * chunk_samples

    async def fill(emit: Emit) -> None:
        cutter = Rechunker(chunk_samples)

        def open_and_read() -> tuple[_WavReader, list[Chunk], bool]:  # a cold file: in a worker
            reader = _WavReader(file, sample_rate)
            try:
                samples = reader.read(per_read)
                return reader, cutter.push(samples), samples.size < per_read
            except BaseException:
                reader.close()
                raise

        reader, block, last = await anyio.to_thread.run_sync(open_and_read)
        try:
            threaded = 0  # reads left to run in a worker thread after a slow one

            def read_block() -> tuple[list[Chunk], bool]:  # read, decode, cut
                samples = reader.read(per_read)
                return cutter.push(samples), samples.size < per_read

            await emit(block)
            while not last:
                if threaded:
                    threaded -= 1
                    block, last = await anyio.to_thread.run_sync(read_block)
                else:  # on the loop: timed, since a slow disk would hold the loop up
                    t0 = time.perf_counter()
                    block, last = read_block()
                    if time.perf_counter() - t0 > INLINE_READ_SECONDS:
                        threaded = THREADED_READS
                await emit(block)
            await emit(cutter.flush(pad_last))
        finally:
            reader.close()

    return ChunkSource(f"wav:{file}", fill, read_ahead, block=chunks_per_read)


def array_chunks(
    source: AsyncIterable[npt.ArrayLike],
    chunk_samples: int | None = None,
    *,
    read_ahead: int = 8,
    pad_last: bool = True,
    name: str = "arrays",
) -> ChunkSource:
    """Prefetch an async iterator of arrays (a socket, a decoder) ``read_ahead`` items ahead.

    Args:
        chunk_samples: cut the 1-D arrays into chunks of this many samples; None passes each
            array through as float32.
    """

    async def fill(emit: Emit) -> None:
        if chunk_samples is None:
            async for item in source:
                await emit([np.asarray(item, dtype=np.float32)])
            return
        cutter = Rechunker(chunk_samples)
        async for item in source:
            await emit(cutter.push(item))  # the chunks of one item: one block
        await emit(cutter.flush(pad_last))

    return ChunkSource(name, fill, read_ahead, block=max(1, read_ahead // 2))
