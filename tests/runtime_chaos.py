"""Random programs of buffer operations on a two-device client, from two threads: the runtime's fuzzer.

Each round makes a ``Client("cpu:2")`` and runs, on two Python threads at once, random programs
over the device actors: buffers put on either device, executions of four small plans (an add,
an add and a doubling that donate their first input, a plan whose run fails on a value of 1e6
or more through a checked index) queued or inline, on either device, donating or not, with
deleted or failed inputs now and then; copies to the other device; reads; deletes; waits;
``reclaim()`` of failed outputs written over a donated input. Both threads also use a few
shared buffers (never donating or deleting them). Every value is predicted by a numpy model:
a finding is a read that differs from it, a buffer that fails where the model says it holds
a value (or holds one where it must fail), an error that is not one of asyncjit's typed
errors, a use of a deleted or donated buffer that does not raise ``BufferDeletedError``, a
reclaimed buffer without the donated data, or a thread that does not finish (a hang). The
round ends by closing the client, half the time with ``cancel_pending``, while work is queued:
every buffer must then be done, with its value or a typed error.

Run::

    .venv/bin/python tests/runtime_chaos.py --minutes 2 --seed 1
    .venv/bin/python tests/runtime_chaos.py --seed 1 --round 7        # replay one round's programs

``tests/test_runtime_chaos.py`` runs a short fixed slice (``make test``); ``make fuzz-runtime``
a longer one.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import threading
import traceback
from typing import Any

import numpy as np
from chaos_common import add_counts, round_indices

from asyncjit._log import capture_events
from asyncjit.errors import BufferDeletedError, DonationError, JitError, WouldBlock
from asyncjit.runtime import Buffer, Client

N = 64
POISON = 1e6
"""A run of the ``fail`` plan fails when its input holds a value this large or larger."""
OPS = ("put", "exec", "exec", "exec", "exec", "copy", "read", "read", "delete", "ready", "reclaim", "stale")
THREAD_SECONDS = 60.0
"""A program that has not ended by then has hung (a finding)."""


def plans() -> dict[str, Any]:
    """The four compiled plans (compiled once per process; loaded per client)."""
    from asyncjit import Tensor, float32, int32
    from asyncjit.compiler import compile as compile_graph

    def ph() -> Any:
        return Tensor.placeholder((N,), float32)

    x, z = ph(), ph()
    add = compile_graph([x + z], [x, z], name="chaos_add")
    x, z = ph(), ph()
    add_d = compile_graph([x + z], [x, z], name="chaos_add_donating", donate=[0])
    x = ph()
    scale_d = compile_graph([x * 2], [x], name="chaos_scale_donating", donate=[0])
    x = ph()
    check = ((x >= POISON).cast(int32) * 5).checked_index(1, "a poisoned value")
    fail = compile_graph([x + 1 + check.cast(float32) * 0], [x], name="chaos_fail")
    return {"add": add, "add_d": add_d, "scale_d": scale_d, "fail": fail}


ARITY = {"add": 2, "add_d": 2, "scale_d": 1, "fail": 1}


def model(plan: str, values: list[np.ndarray | None]) -> np.ndarray | None:
    """The plan's result in numpy (float32, op by op as the kernels round), None: the run fails."""
    if any(v is None for v in values):
        return None
    a = values[0]
    assert a is not None
    with np.errstate(all="ignore"):
        if plan in ("add", "add_d"):
            b = values[1]
            assert b is not None
            return (a + b).astype(np.float32)
        if plan == "scale_d":
            return (a * np.float32(2)).astype(np.float32)
        if np.any(a >= np.float32(POISON)):
            return None
        return (a + np.float32(1)).astype(np.float32)


class Slot:
    """A buffer and what the model says of it: its value (None: it fails), whether it was
    deleted or donated, and, for a failed output written over a donated input, that input's
    value when the run failed before it ran (another input failed)."""

    __slots__ = ("buf", "gone", "shared", "under", "value")

    def __init__(self, buf: Buffer, value: np.ndarray | None, shared: bool = False) -> None:
        self.buf = buf
        self.value = value
        self.gone = False
        self.shared = shared
        self.under: np.ndarray | None = None


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


class Program:
    """One thread's random operations; findings and counts."""

    def __init__(
        self, rng: random.Random, client: Client, loaded: dict[str, Any], shared: list[Slot]
    ) -> None:
        self.rng = rng
        self.client = client
        self.loaded = loaded
        self.devices = client.devices()
        self.own: list[Slot] = []
        self.shared = shared
        self.bad: list[str] = []
        self.ops: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.reads = 0

    def _typed(self, exc: BaseException, where: str) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        if not isinstance(exc, JitError):
            self.bad.append(f"{where}: untyped {name}: {exc}\n{''.join(traceback.format_exception(exc))}")

    def array(self) -> np.ndarray:
        v = np.array([self.rng.randint(-1000, 1000) for _ in range(N)], np.float32)
        if self.rng.random() < 0.15:
            v[self.rng.randrange(N)] = np.float32(2 * POISON)
        return v

    def pick(self, live: bool = True) -> Slot | None:
        pool = [s for s in self.own + self.shared if live != s.gone or not live]
        return self.rng.choice(pool) if pool else None

    def run(self, steps: int) -> None:
        for _ in range(steps):
            op = self.rng.choice(OPS)
            self.ops[op] = self.ops.get(op, 0) + 1
            try:
                getattr(self, f"op_{op}")()
            except Exception as exc:
                self._typed(exc, op)
        for s in self.own + self.shared:
            self.check(s, "at the end")

    def op_put(self) -> None:
        v = self.array()
        self.own.append(Slot(self.client.buffer_from_host(v, self.rng.choice(self.devices)), v))

    def op_exec(self) -> None:
        plan = self.rng.choice(list(ARITY))
        args = [self.pick() for _ in range(ARITY[plan])]
        if any(a is None for a in args):
            return self.op_put()
        slots = [a for a in args if a is not None]
        if self.rng.random() < 0.05:  # a deleted input: refused before anything is queued
            dead = [s for s in self.own if s.gone]
            if dead:
                slots[0] = self.rng.choice(dead)
        donating = plan in ("add_d", "scale_d") and self.rng.random() < 0.7 and not slots[0].shared
        kwargs: dict[str, Any] = {
            "device": self.rng.choice(self.devices),
            "inline": self.rng.choice([None, True, False]),
        }
        if donating:
            kwargs["donate"] = (0,)
        try:
            outs = self.loaded[plan].execute_blocking([s.buf for s in slots], **kwargs)
        except BufferDeletedError as exc:
            self._typed(exc, "exec")
            if not any(s.gone for s in slots):
                self.bad.append(f"exec {plan}: BufferDeletedError on live inputs")
            return
        except DonationError as exc:  # refused (another pending command still reads it): nothing ran
            self._typed(exc, "exec")
            return
        if any(s.gone for s in slots):
            self.bad.append(f"exec {plan}: a deleted or donated input was accepted")
        value = model(plan, [s.value for s in slots])
        out = Slot(outs[0], value)
        if donating:
            slots[0].gone = True
            first_ok = slots[0].value is not None
            others_failed = any(s.value is None for s in slots[1:])
            if value is None and first_ok and others_failed:
                out.under = slots[0].value  # failed before it ran: the donated data is intact
        self.own.append(out)

    def op_copy(self) -> None:
        s = self.pick()
        if s is None:
            return
        others = [d for d in self.devices if d is not s.buf.device]
        try:
            buf = s.buf.copy_to_device(self.rng.choice(others) if others else s.buf.device)
        except BufferDeletedError as exc:
            self._typed(exc, "copy")
            if not s.gone:
                self.bad.append("copy: BufferDeletedError on a live buffer")
            return
        self.own.append(Slot(buf, s.value))

    def op_read(self) -> None:
        s = self.pick()
        if s is not None:
            self.check(s, "read")

    def check(self, s: Slot, where: str) -> None:
        if s.gone:
            try:
                s.buf.to_numpy_blocking(timeout=THREAD_SECONDS)
            except BufferDeletedError as exc:
                self._typed(exc, where)
                return
            except Exception as exc:
                self._typed(exc, where)
                self.bad.append(
                    f"{where}: a deleted buffer raised {type(exc).__name__}, not BufferDeletedError"
                )
                return
            self.bad.append(f"{where}: a deleted or donated buffer was read")
            return
        try:
            got = s.buf.to_numpy_blocking(timeout=THREAD_SECONDS)
        except Exception as exc:
            self._typed(exc, where)
            if s.value is not None:
                self.bad.append(f"{where}: {type(exc).__name__} ({exc}) where the model has a value")
            return
        self.reads += 1
        if s.value is None:
            self.bad.append(f"{where}: a value {got[:4]}... where the run must fail")
        elif not same(got, s.value):
            diff = np.flatnonzero(~((got == s.value) | (np.isnan(got) & np.isnan(s.value))))
            self.bad.append(
                f"{where}: at {diff[:5]} read {got[diff[:5]]} where the model has {s.value[diff[:5]]}"
            )

    def op_delete(self) -> None:
        own = [s for s in self.own if not s.gone]
        if own:
            s = self.rng.choice(own)
            s.buf.delete()
            s.gone = True

    def op_ready(self) -> None:
        s = self.pick()
        if s is not None and not s.gone:
            try:
                s.buf.block_until_ready(timeout=THREAD_SECONDS)
            except Exception as exc:
                self._typed(exc, "ready")
                if s.value is not None:
                    self.bad.append(f"ready: {type(exc).__name__} where the model has a value")

    def op_reclaim(self) -> None:
        cands = [s for s in self.own if not s.gone and s.value is None and s.buf.aliased]
        if not cands:
            return
        s = self.rng.choice(cands)
        with contextlib.suppress(JitError):  # it fails: that is why it is reclaimed
            s.buf.block_until_ready(timeout=THREAD_SECONDS)
        try:
            back = s.buf.reclaim()
        except (WouldBlock, DonationError):
            return
        s.gone = True
        under = s.under
        slot = Slot(back, under)
        if under is None:  # the run failed inside (or over a failed donated input): contents unknown
            back.to_numpy_blocking(timeout=THREAD_SECONDS)
            return
        self.own.append(slot)

    def op_stale(self) -> None:
        """A deleted or donated buffer used again: ``BufferDeletedError`` every way."""
        dead = [s for s in self.own if s.gone]
        if dead:
            self.check(self.rng.choice(dead), "stale")


def run_round(seed: int, index: int, loaded_plans: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{index}")
    client = Client("cpu:2", inline=rng.choice(["auto", "never"]))
    bad: list[str] = []
    programs: list[Program] = []
    try:
        loaded = {name: client.load(exe, list(client.devices())) for name, exe in loaded_plans.items()}
        shared = []
        for _ in range(rng.randint(1, 4)):
            v = np.array([rng.randint(-100, 100) for _ in range(N)], np.float32)
            shared.append(Slot(client.buffer_from_host(v, rng.choice(client.devices())), v, shared=True))
        steps = rng.randint(10, 80)
        programs = [Program(random.Random(f"{seed}:{index}:{t}"), client, loaded, shared) for t in range(2)]
        threads = [threading.Thread(target=p.run, args=(steps,), daemon=True) for p in programs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(THREAD_SECONDS * 2)
            if t.is_alive():
                bad.append(f"a program thread hung for {THREAD_SECONDS * 2:.0f} s")
        # close with work queued: every buffer ends done, with its value or a typed error
        tail = [p.loaded["add"].execute_blocking([s.buf, s.buf]) for p in programs[:1] for s in shared[:1]]
        client.close(cancel_pending=rng.random() < 0.5)
        for outs in tail:
            if not outs[0].is_ready():
                bad.append("a buffer queued before close() is not done after it")
    finally:
        if not client.closed:
            client.close()
    errors: dict[str, int] = {}
    for p in programs:
        bad += p.bad
        add_counts(errors, p.errors)
    return {
        "bad": bad,
        "ops": {k: sum(p.ops.get(k, 0) for p in programs) for k in OPS},
        "errors": errors,
        "reads": sum(p.reads for p in programs),
    }


def run(
    seed: int, *, rounds: int | None = None, seconds: float = 60.0, only: int | None = None
) -> dict[str, Any]:
    """Rounds for ``rounds`` (or ``seconds``); totals and findings (with their round)."""
    compiled = plans()
    totals: dict[str, Any] = {"rounds": 0, "reads": 0, "ops": {}, "errors": {}, "bad": []}
    with capture_events(logging.WARNING) as logged:
        for index in round_indices(rounds, seconds, only):
            r = run_round(seed, index, compiled)
            totals["rounds"] += 1
            totals["reads"] += r["reads"]
            add_counts(totals["ops"], r["ops"])
            add_counts(totals["errors"], r["errors"])
            totals["bad"] += [f"round {index}: {b}" for b in r["bad"]]
    totals["bad"] += [f"logged {e}" for e in logged if e["log_level"] in ("error", "critical")]
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--round", type=int, default=None, help="replay this round only")
    args = parser.parse_args(argv)
    r = run(args.seed, seconds=60 * args.minutes, only=args.round)
    print(
        f"{r['rounds']} rounds, {sum(r['ops'].values())} operations, {r['reads']} reads checked, "
        f"errors caught {dict(sorted(r['errors'].items()))}, findings {len(r['bad'])}",
        flush=True,
    )
    for finding in r["bad"][:10]:
        print(f"  seed {args.seed}: {finding}", flush=True)
    return 1 if r["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
