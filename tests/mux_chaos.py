"""Streams that misbehave against one ``StreamMux`` on each event loop: the multiplexer's fuzzer.

Each round draws a mux (stream slots, batch size, queue delay and depth, pipelining, idle and
admission timeouts, backlog) over one of two plans on a real device queue (``STEPS``: a numpy
``HostBatchedStep``, and ``recurrent_step`` of an ONNX model, a compiled slot plan whose pool is
updated in place), and up to ``MAX_STREAMS`` stream tasks that each draw a script of actions:
``step``, ``submit`` now and await later, ``submit_nowait``, ``cancel()`` a queued future, a
step under a timeout of zero to a millisecond, ``submit_many``/``wait_all``, a poisoned chunk
(the whole batch fails), a NaN chunk, a chunk of the wrong shape or dtype, a pause past the
idle timeout, closing the stream with steps queued, leaving with futures never awaited, and the
task itself cancelled at a random moment; some rounds exit the mux while streams still step or
wait for a slot.

The step adds a chunk's value to its stream's state and returns the sum: step ``j`` of a stream
carries ``2**j``, so every result names, bit by bit, the steps that ran before it. A finding is
an exception that is not one of asyncjit's typed errors, a round that hangs, a result handed to
the wrong stream or computed from another stream's state, a step that ran although its future
said it never would (``cancel()`` true, a failed batch, a refused chunk, a closed stream), a
result missing a step that an earlier result showed, or a mux that keeps a stream, a slot or a
backlog waiter after it exits.

Run::

    .venv/bin/python tests/mux_chaos.py --minutes 2 --seed 1          # both plans, every loop
    .venv/bin/python tests/mux_chaos.py --backends trio --minutes 5 --seed 3
    .venv/bin/python tests/mux_chaos.py --seed 3 --round 17 --steps onnx --backends trio   # one round

``tests/test_mux_chaos.py`` runs a short fixed slice of it (``make test``); ``make fuzz-mux`` a
longer one. Round ``r`` of seed ``S`` draws from ``random.Random(f"{S}:{r}")`` alone, so
``--round`` replays its configuration and scripts (the interleaving is the loop's).
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import sys
import traceback
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
from chaos_common import add_counts, installed_loops, round_indices

from asyncjit._log import capture_events
from asyncjit._loops import run_options
from asyncjit.errors import JitError, WouldBlock
from asyncjit.runtime import Client
from asyncjit.scheduler import HostBatchedStep, StreamMux

BITS = 22
"""Steps that carry a value per stream: ``2**j`` for ``j < BITS`` stays exact in float32 sums."""
START = float(2**BITS)
"""An initial state some streams are opened with: every result of theirs has this bit set."""
POISON = -1.0
"""A chunk value the step refuses by raising: its whole batch fails and no state changes."""
MAX_STREAMS = 48
ROUND_SECONDS = 30.0
"""A round that has not ended by then has hung (a finding)."""
ACTIONS = (
    "step",
    "step",
    "step",
    "submit",
    "submit",
    "nowait",
    "cancel",
    "timeout",
    "many",
    "await",
    "poison",
    "nan",
    "badshape",
    "baddtype",
    "pause",
    "idle",
    "close",
    "leave",
)


def chaos_step(
    chunks: npt.NDArray[Any], states: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``state[0] += chunk[0]``; ``state[1]`` is the stream's tag, taken from its first chunk
    when the slot starts from zeros. Out: ``[sum, the state's tag, the chunk's tag]``."""
    if np.any(chunks[:, 0] == POISON):
        raise ValueError("chaos_step: poisoned chunk")
    total = states[:, 0] + chunks[:, 0]
    tag = np.where(states[:, 1] == 0, chunks[:, 1], states[:, 1])
    out = np.stack([total, tag, chunks[:, 1]], axis=1).astype(np.float32)
    return out, np.stack([total, tag], axis=1).astype(np.float32)


def chaos_model() -> bytes:
    """``chaos_step`` as an ONNX model (``x [batch, 2]``, ``state [batch, 2]`` -> ``out [batch,
    3]``, ``stateN``) for ``recurrent_step``: the production path, a compiled slot plan whose
    pool is updated in place. A poisoned chunk makes a ``Gather`` index, read back through the new
    state's sum, out of range: the run fails (``IndexOutOfRangeError``), and must leave every
    state of its batch as it was."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as h

    def ints(name: str, *vals: int) -> Any:
        return h.make_tensor(name, TensorProto.INT64, [len(vals)], list(vals))

    def floats(name: str, *vals: float) -> Any:
        return h.make_tensor(name, TensorProto.FLOAT, [len(vals)], list(vals))

    node = h.make_node
    nodes = [
        node("Slice", ["x", "zero_i", "one_i", "axis"], ["x0"]),
        node("Slice", ["x", "one_i", "two_i", "axis"], ["x1"]),
        node("Slice", ["state", "zero_i", "one_i", "axis"], ["s0"]),
        node("Slice", ["state", "one_i", "two_i", "axis"], ["s1"]),
        node("Add", ["s0", "x0"], ["total"]),
        node("Equal", ["s1", "zero"], ["fresh"]),
        node("Where", ["fresh", "x1", "s1"], ["tag"]),
        node("Concat", ["total", "tag"], ["stateN"], axis=1),
        node("Sub", ["total", "s0"], ["moved"]),  # the chunk's value, read back through the new state
        node("Equal", ["moved", "poison"], ["bad"]),
        node("Cast", ["bad"], ["bad_i"], to=TensorProto.INT64),
        node("Mul", ["bad_i", "far"], ["index"]),
        node("Gather", ["table", "index"], ["nothing"], axis=0),
        node("Add", ["total", "nothing"], ["total_out"]),
        node("Concat", ["total_out", "tag", "x1"], ["out"], axis=1),
    ]
    inits = [
        ints("zero_i", 0), ints("one_i", 1), ints("two_i", 2), ints("axis", 1), ints("far", 7),
        floats("zero", 0.0), floats("poison", POISON), floats("table", 0.0),
    ]  # fmt: skip
    io = h.make_tensor_value_info
    graph = h.make_graph(
        nodes,
        "chaos_step",
        [io("x", TensorProto.FLOAT, ["batch", 2]), io("state", TensorProto.FLOAT, ["batch", 2])],
        [io("out", TensorProto.FLOAT, ["batch", 3]), io("stateN", TensorProto.FLOAT, ["batch", 2])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


STEPS = ("host", "onnx")
"""The plans a round runs: ``HostBatchedStep(chaos_step)`` (numpy on a device queue; a failed
batch is its step's ``ValueError``) and ``recurrent_step`` of ``chaos_model``."""


def make_step(kind: str, client: Client) -> Any:
    if kind == "host":
        return HostBatchedStep(
            client,
            chaos_step,
            chunk_shape=(2,),
            state_shape=(2,),
            out_shape=(3,),
            max_batch_size=64,
            num_slots=48,
        )
    from asyncjit.onnx import InferenceSession, recurrent_step

    sess = InferenceSession(chaos_model(), dims={"batch": (1, 64)}, client=client)
    return recurrent_step(sess, {"state": "stateN"}, max_streams=48, max_batch_size=64)


def _bits(x: float) -> set[int]:
    v = int(x)
    return {i for i in range(BITS + 1) if v >> i & 1}


class Ledger:
    """What one stream knows about each of its value-carrying steps: ran (with its result),
    never ran (its future said so), or unknown (cancelled while batched, or left)."""

    def __init__(self, tag: float, start: float) -> None:
        self.tag = tag
        self.start = start
        self.next = 0
        self.results: dict[int, npt.NDArray[Any]] = {}
        self.never: set[int] = set()

    def chunk(self, rng: random.Random, value: float | None = None) -> tuple[int, npt.NDArray[Any]]:
        j = self.next
        self.next += 1
        v = float(2**j) if value is None else value
        return j, np.array([v, self.tag], np.float32) if rng.random() < 0.9 else np.array([v, self.tag])

    def check(self) -> list[str]:
        bad = []
        start_bits = _bits(self.start)
        seen: set[int] = set()
        last = -1
        for j in sorted(self.results):
            out = self.results[j]
            total, state_tag, chunk_tag = (float(v) for v in out)
            where = f"stream {self.tag:g} step {j}"
            if chunk_tag != self.tag:
                bad.append(f"{where}: result row of the stream tagged {chunk_tag:g}")
                continue
            if state_tag != self.tag:
                bad.append(f"{where}: computed from the state of the stream tagged {state_tag:g}")
                continue
            if total != math.floor(total) or total < 0:
                bad.append(f"{where}: sum {total!r} is not a sum of steps")
                continue
            ran = _bits(total) - start_bits
            if not start_bits <= _bits(total):
                bad.append(f"{where}: sum {total:g} lost the initial state")
            if j not in ran:
                bad.append(f"{where}: its result does not include itself (sum {total:g})")
            if any(i > j for i in ran):
                bad.append(f"{where}: includes later steps {sorted(i for i in ran if i > j)}")
            if ran & self.never:
                bad.append(f"{where}: includes steps said never to run {sorted(ran & self.never)}")
            before = {i for i in ran if i <= last}
            if before != seen:
                bad.append(f"{where}: steps up to {last} were {sorted(seen)}, now {sorted(before)}")
            seen, last = ran, j
        return bad


def _typed(exc: BaseException) -> bool:
    """asyncjit's own errors (a failed batch's is ``KernelRuntimeError`` naming the step's own)."""
    return isinstance(exc, JitError)


class Round:
    def __init__(self, rng: random.Random, client: Client, step: Any) -> None:
        self.rng = rng
        self.step = step
        self.config = {
            "max_streams": rng.choice([2, 5, 16, 48]),
            "max_batch_size": rng.choice([1, 3, 8, 64]),
            "max_queue_delay": rng.choice([0.0, 1e-4, 2e-3]),
            "idle_timeout": rng.choice([None, 0.05, 0.5]),
            "queue_depth": rng.choice([1, 2, 4]),
            "pipeline_depth": rng.choice([1, 2, 3]),
            "admission_timeout": rng.choice([None, None, 0.02, 1.0]),
            "backlog": rng.choice([None, None, 2, 8]),
        }
        room = self.config["max_streams"] + (self.config["backlog"] or self.config["max_streams"])
        self.streams = rng.randint(1, min(MAX_STREAMS, room + 3))  # a few more than fit, at most
        self.poison = rng.random() < 0.3
        """Whether the scripts may poison a batch (each such step fails every step of its batch)."""
        self.exit = rng.choice(["early", "quiet", "handover", *["done"] * 6])
        """When the mux exits: a moment after the streams start; once no stream is open or
        waiting (the tasks may still be about to open theirs); right after the body closes a
        stream of its own while others wait for a slot (the slot is handed over, the waiter
        has not run yet); or once every task ended."""
        self.ledgers: list[Ledger] = []
        self.untyped: list[str] = []
        self.actions: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.doing: dict[float, str] = {}  # stream tag -> the action it is in (for a hang's report)
        self.mux: StreamMux | None = None
        self.phase = "starting"
        self.stacks: str | None = None
        self.finished = 0

    def _caught(self, exc: BaseException, where: str) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        if not _typed(exc):
            tb = "".join(traceback.format_exception(exc))
            self.untyped.append(f"{where}: {name}: {exc}\n{tb}")

    def hung(self) -> str:
        """What a round that did not end was waiting for."""
        mux = self.mux
        streams = {s.name: (s._status, list(s._queue)) for s in mux._activity} if mux is not None else {}
        stats = mux.statistics() if mux is not None else None
        return (
            f"phase {self.phase}, stream tasks in {self.doing}, mux {stats}, its open streams {streams}; "
            f"tasks:\n{self.stacks}"
        )

    async def run(self) -> StreamMux:
        """The round, under a watchdog that records every task's stack if it has not ended in
        ``ROUND_SECONDS`` (then ``TimeoutError``)."""
        async with anyio.create_task_group() as top:
            top.start_soon(self._watchdog, top.cancel_scope)
            mux = await self._body()
            top.cancel_scope.cancel()
        if self.stacks is not None:
            raise TimeoutError(self.stacks)
        return mux

    async def _watchdog(self, scope: anyio.CancelScope) -> None:
        await anyio.sleep(ROUND_SECONDS)
        self.stacks = task_stacks()
        scope.cancel()

    async def _body(self) -> StreamMux:
        mux = self.mux = StreamMux(self.step, **self.config)
        async with anyio.create_task_group() as outer:
            self.phase = "entering the mux"
            async with mux:
                self.phase = "streams running"
                anchor = mux.open_stream_nowait() if self.exit == "handover" else None
                for i in range(self.streams):
                    script = [self.rng.choice(ACTIONS) for _ in range(self.rng.randint(1, 14))]
                    cancel_at = self.rng.choice([None, None, None, 0.0, 1e-3, 0.02])
                    start = self.rng.choice([0.0, START])
                    ledger = Ledger(float(i + 1), start)
                    self.ledgers.append(ledger)
                    outer.start_soon(self._stream, mux, ledger, script, cancel_at, self.rng.random())
                if self.exit == "early":
                    await anyio.sleep(self.rng.choice([0.0, 1e-3, 0.01]))
                elif anchor is not None:
                    while mux.statistics().backlog == 0 and self.finished < self.streams:
                        await anyio.sleep(0.001)
                    anchor.close()  # its slot goes to the oldest waiter, which runs after the exit
                elif self.exit == "quiet":
                    while mux.statistics().active_streams or mux.statistics().backlog:
                        await anyio.sleep(0.005)
                    await anyio.sleep(0.01)
                else:
                    while self.finished < self.streams:
                        await anyio.sleep(0.005)
                self.phase = "exiting the mux"
            self.phase = "waiting for the stream tasks"
        return mux

    async def _stream(
        self, mux: StreamMux, ledger: Ledger, script: list[str], cancel_at: float | None, nowait: float
    ) -> None:
        with anyio.CancelScope() as scope:
            if cancel_at is not None:
                scope.deadline = anyio.current_time() + cancel_at
            try:
                state = None if ledger.start == 0.0 else [ledger.start, ledger.tag]
                if nowait < 0.3:
                    try:
                        s = mux.open_stream_nowait(state)
                    except WouldBlock:
                        s = mux.open_stream(state)
                else:
                    s = mux.open_stream(state)
                self.doing[ledger.tag] = "opening"
                async with s:
                    await self._script(mux, s, ledger, script)
            except Exception as exc:
                self._caught(exc, f"stream {ledger.tag:g}")
            finally:
                self.doing.pop(ledger.tag, None)
                self.finished += 1

    async def _script(self, mux: StreamMux, s: Any, ledger: Ledger, script: list[str]) -> None:
        rng = self.rng
        pending: list[tuple[int, Any]] = []

        async def settle(j: int, fut: Any) -> None:
            try:
                ledger.results[j] = await fut
            except Exception as exc:
                self._caught(exc, f"stream {ledger.tag:g} step {j}")
                if _never_ran(exc):
                    ledger.never.add(j)

        async def step(j: int, chunk: npt.NDArray[Any]) -> None:
            try:
                ledger.results[j] = await s.step(chunk)
            except Exception as exc:
                if _never_ran(exc):
                    ledger.never.add(j)
                raise

        for action in script:
            self.actions[action] = self.actions.get(action, 0) + 1
            self.doing[ledger.tag] = f"{action} (pending {[(j, f) for j, f in pending]})"
            if ledger.next >= BITS - 2:
                break
            try:
                if action == "step":
                    await step(*ledger.chunk(rng))
                elif action == "submit":
                    j, chunk = ledger.chunk(rng)
                    try:
                        pending.append((j, await s.submit(chunk)))
                    except Exception:
                        ledger.never.add(j)
                        raise
                elif action == "nowait":
                    j, chunk = ledger.chunk(rng)
                    try:
                        pending.append((j, s.submit_nowait(chunk)))
                    except Exception:
                        ledger.never.add(j)
                        raise
                elif action == "cancel" and pending:
                    j, fut = pending.pop(rng.randrange(len(pending)))
                    if fut.cancel():
                        ledger.never.add(j)
                    else:
                        await settle(j, fut)
                elif action == "timeout":
                    j, chunk = ledger.chunk(rng)
                    with anyio.move_on_after(rng.choice([0.0, 1e-4, 1e-3])):
                        await step(j, chunk)
                elif action == "many":
                    chunks, js = [], []
                    for _ in range(rng.randint(1, 3)):
                        j, chunk = ledger.chunk(rng)
                        js.append(j)
                        chunks.append(chunk)
                    try:
                        futs = await mux.submit_many([s] * len(chunks), chunks)
                    except Exception:
                        ledger.never.update(js)
                        raise
                    await mux.wait_all(futs)
                    for j, fut in zip(js, futs, strict=True):
                        await settle(j, fut)
                elif action == "await" and pending:
                    j, fut = pending.pop(0)
                    await settle(j, fut)
                elif action == "poison":
                    j, chunk = ledger.chunk(rng, POISON)
                    ledger.never.add(j)
                    await s.step(chunk)
                elif action == "nan":
                    j, chunk = ledger.chunk(rng, math.nan)
                    ledger.never.add(j)
                    await s.step(chunk)
                elif action == "badshape":
                    await s.step(np.zeros(rng.choice([1, 3, 4]), np.float32))
                elif action == "baddtype":
                    await s.step(np.array(["a", "b"]))
                elif action == "pause":
                    await anyio.sleep(rng.choice([0.0, 1e-3, 5e-3]))
                elif action == "idle" and self.config["idle_timeout"] is not None:
                    await anyio.sleep(self.config["idle_timeout"] * 1.5 + 0.02)
                elif action == "close":
                    await s.aclose()
                elif action == "leave":
                    return  # pending futures never awaited: the stream closes with them queued
            except Exception as exc:
                self._caught(exc, f"stream {ledger.tag:g} {action}")
        self.doing[ledger.tag] = f"settling {[(j, f) for j, f in pending]}"
        for j, fut in pending:
            await settle(j, fut)


def _frame(frame: Any, line: int) -> str:
    """A frame as ``name:line``, with the stream's state where a task waits on one."""
    own = frame.f_locals.get("self")
    extra = ""
    if type(own).__name__ == "MuxStream":
        extra = f"[{own.name} {own._status} queued {len(own._queue)} room {own._room} for {own._room_for}]"
    return f"{frame.f_code.co_name}:{line}{extra}"


def task_stacks() -> str:
    """Every task of the running loop and where it waits (innermost frames last)."""
    lines = []
    try:
        import trio

        trio.lowlevel.current_trio_token()
    except (ImportError, RuntimeError):
        import asyncio

        for t in asyncio.all_tasks():
            where = []
            coro: Any = t.get_coro()
            while coro is not None and hasattr(coro, "cr_frame"):
                if coro.cr_frame is not None:
                    where.append(_frame(coro.cr_frame, coro.cr_frame.f_lineno))
                coro = coro.cr_await
            lines.append(f"  {t.get_name()}: {' > '.join(where)}")
        return "\n".join(lines)

    def walk(task: Any) -> None:
        where = [_frame(f, n) for f, n in task.iter_await_frames()]
        lines.append(f"  {task.name}: {' > '.join(where)}")
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return "\n".join(lines)


def _never_ran(exc: BaseException) -> bool:
    """Errors a step's own await raises only for a step that never ran (a failed batch changes
    no state: the step's error, wrapped in ``KernelRuntimeError``, names the poisoned chunk)."""
    from asyncjit.errors import IndexOutOfRangeError

    poisoned = "poisoned" in str(exc) or isinstance(exc, IndexOutOfRangeError)
    return _refused(exc) or "never" in str(exc) or poisoned


def _refused(exc: BaseException) -> bool:
    from asyncjit.errors import AudioFormatError, StepCancelledError

    return isinstance(exc, AudioFormatError | StepCancelledError)


def run_round(backend: str, seed: int, index: int, client: Client, step: Any) -> dict[str, Any]:
    """One round on ``backend``; its findings, actions and caught errors."""
    rng = random.Random(f"{seed}:{index}")
    r = Round(rng, client, step)
    name, options = run_options(backend)
    bad: list[str] = []
    mux: StreamMux | None = None
    try:
        with capture_events(logging.WARNING) as logged:
            mux = anyio.run(r.run, backend=name, backend_options=options)
    except TimeoutError:
        bad.append(f"round hung for {ROUND_SECONDS} s (mux exit: {r.exit}): {r.hung()}")
    except BaseException as exc:  # an error that escaped the mux or a stream task
        bad.append(f"round raised {type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))}")
    bad += r.untyped
    bad += [f"logged {e}" for e in logged if e["log_level"] == "critical" or "crash" in e["event"]]
    for ledger in r.ledgers:
        bad += ledger.check()
    if mux is not None:
        st = mux.statistics()
        if st.active_streams or st.backlog or st.ready_streams:
            bad.append(f"the exited mux keeps streams: {st}")
    return {
        "bad": bad,
        "config": r.config,
        "streams": r.streams,
        "exit": r.exit,
        "actions": r.actions,
        "errors": r.errors,
        "results": sum(len(ledger.results) for ledger in r.ledgers),
    }


def run(
    backend: str,
    seed: int,
    *,
    rounds: int | None = None,
    seconds: float = 60.0,
    only: int | None = None,
    step_kind: str = "host",
) -> dict[str, Any]:
    """Rounds on ``backend`` for ``rounds`` (or ``seconds``) over the plan ``step_kind`` (one of
    ``STEPS``); totals and findings (with their round)."""
    client = Client("cpu:1")
    step = make_step(step_kind, client)
    totals: dict[str, Any] = {"rounds": 0, "results": 0, "actions": {}, "errors": {}, "bad": []}
    try:
        for index in round_indices(rounds, seconds, only):
            r = run_round(backend, seed, index, client, step)
            totals["rounds"] += 1
            totals["results"] += r["results"]
            add_counts(totals["actions"], r["actions"])
            add_counts(totals["errors"], r["errors"])
            totals["bad"] += [f"round {index} ({r['config']}, {r['streams']} streams): {b}" for b in r["bad"]]
    finally:
        client.close()
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=1.0, help="per plan and loop (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--round", type=int, default=None, help="replay this round only")
    parser.add_argument("--backends", default=",".join(installed_loops()))
    parser.add_argument("--steps", default=",".join(STEPS), help="plans (host, onnx); --minutes each")
    args = parser.parse_args(argv)
    found = 0
    for kind in args.steps.split(","):
        for backend in args.backends.split(","):
            found += _report(kind, backend, args)
    return 1 if found else 0


def _report(kind: str, backend: str, args: argparse.Namespace) -> int:
    r = run(backend, args.seed, seconds=60 * args.minutes, only=args.round, step_kind=kind)
    print(
        f"{kind} on {backend}: {r['rounds']} rounds, {sum(r['actions'].values())} actions, "
        f"{r['results']} results checked, errors caught {dict(sorted(r['errors'].items()))}, "
        f"findings {len(r['bad'])}",
        flush=True,
    )
    for finding in r["bad"][:10]:
        print(f"  seed {args.seed} {kind} on {backend}: {finding}", flush=True)
    return len(r["bad"])


if __name__ == "__main__":
    sys.exit(main())
