"""``LoadedExecutable``: an ``Executable`` bound to devices, replayed by ``execute``.

``execute`` validates everything the native code relies on before anything is enqueued
(invariant 2): argument count, types, client, shapes, dtypes and var bounds; deleted or donated
inputs raise. It then allocates outputs at their capacity (the upper bounds of every var), takes
a use of each input, and submits one command. Output buffers return at once with the shapes
evaluated from the var values; their readiness is awaited.

Validation results are memoised per (shapes, var values): a streaming replay repeats the same
few combinations, and a dict lookup is cheaper than re-checking bounds every step. Dtypes and
the client are compared per argument by identity (hashing attrs classes into the key costs more).

On an idle device with ready inputs a cheap plan runs on the caller's thread (``_run_inline``):
the outputs are created after the run, already ready, so ``await out.ready()`` does not yield.

**Donation that aliases.** A plan compiled with ``donate=`` writes some outputs over inputs
(``Signature.aliases``). An execution that donates such an input hands its memory to the output
(``take_donated``): no allocation, no copy, and the input is deleted at once. The memory is taken
only when it can be: the same memory space, a block of the output's capacity, not a host array's;
otherwise the output gets its own block and the launcher copies the input into it first, as for a
caller that does not donate.
"""

from __future__ import annotations

import itertools
import math
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from .._log import get_logger
from ..errors import (
    ArgumentCountError,
    ArgumentTypeError,
    DeviceError,
    DonateIndexError,
    DonationError,
    InvalidArgumentError,
    LayoutError,
    ShapeMismatchError,
    WouldBlock,
)
from ..profiler import _state as _trace
from ._buffer import Buffer
from ._commands import ExecuteCommand, PlanTiming, actual_shapes, launch_error
from ._events import READY, Event
from ._layout import ROW_MAJOR, Layout
from ._memory import Block, MemoryKind, MemorySpace, size_class
from ._sharding import ShardedBuffer, Sharding, assemble_outputs, check_replicated, spmd_arguments
from ._uses import acquire_uses, release_uses, take_donated

if TYPE_CHECKING:
    from ..compiler._executable import Executable, Launcher, Signature
    from ..dtypes import DType
    from ._client import Client
    from ._device import Device

__all__ = ["ExecutableStatistics", "LoadedExecutable", "pack_executable", "unpack_executable"]


class PendingShape(tuple[int, ...]):
    """The shape of an output with data-dependent dims before its run finished: the bound's.
    The run replaces it with the actual shape; another plan refuses it until then."""

    __slots__ = ()


_ids = itertools.count(1)
_MAGIC = b"ASYNCJIT-EXE\x00"
_VERSION = 1
_CACHE_MAX = 512
_perf_ns = time.perf_counter_ns
_log = get_logger("asyncjit.runtime")

# var values, output shapes, output sizes in bytes
_Validated = tuple[tuple[int, ...], tuple[tuple[int, ...], ...], tuple[int, ...]]


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

    def __init__(
        self,
        client: Client,
        executable: Executable,
        devices: Sequence[Device],
        output_memory_kinds: Mapping[int, MemoryKind | str] | None = None,
    ) -> None:
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
        sig = self.signature
        self._n_in = len(sig.inputs)
        self._in_dtypes: tuple[DType, ...] = tuple(a.dtype for a in sig.inputs)
        self._out_dtypes: tuple[DType, ...] = tuple(a.dtype for a in sig.outputs)
        # an output sized by an unbounded var has no capacity: -1, allocated per run by its size
        self._out_classes = tuple(size_class(a.capacity) if a.bounded else -1 for a in sig.outputs)
        self._flops = executable.flops_estimate
        self._validated: dict[object, _Validated] = {}
        # a plan that computes sizes: outputs get their actual shapes after the run; one with
        # index checks alone keeps its shapes, each run checked (``actual_shapes``)
        self._sized = sig.sized_outputs
        self._checked = bool(sig.data_vars)
        # None: every output in the device space (the fast path); else a kind per output
        self._out_kinds: tuple[MemoryKind, ...] | None = _output_kinds(self, output_memory_kinds)
        # donated input i -> the output j written over it (``compile(donate=...)``)
        self._alias_of: dict[int, int] = {i: j for j, i in sig.aliases}

    @property
    def input_output_aliases(self) -> dict[int, int]:
        """``{input index: output index}``: the outputs written over their input when it is donated
        (``compile(donate=...)``); donate those inputs to update them in place."""
        return dict(self._alias_of)

    @property
    def plan(self) -> str:
        return f"{self.name}#{self.id}"

    def __repr__(self) -> str:
        devs = ", ".join(f"{d.kind}:{d.id}" for d in self._devices)
        return f"<LoadedExecutable {self.plan} on [{devs}]>"

    def devices(self) -> tuple[Device, ...]:
        return self._devices

    @property
    def input_layouts(self) -> tuple[Layout, ...]:
        """The layouts the plan takes: compiled kernels read row-major inputs."""
        return (ROW_MAJOR,) * self._n_in

    @property
    def output_layouts(self) -> tuple[Layout, ...]:
        """The layouts of the outputs: row-major."""
        return (ROW_MAJOR,) * len(self._out_dtypes)

    @property
    def output_memory_kinds(self) -> tuple[MemoryKind, ...]:
        """The memory space kind each output is placed in (``device`` unless chosen at load)."""
        return self._out_kinds or (MemoryKind.DEVICE,) * len(self._out_dtypes)

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
        dev = self._devices[0] if device is None else self._check_device(device, portable=False)
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
        args: Sequence[Buffer | ShardedBuffer],
        device: Device | None = None,
        vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None = None,
        *,
        donate: Iterable[int] = (),
        inline: bool | None = None,
        out_shardings: Sharding | Sequence[Sharding | None] | None = None,
    ) -> list[Buffer] | list[ShardedBuffer]:
        """PJRT's ``ExecuteSharded``, two ways.

        * ``device`` given, ``args`` plain Buffers: execute on that device, which must be one
          this executable was loaded on; returns its output Buffers.
        * ``args`` holding ``ShardedBuffer``s (sharded over exactly ``devices()``, in order),
          ``device`` None: run every device on its own shard (SPMD data parallelism; a plain
          Buffer argument is read by every device) and return one ``ShardedBuffer`` per
          output. ``out_shardings`` says how the devices' outputs form each global output
          (default: the first split argument's sharding); ``vars`` may be one mapping per device
          (shards of a ragged split differ in size).

        Raises:
            DeviceMismatchError: sharded arguments on other devices than the executable's.
            ShardingError: outputs whose shard shapes do not fit ``out_shardings``.
        """
        if device is None and any(isinstance(a, ShardedBuffer) for a in args):
            if donate != ():
                raise DonateIndexError(
                    f"{self!r}: donation is per device; use execute_replicated(donate=...)"
                )
            default, per, per_vars = spmd_arguments(self, args, vars)
            outs = await self.execute_replicated(per, per_vars, inline=inline)
            return assemble_outputs(outs, out_shardings, default)
        if device is None:
            raise ArgumentTypeError(
                f"{self!r}.execute_sharded needs a device, or ShardedBuffer arguments (device_put)"
            )
        if vars is not None and not isinstance(vars, Mapping):
            raise ArgumentTypeError(f"{self!r}: vars for one device is one mapping, got {vars!r}")
        plain = [a for a in args if isinstance(a, Buffer)]
        if len(plain) != len(args):
            raise ArgumentTypeError(f"{self!r}: with a device, execute_sharded takes Buffers")
        return await self.execute(plain, vars, device=device, donate=donate, inline=inline)

    async def execute_replicated(
        self,
        args: Sequence[Sequence[Buffer]],
        vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None = None,
        *,
        donate: Iterable[int] = (),
        inline: bool | None = None,
    ) -> list[list[Buffer]]:
        """PJRT's list-of-lists ``Execute``: ``args[i]`` runs on ``devices()[i]``; one output list
        per device, returned before they are computed (the devices run in parallel).

        Every argument list is validated before anything is enqueued.

        Args:
            args: one list of input Buffers per device; each Buffer must live on that device.
            vars: one mapping for every device, or one per device.
            donate: input indices donated on every device.

        Raises:
            DeviceMismatchError: not one list per device, or a buffer on the wrong device
                (the message names both devices).
        """
        plan = check_replicated(self, args, vars)
        validated = [self._validate(a, v) for _, a, v in plan]
        if donate != ():
            for _, a, _ in plan:
                self._check_donation(a, donate)
        results = []
        for (dev, dev_args, _), val in zip(plan, validated, strict=True):
            if dev._in_flight >= dev.max_in_flight:
                await dev.wait_for_slot()
            results.append(self._launch(dev_args, val, dev, donate, False if inline is None else inline))
        return results

    def execute_replicated_blocking(
        self,
        args: Sequence[Sequence[Buffer]],
        vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None = None,
        *,
        donate: Iterable[int] = (),
    ) -> list[list[Buffer]]:
        """``execute_replicated`` for scripts: blocks only while a device queue is full."""
        plan = check_replicated(self, args, vars)
        validated = [self._validate(a, v) for _, a, v in plan]
        if donate != ():
            for _, a, _ in plan:
                self._check_donation(a, donate)
        results = []
        for (dev, dev_args, _), val in zip(plan, validated, strict=True):
            dev.wait_for_slot_blocking()
            results.append(self._launch(dev_args, val, dev, donate, False))
        return results

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
        if getattr(device, "_device_space", None) is None:
            raise ArgumentTypeError(
                f"{self!r}: device must be a Device, got {type(device).__name__} {device!r}"
            )
        if device.client is not self.client:
            raise DeviceError(f"{device!r} belongs to another client than {self!r}")
        if not portable and device.id not in self._launchers:
            raise DeviceError(f"{self!r} is not loaded on {device!r}; load it there or use execute_portable")
        return device

    def _validate(self, args: Sequence[Buffer], vars: Mapping[str, int] | None) -> _Validated:
        """Check types, client, dtypes (identity: DTypes are singletons), shapes and vars.

        Shapes and var values are checked once per combination and memoised; dtypes and the
        client are compared per argument (a few loads, cheaper than hashing them into the key).
        """
        client = self.client
        shapes = []
        if type(args) is not list and type(args) is not tuple and not isinstance(args, Sequence):
            raise ArgumentTypeError(
                f"{self!r}: args must be a sequence of Buffers, got {type(args).__name__}"
            )
        if len(args) != self._n_in:
            names = [a.name for a in self.signature.inputs]
            raise ArgumentCountError(f"{self!r}: expected {self._n_in} inputs {names}, got {len(args)}")
        dtypes_ok = True
        for a, dt in zip(args, self._in_dtypes):  # noqa: B905 - the count is checked above
            if type(a) is not Buffer:
                raise ArgumentTypeError(
                    f"{self!r}: arguments must be asyncjit Buffers, got {type(a).__name__}; "
                    "use client.buffer_from_host(array) first"
                )
            if a.memory_space.client is not client:
                raise DeviceError(f"{self!r}: input {a!r} belongs to another client")
            if a._layout is not ROW_MAJOR:
                raise LayoutError(
                    f"{self!r} takes row_major inputs; {a!r} is {a._layout}: relayout it with "
                    "copy_to_device(device, layout='row_major')"
                )
            if a.dtype is not dt:
                dtypes_ok = False
            if type(a.shape) is not tuple and not a._event._done:
                raise ShapeMismatchError(
                    f"{self!r}: input {a!r} has a data-dependent shape that is known only once it is "
                    "ready; await its ready() before passing it to another plan"
                )
            shapes.append(a.shape)
        if vars:
            if type(vars) is not dict and not isinstance(vars, Mapping):
                raise ArgumentTypeError(
                    f"{self!r}: vars must be a mapping of var name to int, got {type(vars).__name__}"
                )
            items = tuple(vars.items())
            cacheable = dtypes_ok
            for _, v in items:
                if type(v) is not int:  # 16.0 == 16 as a key: only exact ints may hit the memo
                    cacheable = False
        else:
            items, cacheable = (), dtypes_ok
        key = (tuple(shapes), items)
        if cacheable:
            hit = self._validated.get(key)
            if hit is not None:
                return hit
        sig = self.signature
        if sig._unbounded and (vars is None or len(vars) < len(sig.vars)):
            # unbounded vars have no upper bound to default to: read them from the input shapes
            vars = {**sig.infer_vars(key[0]), **(vars or {})}
        values = sig.var_values(vars)
        sig.validate(key[0], [a.dtype for a in args], values)
        out_shapes = tuple(sig.output_shapes(values))
        result = (
            values,
            out_shapes,
            tuple(math.prod(s) * d.itemsize for s, d in zip(out_shapes, self._out_dtypes, strict=True)),
        )
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
        donated = self._check_donation(args, donate) if donate or type(donate) is not tuple else ()
        if dev._closed:
            dev.check_open()
        timing = self._timing[dev.id]
        reuse = self._reuse(args, donated) if donated and self._alias_of else None
        outs = None
        if inline is None:
            inline = self._inline(dev, timing, None)
        if inline and dev._exec_lock.acquire(blocking=False):  # dev.begin_inline(), spelled out
            if dev._in_flight == 0 and not dev._closed:
                outs = self._run_inline(args, validated, dev, timing, reuse)
            else:
                dev._exec_lock.release()
        if outs is None:
            outs = self._submit(args, validated, dev, timing, reuse)
        for i in donated:
            args[i]._mark_deleted(f"donated to {self.plan}")
        return outs

    def _reuse(self, args: Sequence[Buffer], donated: tuple[int, ...]) -> dict[int, Buffer] | None:
        """Output index -> the donated input it is written over (None: no donated input aliases)."""
        alias_of = self._alias_of
        found = {alias_of[i]: args[i] for i in donated if i in alias_of}
        return found or None

    def _output_block(
        self, j: int, where: MemorySpace, nbytes: int, reuse: dict[int, Buffer] | None
    ) -> tuple[Block, bool]:
        """Output ``j``'s memory: a donated input's (taken, True) when it can be, else a new block.

        Raises:
            DonationError: the donated input is still read by another pending command.
        """
        if reuse is not None:
            src = reuse.get(j)
            block = src._block if src is not None else None
            cls = self._out_classes[j]
            need = self.signature.outputs[j].capacity if cls >= 0 else nbytes
            if (
                src is not None
                and block is not None
                and src._host is None
                and src.memory_space is where
                and block.size >= need
            ):
                taken = take_donated(src, f"donated to {self.plan}")
                if taken is not None:
                    return taken, True
        cls = self._out_classes[j]
        return where.allocate_class(cls if cls >= 0 else size_class(nbytes)), False

    def _run_inline(
        self,
        args: Sequence[Buffer],
        validated: _Validated,
        dev: Device,
        timing: PlanTiming,
        reuse: dict[int, Buffer] | None = None,
    ) -> list[Buffer] | None:
        """Run on this thread; called holding the device (``begin_inline``), which it gives back.

        No command, queue or event: outputs are created after the run, ready (sharing ``READY``)
        or poisoned. Returns None, having run nothing, when an input is pending or poisoned: the
        queued path then waits for it or forwards its error.
        """
        values, out_shapes, out_nbytes = validated
        space = dev._device_space
        blocks: list[Block] = []
        aliased: list[int] = []
        ran = False
        error: BaseException | None = None
        try:
            acquire_uses(args)  # raises BufferDeletedError for deleted or donated inputs
        except BaseException:
            dev.end_inline(False, False)
            raise
        try:
            addrs: list[int] = []
            for a in args:
                ev = a._event
                if not ev._done or ev._error is not None:
                    return None
                addrs.append(a._block.addr)  # type: ignore[union-attr]  # the use keeps the block
            kinds = self._out_kinds
            for i, cls in enumerate(self._out_classes):
                where = space if kinds is None else dev._spaces[kinds[i]]
                if reuse is None:
                    block = where.allocate_class(cls if cls >= 0 else size_class(out_nbytes[i]))
                else:
                    block, taken = self._output_block(i, where, out_nbytes[i], reuse)
                    if taken:
                        aliased.append(i)
                blocks.append(block)
                addrs.append(block.addr)
            launcher = self._launchers[dev.id]
            ran = True
            try:
                if _trace.active is not None:
                    _trace.active.execute_inline(dev, launcher, addrs, values)
                elif timing.calls & 7:  # time one run in eight: enough for the moving average
                    timing.calls += 1
                    launcher(addrs, values)
                else:
                    t0 = _perf_ns()
                    launcher(addrs, values)
                    timing.observe(_perf_ns() - t0)
                if self._checked and (shapes := actual_shapes(self.signature, launcher, values)):
                    out_shapes = tuple(shapes)
                    out_nbytes = tuple(
                        math.prod(s) * d.itemsize for s, d in zip(shapes, self._out_dtypes, strict=True)
                    )
            except BaseException as exc:  # errors are values: poison the outputs
                error = launch_error(exc, timing.plan)
        finally:
            dev.end_inline(ran, error is not None)
            release_uses(args)
            if not ran:
                for b in blocks:
                    (b.space or space).release(b)
        if aliased:
            outs = self._inline_outputs(blocks, out_shapes, out_nbytes, space, error)
            for i in aliased:
                outs[i]._aliased = True
            return outs
        return self._inline_outputs(blocks, out_shapes, out_nbytes, space, error)

    def _inline_outputs(
        self,
        blocks: list[Block],
        out_shapes: tuple[tuple[int, ...], ...],
        out_nbytes: tuple[int, ...],
        space: MemorySpace,
        error: BaseException | None,
    ) -> list[Buffer]:
        """The outputs of an inline run: ready (sharing ``READY``) or poisoned by ``error``."""
        if error is None:
            done = READY
        else:
            done = Event()
            done.fail(error)
            _log.warning(
                "command.failed",
                device=space.device.id,
                command="execute",
                plan=self.plan,
                error=repr(error),
            )
        dtypes = self._out_dtypes
        if self._out_kinds is not None:
            return [
                Buffer(out_shapes[i], dtypes[i], block.space or space, block, done, nbytes=out_nbytes[i])
                for i, block in enumerate(blocks)
            ]
        if len(blocks) == 1:  # no zip, no comprehension: they cost as much as the buffer here
            return [Buffer(out_shapes[0], dtypes[0], space, blocks[0], done, nbytes=out_nbytes[0])]
        outs = []
        for i, block in enumerate(blocks):
            outs.append(Buffer(out_shapes[i], dtypes[i], space, block, done, nbytes=out_nbytes[i]))
        return outs

    def _submit(
        self,
        args: Sequence[Buffer],
        validated: _Validated,
        dev: Device,
        timing: PlanTiming,
        reuse: dict[int, Buffer] | None = None,
    ) -> list[Buffer]:
        """Take a use of every input, allocate outputs, and queue one command."""
        values, out_shapes, out_nbytes = validated
        acquire_uses(args)  # raises BufferDeletedError for deleted or donated inputs
        outs: list[Buffer] = []
        try:
            addrs: list[int] = []
            for a in args:  # a loop, not a comprehension: cheaper for two or three inputs
                addrs.append(a._block.addr)  # type: ignore[union-attr]  # uses keep the blocks
            ev = Event()
            space = dev._device_space
            classes, dtypes, kinds = self._out_classes, self._out_dtypes, self._out_kinds
            for i in range(len(classes)):
                if kinds is not None:
                    space = dev._spaces[kinds[i]]
                cls = classes[i]
                if reuse is None:
                    block = space.allocate_class(cls if cls >= 0 else size_class(out_nbytes[i]))
                    taken = False
                else:
                    block, taken = self._output_block(i, space, out_nbytes[i], reuse)
                addrs.append(block.addr)
                shape = PendingShape(out_shapes[i]) if self._sized else out_shapes[i]
                out = Buffer(shape, dtypes[i], space, block, ev, uses=1, nbytes=out_nbytes[i])
                out._aliased = taken
                outs.append(out)
            cmd = ExecuteCommand(ev, tuple(args), outs, self._launchers[dev.id], addrs, values, timing)
            if self._checked:
                cmd.signature = self.signature
            dev.enqueue(cmd)
        except BaseException:
            release_uses(args)
            for o in outs:
                o._mark_deleted("never computed")
                o._release_use()
            raise
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
        try:
            idx = tuple(donate)
        except TypeError:
            raise DonateIndexError(
                f"{self!r}: donate takes a sequence of input indices (e.g. donate=[0]), got {donate!r}"
            ) from None
        for i in idx:
            if type(i) is not int and (isinstance(i, bool) or not hasattr(i, "__index__")):
                raise DonateIndexError(f"{self!r}: donate indices must be ints, got {i!r}")
            if not 0 <= i < len(args):
                raise DonateIndexError(f"{self!r}: donate index {i} out of range for {len(args)} inputs")
            buf = args[i]
            if not buf._donatable:
                raise DeviceError(
                    f"{self!r}: input {i} ({buf!r}) aliases an immutable host array and cannot be "
                    "donated; create it with MUTABLE_ZERO_COPY or a copying semantics"
                )
            if sum(1 for a in args if a is buf) > 1:
                raise DonationError(f"{self!r}: input {i} is donated but also passed as another input")
        return idx


def _output_kinds(
    loaded: LoadedExecutable, kinds: Mapping[int, MemoryKind | str] | None
) -> tuple[MemoryKind, ...] | None:
    """Validate ``output_memory_kinds`` (output index -> kind); None when every output is ``device``.

    Raises:
        InvalidArgumentError: an unknown kind or an output index out of range.
    """
    if not kinds:
        return None
    n = len(loaded.signature.outputs)
    out = [MemoryKind.DEVICE] * n
    for i, kind in kinds.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise InvalidArgumentError(
                f"{loaded!r}: output_memory_kinds names output {i!r}; it has {n} outputs"
            )
        try:
            out[i] = MemoryKind(kind)
        except ValueError:
            raise InvalidArgumentError(
                f"{loaded!r}: output {i}: unknown memory kind {kind!r}; "
                f"one of {[k.value for k in MemoryKind]}"
            ) from None
    return None if all(k is MemoryKind.DEVICE for k in out) else tuple(out)
