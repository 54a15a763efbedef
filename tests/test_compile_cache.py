"""The on-disk compile cache: warm loads in a fresh process, corruption, unsafe directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncjit.compiler import CacheDirectoryWarning, cache_dir, compile_stats

SCRIPT = """
import json, sys, numpy as np
from asyncjit import Tensor, Var
from asyncjit.compiler import compile, compile_stats
t = Var("t", 1, 64)
x = Tensor.placeholder((t, 8), name="x")
y = ((x * 3.0 - 1.0).tanh() + x).sum(axis=1)
exe = compile(y, [x])
out = exe.run([np.ones((3, 8), np.float32)], {"t": 3})[0]
s = compile_stats()
print(json.dumps({"cold": s.cold_compiles, "disk": s.disk_hits, "out": out.tolist()}))
"""


def _run(cache: Path) -> dict[str, object]:
    env = {**os.environ, "ASYNCJIT_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.ajo"))


def test_warm_load_in_fresh_process(tmp_path: Path) -> None:
    """A second process finds the object file and compiles nothing."""
    cache = tmp_path / "cache"
    first = _run(cache)
    assert (first["cold"], first["disk"]) == (1, 0)
    assert len(_entries(cache)) == 1
    second = _run(cache)
    assert (second["cold"], second["disk"]) == (0, 1)
    assert second["out"] == first["out"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign_key", "empty"])
def test_damaged_entry_is_recompiled(tmp_path: Path, damage: str) -> None:
    """Corrupted, truncated or foreign-key entries are never loaded: the plan is recompiled."""
    cache = tmp_path / "cache"
    _run(cache)
    (entry,) = _entries(cache)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) // 3]
    elif damage == "foreign_key":
        from asyncjit.compiler._cache import decode_entry, encode_entry

        key = entry.stem
        payload = decode_entry(bytes(data), key)
        assert payload is not None
        data = bytearray(encode_entry("0" * len(key), payload))
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    again = _run(cache)
    assert (again["cold"], again["disk"]) == (1, 0)
    third = _run(cache)  # the recompiled entry replaced the damaged one
    assert (third["cold"], third["disk"]) == (0, 1)


def test_world_writable_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache dir others can write is not used, with a CacheDirectoryWarning; compiles still work."""
    import numpy as np

    from asyncjit import Tensor
    from asyncjit.compiler import compile

    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", str(cache))
    x = Tensor.placeholder((5,), name="x")
    y = (x * 7.25 + 0.5).sqrt()
    with pytest.warns(CacheDirectoryWarning, match="writable by other users"):
        exe = compile(y, [x])
    assert _entries(cache) == []
    assert exe.run([np.full(5, 2.0, np.float32)])[0][0] == pytest.approx(np.sqrt(15.0))


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ASYNCJIT_CACHE_DIR overrides, ``off`` disables, XDG_CACHE_HOME is the default's base."""
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")
    assert cache_dir() is None
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("ASYNCJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "asyncjit"
    assert compile_stats().cold_compiles >= 0


def test_damaged_plan_index_falls_back_to_ir(tmp_path: Path) -> None:
    """A corrupted plan-index entry is ignored: the IR is emitted and the object entry still hits."""
    cache = tmp_path / "cache"
    _run(cache)
    (index,) = sorted(cache.rglob("*.aji"))
    index.write_bytes(index.read_bytes()[:-5])
    again = _run(cache)
    assert (again["cold"], again["disk"]) == (0, 1)


def test_cache_off_writes_nothing(tmp_path: Path) -> None:
    """``ASYNCJIT_CACHE_DIR=off`` compiles in memory only."""
    env = {**os.environ, "ASYNCJIT_CACHE_DIR": "off", "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["cold"] == 1
    assert list(tmp_path.rglob("*")) == []
