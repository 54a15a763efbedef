"""Logging behaves like a library's: stdlib ``logging`` decides, warnings only by default, the CLI's
``-v`` / ``--log-json`` (before or after the subcommand), ``--version``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import asyncjit
from asyncjit._log import get_logger
from asyncjit.cli import main
from asyncjit.scheduler import StreamMux
from asyncjit.testing import capture_events

PROGRAM = """
import logging, sys
import numpy as np
import asyncjit
from asyncjit._log import get_logger
{setup}
f = asyncjit.jit(lambda x: x * 3)
f(np.ones(5, np.float32)).to_numpy_blocking()
get_logger("asyncjit.test").warning("something.odd", detail=42)
asyncjit.runtime.default_client().close()
print("done")
"""


def _run(setup: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASYNCJIT_CACHE_DIR": "off"}
    code = PROGRAM.format(setup=setup)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_default_shows_warnings_only_on_stderr() -> None:
    """Nothing configured: stdout is the program's own, stderr has the warning and no info events."""
    run = _run("")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "done\n"
    assert "something.odd detail=42" in run.stderr
    assert "jit.cache_miss" not in run.stderr and "device.stop" not in run.stderr


def test_stdlib_levels_decide() -> None:
    """basicConfig(INFO) shows info events; setLevel on the "asyncjit" logger overrides it."""
    shown = _run("logging.basicConfig(level=logging.INFO)")
    assert "INFO:asyncjit.jit:jit.cache_miss fn=<lambda> reason=first call" in shown.stderr
    assert "INFO:asyncjit.runtime:device.stop" in shown.stderr and shown.stdout == "done\n"
    quiet = _run(
        'logging.basicConfig(level=logging.INFO); logging.getLogger("asyncjit").setLevel(logging.WARNING)'
    )
    assert "cache_miss" not in quiet.stderr and "something.odd" in quiet.stderr
    one_part = _run(
        'logging.basicConfig(level=logging.WARNING); logging.getLogger("asyncjit.jit").setLevel(logging.INFO)'
    )
    assert "jit.cache_miss" in one_part.stderr and "device.stop" not in one_part.stderr


def test_capture_events_gives_the_event_dicts() -> None:
    with capture_events() as events:
        get_logger("asyncjit.test").info("thing.happened", n=3, name="x")
    assert events == [
        {"event": "thing.happened", "n": 3, "name": "x", "log_level": "info", "logger": "asyncjit.test"}
    ]
    with capture_events(logging.WARNING) as events:
        get_logger("asyncjit.test").info("ignored")
    assert events == []


@pytest.mark.parametrize("args", [["-v", "demo"], ["demo", "-v"]])
def test_cli_verbose_before_or_after_the_subcommand(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--no-compare", "--streams", "2"]) == 0
    out, err = capsys.readouterr()
    assert "asyncjit StreamMux" in out and "INFO" not in out
    assert "INFO    asyncjit.scheduler: mux.start" in err


def test_cli_log_json_after_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-compare", "--streams", "2", "--log-json", "-v"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    events = [json.loads(line) for line in lines]
    mux_start = next(e for e in events if e["event"] == "mux.start")
    assert mux_start["level"] == "info" and mux_start["logger"] == "asyncjit.scheduler"
    assert mux_start["max_streams"] == 2 and mux_start["timestamp"].endswith("Z")


def test_cli_is_quiet_by_default_and_restores_logging(capsys: pytest.CaptureFixture[str]) -> None:
    before = logging.getLogger("asyncjit").handlers[:], logging.getLogger("asyncjit").level
    assert main(["demo", "--no-compare", "--streams", "2"]) == 0
    assert capsys.readouterr().err == ""
    assert (logging.getLogger("asyncjit").handlers, logging.getLogger("asyncjit").level) == before


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"asyncjit {asyncjit.__version__}"


@pytest.mark.anyio
async def test_mux_metrics_line_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a mock clock jumping 1000 s per step: an explicit interval logs periodic lines, the
    default logs only the final one."""
    from asyncjit.runtime import Client
    from asyncjit.scheduler import HostBatchedStep, _mux

    now = [0.0]
    monkeypatch.setattr(_mux, "loop_clock", lambda: lambda: now[0])

    async def periodic_lines(**kw: float) -> list[dict[str, object]]:
        with Client("cpu", inline="never") as client, capture_events() as events:
            step = HostBatchedStep(client, max_batch_size=2, num_slots=2)
            async with StreamMux(step, idle_timeout=None, **kw) as mux, mux.open_stream() as s:
                for _ in range(3):
                    now[0] += 1000.0
                    await s.step(np.zeros(16, np.float32))
        return [e for e in events if e["event"] == "mux.metrics" and not e.get("final")]

    assert len(await periodic_lines(metrics_interval=1.0)) >= 2
    assert await periodic_lines() == []
