"""The on-disk compile cache: warm loads in a fresh process, corruption, unsafe directories."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _resign(payload: bytes, key: str, secret: bytes) -> bytes:
    from asyncjit.compiler._cache import encode_entry

    return encode_entry(key, payload, secret)


def _garbage(obj: bytes) -> bytes:
    """The issue's repro: random bytes where the object was (deterministic for reproducibility)."""
    return np.random.default_rng(17).integers(0, 256, len(obj), dtype=np.uint8).tobytes()


def _elf_garbage(obj: bytes) -> bytes:
    """A valid ELF header whose section table points far past the end of the bytes."""
    data = bytearray(obj)
    struct.pack_into("<Q", data, 0x28, len(obj) * 4)  # e_shoff
    return bytes(data)


def _wrong_machine(obj: bytes) -> bytes:
    data = bytearray(obj)
    struct.pack_into("<H", data, 18, 183 if struct.unpack_from("<H", obj, 18)[0] != 183 else 62)
    return bytes(data)


def _no_entry(obj: bytes) -> bytes:
    """The entry symbol's name renamed in the string table: structurally valid, no ``plan``."""
    i = obj.index(b"\0plan\0")
    return obj[: i + 1] + b"nalp" + obj[i + 5 :]


_TAMPER = {
    "garbage_object": _garbage,
    "elf_section_table_past_end": _elf_garbage,
    "wrong_elf_machine": _wrong_machine,
    "truncated_object": lambda obj: obj[: len(obj) // 2],
    "missing_entry_symbol": _no_entry,
}


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign_key", "empty", "forged_checksum", *_TAMPER])
def test_damaged_entry_is_recompiled(tmp_path: Path, damage: str) -> None:
    """Corrupted, truncated, foreign-key, forged or re-signed garbage entries are never loaded.

    The re-signed cases carry a valid MAC (the test reads the user's secret) around object bytes
    that would crash LLVM's loader: the ELF validation refuses them and the plan is recompiled.
    """
    from asyncjit.compiler._cache import _DIGEST, decode_entry

    cache = tmp_path / "cache"
    _run(cache)
    (entry,) = _entries(cache)
    secret = (cache / "secret.key").read_bytes()
    key = entry.stem
    data = bytearray(entry.read_bytes())
    payload = decode_entry(bytes(data), key, secret)
    assert payload is not None
    if damage == "flip":
        data[len(data) // 2] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) // 3]
    elif damage == "foreign_key":
        data = bytearray(_resign(payload, "0" * len(key), secret))
    elif damage == "forged_checksum":
        # what another user could do without the secret: garbage with a plain BLAKE2b checksum
        body = bytes(data[:-_DIGEST]).replace(payload, _garbage(payload))
        data = bytearray(body + hashlib.blake2b(body, digest_size=_DIGEST).digest())
    elif damage in _TAMPER:
        data = bytearray(_resign(_TAMPER[damage](payload), key, secret))
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    again = _run(cache)
    assert (again["cold"], again["disk"]) == (1, 0)
    third = _run(cache)  # the recompiled entry replaced the damaged one
    assert (third["cold"], third["disk"]) == (0, 1)


def test_world_writable_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache dir others can write is not used, with a CacheDirectoryWarning; compiles still work."""
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


@pytest.mark.parametrize("mode", [0o644, 0o660])
def test_readable_secret_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int) -> None:
    """A MAC secret others can read or write could forge entries: the cache is not used."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "secret.key").write_bytes(os.urandom(32))
    (cache / "secret.key").chmod(mode)
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", str(cache))
    x = Tensor.placeholder((3,), name="x")
    with pytest.warns(CacheDirectoryWarning, match="not a private file"):
        exe = compile((x * 5.5 - mode / 1024).exp(), [x])  # a plan per mode: no memory hit
    assert _entries(cache) == []
    assert exe.run([np.zeros(3, np.float32)])[0][0] == pytest.approx(np.exp(-mode / 1024))


def test_key_covers_what_shapes_the_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another opt level, asyncjit version or compiler source misses the cache instead of reusing code."""
    import asyncjit
    from asyncjit.codegen._module import ENTRY
    from asyncjit.compiler import _cache

    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", str(tmp_path / "cache"))
    ir_text = f"""define void @{ENTRY}(ptr %args) {{
  ret void
}}
"""
    keys = {_cache.code_key(ir_text, level) for level in range(4)}
    assert len(keys) == 4
    key3, _, _ = _cache.get_code(ir_text, "t", level=3)
    before = compile_stats()
    key2, _, _ = _cache.get_code(ir_text, "t", level=2)
    after = compile_stats()
    assert key2 != key3 and after.cold_compiles == before.cold_compiles + 1
    assert len(_entries(tmp_path / "cache")) == 2
    monkeypatch.setattr(asyncjit, "__version__", asyncjit.__version__ + ".dev1")
    assert _cache.code_key(ir_text, 3) != key3
    monkeypatch.undo()
    monkeypatch.setattr(_cache, "compiler_source_hash", lambda: "a-changed-compiler")
    assert _cache.code_key(ir_text, 3) != key3


def test_deserialize_refuses_tampered_object() -> None:
    """A serialized executable whose object bytes were replaced (checksum fixed up) is refused."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile, deserialize
    from asyncjit.compiler._serialize import _DIGEST
    from asyncjit.errors import CompileError, ObjectCodeError

    x = Tensor.placeholder((4,), name="x")
    exe = compile(x * 2.5 + 1.0, [x])
    blob = exe.serialize()
    body = blob[:-_DIGEST].replace(exe.object_code, _elf_garbage(exe.object_code))
    forged = body + hashlib.blake2b(body, digest_size=_DIGEST).digest()
    with pytest.raises(ObjectCodeError, match="section table"):
        deserialize(forged)
    assert issubclass(ObjectCodeError, CompileError)


@pytest.mark.parametrize("damage", sorted(_TAMPER))
def test_validate_object_rejects(damage: str) -> None:
    """Each structural defect is an ObjectCodeError naming it; the intact object passes."""
    from asyncjit import Tensor
    from asyncjit.codegen._elf import validate_object
    from asyncjit.codegen._module import ENTRY
    from asyncjit.compiler import compile
    from asyncjit.errors import ObjectCodeError

    x = Tensor.placeholder((4,), name="x")
    obj = compile(x * 3.5, [x]).object_code
    validate_object(obj, (ENTRY,))
    with pytest.raises(ObjectCodeError):
        validate_object(_TAMPER[damage](obj), (ENTRY,))


def test_cache_dir_that_is_a_file_warns_and_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ASYNCJIT_CACHE_DIR naming a regular file is not silent: a CacheDirectoryWarning, no cache."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile

    not_a_dir = tmp_path / "cache"
    not_a_dir.write_bytes(b"")
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", str(not_a_dir))
    x = Tensor.placeholder((3,), name="x")
    with pytest.warns(CacheDirectoryWarning, match="unusable"):
        exe = compile((x * 6.5 + 0.125).exp(), [x])
    assert exe.run([np.zeros(3, np.float32)])[0][0] == pytest.approx(np.exp(0.125))


@pytest.mark.skipif(
    os.uname().machine != "x86_64" or not shutil.which("readelf"), reason="x86-64 objects, read by readelf"
)
def test_objects_address_their_data_with_64_bit_relocations(tmp_path: Path) -> None:
    """Loaded code reaches its constant pools and data through 64-bit absolute relocations only:
    MCJIT maps an object's sections separately, and in a crowded address space (a Ray worker)
    they can land more than 2 GB apart, where a 32-bit RIP-relative reference made LLVM's loader
    abort the process."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile

    x = Tensor.placeholder((64, 64), name="x")
    exe = compile([((x @ x) * 0.5 + 1.25).tanh().sum(1)], [x], cache_dir="off")
    path = tmp_path / "plan.o"
    path.write_bytes(exe.object_code)
    out = subprocess.run(["readelf", "-rW", str(path)], capture_output=True, text=True, check=True).stdout
    kinds = {line.split()[2] for line in out.splitlines() if "R_X86_64_" in line}
    assert kinds == {"R_X86_64_64"}, kinds


def test_broadcast_weight_is_serialized_as_its_core_and_written_out_on_load() -> None:
    """A folded ``ConstantOfShape``-style weight keeps only its scalar in the serialized
    executable (and so in cache entries), and the loaded executable computes the same result."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile, deserialize

    x = Tensor.placeholder((3, 500), name="x")
    w = Tensor.full((400, 500), 0.5)  # 800 KB written out
    exe = compile(x @ w.permute(1, 0), [x])
    assert exe.const_sources[0].strides == (0, 0) and exe.consts[0].flags.c_contiguous
    blob = exe.serialize()
    assert len(blob) < 400 * 500 * 4
    again = deserialize(blob)
    xv = np.random.default_rng(0).standard_normal((3, 500)).astype(np.float32)
    want = exe.run([xv])[0]
    np.testing.assert_array_equal(again.run([xv])[0], want)
    np.testing.assert_allclose(want, xv @ np.full((500, 400), 0.5, np.float32), rtol=1e-5)


def test_deserialize_refuses_a_core_that_does_not_broadcast() -> None:
    """A broadcast constant whose recorded core cannot broadcast to its shape (a forged entry,
    digest fixed up) is a CompileError naming both, not a numpy error."""
    from asyncjit import Tensor
    from asyncjit.compiler import compile, deserialize
    from asyncjit.compiler._serialize import _DIGEST, _HEAD, MAGIC
    from asyncjit.errors import CompileError

    x = Tensor.placeholder((3, 500), name="x")
    blob = compile(x @ Tensor.full((400, 500), 0.25).permute(1, 0), [x]).serialize()
    pre = len(MAGIC) + _HEAD.size
    version, mlen, olen, _ = _HEAD.unpack_from(blob, len(MAGIC))
    meta = json.loads(blob[pre : pre + mlen])
    (entry,) = [c for c in meta["consts"] if "core" in c]
    objs = blob[pre + mlen : pre + mlen + olen]

    def forged(core: list[int], consts: bytes) -> bytes:
        entry["core"], entry["nbytes"] = core, len(consts)
        mb = json.dumps(meta, sort_keys=True).encode()
        body = MAGIC + _HEAD.pack(version, len(mb), olen, len(consts)) + mb + objs + consts
        return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()

    two = np.zeros(2, np.float32).tobytes()
    with pytest.raises(CompileError, match="does not broadcast"):
        deserialize(forged([2, 1], two))  # 2 rows cannot broadcast to 400
    with pytest.raises(CompileError, match="runs past"):
        deserialize(forged([4, 1], two))  # 4 elements recorded, 2 stored
