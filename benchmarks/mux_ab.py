"""Two trees' ``StreamMux`` in one process, alternated round by round: the loop's CPU per step.

The mux's own cost per step (a few microseconds of Python on the loop thread) moves by 20-40%
between minutes on a shared host, in both CPU time and wall time, so two versions can only be
compared side by side. This copies the other tree's ``asyncjit`` package under another name
(its modules import each other relatively, so the copy is self-contained), then serves the same
workload through each tree's ``StreamMux`` in turns, on one plan::

    git worktree add /tmp/base HEAD~1          # the tree to compare with
    .venv/bin/python benchmarks/mux_ab.py /tmp/base --backend both --step instant
    .venv/bin/python benchmarks/mux_ab.py /tmp/base --step silero --rounds 8

``--step instant`` serves a step that only copies each chunk's first sample (the mux's own
cost, no compute: nearly every chunk's CPU is the loop's); ``silero`` the real Silero VAD slot
plan. Each stream is a task stepping its chunks one after another, as in ``multiplex.py``.
Prints each tree's chunks/s and loop-thread CPU per chunk per round, and the median over rounds
of each round's own ratio (other / this tree's loop CPU: above 1 is this tree cheaper).

``--instructions`` counts instead of timing, for a host whose speed drifts: each tree's mux
serves a step that resolves in the loop itself (no device thread, batches only when full) under
``valgrind --tool=callgrind``, at two lengths of the same streams; the difference over the
extra chunks is the instructions per chunk of the mux and the loop, the same from run to run
whatever else the machine does (about a minute per count; needs valgrind)::

    .venv/bin/python benchmarks/mux_ab.py /tmp/base --instructions
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt
import structlog

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

from _machine import machine_line  # noqa: E402  (benchmarks/ is on the path when run as a script)

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # benchmarks/silero_vad.py


def load_other(tree: str, name: str = "asyncjit_other") -> Any:
    """The other tree's ``asyncjit.scheduler``, imported as ``<name>.scheduler`` from a copy."""
    src = os.path.join(tree, "asyncjit")
    if not os.path.isfile(os.path.join(src, "scheduler", "_mux.py")):
        raise SystemExit(f"{tree} has no asyncjit/scheduler/_mux.py")
    root = tempfile.mkdtemp(prefix="mux_ab_")
    shutil.copytree(src, os.path.join(root, name), ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, root)
    return importlib.import_module(f"{name}.scheduler")


async def serve(
    mux_cls: Any, step: Any, chunks: npt.NDArray[Any], max_queue_delay: float = 0.002
) -> tuple[float, float]:
    """(chunks/s, loop-thread CPU µs per chunk) of ``chunks [streams, n, *shape]`` through a mux."""
    n = chunks.shape[0]
    async with mux_cls(
        step, max_streams=n, max_batch_size=256, max_queue_delay=max_queue_delay, idle_timeout=None
    ) as mux:

        async def one(i: int) -> None:
            async with mux.open_stream() as s:
                for c in chunks[i]:
                    await s.step(c)

        t0, c0 = time.perf_counter(), time.thread_time()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    total = chunks.shape[0] * chunks.shape[1]
    return total / wall, cpu / total * 1e6


def _instant(chunks: npt.NDArray[Any], states: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    return chunks[:, 0].copy(), states


class LoopStep:
    """A pipelined step whose batches complete in the loop at the next checkpoint: the mux's and
    the loop's own work only, with no thread to make the instruction count vary."""

    max_batch_size = 256
    chunk_shape = (512,)
    chunk_dtype = np.dtype(np.float32)

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._out = np.zeros((256, 2), np.float32)

    async def run(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
        return await self.complete(self.launch(chunks, slots))

    def launch(self, chunks: npt.NDArray[Any], slots: npt.NDArray[np.int32]) -> int:
        return len(slots)

    async def complete(self, b: int) -> npt.NDArray[Any]:
        await anyio.lowlevel.checkpoint()
        return self._out[:b]

    def reset_slot(self, slot: int, state: object | None = None) -> None:
        pass

    def check_state(self, state: object) -> object:
        return state


INSTRUCTION_LENGTHS = (4, 68)
"""Chunks per stream of the two counted runs (start-up cancels out of their difference)."""


def _child(backend: str, streams: int, length: int) -> None:
    """The counted run: ``streams`` streams of ``length`` chunks through the ``StreamMux`` on the
    path; batches go only when full (a deadline would depend on valgrind's speed)."""
    from asyncjit.scheduler import StreamMux

    chunks = np.full((streams, length, 512), 0.5, np.float32)
    anyio.run(serve, StreamMux, LoopStep(streams), chunks, 60.0, backend=backend)


def _count(tree: str, backend: str, streams: int, length: int, counted: bool = True) -> int:
    """Instructions of one whole child run under callgrind (``counted`` False: a plain run that
    writes the tree's bytecode caches first, so that no counted run compiles a module)."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] if counted else []
    cmd += [sys.executable, os.path.abspath(__file__), tree, "--child", backend, str(streams), str(length)]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "PYTHONHASHSEED": "0"}
    if counted:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if not counted:
        return 0
    total = [line for line in done.stderr.splitlines() if "Collected :" in line]
    if done.returncode or not total:
        raise SystemExit(f"callgrind run failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    return int(total[-1].rsplit(":", 1)[1].replace(",", ""))


def instructions_main(other: str, backends: list[str], streams: int) -> None:
    """Instructions per chunk of each tree's mux per backend: two run lengths each, the runs
    spread over the cores (the counts do not depend on what else runs)."""
    from concurrent.futures import ThreadPoolExecutor

    trees = {"this": os.path.dirname(_HERE), "other": other}
    jobs = [(k, b, n) for k in trees for b in backends for n in INSTRUCTION_LENGTHS]
    print(f"{streams} streams, loop-resolved step, callgrind instructions per chunk, this tree vs {other}")
    for tree in trees.values():
        _count(tree, backends[0], 4, 1, counted=False)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        counts = dict(
            zip(jobs, pool.map(lambda j: _count(trees[j[0]], j[1], streams, j[2]), jobs), strict=True)
        )
    extra = streams * (INSTRUCTION_LENGTHS[1] - INSTRUCTION_LENGTHS[0])
    for b in backends:
        per = {
            k: (counts[k, b, INSTRUCTION_LENGTHS[1]] - counts[k, b, INSTRUCTION_LENGTHS[0]]) / extra
            for k in trees
        }
        print(
            f"{b:7s} this {per['this']:8.0f}   other {per['other']:8.0f}   "
            f"other / this {per['other'] / per['this']:.3f}"
        )


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        _child(sys.argv[i + 1], int(sys.argv[i + 2]), int(sys.argv[i + 3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("other", help="the other source tree (a checkout with asyncjit/ in it)")
    ap.add_argument("--backend", choices=["both", "asyncio", "trio"], default="both")
    ap.add_argument("--step", choices=["instant", "silero"], default="instant")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=40, help="chunks per stream")
    ap.add_argument(
        "--rounds", type=int, default=12, help="alternated rounds (even: each tree goes first half the time)"
    )
    ap.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead")
    args = ap.parse_args()
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    if args.instructions:
        instructions_main(args.other, backends, args.streams)
        return
    other = load_other(args.other)
    from asyncjit.runtime import Client
    from asyncjit.scheduler import HostBatchedStep, StreamMux

    sys.path.insert(0, _HERE)
    from multiplex import silero_factory, speech_workload

    print(machine_line())
    trees = {"this": StreamMux, "other": other.StreamMux}
    with Client("cpu", inline="never") as client:
        n = args.streams
        if args.step == "silero":
            step = silero_factory(client, 256, n)
        else:
            step = HostBatchedStep(
                client, _instant, max_batch_size=256, num_slots=n, chunk_shape=(512,), state_shape=(4,)
            )
        chunks = speech_workload(n, args.chunks, 512)
        print(f"{n} streams x {args.chunks} chunks, step {args.step}, this tree vs {args.other}")
        for backend in backends:
            anyio.run(serve, StreamMux, step, chunks, backend=backend)  # warm: compile, threads
            res: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
            for r in range(args.rounds):
                order = list(trees) if r % 2 == 0 else list(reversed(trees))
                for k in order:
                    res[k].append(anyio.run(serve, trees[k], step, chunks, backend=backend))
            for k in trees:
                print(
                    f"{backend:7s} {k:5s} chunks/s (k) {' '.join(f'{x[0] / 1e3:5.1f}' for x in res[k])}   "
                    f"loop us/chunk {' '.join(f'{x[1]:5.2f}' for x in res[k])}"
                )
            cpu = [o[1] / t[1] for t, o in zip(res["this"], res["other"], strict=True)]
            thr = [t[0] / o[0] for t, o in zip(res["this"], res["other"], strict=True)]
            print(
                f"{backend:7s} other / this loop CPU per chunk: median {statistics.median(cpu):.3f} "
                f"(rounds {min(cpu):.2f}-{max(cpu):.2f}); this / other chunks/s: median "
                f"{statistics.median(thr):.3f}"
            )


if __name__ == "__main__":
    main()
