"""Compile caches: loaded code in memory, object files on disk, and the counters that show them.

Disk entries are keyed by the IR hash plus llvmlite/LLVM versions, target triple, CPU name and
features (DESIGN.md invariant 9). Each file stores a magic, a format version, its full key, the
object length and a BLAKE2b checksum; anything that does not verify is ignored and recompiled,
never loaded. Writes go to a temp file in the same directory and are renamed into place, so a
reader never sees half a file. A directory other users can write is refused (``CacheDirectoryWarning``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import struct
import tempfile
import threading
import time
import warnings
from pathlib import Path

import attrs
import structlog

from ..codegen._target import LoadedObject, compile_to_object, host_target_key, load_object

__all__ = ["CacheDirectoryWarning", "CompileStats", "cache_dir", "code_key", "compile_stats", "get_code"]

log = structlog.get_logger("asyncjit.compiler")

MAGIC = b"AJITOBJ\n"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIQ")  # magic, version, key length, payload length
_DIGEST = 32


class CacheDirectoryWarning(UserWarning):
    """The compile cache directory is unsafe (writable by others) and is not used."""


@attrs.frozen
class CompileStats:
    """How plans were obtained since the process started (or the last ``reset``)."""

    cold_compiles: int
    disk_hits: int
    memory_hits: int


class _Counters:
    def __init__(self) -> None:
        self.cold = self.disk = self.memory = 0


_COUNTERS = _Counters()
_LOCK = threading.Lock()
_LOADED: dict[str, tuple[bytes, LoadedObject]] = {}


def compile_stats(reset: bool = False) -> CompileStats:
    """Counts of cold compiles, disk-cache hits and memory-cache hits (``reset`` zeroes them after)."""
    with _LOCK:
        out = CompileStats(_COUNTERS.cold, _COUNTERS.disk, _COUNTERS.memory)
        if reset:
            _COUNTERS.cold = _COUNTERS.disk = _COUNTERS.memory = 0
    return out


def count_memory_hit() -> None:
    with _LOCK:
        _COUNTERS.memory += 1


def code_key(ir_text: str) -> str:
    """The compiled-code key: IR hash + everything the machine code depends on besides the IR."""
    h = hashlib.blake2b(digest_size=32)
    h.update(ir_text.encode())
    for part in host_target_key():
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def cache_dir() -> Path | None:
    """``$ASYNCJIT_CACHE_DIR`` (``off`` disables), else ``$XDG_CACHE_HOME/asyncjit``.

    Without ``XDG_CACHE_HOME`` the default is ``~/.cache/asyncjit``.
    """
    env = os.environ.get("ASYNCJIT_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("off", "0", "") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "asyncjit"


def _usable(path: Path) -> bool:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as exc:
        log.warning("compile_cache_unavailable", dir=str(path), error=str(exc))
        return False
    unsafe = bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or (
        hasattr(os, "getuid") and st.st_uid != os.getuid()
    )
    if unsafe:
        msg = (
            f"compile cache directory {path} is writable by other users or not owned by you; "
            f"not using it (fix with: chmod go-w {path}, or set ASYNCJIT_CACHE_DIR)"
        )
        log.warning("compile_cache_refused", dir=str(path), mode=oct(st.st_mode & 0o777))
        warnings.warn(msg, CacheDirectoryWarning, stacklevel=4)
        return False
    return True


def _entry_path(directory: Path, key: str) -> Path:
    return directory / f"{key[:2]}" / f"{key}.ajo"


def encode_entry(key: str, payload: bytes) -> bytes:
    kb = key.encode()
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, len(kb), len(payload)) + kb + payload
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def decode_entry(data: bytes, key: str) -> bytes | None:
    """The payload if ``data`` is a complete, uncorrupted entry for exactly ``key``; else ``None``."""
    if len(data) < _HEADER.size + _DIGEST:
        return None
    magic, version, klen, plen = _HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION or len(data) != _HEADER.size + klen + plen + _DIGEST:
        return None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return None
    if body[_HEADER.size : _HEADER.size + klen] != key.encode():
        return None
    return body[_HEADER.size + klen :]


def _read(directory: Path, key: str) -> bytes | None:
    path = _entry_path(directory, key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    payload = decode_entry(data, key)
    if payload is None:
        log.warning("compile_cache_entry_rejected", path=str(path), reason="bad magic/version/key/checksum")
    return payload


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it into place (readers see all or nothing)."""
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.warning("compile_cache_write_failed", path=str(path), error=str(exc))


def _write(directory: Path, key: str, payload: bytes) -> None:
    _atomic_write(_entry_path(directory, key), encode_entry(key, payload))


def get_code(ir_text: str, plan: str = "") -> tuple[str, bytes, LoadedObject]:
    """Object code for ``ir_text``, loaded: from memory, from disk, or compiled (and stored).

    Returns ``(key, object bytes, loaded object)``; updates ``compile_stats``.
    """
    key = code_key(ir_text)
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            _COUNTERS.memory += 1
    if hit is not None:
        log.debug("compile", plan=plan, cache="memory", key=key[:16])
        return key, hit[0], hit[1]
    t0 = time.perf_counter()
    directory = cache_dir()
    usable = directory is not None and _usable(directory)
    obj = _read(directory, key) if usable and directory is not None else None
    source = "disk"
    if obj is None:
        source = "miss"
        obj = compile_to_object(ir_text)
        if usable and directory is not None:
            _write(directory, key, obj)
    loaded = load_object(obj)
    with _LOCK:
        if source == "disk":
            _COUNTERS.disk += 1
        else:
            _COUNTERS.cold += 1
        _LOADED.setdefault(key, (obj, loaded))
    log.info("compile", plan=plan, cache=source, seconds=round(time.perf_counter() - t0, 4), key=key[:16])
    return key, obj, loaded


@functools.cache
def compiler_source_hash() -> str:
    """A hash of the code that turns graphs into IR: plan-index entries die with any change to it."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=16)
    for pattern in ("passes/*.py", "codegen/*.py", "compiler/*.py", "graph/*.py", "symbolic.py", "dtypes.py"):
        for f in sorted(root.glob(pattern)):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def plan_hash(plan_key_text: str) -> str:
    """The plan-index key: the graph's exact structural key, compiler sources and target."""
    h = hashlib.blake2b(digest_size=32)
    h.update(plan_key_text.encode())
    h.update(compiler_source_hash().encode())
    for part in host_target_key():
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _index_path(directory: Path, phash: str) -> Path:
    return directory / "plans" / f"{phash}.aji"


def lookup_plan(phash: str) -> str | None:
    """The code key recorded for a plan hash (verified like object entries), or ``None``."""
    directory = cache_dir()
    if directory is None or not _usable(directory):
        return None
    try:
        data = _index_path(directory, phash).read_bytes()
    except OSError:
        return None
    payload = decode_entry(data, phash)
    return payload.decode() if payload is not None else None


def record_plan(phash: str, key: str) -> None:
    """Remember which code key a plan hash lowers to (skips IR emission on later warm loads)."""
    directory = cache_dir()
    if directory is None or not _usable(directory):
        return
    path = _index_path(directory, phash)
    _atomic_write(path, encode_entry(phash, key.encode()))


def get_code_by_key(key: str, plan: str = "") -> tuple[bytes, LoadedObject] | None:
    """Loaded code for a code key from memory or disk (never compiles); updates ``compile_stats``."""
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            _COUNTERS.memory += 1
            return hit
    directory = cache_dir()
    if directory is None or not _usable(directory):
        return None
    t0 = time.perf_counter()
    obj = _read(directory, key)
    if obj is None:
        return None
    loaded = load_object(obj)
    with _LOCK:
        _COUNTERS.disk += 1
        entry = _LOADED.setdefault(key, (obj, loaded))
    log.info("compile", plan=plan, cache="disk", seconds=round(time.perf_counter() - t0, 4), key=key[:16])
    return entry


def load_code(key: str, obj: bytes) -> LoadedObject:
    """Load object code that came with a serialized executable (shares the memory cache)."""
    with _LOCK:
        hit = _LOADED.get(key)
    if hit is not None:
        return hit[1]
    loaded = load_object(obj)
    with _LOCK:
        _LOADED.setdefault(key, (obj, loaded))
    return loaded
