"""Compile caches: loaded code in memory, object files on disk, and the counters that show them.

Disk entries are keyed by everything that shapes the object (DESIGN.md invariant 9): the IR, the
optimisation level and pass pipeline, llvmlite/LLVM versions, target triple, CPU name and
features, the asyncjit version and a hash of the compiler's own sources (a development change
never serves stale code). Each file stores a magic, a format version, its full key, the object
length and a keyed BLAKE2b MAC under a per-user secret (``secret.key``, 0600, in the cache
directory): another user cannot forge an entry even where they could compute a plain checksum.
Anything that does not verify is ignored and recompiled, never loaded; an entry that verifies
still goes through ``validate_object`` (ELF structure, host machine, entry symbol) before LLVM's
loader sees it. Writes go to a temp file in the same directory and are renamed into place, so a
reader never sees half a file. A directory or secret file other users can write or read is
refused (``CacheDirectoryWarning``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import hmac
import os
import secrets
import stat
import struct
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import attrs

from .._log import get_logger
from ..codegen._module import ENTRY
from ..codegen._target import (
    LoadedObject,
    compile_to_object,
    host_target_key,
    load_object,
    pipeline_description,
)
from ..errors import ObjectCodeError

__all__ = ["CacheDirectoryWarning", "CompileStats", "cache_dir", "code_key", "compile_stats", "get_code"]

log = get_logger("asyncjit.compiler")

MAGIC = b"AJITOBJ\n"
FORMAT_VERSION = 2  # 2: keyed MAC under the per-user secret (1 had a plain checksum)
_HEADER = struct.Struct("<8sIIQ")  # magic, version, key length, payload length
_DIGEST = 32
_SECRET_NAME = "secret.key"
_SECRET_BYTES = 32
_REQUIRED = (ENTRY,)  # every plan object defines its entry point


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
_SECRETS: dict[Path, bytes] = {}


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


def code_key(ir_text: str, level: int = 3) -> str:
    """The compiled-code key: the IR + everything else the machine code depends on."""
    from .. import __version__

    h = hashlib.blake2b(digest_size=32)
    h.update(ir_text.encode())
    parts = (
        *host_target_key(),
        f"opt={level}",
        pipeline_description(level),
        f"asyncjit={__version__}",
        compiler_source_hash(),
    )
    for part in parts:
        h.update(b"\0" + part.encode())
    return h.hexdigest()


_DIR_OVERRIDE: contextvars.ContextVar[str | None] = contextvars.ContextVar("asyncjit_cache_dir", default=None)


@contextlib.contextmanager
def using_cache_dir(path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Compile inside the block with this cache directory (``"off"``: none); None changes nothing."""
    token = _DIR_OVERRIDE.set(None if path is None else os.fspath(path))
    try:
        yield
    finally:
        _DIR_OVERRIDE.reset(token)


def cache_dir() -> Path | None:
    """``using_cache_dir``'s directory inside one, else ``$ASYNCJIT_CACHE_DIR`` (``off``
    disables), else ``$XDG_CACHE_HOME/asyncjit``.

    Without ``XDG_CACHE_HOME`` the default is ``~/.cache/asyncjit``.
    """
    env = _DIR_OVERRIDE.get()
    if env is None:
        env = os.environ.get("ASYNCJIT_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("off", "0", "") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "asyncjit"


def _refuse(path: Path, msg: str, mode: int) -> None:
    log.warning("compile_cache_refused", path=str(path), mode=oct(mode & 0o777))
    warnings.warn(msg, CacheDirectoryWarning, stacklevel=5)


def _not_mine(st: os.stat_result) -> bool:
    return hasattr(os, "getuid") and st.st_uid != os.getuid()


def _open_cache(path: Path) -> bytes | None:
    """The directory's MAC secret, or ``None`` if the directory is unusable or unsafe."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as exc:
        log.warning("compile_cache_unavailable", dir=str(path), error=str(exc))
        warnings.warn(
            f"compile cache directory {path} is unusable ({exc}); compiling without it "
            "(set ASYNCJIT_CACHE_DIR to a directory of yours, or 'off')",
            CacheDirectoryWarning,
            stacklevel=4,
        )
        return None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or _not_mine(st):
        _refuse(
            path,
            f"compile cache directory {path} is writable by other users or not owned by you; "
            f"not using it (fix with: chmod go-w {path}, or set ASYNCJIT_CACHE_DIR)",
            st.st_mode,
        )
        return None
    with _LOCK:
        secret = _SECRETS.get(path)
    if secret is None:
        secret = _load_secret(path)
        if secret is not None:
            with _LOCK:
                secret = _SECRETS.setdefault(path, secret)
    return secret


def _load_secret(directory: Path) -> bytes | None:
    """Read (creating it on first use) the per-user secret that keys entry MACs.

    Created 0600 through a temp file linked into place, so two processes racing to create it
    agree on one. Refused unless it is a regular file of ours that nobody else can read or write.
    """
    path = directory / _SECRET_NAME
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        _refuse(path, f"compile cache secret {path} cannot be opened ({exc}); not using the cache", 0)
        return None
    if fd < 0:
        fd_tmp, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")  # mode 0600
        try:
            with os.fdopen(fd_tmp, "wb") as f:
                f.write(secrets.token_bytes(_SECRET_BYTES))
            with contextlib.suppress(FileExistsError):  # another process won the race: use its secret
                os.link(tmp, path)
        except OSError as exc:
            log.warning("compile_cache_unavailable", dir=str(directory), error=str(exc))
            return None
        finally:
            os.unlink(tmp)
        return _load_secret(directory)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or _not_mine(st):
            _refuse(
                path,
                f"compile cache secret {path} is not a private file of yours (mode "
                f"{oct(st.st_mode & 0o777)}); not using the cache (fix with: rm {path})",
                st.st_mode,
            )
            return None
        secret = f.read(_SECRET_BYTES + 1)
    if len(secret) != _SECRET_BYTES:
        _refuse(path, f"compile cache secret {path} is damaged; not using the cache (fix with: rm {path})", 0)
        return None
    return secret


def _entry_path(directory: Path, key: str) -> Path:
    return directory / f"{key[:2]}" / f"{key}.ajo"


def _mac(body: bytes, secret: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=_DIGEST, key=secret).digest()


def encode_entry(key: str, payload: bytes, secret: bytes) -> bytes:
    kb = key.encode()
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, len(kb), len(payload)) + kb + payload
    return body + _mac(body, secret)


def decode_entry(data: bytes, key: str, secret: bytes) -> bytes | None:
    """The payload if ``data`` is a complete entry for exactly ``key`` whose MAC verifies; else ``None``."""
    if len(data) < _HEADER.size + _DIGEST:
        return None
    magic, version, klen, plen = _HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION or len(data) != _HEADER.size + klen + plen + _DIGEST:
        return None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if not hmac.compare_digest(_mac(body, secret), digest):
        return None
    if body[_HEADER.size : _HEADER.size + klen] != key.encode():
        return None
    return body[_HEADER.size + klen :]


def _read(directory: Path, secret: bytes, key: str) -> tuple[bytes, LoadedObject] | None:
    """The entry for ``key`` loaded, if it verifies (MAC, then object structure); else ``None``."""
    path = _entry_path(directory, key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    payload = decode_entry(data, key, secret)
    if payload is None:
        log.warning("compile_cache_entry_rejected", path=str(path), reason="bad magic/version/key/MAC")
        return None
    try:
        return payload, load_object(payload, _REQUIRED)
    except ObjectCodeError as exc:
        log.warning("compile_cache_entry_rejected", path=str(path), reason=str(exc))
        return None


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


def _write(directory: Path, secret: bytes, key: str, payload: bytes) -> None:
    _atomic_write(_entry_path(directory, key), encode_entry(key, payload, secret))


def _cache() -> tuple[Path, bytes] | None:
    directory = cache_dir()
    if directory is None:
        return None
    secret = _open_cache(directory)
    return None if secret is None else (directory, secret)


def get_code(ir_text: str, plan: str = "", level: int = 3) -> tuple[str, bytes, LoadedObject]:
    """Object code for ``ir_text`` at optimisation ``level``, loaded: from memory, disk, or compiled.

    Returns ``(key, object bytes, loaded object)``; updates ``compile_stats``.
    """
    key = code_key(ir_text, level)
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            _COUNTERS.memory += 1
    if hit is not None:
        log.debug("compile", plan=plan, cache="memory", key=key[:16])
        return key, hit[0], hit[1]
    t0 = time.perf_counter()
    cache = _cache()
    found = _read(*cache, key) if cache is not None else None
    source = "disk"
    if found is None:
        source = "miss"
        obj = compile_to_object(ir_text, level)
        loaded = load_object(obj, _REQUIRED)
        if cache is not None:
            _write(*cache, key, obj)
    else:
        obj, loaded = found
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
    cache = _cache()
    if cache is None:
        return None
    try:
        data = _index_path(cache[0], phash).read_bytes()
    except OSError:
        return None
    payload = decode_entry(data, phash, cache[1])
    try:
        return payload.decode("ascii") if payload is not None else None
    except UnicodeDecodeError:
        return None


def record_plan(phash: str, key: str) -> None:
    """Remember which code key a plan hash lowers to (skips IR emission on later warm loads)."""
    cache = _cache()
    if cache is None:
        return
    _atomic_write(_index_path(cache[0], phash), encode_entry(phash, key.encode(), cache[1]))


def get_code_by_key(key: str, plan: str = "") -> tuple[bytes, LoadedObject] | None:
    """Loaded code for a code key from memory or disk (never compiles); updates ``compile_stats``."""
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            _COUNTERS.memory += 1
            return hit
    cache = _cache()
    if cache is None:
        return None
    t0 = time.perf_counter()
    found = _read(*cache, key)
    if found is None:
        return None
    obj, loaded = found
    with _LOCK:
        _COUNTERS.disk += 1
        entry = _LOADED.setdefault(key, (obj, loaded))
    log.info("compile", plan=plan, cache="disk", seconds=round(time.perf_counter() - t0, 4), key=key[:16])
    return entry


def load_code(key: str, obj: bytes) -> LoadedObject:
    """Load object code that came with a serialized executable (shares the memory cache).

    Raises:
        ObjectCodeError: the object is malformed or not for this host (validated before loading).
    """
    with _LOCK:
        hit = _LOADED.get(key)
    if hit is not None and hit[0] == obj:
        return hit[1]
    loaded = load_object(obj, _REQUIRED)
    with _LOCK:
        _LOADED.setdefault(key, (obj, loaded))
    return loaded
