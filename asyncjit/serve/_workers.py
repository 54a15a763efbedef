"""``asyncjit serve --workers N``: N server processes behind the same ports, and their supervisor.

One process serves with one event loop, and the Python of every read, parse and answer runs
there: at 416 real-time connections (2 cores) one process answered 11.0-12.5k of the 13k
chunks/s they sent (p99 lag 0.15-1.1 s) with its loop's core full, while two processes of 208
connections each answered every chunk (p99 21-25 ms on trio, 87-129 ms on asyncio). So the
supervisor forks the workers before any thread or model exists; each loads the model, runs its
own ``StreamMux`` and binds the Wyoming and WebSocket addresses with ``SO_REUSEPORT``, and the
kernel spreads new connections over them by their address hash. A connection stays with the
worker that accepted it; ``--max-streams`` is per worker.

The ``--metrics`` port is the supervisor's: ``/metrics`` joins every worker's samples (each with
a ``worker`` label; the workers serve theirs on private loopback ports), ``/health`` sums their
streams. SIGTERM or SIGINT to the supervisor reaches every worker as SIGTERM; each drains as a
single server does, and the supervisor exits 0 once all of them did. A worker that dies while
serving is not replaced: its listening socket leaves the group, the others keep every
connection they hold and take the new ones, and ``/health`` says ``degraded``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from .._log import get_logger
from ._metrics import CONTENT_TYPE
from ._server import parse_address

__all__ = ["check_workers", "serve_workers"]

READY_TIMEOUT_S = 300.0
"""Longest a worker may take to load and compile its model and bind its listeners."""
SCRAPE_TIMEOUT_S = 5.0
"""Longest the supervisor waits for one worker's ``/metrics`` or ``/health``."""

_log = get_logger("asyncjit.serve")


def check_workers(n: int) -> str | None:
    """Why ``n`` workers cannot run here (None: they can)."""
    if n < 1:
        return f"--workers must be >= 1, got {n}"
    if n > 1 and not (sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")):
        return "--workers above 1 needs Linux (SO_REUSEPORT and fork)"
    return None


def reserve_port(text: str, scheme: str) -> tuple[socket.socket, str]:
    """Bind (never listen on) ``text``'s address with ``SO_REUSEPORT``: a port 0 becomes a fixed
    one that every worker binds too, and no other program takes it meanwhile. A socket that does
    not listen is given no connections. Returns it and the address with its port."""
    host, port = parse_address(text, scheme)
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock, f"{scheme}://{host}:{sock.getsockname()[1]}"


def _worker(
    build: Callable[..., Any], args: argparse.Namespace, index: int, addresses: dict[str, str], conn: Any
) -> None:
    """A forked worker: build its server on the shared addresses, report them, serve until a signal."""
    import anyio

    from ._cli import run_until_signal

    try:
        server = build(args, reuse_port=True, metrics="127.0.0.1:0", **addresses)
    except Exception as exc:  # reported to the supervisor, which exits with it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        sys.exit(2)
    server.log = server.log.bind(worker=index)

    def ready(bound: dict[str, tuple[str, int]]) -> None:
        conn.send(("ready", bound))

    anyio.run(run_until_signal, server, ready, backend=args.backend)


class _Joined(Collector):
    """Every worker's samples, each with its ``worker`` label, as one set of families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class Supervisor:
    """The workers' processes, their private metrics ports, and the signals that stop them."""

    def __init__(self, args: argparse.Namespace, build: Callable[..., Any]) -> None:
        self.args = args
        self.build = build
        self.n = args.workers
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.metrics_ports: dict[int, int] = {}
        self.bound: dict[str, tuple[str, int]] = {}
        self.stopping = False
        self.model = args.model_path or args.model

    def start(self) -> int | None:
        """Reserve the ports, fork the workers, wait for each to be ready. None, or an exit code."""
        reserved: list[socket.socket] = []
        addresses: dict[str, str] = {}
        for kind, scheme in (("wyoming", "tcp"), ("websocket", "ws")):
            text = getattr(self.args, kind)
            if text:
                sock, addresses[kind] = reserve_port(text, scheme)
                reserved.append(sock)
        self._reserved = reserved  # held until exit: the port stays ours while workers come and go
        ctx = multiprocessing.get_context("fork")  # no thread exists yet in this process
        pipes = []
        for i in range(self.n):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_worker,
                args=(self.build, self.args, i, addresses, child),
                name=f"asyncjit-serve-worker-{i}",
            )
            proc.start()
            child.close()
            self.procs.append(proc)
            pipes.append(parent)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for i, (worker, pipe) in enumerate(zip(self.procs, pipes, strict=True)):
            message: Any = None
            while message is None and time.monotonic() < deadline:
                if pipe.poll(0.2):
                    try:
                        message = pipe.recv()
                    except EOFError:
                        message = ("failed", f"worker {i} exited with code {worker.exitcode}")
                elif not worker.is_alive():
                    message = ("failed", f"worker {i} exited with code {worker.exitcode}")
            if message is None:
                message = ("failed", f"worker {i} was not ready after {READY_TIMEOUT_S:g} s")
            if message[0] != "ready":
                print(f"asyncjit serve: error: {message[1]}", file=sys.stderr)
                self.stop_all(grace=2.0)
                return 2
            bound = message[1]
            self.metrics_ports[i] = bound.pop("metrics")[1]
            self.bound = bound
        return None

    def stop_all(self, grace: float) -> None:
        """SIGTERM every live worker; SIGKILL those still there after ``grace`` seconds."""
        self.stopping = True
        for proc in self.procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.is_alive()]

    # -- the supervisor's /metrics and /health ---------------------------------------------
    def _fetch(self, i: int, path: str) -> bytes | None:
        try:
            url = f"http://127.0.0.1:{self.metrics_ports[i]}{path}"
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as r:
                return bytes(r.read())
        except OSError:  # a worker gone or draining: left out
            return None

    def metrics_text(self) -> bytes:
        """Every live worker's samples, labelled ``worker``, in one exposition."""
        families: dict[str, Metric] = {}
        for i in self.alive():
            text = self._fetch(i, "/metrics")
            if text is None:
                continue
            for fam in text_string_to_metric_families(text.decode()):
                blank = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                joined = families.setdefault(fam.name, blank)
                for s in fam.samples:
                    joined.samples.append(s._replace(labels={**s.labels, "worker": str(i)}))
        registry = CollectorRegistry()
        registry.register(_Joined(list(families.values())))
        return generate_latest(registry)

    def health(self) -> tuple[int, dict[str, Any]]:
        live = self.alive()
        opened = maximum = 0
        for i in live:
            raw = self._fetch(i, "/health")
            if raw is not None:
                body = json.loads(raw)
                opened += int(body.get("open_streams", 0))
                maximum += int(body.get("max_streams", 0))
        status = "draining" if self.stopping else ("ok" if len(live) == self.n else "degraded")
        body = {
            "status": status,
            "model": self.model,
            "open_streams": opened,
            "max_streams": maximum,
            "workers": len(live),
            "workers_started": self.n,
        }
        return (503 if self.stopping or not live else 200), body

    def http_server(self, address: str) -> ThreadingHTTPServer:
        host, port = parse_address(address, "http")
        supervisor = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    status, ctype, body = 200, CONTENT_TYPE, supervisor.metrics_text()
                elif path == "/health":
                    status, payload = supervisor.health()
                    ctype, body = "application/json", json.dumps(payload).encode()
                else:
                    body = f"no page {path}; try /health or /metrics\n".encode()
                    status, ctype = 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return ThreadingHTTPServer((host, port), Handler)


def serve_workers(args: argparse.Namespace, build: Callable[..., Any]) -> int:
    """Run ``args.workers`` servers (``build(args, **overrides)`` makes one) until SIGTERM/SIGINT."""
    sup = Supervisor(args, build)
    code = sup.start()
    if code is not None:
        return code
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    http = None
    if args.metrics:
        http = sup.http_server(args.metrics)
        sup.bound["metrics"] = (str(http.server_address[0]), int(http.server_address[1]))
        threading.Thread(target=http.serve_forever, name="asyncjit-serve-metrics", daemon=True).start()
    scheme = {"wyoming": "tcp", "websocket": "ws", "metrics": "http"}
    shown = " ".join(f"{k}={scheme[k]}://{h}:{p}" for k, (h, p) in sup.bound.items())
    print(f"asyncjit serve: {sup.model} ({sup.n} workers) listening {shown}", flush=True)
    _log.info("serve.workers", workers=sup.n, pids=[p.pid for p in sup.procs])
    reported: set[int] = set()
    died = False
    while not stop.is_set():
        sentinels = [p.sentinel for i, p in enumerate(sup.procs) if i not in reported]
        multiprocessing.connection.wait(sentinels, timeout=0.2)
        for i, proc in enumerate(sup.procs):
            if i not in reported and not proc.is_alive():
                reported.add(i)
                if proc.exitcode == 0:  # drained after a signal of its own (a process group's)
                    _log.info("serve.worker_stopped", worker=i, left=len(sup.alive()))
                else:
                    died = True
                    _log.error("serve.worker_died", worker=i, exitcode=proc.exitcode, left=len(sup.alive()))
        if not sup.alive():
            break
    sup.stop_all(grace=float(args.grace) + 5.0)
    if http is not None:
        http.shutdown()
    codes = [p.exitcode for p in sup.procs]
    _log.info("serve.stopped", exitcodes=codes)
    return 1 if died or any(c != 0 for c in codes) else 0
