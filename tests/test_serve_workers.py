"""``asyncjit serve --workers N``: processes sharing the ports, the supervisor's metrics and signals.

Each test starts the real command (a supervisor and its forked workers) on loopback and talks to
it with the ``wyoming`` package's client, as the single-process tests do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from serve_helpers import BACKENDS, cli_loop, model, speech_pcm

pytest.importorskip("wyoming")
from test_serve import _cli, assert_edges_match, edges_of, reference_edges, wyoming_stream

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")),
        reason="--workers needs Linux",
    ),
]


def _start(*args: str) -> tuple[Any, dict[str, int]]:
    """``asyncjit serve --workers 2`` on free ports; the process and its ports by listener."""
    model()  # compiled (and cached) here, so the workers start at once
    wyoming = "tcp://127.0.0.1:0"
    if "--wyoming" in args:
        i = args.index("--wyoming")
        wyoming, args = args[i + 1], args[:i] + args[i + 2 :]
    proc = _cli(
        "--workers", "2", "--wyoming", wyoming, "--metrics", "127.0.0.1:0", *args, start_new_session=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening" not in line:
        _kill(proc)
        raise AssertionError(f"no listening line: {line!r} {proc.communicate()[1]}")
    assert "(2 workers)" in line
    return proc, {k: int(p) for k, p in re.findall(r"(\w+)=\w+://(?:\[[^\]]+\]|[^:\s]+):(\d+)", line)}


def _kill(proc: Any) -> None:
    """The supervisor and its workers (a session of their own), whatever state they are in."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        proc.communicate()


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _chunks_by_worker(metrics: bytes) -> dict[str, float]:
    found = re.findall(rb'asyncjit_serve_chunks_total\{worker="(\d+)"\} ([\d.e+]+)', metrics)
    return {w.decode(): float(v) for w, v in found}


def _stop(proc: Any, timeout: float = 10.0) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_share_the_port_and_each_answers_like_one_server(backend: str) -> None:
    """16 Wyoming clients at once over two workers: every one gets the speech timestamps, both
    workers served some of them (the kernel spreads connections by their address), the
    supervisor's /metrics has each worker's samples and /health sums their streams; SIGTERM ends
    both and exits 0."""
    proc, ports = _start(*cli_loop(backend))
    try:
        want = reference_edges()
        pcm = speech_pcm()

        async def main() -> list[list[Any]]:
            return list(await asyncio.gather(*(wyoming_stream(ports["wyoming"], pcm) for _ in range(16))))

        for events in asyncio.run(main()):
            assert_edges_match(edges_of(events), want)
        status, body = _get(ports["metrics"], "/health")
        health = json.loads(body)
        assert status == 200 and health["status"] == "ok", health
        assert health["workers"] == 2 and health["max_streams"] == 2 * 1024
        status, text = _get(ports["metrics"], "/metrics")
        by_worker = _chunks_by_worker(text)
        assert status == 200 and set(by_worker) == {"0", "1"}, text[:2000]
        per_stream = len(pcm) // 2 // 512
        assert sum(by_worker.values()) >= 16 * per_stream
        assert all(v > 0 for v in by_worker.values()), by_worker  # all 16 on one: p = 2^-15
        assert _get(ports["metrics"], "/nothing")[0] == 404
        code, err = _stop(proc)
    finally:
        _kill(proc)
    assert code == 0, err
    assert "serve.worker_died" not in err
    assert len(re.findall(r"serve.heap_frozen worker=\d objects=\d{5,}", err)) == 2, err[:2000]
    assert len(re.findall(rf"serve.loop .*loop={backend}", err)) == 2, err[:2000]  # each worker's


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_reaches_every_workers_connections(backend: str) -> None:
    """Clients parked mid-utterance on both workers: SIGTERM to the supervisor closes every one
    with ``shutdown`` and the whole tree exits 0 within the drain's grace."""
    proc, ports = _start("--grace", "2", *cli_loop(backend))
    try:

        async def main() -> list[list[dict[str, Any]]]:
            conns = []
            for _ in range(12):
                reader, writer = await asyncio.open_connection("127.0.0.1", ports["wyoming"])
                header = {"type": "audio-start", "data": {"rate": 16000, "width": 2, "channels": 1}}
                writer.write(json.dumps(header).encode() + b"\n")
                await writer.drain()
                conns.append((reader, writer))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out = []
            for reader, writer in conns:
                events = []
                while line := await asyncio.wait_for(reader.readline(), 10):
                    event = json.loads(line)
                    if event.get("data_length"):
                        event["data"] = json.loads(await reader.readexactly(event["data_length"]))
                    events.append(event)
                writer.close()
                out.append(events)
            assert time.monotonic() - t0 < 5
            return out

        results = asyncio.run(main())
        proc.communicate(timeout=10)
    finally:
        _kill(proc)
    assert proc.returncode == 0
    for events in results:
        assert events[-1]["type"] == "error" and events[-1]["data"]["code"] == "shutdown", events


def test_a_dead_worker_leaves_the_other_serving() -> None:
    """A worker killed outright: the other keeps taking connections (the dead one's socket left
    the port's group), /health says ``degraded``, and the supervisor exits 1 at the end."""
    proc, ports = _start()
    try:
        assert _get(ports["metrics"], "/health")[0] == 200
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = f.read().split()
        assert len(children) == 2
        os.kill(int(children[0]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while json.loads(_get(ports["metrics"], "/health")[1])["workers"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        health = json.loads(_get(ports["metrics"], "/health")[1])
        assert health["status"] == "degraded" and health["workers_started"] == 2
        want = reference_edges()
        pcm = speech_pcm()
        for _ in range(4):  # every new connection reaches the live worker
            assert_edges_match(edges_of(asyncio.run(wyoming_stream(ports["wyoming"], pcm))), want)
        code, err = _stop(proc)
    finally:
        _kill(proc)
    assert code == 1
    assert "serve.worker_died" in err


def test_worker_flags_and_startup_failures_are_clear() -> None:
    """``--workers 0``: a message and exit 2, nothing started; a model a worker cannot load: the
    worker's error, every worker stopped, exit 2."""
    proc = _cli("--workers", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--workers must be >= 1" in err
    proc = _cli(
        "--workers", "2", "--wyoming", "tcp://127.0.0.1:0", "--model-path", "missing.onnx", "--state", "a:b"
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no such file" in err, err


def test_the_joined_exposition_is_valid_prometheus() -> None:
    """The supervisor's /metrics parses back: one family per name, each worker's series apart
    (its ``worker`` label), and ``asyncjit_serve_worker_up`` for both."""
    from prometheus_client.parser import text_string_to_metric_families

    proc, ports = _start()
    try:
        asyncio.run(wyoming_stream(ports["wyoming"], speech_pcm()[: 16000 * 2]))
        families = list(text_string_to_metric_families(_get(ports["metrics"], "/metrics")[1].decode()))
        names = [f.name for f in families]
        assert len(names) == len(set(names)), names
        by_name = {f.name: f for f in families}
        up = {s.labels["worker"]: s.value for s in by_name["asyncjit_serve_worker_up"].samples}
        assert up == {"0": 1.0, "1": 1.0}
        latency = by_name["asyncjit_serve_step_latency_seconds"].samples
        for worker in ("0", "1"):
            inf = [s for s in latency if s.labels.get("worker") == worker and s.labels.get("le") == "+Inf"]
            assert len(inf) == 1  # one histogram series per worker
        assert _stop(proc)[0] == 0
    finally:
        _kill(proc)


def test_websocket_and_ipv6_listeners_are_shared_too() -> None:
    """``--websocket`` with workers: a WebSocket client gets its hello (from either worker); an
    IPv6 Wyoming address keeps its brackets and serves."""
    websockets = pytest.importorskip("websockets")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc, ports = _start("--wyoming", "tcp://[::1]:0", "--websocket", "ws://127.0.0.1:0")
    try:

        async def hello() -> dict[str, Any]:
            async with websockets.connect(f"ws://127.0.0.1:{ports['websocket']}") as ws:
                return dict(json.loads(await ws.recv()))

        for _ in range(4):
            assert asyncio.run(hello())["type"] == "hello"

        async def ping() -> dict[str, Any]:
            reader, writer = await asyncio.open_connection("::1", ports["wyoming"])
            writer.write(b'{"type": "ping", "data": {"text": "x"}}\n')
            await writer.drain()
            head = json.loads(await reader.readline())
            writer.close()
            return dict(head)

        assert asyncio.run(ping())["type"] == "pong"
        assert _stop(proc)[0] == 0
    finally:
        _kill(proc)


def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    """``SO_REUSEPORT`` alone would share a port another program listens on (each would get
    some of the connections); the supervisor refuses it: exit 2, no worker started."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        proc = _cli("--workers", "2", "--wyoming", f"tcp://127.0.0.1:{port}", start_new_session=True)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            _kill(proc)
    assert proc.returncode == 2 and "in use" in err, err


def test_a_signal_while_the_workers_start_stops_them_all() -> None:
    """SIGTERM before the workers are ready: they are stopped (none left running), exit 0."""
    proc = _cli("--workers", "2", "--wyoming", "tcp://127.0.0.1:0", start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        children: list[str] = []
        while len(children) < 2 and time.monotonic() < deadline:  # both forked, not yet ready
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                children = f.read().split()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
        time.sleep(0.5)
        for pid in children:
            assert not os.path.exists(f"/proc/{pid}"), pid  # reaped: not even a zombie
    finally:
        _kill(proc)


def test_ctrl_c_to_the_process_group_exits_0() -> None:
    """Ctrl-C in a terminal signals the supervisor and every worker at once (then the
    supervisor's SIGTERM may find a worker already past its drain): still a clean exit 0."""
    for _ in range(3):
        proc, _ = _start()
        try:
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=20)
        finally:
            _kill(proc)
        assert proc.returncode == 0, err
        assert "serve.worker_died" not in err


def test_the_listening_line_brackets_ipv6_hosts() -> None:
    """One line for a single server and a supervisor alike; scripts read the ports from it, so an
    IPv6 host keeps its brackets (the single server's line dropped them before)."""
    from asyncjit.serve._server import listening_line

    addresses = {"wyoming": ("::1", 10400), "metrics": ("127.0.0.1", 9100)}
    assert listening_line("silero-vad", addresses) == (
        "asyncjit serve: silero-vad listening wyoming=tcp://[::1]:10400 metrics=http://127.0.0.1:9100"
    )
    many = listening_line("silero-vad", addresses, 2)
    assert many.startswith("asyncjit serve: silero-vad (2 workers) listening wyoming=tcp://[::1]:10400")
