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
import json
import warnings
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

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
from ._errors import ClientError
from ._session import MAX_MESSAGE_BYTES, PING, RAW, Connection, Utterance

__all__ = ["WyomingConnection", "encode_event", "info_event"]


_PONGS: dict[str, bytes] = {}


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


class WyomingConnection(Connection):
    """A Wyoming client: ``describe``, ``audio-start``/``-chunk``/``-stop``, ``ping``."""

    protocol = "wyoming"

    async def opening(self) -> None:
        self.server.admit(self)

    async def read_event(self, reader: BufferedByteReceiveStream) -> Event | None:
        """The next event, or None at a clean end of the stream."""
        try:
            line = await reader.receive_until(b"\n", MAX_MESSAGE_BYTES)
        except anyio.DelimiterNotFound:
            raise ClientError("too_large", f"a header line is over {MAX_MESSAGE_BYTES} bytes") from None
        except anyio.IncompleteRead:
            if reader.buffer:
                raise ClientError("bad_frame", "the connection ended in the middle of a header") from None
            return None
        if len(line) > MAX_MESSAGE_BYTES:  # found in the read that crossed the limit
            raise ClientError("too_large", f"a header line is over {MAX_MESSAGE_BYTES} bytes")
        try:
            header = json.loads(line)
        except ValueError:
            raise ClientError("bad_frame", f"a header is not JSON: {bytes(line[:40])!r}") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise ClientError("bad_frame", "a header must be a JSON object with a string 'type'")
        data = header.get("data") or {}
        if not isinstance(data, dict):
            raise ClientError("bad_frame", "a header's 'data' must be a JSON object")
        data_length = _length(header, "data_length")
        payload_length = _length(header, "payload_length")
        try:
            if data_length:
                extra = json.loads(await reader.receive_exactly(data_length))
                if not isinstance(extra, dict):
                    raise ClientError("bad_frame", "an event's data must be a JSON object")
                data.update(extra)
            payload = await reader.receive_exactly(payload_length) if payload_length else None
        except anyio.IncompleteRead:
            raise ClientError("bad_frame", "the connection ended in the middle of an event") from None
        except ValueError:
            raise ClientError("bad_frame", "an event's data is not JSON") from None
        return Event(type=header["type"], data=data, payload=payload)

    async def read_loop(self) -> None:
        reader = BufferedByteReceiveStream(self.stream)
        server = self.server
        fmt: PcmFormat | None = None
        self._wire: tuple[Any, ...] = ()
        while True:
            event = await self.read_event(reader)
            if event is None:
                return
            self.received += 1
            kind = event.type
            if AudioChunk.is_type(kind):
                if fmt is None:
                    raise ClientError(
                        "no_audio_start", "audio-chunk before audio-start; send audio-start first"
                    )
                data = event.data
                if (data.get("rate"), data.get("width"), data.get("channels")) != self._wire:
                    raise ClientError(
                        "bad_audio",
                        f"an audio-chunk's rate/width/channels {data.get('rate')}/{data.get('width')}/"
                        f"{data.get('channels')} differ from audio-start's {self._wire}",
                    )
                await self.audio(event.payload or b"")
            elif Ping.is_type(kind):
                await self.put((PING, Ping.from_event(event).text))
            elif AudioStart.is_type(kind):
                try:
                    start = AudioStart.from_event(event)
                except (KeyError, TypeError, ValueError):
                    raise ClientError("bad_frame", "audio-start needs rate, width and channels") from None
                try:
                    fmt = PcmFormat.from_width(start.rate, start.width, start.channels)
                except AudioFormatError as exc:
                    raise ClientError("bad_audio", str(exc)) from None
                self._wire = (start.rate, start.width, start.channels)
                await self.begin(fmt)
            elif AudioStop.is_type(kind):
                if fmt is None:
                    raise ClientError("no_audio_start", "audio-stop before audio-start")
                await self.finish()
                fmt = None
            elif Describe.is_type(kind):
                info = info_event(
                    server.model.name, server.model.description, server.model.languages, server.version
                )
                await self.put((RAW, encode_event(info)))
            else:
                self.log.debug("event.ignored", type=kind)

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
