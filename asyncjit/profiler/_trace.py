"""Chrome/Perfetto trace events of what asyncjit does: device queues, kernels, transfers, mux batches,
event-loop wake-ups.

``with trace("out.json"):`` records until the block ends, then writes the Chrome trace-event JSON
format (``{"traceEvents": [...]}``), which ui.perfetto.dev and chrome://tracing open:

* one track per thread: a device queue's worker, or the thread a command ran on inline (the
  caller's, for ``SileroVad`` and small ``jit`` calls);
* a complete span (``ph: "X"``) per command (``execute``, ``h2d``, ``d2h``, ``d2d``) and per
  wait of a device queue for another device's output (``wait for cpu:0``), and inside
  each ``execute`` one span per kernel of the plan, timed by the plan's instrumented entry point
  (the cycle counter read between kernels), with the kernel's bytes and flops estimates;
* instants (``ph: "i"``) for each ``StreamMux`` batch formed (its size) and each event-loop
  wake-up (how many futures it resolved).

While tracing, plans run through their instrumented entry (same kernels, a counter read between
them). ``Trace.kernel_summary()`` aggregates the kernel spans: a per-kernel profile for anything run
inside the block (``jit``, ``SileroVad``, ``StreamMux``, ``JitWrapper``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import numpy as np

from ..errors import InvalidArgumentError
from . import _state

__all__ = ["KernelStats", "Trace", "trace"]


@attrs.frozen
class KernelStats:
    """Aggregate of one kernel's spans in a trace."""

    plan: str
    kernel: str
    calls: int
    total_s: float

    @property
    def mean_s(self) -> float:
        return self.total_s / self.calls


class Trace:
    """Trace events being recorded (thread-safe appends); see the module docstring."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter_ns()
        self._pid = os.getpid()
        self._threads: set[int] = set()
        self._seconds_per_tick: float | None = None

    # -- recording ---------------------------------------------------------------------------
    def now_us(self) -> float:
        return (time.perf_counter_ns() - self._t0) / 1000.0

    def _tid(self) -> int:
        tid = threading.get_ident()
        if tid not in self._threads:
            with self._lock:
                self._threads.add(tid)
                self.events.append(
                    {"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid,
                     "args": {"name": threading.current_thread().name}}
                )  # fmt: skip
        return tid

    def span(self, name: str, cat: str, start_us: float, end_us: float, **args: Any) -> None:
        event = {"name": name, "cat": cat, "ph": "X", "ts": start_us, "dur": max(end_us - start_us, 0.0)}
        event.update(pid=self._pid, tid=self._tid(), args=args)
        with self._lock:
            self.events.append(event)

    def instant(self, name: str, cat: str, **args: Any) -> None:
        event = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": self.now_us()}
        event.update(pid=self._pid, tid=self._tid(), args=args)
        with self._lock:
            self.events.append(event)

    # -- hooks (called only while this trace is active) ----------------------------------------
    def command(self, device: Any, cmd: Any) -> BaseException | None:
        """A device command, run and recorded (kernels inside an ``execute``)."""
        start = self.now_us()
        error: BaseException | None
        if cmd.label == "execute" and getattr(cmd.launcher, "exe", None) is not None:
            try:
                plan = self.launch(cmd.launcher, cmd.addrs, cmd.values)
            except BaseException as exc:
                from ..runtime._commands import launch_error

                plan = str(getattr(cmd.launcher.exe, "name", "?"))
                error = launch_error(exc, plan)
            else:
                error = None
        else:
            plan, error = "", cmd.run()
        args: dict[str, Any] = {"device": str(device.id)}
        if plan:
            args["plan"] = plan
        if error is not None:
            args["error"] = repr(error)
        self.span(f"{cmd.label} {plan}".rstrip(), "device", start, self.now_us(), **args)
        return error

    def device_wait(self, device: Any, buffer: Any, event: Any) -> None:
        """A device queue waiting for another device's output: a ``wait`` span on its track."""
        start = self.now_us()
        event.wait_blocking()
        src = buffer.memory_space.device
        self.span(
            f"wait for {src.kind}:{src.id}",
            "device",
            start,
            self.now_us(),
            device=str(device.id),
            buffer=buffer.id,
        )

    def execute_inline(self, device: Any, launcher: Any, addrs: Sequence[int], values: Sequence[int]) -> None:
        """An execution the runtime ran on the calling thread (the device was idle)."""
        start = self.now_us()
        try:
            plan = self.launch(launcher, addrs, values) if getattr(launcher, "exe", None) else ""
            if not plan:
                launcher(addrs, values)
        finally:
            self.span("execute (inline)", "device", start, self.now_us(), device=str(device.id))

    def launch(self, launcher: Any, addrs: Sequence[int], values: Sequence[int]) -> str:
        """One replay through the plan's instrumented entry, a span per kernel; the plan's name."""
        exe = launcher.exe
        if not exe.profiled_address:
            start = self.now_us()
            launcher(addrs, values)
            self.span(exe.name, "plan", start, self.now_us(), kernels="not instrumented")
            return str(exe.name)
        if self._seconds_per_tick is None:
            from ..compiler._cpu import _seconds_per_tick

            self._seconds_per_tick = _seconds_per_tick(exe._ticks_address)
        ticks = np.zeros(len(exe.kernels) + 1, dtype=np.int64)
        start = self.now_us()
        launcher.profile(addrs, values, ticks)
        end = self.now_us()
        us_per_tick = self._seconds_per_tick * 1e6
        bindings = dict(zip(exe.signature.var_names, values, strict=True))
        bindings.update(exe.fixed)
        self.span(exe.name, "plan", start, end, vars=bindings)
        for i, info in enumerate(exe.kernels):
            k0 = min(start + (ticks[i] - ticks[0]) * us_per_tick, end)
            k1 = min(start + (ticks[i + 1] - ticks[0]) * us_per_tick, end)
            nbytes, flops = info.cost(bindings)
            self.span(info.name, "kernel", k0, k1, plan=exe.name, bytes=int(nbytes), flops=int(flops))
        return str(exe.name)

    # -- results -----------------------------------------------------------------------------
    def kernel_summary(self) -> list[KernelStats]:
        """Per-kernel totals over the trace, the most expensive first."""
        acc: dict[tuple[str, str], list[float]] = {}
        with self._lock:
            events = list(self.events)
        for e in events:
            if e.get("cat") == "kernel":
                acc.setdefault((e["args"]["plan"], e["name"]), []).append(e["dur"] / 1e6)
        stats = [KernelStats(plan, name, len(d), float(sum(d))) for (plan, name), d in acc.items()]
        return sorted(stats, key=lambda s: -s.total_s)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            events = list(self.events)
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"producer": "asyncjit"}}

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        target = path if path is not None else self.path
        if target is None:
            raise InvalidArgumentError("no path to write the trace to")
        with open(target, "w") as f:
            json.dump(self.to_json(), f)


@contextmanager
def trace(path: str | os.PathLike[str] | None = None) -> Iterator[Trace]:
    """Record trace events inside the block; write them to ``path`` (if given) when it ends.

    One trace at a time per process.

    Raises:
        RuntimeError: another trace is being recorded.
    """
    if _state.active is not None:
        raise RuntimeError("a trace is already being recorded in this process")
    rec = Trace(path)
    _state.active = rec
    try:
        yield rec
    finally:
        _state.active = None
        if rec.path is not None:
            rec.save()
