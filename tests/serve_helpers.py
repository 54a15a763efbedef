"""Shared by the ``asyncjit serve`` tests: a server in a thread (asyncio or trio), clients, the speech."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from chaos_common import LOOP_PARAMS

from asyncjit._loops import run_options
from asyncjit.models import speech_sample_path
from asyncjit.serve import ServeConfig, ServedModel, VadServer, load_model

_MODEL: ServedModel | None = None


def model() -> ServedModel:
    global _MODEL
    if _MODEL is None:
        _MODEL = load_model("silero-vad")
    return _MODEL


def speech_pcm() -> bytes:
    """The built-in speech as 16 kHz mono s16le bytes."""
    with wave.open(speech_sample_path()) as w:
        return w.readframes(w.getnframes())


BACKENDS = LOOP_PARAMS
"""The loops a server is tested on: ``uvloop`` is asyncio on uvloop's loop (``asyncjit serve``'s
default where installed), ``asyncio`` the standard library's."""


def cli_loop(backend: str) -> list[str]:
    """``asyncjit serve``'s flags for one of ``BACKENDS``."""
    if backend == "trio":
        return ["--backend", "trio"]
    return ["--backend", "asyncio", "--loop", backend]


class ThreadServer:
    """A ``VadServer`` running on its own event loop (``backend``, one of ``BACKENDS``) in a thread."""

    def __init__(self, backend: str, **config: Any) -> None:
        config.setdefault("wyoming", "tcp://127.0.0.1:0")
        config.setdefault("websocket", "ws://127.0.0.1:0")
        config.setdefault("metrics", "127.0.0.1:0")
        config.setdefault("max_streams", 16)
        self.backend = backend
        self.server = VadServer(model(), ServeConfig(**config))
        self.addresses: dict[str, tuple[str, int]] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"serve-{backend}", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._token = anyio.lowlevel.current_token()
            async with anyio.create_task_group() as tg:
                self.addresses = await tg.start(self.server.serve)
                self._ready.set()

        try:
            name, options = run_options(self.backend)
            anyio.run(main, backend=name, backend_options=options)
        except BaseException as exc:  # surfaced by stop()
            self._error = exc
        finally:
            self._ready.set()

    def port(self, kind: str) -> int:
        return self.addresses[kind][1]

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop (its state is not thread-safe)."""
        return anyio.from_thread.run_sync(fn, *args, token=self._token)

    def open_counts(self) -> tuple[int, int, int]:
        """(connections, admitted, mux active streams), read on the server's loop."""
        srv = self.server
        return self.call(lambda: (len(srv.conns), len(srv.admitted), srv.mux.statistics().active_streams))

    def start(self) -> ThreadServer:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.call(self.server.shutdown)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the server did not stop"
        if self._error is not None:
            raise self._error


@contextmanager
def running(backend: str, **config: Any) -> Iterator[ThreadServer]:
    srv = ThreadServer(backend, **config).start()
    try:
        yield srv
    finally:
        srv.stop()


def wait_until_clean(srv: ThreadServer, timeout: float = 10.0) -> None:
    """Wait until no connection, admission or mux stream is left (nothing leaks)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        counts = srv.open_counts()
        if counts == (0, 0, 0):
            return
        assert time.monotonic() < deadline, f"left open (connections, admitted, streams): {counts}"
        time.sleep(0.02)


def wyoming_frame(kind: str, data: dict[str, Any] | None = None, payload: bytes = b"") -> bytes:
    """A Wyoming message written by the ``wyoming`` package itself (for raw-socket clients)."""
    from wyoming.event import Event

    from asyncjit.serve._wyoming import encode_event

    return encode_event(Event(kind, data or {}, payload or None))


async def read_wyoming(reader: asyncio.StreamReader) -> list[dict[str, Any]]:
    """Every event until the server closes the connection (type + data), with the package's reader."""
    from wyoming.event import async_read_event

    events = []
    while True:
        event = await async_read_event(reader)
        if event is None:
            return events
        events.append({"type": event.type, **event.data})


def ws_json(message: Any) -> dict[str, Any]:
    assert isinstance(message, str), f"expected a text message, got {message!r}"
    parsed: dict[str, Any] = json.loads(message)
    return parsed


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a client's socket and wait for it (a peer that already closed is fine)."""
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()
