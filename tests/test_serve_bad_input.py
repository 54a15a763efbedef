"""Bad input to ``asyncjit serve``: that connection is closed with a reason; the server and the
other streams keep going; nothing leaks (no connection, admission or mux stream left open).

Each case runs next to a good Wyoming stream of the built-in speech, which must still get the
edges ``SileroVad.speech_timestamps`` gives. One server per backend serves every case.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from serve_helpers import (
    BACKENDS,
    ThreadServer,
    close_writer,
    read_wyoming,
    running,
    speech_pcm,
    wait_until_clean,
    wyoming_frame,
)

pytest.importorskip("wyoming")
pytest.importorskip("websockets")

from test_serve import assert_edges_match, edges_of, reference_edges, wyoming_stream

pytestmark = pytest.mark.timeout(120)
START = {"rate": 16000, "width": 2, "channels": 1}


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest) -> Iterator[ThreadServer]:
    with running(str(request.param)) as srv:
        yield srv


def run_beside_a_good_stream(srv: ThreadServer, bad: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``bad()`` while a good client streams speech; check the good one; return ``bad()``'s result."""

    async def main() -> tuple[Any, list[Any]]:
        good = asyncio.ensure_future(wyoming_stream(srv.port("wyoming"), speech_pcm()))
        result = await bad()
        return result, await good

    result, events = asyncio.run(main())
    assert_edges_match(edges_of(events), reference_edges())
    wait_until_clean(srv)
    return result


async def wyoming_raw(srv: ThreadServer, *parts: bytes, close_after: bool = False) -> list[dict[str, Any]]:
    """Send raw bytes; every event the server sends until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port("wyoming"))
    for part in parts:
        writer.write(part)
    await writer.drain()
    if close_after:
        await close_writer(writer)
        return []
    events = await read_wyoming(reader)
    await close_writer(writer)
    return events


def closed_with(events: list[dict[str, Any]]) -> str:
    assert events and events[-1]["type"] == "error", events
    assert events[-1]["text"]
    return str(events[-1]["code"])


WYOMING_CASES: dict[str, tuple[list[bytes], str]] = {
    "garbage bytes": ([b"\x00\xffGARBAGE not json\n"], "bad_frame"),
    "header without a type": ([b'{"data": {}}\n'], "bad_frame"),
    "negative payload_length": ([b'{"type": "audio-chunk", "payload_length": -3}\n'], "bad_frame"),
    "data that is not JSON": ([b'{"type": "ping", "data_length": 4}\nabcd'], "bad_frame"),
    "absurd sample rate": ([wyoming_frame("audio-start", {**START, "rate": 10**9})], "bad_audio"),
    "absurd width": ([wyoming_frame("audio-start", {**START, "width": 7})], "bad_audio"),
    "chunk over 1 MB": ([b'{"type": "audio-chunk", "payload_length": 2000000}\n'], "too_large"),
    "header line over 1 MB": ([b"{" + b" " * (1 << 20) + b"\n"], "too_large"),
    "header nested too deeply to decode": ([b"[" * 100_000 + b"\n"], "bad_frame"),
    "ping text that is an object": ([wyoming_frame("ping", {"text": {"a": [1]}})], "bad_frame"),
    "audio before audio-start": (
        [wyoming_frame("audio-chunk", START, b"\0\0" * 512)],
        "no_audio_start",
    ),
    "audio-stop before audio-start": ([wyoming_frame("audio-stop")], "no_audio_start"),
    "chunk format differs from audio-start": (
        [
            wyoming_frame("audio-start", START),
            wyoming_frame("audio-chunk", {**START, "rate": 8000}, b"\0\0" * 64),
        ],
        "bad_audio",
    ),
}


@pytest.mark.parametrize("case", list(WYOMING_CASES))
def test_wyoming_bad_input_closes_that_connection_with_a_reason(server: ThreadServer, case: str) -> None:
    """Each kind of bad Wyoming input: an ``error`` event with its code, then the connection closes."""
    parts, code = WYOMING_CASES[case]
    events = run_beside_a_good_stream(server, lambda: wyoming_raw(server, *parts))
    assert closed_with(events) == code


async def stream_then_send(srv: ThreadServer, frames: int, tail: bytes) -> list[dict[str, Any]]:
    """Reach the steady state (``audio-start``, then ``frames`` speech frames each answered by its
    ``pong``: the reader parks, reads are answered where they arrive), then send ``tail``; every
    event the server sends until it closes the connection."""
    from wyoming.event import async_read_event

    audio = speech_pcm()[: frames * 2048]
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port("wyoming"))
    writer.write(wyoming_frame("audio-start", START))
    for i in range(0, len(audio), 2048):
        writer.write(wyoming_frame("audio-chunk", START, audio[i : i + 2048]))
        writer.write(wyoming_frame("ping", {"text": str(i)}))
        await writer.drain()
        event = await async_read_event(reader)
        while event is not None and event.type != "pong":
            event = await async_read_event(reader)
        assert event is not None and event.data["text"] == str(i)
    writer.write(tail)
    await writer.drain()
    events = await read_wyoming(reader)
    await close_writer(writer)
    return events


STREAMING_TAILS: dict[str, tuple[bytes, str]] = {
    "garbage bytes": (b"\x00\xffGARBAGE not json\n", "bad_frame"),
    "nesting too deep to decode": (b'{"type": "ping", "data": ' + b"[" * 100_000 + b"}\n", "bad_frame"),
    "ping text that is a list": (wyoming_frame("ping", {"text": [1, 2]}), "bad_frame"),
    "chunk over 1 MB": (b'{"type": "audio-chunk", "payload_length": 2000000}\n', "too_large"),
    "chunk format differs": (
        wyoming_frame("audio-chunk", {**START, "rate": 8000}, b"\0\0" * 64),
        "bad_audio",
    ),
    "audio-start again with an absurd rate": (
        wyoming_frame("audio-start", {**START, "rate": 10**9}),
        "bad_audio",
    ),
}


@pytest.mark.parametrize("case", list(STREAMING_TAILS))
def test_wyoming_bad_input_while_streaming(server: ThreadServer, case: str) -> None:
    """Bad input after the connection reached its steady state (the reader parked, reads answered
    where they arrive): the chunks before it are answered, then the ``error`` and the close."""
    tail, code = STREAMING_TAILS[case]
    events = run_beside_a_good_stream(server, lambda: stream_then_send(server, 8, tail))
    assert closed_with(events) == code


def test_a_bug_in_the_callback_path_ends_only_its_connection(
    server: ThreadServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception escaping ``fast_read`` (a bug of ours, forced here by a marker in the data)
    closes that connection with ``internal_error``; the server keeps streaming to the others."""
    from asyncjit.serve import _wyoming

    fast_read = _wyoming.WyomingConnection.fast_read

    def buggy(self: Any, data: bytes) -> bool:
        if b"boom" in data:
            raise RuntimeError("a bug in the callback path")
        return fast_read(self, data)

    monkeypatch.setattr(_wyoming.WyomingConnection, "fast_read", buggy)
    boom = wyoming_frame("ping", {"text": "boom"})
    events = run_beside_a_good_stream(server, lambda: stream_then_send(server, 4, boom))
    assert closed_with(events) == "internal_error"


def test_wyoming_disconnect_mid_chunk_leaks_nothing(server: ThreadServer) -> None:
    """A client that promises a 4,096-byte payload, sends 100 bytes and hangs up: the server closes
    that connection (``bad_frame``: ended inside an event) and frees its stream."""

    def closes() -> float:
        return float(
            server.call(
                lambda: server.server.metrics.sample(
                    "asyncjit_serve_closes_total", protocol="wyoming", reason="bad_frame"
                )
            )
        )

    before = closes()
    header = json.dumps({"type": "audio-chunk", "data": START, "payload_length": 4096}).encode() + b"\n"
    parts = [
        wyoming_frame("audio-start", START),
        wyoming_frame("audio-chunk", START, b"\1\0" * 3000),
        header,
        b"\0" * 100,
    ]
    run_beside_a_good_stream(server, lambda: wyoming_raw(server, *parts, close_after=True))
    assert closes() == before + 1


async def websocket_bad(srv: ThreadServer, send: list[Any]) -> tuple[list[dict[str, Any]], int | None]:
    """Messages received and the close code, after sending ``send`` (bytes: binary, dict: JSON)."""
    import websockets

    messages: list[dict[str, Any]] = []
    async with websockets.connect(f"ws://127.0.0.1:{srv.port('websocket')}/", max_size=None) as ws:
        for item in send:
            await ws.send(json.dumps(item) if isinstance(item, dict) else item)
        try:
            while True:
                messages.append(json.loads(await ws.recv()))
        except websockets.ConnectionClosed as exc:
            return messages, exc.rcvd.code if exc.rcvd else None


WEBSOCKET_CASES: dict[str, tuple[list[Any], str, int]] = {
    "text that is not JSON": (["{nope"], "bad_frame", 1002),
    "unknown message type": ([{"type": "dance"}], "bad_frame", 1002),
    "absurd sample rate": ([{"type": "start", "sample_rate": 10**9}], "bad_audio", 1007),
    "unknown format": ([{"type": "start", "format": "mp3"}], "bad_audio", 1007),
    "format that is a list": ([{"type": "start", "format": ["s16le"]}], "bad_audio", 1007),
    "text nested too deeply to decode": (["[" * 100_000], "bad_frame", 1002),
    "ping id that is an object": ([{"type": "ping", "id": {"n": 1}}], "bad_frame", 1002),
    "frame over 1 MB": ([b"\0" * (1 << 20 | 2)], "too_large", 1009),
}


@pytest.mark.parametrize("case", list(WEBSOCKET_CASES))
def test_websocket_bad_input_closes_that_connection_with_a_reason(server: ThreadServer, case: str) -> None:
    """Each kind of bad WebSocket input: the close frame's status (and, where the protocol still
    allows it, an ``error`` message with the code first)."""
    send, code, status = WEBSOCKET_CASES[case]
    messages, got = run_beside_a_good_stream(server, lambda: websocket_bad(server, send))
    assert messages[0]["type"] == "hello"
    assert got == status
    if code != "too_large":  # websockets itself fails an oversized frame: only the close frame says why
        assert messages[-1] == {"type": "error", "code": code, "message": messages[-1]["message"]}


def test_websocket_port_answers_garbage_with_http_400(server: ThreadServer) -> None:
    """Bytes that are not an HTTP request on the WebSocket port: ``400``, then the close."""

    async def bad() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port("websocket"))
        writer.write(b"\x16\x03\x01 not http at all\r\n\r\n")
        data = await reader.read()
        await close_writer(writer)
        return data

    data = run_beside_a_good_stream(server, bad)
    assert data.startswith(b"HTTP/1.1 400")
