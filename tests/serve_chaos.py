"""Misbehaving clients against ``asyncjit serve`` on each event loop: the server's fuzzer.

Each round runs one good Wyoming stream of the built-in speech beside ``--clients`` clients that
each do one random bad thing: reset the socket (``SO_LINGER`` 0) or close it mid-stream,
half-close and wait, send garbage bytes, stop in the middle of a frame, send a header line
over the size limit, an absurd ``audio-start``, read nothing for a while; or on the WebSocket
port: garbage before the handshake, a reset right after it, or audio streamed after it and
then a reset, garbage bytes, a text message that is not the protocol's, a frame cut short.
The good stream must still get ``SileroVad.speech_timestamps``'s edges; no connection may end
as a crash of ours (``connection.crashed``) or as ``internal_error``; nothing may stay open
afterwards.

Run::

    .venv/bin/python tests/serve_chaos.py --minutes 2 --seed 1          # asyncio, uvloop, trio
    .venv/bin/python tests/serve_chaos.py --backends uvloop --minutes 5 --seed 3

``tests/test_serve_chaos.py`` runs a short fixed slice of it (``make test``); ``make fuzz-serve``
a longer one. A finding prints the seed, the backend and the offending log events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import struct
import sys
from typing import Any

from chaos_common import round_indices
from serve_helpers import running, speech_pcm, wait_until_clean, wyoming_frame
from test_serve import assert_edges_match, edges_of, reference_edges, wyoming_stream

from asyncjit._log import capture_events

FMT = {"rate": 16000, "width": 2, "channels": 1}
KINDS = (
    "reset",
    "fin",
    "halfclose",
    "garbage",
    "midframe",
    "slow",
    "bigheader",
    "rate",
    "ws_garbage",
    "ws_reset",
    "ws_stream_reset",
    "ws_stream_garbage",
    "ws_bad_text",
    "ws_midframe",
)
HANDSHAKE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset, not a FIN (a crashed client, a dropped network)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _websocket(port: int, kind: str, rng: random.Random) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    if kind == "ws_garbage":
        writer.write(rng.randbytes(rng.randint(1, 3000)))
        await asyncio.sleep(rng.random() * 0.05)
        writer.close()
        return
    writer.write(HANDSHAKE)
    await asyncio.sleep(rng.random() * 0.05)
    _reset(writer)


def _ws_frame(opcode: Any, data: bytes) -> bytes:
    """One masked client frame, as the ``websockets`` package writes it."""
    from websockets.frames import Frame

    return Frame(opcode, data).serialize(mask=True)


async def _websocket_stream(port: int, kind: str, rng: random.Random, pcm: bytes) -> None:
    """A WebSocket client that streams audio after the handshake, then misbehaves."""
    from websockets.frames import Opcode

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HANDSHAKE)
    await reader.readuntil(b"\r\n\r\n")  # the 101 response; the hello follows
    writer.write(_ws_frame(Opcode.TEXT, b'{"type": "start", "sample_rate": 16000, "format": "s16le"}'))
    for i in range(rng.randint(0, 12)):
        writer.write(_ws_frame(Opcode.BINARY, pcm[i * 2048 : (i + 1) * 2048]))
        if rng.random() < 0.5:
            writer.write(_ws_frame(Opcode.TEXT, b'{"type": "ping", "id": %d}' % i))
    if kind == "ws_stream_garbage":
        writer.write(rng.randbytes(rng.randint(1, 3000)))
    elif kind == "ws_bad_text":
        writer.write(
            _ws_frame(Opcode.TEXT, rng.choice([rng.randbytes(40), b"[1, 2", b'{"type": 7}', b"\xff\xfe"]))
        )
    elif kind == "ws_midframe":
        frame = _ws_frame(Opcode.BINARY, pcm[:2048])
        writer.write(frame[: rng.randint(1, len(frame) - 1)])
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    await asyncio.sleep(rng.random() * 0.1)
    if kind == "ws_stream_reset" or rng.random() < 0.3:
        _reset(writer)
    else:
        writer.close()


async def _wyoming(port: int, kind: str, rng: random.Random, pcm: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(wyoming_frame("audio-start", FMT))
    for i in range(rng.randint(0, 20)):
        writer.write(wyoming_frame("audio-chunk", FMT, pcm[i * 2048 : (i + 1) * 2048]))
        if rng.random() < 0.5:
            writer.write(wyoming_frame("ping", {"text": str(i)}))
    if kind == "garbage":
        writer.write(rng.randbytes(rng.randint(1, 5000)))
    elif kind == "midframe":
        frame = wyoming_frame("audio-chunk", FMT, pcm[:2048])
        writer.write(frame[: rng.randint(1, len(frame) - 1)])
    elif kind == "bigheader":
        writer.write(b"{" + b" " * rng.randint(10, 2_000_000))
    elif kind == "rate":
        rate = rng.choice([0, -5, 7, 10**9])
        writer.write(wyoming_frame("audio-start", {"rate": rate, "width": 2, "channels": 1}))
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    await asyncio.sleep(rng.random() * 0.1)
    if kind == "reset" or rng.random() < 0.3:
        _reset(writer)
    elif kind == "halfclose":
        writer.write_eof()
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(), 3)
        writer.close()
    elif kind == "slow":
        await asyncio.sleep(rng.random() * 0.5)
        writer.close()
    else:
        writer.close()


async def _client(ports: dict[str, int], rng: random.Random, pcm: bytes) -> str:
    kind = rng.choice(KINDS)
    try:
        if kind in ("ws_garbage", "ws_reset"):
            await _websocket(ports["websocket"], kind, rng)
        elif kind.startswith("ws_"):
            await _websocket_stream(ports["websocket"], kind, rng, pcm)
        else:
            await _wyoming(ports["wyoming"], kind, rng, pcm)
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass  # the server closed on us first: what it logged is what is checked
    return kind


async def _round(ports: dict[str, int], rng: random.Random, pcm: bytes, clients: int) -> list[str]:
    good = asyncio.ensure_future(wyoming_stream(ports["wyoming"], pcm))
    kinds = await asyncio.gather(*(_client(ports, rng, pcm) for _ in range(clients)))
    assert_edges_match(edges_of(await good), reference_edges())
    return list(kinds)


def run(
    backend: str, seed: int, *, rounds: int | None = None, seconds: float = 60.0, clients: int = 40
) -> dict[str, Any]:
    """Rounds of misbehaving clients against one server on ``backend`` (one of
    ``serve_helpers.BACKENDS``); the clients' kinds, the close reasons and the bad log events."""
    rng = random.Random(seed)
    pcm = speech_pcm()
    kinds: dict[str, int] = {}
    done = 0
    with (
        capture_events() as logged,
        running(backend, max_streams=64, idle_timeout=2.0, write_timeout=1.0) as srv,
    ):
        ports = {"wyoming": srv.port("wyoming"), "websocket": srv.port("websocket")}
        for _ in round_indices(rounds, seconds):
            for kind in asyncio.run(_round(ports, rng, pcm, clients)):
                kinds[kind] = kinds.get(kind, 0) + 1
            done += 1
        wait_until_clean(srv, 20)
    reasons: dict[str, int] = {}
    for e in logged:
        if e["event"] == "connection.closed":
            reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
    bad = [
        {k: v for k, v in e.items() if k != "exc_info"}
        for e in logged
        if e["event"] == "connection.crashed"
        or (e["event"] == "connection.closed" and e["reason"] == "internal_error")
    ]
    return {"backend": backend, "seed": seed, "rounds": done, "kinds": kinds, "reasons": reasons, "bad": bad}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=1.0, help="per backend (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=40, help="misbehaving clients per round")
    parser.add_argument("--backends", default="asyncio,uvloop,trio")
    args = parser.parse_args(argv)
    found = 0
    for backend in args.backends.split(","):
        r = run(backend, args.seed, seconds=60 * args.minutes, clients=args.clients)
        clients = sum(r["kinds"].values())
        print(
            f"{backend}: {r['rounds']} rounds, {clients} misbehaving clients, close reasons {r['reasons']}, "
            f"findings {len(r['bad'])}",
            flush=True,
        )
        for event in r["bad"][:10]:
            print(f"  seed {args.seed} {backend}: {event}", flush=True)
        found += len(r["bad"])
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
