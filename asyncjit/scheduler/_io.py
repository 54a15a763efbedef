"""Chunk sources that read ahead of the compute: audio files and any async iterator of arrays.

A ``ChunkSource`` is an async iterator of fixed-size float32 chunks, filled by a background task
into a bounded buffer of about ``read_ahead`` chunks, so a read (a file read in a worker thread,
or the next item of a network iterator) runs while the consumer computes on earlier chunks. An
audio file (any format ``asyncjit.audio`` reads, made float32 mono at the wanted rate) is opened
(and first read) in a worker thread, then read ``read_ahead // 2`` chunks at a time, so reads
are amortised and the next one starts while half the buffer is still there to consume; reads run
on the loop while they are fast (the page cache) and in worker threads once one was slow
(``INLINE_READ_SECONDS``). The chunks of one read cross to the consumer as one block (one
memory-stream item of at most ``read_ahead // 2`` chunks, not one per chunk): with hundreds of
streams each reading its own file, per-chunk hand-offs and thread hops were what the loop spent
its time on (200 WAV streams through one ``StreamMux``: 15k chunks/s with reads of 4 chunks
handed over one by one; see ``examples/many_streams.py``).

Use it as a context manager, which owns the background task (structured concurrency)::

    async with wav_chunks("speech.wav", 512, sample_rate=16000) as chunks:
        async for chunk in chunks:
            prob = await stream.step(chunk)

Leaving early stops the reader; a read error is raised from the ``async with``.
"""

from __future__ import annotations

import contextlib
import time
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

from ..audio import AudioConverter, audio_info, check_finite, open_audio
from ..errors import AudioFormatError, InvalidArgumentError
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
            raise InvalidArgumentError(f"read_ahead must be >= 1 chunk, got {read_ahead}")
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
            raise InvalidArgumentError(f"chunk_samples must be >= 1, got {chunk_samples}")
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

    def push_rows(self, samples: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Add samples the caller hands over (a fresh 1-D float32 array it will not touch again);
        return the chunks now complete as rows ``[k, chunk_samples]``, views of ``samples`` when
        nothing was pending (no copy: for a consumer that copies rows anyway, like the mux).
        Same chunks as ``push``."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if not samples.size and not self._count:
            return samples.reshape(0, self.chunk_samples)
        n = self.chunk_samples
        if self._pending:
            self._pending.append(samples)
            samples = np.concatenate(self._pending)
        whole = (samples.size // n) * n
        rest = samples[whole:]
        self._pending = [rest] if rest.size else []  # a view of an array nobody else holds
        self._count = rest.size
        return samples[:whole].reshape(-1, n)

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
    sample_width: int  # bytes per sample; 0 for compressed formats (FLAC, OGG, MP3)
    frames: int


_WIDTHS = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8}


def read_wav_header(path: str | PathLike[str]) -> WavHeader:
    """Rate, channels, bytes per sample and frame count of an audio file (blocking, small).

    Raises what ``asyncjit.audio.open_audio`` raises (``AudioFormatError`` or an ``OSError``).
    """
    info = audio_info(path)
    return WavHeader(info.sample_rate, info.channels, _WIDTHS.get(info.subtype, 0), info.frames)


class _AudioReader:
    """Blocking block reads of float32 mono samples at the wanted rate (soundfile + soxr)."""

    def __init__(self, path: str, sample_rate: int | None) -> None:
        self._file, self.info = open_audio(path)  # AudioFormatError / OSError name the file
        try:
            rate = self.info.sample_rate if sample_rate is None else sample_rate
            self._convert = AudioConverter(self.info.sample_rate, rate, self.info.channels)
        except BaseException:
            self._file.close()
            raise
        self._read = 0  # input frames read so far, for error positions
        self._done = False

    def read(self, frames: int) -> tuple[npt.NDArray[np.float32], bool]:
        """About ``frames`` frames converted, and whether the file is at its end."""
        if self._done:
            return np.zeros(0, np.float32), True
        try:
            block = self._file.read(frames, dtype="float32", always_2d=True)
        except RuntimeError as exc:  # soundfile.LibsndfileError: a decode failure mid-file
            where = f"{self.info.path!r}: decoding failed after {self._read} frames"
            raise AudioFormatError(f"{where} ({exc})") from exc
        check_finite(block, repr(self.info.path), self._read)
        self._read += len(block)
        out = self._convert.push(block)
        if len(block) < frames:
            self._done = True
            tail = self._convert.flush()
            if tail.size:
                out = np.concatenate([out, tail])
        return out, self._done

    def close(self) -> None:
        self._file.close()


def wav_chunks(
    path: str | PathLike[str],
    chunk_samples: int,
    *,
    read_ahead: int = 32,
    sample_rate: int | None = None,
    pad_last: bool = True,
) -> ChunkSource:
    """Chunks of an audio file (WAV, FLAC, OGG, ...) as float32 mono, read ahead of the consumer.

    Any width and channel count; channels are averaged. The checks of
    ``asyncjit.audio.open_audio`` run when the reader starts, and their error (an
    ``AudioFormatError`` naming the file and the problem, or the ``OSError`` for a path that
    cannot be opened) is raised from the ``async with``.

    Args:
        read_ahead: chunks buffered ahead of the consumer (32 x 512 samples: 64 KiB, 1 s at
            16 kHz); each read fetches half of them.
        sample_rate: the rate wanted; a file at another rate is resampled with soxr as it is
            read (None: the file's rate).
        pad_last: zero-pad the last partial chunk (else drop it).
    """
    file = str(path)
    chunks_per_read = max(1, read_ahead // 2)
    per_read = chunks_per_read * chunk_samples

    async def fill(emit: Emit) -> None:
        cutter = Rechunker(chunk_samples)

        def open_and_read() -> tuple[_AudioReader, list[Chunk], bool]:  # a cold file: in a worker
            reader = _AudioReader(file, sample_rate)
            try:
                samples, last = reader.read(per_read)
                return reader, cutter.push(samples), last
            except BaseException:
                reader.close()
                raise

        reader, block, last = await anyio.to_thread.run_sync(open_and_read)
        try:
            threaded = 0  # reads left to run in a worker thread after a slow one

            def read_block() -> tuple[list[Chunk], bool]:  # read, decode, convert, cut
                samples, last = reader.read(per_read)
                return cutter.push(samples), last

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

    return ChunkSource(f"audio:{file}", fill, read_ahead, block=chunks_per_read)


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
