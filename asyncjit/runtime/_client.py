"""``Client``: owns the devices and their memory spaces; loads plans; moves host arrays in.

``Client(devices="cpu:2")`` starts two CPU device actors. A client is closed with ``close()``,
``await aclose()``, ``with`` or ``async with``: queued work is drained (or failed, with
``cancel_pending=True``), never left hanging.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from .._log import get_logger
from ..codegen import _parallel
from ..compiler._executable import Executable
from ..devices import Compiler, Deserializer, get_deserializer, get_device_kind
from ..dtypes import DType, from_numpy
from ..errors import (
    ArgumentTypeError,
    ClosedError,
    CompileError,
    DeviceError,
    DeviceNotFoundError,
    InvalidArgumentError,
)
from ._buffer import Buffer, HostBufferSemantics
from ._commands import HostToDeviceCommand
from ._device import Device, DeviceStatistics, InlinePolicy
from ._events import READY, Event
from ._executable import LoadedExecutable, unpack_executable
from ._layout import ROW_MAJOR, Layout, as_layout
from ._memory import ALIGNMENT, MemoryKind, MemorySpace
from ._sharding import ShardedBuffer, Sharding
from ._sharding import device_put as _device_put

__all__ = ["Client", "ClientStatistics", "default_client", "parse_devices"]

_log = get_logger("asyncjit.runtime")


@attrs.frozen
class ClientStatistics:
    devices: tuple[DeviceStatistics, ...]
    closed: bool


def parse_devices(spec: str | int | Sequence[str]) -> list[tuple[str, int]]:
    """``"cpu"``, ``"cpu:2"``, ``"cpu:2,reference"``, a list of those, or ``N`` (N cpu devices)
    -> [(kind, count)].

    Raises:
        InvalidArgumentError: a malformed entry or a count below 1.
        ArgumentTypeError: ``spec`` is not a string, a number of cpu devices or a list of strings.
    """
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = f"cpu:{spec}"
    if isinstance(spec, str):
        parts = spec.split(",")
    elif isinstance(spec, Sequence) and all(isinstance(p, str) for p in spec):
        parts = list(spec)
    else:
        raise ArgumentTypeError(
            f"devices must be a string like 'cpu:2', a list of them, or a number of cpu devices; got {spec!r}"
        )
    out: list[tuple[str, int]] = []
    for part in parts:
        name, _, count = part.strip().partition(":")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise InvalidArgumentError(f"bad device spec {part!r}: expected 'kind' or 'kind:N'") from None
        if not name or n < 1:
            raise InvalidArgumentError(f"bad device spec {part!r}: expected 'kind' or 'kind:N' with N >= 1")
        out.append((name, n))
    if not out:
        raise InvalidArgumentError("a client needs at least one device")
    return out


class Client:
    """The entry point: devices, memory spaces, loading, host transfers.

    Args:
        devices: ``"cpu"`` (default), ``"cpu:N"``, ``"cpu:2,reference:1"``, a list of such, or
            an int N (``Client(2)`` is ``Client("cpu:2")``).
        max_in_flight: commands per device submitted and unfinished before ``execute`` waits.
        inline: ``"auto"`` runs plans cheaper than a thread hop on the caller's thread when the
            device is idle; ``"always"`` does so for every plan; ``"never"`` always queues.
        intra_op_threads: threads a big kernel (a matmul of >= 2^23 multiply-adds) splits over,
            the process's helper pool (``codegen._pool``; ``ASYNCJIT_POOL_SPIN_US`` sets how
            long an idle helper spins, default 100); process-wide, like OpenBLAS's setting
            (``codegen._parallel``). None: the cores over this client's CPU devices.
    """

    def __init__(
        self,
        devices: str | int | Sequence[str] = "cpu",
        *,
        max_in_flight: int = 32,
        inline: InlinePolicy = "auto",
        intra_op_threads: int | None = None,
    ) -> None:
        kinds = [(get_device_kind(name), n) for name, n in parse_devices(devices)]
        if intra_op_threads is not None and (
            isinstance(intra_op_threads, bool)
            or not isinstance(intra_op_threads, int)
            or intra_op_threads < 1
        ):
            got = repr(intra_op_threads)
            raise InvalidArgumentError(f"intra_op_threads must be an int >= 1 or None, got {got}")
        self._closed = False
        self._devices: list[Device] = []
        try:
            for kind, n in kinds:
                for _ in range(n):
                    dev = Device(self, len(self._devices), kind, max_in_flight=max_in_flight, inline=inline)
                    self._devices.append(dev)
        except BaseException:
            self.close()
            raise
        # Big kernels split over threads the plan spawns (codegen._parallel): the cores over this
        # client's CPU device actors, so actors that each run a split kernel do not oversubscribe.
        cpu_devices = sum(1 for d in self._devices if d.kind == "cpu")
        if intra_op_threads is None and cpu_devices:
            intra_op_threads = max(1, _parallel.available_cores() // cpu_devices)
        if intra_op_threads is not None:
            _parallel.set_intra_op_threads(intra_op_threads)

    def __repr__(self) -> str:
        devs = ", ".join(f"{d.kind}:{d.id}" for d in self._devices)
        return f"<Client [{devs}]{' closed' if self._closed else ''}>"

    # -- topology -------------------------------------------------------------------------------
    process_index = 0
    """This process's index among the processes whose devices the client knows."""

    def devices(self) -> tuple[Device, ...]:
        """Every device the client knows, addressable from this process or not."""
        return tuple(self._devices)

    def addressable_devices(self) -> tuple[Device, ...]:
        """The devices this process can run on and read: ``devices()`` of this process."""
        return tuple(d for d in self._devices if d.process_index == self.process_index)

    def device(self, index: int = 0) -> Device:
        """The device at ``index`` (``DeviceNotFoundError``, an ``IndexError``, if there is none)."""
        if type(index) is not int:
            if isinstance(index, bool) or not hasattr(index, "__index__"):
                raise ArgumentTypeError(f"{self!r}: a device index must be an int, got {index!r}")
            index = index.__index__()
        if not 0 <= index < len(self._devices):
            raise DeviceNotFoundError(
                f"{self!r} has {len(self._devices)} device(s); there is no device {index}"
            )
        return self._devices[index]

    def memory_spaces(self) -> tuple[MemorySpace, ...]:
        return tuple(s for d in self._devices for s in d.memory_spaces())

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(tuple(d.statistics() for d in self._devices), self._closed)

    @property
    def closed(self) -> bool:
        return self._closed

    def _device_arg(self, device: Device | int | None) -> Device:
        if device is None:
            return self._devices[0]
        if not isinstance(device, Device):
            return self.device(device)  # an index, or a typed error
        if device.client is not self:
            raise DeviceError(f"{device!r} belongs to another client")
        return device

    # -- plans ----------------------------------------------------------------------------------
    def load(
        self,
        executable: Executable,
        device: Device | int | Sequence[Device] | None = None,
        *,
        output_memory_kinds: Mapping[int, MemoryKind | str] | None = None,
    ) -> LoadedExecutable:
        """Bind a compiled plan to one device (default the first) or several.

        Args:
            output_memory_kinds: place chosen outputs in a host memory space of the executing
                device, e.g. ``{1: "pinned_host"}`` (host offload); the others go to ``device``.

        Raises:
            InvalidArgumentError: an unknown memory kind or output index.
        """
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        if not isinstance(executable, Executable):
            raise ArgumentTypeError(
                f"{self!r}.load takes an Executable (from compiler.compile), got {type(executable).__name__}"
            )
        if isinstance(device, Sequence):
            devs = [self._device_arg(d) for d in device]
        else:
            devs = [self._device_arg(device)]
        loaded = LoadedExecutable(self, executable, devs, output_memory_kinds)
        _log.info("executable.load", plan=loaded.plan, devices=[d.id for d in devs])
        return loaded

    def compile(
        self,
        program: Any,
        device: Device | int | Sequence[Device] | None = None,
        *,
        compiler: Compiler | None = None,
        **options: Any,
    ) -> LoadedExecutable:
        """Compile ``program`` with ``compiler`` (or the device kind's) and load the result.

        An ``Executable`` is loaded as it is.

        Raises:
            CompileError: no compiler is given or registered for the device kind.
        """
        if isinstance(program, Executable):
            return self.load(program, device)
        first = device[0] if isinstance(device, Sequence) else self._device_arg(device)
        fn = compiler if compiler is not None else get_device_kind(first.kind).compiler  # late registration
        if fn is None:
            raise CompileError(
                f"no compiler for device kind {first.kind!r}; pass compiler= or register one "
                "with asyncjit.devices.register_compiler"
            )
        executable = fn(program, **options)
        _log.info("executable.compile", plan=executable.name, kind=first.kind, options=sorted(options))
        return self.load(executable, device)

    def deserialize_executable(
        self,
        data: bytes,
        device: Device | int | Sequence[Device] | None = None,
        *,
        deserializer: Deserializer | None = None,
    ) -> LoadedExecutable:
        """Load bytes from ``LoadedExecutable.serialize()``; the kind picks the deserializer."""
        kind, payload = unpack_executable(data)
        fn = deserializer if deserializer is not None else get_deserializer(kind)
        return self.load(fn(payload), device)

    # -- host transfers -------------------------------------------------------------------------
    def buffer_from_host(
        self,
        array: npt.ArrayLike,
        device: Device | int | None = None,
        *,
        memory_space: MemorySpace | None = None,
        dtype: DType | npt.DTypeLike | None = None,
        semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
        on_done_with_host_buffer: Callable[[], None] | None = None,
        layout: Layout | str | None = None,
    ) -> Buffer:
        """A device buffer holding ``array``; see ``HostBufferSemantics`` for who may touch what when.

        Args:
            dtype: convert first (a conversion is a copy, so zero-copy semantics then copy).
            on_done_with_host_buffer: called (on some thread) once the runtime no longer reads
                ``array``: at once for copies made during the call, after the transfer for
                ``IMMUTABLE_UNTIL_TRANSFER_COMPLETES``, when the buffer is freed for zero-copy.
            layout: the buffer's memory layout (``"row_major"`` default, ``"col_major"``,
                ``Layout.tiled(r, c)``); any but row-major is a copy in that order.

        Raises:
            DTypeMismatchError: a dtype asyncjit does not compute with (complex, strings...).
            ArgumentTypeError: ``semantics`` is not a ``HostBufferSemantics``.
            ClosedError: the device is closed.
            LayoutError: an unknown layout, or a tile that does not divide the shape.
        """
        if not isinstance(semantics, HostBufferSemantics):
            raise ArgumentTypeError(f"semantics must be a HostBufferSemantics member, got {semantics!r}")
        space = memory_space if memory_space is not None else self._device_arg(device).default_memory_space
        if memory_space is not None and not isinstance(memory_space, MemorySpace):
            raise ArgumentTypeError(f"memory_space must be a MemorySpace, got {memory_space!r}")
        if memory_space is not None and memory_space.device.client is not self:
            raise DeviceError(f"{memory_space!r} belongs to another client")
        dev = space.device
        dev.check_open()
        arr = np.asarray(array)
        if dtype is not None:
            target = from_numpy(dtype)
            if arr.dtype != target.np:
                arr = arr.astype(target.np)
        dt = from_numpy(arr.dtype)
        shape = tuple(int(d) for d in arr.shape)
        S = HostBufferSemantics
        in_layout = as_layout(layout)
        if in_layout is not ROW_MAJOR:
            in_layout.check(shape)
            return self._buffer_in_layout(
                arr, shape, dt, space, semantics, on_done_with_host_buffer, in_layout
            )
        if semantics in (S.IMMUTABLE_ZERO_COPY, S.MUTABLE_ZERO_COPY) and _can_alias(
            arr, semantics is S.MUTABLE_ZERO_COPY
        ):
            block = space.wrap(arr)
            buf = Buffer(shape, dt, space, block, READY, host=arr, donatable=semantics is S.MUTABLE_ZERO_COPY)
            if on_done_with_host_buffer is not None:
                import weakref

                weakref.finalize(buf, on_done_with_host_buffer)
            return buf
        if semantics in (S.IMMUTABLE_ZERO_COPY, S.MUTABLE_ZERO_COPY):  # asked for an alias, got a copy
            _log.info("buffer.copied", semantics=semantics.value, reason=_why_copied(arr, semantics))
        src = np.asarray(arr, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        block = space.allocate(src.nbytes)
        if semantics is S.IMMUTABLE_UNTIL_TRANSFER_COMPLETES:
            ev = Event()
            buf = Buffer(shape, dt, space, block, ev, uses=1)
            try:
                dev.submit(HostToDeviceCommand(ev, buf, src, on_done_with_host_buffer), inline=False)
            except BaseException:
                buf._mark_deleted("never transferred")
                buf._release_use()
                raise
            return buf
        ctypes.memmove(block.addr, src.ctypes.data, src.nbytes)
        if on_done_with_host_buffer is not None:
            on_done_with_host_buffer()
        return Buffer(shape, dt, space, block, READY)

    def _buffer_in_layout(
        self,
        arr: npt.NDArray[Any],
        shape: tuple[int, ...],
        dt: DType,
        space: MemorySpace,
        semantics: HostBufferSemantics,
        on_done: Callable[[], None] | None,
        layout: Layout,
    ) -> Buffer:
        """``buffer_from_host`` into a layout other than row-major: always a copy, made now."""
        if semantics in (HostBufferSemantics.IMMUTABLE_ZERO_COPY, HostBufferSemantics.MUTABLE_ZERO_COPY):
            _log.info("buffer.copied", semantics=semantics.value, reason=f"layout {layout} is a relayout")
        phys = layout.to_physical(arr)
        block = space.allocate(phys.nbytes)
        ctypes.memmove(block.addr, phys.ctypes.data, phys.nbytes)
        if on_done is not None:
            on_done()
        return Buffer(shape, dt, space, block, READY, layout=layout)

    def device_put(
        self, x: npt.ArrayLike | Buffer | ShardedBuffer, where: Sharding | Device | int | None = None
    ) -> Buffer | ShardedBuffer:
        """Place ``x`` (an array, a ``Buffer`` or a ``ShardedBuffer``) on a device or a sharding.

        With a ``Sharding``: a ``ShardedBuffer`` (an array's slices are copied to their devices,
        one thread per slice when they are large, before the call returns; buffers move device to
        device on the target queues, no host wait).
        With a device (or index, default the first): a ``Buffer`` there.

        Raises:
            ShardingError: the split axis is out of range, does not divide (without ``ragged``)
                or leaves a device empty.
            DeviceMismatchError: the sharding or buffer belongs to another client.
        """
        return _device_put(self, x, where)

    # -- closing --------------------------------------------------------------------------------
    def close(self, *, cancel_pending: bool = False) -> None:
        """Blocking: refuse new work, finish (or fail) queued work on every device, stop workers."""
        self._closed = True
        stopped = [d.begin_close(cancel_pending) for d in self._devices]
        for d, ev in zip(self._devices, stopped, strict=True):
            ev.wait_blocking()
            d._thread.join()

    async def aclose(self, *, cancel_pending: bool = False) -> None:
        """``close`` without blocking the event loop."""
        self._closed = True
        for d in self._devices:
            d.begin_close(cancel_pending)
        for d in self._devices:
            await d.aclose(cancel_pending)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _why_copied(arr: npt.NDArray[Any], semantics: HostBufferSemantics) -> str:
    if arr.nbytes == 0:
        return "empty array"
    if not arr.flags.c_contiguous:
        return "not C-contiguous"
    if arr.ctypes.data % ALIGNMENT:
        return f"not {ALIGNMENT}-byte aligned (asyncjit.runtime.host_array makes aligned arrays)"
    return "read-only array (MUTABLE_ZERO_COPY needs a writeable one)"


def _can_alias(arr: npt.NDArray[Any], mutable: bool) -> bool:
    """Zero-copy needs C order, 64-byte alignment, some bytes, and (to mutate) a writeable array."""
    return (
        arr.nbytes > 0
        and arr.flags.c_contiguous
        and arr.ctypes.data % ALIGNMENT == 0
        and (arr.flags.writeable or not mutable)
    )


_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide client the front ends use when given no device, created on first use.

    Its devices come from ``$ASYNCJIT_DEVICES`` (default ``"cpu"``); it is closed at exit.
    """
    global _default
    client = _default
    if client is not None and not client.closed:
        return client
    with _default_lock:
        if _default is None or _default.closed:
            _default = Client(os.environ.get("ASYNCJIT_DEVICES", "cpu"))
            atexit.register(_default.close)
        return _default
