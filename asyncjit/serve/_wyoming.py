"""Wyoming (the protocol Home Assistant speaks to voice services) over a TCP connection.

Each message is a JSON header line, optionally followed by ``data_length`` bytes of more JSON data
and ``payload_length`` bytes of payload (``wyoming.event``). The events themselves are the
``wyoming`` package's types (``AudioStart``, ``AudioChunk``, ``VoiceStarted``, ``Pong``, ``Info``,
``Error``); only the framing is read here, because the package's reader needs asyncio streams and
puts no bound on a line or a payload. Here every part is bounded (``MAX_MESSAGE_BYTES``) and a
broken frame closes the connection with a reason instead of being skipped.

``describe`` is answered with ``info``; as ``Info`` has no VAD section, the service is listed
under an extra ``vad`` key of its data (clients ignore keys they do not know).
"""

from __future__ import annotations

import io
import warnings
from functools import partial
from typing import Any

import anyio

with (
    warnings.catch_warnings()
):  # wyoming.audio imports the stdlib's deprecated audioop (for its own converter)
    warnings.simplefilter("ignore", DeprecationWarning)
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, write_event
from wyoming.info import Attribution, Describe, Info
from wyoming.ping import Ping, Pong
from wyoming.vad import VoiceStarted, VoiceStopped

from ..audio import PcmFormat
from ..errors import AudioFormatError
from ..models._speech_tracker import SpeechEdge
from ._errors import ClientError, client_json, ping_token
from ._session import MAX_MESSAGE_BYTES, OUTBOX_ITEMS, PING, RAW, READ_BYTES, Connection, Utterance

__all__ = ["WyomingConnection", "encode_event", "info_event"]


_PONGS: dict[str, bytes] = {}
_CHUNK = AudioChunk(rate=16000, width=2, channels=1, audio=b"").event().type  # "audio-chunk"
_PING = Ping().event().type  # "ping"


def encode_event(event: Event) -> bytes:
    """An event in Wyoming's wire format, written by the ``wyoming`` package itself."""
    buf = io.BytesIO()
    write_event(event, buf)
    return buf.getvalue()


def info_event(name: str, description: str, languages: tuple[str, ...], version: str) -> Event:
    """``info`` for ``describe``: the package's ``Info``, plus a ``vad`` list in its data."""
    event = Info().event()
    attribution = Attribution(name="asyncjit", url="https://github.com/asyncjit/asyncjit")
    event.data["vad"] = [
        {
            "name": name,
            "attribution": attribution.to_dict(),
            "installed": True,
            "description": description,
            "version": version,
            "models": [
                {
                    "name": name,
                    "attribution": attribution.to_dict(),
                    "installed": True,
                    "description": description,
                    "version": version,
                    "languages": list(languages),
                }
            ],
        }
    ]
    return event


def _length(header: dict[str, Any], key: str) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ClientError("bad_frame", f"{key} must be a non-negative int, got {value!r}")
    if value > MAX_MESSAGE_BYTES:
        raise ClientError("too_large", f"{key} {value} is over the {MAX_MESSAGE_BYTES}-byte limit")
    return value


Frame = tuple[str, dict[str, Any], int, int]
"""A parsed frame: type, data (shared with the cache: read only), payload start and end in the buffer."""

_CACHE_ITEMS = 256
_CACHE_KEY_BYTES = 512
_HEADERS: dict[bytes, tuple[str, dict[str, Any], int, int]] = {}
_DATA: dict[tuple[bytes, bytes], dict[str, Any]] = {}


def _header(line: bytes) -> tuple[str, dict[str, Any], int, int]:
    """A header line checked: its type, data and section lengths."""
    header = client_json(line, "a header")
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ClientError("bad_frame", "a header must be a JSON object with a string 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise ClientError("bad_frame", "a header's 'data' must be a JSON object")
    return header["type"], data, _length(header, "data_length"), _length(header, "payload_length")


def _merge(data: dict[str, Any], section: bytes) -> dict[str, Any]:
    """The header's data updated with the data section's."""
    extra = client_json(section, "an event's data")
    if not isinstance(extra, dict):
        raise ClientError("bad_frame", "an event's data must be a JSON object")
    return {**data, **extra}


def parse_frames(
    buf: bytearray, *, end_of_stream: bool = False
) -> tuple[list[Frame], int, ClientError | None]:
    """The complete frames in ``buf``, where the first incomplete one starts, and the error that
    stopped parsing (the frames before a broken one are still served).

    Headers and data sections seen before come from a small cache (a client repeats the same few:
    ``audio-chunk`` of one length and format, ``ping``), so a steady stream of chunks costs no JSON
    decoding. Payloads are ``(start, end)`` offsets into ``buf``.
    """
    frames: list[Frame] = []
    pos = 0
    size = len(buf)
    try:
        while pos < size:
            nl = buf.find(b"\n", pos, pos + MAX_MESSAGE_BYTES + 1)
            if nl < 0:
                if size - pos > MAX_MESSAGE_BYTES:
                    raise ClientError("too_large", f"a header line is over {MAX_MESSAGE_BYTES} bytes")
                break
            line = bytes(buf[pos:nl])
            head = _HEADERS.get(line)
            if head is None:
                head = _header(line)
                _remember(_HEADERS, line, head, len(line))
            kind, data, data_length, payload_length = head
            stop = nl + 1 + data_length + payload_length
            if stop > size:
                break
            if data_length:
                section = bytes(buf[nl + 1 : nl + 1 + data_length])
                key = (line, section)
                merged = _DATA.get(key)
                if merged is None:
                    merged = _merge(data, section)
                    _remember(_DATA, key, merged, len(line) + data_length)
                data = merged
            start = stop - payload_length if payload_length else stop
            frames.append((kind, data, start, stop))
            pos = stop
    except ClientError as exc:
        return frames, pos, exc
    if end_of_stream and pos < size:
        return frames, pos, ClientError("bad_frame", "the connection ended in the middle of an event")
    return frames, pos, None


def _joined(buf: bytearray, spans: list[tuple[int, int]]) -> bytes:
    """The payloads at ``spans`` of ``buf`` as one bytes object (a read's audio)."""
    with memoryview(buf) as view:
        return b"".join([view[a:b] for a, b in spans])


def _remember(cache: dict[Any, Any], key: Any, value: Any, size: int) -> None:
    """Cache a parsed header or data section: short ones only, at most ``_CACHE_ITEMS`` (then
    start over, so a client sending ever-new headers cannot keep the cache full of them)."""
    if size <= _CACHE_KEY_BYTES:
        if len(cache) >= _CACHE_ITEMS:
            cache.clear()
        cache[key] = value


class WyomingConnection(Connection):
    """A Wyoming client: ``describe``, ``audio-start``/``-chunk``/``-stop``, ``ping``."""

    protocol = "wyoming"

    async def opening(self) -> None:
        self.server.admit(self)

    async def read_loop(self) -> None:
        buf = self._buf
        receive = partial(self.receive, READ_BYTES)
        self._fmt: PcmFormat | None = None
        self._wire: tuple[Any, ...] = ()
        self._checked: dict[str, Any] | None = None  # an audio-chunk's data that matched _wire
        while True:
            try:
                data = await receive()
            except anyio.EndOfStream:
                data = b""
            if data and self.fast_read(data):  # the steady state, without awaiting anything
                continue
            buf += data
            frames, pos, error = parse_frames(buf, end_of_stream=not data)
            if frames:
                await self.handle(frames, buf)
                await self.commit()
            del buf[:pos]  # only a partial message stays while the reader waits (see fast_read)
            if error is not None:
                raise error
            if not data:
                return

    def fast_read(self, data: bytes) -> bool:
        """The steady state in the transport's callback: a read of ``audio-chunk`` and ``ping``
        events whose audio is mono PCM at the model's rate (converted exactly, so the rows it makes
        are known before anything changes), with room for them in the stream's queue and the
        outbox. Anything else (a control event, a format to resample, a full queue, a broken
        frame) is left to the reader, untouched."""
        utt = self.utt
        if (
            utt is None
            or self._ops
            or self.reason is not None
            or self._outbox_closed
            or self.read_scope.cancel_called
            or len(self._outbox) >= OUTBOX_ITEMS
            or utt.converter._direct is None
            or len(utt.stream._queue) >= self.server.mux.queue_depth  # behind: no parse for nothing
        ):
            return False
        buf = self._buf
        mark = len(buf)
        buf += data
        frames, pos, error = parse_frames(buf)
        if error is not None:
            del buf[mark:]
            return False
        checked = self._checked
        wire = self._wire
        nbytes = 0
        for kind, fdata, start, stop in frames:
            if kind == _CHUNK and (
                fdata is checked  # the header cache hands out the same dict
                or (fdata.get("rate"), fdata.get("width"), fdata.get("channels")) == wire  # a timestamp
            ):
                nbytes += stop - start
            elif kind != _PING:
                del buf[mark:]
                return False
        converter, rechunker = utt.converter, utt.rechunker
        samples = (len(converter._rest) + nbytes) // converter._frame
        rows = (rechunker._count + samples) // rechunker.chunk_samples
        if rows and len(utt.stream._queue) + rows > self.server.mux.queue_depth:
            del buf[mark:]
            return False
        try:
            self._handle_now(frames, buf, utt)
        except ClientError as exc:
            self.end(exc.code, exc.message)
        except Exception as exc:  # a closed stream or mux: the reader ends the connection
            self.log.warning("connection.failed", error=repr(exc))
            self.end("internal_error", str(exc))
        del buf[:pos]
        return True

    def _handle_now(self, frames: list[Frame], buf: bytearray, utt: Utterance) -> None:
        """``handle`` for frames ``fast_read`` checked, without waiting; then ``commit``."""
        head: list[tuple[Any, ...]] = []  # pings before the first audio, then the audio op
        tail: list[tuple[Any, ...]] = []  # pings after it
        spans: list[tuple[int, int]] = []
        for kind, data, start, stop in frames:
            if kind == _CHUNK:
                spans.append((start, stop))
            else:
                (tail if spans else head).append((PING, ping_token(data.get("text"))))
        self.received += len(frames)
        if spans:
            rows = self._rows(utt, _joined(buf, spans))
            if len(rows):
                head.append(self._submit_now(utt, rows))
        self._ops = head + tail
        if self._ops:
            self._commit_now()

    async def handle(self, frames: list[Frame], buf: bytearray) -> None:
        """Act on one read's frames in order; consecutive audio goes to the converter at once
        (a broken frame still lets the audio before it through)."""
        audio: list[tuple[int, int]] = []  # payload spans of audio not converted yet
        slot = 0  # where its AUDIO op goes among the ops (pings queued after it stay after it)
        try:
            for kind, data, start, stop in frames:
                self.received += 1
                if kind == _CHUNK:
                    if data is not self._checked:  # the header cache hands out the same dict
                        self._check_chunk(data)
                        self._checked = data
                    if not audio:
                        slot = len(self._ops)
                    audio.append((start, stop))
                elif kind == _PING:
                    self.queue((PING, ping_token(data.get("text"))))  # Ping.from_event's text
                else:
                    if audio:
                        await self._audio_spans(buf, audio, slot)
                        audio = []
                    await self.control(Event(type=kind, data=data, payload=bytes(buf[start:stop]) or None))
        finally:
            if audio:
                await self._audio_spans(buf, audio, slot)

    def _check_chunk(self, data: dict[str, Any]) -> None:
        if self._fmt is None:
            raise ClientError("no_audio_start", "audio-chunk before audio-start; send audio-start first")
        if (data.get("rate"), data.get("width"), data.get("channels")) != self._wire:
            raise ClientError(
                "bad_audio",
                f"an audio-chunk's rate/width/channels {data.get('rate')}/{data.get('width')}/"
                f"{data.get('channels')} differ from audio-start's {self._wire}",
            )

    async def _audio_spans(self, buf: bytearray, spans: list[tuple[int, int]], slot: int) -> None:
        """Convert and submit the audio of several frames, its op placed at ``slot``."""
        later = self._ops[slot:]  # pings read after the first of these frames
        del self._ops[slot:]
        await self.audio(_joined(buf, spans))
        self._ops += later

    async def control(self, event: Event) -> None:
        """Every event but ``audio-chunk`` and ``ping``."""
        server = self.server
        if AudioStart.is_type(event.type):
            try:
                start = AudioStart.from_event(event)
            except (KeyError, TypeError, ValueError):
                raise ClientError("bad_frame", "audio-start needs rate, width and channels") from None
            try:
                fmt = PcmFormat.from_width(start.rate, start.width, start.channels)
            except AudioFormatError as exc:
                raise ClientError("bad_audio", str(exc)) from None
            self._wire = (start.rate, start.width, start.channels)
            self._fmt = fmt
            self._checked = None
            await self.begin(fmt)
        elif AudioStop.is_type(event.type):
            if self._fmt is None:
                raise ClientError("no_audio_start", "audio-stop before audio-start")
            await self.finish()
            self._fmt = None
            self._checked = None
        elif Describe.is_type(event.type):
            info = info_event(
                server.model.name, server.model.description, server.model.languages, server.version
            )
            self.queue((RAW, encode_event(info)))
        else:
            self.log.debug("event.ignored", type=event.type)

    def on_edge(self, utt: Utterance, edge: SpeechEdge) -> None:
        cls = VoiceStarted if edge.kind == "start" else VoiceStopped
        self.write(encode_event(cls(timestamp=edge.ms).event()))

    def on_pong(self, token: Any) -> None:
        data = _PONGS.get(token) if isinstance(token, str) else None
        if data is None:
            data = encode_event(Pong(text=token).event())
            if isinstance(token, str) and len(_PONGS) < 1024:  # clients reuse a few ping texts
                _PONGS[token] = data
        self.write(data)

    def on_close(self, code: str, message: str) -> None:
        if code != "done":
            self.write(encode_event(Error(text=message, code=code).event()))
