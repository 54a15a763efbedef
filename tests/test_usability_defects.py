"""Defects found by trying asyncjit as a new user, each pinned: PrepareConfig honoured, kernel
failures typed, jit miss reasons naming the right difference, Client(N), the demo saying how it
prepared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import asyncjit
from asyncjit import InputSpec, JitWrapper, PrepareConfig, Tensor, Var, VarSpec
from asyncjit.cli import main
from asyncjit.errors import CompileError, KernelRuntimeError, NotPreparedError
from asyncjit.runtime import Client
from asyncjit.testing import capture_events, host_plan


class Scale(JitWrapper[float]):
    x = asyncjit.Input()
    t = VarSpec(1, 64)

    def build(self, model: float, x: Tensor, t: Var) -> Tensor:
        return x[:, :t] * model


def _prepared(config: PrepareConfig, scale: float = 2.0) -> Scale:
    return Scale(scale).prepare_with_config(InputSpec.f32((2, 64)), config=config)  # type: ignore[return-value]


class TestPrepareConfig:
    def test_opt_level_reaches_the_compiler(self) -> None:
        """Each level is its own plan (different code key), with the same results."""
        fast, slow = _prepared(PrepareConfig(opt_level=3)), _prepared(PrepareConfig(opt_level=0))
        keys = {j._prepared.loaded.executable.code_key for j in (fast, slow)}  # type: ignore[union-attr]
        assert len(keys) == 2
        for j in (fast, slow):
            j.x_mut()[:] = np.arange(128, dtype=np.float32).reshape(2, 64)
            j.execute_with_vars({"t": 10})
        np.testing.assert_array_equal(fast.output().to_numpy_blocking(), slow.output().to_numpy_blocking())
        with pytest.raises(CompileError, match="opt_level must be an int from 0 to 3, got 7"):
            _prepared(PrepareConfig(opt_level=7))

    def test_cache_dir_is_used_or_off(self, tmp_path: Path) -> None:
        on, off = tmp_path / "on", tmp_path / "off"
        on.mkdir(mode=0o700)
        off.mkdir(mode=0o700)
        _prepared(PrepareConfig(cache_dir=str(on)), scale=3.25)  # a graph no other test compiles
        assert any(p.is_file() for p in on.rglob("*"))
        _prepared(PrepareConfig(cache_dir="off"), scale=3.5)
        assert not any(off.rglob("*"))

    def test_profiling_false_refuses_execute_profiled(self) -> None:
        assert _prepared(PrepareConfig(profiling=True)).execute_with_vars_profiled({"t": 4})
        with pytest.raises(NotPreparedError, match="profiling=False"):
            _prepared(PrepareConfig(profiling=False)).execute_with_vars_profiled({"t": 4})

    def test_from_env_profiling(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("ASYNCJIT_PROFILE", raising=False)
        assert PrepareConfig.from_env().profiling is True
        monkeypatch.setenv("ASYNCJIT_PROFILE", "0")
        assert PrepareConfig.from_env().profiling is False
        monkeypatch.setenv("ASYNCJIT_PROFILE", "maybe")
        with pytest.raises(ValueError, match="ASYNCJIT_PROFILE"):
            PrepareConfig.from_env()


def test_kernel_failures_are_kernel_runtime_errors() -> None:
    """A kernel that raises poisons its outputs with a KernelRuntimeError naming the plan, which
    is also the original type (existing except clauses keep working) and chains the original."""

    def broken(x: np.ndarray) -> np.ndarray:
        raise ZeroDivisionError("division in the kernel")

    with Client("cpu") as client:
        loaded = client.load(host_plan("broken_plan", broken, n_in=1))
        x = client.buffer_from_host(np.ones((3, 4), np.float32))
        for inline in (True, False):
            (out,) = loaded.execute_blocking([x], {"t": 3}, inline=inline)
            with pytest.raises(
                KernelRuntimeError, match=r"kernel failure in plan 'broken_plan(#\d+)?': ZeroDivisionError"
            ) as info:
                out.block_until_ready(10)
            assert isinstance(info.value, ZeroDivisionError) and isinstance(info.value, RuntimeError)
            assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_jit_miss_reasons_name_the_nearest_difference() -> None:
    f = asyncjit.jit(lambda x, scale: x * scale, static_argnames="scale")
    g = asyncjit.jit(lambda d: d["a"] + d["b"])
    x = np.ones(3, np.float32)
    with capture_events() as events:
        f(x, 2.0)
        f(x, 3)
        f(x, 3.0)  # 3 (int) is cached: the nearest key differs only in the type
        g({"a": x, "b": x})
        g({"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)})
        g({"a": x, "b": x, "c": x})
    reasons = [e["reason"] for e in events if e["event"] == "jit.cache_miss"]
    assert reasons[2] == "static scale: 3 (int) -> 3.0 (float)"
    assert reasons[4] == "['d']['a'] shape (3) -> (4); ['d']['b'] shape (3) -> (4)"
    assert reasons[5].startswith("argument structure")


def test_client_takes_a_device_count() -> None:
    with Client(2) as client:
        assert [d.kind for d in client.devices()] == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="N >= 1"):
        Client(0)
    with pytest.raises(TypeError, match="devices must be"):
        Client(True)  # type: ignore[arg-type]


def test_demo_says_how_it_prepared(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-compare"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "prepared in" in s)
    assert any(w in line for w in ("compiled", "loaded from the disk cache", "reused from memory"))
    assert "or loaded" not in line


def test_demo_segments_as_a_rich_table() -> None:
    """With a rich console (the CLI passes one on a terminal) the segments come as a table."""
    import io

    from rich.console import Console

    from asyncjit._demo import run_demo

    buf = io.StringIO()
    lines: list[str] = []
    run_demo(compare=False, out=lines.append, console=Console(file=buf, width=100, force_terminal=False))
    table = buf.getvalue()
    assert "speech segments (4)" in table and "duration (s)" in table and table.count("\n") >= 8
    assert not any(line.startswith("speech segments") for line in lines)


def test_silero_onnx_path_without_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ASYNCJIT_SILERO_ONNX names the model file when silero-vad is not installed."""
    import shutil

    from asyncjit.errors import ModelFormatError
    from asyncjit.models.silero_vad import default_model_path, load_weights

    copy = tmp_path / "silero_vad.onnx"
    shutil.copy(default_model_path(), copy)
    monkeypatch.setenv("ASYNCJIT_SILERO_ONNX", str(copy))
    assert default_model_path() == copy
    assert load_weights(16000).chunk_samples == 512
    monkeypatch.setenv("ASYNCJIT_SILERO_ONNX", str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelFormatError, match=r"ASYNCJIT_SILERO_ONNX=.*is not a file"):
        default_model_path()
