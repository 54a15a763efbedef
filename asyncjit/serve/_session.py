"""One connection: a reader task that turns audio into steps, a responder that answers in order.

The **reader** (the protocol's ``read_loop``) parses messages, converts audio to the model's
rate (``PcmConverter``), cuts it into rows of chunks (``Rechunker.push_rows``, no copy), submits
them to the connection's ``MuxStream`` in one ``submit_many_nowait`` and queues the futures as
ops; pings and control replies are ops too, queued after the audio sent before them. ``commit``
appends the ops queued so far to the **outbox** as one item (at most ``OUTBOX_ITEMS``): a
protocol that reads many messages at once (Wyoming) commits once per socket read.

The **responder** takes every item ready, waits for their futures, then runs their ops in order:
probabilities to a ``SpeechTracker`` (``push_many``), edges and pongs encoded into the write
buffer, one socket write for everything ready. Counters and the latency histogram are updated
once per wake-up, not per chunk.

What a read costs is mostly task switches and the event loop's own Python, so: a protocol's
``fast_read`` handles its steady state where the bytes arrive while the reader stays parked (the
asyncio transport's callback through ``Tap``; on trio the server's ``ReadHub``), and hands
anything else to the reader untouched. While the responder is parked, ``commit`` arms the read's
steps to answer the read the moment they are done, from the mux's completion
(``_answer_inline``: every ready read, then one write, then the next read's steps armed), so the
responder task is not woken at all; it still handles control ops, writes the socket does not
take at once and everything while it is awake, in the same order. Writes skip the checkpoint a stream's
``send`` makes when the socket takes the bytes at once; on asyncio the transport keeps reading
between reads (anyio pauses and resumes it around every ``receive``: two ``epoll_ctl``), on trio
the reader waits for readability before its ``recv`` (anyio's ``receive`` first tries one that
fails while the client is quiet).

Backpressure: a slow client stalls the responder's writes, the outbox fills, the reader stops
reading, and TCP pushes back; a connection holds at most ``OUTBOX_ITEMS`` messages and
``queue_depth`` chunks. The server's sweeper closes connections idle for ``idle_timeout`` and
writers stuck for ``write_timeout`` (counters compared between sweeps: no clock per message).
"""

from __future__ import annotations

import abc
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..audio import PcmConverter, PcmFormat
from ..errors import AudioFormatError, JitError
from ..models._speech_tracker import SpeechEdge, SpeechTracker
from ..scheduler import MuxStream, Rechunker, StepFuture
from ..scheduler._many import notify_when_done, unnotify
from ..scheduler._signal import Signal, signal_factory
from ..scheduler._stream import DONE
from ._errors import ClientError
from ._hub import Tap

if TYPE_CHECKING:
    from ._hub import ReadHub
    from ._server import VadServer

__all__ = ["Connection", "Utterance"]

OUTBOX_ITEMS = 8
"""Items (each the ops of one socket read) a connection holds between reader and responder."""
READ_BYTES = 8192
"""The most a connection reads at once: four Wyoming frames of 1,024 16-bit samples, eight
chunks; with ``OUTBOX_ITEMS`` it bounds what a connection holds when its client outpaces us."""
QUEUE_DEPTH = 16
"""Steps a connection's stream may have queued (the mux's ``queue_depth``): a read of a fast
client submits without waiting."""
MAX_MESSAGE_BYTES = 1 << 20
"""The largest message (Wyoming header, data or payload; WebSocket frame) a client may send."""

DIRECT_SOCKETS = True
"""Read and write the socket under a stream this module knows (anyio's asyncio transport, a trio
socket) directly, skipping a wake-up and two system calls per read; False: only through the
stream's own API (the path any other stream takes; tests run both)."""
BURST_READS = 8
"""Full raw reads (trio) in a row before the reader checkpoints anyway."""
FLUSH_BYTES = 8192
"""Buffered answers are written at once past this size (else when the outbox is empty, or before
waiting for a step)."""
LINGER = 2.0
"""Seconds a closing connection waits for the client to close too (see ``Connection._linger``)."""

SHUTDOWN_LINGER = 1.0
"""The linger once the server is draining (the whole shutdown must stay within a few seconds)."""

AUDIO, PING, STOP, RAW, CLOSE = range(5)


class Utterance:
    """One ``audio-start`` .. ``audio-stop``: a mux stream, its converter, chunker and tracker."""

    __slots__ = ("chunks", "converter", "probabilities", "rechunker", "samples", "stream", "tracker")

    def __init__(self, stream: MuxStream, fmt: PcmFormat, server: VadServer, probabilities: bool) -> None:
        model = server.model
        self.stream = stream
        self.converter = PcmConverter(fmt, model.sample_rate)
        self.rechunker = Rechunker(model.chunk_samples)
        self.tracker = SpeechTracker(model.sample_rate, window_size_samples=model.chunk_samples)
        self.probabilities = probabilities
        self.samples = 0  # model-rate samples received
        self.chunks = 0  # chunks answered


class Connection(abc.ABC):
    """The protocol-independent half of a connection; ``WyomingConnection`` and
    ``WebSocketConnection`` add ``read_loop`` and the encoders."""

    protocol = "?"

    def __init__(self, server: VadServer, stream: anyio.abc.ByteStream, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        self.log = server.log.bind(protocol=self.protocol, peer=peer, conn=next(server.conn_ids))
        self.utt: Utterance | None = None
        self.received = 0  # messages read (the sweeper's idle check compares it between sweeps)
        self.written = 0  # socket writes done
        self.writing = False
        self.reason: tuple[str, str] | None = None  # set by whoever decides the connection ends
        self.read_scope = anyio.CancelScope()
        self.scope = anyio.CancelScope()
        # the outbox: items of ops from the reader to the responder, at most OUTBOX_ITEMS
        self._outbox: deque[list[tuple[Any, ...]]] = deque()
        self._outbox_closed = False
        self._signal = signal_factory()
        self._room: Signal | None = None  # the reader waits for room in the outbox
        self._wake: Signal | None = None  # the responder waits for work
        self._watched: list[StepFuture] = []  # ... set when these steps are done
        self._inline = _Inline(self)
        self._drain = False  # an inline write left bytes in the transport: wait as send would
        # anyio's asyncio socket stream: read and written through its transport directly
        self._proto = getattr(stream, "_protocol", None) if DIRECT_SOCKETS else None
        self._transport = getattr(stream, "_transport", None) if hasattr(self._proto, "read_queue") else None
        self._raw = None if self._transport is not None or not DIRECT_SOCKETS else _raw_socket(stream)
        self._parked = False  # the reader waits in ``receive`` for the transport (asyncio)
        self._buf = bytearray()  # what the reader has read and not parsed yet (a partial message)
        self._hub_wake: Signal | None = None  # the parked reader's, while the hub reads for it
        self._handed: bytes | BaseException | None = None  # what the hub left to the reader
        self._fast = type(self).fast_read is not Connection.fast_read  # the protocol has one
        if self._transport is not None and self._fast:
            self._transport.set_protocol(Tap(self._proto, self))
        self._more = False  # the last raw read filled its buffer: more is likely waiting
        self._burst = 0  # raw reads in a row without waiting
        self._ops: list[tuple[Any, ...]] = []  # queued for the responder; ``commit`` sends them
        self._wbuf = bytearray()
        self._streams: set[MuxStream] = set()
        self._t0 = time.monotonic()
        self._closing = False  # the responder encoded the close reason
        self._close_sent = False  # ... and wrote it
        self.quiet = False  # a plain HTTP request: its close is logged at debug level

    def idle(self) -> bool:
        """Waiting for the client (nothing of ours queued or being written)."""
        return not self.writing and not self._outbox

    # -- provided by each protocol (abstract: a subclass missing one cannot be made) --------
    @abc.abstractmethod
    async def read_loop(self) -> None:
        """Provided by each protocol's connection class."""

    @abc.abstractmethod
    def on_edge(self, utt: Utterance, edge: SpeechEdge) -> None:
        """Provided by each protocol's connection class."""

    def on_probability(self, utt: Utterance, p: float) -> None:  # noqa: B027 (an optional hook: by default it does nothing)
        """A per-chunk probability (only when the client asked for them)."""

    @abc.abstractmethod
    def on_pong(self, token: Any) -> None:
        """Provided by each protocol's connection class."""

    def on_stopped(self, utt: Utterance) -> None:  # noqa: B027 (an optional hook: by default it does nothing)
        """The utterance's last chunk is answered."""

    @abc.abstractmethod
    def on_close(self, code: str, message: str) -> None:
        """Provided by each protocol's connection class."""

    def fast_read(self, data: bytes) -> bool:
        """Handle ``data`` in the transport's callback while the reader waits in ``receive``
        (asyncio only): True when it did (the reader is not woken), False to leave it to the
        reader (nothing changed). A protocol provides it for its steady state."""
        return False

    async def opening(self) -> None:  # noqa: B027 (an optional hook: by default it does nothing)
        """Anything the protocol sends or reads before the read loop (a handshake, admission);
        it sends through the outbox (``put((RAW, data))``), as the responder already runs."""

    # -- the reader's side -----------------------------------------------------------------
    async def receive(self, max_bytes: int = READ_BYTES) -> bytes:
        """``stream.receive``, but on anyio's asyncio stream the transport keeps reading between
        calls instead of being paused after each one and resumed before the next (two
        ``epoll_ctl`` calls and their Python per read). It pauses when bytes are left over (a
        backlog: take it first) and before the reader waits for room (``_hold``), so a
        connection's memory stays bounded as with ``stream.receive``.
        """
        transport = self._transport
        proto = self._proto
        if transport is None or proto is None:
            if self._raw is not None:
                return await self._receive_raw(max_bytes)
            return await self.stream.receive(max_bytes)
        queue = proto.read_queue
        if not queue:
            if proto.is_at_eof or proto.exception is not None or transport.is_closing():
                return await self.stream.receive(max_bytes)  # raises as the stream would
            transport.resume_reading()
            self._parked = True
            try:
                await proto.read_event.wait()
            finally:
                self._parked = False
            if not queue:  # the end of the stream, or an error: the stream says which
                return await self.stream.receive(max_bytes)
        chunk: bytes = queue.popleft()
        if len(chunk) > max_bytes:
            queue.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        if queue:
            transport.pause_reading()
        else:
            proto.read_event.clear()
        return chunk

    async def _receive_raw(self, max_bytes: int) -> bytes:
        """On trio: wait until the socket is readable, then ``recv`` (the stream's ``receive``
        first tries a ``recv`` that fails when the client has sent nothing yet, and checkpoints
        around it). After a full read more is likely waiting: read at once, with a checkpoint
        every ``BURST_READS`` reads so that a client sending without pause cannot hold the loop.
        With the server's ``ReadHub``, the reader parks and the hub reads for it (``_hub_readable``)."""
        import trio  # only a trio stream has a raw socket here

        sock = self._raw
        assert sock is not None
        hub = self.server.read_hub if self._fast else None
        if hub is not None and not self._more:
            return await self._receive_hub(hub, sock.fileno())
        if not self._more:
            await trio.lowlevel.wait_readable(sock)
        elif self._burst >= BURST_READS:
            self._burst = 0
            await trio.lowlevel.checkpoint()
        try:
            data: bytes = sock.recv(max_bytes)
        except (BlockingIOError, InterruptedError):
            self._more = False
            return await self.stream.receive(max_bytes)
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc
        if not data:
            raise anyio.EndOfStream
        self._more = len(data) == max_bytes
        self._burst = self._burst + 1 if self._more else 0
        return data

    async def _receive_hub(self, hub: ReadHub, fd: int) -> bytes:
        """Park with the socket in the hub until it hands over what ``fast_read`` left."""
        handed = self._handed
        if handed is None:
            wake = self._hub_wake = self._signal()
            hub.add(fd, self)
            self._parked = True
            try:
                await wake.wait()
            finally:
                self._parked = False
                self._hub_wake = None
                hub.discard(fd)
            handed = self._handed
        self._handed = None
        if isinstance(handed, BaseException):
            raise handed
        assert handed is not None
        return handed

    def _hub_readable(self) -> None:
        """The hub saw the parked reader's socket readable: read, answer it in ``fast_read`` or
        hand the data (or the end of the stream) to the reader."""
        sock = self._raw
        assert sock is not None
        try:
            data: bytes = sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._hand_over(anyio.BrokenResourceError(str(exc)))
            return
        if not data:
            self._hand_over(anyio.EndOfStream())
        elif not self.fast_read(data):
            self._hand_over(data)

    def _crashed(self, exc: Exception) -> None:
        """A bug of ours while handling this connection outside its tasks (a transport's callback,
        the read hub): it ends with ``internal_error``; the server and its other streams go on."""
        self.log.exception("connection.crashed", error=repr(exc))
        self.reason = self.reason or ("internal_error", repr(exc))
        self.scope.cancel()

    def _hand_over(self, item: bytes | BaseException) -> None:
        """Give the reader what the hub read (it takes it when it next receives) and wake it."""
        self._handed = item
        hub = self.server.read_hub
        if hub is not None and self._raw is not None:
            hub.discard(self._raw.fileno())
        if self._hub_wake is not None:
            self._hub_wake.set()

    def _hold(self) -> None:
        """The reader is about to wait (for room): stop reading the socket meanwhile."""
        if self._transport is not None:
            self._transport.pause_reading()

    def end(self, code: str, message: str) -> None:
        """Decide why the connection ends (the first reason wins) and stop the reader."""
        if self.reason is None:
            self.reason = (code, message)
        self.read_scope.cancel()

    def queue(self, item: tuple[Any, ...]) -> None:
        """An op for the responder, sent with the others at the next ``commit``."""
        self._ops.append(item)

    async def commit(self) -> None:
        """Send the queued ops as one outbox item (waits while the outbox is full: backpressure)."""
        if not self._ops:
            return
        outbox = self._outbox
        while len(outbox) >= OUTBOX_ITEMS and not self._outbox_closed:
            self._hold()
            room = self._room = self._signal()
            try:
                await room.wait()
            finally:
                self._room = None
        if self._outbox_closed:
            raise anyio.BrokenResourceError("the responder is gone")
        self._commit_now()

    def _commit_now(self) -> None:
        """``commit`` when the outbox has room. A responder parked for work is woken when the
        item's steps are done, not before: it would only park again on them (one task switch per
        read saved); while earlier items wait, the watch on the first one covers this one."""
        ops = self._ops
        self._ops = []
        self._outbox.append(ops)
        wake = self._wake
        if wake is not None and not self._watched and not wake.is_set():
            futures = [fut for op in ops if op[0] == AUDIO for fut in op[2] if fut._state < DONE]
            if futures:
                self._watched = notify_when_done(futures, self._inline)
            else:
                self._answer_inline()

    def _close_outbox(self) -> None:
        """No more items: the responder answers what is queued and returns."""
        self._outbox_closed = True
        for signal in (self._room, None if self._watched else self._wake):
            if signal is not None:
                signal.set()

    async def put(self, item: tuple[Any, ...]) -> None:
        """Queue one op and commit."""
        self._ops.append(item)
        await self.commit()

    async def begin(self, fmt: PcmFormat, *, probabilities: bool = False) -> None:
        """Start an utterance (ending the current one): open a mux stream for it."""
        if self.utt is not None:
            await self.finish()
        try:
            converter_check = fmt.checked()
        except AudioFormatError as exc:
            raise ClientError("bad_audio", str(exc)) from None
        stream = self.server.mux.open_stream(name=f"{self.protocol}:{self.peer}")
        self._hold()
        await stream.__aenter__()  # a slot is free or about to be (connections <= max_streams)
        self._streams.add(stream)
        self.utt = Utterance(stream, converter_check, self.server, probabilities)
        self.log.debug("audio.start", rate=fmt.rate, channels=fmt.channels, encoding=fmt.encoding)

    async def audio(self, data: bytes) -> None:
        """Convert and submit PCM (one message, or several a protocol read at once); queues the
        futures (commit to send them)."""
        utt = self.utt
        if utt is None:
            raise ClientError("no_audio_start", "audio arrived before audio-start; send audio-start first")
        await self._submit(utt, self._rows(utt, data))

    @staticmethod
    def _rows(utt: Utterance, data: bytes) -> Any:
        """The utterance's next PCM bytes converted and cut into the model's chunks (rows)."""
        try:
            samples = utt.converter.push(data)
        except AudioFormatError as exc:
            raise ClientError("bad_audio", str(exc)) from None
        utt.samples += samples.size
        return utt.rechunker.push_rows(samples)

    async def _submit(self, utt: Utterance, rows: Any) -> None:
        """Queue the rows' steps in one call; wait for room (committing first, so the responder
        can answer what is queued) only when the stream's queue is full."""
        if not len(rows):
            return
        if len(utt.stream._queue) + len(rows) <= self.server.mux.queue_depth:
            self._ops.append(self._submit_now(utt, rows))
            return
        self._hold()  # behind: wait for room (committing first, so the responder answers what is queued)
        await self.commit()
        futures = await self.server.mux.submit_many([utt.stream] * len(rows), rows)
        self._ops.append((AUDIO, utt, futures, time.perf_counter()))

    def _submit_now(self, utt: Utterance, rows: Any) -> tuple[Any, ...]:
        """Queue the rows' steps (room checked by the caller): the AUDIO op that answers them."""
        futures = self.server.mux.submit_many_nowait([utt.stream] * len(rows), rows, copy=False)  # fresh rows
        return (AUDIO, utt, futures, time.perf_counter())

    async def finish(self) -> None:
        """End the utterance: the converter's and chunker's last samples (zero-padded), then STOP."""
        utt = self.utt
        if utt is None:
            return
        self.utt = None
        tail = utt.converter.flush()
        utt.samples += tail.size
        await self._submit(utt, utt.rechunker.push_rows(tail))
        await self._submit(utt, utt.rechunker.flush(pad=True))
        await self.put((STOP, utt))

    # -- the responder's side --------------------------------------------------------------
    async def _respond(self) -> None:
        try:
            await self._respond_loop()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # the client went away while we wrote: nothing more can reach it
            if self.reason is None:
                self.reason = ("done", "the client went away")
            self.scope.cancel()

    async def _park(self) -> None:
        """Wait for the reader's next item (woken when its steps are done: see ``commit``)."""
        wake = self._wake = self._signal()
        try:
            await wake.wait()
        except BaseException:
            unnotify(self._watched)
            raise
        finally:
            self._wake = None
            self._watched = []

    async def _respond_loop(self) -> None:
        outbox = self._outbox
        while True:
            if self._drain:
                self._drain = False
                self.writing = True
                await self.stream.send(b"")
                self.writing = False
            if not outbox:
                if self._wbuf:
                    await self.flush()
                elif self._outbox_closed:
                    return
                else:
                    await self._park()
                continue
            ops = self._take_outbox()  # the items ready now are answered together
            waiting = [fut for op in ops if op[0] == AUDIO for fut in op[2] if not fut.done()]
            if waiting:
                if self._wbuf:  # write what is ready before waiting (under load the outbox
                    await self.flush()  # never empties: never hold answers back)
                await self.server.mux.wait_all(waiting)
            self._run_ops(ops)
            if self._closing:
                await self.flush()
                self._close_sent = True
                return
            if len(self._wbuf) > FLUSH_BYTES:
                await self.flush()

    def _answer_inline(self) -> None:
        """A parked responder's first item is answered (its steps are done): answer every item
        ready now here, in the mux's completion, and write; then watch the next item's steps the
        same way. The responder is woken only for what needs it: a control op, a write the socket
        does not take at once, bytes already waiting to be written."""
        self._watched = []
        wake = self._wake
        if wake is None or wake.is_set():
            return
        if self._wbuf or self.writing or self._closing:
            wake.set()
            return
        ops = self._take_ready()
        if ops:
            try:
                self._run_ops(ops)
            except Exception as exc:  # a bug of ours: this connection ends, the mux goes on
                self._crashed(exc)
                return
            data = bytes(self._wbuf)
            self._wbuf.clear()
            try:
                rest = self._write_now(data)
            except (anyio.BrokenResourceError, OSError):  # as in _respond: nothing more reaches it
                self.reason = self.reason or ("done", "the client went away")
                self.scope.cancel()
                return
            self.written += 1
            if rest is not None:  # the socket did not take it all: the responder waits, as send would
                self._wbuf += rest
                self._drain = not rest
                wake.set()
                return
        outbox = self._outbox
        if not outbox:
            if self._outbox_closed:
                wake.set()
            return
        undone = _undone(outbox[0])
        if undone:
            self._watched = notify_when_done(undone, self._inline)
        else:  # a control op (or a closed outbox) comes next: the responder handles it
            wake.set()

    def _take_ready(self) -> list[tuple[Any, ...]]:
        """The leading outbox items of audio and pings whose steps are all done, as one list."""
        outbox = self._outbox
        ops: list[tuple[Any, ...]] = []
        while outbox and _undone(outbox[0]) == []:
            ops += outbox.popleft()
        if ops and self._room is not None:
            self._room.set()
        return ops

    def _take_outbox(self) -> list[tuple[Any, ...]]:
        """Every item in the (non-empty) outbox as one list of ops, making room for the reader:
        answered together, with one wait and one write."""
        outbox = self._outbox
        ops = outbox.popleft()
        while outbox:
            ops += outbox.popleft()
        if self._room is not None:
            self._room.set()
        return ops

    def _run_ops(self, ops: list[tuple[Any, ...]]) -> None:
        """Answer the ops in order into the write buffer (the steps of AUDIO ops are done)."""
        stepped, started = 0, 0.0
        for op in ops:
            kind = op[0]
            if kind == AUDIO:
                stepped += self._answer(op[1], op[2])
                started = started or op[3]
            elif kind == PING:
                self.on_pong(op[1])
            elif kind == STOP:
                utt = op[1]
                for edge in utt.tracker.finish(utt.samples):
                    self.on_edge(utt, edge)
                self._close_stream(utt.stream)
                self.on_stopped(utt)
            elif kind == RAW:
                self._wbuf += op[1]
            else:  # CLOSE (the last op)
                self._closing = True
                self.on_close(op[1], op[2])
        if stepped:  # once per wake-up: the first submit's latency, and the count
            self.server.metrics.steps.record(stepped, time.perf_counter() - started)

    def _answer(self, utt: Utterance, futures: list[StepFuture]) -> int:
        """Feed finished steps' probabilities to the tracker, in order; the steps answered."""
        probability, tracker = self.server.model.probability, utt.tracker
        if not utt.probabilities:  # the tracker takes them all in one call
            probs = []
            for fut in futures:
                try:
                    probs.append(probability(fut.result()))
                except JitError as exc:
                    self._step_failed(exc)
            utt.chunks += len(probs)
            for edge in tracker.push_many(probs):
                self.on_edge(utt, edge)
            return len(futures)
        for fut in futures:
            try:
                p = probability(fut.result())
            except JitError as exc:
                self._step_failed(exc)
                continue
            utt.chunks += 1
            if utt.probabilities:
                self.on_probability(utt, p)
            edges = tracker.push(p)
            if edges:
                for edge in edges:
                    self.on_edge(utt, edge)
        return len(futures)

    def _step_failed(self, exc: JitError) -> None:
        code = "bad_audio" if isinstance(exc, AudioFormatError) else "internal_error"
        self.log.warning("step.failed", error=str(exc))
        self.end(code, str(exc))

    async def flush(self) -> None:
        data = bytes(self._wbuf)
        self._wbuf.clear()
        self.writing = True
        rest = self._write_now(data)
        if rest is not None:
            await self.stream.send(rest)
        self.writing = False
        self.written += 1

    def _write_now(self, data: bytes) -> bytes | None:
        """Write without the checkpoint a stream's ``send`` makes (a loop iteration per write):
        what ``send`` must still do (nothing: None; b"" on asyncio: wait until the transport's
        buffer drains, as ``send`` would, so a client that does not read still stalls us)."""
        transport = self._transport
        if transport is not None:
            event = getattr(self._proto, "write_event", None)
            if event is None or not event.is_set() or transport.is_closing():
                return data
            transport.write(data)
            return None if event.is_set() else b""
        if self._raw is None:
            return data
        try:
            sent = self._raw.send(data)
        except (BlockingIOError, InterruptedError):
            return data
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc
        return data[sent:] if sent < len(data) else None

    def write(self, data: bytes) -> None:
        self._wbuf += data

    def _close_stream(self, stream: MuxStream) -> None:
        stream.close()
        self._streams.discard(stream)

    # -- the whole connection --------------------------------------------------------------
    async def run(self) -> None:
        """Serve the connection until it ends; then tell the client why and close the socket."""
        server = self.server
        self.log.debug("connection.open")
        try:
            with self.scope:
                await self._run()
        finally:
            self._close_outbox()
            for stream in list(self._streams):
                self._close_stream(stream)
            code, message = self.reason or ("internal_error", "cancelled")
            server.metrics.closes.labels(self.protocol, code).inc()
            (self.log.debug if self.quiet else self.log.info)(
                "connection.closed",
                reason=code,
                detail=message,
                seconds=round(time.monotonic() - self._t0, 3),
                messages=self.received,
            )
            # Cancelled before the responder said why (a shutdown's grace ran out): say it now.
            # Then linger, shielded but short while the server drains, so no reset loses it.
            with anyio.CancelScope(shield=True):
                if not self._close_sent and not self.quiet:
                    with anyio.move_on_after(0.5):
                        await self._send_reason(code, message)
                with anyio.move_on_after(SHUTDOWN_LINGER if server.draining else LINGER):
                    await self._linger()
                with anyio.move_on_after(SHUTDOWN_LINGER):
                    await self._written()
                with anyio.move_on_after(1):
                    await self.stream.aclose()

    async def _written(self) -> None:
        """Wait until the bytes we wrote left the process: anyio's asyncio socket aborts its
        transport on ``aclose``, dropping what is still buffered (the close reason among it)."""
        transport = getattr(self.stream, "_transport", None)
        while transport is not None and not transport.is_closing() and transport.get_write_buffer_size():
            await anyio.sleep(0.01)

    async def _send_reason(self, code: str, message: str) -> None:
        try:
            if not self._closing:
                self.on_close(code, message)
            if self._wbuf and not self.writing:
                await self.flush()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.BusyResourceError, OSError):
            pass

    async def _linger(self) -> None:
        """Half-close, then read and drop what the client still sends until it closes too: closing
        a socket with unread input makes the kernel reset it, and the client could lose the close
        reason we just sent. Not on a transport closed already (the client reset it): there is
        nothing to half-close, and uvloop raises on it where the standard loop does nothing."""
        transport = getattr(self.stream, "_transport", None)  # asyncio's (None on trio)
        if transport is not None and transport.is_closing():
            return
        try:
            await self.stream.send_eof()
            while await self.stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            try:
                with self.read_scope:
                    tg.start_soon(self._respond)
                    await self.opening()
                    await self.read_loop()
                    self.end("done", "the client closed the connection")
                if self.reason is None:  # cancelled from outside: shutdown, idle or slow reader set it
                    self.reason = ("internal_error", "the reader was cancelled")
            except ClientError as exc:
                self.end(exc.code, exc.message)
            except (
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ):
                self.end("done", "the client went away")
            except JitError as exc:
                self.log.warning("connection.failed", error=str(exc))
                self.end("internal_error", str(exc))
            code, message = self.reason or ("done", "")
            if code == "done" and self.utt is not None:
                await self.finish()  # the client hung up mid-utterance: answer what it sent
            self.utt = None
            await self.put((CLOSE, code, message))
            self._close_outbox()


def _raw_socket(stream: anyio.abc.ByteStream) -> Any:
    """The socket under anyio's trio socket stream, read and written directly (None: not one)."""
    if type(stream).__module__ != "anyio._backends._trio":
        return None
    try:
        return stream.extra(anyio.abc.SocketAttribute.raw_socket)
    except anyio.TypedAttributeLookupError:
        return None


def _undone(item: list[tuple[Any, ...]]) -> list[StepFuture] | None:
    """An outbox item's steps not done yet, or None when it holds an op other than audio and
    pings (what ``_answer_inline`` leaves to the responder)."""
    undone: list[StepFuture] = []
    for op in item:
        kind = op[0]
        if kind == AUDIO:
            for fut in op[2]:
                if fut._state < DONE:
                    undone.append(fut)
        elif kind != PING:
            return None
    return undone


class _Inline:
    """The signal ``commit`` arms on a read's steps while the responder is parked: set by the mux
    when they are done, it answers them at once (``Connection._answer_inline``)."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def set(self) -> None:
        self.conn._answer_inline()

    def is_set(self) -> bool:
        return False

    async def wait(self) -> None:
        raise RuntimeError("nothing waits on an _Inline signal")
