"""The server's CPU per audio chunk: ``VadServer`` in this process, the load generator of
``benchmarks/serve.py`` in another.

Run::

    .venv/bin/python benchmarks/serve_cpu.py                      # 300 connections, asyncio, 6 s
    .venv/bin/python benchmarks/serve_cpu.py --backend trio --window 1 --seconds 5
    .venv/bin/python benchmarks/serve_cpu.py --backend asyncio,uvloop --repeat 2   # the two loops
    .venv/bin/python benchmarks/serve_cpu.py --real-time --connections 150
    .venv/bin/python benchmarks/serve_cpu.py --profile 25         # + the loop thread's cProfile
    .venv/bin/python benchmarks/serve_cpu.py --py-spy stacks.txt  # + py-spy's stacks (pip install py-spy)

Loads: as fast as possible with ``--window`` frames (1,024 samples and a ``ping`` each) in flight
per connection (1: a real-time client's pattern, every read one frame), or ``--real-time``
(a frame every 64 ms per connection: a fixed load, and the chunk->pong lag). On a shared machine
chunks/s depends on what else runs; the CPU the server spends per chunk much less (a little,
through the batch sizes), so that is the figure to compare, before and after alternated in one
sitting. It reports, over a steady window (every connection admitted and streaming): server
process CPU-seconds per 1,000 chunks (``time.process_time``: the loop thread, the mux's native
calls and any other thread; ``os.times`` for the system part), the loop thread's alone
(``time.thread_time``), chunks/s and the load generator's lag. ``--profile N`` runs cProfile on
the loop thread over the window and prints its top N functions by own time (the CPU figures of a
profiled run are inflated: compare unprofiled runs).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import subprocess
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # benchmarks/silero_vad.py


def measure(
    backend: str,
    conns: int,
    seconds: float,
    window: int,
    profile: int,
    spy_file: str | None = None,
    real_time: bool = False,
    max_queue_delay: float = 0.002,
) -> dict[str, Any]:
    import anyio
    import structlog

    from asyncjit._loops import run_options
    from asyncjit.serve import ServeConfig, VadServer, load_model

    logging.getLogger("asyncjit").setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    server = VadServer(
        load_model("silero-vad", max_streams=conns + 16),
        ServeConfig(
            wyoming="tcp://127.0.0.1:0",
            max_streams=conns + 16,
            idle_timeout=300.0,
            max_queue_delay=max_queue_delay,
        ),
    )
    result: dict[str, Any] = {"backend": backend, "connections": conns, "max_queue_delay": max_queue_delay}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            addresses = await tg.start(server.serve)
            port = addresses["wyoming"][1]
            gen = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(_HERE, "serve.py"),
                    "--loadgen",
                    str(port),
                    str(conns),
                    str(seconds + 1.0),
                    "0" if real_time else "1",
                    str(window),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            while len(server.admitted) < conns and gen.poll() is None:
                await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # every connection streaming
            chunks = lambda: server.metrics.sample("asyncjit_serve_chunks_total")  # noqa: E731
            prof = cProfile.Profile() if profile else None
            c0, p0, t0, w0, o0 = (
                chunks(),
                time.process_time(),
                time.thread_time(),
                time.perf_counter(),
                os.times(),
            )
            if prof is not None:
                prof.enable()
            spy = None
            if spy_file:  # py-spy (pip install py-spy): sampled, so CPU-true, and cheap
                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "-p",
                        str(os.getpid()),
                        "-d",
                        str(int(seconds - 0.5)),
                        "-r",
                        "250",
                        "-f",
                        "raw",
                        "-o",
                        spy_file,
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            await anyio.sleep(seconds - 0.5)
            if prof is not None:
                prof.disable()
            c1, p1, t1, w1, o1 = (
                chunks(),
                time.process_time(),
                time.thread_time(),
                time.perf_counter(),
                os.times(),
            )
            n = c1 - c0
            result.update(
                chunks=int(n),
                chunks_per_s=round(n / (w1 - w0)),
                cpu_s_per_1000_chunks=round(1000 * (p1 - p0) / max(n, 1), 4),
                loop_cpu_s_per_1000_chunks=round(1000 * (t1 - t0) / max(n, 1), 4),
                system_cpu_s_per_1000_chunks=round(1000 * (o1.system - o0.system) / max(n, 1), 4),
                server_cpu_pct=round(100 * (p1 - p0) / (w1 - w0)),
            )
            while spy is not None and spy.poll() is None:
                await anyio.sleep(0.1)
            while gen.poll() is None:
                await anyio.sleep(0.1)
            out = gen.communicate()[0]
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if lines:
                gen_result = json.loads(lines[-1])
                result.update(
                    dropped=gen_result["dropped"],
                    errors=gen_result["errors"],
                    lag_ms=gen_result["lag_ms"],
                    loadgen_cpu_pct=round(gen_result["loadgen_cpu_pct"]),
                )
            server.shutdown()
            if prof is not None:
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(profile)
                result["profile"] = text.getvalue()

    name, options = run_options(backend)
    anyio.run(main, backend=name, backend_options=options)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        default="asyncio",
        help="asyncio (the standard loop), uvloop (asyncio on uvloop's) or trio (comma-separated: each)",
    )
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=6.0, help="the measured window (plus ramp)")
    parser.add_argument("--window", type=int, default=4, help="frames in flight per connection")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="each connection sends a frame every 64 ms instead (a fixed load: batch sizes, and so "
        "the CPU per chunk, depend less on how much CPU the server gets)",
    )
    parser.add_argument(
        "--max-queue-delay", type=float, default=0.002, help="the server's max_queue_delay (seconds)"
    )
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N")
    parser.add_argument("--py-spy", metavar="FILE", help="py-spy's collapsed stacks of the window to FILE")
    args = parser.parse_args()
    from asyncjit._loops import uvloop_installed

    if "uvloop" in args.backend.split(",") and not uvloop_installed():
        raise SystemExit("--backend uvloop needs the uvloop package (pip install uvloop)")
    print(f"load: {os.getloadavg()}", flush=True)
    for _ in range(args.repeat):
        for backend in args.backend.split(","):
            r = measure(
                backend,
                args.connections,
                args.seconds,
                args.window,
                args.profile,
                args.py_spy,
                args.real_time,
                args.max_queue_delay,
            )
            profile = r.pop("profile", None)
            print(json.dumps(r), flush=True)
            if profile:
                print(profile, flush=True)


if __name__ == "__main__":
    main()
