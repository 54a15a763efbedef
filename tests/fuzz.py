"""``make fuzz``: the differential fuzzer, for a given time and seed, with a repro per failure.

    python tests/fuzz.py --minutes 30 --seed 1      # what ``make fuzz MINUTES=30 SEED=1`` runs
    python tests/fuzz.py --seed 1 --case 417        # replay one graph, print it and its findings
    python tests/fuzz.py --onnx --minutes 10        # mutated ONNX models (tests/fuzzing_onnx.py)
    python tests/fuzz.py --kinds conv1d_dft,unary,binary --minutes 5   # only these op kinds

Graph ``i`` of seed ``S`` is drawn by ``tests/strategies.graph_cases`` from a random source
seeded with ``"S:i"``, so ``--seed S --case i`` rebuilds exactly that graph in any process.
Graphs run in a worker subprocess that reports each graph before running it: a worker that
dies (a segfault, an abort) or hangs is reported as a crash with the graph's repro, and a new
worker resumes at the next graph. The summary counts graphs, bindings, runs (bindings times
paths), mismatches, crashes and build errors (the Tensor API raising on a program the generator
believes valid); the exit status is 1 when any was found. With ``--onnx`` each "graph" is a
mutated ONNX model that must run or raise a typed ``JitError`` (``tests/fuzzing_onnx.py``): an
untyped exception counts as a mismatch, and the summary adds how the models ended.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from random import Random
from typing import Any

HERE = Path(__file__).resolve().parent
HANG_SECONDS = 300.0
PROGRESS_SECONDS = 120.0
WORKER_MEMORY_BYTES = 8 << 30
"""A worker's address space (about 0.5 GiB in use): a graph or model asking for more gets a
``MemoryError`` (asyncjit's ``OutOfMemoryError`` where it allocates) instead of the machine's
OOM killer ending the worker, or another process."""


def dtype_sets() -> list[tuple[Any, ...]]:
    """The dtypes one graph may use: the core set (twice as likely), with float64, and the core
    floats with one of the wider ints (one int dtype per graph keeps promotion a total order)."""
    import numpy as np
    from strategies_kinds import ALL_DTYPES
    from strategies_nn import WIDE_INT_DTYPES

    f32, f16, f64, b = (np.dtype(d) for d in (np.float32, np.float16, np.float64, np.bool_))
    return [ALL_DTYPES, ALL_DTYPES, (*ALL_DTYPES, f64), *((f32, f16, d, b) for d in WIDE_INT_DTYPES)]


def draw_case(seed: int, index: int) -> Any:
    """Graph ``index`` of ``seed``: hypothesis' generator driven by a seeded random source."""
    from hypothesis import strategies as st
    from hypothesis.control import BuildContext
    from hypothesis.internal.conjecture.data import ConjectureData
    from strategies import graph_cases
    from strategies_case import VALUE_PROFILES
    from strategies_kinds import ALL_KINDS

    data = ConjectureData(random=Random(f"{seed}:{index}"))
    with BuildContext(data, wrapped_test=lambda: None):
        if os.environ.get("ASYNCJIT_FUZZ_DYNAMIC") == "1":
            return draw_dynamic_case(data, index)
        dtypes = data.draw(st.sampled_from(dtype_sets()))
        # every fourth graph may also use the float neural-network kinds (N-d convs, pools,
        # cumsum); argmax/topk stay in tests/test_nn_ops.py, on exact inputs: over rounded values
        # a tie in the reference may break either way, which no perturbed run can show
        kinds = (*ALL_KINDS, "conv2d", "pool", "cumsum") if index % 4 == 3 else ALL_KINDS
        if chosen := os.environ.get("ASYNCJIT_FUZZ_KINDS"):
            kinds = tuple(chosen.split(","))
        return data.draw(
            graph_cases(kinds=kinds, dtypes=dtypes, profiles=VALUE_PROFILES, max_bound=24, max_steps=8)
        )


def draw_dynamic_case(data: Any, index: int) -> Any:
    """``--dynamic``: even graphs use data-dependent sizes (masks, computed slice stops), odd ones
    every op kind with their vars declared unbounded."""
    from hypothesis import strategies as st
    from strategies import DYNAMIC_KINDS, graph_cases, unbounded_case
    from strategies_case import VALUE_PROFILES

    dtypes = data.draw(st.sampled_from(dtype_sets()))
    if index % 2 == 0:
        kinds = dict(dtypes=dtypes, profiles=VALUE_PROFILES, max_bound=24, max_steps=8)
        return data.draw(graph_cases(kinds=DYNAMIC_KINDS, **kinds))
    return unbounded_case(data.draw(graph_cases(dtypes=dtypes, profiles=VALUE_PROFILES, max_bound=24)))


def describe(case: Any) -> str:
    """The graph as text: vars, placeholders, program and outputs."""
    lines = [f"vars: {', '.join(f'{v.name} in [{v.min}, {v.max}]' for v in case.variables)}"]
    lines += [
        f"  {p.node.attrs['name']}: {p.dtype.name}{tuple(map(str, p.shape))}" for p in case.placeholders
    ]
    lines += [f"  program: {case.describe()}", f"  outputs: v{case.output_ids}, value profile {case.profile}"]
    return "\n".join(lines)


def run_one(seed: int, index: int) -> dict[str, Any]:
    """Build and check graph ``index``; a JSON-able report."""
    if os.environ.get("ASYNCJIT_FUZZ_ONNX") == "1":
        from fuzzing_onnx import run_one as run_onnx

        return run_onnx(seed, index)
    from fuzzing import case_bindings, check_case

    try:
        case = draw_case(seed, index)
    except Exception as exc:
        from hypothesis.errors import HypothesisException

        if isinstance(exc, HypothesisException) or type(exc).__name__ in ("StopTest", "Frozen"):
            return {"case": index, "skipped": True}
        return {"case": index, "build_error": f"{type(exc).__name__}: {exc}"}
    report: dict[str, Any] = {"case": index, "graph": describe(case)}
    stats: dict[str, int] = {}
    try:
        runs, found = check_case(case, seed=index, stats=stats)
    except Exception as exc:
        report.update(runs=0, bindings=0, mismatches=[f"compile raised {type(exc).__name__}: {exc}"])
        return report
    from asyncjit.compiler import compile as aj_compile

    sig = aj_compile(case.outputs, case.placeholders).signature
    report.update(
        runs=runs,
        bindings=len(case_bindings(case, [*sig.var_names, *sig.fixed])),
        mismatches=[str(m) for m in found],
        elements=stats.get("elements", 0),
        ill_conditioned=stats.get("skipped", 0),
    )
    return report


def worker(seed: int, start: int, stop: int, out_fd: int, crash_at: int | None) -> None:
    """Run graphs ``start..stop-1``, announcing each before it runs (so a crash names it)."""
    os.environ.setdefault("ASYNCJIT_CACHE_DIR", "off")
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):  # not Linux, or a lower hard limit already
        pass
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    with os.fdopen(out_fd, "w", buffering=1) as out:
        for index in range(start, stop):
            out.write(json.dumps({"start": index}) + "\n")
            if index == crash_at:
                os.abort()  # only for testing the crash guard (--crash-at)
            out.write(json.dumps(run_one(seed, index)) + "\n")


def _repro(seed: int, index: int) -> str:
    mode = " --onnx" if os.environ.get("ASYNCJIT_FUZZ_ONNX") == "1" else ""
    return f"python tests/fuzz.py{mode} --seed {seed} --case {index}"


class Totals:
    def __init__(self) -> None:
        self.graphs = self.bindings = self.runs = self.mismatches = self.crashes = 0
        self.build_errors = self.bad_graphs = self.skipped = 0
        self.elements = self.ill_conditioned = 0
        self.outcomes: dict[str, int] = {}  # --onnx: "ran" or the typed error's class, per model
        self.shown = time.monotonic()

    def line(self) -> str:
        ended = " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"graphs={self.graphs} bindings={self.bindings} runs={self.runs} mismatches={self.mismatches} "
            f"(in {self.bad_graphs} graphs) crashes={self.crashes} build_errors={self.build_errors} "
            f"skipped_draws={self.skipped} elements={self.elements} ill_conditioned={self.ill_conditioned}"
            + (f" outcomes: {ended}" if ended else "")
        )


def _record(report: dict[str, Any], seed: int, totals: Totals) -> None:
    index = report["case"]
    if report.get("skipped"):
        totals.skipped += 1
        return
    if "build_error" in report:
        totals.build_errors += 1
        print(
            f"BUILD ERROR graph {index}: {report['build_error']}\n  repro: {_repro(seed, index)}", flush=True
        )
        return
    totals.graphs += 1
    totals.bindings += report["bindings"]
    totals.runs += report["runs"]
    totals.elements += report.get("elements", 0)
    if "outcome" in report:
        totals.outcomes[report["outcome"]] = totals.outcomes.get(report["outcome"], 0) + 1
    totals.ill_conditioned += report.get("ill_conditioned", 0)
    if report["mismatches"]:
        totals.mismatches += len(report["mismatches"])
        totals.bad_graphs += 1
        print(f"MISMATCH graph {index}:\n{report['graph']}", flush=True)
        for m in report["mismatches"][:6]:
            print(f"  {m}", flush=True)
        print(f"  repro: {_repro(seed, index)}", flush=True)


def supervise(seed: int, deadline: float, max_cases: int | None, crash_at: int | None) -> Totals:
    """Run workers until the deadline (or ``max_cases`` graphs); restart after a crash."""
    totals = Totals()
    index = 0
    stop = max_cases if max_cases is not None else 1 << 40
    while index < stop and time.monotonic() < deadline:
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed)]
        cmd += ["--start", str(index), "--stop", str(stop)]
        if crash_at is not None:
            cmd += ["--crash-at", str(crash_at)]
        cmd += ["--out-fd", str(write_fd)]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        log = open(os.devnull, "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, pass_fds=(write_fd,), stdout=log, stderr=subprocess.PIPE, env=env)
        os.close(write_fd)
        current: int | None = None
        buf = b""
        sel = selectors.DefaultSelector()
        sel.register(read_fd, selectors.EVENT_READ)
        last = time.monotonic()
        hung = False
        while True:
            if time.monotonic() > deadline and current is None:
                break
            events = sel.select(timeout=1.0)
            if not events:
                if current is not None and time.monotonic() - last > HANG_SECONDS:
                    hung = True
                    break
                if proc.poll() is not None:
                    break
                if time.monotonic() > deadline + HANG_SECONDS:
                    break
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                last = time.monotonic()
                if "start" in msg:
                    current = msg["start"]
                    continue
                _record(msg, seed, totals)
                current = None
                index = msg["case"] + 1
                if time.monotonic() - totals.shown > PROGRESS_SECONDS:
                    totals.shown = time.monotonic()
                    print(f"progress: {totals.line()}", flush=True)
            if time.monotonic() > deadline:
                # the run is over: a graph in flight now is abandoned, not a crash (fast graphs
                # keep the pipe busy, so a read rarely ends between a report and the next start)
                current = None
                break
        sel.close()
        os.close(read_fd)
        if proc.poll() is None:
            proc.kill()  # our own worker: past the deadline, or hung
        _, err = proc.communicate()
        log.close()
        if current is not None:
            totals.crashes += 1
            what = "hung" if hung else f"died with status {proc.returncode}"
            tail = err.decode(errors="replace").strip().splitlines()[-5:]
            print(f"CRASH graph {current}: worker {what}", flush=True)
            for t in tail:
                print(f"  | {t}", flush=True)
            print(f"  repro: {_repro(seed, current)}", flush=True)
            index = current + 1
        elif proc.returncode not in (0, None, -9) and index < stop and time.monotonic() < deadline:
            print(f"worker exited with status {proc.returncode} between graphs", flush=True)
            index += 1
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=1.0, help="how long to fuzz (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=None, help="stop after this many graphs")
    parser.add_argument("--case", type=int, default=None, help="replay graph CASE of SEED and exit")
    parser.add_argument(
        "--dynamic", action="store_true", help="graphs with data-dependent sizes and unbounded vars"
    )
    parser.add_argument(
        "--onnx", action="store_true", help="mutated ONNX models: each must run or raise a typed error"
    )
    parser.add_argument(
        "--kinds",
        default=None,
        help="only these op kinds, comma-separated (e.g. conv1d,conv2d): a focused run after a change",
    )
    parser.add_argument("--crash-at", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dynamic:  # workers inherit it
        os.environ["ASYNCJIT_FUZZ_DYNAMIC"] = "1"
    if args.onnx:
        os.environ["ASYNCJIT_FUZZ_ONNX"] = "1"
    if args.kinds:
        os.environ["ASYNCJIT_FUZZ_KINDS"] = args.kinds
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    if args.worker:
        worker(args.seed, args.start, args.stop, args.out_fd, args.crash_at)
        return 0
    if args.case is not None:
        os.environ.setdefault("ASYNCJIT_CACHE_DIR", "off")
        report = run_one(args.seed, args.case)
        print(report.get("graph", ""))
        if "outcome" in report:
            print(f"outcome: {report['outcome']}")
        for key in ("build_error", "skipped"):
            if key in report:
                print(f"{key}: {report[key]}")
        for m in report.get("mismatches", []):
            print(f"  {m}")
        found = len(report.get("mismatches", []))
        print(
            f"bindings={report.get('bindings', 0)} runs={report.get('runs', 0)} mismatches={found} "
            f"elements={report.get('elements', 0)} ill_conditioned={report.get('ill_conditioned', 0)}"
        )
        return 1 if report.get("mismatches") or "build_error" in report else 0
    started = time.monotonic()
    print(
        f"fuzzing with seed {args.seed} for {args.minutes} min"
        + (f" or {args.cases} graphs" if args.cases else ""),
        flush=True,
    )
    totals = supervise(args.seed, started + 60 * args.minutes, args.cases, args.crash_at)
    print(f"seed={args.seed} minutes={(time.monotonic() - started) / 60:.1f} {totals.line()}", flush=True)
    return 1 if totals.mismatches or totals.crashes or totals.build_errors else 0


if __name__ == "__main__":
    sys.exit(main())
