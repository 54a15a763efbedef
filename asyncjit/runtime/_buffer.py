"""``Buffer``: memory on a device, returned before it is computed; readiness is awaited.

A buffer holds a block of its memory space, the ``Event`` of the command that writes it, and a
count of *uses* (commands submitted and not finished that read or write it). ``delete()`` is lazy:
the block goes back to its memory space when the last use finishes (invariant 8), and any later
use raises ``BufferDeletedError``. A donated buffer is deleted the same way by the execution it
was donated to (``DonatedBufferError``); when the plan writes an output over it, that output takes
its memory at once (``aliased``), and no copy is made.
"""

from __future__ import annotations

import enum
import itertools
import math
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import (
    ArgumentTypeError,
    DeviceError,
    DonationError,
    InvalidArgumentError,
    LayoutError,
    WouldBlock,
)
from ._commands import CopyCommand, RelayoutCommand, ToHostCommand
from ._events import READY, Event
from ._layout import ROW_MAJOR, Layout, as_layout
from ._memory import Block, MemorySpace
from ._uses import _uses_lock, deleted_error
from ._wakeup import wait_event

if TYPE_CHECKING:
    from ..dtypes import DType
    from ._client import Client
    from ._device import Device

__all__ = ["Buffer", "BufferStatistics", "HostBufferSemantics"]

_ids = itertools.count(1)


class HostBufferSemantics(enum.Enum):
    """What ``Client.buffer_from_host`` may do with your array (PJRT's four semantics).

    * ``IMMUTABLE_ONLY_DURING_CALL``: copied before the call returns; mutate the array at will.
    * ``IMMUTABLE_UNTIL_TRANSFER_COMPLETES``: copied later by the device; do not mutate it until
      the buffer is ready (or ``on_done_with_host_buffer`` is called). The call returns sooner.
    * ``IMMUTABLE_ZERO_COPY``: the buffer aliases the array (no copy) when it is C-contiguous and
      64-byte aligned (see ``host_array``), else it is copied: ``buf.aliases_host`` says which,
      and a copy logs a ``buffer.copied`` info event with the reason. Do not mutate the array
      while the buffer lives; such a buffer cannot be donated.
    * ``MUTABLE_ZERO_COPY``: aliased like the above, and the runtime may write to it (donation).
      You may write to the array only while no submitted command uses the buffer.
    """

    IMMUTABLE_ONLY_DURING_CALL = "immutable_only_during_call"
    IMMUTABLE_UNTIL_TRANSFER_COMPLETES = "immutable_until_transfer_completes"
    IMMUTABLE_ZERO_COPY = "immutable_zero_copy"
    MUTABLE_ZERO_COPY = "mutable_zero_copy"


@attrs.frozen
class BufferStatistics:
    ready: bool
    failed: bool
    deleted: bool
    pending_uses: int
    nbytes: int
    capacity: int
    aliases_host: bool


class Buffer:
    """An array on a device. Created by ``Client.buffer_from_host`` and by executions."""

    __slots__ = (
        "__weakref__",
        "_aliased",
        "_block",
        "_deleted",
        "_donatable",
        "_event",
        "_host",
        "_host_copy",
        "_layout",
        "_uses",
        "_writing",
        "dtype",
        "id",
        "memory_space",
        "nbytes",
        "shape",
    )

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: DType,
        memory_space: MemorySpace,
        block: Block,
        event: Event,
        *,
        uses: int = 0,
        host: npt.NDArray[Any] | None = None,
        donatable: bool = True,
        nbytes: int = -1,
        layout: Layout = ROW_MAJOR,
    ) -> None:
        self.id = next(_ids)
        self.shape = shape
        self.dtype = dtype
        self.memory_space = memory_space
        # executables pass ``nbytes`` computed once per shape; everyone else lets it be computed
        self.nbytes = nbytes if nbytes >= 0 else math.prod(shape) * dtype.itemsize
        self._block: Block | None = block
        self._event = event
        self._uses = uses
        # the producing command holds one of ``uses`` until it finishes (see ``take_donated``)
        self._writing = uses > 0
        self._aliased = False  # its memory was a donated input's
        self._deleted: str | None = None
        self._host = host  # the aliased host array of a zero-copy buffer
        self._donatable = donatable
        self._host_copy: ToHostCommand | None = None
        self._layout = layout

    # -- description ----------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self.memory_space.device

    @property
    def client(self) -> Client:
        return self.memory_space.device.client

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.nbytes // self.dtype.itemsize

    @property
    def layout(self) -> Layout:
        """The order of the elements in memory (``row_major`` unless made otherwise)."""
        return self._layout

    @property
    def aliased(self) -> bool:
        """True when this output was written over a donated input (it took that input's memory)."""
        return self._aliased

    @property
    def aliases_host(self) -> bool:
        """True for a zero-copy buffer over a host array."""
        return self._host is not None

    def __repr__(self) -> str:
        ev = self._event
        if self._deleted is not None:
            state = self._deleted
        elif not ev._done:
            state = "pending"
        else:
            state = "failed" if ev._error is not None else "ready"
        dev = self.memory_space.device
        layout = "" if self._layout is ROW_MAJOR else f" {self._layout}"
        return (
            f"<Buffer {self.dtype.name}{list(self.shape)}{layout} on {dev.kind}:{dev.id}/"
            f"{self.memory_space.kind.value} {state}>"
        )

    def statistics(self) -> BufferStatistics:
        with _uses_lock:
            return BufferStatistics(
                ready=self._event._done,
                failed=self._event._error is not None,
                deleted=self._deleted is not None,
                pending_uses=self._uses,
                nbytes=self.nbytes,
                capacity=self._block.size if self._block is not None else 0,
                aliases_host=self._host is not None,
            )

    # -- readiness --------------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """True once the producing command finished, successfully or not."""
        return self._event._done

    def is_deleted(self) -> bool:
        return self._deleted is not None

    @property
    def error(self) -> BaseException | None:
        """The error that poisoned this buffer, once ready; None if healthy or pending."""
        return self._event._error

    async def ready(self) -> None:
        """Wait until computed, on asyncio or trio; raise the producing command's error.

        Not a checkpoint when the buffer is already ready (it returns without yielding), so a
        tight loop over ready buffers should yield on its own.

        Raises:
            BufferDeletedError: the buffer was deleted or donated.
            Exception: the original error of the command that poisoned it.
        """
        ev = self._event
        if ev._done and ev._error is None and self._deleted is None:
            return  # the common case after an inline execution: three loads, no calls
        self._check_alive()
        if not ev._done:
            await wait_event(ev)
        ev.raise_if_failed()

    def block_until_ready(self, timeout: float | None = None) -> Buffer:
        """Blocking: for scripts and threads, never inside an event loop.

        Raises:
            TimeoutError: not ready within ``timeout`` seconds.
            InvalidArgumentError: ``timeout`` is negative or NaN.
        """
        if timeout is not None and not timeout >= 0:
            raise InvalidArgumentError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        self._check_alive()
        if not self._event.wait_blocking(timeout):
            raise TimeoutError(f"{self!r} was not ready within {timeout} s")
        self._event.raise_if_failed()
        return self

    # -- host access ----------------------------------------------------------------------------
    async def to_numpy(self) -> npt.NDArray[Any]:
        """Await readiness, then return a copy as a numpy array (of your own)."""
        pending = self._host_copy
        if pending is not None:
            self._host_copy = None
            await wait_event(pending.event)
            pending.event.raise_if_failed()
            assert pending.result is not None
            return pending.result
        await self.ready()
        return self._copy_out()

    def to_numpy_blocking(self, timeout: float | None = None) -> npt.NDArray[Any]:
        """Blocking twin of ``to_numpy``, for scripts."""
        self.block_until_ready(timeout)
        return self._copy_out()

    def copy_to_host_async(self) -> None:
        """Start the device-to-host copy now, on the device queue; ``to_numpy`` then picks it up."""
        if self._host_copy is not None:
            return
        ev = Event()
        self._acquire_use()
        cmd = ToHostCommand(ev, self)
        try:
            self.device.submit(cmd, inline=False)
        except BaseException:
            self._release_use()
            raise
        self._host_copy = cmd

    def numpy_view(self, *, writable: bool = False) -> npt.NDArray[Any]:
        """A zero-copy numpy view of a ready buffer (host RAM is addressable on CPU devices).

        Read-only unless ``writable``; for ``MUTABLE_ZERO_COPY`` buffers it is your own array.
        Write through a view only while no submitted command uses the buffer (a data race, not
        a crash, otherwise). The memory stays valid while the view lives, even after
        ``delete()``: exported blocks are never reused.

        Raises:
            WouldBlock: the buffer is not ready yet (``await buf.ready()`` first).
            DeviceError: ``writable`` on a buffer aliasing an immutable host array.
        """
        self._check_alive()
        ev = self._event
        if not ev._done:
            raise WouldBlock(f"{self!r} is not ready; await buf.ready() before taking a view")
        ev.raise_if_failed()
        if self._host is not None:
            if self._donatable:
                return self._host
            if writable:
                raise DeviceError(f"{self!r} aliases an immutable host array; it has no writable view")
            view = self._host.view()
        else:
            block = self._block
            assert block is not None
            if self._layout.tile is not None:
                raise LayoutError(
                    f"{self!r} is tiled: no strided view shows it; use to_numpy() or "
                    "copy_to_device(device, layout='row_major')"
                )
            block.exported = True
            view = self._layout.from_physical(block.array[: self.nbytes].view(self.dtype.np), self.shape)
        view.flags.writeable = writable
        return view

    # -- numpy and DLPack interop (blocking: for scripts, never inside an event loop) -------------
    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        """``np.asarray(buf)``: **blocks** until the buffer is ready, then a copy of its contents
        (``to_numpy_blocking``); ``np.asarray(buf, copy=False)`` is the zero-copy read-only
        ``numpy_view`` instead. In async code use ``await buf.to_numpy()``.

        Raises:
            The buffer's error if its command failed; InvalidArgumentError: ``copy=False`` with
            a dtype change.
        """
        if copy is False:
            view = self.block_until_ready().numpy_view()
            if dtype is not None and np.dtype(dtype) != view.dtype:
                raise InvalidArgumentError(
                    f"{self!r} is {view.dtype}; {np.dtype(dtype)} needs a copy (copy=False)"
                )
            return view
        out = self.to_numpy_blocking()
        return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """DLPack export (``np.from_dlpack(buf)``, ``torch.from_dlpack(buf)``): **blocks** until
        ready, then shares the buffer's host memory read-only (every built-in memory space is host
        RAM). The memory stays valid while the importer holds it, even after ``delete()``."""
        view = self.block_until_ready().numpy_view()
        return view.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCPU, 0)``: the buffer's memory is host RAM."""
        return (1, 0)

    def _copy_out(self) -> npt.NDArray[Any]:
        self._acquire_use()
        try:
            block = self._block
            assert block is not None
            return self._layout.from_physical(
                block.array[: self.nbytes].view(self.dtype.np), self.shape
            ).copy()
        finally:
            self._release_use()

    # -- copies -----------------------------------------------------------------------------------
    def copy_to_device(self, device: Device, *, layout: Layout | str | None = None) -> Buffer:
        """A copy on ``device``'s default memory space, returned at once; no host sync.

        Args:
            layout: the copy's layout (default: this buffer's); a different one is a relayout,
                run on the target device's queue.
        """
        space = getattr(device, "default_memory_space", None)
        if space is None:
            raise ArgumentTypeError(f"copy_to_device takes a Device, got {type(device).__name__} {device!r}")
        return self.copy_to_memory_space(space, layout=layout)

    def copy_to_memory_space(
        self, memory_space: MemorySpace, *, layout: Layout | str | None = None
    ) -> Buffer:
        """A copy in ``memory_space`` (run by its device's queue after this buffer is ready).

        Raises:
            LayoutError: ``layout`` is unknown or does not fit the shape.
        """
        if not isinstance(memory_space, MemorySpace):
            raise ArgumentTypeError(
                f"copy_to_memory_space takes a MemorySpace, got {type(memory_space).__name__} "
                f"{memory_space!r}"
            )
        if memory_space.device.client is not self.device.client:
            raise DeviceError(f"{memory_space!r} belongs to another client than {self!r}")
        target = self._layout if layout is None else as_layout(layout)
        target.check(self.shape)
        device = memory_space.device
        device.check_open()
        self._acquire_use()
        try:
            block = memory_space.allocate(self.nbytes)
            out = Buffer(self.shape, self.dtype, memory_space, block, Event(), uses=1, layout=target)
            if target != self._layout:
                device.submit(RelayoutCommand(out._event, self, out), inline=False)
                return out
            # Small copies of ready data run inline when the device is idle: a memcpy of a few
            # KiB is cheaper than the thread hop.
            inline = self._event._done and self.nbytes <= 1 << 20
            device.submit(CopyCommand(out._event, self, out), inline=inline)
        except BaseException:
            self._release_use()
            raise
        return out

    # -- lifetime ---------------------------------------------------------------------------------
    def delete(self) -> None:
        """Lazy: memory returns after every submitted use finishes; later use raises. Idempotent."""
        self._mark_deleted("deleted")

    def _mark_deleted(self, why: str) -> None:
        with _uses_lock:
            if self._deleted is not None:
                return
            self._deleted = why
            if self._uses:
                return
            block, self._block = self._block, None
        self._host = None
        if block is not None and block.space is not None:
            block.space.release(block)

    def reclaim(self) -> Buffer:
        """A ready buffer over the memory of this *failed* output that was written over a donated
        input (``aliased``); this buffer is deleted. For code that must survive a failed step
        without a copy (``DevicePool``): an execution that failed before it ran (an input was
        poisoned, the device was closed) left the donated input's data there untouched; one
        that failed inside the plan may have written part of the output.

        Raises:
            WouldBlock: the execution has not finished. DonationError: this buffer did not fail,
            is not an aliased output, or a pending command still uses it.
            BufferDeletedError: it was deleted or donated.
        """
        self._check_alive()
        ev = self._event
        if not ev._done:
            raise WouldBlock(f"{self!r} is not finished; await it before reclaiming its memory")
        if ev._error is None or not self._aliased:
            raise DonationError(f"{self!r}: only a failed output written over a donated input is reclaimed")
        with _uses_lock:
            # its producer dropped its use before it signalled: any use left is another command's
            if self._deleted is not None or self._uses - self._writing:
                raise DonationError(f"{self!r} is still used by a pending command; it cannot be reclaimed")
            block, self._block = self._block, None
            self._deleted = "reclaimed"
        assert block is not None
        out = Buffer(self.shape, self.dtype, self.memory_space, block, READY, nbytes=self.nbytes)
        out._aliased = True
        return out

    def _check_alive(self) -> None:
        if self._deleted is not None:
            raise deleted_error(self)

    def _acquire_use(self) -> None:
        with _uses_lock:
            if self._deleted is None:
                self._uses += 1
                return
        raise deleted_error(self)

    def _release_use(self) -> None:
        with _uses_lock:
            self._uses -= 1
            if self._uses or self._deleted is None:
                return
            block, self._block = self._block, None
        self._host = None
        if block is not None and block.space is not None:
            block.space.release(block)

    def __del__(self) -> None:
        # Nobody else holds this buffer (in-flight commands hold references), so no lock needed.
        try:
            block = self._block
        except AttributeError:  # __init__ did not finish
            return
        if block is not None and block.space is not None:
            self._block = None
            block.space.release(block)
