"""``VadServer``: one ``StreamMux``, any number of listeners (Wyoming, WebSocket, metrics).

Admission counts streaming connections (Wyoming, WebSocket upgrades); at ``max_streams`` a new
one is told ``server_full`` and closed, never left waiting. A sweeper task closes connections
idle for ``idle_timeout`` (``idle_timeout``) and those whose client stopped reading for
``write_timeout`` (``slow_reader``). ``shutdown()`` (SIGTERM in ``asyncjit serve``) stops
accepting, lets every connection answer the chunks it already submitted, closes each with
``shutdown`` and returns; connections still busy after ``grace`` seconds are cancelled.
"""

from __future__ import annotations

import itertools
import json
import socket
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import attrs

from .._log import get_logger
from ..errors import InvalidArgumentError
from ..scheduler import StreamMux
from ._errors import ConnectionRefused
from ._hub import ReadHub, read_hub_available
from ._metrics import CONTENT_TYPE, ServeMetrics
from ._model import ServedModel
from ._session import QUEUE_DEPTH, Connection
from ._websocket import MetricsConnection, WebSocketConnection
from ._wyoming import WyomingConnection

__all__ = ["ServeConfig", "VadServer", "format_address", "listening_line", "parse_address"]

ACCEPTS_PER_WAKE = 256
"""Connections taken from the listen backlog per wake-up of the accepting task."""
ACCEPT_RETRY_S = 0.1
"""Pause after a failed ``accept`` (no file descriptor left) before trying again."""


def parse_address(text: str, default_scheme: str) -> tuple[str, int]:
    """``tcp://host:port``, ``ws://host:port``, ``host:port`` or ``:port`` to ``(host, port)``.

    Raises:
        InvalidArgumentError: (a ``ValueError``) no port, or a scheme other than
            ``default_scheme`` (or none).
    """
    if "://" not in text:
        text = f"{default_scheme}://{text}"
    parts = urlsplit(text)
    if parts.scheme != default_scheme:
        raise InvalidArgumentError(f"expected a {default_scheme}:// address, got {text!r}")
    if parts.port is None:
        raise InvalidArgumentError(f"the address {text!r} has no port")
    return parts.hostname or "127.0.0.1", parts.port


def format_address(scheme: str, host: str, port: int) -> str:
    """``parse_address``'s inverse: ``scheme://host:port``, an IPv6 host in brackets."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def listening_line(model: str, addresses: dict[str, tuple[str, int]], workers: int = 1) -> str:
    """What ``asyncjit serve`` prints once it listens (scripts read the ports from it)."""
    scheme = {"wyoming": "tcp", "websocket": "ws", "metrics": "http"}
    shown = " ".join(f"{k}={format_address(scheme[k], h, p)}" for k, (h, p) in addresses.items())
    many = f" ({workers} workers)" if workers > 1 else ""
    return f"asyncjit serve: {model}{many} listening {shown}"


@attrs.frozen
class ServeConfig:
    """What ``asyncjit serve``'s flags set (addresses as ``parse_address`` takes them; None: off)."""

    wyoming: str | None = "tcp://127.0.0.1:10400"
    websocket: str | None = None
    metrics: str | None = None
    max_streams: int = 1024
    idle_timeout: float = 30.0
    write_timeout: float = 10.0
    grace: float = 2.0
    max_batch_size: int | None = None
    max_queue_delay: float = 0.002
    reuse_port: bool = False
    """Bind the Wyoming and WebSocket addresses with ``SO_REUSEPORT`` (workers sharing them)."""

    def __attrs_post_init__(self) -> None:
        if self.max_streams < 1:
            raise InvalidArgumentError(f"max_streams must be >= 1, got {self.max_streams}")
        for name in ("idle_timeout", "write_timeout", "grace"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        for name, scheme in (("wyoming", "tcp"), ("websocket", "ws"), ("metrics", "http")):
            text = getattr(self, name)
            if text is not None:  # checked here, before a model loads or a listener binds
                try:
                    parse_address(text, scheme)
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"--{name}: {exc}") from None


class VadServer:
    """Serve a ``ServedModel`` to Wyoming and WebSocket clients from one ``StreamMux``.

    ``await server.serve(task_status=...)`` (or ``await task_group.start(server.serve)``, which
    returns the bound addresses) runs until ``shutdown()``.
    """

    def __init__(self, model: ServedModel, config: ServeConfig | None = None) -> None:
        self.model = model
        self.config = config if config is not None else ServeConfig()
        self.metrics = ServeMetrics()
        self.log = get_logger("asyncjit.serve")
        self.conn_ids = itertools.count(1)
        self.conns: set[Connection] = set()
        self.admitted: set[Connection] = set()
        self.draining = False
        self.addresses: dict[str, tuple[str, int]] = {}
        self.version = _version()
        self._mux: StreamMux | None = None
        self._stop: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        self._page: bytes | None = None
        self._progress: dict[Connection, tuple[int, int, float]] = {}
        self.read_hub: ReadHub | None = None  # trio: one task waits for the parked readers' sockets

    def __repr__(self) -> str:
        state = "draining" if self.draining else ("serving" if self._mux is not None else "idle")
        return f"<VadServer {self.model.name} {state} {len(self.admitted)}/{self.config.max_streams} streams>"

    @property
    def mux(self) -> StreamMux:
        if self._mux is None:
            raise RuntimeError("the server is not serving; run `await server.serve()`")
        return self._mux

    # -- lifecycle -------------------------------------------------------------------------
    async def serve(self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind the listeners, serve until ``shutdown()``, then drain (see the module doc)."""
        cfg = self.config
        self._stop, self._drained = anyio.Event(), anyio.Event()
        mux = self.model.make_mux(
            cfg.max_streams,
            max_queue_delay=cfg.max_queue_delay,
            idle_timeout=None,  # the server closes idle connections itself, with a reason
            admission_timeout=10.0,
            queue_depth=QUEUE_DEPTH,  # one read of a fast client queues without waiting
            metrics_interval=None,
            name="serve",
            **({} if cfg.max_batch_size is None else {"max_batch_size": cfg.max_batch_size}),
        )
        listeners: list[tuple[anyio.abc.Listener[Any], type[Connection]]] = []
        for kind, text, scheme, cls in (
            ("wyoming", cfg.wyoming, "tcp", WyomingConnection),
            ("websocket", cfg.websocket, "ws", WebSocketConnection),
            ("metrics", cfg.metrics, "http", MetricsConnection),
        ):
            if text is None:
                continue
            host, port = parse_address(text, scheme)
            shared = cfg.reuse_port and kind != "metrics"
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=shared)
            bound = listener.extra(anyio.abc.SocketAttribute.local_address)
            self.addresses[kind] = (str(bound[0]), int(bound[1]))
            listeners.append((listener, cls))
        self.metrics.attach(mux)
        try:
            async with mux:
                self._mux = mux
                async with anyio.create_task_group() as conns, anyio.create_task_group() as accepting:
                    for bound_listener, conn_cls in listeners:
                        accepting.start_soon(self._accept, bound_listener, conn_cls, conns)
                    accepting.start_soon(self._sweep)
                    if _on_trio() and read_hub_available():
                        self.read_hub = ReadHub()
                        accepting.start_soon(self.read_hub.run)
                    self.log.info(
                        "serve.listening", **{k: f"{h}:{p}" for k, (h, p) in self.addresses.items()}
                    )
                    task_status.started(dict(self.addresses))
                    await self._stop.wait()
                    # still accepting while draining: a connection waiting in the listen
                    # backlog is told "shutdown" (admit refuses it) rather than reset
                    await self._drain(conns)
                    accepting.cancel_scope.cancel()
        finally:
            for opened, _ in listeners:
                with anyio.CancelScope(shield=True):
                    await opened.aclose()
            self._mux = None
            self.read_hub = None
            self.log.info("serve.stopped")

    def shutdown(self) -> None:
        """Stop accepting and close every connection with ``shutdown`` (after its in-flight chunks)."""
        self.draining = True
        if self._stop is not None:
            self._stop.set()

    async def _drain(self, conns: anyio.abc.TaskGroup) -> None:
        self.draining = True
        self.log.info("serve.draining", connections=len(self.conns))
        for conn in list(self.conns):
            conn.end("shutdown", "the server is shutting down")
        assert self._drained is not None
        if self.conns:
            with anyio.move_on_after(self.config.grace):
                await self._drained.wait()
        if self.conns:
            self.log.warning("serve.grace_expired", connections=len(self.conns))
            conns.cancel_scope.cancel()

    # -- connections -----------------------------------------------------------------------
    async def _accept(
        self, listener: anyio.abc.Listener[Any], cls: type[Connection], conns: anyio.abc.TaskGroup
    ) -> None:
        """Accept every connection waiting, each time the listening socket is readable.

        anyio's ``Listener.serve`` takes one connection per wake-up (and a loop iteration or two
        around it); a server busy streaming then left a burst of 1,000 new clients partly
        unaccepted for seconds. Here one wake-up takes the whole backlog (up to
        ``ACCEPTS_PER_WAKE``), and each connection is wrapped in its own task."""
        raw = listener.extra(anyio.abc.SocketAttribute.raw_socket)
        while True:
            await anyio.wait_readable(raw)
            for _ in range(ACCEPTS_PER_WAKE):
                try:
                    sock, _ = raw.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # out of file descriptors: let some close first
                    self.log.warning("serve.accept_failed", error=str(exc))
                    await anyio.sleep(ACCEPT_RETRY_S)
                    break
                conns.start_soon(self._handle_socket, cls, sock)

    async def _handle_socket(self, cls: type[Connection], sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = await anyio.abc.SocketStream.from_socket(sock)
        except (OSError, ValueError) as exc:  # the client already went away
            self.log.debug("connection.lost_before_start", error=str(exc))
            sock.close()
            return
        await self._handle(cls, stream)

    async def _handle(self, cls: type[Connection], stream: anyio.abc.SocketStream) -> None:
        try:
            address = stream.extra(anyio.abc.SocketAttribute.remote_address)
            peer = address if isinstance(address, str) else f"{address[0]}:{address[1]}"
        except (OSError, anyio.TypedAttributeLookupError, ValueError):
            peer = "?"
        conn = cls(self, stream, peer)
        self.conns.add(conn)
        try:
            await conn.run()
        except Exception as exc:  # one connection's bug never takes the server down
            self.log.exception("connection.crashed", error=repr(exc))
        finally:
            self.conns.discard(conn)
            self._progress.pop(conn, None)
            if conn in self.admitted:
                self.admitted.discard(conn)
                self.metrics.open_streams.labels(conn.protocol).dec()
            if self.draining and not self.conns and self._drained is not None:
                self._drained.set()

    def admit(self, conn: Connection) -> None:
        """Count a streaming connection in, or refuse it (``server_full``, ``shutdown``).

        Raises:
            ConnectionRefused: with the code the client is sent.
        """
        if self.draining:
            self.metrics.refusals.labels("shutdown").inc()
            raise ConnectionRefused("shutdown", "the server is shutting down")
        if len(self.admitted) >= self.config.max_streams:
            self.metrics.refusals.labels("server_full").inc()
            raise ConnectionRefused(
                "server_full", f"{self.config.max_streams} streams are open (max_streams); try again later"
            )
        self.admitted.add(conn)
        self.metrics.open_streams.labels(conn.protocol).inc()

    async def _sweep(self) -> None:
        """Close idle connections and stuck writers: compare counters between ticks."""
        cfg = self.config
        tick = min(1.0, cfg.idle_timeout / 4, cfg.write_timeout / 4)
        clock = anyio.current_time
        while True:
            await anyio.sleep(tick)
            now = clock()
            progress = self._progress
            for conn in list(self.conns):
                seen = progress.get(conn)
                mark = (conn.received, conn.written)
                if seen is None or seen[:2] != mark:
                    progress[conn] = (*mark, now)
                    continue
                quiet = now - seen[2]
                if conn.writing:
                    if quiet >= cfg.write_timeout:
                        conn.log.warning("connection.slow_reader", seconds=round(quiet, 1))
                        conn.reason = conn.reason or ("slow_reader", "the client stopped reading")
                        conn.scope.cancel()
                elif quiet >= cfg.idle_timeout and conn.idle():
                    conn.end("idle_timeout", f"nothing arrived for {cfg.idle_timeout:g} s (idle_timeout)")

    # -- plain HTTP ------------------------------------------------------------------------
    def http_route(self, path: str) -> tuple[int, str, bytes]:
        """``/`` the microphone page, ``/health``, ``/metrics``; anything else 404."""
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.metrics.exposition()
        if path == "/health":
            body = {
                "status": "draining" if self.draining else "ok",
                "model": self.model.name,
                "open_streams": len(self.admitted),
                "max_streams": self.config.max_streams,
            }
            return (503 if self.draining else 200), "application/json", json.dumps(body).encode()
        if path in ("/", "/index.html"):
            if self._page is None:
                self._page = (resources.files("asyncjit") / "data" / "vad.html").read_bytes()
            return 200, "text/html; charset=utf-8", self._page
        return 404, "text/plain", f"no page {path}; try /, /health or /metrics\n".encode()


def _on_trio() -> bool:
    try:
        import trio

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        return False
    return True


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("asyncjit")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"
