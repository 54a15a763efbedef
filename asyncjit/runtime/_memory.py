"""``MemorySpace``: 64-byte aligned host memory with size-class free lists and byte accounting.

Three kinds per device, as in PJRT: ``device`` (where plans compute), ``pinned_host`` (page-locked
host memory: its own pages, ``mmap``-ed and ``mlock``-ed so they are never swapped out; when the
``RLIMIT_MEMLOCK`` limit forbids locking, the space logs ``memory.pin_failed`` once with the
reason and the limit and keeps serving ordinary pages, ``memory_stats().bytes_pinned`` says how
much is really locked) and ``unpinned_host`` (pageable host memory). On CPU devices all three are
host RAM that kernels can read; they are separate spaces so that placement (a plan's outputs may
go to a host space), statistics and accelerator plugins keep PJRT's vocabulary. Every block
records its address as a Python int at allocation time (invariant 4), so a replay never asks
numpy or ctypes for a pointer.

Freed blocks go to a free list keyed by size class and are handed out again for any request of
the same class. A block whose memory was exported as a numpy view is never reused: the view keeps
the memory alive, and reusing it would alias someone else's data.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import math
import mmap
import os
import threading
from typing import TYPE_CHECKING

import attrs
import numpy as np
import numpy.typing as npt

from .._log import get_logger
from ..errors import OutOfMemoryError
from ..graph._node import allocate_array

if TYPE_CHECKING:
    from ._device import Device

_log = get_logger("asyncjit.runtime")

__all__ = ["ALIGNMENT", "Block", "MemoryKind", "MemorySpace", "MemoryStats", "host_array", "size_class"]

ALIGNMENT = 64
"""Bytes; compiled kernels may assume it for vector loads, and zero-copy host buffers need it."""


class MemoryKind(enum.Enum):
    DEVICE = "device"
    PINNED_HOST = "pinned_host"
    UNPINNED_HOST = "unpinned_host"


@attrs.frozen
class MemoryStats:
    """Byte accounting of one memory space (``reserved`` = in use + cached free blocks)."""

    bytes_in_use: int
    peak_bytes_in_use: int
    bytes_reserved: int
    bytes_cached: int
    bytes_external: int
    num_allocs: int
    num_frees: int
    num_reuses: int
    blocks_in_use: int
    largest_alloc_size: int
    bytes_pinned: int = 0
    """Bytes page-locked (``mlock``) in this space, cached free blocks included."""


_libc: ctypes.CDLL | None = None


def _mlock(addr: int, size: int) -> str | None:
    """Lock ``size`` bytes at ``addr`` in RAM; None on success, else why not (errno, limit)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0:
        return None
    err = ctypes.get_errno()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
    except (ImportError, OSError):  # pragma: no cover - not POSIX
        limit = "unknown"
    return f"mlock of {size} bytes failed: {os.strerror(err)} (RLIMIT_MEMLOCK {limit})"


def _pinned_block(cls: int, space: MemorySpace) -> tuple[Block, bool]:
    """A block of its own pages (``mmap``), locked unless the limit forbids: (block, locked).

    Raises:
        OutOfMemoryError: the pages cannot be mapped (as ``allocate_array`` says for the rest)."""
    try:
        mm = mmap.mmap(-1, max(cls, 1))
    except (OSError, OverflowError, ValueError) as exc:
        raise OutOfMemoryError(f"cannot map {cls} bytes of pinned host memory in {space!r}: {exc}") from None
    arr = np.frombuffer(mm, np.uint8, count=cls)  # keeps the mapping alive; unmapped with it
    addr = arr.ctypes.data if cls else 0
    why = _mlock(addr, cls) if cls else None
    if why is not None:
        space._pin_failed(why)
    block = Block(addr, cls, arr, space, external=False)
    block.pinned = why is None
    return block, block.pinned


def size_class(nbytes: int) -> int:
    """Round up: multiples of 64 up to 4 KiB, then four steps per power of two (<= 25% waste)."""
    n = max(int(nbytes), ALIGNMENT)
    if n <= 4096:
        return -(-n // ALIGNMENT) * ALIGNMENT
    step = 1 << (n.bit_length() - 3)  # a quarter of the power of two below n
    return -(-n // step) * step


def host_array(shape: tuple[int, ...] | int, dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
    """A zeroed, 64-byte aligned numpy array: ``buffer_from_host`` can alias it without a copy."""
    dt = np.dtype(dtype)
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(int(d) for d in shp) * dt.itemsize
    raw = allocate_array(nbytes + ALIGNMENT, np.uint8, f"a host array {dt.name}{list(shp)}", zeroed=True)
    off = (-raw.ctypes.data) % ALIGNMENT
    return raw[off : off + nbytes].view(dt).reshape(shp)


class Block:
    """``size`` bytes at ``addr``; ``array`` (uint8) owns or borrows the memory."""

    __slots__ = ("addr", "array", "exported", "external", "pinned", "size", "space")

    def __init__(
        self, addr: int, size: int, array: npt.NDArray[np.uint8], space: MemorySpace | None, external: bool
    ) -> None:
        self.addr = addr
        self.size = size
        self.array = array
        self.space = space
        self.external = external
        self.exported = False
        self.pinned = False  # page-locked: counted in its space's bytes_pinned while cached or in use

    def __repr__(self) -> str:
        return f"<Block 0x{self.addr:x} {self.size}B{' external' if self.external else ''}>"


class MemorySpace:
    """One memory space of one device: allocation, reuse and statistics. Thread-safe."""

    def __init__(self, device: Device, kind: MemoryKind) -> None:
        self.device = device
        self.client = device.client  # checked by every execute: one attribute, not two
        self.kind = kind
        # Reentrant: Buffer.__del__ may free a block from inside an allocation on this thread.
        self._lock = threading.RLock()
        self._free: dict[int, list[Block]] = {}
        self._in_use = 0
        self._peak = 0
        self._cached = 0
        self._external = 0
        self._allocs = 0
        self._frees = 0
        self._reuses = 0
        self._wraps = 0
        self._largest = 0
        self._pinned = 0
        self._pin_error: str | None = None
        self._pin = kind is MemoryKind.PINNED_HOST

    @property
    def id(self) -> str:
        return f"{self.device.id}:{self.kind.value}"

    def __repr__(self) -> str:
        s = self.memory_stats()
        return (
            f"<MemorySpace {self.kind.value} of device {self.device.id}: "
            f"in_use={s.bytes_in_use} reserved={s.bytes_reserved} blocks={s.blocks_in_use}>"
        )

    def allocate(self, nbytes: int) -> Block:
        """A block of at least ``nbytes`` (its size class), aligned to 64 bytes."""
        return self.allocate_class(size_class(nbytes))

    def allocate_class(self, cls: int) -> Block:
        """``allocate`` for a size class computed ahead (executables keep one per output)."""
        with self._lock:
            self._allocs += 1
            in_use = self._in_use = self._in_use + cls
            if in_use > self._peak:
                self._peak = in_use
            if cls > self._largest:
                self._largest = cls
            free = self._free.get(cls)
            if free:
                self._cached -= cls
                self._reuses += 1
                return free.pop()
        try:
            if self._pin:
                block, locked = _pinned_block(cls, self)
                if locked:
                    with self._lock:
                        self._pinned += cls
                return block
            raw = allocate_array(cls + ALIGNMENT, np.uint8, f"a buffer in {self!r}")
        except OutOfMemoryError:
            with self._lock:  # nothing was allocated: the counters say so again
                self._allocs -= 1
                self._in_use -= cls
            raise
        off = (-raw.ctypes.data) % ALIGNMENT
        return Block(raw.ctypes.data + off, cls, raw[off : off + cls], self, external=False)

    def _pin_failed(self, why: str) -> None:
        """Log the first refusal to lock (then every block is plain pageable memory)."""
        with self._lock:
            first = self._pin_error is None
            self._pin_error = why
            self._pin = False  # do not ask again for every block: the limit will not change
        if first:
            _log.warning("memory.pin_failed", space=self.id, reason=why, fallback="unpinned pages")

    @property
    def pin_error(self) -> str | None:
        """Why this ``pinned_host`` space could not lock its memory (None: it could, or other kind)."""
        return self._pin_error

    def wrap(self, array: npt.NDArray[np.generic]) -> Block:
        """Alias a host array (zero-copy). The caller checked contiguity and alignment."""
        flat = array.reshape(-1).view(np.uint8)
        with self._lock:
            self._external += flat.nbytes
            self._wraps += 1
        return Block(int(array.ctypes.data), flat.nbytes, flat, self, external=True)

    def release(self, block: Block) -> None:
        """Return a block: cached for reuse unless it aliases host memory or was exported."""
        size = block.size
        with self._lock:
            self._frees += 1
            if block.external:
                self._external -= size
                return
            self._in_use -= size
            if block.exported:
                if block.pinned:
                    self._pinned -= size  # no longer ours: freed (and unlocked) with its last view
                return
            free = self._free.get(size)
            if free is None:
                self._free[size] = [block]
            else:
                free.append(block)
            self._cached += size

    def trim(self) -> int:
        """Drop every cached free block; returns the bytes given back."""
        with self._lock:
            freed, self._cached = self._cached, 0
            self._pinned -= sum(b.size for blocks in self._free.values() for b in blocks if b.pinned)
            self._free.clear()
        return freed

    def memory_stats(self) -> MemoryStats:
        with self._lock:
            return MemoryStats(
                bytes_in_use=self._in_use,
                peak_bytes_in_use=self._peak,
                bytes_reserved=self._in_use + self._cached,
                bytes_cached=self._cached,
                bytes_external=self._external,
                num_allocs=self._allocs,
                num_frees=self._frees,
                num_reuses=self._reuses,
                blocks_in_use=self._allocs + self._wraps - self._frees,
                largest_alloc_size=self._largest,
                bytes_pinned=self._pinned,
            )
