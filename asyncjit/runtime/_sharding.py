"""``Sharding`` and ``ShardedBuffer``: one array spread over several devices of a client.

A sharding either splits one axis across a device list (device ``i`` holds the ``i``-th block of
``ceil(n / k)`` rows; the last block may be shorter when ``ragged``) or replicates the array on
every device. A ``ShardedBuffer`` is the array: its global shape and dtype, the sharding, and one
``Buffer`` per device (PJRT's list of per-device buffers behind one logical array).

Moving data between shardings never waits on the host: each target shard is written by a
``RegionCopyCommand`` on its own device's queue, ordered after the events of the shards it reads
(invariant 5). On CPU devices every memory space is host RAM, so a copy is a strided memcpy.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import ArgumentTypeError, DeviceMismatchError, InvalidArgumentError, ShardingError
from ..graph._node import allocate_array
from ._buffer import Buffer
from ._commands import Command, target_block
from ._events import Event
from ._hostcopy import run_copies

if TYPE_CHECKING:
    from ..dtypes import DType
    from ._client import Client
    from ._device import Device
    from ._executable import LoadedExecutable
    from ._memory import Block

__all__ = [
    "RegionCopyCommand",
    "ShardedBuffer",
    "Sharding",
    "assemble_outputs",
    "check_replicated",
    "device_put",
    "reshard",
    "spmd_arguments",
]

Index = tuple[slice, ...]


def _device_names(devices: Iterable[Device]) -> str:
    return "[" + ", ".join(f"{d.kind}:{d.id}" for d in devices) + "]"


def _as_devices(devices: Iterable[Device]) -> tuple[Device, ...]:
    from ._device import Device

    devs = tuple(devices)
    if not devs:
        raise InvalidArgumentError("a Sharding needs at least one device")
    for d in devs:
        if not isinstance(d, Device):
            raise ArgumentTypeError(f"a Sharding takes Devices, got {type(d).__name__} {d!r}")
    if len({id(d) for d in devs}) != len(devs):
        raise InvalidArgumentError(f"a Sharding names each device once, got {_device_names(devs)}")
    if any(d.client is not devs[0].client for d in devs):
        raise DeviceMismatchError(
            f"the devices of a Sharding must belong to one client: {_device_names(devs)}"
        )
    return devs


@attrs.frozen(repr=False)
class Sharding:
    """Where the parts of an array live: ``axis`` split across ``devices``, or replicated.

    Args:
        devices: the devices, in shard order.
        axis: the split axis (negative counts from the end); None replicates.
        ragged: allow an extent that ``len(devices)`` does not divide (the last shard is shorter).

    Use ``Sharding.split(devices, axis)`` or ``Sharding.replicated(devices)``.
    """

    devices: tuple[Device, ...] = attrs.field(converter=_as_devices)
    axis: int | None = 0
    ragged: bool = False

    def __attrs_post_init__(self) -> None:
        if self.axis is not None and (isinstance(self.axis, bool) or not isinstance(self.axis, int)):
            raise ArgumentTypeError(f"a Sharding axis is an int or None, got {self.axis!r}")

    @classmethod
    def split(cls, devices: Iterable[Device], axis: int = 0, *, ragged: bool = False) -> Sharding:
        """Split ``axis`` across ``devices`` in order (data parallelism on axis 0)."""
        return cls(tuple(devices), axis, ragged)

    @classmethod
    def replicated(cls, devices: Iterable[Device]) -> Sharding:
        """A full copy on every device."""
        return cls(tuple(devices), None)

    def __repr__(self) -> str:
        where = "replicated" if self.axis is None else f"axis={self.axis}{' ragged' if self.ragged else ''}"
        return f"Sharding({_device_names(self.devices)}, {where})"

    @property
    def is_replicated(self) -> bool:
        return self.axis is None

    @property
    def client(self) -> Client:
        return self.devices[0].client

    def resolved_axis(self, ndim: int) -> int | None:
        """The split axis as an index in ``[0, ndim)`` (None when replicated).

        Raises:
            ShardingError: the axis is out of range for a rank-``ndim`` array.
        """
        if self.axis is None:
            return None
        if not -ndim <= self.axis < ndim:
            raise ShardingError(f"{self!r}: axis {self.axis} is out of range for an array of rank {ndim}")
        return self.axis % ndim

    def shard_sizes(self, extent: int) -> tuple[int, ...]:
        """The extent of each device's shard along the split axis.

        Raises:
            ShardingError: ``extent`` does not divide over the devices (without ``ragged``), or a
                device would get an empty shard.
        """
        k = len(self.devices)
        chunk = -(-extent // k)
        if extent % k and not self.ragged:
            raise ShardingError(
                f"{self!r}: an axis of {extent} does not divide over {k} devices "
                f"{_device_names(self.devices)}; pass ragged=True for a shorter last shard"
            )
        if chunk * (k - 1) >= extent:
            raise ShardingError(
                f"{self!r}: an axis of {extent} leaves device {self.devices[-1].kind}:"
                f"{self.devices[-1].id} an empty shard; use fewer devices"
            )
        return (chunk,) * (k - 1) + (extent - chunk * (k - 1),)

    def indices(self, shape: Sequence[int]) -> list[Index]:
        """Each device's region of an array of ``shape`` (its global index)."""
        full = tuple(slice(0, n) for n in shape)
        axis = self.resolved_axis(len(shape))
        if axis is None:
            return [full] * len(self.devices)
        out = []
        start = 0
        for n in self.shard_sizes(int(shape[axis])):
            out.append((*full[:axis], slice(start, start + n), *full[axis + 1 :]))
            start += n
        return out

    def shard_shape(self, shape: Sequence[int], i: int) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.indices(shape)[i])


class ShardedBuffer:
    """An array over the devices of a ``Sharding``: one ``Buffer`` per device, returned before
    they are computed. Awaiting and copying out work as for ``Buffer``."""

    __slots__ = ("dtype", "shape", "sharding", "shards")

    def __init__(
        self, shape: tuple[int, ...], dtype: DType, sharding: Sharding, shards: Sequence[Buffer]
    ) -> None:
        if len(shards) != len(sharding.devices):
            raise DeviceMismatchError(
                f"{sharding!r} has {len(sharding.devices)} devices but {len(shards)} shards were given"
            )
        for b, d in zip(shards, sharding.devices, strict=True):
            if b.device is not d:
                raise DeviceMismatchError(
                    f"shard {b!r} lives on {b.device!r}, but {sharding!r} places it on {d!r}"
                )
        self.shape = tuple(shape)
        self.dtype = dtype
        self.sharding = sharding
        self.shards = tuple(shards)

    def __repr__(self) -> str:
        ready = sum(b.is_ready() for b in self.shards)
        return (
            f"<ShardedBuffer {self.dtype.name}{list(self.shape)} {self.sharding!r} "
            f"{ready}/{len(self.shards)} ready>"
        )

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.sharding.devices

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def is_ready(self) -> bool:
        return all(b.is_ready() for b in self.shards)

    def is_deleted(self) -> bool:
        return any(b.is_deleted() for b in self.shards)

    def delete(self) -> None:
        """Delete every shard (lazily, as ``Buffer.delete``)."""
        for b in self.shards:
            b.delete()

    async def ready(self) -> None:
        """Wait for every shard; raise the first poisoned shard's error."""
        for b in self.shards:
            await b.ready()

    def block_until_ready(self, timeout: float | None = None) -> ShardedBuffer:
        """Blocking (scripts only): every shard ready within ``timeout`` seconds in total.

        Raises:
            TimeoutError: naming the shard (and device) still pending at the deadline.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for b in self.shards:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            b.block_until_ready(left)
        return self

    def _gather_host(self) -> npt.NDArray[Any]:
        """The global array from ready shards: each copied once, straight into its place."""
        from ._uses import acquire_uses, release_uses

        for b in self.shards:
            b._event.raise_if_failed()
        if self.sharding.axis is None:
            return self.shards[0]._copy_out()
        out = allocate_array(self.shape, self.dtype.np, "a gathered host copy")
        acquire_uses(self.shards)  # BufferDeletedError for a deleted shard
        try:
            copies = [
                functools.partial(np.copyto, out[region], _view(b))
                for b, region in zip(self.shards, self.sharding.indices(self.shape), strict=True)
            ]
            run_copies(copies, out.nbytes)  # one thread per shard, as the copies in
        finally:
            release_uses(self.shards)
        return out

    async def to_numpy(self) -> npt.NDArray[Any]:
        """The global array on the host (a copy of your own); replicated arrays read one copy."""
        await self.ready()
        return self._gather_host()

    def to_numpy_blocking(self, timeout: float | None = None) -> npt.NDArray[Any]:
        """Blocking twin of ``to_numpy``, for scripts."""
        self.block_until_ready(timeout)
        return self._gather_host()

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        """``np.asarray(sharded)``: **blocks**, then the assembled global array (always a copy)."""
        if copy is False:
            raise ValueError(f"{self!r} spans several buffers; it has no zero-copy view")
        out = self.to_numpy_blocking()
        return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)


class RegionCopyCommand(Command):
    """Write regions of source buffers into one destination buffer, on the destination's queue.

    ``pieces`` are ``(source index, source region, destination region)``; the worker runs it
    once every source's event has fired (the regular cross-device input wait).
    """

    __slots__ = ("dst", "nbytes", "pieces")
    label = "d2d"

    def __init__(
        self, event: Event, srcs: Sequence[Buffer], dst: Buffer, pieces: Sequence[tuple[int, Index, Index]]
    ) -> None:
        super().__init__(event, tuple(srcs), (dst,))
        self.pieces = tuple(pieces)
        self.nbytes = dst.nbytes
        self.dst = target_block(dst)

    def cheap(self, limit_ns: float) -> bool:
        return self.nbytes <= 1 << 20

    def run(self) -> BaseException | None:
        dst = _view(self.outputs[0], self.dst)
        for i, src_region, dst_region in self.pieces:
            dst[dst_region] = _view(self.inputs[i])[src_region]
        return None


def _view(b: Buffer, block: Block | None = None) -> npt.NDArray[Any]:
    """``b``'s data as its logical array, in ``block`` (a command's target) or its own memory."""
    block = b._block if block is None else block
    assert block is not None  # the command holds a use
    return b._layout.from_physical(block.array[: b.nbytes].view(b.dtype.np), b.shape)


def _overlap(a: Index, b: Index) -> Index | None:
    out = []
    for x, y in zip(a, b, strict=True):
        lo, hi = max(x.start, y.start), min(x.stop, y.stop)
        if lo >= hi and not (x.start == x.stop == y.start == y.stop):
            return None
        out.append(slice(lo, max(lo, hi)))
    return tuple(out)


def _shift(region: Index, origin: Index) -> Index:
    return tuple(slice(r.start - o.start, r.stop - o.start) for r, o in zip(region, origin, strict=True))


def _new_shard(device: Device, shape: tuple[int, ...], dtype: DType) -> Buffer:
    space = device.default_memory_space
    block = space.allocate(math.prod(shape) * dtype.itemsize)
    return Buffer(shape, dtype, space, block, Event(), uses=1)


def reshard(x: ShardedBuffer, sharding: Sharding) -> ShardedBuffer:
    """``x`` under another sharding of the same client, copied device to device (no host wait).

    A target shard that equals a source shard on the same device is reused, not copied.
    """
    if sharding.client is not x.sharding.client:
        raise DeviceMismatchError(f"{sharding!r} and {x!r} belong to different clients")
    if sharding == x.sharding:
        return x
    src_idx = x.sharding.indices(x.shape)
    dst_idx = sharding.indices(x.shape)
    shards: list[Buffer] = []
    for dev, region in zip(sharding.devices, dst_idx, strict=True):
        same = [i for i, d in enumerate(x.sharding.devices) if d is dev and src_idx[i] == region]
        if same:
            shards.append(x.shards[same[0]])
            continue
        pieces: list[tuple[int, Index, Index]] = []
        srcs: list[Buffer] = []
        if x.sharding.axis is None:  # any one copy holds all of it: prefer the local one
            local = [i for i, d in enumerate(x.sharding.devices) if d is dev]
            i = local[0] if local else 0
            srcs.append(x.shards[i])
            pieces.append((0, region, _shift(region, region)))
        else:
            for i, sreg in enumerate(src_idx):
                ov = _overlap(sreg, region)
                if ov is None:
                    continue
                pieces.append((len(srcs), _shift(ov, sreg), _shift(ov, region)))
                srcs.append(x.shards[i])
        shards.append(_copy_regions(dev, srcs, pieces, tuple(r.stop - r.start for r in region), x.dtype))
    return ShardedBuffer(x.shape, x.dtype, sharding, shards)


def _copy_regions(
    dev: Device,
    srcs: list[Buffer],
    pieces: list[tuple[int, Index, Index]],
    shape: tuple[int, ...],
    dtype: DType,
) -> Buffer:
    from ._uses import acquire_uses, release_uses

    dev.check_open()
    acquire_uses(srcs)
    out = None
    try:
        out = _new_shard(dev, shape, dtype)
        dev.enqueue(RegionCopyCommand(out._event, srcs, out, pieces))
    except BaseException:
        release_uses(srcs)
        if out is not None:
            out._mark_deleted("never copied")
            out._release_use()
        raise
    return out


def device_put(
    client: Client, x: npt.ArrayLike | Buffer | ShardedBuffer, where: Sharding | Device | int | None = None
) -> Buffer | ShardedBuffer:
    """``Client.device_put``: see there."""
    from ._device import Device

    if where is None or (isinstance(where, Device | int) and not isinstance(where, bool)):
        dev = client._device_arg(where)
        if isinstance(x, ShardedBuffer):
            return reshard(x, Sharding.replicated((dev,))).shards[0]
        if isinstance(x, Buffer):
            return x if x.device is dev else x.copy_to_device(dev)
        return client.buffer_from_host(x, dev)
    if not isinstance(where, Sharding):
        raise ArgumentTypeError(f"device_put places on a Sharding, a Device or a device index; got {where!r}")
    if where.client is not client:
        raise DeviceMismatchError(f"{where!r} belongs to another client than {client!r}")
    if isinstance(x, ShardedBuffer):
        return reshard(x, where)
    if isinstance(x, Buffer):
        if x.client is not client:
            raise DeviceMismatchError(f"{x!r} belongs to another client than {client!r}")
        whole = ShardedBuffer(x.shape, x.dtype, Sharding.replicated((x.device,)), (x,))
        return reshard(whole, where)
    return _put_host(np.asarray(x), where)  # dtypes kept, as buffer_from_host keeps them


def _put_host(arr: npt.NDArray[Any], where: Sharding) -> ShardedBuffer:
    """A host array on a sharding: each device's slice copied straight into its memory, the
    slices on one thread each (``run_copies``), all before the call returns."""
    from ..dtypes import from_numpy
    from ._events import READY

    dtype = from_numpy(arr.dtype)
    shape = tuple(int(d) for d in arr.shape)
    for dev in where.devices:
        dev.check_open()
    shards: list[Buffer] = []
    copies = []
    for dev, idx in zip(where.devices, where.indices(shape), strict=True):
        piece = arr[idx]
        space = dev.default_memory_space
        shard = Buffer(piece.shape, dtype, space, space.allocate(piece.nbytes), READY)
        shards.append(shard)
        copies.append(functools.partial(np.copyto, _view(shard), piece))
    run_copies(copies, sum(b.nbytes for b in shards))
    return ShardedBuffer(shape, dtype, where, shards)


# -- executing over several devices ------------------------------------------------------------


def _per_device_vars(
    vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None, n: int, what: str
) -> list[Mapping[str, int] | None]:
    if vars is None or isinstance(vars, Mapping):
        return [vars] * n
    per: list[Mapping[str, int] | None] = list(vars)
    if len(per) != n:
        raise DeviceMismatchError(f"{what}: {len(per)} var mappings for {n} devices")
    return per


def check_replicated(
    loaded: LoadedExecutable,
    args: Sequence[Sequence[Buffer]],
    vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None,
) -> list[tuple[Device, Sequence[Buffer], Mapping[str, int] | None]]:
    """Check ``execute_replicated``'s lists against the devices (the caller validates each list
    against the signature, all before anything is enqueued)."""
    devs = loaded.devices()
    if isinstance(args, Buffer) or not isinstance(args, Sequence):
        raise ArgumentTypeError(f"{loaded!r}: execute_replicated takes one list of Buffers per device")
    if len(args) != len(devs):
        raise DeviceMismatchError(
            f"{loaded!r} is loaded on {len(devs)} devices {_device_names(devs)}; "
            f"execute_replicated got {len(args)} argument lists"
        )
    per_vars = _per_device_vars(vars, len(devs), f"{loaded!r}.execute_replicated")
    out = []
    for dev, dev_args, dev_vars in zip(devs, args, per_vars, strict=True):
        if isinstance(dev_args, Buffer) or not isinstance(dev_args, Sequence):
            raise ArgumentTypeError(
                f"{loaded!r}: the arguments for {dev!r} must be a list of Buffers, got {dev_args!r}"
            )
        for k, b in enumerate(dev_args):
            if isinstance(b, Buffer) and b.memory_space.device is not dev:
                raise DeviceMismatchError(
                    f"{loaded!r}: argument {k} for device {dev.kind}:{dev.id} is {b!r}, which lives on "
                    f"device {b.device.kind}:{b.device.id}; copy it there first (copy_to_device)"
                )
        out.append((dev, dev_args, dev_vars))
    return out


def spmd_arguments(
    loaded: LoadedExecutable,
    args: Sequence[Buffer | ShardedBuffer],
    vars: Mapping[str, int] | Sequence[Mapping[str, int]] | None,
) -> tuple[Sharding, list[list[Buffer]], list[Mapping[str, int]]]:
    """Per-device argument lists for ``execute_sharded`` over ``ShardedBuffer``s.

    Every sharded argument must be on the executable's devices, in order; a plain ``Buffer`` is
    read by every device (CPU memory spaces are host RAM).
    """
    devs = loaded.devices()
    first: Sharding | None = None
    for k, a in enumerate(args):
        if isinstance(a, ShardedBuffer):
            if a.sharding.devices != devs:
                raise DeviceMismatchError(
                    f"{loaded!r} is loaded on {_device_names(devs)}; argument {k} is sharded over "
                    f"{_device_names(a.sharding.devices)}"
                )
            if first is None and a.sharding.axis is not None:
                first = a.sharding
    if first is None:
        first = Sharding.replicated(devs)
    per = [[a.shards[i] if isinstance(a, ShardedBuffer) else a for a in args] for i in range(len(devs))]
    given = _per_device_vars(vars, len(devs), f"{loaded!r}.execute_sharded")
    # vars that are an input's dim are read from each device's shard (ragged shards differ)
    per_vars: list[Mapping[str, int]] = []
    for dev_args, dev_vars in zip(per, given, strict=True):
        shapes = [tuple(a.shape) if isinstance(a, Buffer) else () for a in dev_args]
        per_vars.append({**loaded.signature.infer_vars(shapes), **(dev_vars or {})})
    return first, per, per_vars


def assemble_outputs(
    per_device: list[list[Buffer]],
    out_shardings: Sequence[Sharding | None] | Sharding | None,
    default: Sharding,
) -> list[ShardedBuffer]:
    """One ``ShardedBuffer`` per output from each device's output list.

    Raises:
        ShardingError: shard shapes do not fit the sharding (other axes differ).
    """
    n_out = len(per_device[0])
    if out_shardings is None or isinstance(out_shardings, Sharding):
        specs: list[Sharding | None] = [out_shardings] * n_out
    else:
        specs = list(out_shardings)
        if len(specs) != n_out:
            raise ShardingError(f"{len(specs)} out_shardings for {n_out} outputs")
    out = []
    for j in range(n_out):
        shards = [outs[j] for outs in per_device]
        sharding = specs[j] or default
        if sharding.devices != default.devices:
            raise DeviceMismatchError(
                f"out_shardings[{j}] {sharding!r} is not on the executing devices "
                f"{_device_names(default.devices)}"
            )
        axis = sharding.resolved_axis(shards[0].ndim)
        shape = list(shards[0].shape)
        if axis is not None:
            for b in shards[1:]:
                if len(b.shape) != len(shape) or any(
                    x != y for i, (x, y) in enumerate(zip(b.shape, shape, strict=True)) if i != axis
                ):
                    raise ShardingError(
                        f"output {j}: shard shapes {[s.shape for s in shards]} differ off axis {axis}"
                    )
            shape[axis] = sum(b.shape[axis] for b in shards)
            sizes = tuple(b.shape[axis] for b in shards)
            if sharding.shard_sizes(shape[axis]) != sizes:
                raise ShardingError(
                    f"output {j}: shard extents {sizes} are not how {sharding!r} splits {shape[axis]}"
                )
        out.append(ShardedBuffer(tuple(shape), shards[0].dtype, sharding, shards))
    return out
