"""The server's batched path: many Wyoming frames per socket read, one outbox item per read.

A client that writes a whole file at once (or in pieces cut anywhere) gets the same answers in
the same order as one that writes frame by frame: every ``pong`` after the chunks sent before its
``ping``, the edges at ``speech_timestamps``'s times, and a broken frame closes the connection only
after the good frames before it are answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from serve_helpers import BACKENDS, read_wyoming, running, speech_pcm, wait_until_clean, wyoming_frame

pytest.importorskip("wyoming")

from test_serve import assert_edges_match, reference_edges

from asyncjit.scheduler import Rechunker
from asyncjit.serve._session import MAX_MESSAGE_BYTES
from asyncjit.serve._wyoming import parse_frames

pytestmark = pytest.mark.timeout(120)
START = {"rate": 16000, "width": 2, "channels": 1}
FRAME_BYTES = 2048  # 1,024 samples: two Silero chunks


def speech_with_pings() -> tuple[bytes, int]:
    """audio-start, each speech frame followed by ``ping`` with its index, audio-stop, ``ping done``."""
    pcm = speech_pcm()
    parts = [wyoming_frame("audio-start", START)]
    frames = 0
    for i in range(0, len(pcm) - FRAME_BYTES + 1, FRAME_BYTES):
        parts.append(wyoming_frame("audio-chunk", START, pcm[i : i + FRAME_BYTES]))
        parts.append(wyoming_frame("ping", {"text": str(frames)}))
        frames += 1
    parts += [wyoming_frame("audio-stop"), wyoming_frame("ping", {"text": "done"})]
    return b"".join(parts), frames


@pytest.mark.parametrize("direct", [True, False], ids=["direct socket", "stream API"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("piece", [None, 777], ids=["one write", "pieces of 777 bytes"])
def test_pongs_follow_their_chunks_in_order(
    backend: str, piece: int | None, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pongs come in ping order, each after every chunk sent before its ping (the server's chunk
    count when the client reads a pong is at least the chunks before it), edges as the reference;
    with the socket read and written directly, and through the stream's API only."""
    from asyncjit.serve import _session

    monkeypatch.setattr(_session, "DIRECT_SOCKETS", direct)
    data, frames = speech_with_pings()
    with running(backend) as srv:

        async def main() -> list[tuple[dict[str, Any], float]]:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port("wyoming"))
            step = piece or len(data)
            for i in range(0, len(data), step):
                writer.write(data[i : i + step])
                await writer.drain()
            from wyoming.event import async_read_event

            seen = []
            while True:
                event = await async_read_event(reader)
                assert event is not None, "the server closed before the last pong"
                counted = 0.0
                if event.type == "pong":
                    counted = srv.call(lambda: srv.server.metrics.sample("asyncjit_serve_chunks_total"))
                seen.append(({"type": event.type, **event.data}, counted))
                if event.type == "pong" and event.data["text"] == "done":
                    writer.close()
                    return seen

        seen = asyncio.run(main())
        pongs = [(e["text"], counted) for e, counted in seen if e["type"] == "pong"]
        assert [t for t, _ in pongs] == [*map(str, range(frames)), "done"]
        for index, counted in pongs[:-1]:
            assert counted >= 2 * (int(index) + 1), f"pong {index} came before its chunks were answered"
        kinds = {"voice-started": "start", "voice-stopped": "end"}
        edges = [(kinds[e["type"]], e["timestamp"]) for e, _ in seen if e["type"] in kinds]
        assert_edges_match(edges, reference_edges())
        wait_until_clean(srv)


@pytest.mark.parametrize("timestamps", [False, True], ids=["plain", "with timestamps"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_real_time_client_is_served_in_the_callback_path(
    backend: str, timestamps: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends a frame and its ping, then waits for the pong (a live microphone's
    pattern): the steady state is handled while the reader task stays parked (asyncio: in the
    transport's callback; trio: by the server's ReadHub) and answered from the mux's completion;
    the answers are those of the general path (pongs in order, edges as the reference). Chunks
    with a timestamp (every data section different) take the same path."""
    from asyncjit.serve import _wyoming
    from asyncjit.serve._hub import read_hub_available

    taken: list[bool] = []
    parked: list[bool] = []  # called from the transport's callback (the reader task waits)
    fast_read = _wyoming.WyomingConnection.fast_read

    def counting(self: Any, data: bytes) -> bool:
        parked.append(self._parked)
        done = fast_read(self, data)
        taken.append(done)
        return done

    monkeypatch.setattr(_wyoming.WyomingConnection, "fast_read", counting)
    pcm = speech_pcm()
    with running(backend) as srv:

        async def main() -> list[dict[str, Any]]:
            from wyoming.event import async_read_event

            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port("wyoming"))
            writer.write(wyoming_frame("audio-start", START))
            seen: list[dict[str, Any]] = []
            for n, i in enumerate(range(0, len(pcm) - FRAME_BYTES + 1, FRAME_BYTES)):
                data = {**START, "timestamp": n * 64} if timestamps else START  # a client stamping its chunks
                writer.write(wyoming_frame("audio-chunk", data, pcm[i : i + FRAME_BYTES]))
                writer.write(wyoming_frame("ping", {"text": str(n)}))
                await writer.drain()
                while True:
                    event = await async_read_event(reader)
                    assert event is not None
                    seen.append({"type": event.type, **event.data})
                    if event.type == "pong":
                        assert event.data["text"] == str(n)
                        break
            writer.write(wyoming_frame("audio-stop") + wyoming_frame("ping", {"text": "done"}))
            await writer.drain()
            while seen[-1].get("text") != "done":
                event = await async_read_event(reader)
                assert event is not None
                seen.append({"type": event.type, **event.data})
            writer.close()
            return seen

        seen = asyncio.run(main())
        kinds = {"voice-started": "start", "voice-stopped": "end"}
        assert_edges_match(
            [(kinds[e["type"]], e["timestamp"]) for e in seen if e["type"] in kinds], reference_edges()
        )
        wait_until_clean(srv)
    frames = len(pcm) // FRAME_BYTES
    # every audio read after the first (audio-start comes with nothing else) takes it
    assert sum(taken) >= frames - 2, (sum(taken), frames, len(taken))
    # asyncio: from the transport's callback; trio: from the server's ReadHub (Linux)
    if backend == "asyncio" or read_hub_available():
        assert sum(parked) >= frames - 2, (sum(parked), frames)


@pytest.mark.parametrize("backend", BACKENDS)
def test_good_frames_before_a_broken_one_are_answered(backend: str) -> None:
    """One write: audio, a ping, then garbage. The pong comes, then the ``bad_frame`` error."""
    data = (
        wyoming_frame("audio-start", START)
        + wyoming_frame("audio-chunk", START, speech_pcm()[: 4 * FRAME_BYTES])
        + wyoming_frame("ping", {"text": "before"})
        + b"this is not json\n"
    )
    with running(backend) as srv:

        async def main() -> list[dict[str, Any]]:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port("wyoming"))
            writer.write(data)
            await writer.drain()
            events = await read_wyoming(reader)
            writer.close()
            return events

        events = asyncio.run(main())
        assert [e["type"] for e in events] == ["pong", "error"]
        assert events[0]["text"] == "before" and events[1]["code"] == "bad_frame"
        wait_until_clean(srv)
        assert srv.call(lambda: srv.server.metrics.sample("asyncjit_serve_chunks_total")) == 8


def test_parse_frames_returns_complete_frames_and_where_the_rest_starts() -> None:
    chunk = wyoming_frame("audio-chunk", START, b"\1\2" * 512)
    ping = wyoming_frame("ping", {"text": "x"})
    buf = bytearray(chunk + ping + chunk[:30])
    frames, pos, error = parse_frames(buf)
    assert error is None and pos == len(chunk) + len(ping)
    (kind, data, start, stop), (kind2, data2, start2, stop2) = frames
    assert (kind, data["rate"], data["width"], data["channels"]) == ("audio-chunk", 16000, 2, 1)
    assert bytes(buf[start:stop]) == b"\1\2" * 512
    assert (kind2, data2["text"], start2, stop2) == ("ping", "x", pos, pos)
    # parsed again (from the cache): the same frames
    again, pos2, _ = parse_frames(bytearray(chunk + ping))
    assert again == frames and pos2 == pos
    # the stream ends inside the third frame
    _, _, error = parse_frames(buf, end_of_stream=True)
    assert error is not None and error.code == "bad_frame"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"[1, 2]\n", "bad_frame"),
        (b'{"type": "ping", "data_length": 5}\nnope!', "bad_frame"),
        (b'{"type": "audio-chunk", "payload_length": -1}\n', "bad_frame"),
        (b'{"type": "audio-chunk", "payload_length": %d}\n' % (MAX_MESSAGE_BYTES + 1), "too_large"),
        (b"{" * (MAX_MESSAGE_BYTES + 2), "too_large"),
    ],
    ids=["not an object", "data not json", "negative length", "payload too large", "endless header"],
)
def test_parse_frames_keeps_the_frames_before_a_broken_one(data: bytes, code: str) -> None:
    ping = wyoming_frame("ping", {"text": "ok"})
    frames, pos, error = parse_frames(bytearray(ping + data))
    assert [f[0] for f in frames] == ["ping"] and pos == len(ping)
    assert error is not None and error.code == code


def test_rechunker_push_rows_gives_the_chunks_push_gives() -> None:
    rng = np.random.default_rng(3)
    pieces = [rng.standard_normal(int(n)).astype(np.float32) for n in rng.integers(0, 1500, 40)]
    by_push, by_rows = Rechunker(512), Rechunker(512)
    got: list[np.ndarray] = []
    want: list[np.ndarray] = []
    for piece in pieces:
        want += by_push.push(piece.copy())
        rows = by_rows.push_rows(piece.copy())
        assert rows.shape[1:] == (512,) and rows.dtype == np.float32
        got += list(rows)
    want += by_push.flush()
    got += by_rows.flush()
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.anyio
async def test_one_wake_up_accepts_every_connection_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients that connected while the server was busy sit in the listen backlog; the accepting
    task takes all of them at its next wake-up (anyio's ``Listener.serve`` takes one per wake-up,
    which under load left a burst of new clients waiting seconds)."""
    import socket

    import anyio

    from asyncjit.serve import _server

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # in the backlog
    wakes = 0
    real_wait = anyio.wait_readable

    scope = anyio.CancelScope()

    async def counting_wait(obj: Any) -> None:
        nonlocal wakes
        wakes += 1
        if wakes > 1:  # the second wait: the backlog was drained by the first
            scope.cancel()
        await real_wait(obj)

    monkeypatch.setattr(_server.anyio, "wait_readable", counting_wait)
    started: list[Any] = []

    class Group:  # the connections' task group, recording what the accepting task starts
        def start_soon(self, fn: Any, cls: Any, sock: socket.socket) -> None:
            started.append(sock)

    server = _server.VadServer.__new__(_server.VadServer)
    server.log = _server.get_logger("test")
    with scope, anyio.fail_after(10):
        await server._accept(listener, _server.WyomingConnection, Group())  # type: ignore[arg-type]
    assert wakes == 2 and len(started) == 20
    for sock in started + clients:
        sock.close()
    await listener.aclose()
