"""``asyncjit.profiler.trace``: Chrome trace-event JSON (the format Perfetto and chrome://tracing
load), checked here against the format's rules and for span nesting.

The ``perfetto`` package's trace processor downloads a native binary when first used, which a
machine without network access cannot do, so the file is validated against the trace-event
format itself: required fields per phase, microsecond timestamps, and spans on one thread that
nest (a child inside its parent) or do not overlap.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import asyncjit
from asyncjit.cli import main
from asyncjit.models import read_wav, speech_sample_path
from asyncjit.models.silero_vad import SileroVad, vad_mux
from asyncjit.profiler import _state, trace
from asyncjit.runtime import Client
from asyncjit.testing import Gate, host_plan

EPS_US = 0.01  # float rounding of microsecond timestamps


def check_trace_format(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Chrome trace-event JSON object format; returns the events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ph"] in ("X", "i", "M"), e
        if e["ph"] == "M":
            assert e["name"] == "thread_name" and isinstance(e["args"]["name"], str)
            continue
        assert isinstance(e["cat"], str) and isinstance(e["ts"], int | float) and e["ts"] >= 0
        assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0
        else:
            assert e["s"] in ("t", "p", "g")
    json.dumps(doc)  # plain JSON values only
    return list(doc["traceEvents"])


def check_nesting(
    events: list[dict[str, Any]],
) -> dict[int, list[tuple[dict[str, Any], dict[str, Any] | None]]]:
    """Per thread, complete spans form a tree; returns (span, parent) pairs per thread."""
    by_tid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_tid[e["tid"]].append(e)
    parents: dict[int, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}
    for tid, spans in by_tid.items():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        pairs = []
        for e in spans:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS_US:
                stack.pop()
            if stack:
                top = stack[-1]
                assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + EPS_US, (
                    f"{e['name']} overlaps {top['name']} on thread {tid} without nesting"
                )
            pairs.append((e, stack[-1] if stack else None))
            stack.append(e)
        parents[tid] = pairs
    return parents


def test_trace_of_jit_silero_and_mux(tmp_path: Path) -> None:
    audio, _ = read_wav(speech_sample_path())
    chunks = [np.ascontiguousarray(audio[i : i + 512]) for i in range(0, 512 * 12, 512)]
    energy = asyncjit.jit(lambda x: (x * x).mean(axis=-1), dynamic={"x": {0: ("t", 1, 4096)}})
    vad = SileroVad(16000)
    untraced = [vad(c) for c in chunks]
    vad.reset()

    async def wakeup() -> None:
        """One wake-up of the loop by a device worker, for certain: the mux alone may run every
        step inline on the loop (its auto inline policy), and then no worker ever wakes it."""
        with Client("cpu") as client:
            gate = Gate()
            held = client.load(host_plan("gated", gate), client.devices()[0])
            ones = client.buffer_from_host(np.ones((3, 4), np.float32), client.devices()[0])
            (gated,) = await held.execute([ones, ones], {"t": 3})
            threading.Timer(0.05, gate.open).start()
            await gated.ready()

    async def streams() -> None:
        await wakeup()
        async with vad_mux(16000, max_streams=4, idle_timeout=None) as mux, anyio.create_task_group() as tg:

            async def one(k: int) -> None:
                async with mux.open_stream() as s:
                    for c in chunks[k : k + 4]:
                        await s.step(c)

            for k in range(4):
                tg.start_soon(one, k)

    out = tmp_path / "out.json"
    with trace(out) as rec:
        energy(audio[:1000]).to_numpy_blocking()
        traced = [vad(c) for c in chunks]
        anyio.run(streams)
    assert _state.active is None
    assert traced == untraced  # the instrumented entry computes the same, bit for bit

    events = check_trace_format(json.loads(out.read_text()))
    cats = {e.get("cat") for e in events}
    assert {"plan", "kernel", "device", "mux", "loop"} <= cats
    pairs = check_nesting(events)
    for spans in pairs.values():
        for span, parent in spans:
            if span["cat"] == "kernel":  # every kernel inside its plan's span
                assert (
                    parent is not None and parent["cat"] == "plan" and parent["name"] == span["args"]["plan"]
                )
            if span["cat"] == "plan" and span["name"].startswith("silero_vad_slots"):  # mux batches: queued
                assert parent is not None and parent["cat"] == "device"
    batches = [e for e in events if e["name"] == "mux.batch"]
    assert sum(e["args"]["size"] for e in batches) == 16
    plans = {k.plan for k in rec.kernel_summary()}
    assert any(p.startswith("silero_vad") for p in plans) and any("lambda" in p for p in plans)
    assert all(k.calls >= 1 and k.total_s >= 0 for k in rec.kernel_summary())


def test_one_trace_at_a_time() -> None:
    with trace() as rec, pytest.raises(RuntimeError, match="already being recorded"), trace():
        pass
    assert _state.active is None and rec.events == []
    with pytest.raises(ValueError, match="no path"):
        rec.save()


def test_demo_trace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``asyncjit demo --streams N --trace out.json``: one flag, a loadable trace."""
    out = tmp_path / "demo.json"
    assert main(["demo", "--streams", "4", "--no-compare", "--trace", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"events in {out}" in printed and "calls," in printed
    events = check_trace_format(json.loads(out.read_text()))
    check_nesting(events)
    assert any(e["name"] == "mux.batch" for e in events) and any(e.get("cat") == "kernel" for e in events)
