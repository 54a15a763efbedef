"""``asyncjit serve`` under load, against a Wyoming VAD server written the usual way, in one run.

Run (loopback only; bounded: every phase has a fixed length and the script stops by itself)::

    .venv/bin/python benchmarks/serve.py                 # 60 s real-time phases
    .venv/bin/python benchmarks/serve.py --seconds 20    # shorter

Processes: the server under test (``asyncjit serve``, asyncio then trio), the **peer** (a Wyoming
VAD service as existing ones are written: ``wyoming.server.AsyncTcpServer``, one
``AsyncEventHandler`` per connection, ONNX Runtime called per 512-sample chunk on the loop, one
intra-op thread), and a **load generator** (asyncio protocols writing pre-encoded Wyoming
frames of the built-in speech; each frame of 1,024 samples is followed by a ``ping``, and the
``pong`` that answers it, sent after every earlier chunk, gives that chunk's lag).

Phases: (1) the peer's real-time capacity: its throughput (clients as fast as possible) gives
an upper bound in connections; then real-time phases as long as asyncjit's, from that bound down
in steps of 10% (at most five) until one is kept by the same bar asyncjit must meet (none refused
or dropped, every frame answered, p99 lag under 100 ms), then two halvings of the gap to the
last one lost: the peer's real-time connections (if none is kept, the smallest probed).
``--peer-connections N`` skips the search and credits N. (2) asyncjit serve, on asyncio
and on trio: ``max(1000, 5 x peer)`` connections stream in real time for ``--seconds``: dropped,
refused, answered, lag p50/p99/max, server RSS over the run, CPU of server and load generator;
then the same connections as fast as possible, chunks/s. (3) in-process ``vad_mux`` with as many
streams, chunks/s, for the ratio (goal >= 0.6x).

``--loop`` (default ``auto``: uvloop when installed, as ``asyncjit serve`` itself picks) is
asyncio's loop for the server under test and for the peer alike; the in-process ``vad_mux`` on
asyncio then runs on both the standard loop and uvloop, and the faster is the figure scored.

``--workers N`` runs ``asyncjit serve --workers N`` (N processes sharing the port, each with its
own loop and mux; server CPU and RSS are then the supervisor's and its workers' together).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import wave
from collections import deque
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # benchmarks/silero_vad.py

FRAME = 1024  # samples per Wyoming audio-chunk (the wyoming package's default)
CHUNKS_PER_FRAME = 2  # Silero chunks (512 samples) per frame
PERIOD = FRAME / 16000  # seconds of audio per frame, 64 ms
FMT = {"rate": 16000, "width": 2, "channels": 1}


# -- pre-encoded frames -------------------------------------------------------------------------
def encode(kind: str, data: dict[str, Any] | None = None, payload: bytes = b"") -> bytes:
    import io

    from wyoming.event import Event, write_event

    buf = io.BytesIO()
    write_event(Event(kind, data or {}, payload or None), buf)
    return buf.getvalue()


def speech_frames() -> list[bytes]:
    from asyncjit.models import speech_sample_path

    with wave.open(speech_sample_path()) as w:
        pcm = w.readframes(w.getnframes())
    step = FRAME * 2
    return [
        encode("audio-chunk", FMT, pcm[i : i + step]) + encode("ping", {"text": "p"})
        for i in range(0, len(pcm) - step + 1, step)
    ]


# -- load generator (its own process) -----------------------------------------------------------
class LoadClient(asyncio.Protocol):
    def __init__(self, gen: LoadGen, index: int) -> None:
        self.gen, self.index = gen, index
        self.buf = bytearray()
        self.sent: deque[float] = deque()
        self.transport: asyncio.Transport | None = None
        self.frame = index * 7 % len(gen.frames)
        self.pongs = 0
        self.closed = False
        self.error: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.gen.start)  # type: ignore[attr-defined]
        if self.gen.fast:
            for _ in range(self.gen.window):
                self.send()

    def send(self) -> None:
        assert self.transport is not None
        self.transport.write(self.gen.frames[self.frame])
        self.frame = (self.frame + 1) % len(self.gen.frames)
        self.sent.append(time.perf_counter())

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            header = bytes(buf[pos:nl])
            need = nl + 1
            i = header.find(b'"data_length": ')
            if i >= 0:
                j = i + 15
                k = j
                while k < len(header) and header[k : k + 1].isdigit():
                    k += 1
                need += int(header[j:k])
            if len(buf) < need:
                break
            if b'"pong"' in header:
                now = time.perf_counter()
                self.gen.lags.append(now - self.sent.popleft())
                self.pongs += 1
                if self.gen.fast and self.gen.running:
                    self.send()
            elif b'"error"' in header:
                self.error = json.loads(buf[nl + 1 : need]).get("code", "?")
            pos = need
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


class LoadGen:
    def __init__(self, port: int, conns: int, seconds: float, fast: bool, window: int) -> None:
        self.port, self.conns, self.seconds, self.fast, self.window = port, conns, seconds, fast, window
        self.frames = speech_frames()
        self.start = encode("audio-start", FMT)
        self.lags: list[float] = []
        self.running = True

    async def run(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        clients: list[LoadClient] = []
        for i in range(self.conns):
            try:
                _, client = await loop.create_connection(
                    lambda i=i: LoadClient(self, i), "127.0.0.1", self.port
                )
            except OSError:
                continue
            clients.append(client)
            if i % 50 == 49:
                await asyncio.sleep(0.01)  # a ramp, not a SYN flood
        await asyncio.sleep(0.5)
        self.lags.clear()
        for c in clients:
            c.pongs = 0
        cpu0, t0 = _cpu_seconds(os.getpid()), time.perf_counter()
        sent_frames = 0
        if self.fast:
            await asyncio.sleep(self.seconds)
        else:
            # real time: each connection sends one frame per 64 ms, phases spread over the period
            groups = 16
            tick = PERIOD / groups
            k = 0
            next_t = time.perf_counter()
            while time.perf_counter() - t0 < self.seconds:
                for c in clients[k % groups :: groups]:
                    if not c.closed:
                        c.send()
                        sent_frames += 1
                k += 1
                next_t += tick
                await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
            await asyncio.sleep(1.0)  # the last answers
        wall = time.perf_counter() - t0
        self.running = False
        cpu = _cpu_seconds(os.getpid()) - cpu0
        answered = sum(c.pongs for c in clients)
        outstanding = sum(len(c.sent) for c in clients)
        lags = sorted(self.lags)
        result = {
            "connections": len(clients),
            "refused": self.conns - len(clients) + sum(1 for c in clients if c.error == "server_full"),
            "dropped": sum(1 for c in clients if c.closed),
            "errors": sorted({c.error for c in clients if c.error}),
            "frames_sent": sent_frames,
            "answered": answered,
            "unanswered": outstanding if not self.fast else 0,
            "chunks_per_s": answered * CHUNKS_PER_FRAME / (wall if self.fast else self.seconds),
            "lag_ms": {
                "p50": 1000 * lags[len(lags) // 2] if lags else None,
                "p99": 1000 * lags[int(len(lags) * 0.99)] if lags else None,
                "max": 1000 * lags[-1] if lags else None,
            },
            "loadgen_cpu_pct": 100 * cpu / wall,
        }
        for c in clients:
            if c.transport is not None:
                c.transport.close()
        return result


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a server's ``--workers``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants."""
    total = 0.0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _rss_mb(pid: int) -> float:
    """Resident MB of ``pid`` and its descendants."""
    total = 0.0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


# -- the peer: a Wyoming VAD service as they are usually written -----------------------------------
def run_peer(port_file: str, loop: str) -> None:
    import numpy as np
    import onnxruntime as ort
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.event import Event
    from wyoming.ping import Ping, Pong
    from wyoming.server import AsyncEventHandler, AsyncTcpServer
    from wyoming.vad import VoiceStarted, VoiceStopped

    from asyncjit.models import OnnxRuntimeVad
    from asyncjit.models.silero_vad import default_model_path

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(default_model_path()), opts, providers=["CPUExecutionProvider"])

    class VadHandler(AsyncEventHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.vad = OnnxRuntimeVad(session=session)
            self.audio = np.zeros(0, np.float32)
            self.samples = 0
            self.speaking = False

        async def handle_event(self, event: Event) -> bool:
            try:
                return await self.handle(event)
            except ConnectionError:  # the load generator closed its sockets at the end of a phase
                return False

        async def handle(self, event: Event) -> bool:
            if AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                x = np.frombuffer(chunk.audio, "<i2").astype(np.float32) / 32768.0
                self.audio = np.concatenate([self.audio, x])
                while self.audio.size >= 512:
                    p = float(self.vad(self.audio[:512])[0, 0])
                    self.audio = self.audio[512:]
                    self.samples += 512
                    if p >= 0.5 and not self.speaking:
                        self.speaking = True
                        await self.write_event(VoiceStarted(timestamp=self.samples // 16).event())
                    elif p < 0.35 and self.speaking:
                        self.speaking = False
                        await self.write_event(VoiceStopped(timestamp=self.samples // 16).event())
            elif Ping.is_type(event.type):
                await self.write_event(Pong(text=Ping.from_event(event).text).event())
            elif AudioStart.is_type(event.type):
                self.vad.reset()
            return True

    async def main() -> None:
        def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            # the load generator resets its sockets at the end of a phase: the wyoming package's
            # reader task then ends with ConnectionResetError, which uvloop's loop reports
            if not isinstance(context.get("exception"), ConnectionError):
                loop.default_exception_handler(context)

        asyncio.get_running_loop().set_exception_handler(quiet)
        server = AsyncTcpServer("127.0.0.1", 0)
        await server.start(VadHandler)
        port = server._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        with open(port_file, "w") as f:
            f.write(str(port))
        await asyncio.Event().wait()

    _asyncio_run(main(), loop)


def _asyncio_run(main: Any, loop: str) -> Any:
    """``asyncio.run`` on the standard loop or on uvloop's."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def resolve_loop(loop: str) -> str:
    """``--loop`` as ``asyncjit serve`` resolves it on asyncio (auto: uvloop when installed)."""
    from asyncjit.serve._cli import loop_options

    return loop_options("asyncio", loop)[1]


# -- in-process vad_mux ---------------------------------------------------------------------------
def run_inproc(streams: int, seconds: float, backend: str) -> None:
    """``backend``: asyncio, uvloop (asyncio on uvloop's loop) or trio."""
    import logging

    import anyio
    import numpy as np
    import structlog

    from asyncjit._loops import run_options
    from asyncjit.models import read_wav, speech_sample_path

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    from asyncjit.models.silero_vad import vad_mux

    audio, _ = read_wav(speech_sample_path())
    chunks = audio[: audio.size // 512 * 512].reshape(-1, 512).astype(np.float32)
    count = [0]

    async def main() -> None:
        mux = vad_mux(16000, max_streams=streams, idle_timeout=None, metrics_interval=None)
        async with mux:
            stop = anyio.current_time() + seconds

            async def stream(k: int) -> None:
                async with mux.open_stream() as s:
                    i = k * 7
                    while anyio.current_time() < stop:
                        await s.step(chunks[i % len(chunks)])
                        i += 1
                        count[0] += 1

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for k in range(streams):
                    tg.start_soon(stream, k)
            print(json.dumps({"chunks_per_s": count[0] / (time.perf_counter() - t0)}))

    name, options = run_options(backend)
    anyio.run(main, backend=name, backend_options=options)


# -- orchestration ----------------------------------------------------------------------------------
def _python(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], text=True, **kw)


def loadgen(
    port: int, conns: int, seconds: float, fast: bool, window: int, server_pid: int
) -> dict[str, Any]:
    proc = _python(
        __file__,
        "--loadgen",
        str(port),
        str(conns),
        str(seconds),
        "1" if fast else "0",
        str(window),
        stdout=subprocess.PIPE,
    )
    rss: list[float] = []
    cpu0, t0 = _cpu_seconds(server_pid), time.perf_counter()
    while proc.poll() is None:
        time.sleep(1.0)
        rss.append(_rss_mb(server_pid))
    wall = time.perf_counter() - t0
    out, _ = proc.communicate()
    result: dict[str, Any] = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    result["server_cpu_pct"] = 100 * (_cpu_seconds(server_pid) - cpu0) / wall
    if len(rss) >= 4:
        result["server_rss_mb"] = {"at_25pct": rss[len(rss) // 4], "end": rss[-1], "max": max(rss)}
    return result


def start_server(
    backend: str, max_streams: int, workers: int = 1, queue_delay: float = 0.002, loop: str = "auto"
) -> tuple[subprocess.Popen[str], int, int]:
    proc = _python(
        "-m",
        "asyncjit.cli",
        "serve",
        "--workers",
        str(workers),
        "--max-queue-delay",
        str(queue_delay),
        "--backend",
        backend,
        *(["--loop", loop] if backend == "asyncio" else []),
        "--wyoming",
        "tcp://127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
        "--max-streams",
        str(max_streams),
        "--idle-timeout",
        "300",
        "--log-level",
        "warning",
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.kill()
        raise SystemExit(f"asyncjit serve did not start: {line!r}")
    ports = dict(re.findall(r"(\w+)=\w+://[\d.]+:(\d+)", line))
    return proc, int(ports["wyoming"]), int(ports["metrics"])


def wait_drained(metrics_port: int, limit: float = 120.0) -> float:
    """Wait until the server holds no connection (the last phase's are closed); the seconds waited."""
    import urllib.request

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health", timeout=30) as r:
            if json.loads(r.read())["open_streams"] == 0:
                break
        time.sleep(0.5)
    return time.perf_counter() - t0


def stop_server(proc: subprocess.Popen[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return {"exit_code": code, "exit_seconds": round(time.perf_counter() - t0, 2)}


def _wait_for_port(path: str) -> int:
    while True:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            if text:
                return int(text)
        time.sleep(0.1)


def real_time_kept(r: dict[str, Any]) -> bool:
    """None refused or dropped, every chunk answered, p99 lag under 100 ms."""
    p99 = r["lag_ms"]["p99"]
    return bool(
        r["refused"] == 0 and r["dropped"] == 0 and r["unanswered"] == 0 and p99 is not None and p99 < 100
    )


PEER_PROBES = 5
PEER_STEP = 0.9
PEER_REFINE = 2


def peer_probe(port: int, pid: int, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """``n`` real-time connections against the peer for a real-time phase, shown."""
    rt = loadgen(port, n, args.seconds, False, args.window, pid)
    show(f"peer, {n} real-time connections", rt)
    return rt


def peer_real_time(port: int, pid: int, ceiling: int, args: argparse.Namespace) -> int:
    """The connections the peer keeps in real time by ``real_time_kept``, the bar asyncjit is
    held to, each probe as long as asyncjit's real-time phase: from its throughput's worth down
    in steps of 10% (at most ``PEER_PROBES``) to the first kept, then up to ``PEER_REFINE``
    halvings of the gap to the last one not kept (so within about 3% of the most it keeps). A
    server streamed at its whole throughput has no slack, so its lag grows without bound;
    crediting it with that many would hold asyncjit to 5x connections the peer does not keep.
    If no probe keeps up, the last (smallest) one is credited: a generous figure."""

    def probe(n: int) -> bool:
        rt = peer_probe(port, pid, n, args)
        kept = real_time_kept(rt)
        if not kept:  # let it work off the backlog of a probe it lost before the next one
            time.sleep(min(30.0, (rt["lag_ms"]["max"] or 0.0) / 1e3 + 2.0))
        return kept

    n, failed = ceiling, None
    for i in range(PEER_PROBES):
        if probe(n):
            break
        failed = n
        if i + 1 == PEER_PROBES:
            print(f"peer kept none of the probes; credited with {n} (its last probe)", flush=True)
            return n
        n = max(1, int(n * PEER_STEP))
    for _ in range(PEER_REFINE):
        if failed is None or failed - n <= 1:
            break
        mid = (n + failed) // 2
        if probe(mid):
            n = mid
        else:
            failed = mid
    lost = "" if failed is None else f" (not {failed})"
    print(f"peer keeps {n} connections in real time{lost}", flush=True)
    return n


def show(name: str, r: dict[str, Any]) -> None:
    lag = r["lag_ms"]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    rss = r.get("server_rss_mb")
    rss_text = f" rss {rss['at_25pct']:.0f}->{rss['end']:.0f} MB (max {rss['max']:.0f})" if rss else ""
    print(
        f"{name:38s} conns {r['connections']:5d} refused {r['refused']} dropped {r['dropped']} "
        f"answered {r['answered']} unanswered {r.get('unanswered', 0)} "
        f"chunks/s {r['chunks_per_s']:8.0f} "
        f"lag p50/p99/max {fmt(lag['p50'])}/{fmt(lag['p99'])}/{fmt(lag['max'])} ms "
        f"cpu server {r['server_cpu_pct']:.0f}% loadgen {r['loadgen_cpu_pct']:.0f}%{rss_text}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="each real-time phase (default 60)")
    parser.add_argument("--fast-seconds", type=float, default=15.0, help="each as-fast-as-possible phase")
    parser.add_argument(
        "--connections", type=int, default=0, help="asyncjit's connections (default max(1000, 5x peer))"
    )
    parser.add_argument(
        "--max-queue-delay", type=float, default=0.002, help="asyncjit serve --max-queue-delay (seconds)"
    )
    parser.add_argument(
        "--peer-multiple",
        type=float,
        default=0.0,
        help="asyncjit's connections = this many times the peer's real-time connections, as "
        "measured in this run (instead of --connections)",
    )
    parser.add_argument("--backends", default="asyncio,trio")
    parser.add_argument(
        "--workers", type=int, default=1, help="asyncjit serve --workers (max-streams is per worker)"
    )
    parser.add_argument("--window", type=int, default=4, help="frames in flight per connection, fast phases")
    parser.add_argument("--peer-connections", type=int, default=0, help="skip the peer's capacity search")
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="asyncio's loop for the server under test and the peer (asyncjit serve --loop; auto: "
        "uvloop when installed); the in-process vad_mux runs on both asyncio loops, the faster scored",
    )
    parser.add_argument("--loadgen", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--peer", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--inproc", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loadgen:
        port, conns, seconds, fast, window = args.loadgen
        result = asyncio.run(LoadGen(int(port), int(conns), float(seconds), fast == "1", int(window)).run())
        print(json.dumps(result))
        return
    if args.peer:
        run_peer(args.peer, args.loop)
        return
    if args.inproc:
        run_inproc(int(args.inproc[0]), float(args.inproc[1]), args.inproc[2])
        return

    print(f"load before: {os.getloadavg()}  cpus: {os.cpu_count()}", flush=True)
    loop = resolve_loop(args.loop)
    print(f"asyncio's loop (the peer's and asyncjit serve's on asyncio): {loop}", flush=True)
    # 1. the peer
    port_file = f"/tmp/asyncjit-serve-peer-{os.getpid()}"
    peer = _python(__file__, "--peer", port_file, "--loop", loop)
    try:
        peer_port = _wait_for_port(port_file)
        peer_cap: dict[str, Any] | None = None
        if args.peer_connections:
            peer_rt = args.peer_connections
            kept = "kept" if real_time_kept(peer_probe(peer_port, peer.pid, peer_rt, args)) else "NOT kept"
            print(f"peer credited with {peer_rt} connections as given (--peer-connections; {kept})")
        else:
            cap = loadgen(peer_port, 64, args.fast_seconds, True, args.window, peer.pid)
            show("peer, as fast as possible", cap)
            peer_cap = cap
            ceiling = int(cap["chunks_per_s"] / (16000 / 512))
            print(
                f"peer throughput {cap['chunks_per_s']:.0f} chunks/s = {ceiling} connections' worth",
                flush=True,
            )
            peer_rt = peer_real_time(peer_port, peer.pid, ceiling, args)
    finally:
        peer.kill()
        peer.wait()
        os.unlink(port_file)
    # 2. asyncjit serve
    n = args.connections or max(1000, 5 * peer_rt)
    if args.peer_multiple:
        n = int(-(-args.peer_multiple * peer_rt // 1))
    fast_figures: dict[str, float] = {}
    for backend in args.backends.split(","):
        server, port, metrics_port = start_server(backend, n + 64, args.workers, args.max_queue_delay, loop)
        label = f"{backend} on {loop}" if backend == "asyncio" and loop != "asyncio" else backend
        try:
            rt = loadgen(port, n, args.seconds, False, args.window, server.pid)
            show(f"asyncjit serve ({label}, {args.workers} worker(s)), real time", rt)
            kept = real_time_kept(rt)
            print(f"  {n} connections kept in real time: {'yes' if kept else 'NO'}", flush=True)
            print(f"  drained in {wait_drained(metrics_port):.1f} s", flush=True)
            fast = loadgen(port, n, args.fast_seconds, True, args.window, server.pid)
            show(f"asyncjit serve ({label}, {args.workers} worker(s)), as fast as possible", fast)
            fast_figures[backend] = fast["chunks_per_s"]
        finally:
            print(f"  SIGTERM: {stop_server(server)}", flush=True)
        # 3. in-process vad_mux, same streams; on asyncio on both loops (its best form is scored)
        loops = ["asyncio", "uvloop"] if backend == "asyncio" and loop == "uvloop" else [backend]
        inproc_cps = {}
        for mux_loop in loops:
            inproc = _python(
                __file__, "--inproc", str(n), str(args.fast_seconds), mux_loop, stdout=subprocess.PIPE
            )
            out, _ = inproc.communicate()
            inproc_cps[mux_loop] = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])[
                "chunks_per_s"
            ]
        best = max(inproc_cps, key=inproc_cps.__getitem__)
        mux_cps = inproc_cps[best]
        each = ", ".join(f"on {k} {v:.0f}" for k, v in inproc_cps.items())
        print(
            f"in-process vad_mux ({backend}), {n} streams: {mux_cps:.0f} chunks/s"
            f"{f' ({each}; the faster scored)' if len(loops) > 1 else ''}; through the server "
            f"{fast_figures[backend] / mux_cps:.2f}x of it (goal >= 0.6x)",
            flush=True,
        )
        if peer_cap is not None:
            per_cpu = (fast["chunks_per_s"] / max(fast["server_cpu_pct"], 1e-9)) / (
                peer_cap["chunks_per_s"] / max(peer_cap["server_cpu_pct"], 1e-9)
            )
            print(
                f"  as fast as possible vs the peer: {fast['chunks_per_s'] / peer_cap['chunks_per_s']:.2f}x "
                f"chunks/s, {per_cpu:.2f}x chunks per server CPU-second",
                flush=True,
            )
        print(
            f"  real time: {n} connections ({n / max(peer_rt, 1):.1f}x the peer's {peer_rt}) "
            f"{'kept' if kept else 'NOT kept'} (goal: >= 5x the peer's and >= 1000, kept)",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
