"""WebSocket (and plain HTTP) connections, with the ``websockets`` package's sans-I/O protocol.

The ``ServerProtocol`` of ``websockets`` parses the handshake and the frames and builds every
byte sent back; the connection only moves bytes between it and an anyio socket, so the same code
runs on asyncio and on trio. A request without ``Upgrade: websocket`` gets a plain HTTP answer:
``/`` the microphone page, ``/health``, ``/metrics`` (the ``--metrics`` port serves only those).

Protocol (documented in ``docs/serve.md``): the server sends a JSON **hello**; the client may send
a JSON ``start`` (rate, format, channels, probabilities), then binary frames of PCM, JSON ``ping``
and ``stop``; the server answers with ``speech_start``/``speech_end`` (and per-chunk
``probability`` when asked), ``pong``, ``stopped`` and, before closing, ``error`` with a code.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.datastructures import Headers
from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol

from ..audio import PCM_ENCODINGS, PcmFormat
from ..errors import AudioFormatError
from ..models._speech_tracker import SpeechEdge
from ._errors import CLOSE_CODES, ClientError, client_json, ping_token
from ._session import MAX_MESSAGE_BYTES, PING, RAW, READ_BYTES, Connection, Utterance

__all__ = ["HttpConnection", "WebSocketConnection", "hello_message"]

PROTOCOL_NAME = "asyncjit-vad/1"
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def hello_message(model_name: str, sample_rate: int, chunk_samples: int) -> dict[str, Any]:
    """The first message of every WebSocket: what the server expects unless ``start`` says otherwise."""
    return {
        "type": "hello",
        "protocol": PROTOCOL_NAME,
        "model": model_name,
        "sample_rate": sample_rate,
        "format": "s16le",
        "channels": 1,
        "chunk_samples": chunk_samples,
        "formats": list(PCM_ENCODINGS),
        "max_message_bytes": MAX_MESSAGE_BYTES,
    }


def _response(status: int, content_type: str, body: bytes) -> Response:
    headers = Headers(
        [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close")]
    )
    return Response(status, _REASONS.get(status, "Error"), headers, body)


class HttpConnection:
    """A plain HTTP request (``--metrics`` port, or no Upgrade header): answer it and close."""

    @staticmethod
    def answer(server: Any, request: Request) -> Response:
        path = urlsplit(request.path).path
        status, content_type, body = server.http_route(path)
        return _response(status, content_type, body)


class WebSocketConnection(Connection):
    """A WebSocket client (or a plain HTTP request on the WebSocket port)."""

    protocol = "websocket"
    http_only = False

    async def opening(self) -> None:
        proto = self.proto = ServerProtocol(max_size=MAX_MESSAGE_BYTES)
        request: Request | None = None
        while request is None:
            data = await self.stream.receive()
            proto.receive_data(data)
            events = proto.events_received()
            if events:
                request = events[0]  # type: ignore[assignment]
            elif proto.handshake_exc is not None:
                pending = b"".join(proto.data_to_send())
                if not pending:
                    pending = self._plain(proto, 400, b"not an HTTP request\n")
                await self.put((RAW, pending))
                raise ClientError("bad_frame", f"not an HTTP request ({proto.handshake_exc})")
        assert request is not None
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if self.http_only or not upgrade:
            proto.send_response(HttpConnection.answer(self.server, request))
            await self.put((RAW, b"".join(proto.data_to_send())))
            self.quiet = True
            raise ClientError("done", f"HTTP {request.path}")
        response = proto.accept(request)
        proto.send_response(response)
        handshake = b"".join(proto.data_to_send())
        if response.status_code != 101:
            await self.put((RAW, handshake))
            raise ClientError("bad_frame", f"WebSocket handshake refused ({response.status_code})")
        await self.put((RAW, handshake))
        self.server.admit(self)  # after the handshake, so a refusal can say why in a close frame
        query = parse_qs(urlsplit(request.path).query)
        self.probabilities = query.get("probabilities", ["0"])[0] in ("1", "true", "yes")
        model = self.server.model
        self.default_format = PcmFormat(model.sample_rate)
        await self.put(
            (RAW, self._json_bytes(hello_message(model.name, model.sample_rate, model.chunk_samples)))
        )

    @staticmethod
    def _plain(proto: ServerProtocol, status: int, body: bytes) -> bytes:
        return b"".join(proto.data_to_send()) or _serialize(_response(status, "text/plain", body))

    def send_json(self, message: dict[str, Any]) -> None:
        self.write(self._json_bytes(message))

    def _json_bytes(self, message: dict[str, Any]) -> bytes:
        """``message`` as a text frame (nothing once the WebSocket is closing)."""
        proto = self.proto
        if proto.state is not State.OPEN:
            return b""
        proto.send_text(json.dumps(message).encode())
        return b"".join(proto.data_to_send())

    async def read_loop(self) -> None:
        proto = self.proto
        text: bytearray | None = None  # a fragmented text message being received
        while True:
            data = await self.receive(READ_BYTES)
            proto.receive_data(data)
            for frame in proto.events_received():
                if not isinstance(frame, Frame):
                    continue
                self.received += 1
                op = frame.opcode
                if op is Opcode.BINARY or (op is Opcode.CONT and text is None):
                    if self.utt is None:
                        await self.begin(self.default_format, probabilities=self.probabilities)
                    await self.audio(bytes(frame.data))
                elif op is Opcode.TEXT or op is Opcode.CONT:
                    text = bytearray(frame.data) if op is Opcode.TEXT else (text or bytearray()) + frame.data
                    if len(text) > MAX_MESSAGE_BYTES:
                        raise ClientError("too_large", "a text message is over the 1 MB limit")
                    if frame.fin:
                        await self.control(bytes(text))
                        text = None
                elif op is Opcode.CLOSE:
                    await self._send_pending()
                    return
            await self._send_pending()
            if proto.state is not State.OPEN:
                exc = proto.parser_exc
                if isinstance(exc, PayloadTooBig):
                    raise ClientError("too_large", f"a frame is over the {MAX_MESSAGE_BYTES}-byte limit")
                raise ClientError("bad_frame", f"not a WebSocket frame ({exc})")

    async def _send_pending(self) -> None:
        """Queue the protocol's own frames (pongs, close) and commit the read's ops."""
        pending = self.proto.data_to_send()
        if pending:
            self.queue((RAW, b"".join(pending)))
        await self.commit()

    async def control(self, text: bytes) -> None:
        """A JSON message from the client: ``start``, ``stop`` or ``ping``."""
        message = client_json(text, "a text message")
        if not isinstance(message, dict):
            raise ClientError("bad_frame", "a text message must be a JSON object with a 'type'")
        kind = message.get("type")
        if kind == "ping":
            self.queue((PING, ping_token(message.get("id"))))
        elif kind == "start":
            fmt = PcmFormat(
                message.get("sample_rate", self.default_format.rate),
                message.get("channels", 1),
                message.get("format", "s16le"),
            )
            try:
                fmt.checked()
            except AudioFormatError as exc:
                raise ClientError("bad_audio", str(exc)) from None
            await self.begin(fmt, probabilities=bool(message.get("probabilities", self.probabilities)))
        elif kind == "stop":
            await self.finish()
        else:
            raise ClientError("bad_frame", f"unknown message type {kind!r}; one of start, stop, ping")

    def on_edge(self, utt: Utterance, edge: SpeechEdge) -> None:
        self.send_json(
            {
                "type": "speech_start" if edge.kind == "start" else "speech_end",
                "timestamp_ms": edge.ms,
                "sample": edge.sample,
            }
        )

    def on_probability(self, utt: Utterance, p: float) -> None:
        self.send_json({"type": "probability", "chunk": utt.chunks - 1, "p": round(p, 4)})

    def on_pong(self, token: Any) -> None:
        self.send_json({"type": "pong", "id": token})

    def on_stopped(self, utt: Utterance) -> None:
        self.send_json({"type": "stopped", "chunks": utt.chunks, "samples": utt.samples})

    def on_close(self, code: str, message: str) -> None:
        proto = getattr(self, "proto", None)
        if proto is None or proto.state is not State.OPEN:
            return
        if code != "done":
            self.send_json({"type": "error", "code": code, "message": message})
        proto.send_close(CLOSE_CODES[code][0], code)
        for data in proto.data_to_send():
            self.write(data)


class MetricsConnection(WebSocketConnection):
    """A connection to the ``--metrics`` port: plain HTTP only."""

    protocol = "http"
    http_only = True


def _serialize(response: Response) -> bytes:
    head = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in response.headers.raw_items())
    return head.encode() + b"\r\n" + bytes(response.body)
