"""``LoadedExecutable``: an ``Executable`` bound to devices, replayed by ``execute``.

``execute`` validates everything the native code relies on before anything is enqueued
(invariant 2): argument count, types, client, shapes, dtypes and var bounds; deleted or donated
inputs raise. It then allocates outputs at their capacity (the upper bounds of every var), takes
a use of each input, and submits one command. Output buffers return at once with the shapes
evaluated from the var values; their readiness is awaited.

Validation results are memoised per (shapes, dtypes, vars): a streaming replay repeats the same
few combinations, and a dict lookup is cheaper than re-checking bounds every step.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ..errors import DeviceError, WouldBlock
from ._buffer import Buffer
from ._commands import ExecuteCommand, PlanTiming
from ._events import Event

if TYPE_CHECKING:
    from ..compiler._executable import Executable, Launcher, Signature
    from ..dtypes import DType
    from ._client import Client
    from ._device import Device

__all__ = ["ExecutableStatistics", "LoadedExecutable", "pack_executable", "unpack_executable"]

_ids = itertools.count(1)
_MAGIC = b"ASYNCJIT-EXE\x00"
_VERSION = 1
_CACHE_MAX = 512

_Validated = tuple[tuple[int, ...], list[tuple[int, ...]]]


def pack_executable(kind: str, payload: bytes) -> bytes:
    """The envelope: magic, version, kind (so the right deserializer is found), payload."""
    k = kind.encode()
    return _MAGIC + struct.pack("<BH", _VERSION, len(k)) + k + payload


def unpack_executable(data: bytes) -> tuple[str, bytes]:
    """Raises: DeviceError when ``data`` is not an asyncjit executable of a known version."""
    if not data.startswith(_MAGIC):
        raise DeviceError("not a serialized asyncjit executable (bad magic)")
    off = len(_MAGIC)
    version, n = struct.unpack_from("<BH", data, off)
    if version != _VERSION:
        raise DeviceError(f"serialized executable has version {version}; this asyncjit reads {_VERSION}")
    off += 3
    return data[off : off + n].decode(), data[off + n :]


@attrs.frozen
class ExecutableStatistics:
    plan_id: int
    name: str
    executions: int
    mean_run_us: dict[int, float]
    validation_cache: int


class LoadedExecutable:
    """A plan loaded on one or more devices of a client (the first is where ``execute`` runs)."""

    def __init__(self, client: Client, executable: Executable, devices: Sequence[Device]) -> None:
        if not devices:
            raise DeviceError("a LoadedExecutable needs at least one device")
        self.client = client
        self.executable = executable
        self.name = executable.name
        self.signature: Signature = executable.signature
        self.id = next(_ids)
        self._devices = tuple(devices)
        self._launchers: dict[int, Launcher] = {}
        self._timing: dict[int, PlanTiming] = {}
        for d in devices:
            self._launcher_for(d)
        self._n_in = len(self.signature.inputs)
        self._out_dtypes: tuple[DType, ...] = tuple(a.dtype for a in self.signature.outputs)
        self._capacity = self.signature.output_capacity
        self._flops = executable.flops_estimate
        self._validated: dict[object, _Validated] = {}

    @property
    def plan(self) -> str:
        return f"{self.name}#{self.id}"

    def __repr__(self) -> str:
        devs = ", ".join(f"{d.kind}:{d.id}" for d in self._devices)
        return f"<LoadedExecutable {self.plan} on [{devs}]>"

    def devices(self) -> tuple[Device, ...]:
        return self._devices

    def serialize(self) -> bytes:
        """Bytes ``Client.deserialize_executable`` turns back into this plan."""
        from ..devices import executable_kind

        return pack_executable(executable_kind(self.executable), self.executable.serialize())

    def statistics(self) -> ExecutableStatistics:
        return ExecutableStatistics(
            self.id,
            self.name,
            sum(t.calls for t in self._timing.values()),
            {dev: round(t.ema_ns / 1e3, 2) for dev, t in self._timing.items() if t.calls},
            len(self._validated),
        )

    def _launcher_for(self, device: Device) -> Launcher:
        launcher = self._launchers.get(device.id)
        if launcher is None:
            # One launcher per device: launchers own scratch memory and are not thread-safe;
            # the device's exec lock serialises calls to it.
            launcher = self._launchers[device.id] = self.executable.launcher()
            self._timing[device.id] = PlanTiming(self.plan)
        return launcher

    # -- the public entry points -------------------------------------------------------------------
    async def execute(
        self,
        args: Sequence[Buffer],
        vars: Mapping[str, int] | None = None,
        *,
        device: Device | None = None,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[Buffer]:
        """Validate, enqueue, and return the output buffers before they are computed.

        Waits (asynchronously) only when ``device`` has ``max_in_flight`` commands in flight.

        Args:
            args: input buffers, in signature order, on any device of this client.
            vars: values of symbolic vars; missing vars take their upper bound.
            device: one of ``devices()`` (default the first); see ``execute_portable``.
            donate: indices of inputs this execution may consume; they are deleted.
            inline: True to run on this thread when the device is idle and inputs are ready,
                False never; None follows the device policy (cheap plans run inline).

        Raises:
            ShapeMismatchError, DTypeMismatchError, VarBoundsError: bad arguments.
            BufferDeletedError: an input was deleted or donated before.
            DeviceError / ClosedError: wrong client or device; client closed.
        """
        dev = self._check_device(device, portable=False)
        validated = self._validate(args, vars)
        if dev._in_flight >= dev.max_in_flight:
            await dev.wait_for_slot()
        return self._launch(args, validated, dev, donate, inline)

    def execute_nowait(
        self,
        args: Sequence[Buffer],
        vars: Mapping[str, int] | None = None,
        *,
        device: Device | None = None,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[Buffer]:
        """``execute`` from synchronous code. Raises ``WouldBlock`` when the device queue is full."""
        dev = self._check_device(device, portable=False)
        validated = self._validate(args, vars)
        if dev._in_flight >= dev.max_in_flight and not dev.closed:
            raise WouldBlock(
                f"{dev!r} has {dev.max_in_flight} commands in flight; await execute() or "
                "use execute_blocking()"
            )
        return self._launch(args, validated, dev, donate, inline)

    def execute_blocking(
        self,
        args: Sequence[Buffer],
        vars: Mapping[str, int] | None = None,
        *,
        device: Device | None = None,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[Buffer]:
        """``execute`` for scripts: blocks this thread while the device queue is full."""
        dev = self._check_device(device, portable=False)
        validated = self._validate(args, vars)
        dev.wait_for_slot_blocking()
        return self._launch(args, validated, dev, donate, inline)

    async def execute_sharded(
        self,
        args: Sequence[Buffer],
        device: Device,
        vars: Mapping[str, int] | None = None,
        *,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[Buffer]:
        """Execute on ``device``, which must be one this executable was loaded on (PJRT)."""
        return await self.execute(args, vars, device=device, donate=donate, inline=inline)

    async def execute_portable(
        self,
        args: Sequence[Buffer],
        device: Device,
        vars: Mapping[str, int] | None = None,
        *,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[Buffer]:
        """Execute on any device of the client (a launcher is made for it on first use)."""
        dev = self._check_device(device, portable=True)
        self._launcher_for(dev)
        validated = self._validate(args, vars)
        if dev._in_flight >= dev.max_in_flight:
            await dev.wait_for_slot()
        return self._launch(args, validated, dev, donate, inline)

    # -- the machinery -------------------------------------------------------------------------
    def _check_device(self, device: Device | None, *, portable: bool) -> Device:
        if device is None:
            return self._devices[0]
        if device.client is not self.client:
            raise DeviceError(f"{device!r} belongs to another client than {self!r}")
        if not portable and device.id not in self._launchers:
            raise DeviceError(
                f"{self!r} is not loaded on {device!r}; load it there or use execute_portable"
            )
        return device

    def _validate(self, args: Sequence[Buffer], vars: Mapping[str, int] | None) -> _Validated:
        client = self.client
        for a in args:
            if type(a) is not Buffer:
                raise TypeError(
                    f"{self!r}: arguments must be asyncjit Buffers, got {type(a).__name__}; "
                    "use client.buffer_from_host(array) first"
                )
            if a.memory_space.device.client is not client:
                raise DeviceError(f"{self!r}: input {a!r} belongs to another client")
        shapes = tuple(a.shape for a in args)
        dtypes = tuple(a.dtype for a in args)
        if vars:
            items = tuple(vars.items())
            cacheable = all(type(v) is int for _, v in items)
        else:
            items, cacheable = (), True
        key = (shapes, dtypes, items)
        if cacheable:
            hit = self._validated.get(key)
            if hit is not None:
                return hit
        sig = self.signature
        values = sig.var_values(vars)
        sig.validate(shapes, list(dtypes), values)
        result = (values, sig.output_shapes(values))
        if cacheable:
            if len(self._validated) >= _CACHE_MAX:
                self._validated.clear()
            self._validated[key] = result
        return result

    def _launch(
        self,
        args: Sequence[Buffer],
        validated: _Validated,
        dev: Device,
        donate: Iterable[int],
        inline: bool | None,
    ) -> list[Buffer]:
        donated = self._check_donation(args, donate) if donate else ()
        if dev._closed:
            dev.check_open()
        values, out_shapes = validated
        taken: list[Buffer] = []
        outs: list[Buffer] = []
        try:
            addrs: list[int] = []
            for a in args:
                a._acquire_use()  # raises BufferDeletedError for deleted or donated inputs
                taken.append(a)
                addrs.append(a._block.addr)  # type: ignore[union-attr]  # the use keeps the block
            ev = Event()
            space = dev.default_memory_space
            allocate = space.allocate
            for shape, dtype, cap in zip(out_shapes, self._out_dtypes, self._capacity, strict=True):
                block = allocate(cap)
                addrs.append(block.addr)
                outs.append(Buffer(shape, dtype, space, block, ev, uses=1))
            timing = self._timing[dev.id]
            cmd = ExecuteCommand(ev, taken, outs, self._launchers[dev.id], addrs, values, timing)
            dev.submit(cmd, self._inline(dev, timing, inline))
        except BaseException:
            for a in taken:
                a._release_use()
            for o in outs:
                o._mark_deleted("never computed")
                o._release_use()
            raise
        for i in donated:
            args[i]._mark_deleted(f"donated to {self.plan}")
        return outs

    def _inline(self, dev: Device, timing: PlanTiming, inline: bool | None) -> bool:
        if inline is not None:
            return inline
        policy = dev.inline_policy
        if policy == "auto":
            if timing.ema_ns >= 0:
                return timing.ema_ns < dev.hop_ns
            return 0 < self._flops < dev.hop_ns * dev.flops_per_ns
        return policy == "always"

    def _check_donation(self, args: Sequence[Buffer], donate: Iterable[int]) -> tuple[int, ...]:
        idx = tuple(donate)
        for i in idx:
            if not 0 <= i < len(args):
                raise IndexError(f"{self!r}: donate index {i} out of range for {len(args)} inputs")
            buf = args[i]
            if not buf._donatable:
                raise DeviceError(
                    f"{self!r}: input {i} ({buf!r}) aliases an immutable host array and cannot be "
                    "donated; create it with MUTABLE_ZERO_COPY or a copying semantics"
                )
            if sum(1 for a in args if a is buf) > 1:
                raise DeviceError(f"{self!r}: input {i} is donated but also passed as another input")
        return idx
