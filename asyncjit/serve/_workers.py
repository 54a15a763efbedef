"""``asyncjit serve --workers N``: N server processes behind the same ports, and their supervisor.

One process serves with one event loop, and the Python of every read, parse and answer runs
there: at 416 real-time connections (2 cores) one process answered 11.0-12.5k of the 13k
chunks/s they sent (p99 lag 0.15-1.1 s) with its loop's core full, while two processes of 208
connections each answered every chunk. So the supervisor forks the workers before any model or
device thread exists; each loads the model, runs its own ``StreamMux`` and binds the Wyoming and
WebSocket addresses with ``SO_REUSEPORT``, and the kernel spreads new connections over them by
their address hash. A connection stays with the worker that accepted it; ``--max-streams`` is
per worker.

The supervisor holds the ports (bound, never listening: a port 0 becomes one fixed port, and a
port another program listens on is refused before anything starts) and the ``--metrics`` port:
``/metrics`` joins every worker's samples (each with a ``worker`` label; the workers serve theirs
on private loopback ports), ``/health`` sums their streams. SIGTERM and SIGINT are held from
before the fork until each process can act on them, so a signal at any time reaches every worker
as SIGTERM and each drains as a single server does; the supervisor exits 0 once all of them did.
A worker also gets SIGTERM if the supervisor dies (``PR_SET_PDEATHSIG``). A worker that dies
while serving is not replaced: its listening socket leaves the group, the others keep their
connections and take the new ones, ``/health`` says ``degraded``, and the supervisor exits 1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
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
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from .._log import get_logger
from ._metrics import CONTENT_TYPE
from ._server import format_address, listening_line, parse_address

__all__ = ["check_workers", "serve_workers"]

READY_TIMEOUT_S = 300.0
"""Longest a worker may take to load and compile its model and bind its listeners."""
SCRAPE_TIMEOUT_S = 3.0
"""Longest the supervisor waits for its workers' ``/metrics`` or ``/health`` (all at once)."""
SIGNALS = (signal.SIGTERM, signal.SIGINT)
PR_SET_PDEATHSIG = 1

_log = get_logger("asyncjit.serve")
_no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


def check_workers(n: int) -> str | None:
    """Why ``n`` workers cannot run here (None: they can)."""
    if n < 1:
        return f"--workers must be >= 1, got {n}"
    if n > 1 and not (sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")):
        return "--workers above 1 needs Linux (SO_REUSEPORT and fork)"
    return None


def _addresses(host: str, port: int) -> list[tuple[int, Any]]:
    """Every (family, sockaddr) a listener on ``host`` binds, as anyio's ``create_tcp_listener``."""
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_ADDRCONFIG
    )
    out: list[tuple[int, Any]] = []
    for family, _, _, _, addr in infos:
        if (family, addr) not in out:
            out.append((family, addr))
    return out


def _socket(family: int, shared: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:  # as anyio binds it: the IPv4 address is a listener of its own
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    return sock


def reserve_port(text: str, scheme: str) -> tuple[list[socket.socket], str]:
    """Hold ``text``'s port for the workers: bound with ``SO_REUSEPORT`` on every address of the
    host, never listening (a socket that does not listen is given no connections). A port 0
    becomes one fixed port; a port a listener holds already is refused (``OSError``), where
    ``SO_REUSEPORT`` alone would silently share it with that program. Returns the sockets and the
    address with its port."""
    host, port = parse_address(text, scheme)
    targets = _addresses(host, port)
    if port:
        for family, addr in targets:  # a plain bind fails on a port in use (a listener's)
            with _socket(family, shared=False) as probe:
                probe.bind(addr)
    socks: list[socket.socket] = []
    try:
        for family, addr in targets:
            sock = _socket(family, shared=True)
            socks.append(sock)
            sock.bind((addr[0], port, *addr[2:]))
            port = port or sock.getsockname()[1]  # every family on the first one's port
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks, format_address(scheme, host, port)


def _die_with(parent: int) -> None:
    """SIGTERM this worker when the supervisor dies (held until it serves, then it drains)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such call
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # it died before the call
        os._exit(0)


def _worker(
    build: Callable[..., Any],
    args: argparse.Namespace,
    index: int,
    addresses: dict[str, str],
    conn: Any,
    inherited: list[socket.socket],
    parent: int,
) -> None:
    """A forked worker: build its server on the shared addresses, report them, serve until a
    signal. SIGTERM/SIGINT stay blocked (as the supervisor forked it) until the server's signal
    receiver is open: one that arrives while the model loads is acted on then, not lost."""
    import anyio

    from ._cli import loop_options, run_until_signal

    for sock in inherited:  # the supervisor's reserved ports and metrics listener
        sock.close()
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    _die_with(parent)
    try:
        server = build(args, reuse_port=True, metrics="127.0.0.1:0", **addresses)
    except Exception as exc:  # reported to the supervisor, which exits with it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        sys.exit(2)
    server.log = server.log.bind(worker=index)

    def ready(bound: dict[str, tuple[str, int]]) -> None:
        conn.send(("ready", bound, server.model.name))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

    options, loop = loop_options(args.backend, args.loop)
    server.log.info("serve.loop", backend=args.backend, loop=loop)
    anyio.run(run_until_signal, server, ready, backend=args.backend, backend_options=options)


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
        self.stop = threading.Event()
        self.http: ThreadingHTTPServer | None = None
        self.serving_http = False
        self.reserved: list[socket.socket] = []

    def start(self) -> int | None:
        """Reserve the ports, fork the workers, wait until each is ready. None, or an exit code.

        Raises:
            OSError: a port is taken (before any worker starts).
        """
        held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            addresses: dict[str, str] = {}
            for kind, scheme in (("wyoming", "tcp"), ("websocket", "ws")):
                text = getattr(self.args, kind)
                if text:
                    socks, addresses[kind] = reserve_port(text, scheme)
                    self.reserved += socks
            if self.args.metrics:
                self.http = self._http_server(self.args.metrics)
            inherited = [*self.reserved, *([self.http.socket] if self.http else [])]
            ctx = multiprocessing.get_context("fork")  # no model or device thread exists yet
            pipes = []
            for i in range(self.n):
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_worker,
                    args=(self.build, self.args, i, addresses, child, inherited, os.getpid()),
                    name=f"asyncjit-serve-worker-{i}",
                )
                proc.start()
                child.close()
                self.procs.append(proc)
                pipes.append(parent)
        finally:  # the workers hold the signals; here a handler takes them from now on
            for signum in SIGNALS:
                signal.signal(signum, lambda *_: self.stop.set())
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        problem = self._wait_ready(pipes)
        if self.stop.is_set():  # asked to stop while the workers started: they drain and go
            _log.info("serve.stopped_while_starting")
            self.stop_all(grace=float(self.args.grace) + 5.0)
            return 0
        if problem is not None:
            print(f"asyncjit serve: error: {problem}", file=sys.stderr)
            self.stop_all(grace=2.0)
            return 2
        return None

    def _wait_ready(self, pipes: list[Any]) -> str | None:
        """Wait for every worker's readiness at once; why one failed (None: all ready)."""
        pending = dict(enumerate(pipes))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while pending:
            if self.stop.is_set():
                return None
            if time.monotonic() > deadline:
                return f"workers {sorted(pending)} were not ready after {READY_TIMEOUT_S:g} s"
            multiprocessing.connection.wait(
                [*pending.values(), *(self.procs[i].sentinel for i in pending)], timeout=0.2
            )
            for i, pipe in list(pending.items()):
                message: Any = None
                if pipe.poll():
                    try:
                        message = pipe.recv()
                    except EOFError:
                        message = ("failed", "")
                elif not self.procs[i].is_alive():
                    message = ("failed", "")
                if message is None:
                    continue
                if message[0] != "ready":
                    self.procs[i].join(1.0)
                    return message[1] or f"worker {i} exited with code {self.procs[i].exitcode}"
                _, bound, self.model = message
                self.metrics_ports[i] = bound.pop("metrics")[1]
                self.bound = bound
                del pending[i]
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

    def close(self, grace: float) -> None:
        """Stop the workers (``stop_all``), then the metrics listener, then release the ports."""
        self.stop_all(grace)
        if self.http is not None:
            if self.serving_http:
                self.http.shutdown()
            self.http.server_close()
        for sock in self.reserved:
            sock.close()

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.is_alive()]

    # -- the supervisor's /metrics and /health ---------------------------------------------
    def _fetch_all(self, path: str) -> dict[int, bytes]:
        """``path`` from every live worker at once (one deadline for all); those that answered."""

        def fetch(i: int) -> bytes:
            url = f"http://127.0.0.1:{self.metrics_ports[i]}{path}"
            with _no_proxy.open(url, timeout=SCRAPE_TIMEOUT_S) as r:
                return bytes(r.read())

        live = [i for i in self.alive() if i in self.metrics_ports]
        out: dict[int, bytes] = {}
        if not live:
            return out
        with concurrent.futures.ThreadPoolExecutor(len(live)) as pool:
            futures = {pool.submit(fetch, i): i for i in live}
            done, _ = concurrent.futures.wait(futures, timeout=SCRAPE_TIMEOUT_S + 0.5)
            for fut in done:
                try:
                    out[futures[fut]] = fut.result()
                except Exception:  # a worker gone, draining or wedged: left out, counted down
                    continue
        return out

    def metrics_text(self) -> bytes:
        """Every answering worker's samples, labelled ``worker``, in one exposition, and
        ``asyncjit_serve_worker_up`` (1: answered this scrape) for every worker started."""
        families: dict[str, Metric] = {}
        answered = self._fetch_all("/metrics")
        for i, text in sorted(answered.items()):
            try:
                parsed = list(text_string_to_metric_families(text.decode()))
            except ValueError:
                answered.pop(i)
                continue
            for fam in parsed:
                blank = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                joined = families.setdefault(fam.name, blank)
                for s in fam.samples:
                    joined.samples.append(s._replace(labels={**s.labels, "worker": str(i)}))
        up = GaugeMetricFamily(
            "asyncjit_serve_worker_up", "1 if the worker answered this scrape", labels=["worker"]
        )
        for i in range(self.n):
            up.add_metric([str(i)], 1.0 if i in answered else 0.0)
        registry = CollectorRegistry()
        registry.register(_Joined([*families.values(), up]))
        return generate_latest(registry)

    def health(self) -> tuple[int, dict[str, Any]]:
        live = self.alive()
        opened = maximum = 0
        answering = 0
        for raw in self._fetch_all("/health").values():
            try:
                body = json.loads(raw)
                opened += int(body["open_streams"])
                maximum += int(body["max_streams"])
            except (ValueError, KeyError, TypeError):
                continue
            answering += 1
        whole = len(live) == self.n and answering == len(live)
        status = "draining" if self.stopping else ("ok" if whole else "degraded")
        body = {
            "status": status,
            "model": self.model,
            "open_streams": opened,
            "max_streams": maximum,
            "workers": len(live),
            "workers_answering": answering,
            "workers_started": self.n,
        }
        return (503 if self.stopping or not answering else 200), body

    def _http_server(self, address: str) -> ThreadingHTTPServer:
        """The ``--metrics`` listener, bound now (before any worker starts: a port in use fails
        here); served from a thread once the workers are up."""
        host, port = parse_address(address, "http")
        family = _addresses(host, port)[0][0]
        supervisor = self

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

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

        return Server((host, port), Handler)


def serve_workers(args: argparse.Namespace, build: Callable[..., Any]) -> int:
    """Run ``args.workers`` servers (``build(args, **overrides)`` makes one) until SIGTERM/SIGINT."""
    sup = Supervisor(args, build)
    try:
        code = sup.start()
    except OSError as exc:  # a port in use or not ours: nothing started
        print(f"asyncjit serve: error: {exc}", file=sys.stderr)
        sup.close(grace=2.0)
        return 2
    if code is not None:
        return code
    died = False
    try:
        if sup.http is not None:
            host, port = sup.http.server_address[:2]
            sup.bound["metrics"] = (str(host), int(port))
            threading.Thread(
                target=sup.http.serve_forever, name="asyncjit-serve-metrics", daemon=True
            ).start()
            sup.serving_http = True
        print(listening_line(sup.model, sup.bound, sup.n), flush=True)
        _log.info("serve.workers", workers=sup.n, pids=[p.pid for p in sup.procs])
        reported: set[int] = set()
        while not sup.stop.is_set():
            sentinels = [p.sentinel for i, p in enumerate(sup.procs) if i not in reported]
            multiprocessing.connection.wait(sentinels, timeout=0.2)
            for i, proc in enumerate(sup.procs):
                if i not in reported and not proc.is_alive():
                    reported.add(i)
                    if proc.exitcode == 0:  # drained after a signal of its own (a process group's)
                        _log.info("serve.worker_stopped", worker=i, left=len(sup.alive()))
                    else:
                        died = True
                        left = len(sup.alive())
                        _log.error("serve.worker_died", worker=i, exitcode=proc.exitcode, left=left)
            if not sup.alive():
                break
    finally:
        sup.close(grace=float(args.grace) + 5.0)
    codes = [p.exitcode for p in sup.procs]
    _log.info("serve.stopped", exitcodes=codes)
    # -SIGTERM: one of ours that found the worker past its drain (its receiver closed), as when
    # Ctrl-C reached the worker first; a worker killed while serving set ``died`` above
    return 1 if died or any(c not in (0, -signal.SIGTERM) for c in codes) else 0
