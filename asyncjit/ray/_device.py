"""Devices in other processes or on other machines: an asyncjit device inside a Ray actor.

``RayDevice.start()`` starts an actor holding its own ``Client`` and device. Its buffers live
there: a ``RemoteBuffer`` here is a handle (shape, dtype, an id), never addressable from this
process. ``load`` ships a compiled plan as its serialized bytes (the actor's host must run the
same object code: same CPU family, see ``docs/ray.md``); ``execute`` checks shapes, dtypes and
vars *here*, against the plan's signature, then returns not-ready buffers at once; their
readiness is awaited through the same events as local buffers (``_await.py``).

**Order.** Ray runs the calls one caller makes on one actor in the order they were made, so the
actor's method calls are this device's in-order command queue: an ``execute`` after a ``put``
sees the put, a ``get`` after an ``execute`` sees its output, without waiting here in between.

**Transfers** between two remote devices go actor to actor: the destination's ``put`` takes the
source's ``get`` as an object ref, which Ray resolves on the destination from the source's
object store once the source has produced it. This process never holds the data and no thread
here waits.
"""

from __future__ import annotations

import itertools
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from .._log import get_logger
from ..compiler._executable import Executable
from ..devices import executable_kind
from ..errors import (
    ArgumentCountError,
    ArgumentTypeError,
    BufferDeletedError,
    DeviceError,
    DTypeMismatchError,
    RemoteDeviceError,
)
from ..runtime._executable import LoadedExecutable, pack_executable
from ._await import await_ref, get_ref

__all__ = ["RayDevice", "RemoteBuffer", "RemoteExecutable"]

_log = get_logger("asyncjit.ray")
_device_ids = itertools.count()


class DeviceActor:
    """The remote side: one asyncjit client and device; buffers and plans by the caller's ids."""

    def __init__(self, kind: str) -> None:
        from ..runtime import Client

        self.client = Client(kind)
        self.device = self.client.device(0)
        self.buffers: dict[int, Any] = {}
        self.plans: dict[int, LoadedExecutable] = {}

    def describe(self) -> dict[str, Any]:
        """Where this device runs: what ``RayDevice.attributes`` reports."""
        model = ""
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:
            model = platform.processor()
        return {
            "kind": self.device.kind,
            "host": platform.node(),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "cpu_model": model,
            "cores": os.cpu_count() or 1,
        }

    def put(self, bid: int, array: np.ndarray) -> None:
        self.buffers[bid] = self.client.buffer_from_host(array, self.device)

    def load(self, pid: int, data: bytes) -> None:
        self.plans[pid] = self.client.deserialize_executable(data, self.device)

    def execute(
        self, pid: int, arg_ids: list[int], out_ids: list[int], values: dict[str, int], donate: list[int]
    ) -> None:
        args = [self._buffer(i) for i in arg_ids]
        outs = self.plans[pid].execute_blocking(args, values, donate=donate)
        for o in outs:
            o.block_until_ready()  # a kernel failure belongs to this call, not a later get
        for i in donate:
            self.buffers.pop(arg_ids[i], None)
        self.buffers.update(zip(out_ids, outs, strict=True))

    def run(self, pid: int, arrays: list[np.ndarray], values: dict[str, int]) -> list[np.ndarray]:
        """Host arrays in, host arrays out, in one call: what a step through a remote device costs."""
        exe = self.plans[pid].executable
        out: list[np.ndarray] = exe.run(arrays, values)  # type: ignore[attr-defined]
        return out

    def get(self, bid: int) -> np.ndarray:
        out: np.ndarray = self._buffer(bid).to_numpy_blocking()
        return out

    def delete(self, bids: list[int]) -> None:
        for bid in bids:
            buf = self.buffers.pop(bid, None)
            if buf is not None:
                buf.delete()

    def _buffer(self, bid: int) -> Any:
        try:
            return self.buffers[bid]
        except KeyError:
            raise BufferDeletedError(
                f"remote buffer {bid} is not on this device: deleted, donated, or its producer failed"
            ) from None


class RayDevice:
    """A device in a Ray actor, possibly on another machine (``ray.init(address=...)`` first).

    Args:
        actor: the actor handle (``RayDevice.start`` makes one).
        name: shown in every error about this device.
        timeout: seconds any remote wait may take before ``RemoteTimeoutError``.
    """

    def __init__(self, actor: Any, *, name: str, timeout: float | None = 60.0) -> None:
        self.actor = actor
        self.name = name
        self.timeout = timeout
        self.addressable = False
        self._ids = itertools.count(1)
        self._attributes: dict[str, Any] | None = None
        self._closed = False

    @classmethod
    def start(
        cls, kind: str = "cpu", *, num_cpus: float = 1, timeout: float | None = 60.0, **actor_options: Any
    ) -> RayDevice:
        """Start an actor holding an asyncjit ``kind`` device on the cluster ``ray.init`` joined.

        ``actor_options`` go to Ray (``resources=``, ``scheduling_strategy=`` to pick a node).

        Raises:
            RemoteDeviceError: Ray is not initialized.
        """
        if not ray.is_initialized():
            raise RemoteDeviceError(
                "Ray is not initialized: call ray.init() (or ray.init(address=...)) first"
            )
        actor = ray.remote(DeviceActor).options(num_cpus=num_cpus, **actor_options).remote(kind)
        return cls(actor, name=f"ray:{next(_device_ids)}", timeout=timeout)

    def __repr__(self) -> str:
        return f"<RayDevice {self.name}>"

    @property
    def attributes(self) -> dict[str, Any]:
        """Kind, host, pid, Ray node id, CPU model and cores of the process holding the device."""
        if self._attributes is None:
            self._check_open()
            self._attributes = get_ref(self.actor.describe.remote(), timeout=self.timeout, where=self.name)
        return dict(self._attributes)

    def close(self) -> None:
        """Kill the actor; its buffers are gone (later use raises ``RemoteDeviceError``).

        Refused here at once, not left to the actor: ``ray.kill`` is asynchronous, and a call
        queued just after it could still be answered by the dying actor."""
        self._closed = True
        ray.kill(self.actor)

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteDeviceError(f"{self.name} was closed: its actor and buffers are gone")

    # -- transfers ---------------------------------------------------------------------------------
    def buffer_from_host(self, array: npt.ArrayLike) -> RemoteBuffer:
        """Send ``array`` (copied now) to the device; the buffer is usable at once."""
        self._check_open()
        arr = np.ascontiguousarray(array)
        if arr.dtype == object:
            raise ArgumentTypeError(f"{self.name}: cannot send an object array to a device")
        bid = next(self._ids)
        ref = self.actor.put.remote(bid, arr)
        return RemoteBuffer(self, bid, arr.shape, arr.dtype, ref)

    def load(self, executable: Executable | LoadedExecutable) -> RemoteExecutable:
        """Ship a compiled plan to the device; returns at once (the first execute waits for it)."""
        self._check_open()
        exe = executable.executable if isinstance(executable, LoadedExecutable) else executable
        if not isinstance(exe, Executable):
            raise ArgumentTypeError(
                f"{self.name}.load takes an Executable or LoadedExecutable, got {type(executable).__name__}"
            )
        pid = next(self._ids)
        data = pack_executable(executable_kind(exe), exe.serialize())
        return RemoteExecutable(self, pid, exe, self.actor.load.remote(pid, data))


class RemoteBuffer:
    """A buffer on a ``RayDevice``: shape and dtype here, the data there. Not addressable."""

    __slots__ = ("_deleted", "_ref", "device", "dtype", "id", "shape")

    def __init__(self, device: RayDevice, bid: int, shape: tuple[int, ...], dtype: Any, ref: Any) -> None:
        self.device = device
        self.id = bid
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._ref = ref  # the call that produces it: done = ready
        self._deleted: str | None = None

    def __repr__(self) -> str:
        return f"<RemoteBuffer {self.dtype}{list(self.shape)} on {self.device.name}>"

    def _check(self) -> None:
        self.device._check_open()
        if self._deleted is not None:
            raise BufferDeletedError(f"{self!r} was {self._deleted}")

    def is_ready(self) -> bool:
        return bool(self._ref.future().done())

    async def ready(self) -> None:
        """Wait (without blocking the loop) until computed; raises what computing it raised."""
        self._check()
        await await_ref(self._ref, timeout=self.device.timeout, where=self.device.name)

    def block_until_ready(self, timeout: float | None = None) -> None:
        self._check()
        get_ref(
            self._ref, timeout=timeout if timeout is not None else self.device.timeout, where=self.device.name
        )

    async def to_numpy(self) -> npt.NDArray[Any]:
        """The data, fetched when ready; the producer's error, typed, if it failed."""
        self._check()
        data = self.device.actor.get.remote(self.id)  # queued behind the producer on the actor
        await await_ref(self._ref, timeout=self.device.timeout, where=self.device.name)
        out = await await_ref(data, timeout=self.device.timeout, where=self.device.name)
        return _owned(out)

    def to_numpy_blocking(self, timeout: float | None = None) -> npt.NDArray[Any]:
        self._check()
        t = timeout if timeout is not None else self.device.timeout
        data = self.device.actor.get.remote(self.id)
        get_ref(self._ref, timeout=t, where=self.device.name)
        return _owned(get_ref(data, timeout=t, where=self.device.name))

    def numpy_view(self) -> npt.NDArray[Any]:
        raise DeviceError(f"{self!r} is not addressable from this process; use to_numpy()")

    def copy_to_device(self, device: RayDevice) -> RemoteBuffer:
        """The data on ``device``, moved actor to actor (this process never holds it, no wait)."""
        self._check()
        if device is self.device:
            return self
        device._check_open()
        bid = next(device._ids)
        ref = device.actor.put.remote(bid, self.device.actor.get.remote(self.id))
        return RemoteBuffer(device, bid, self.shape, self.dtype, ref)

    def delete(self) -> None:
        if self._deleted is None:
            self._deleted = "deleted"
            self.device.actor.delete.remote([self.id])


def _owned(a: Any) -> npt.NDArray[Any]:
    arr = np.asarray(a)
    return arr if arr.flags.writeable else arr.copy()  # Ray hands out read-only object-store views


class RemoteExecutable:
    """A plan loaded on a ``RayDevice``: ``execute`` on remote buffers, or ``run`` on host arrays."""

    def __init__(self, device: RayDevice, pid: int, executable: Executable, ref: Any) -> None:
        self.device = device
        self.id = pid
        self.executable = executable
        self.signature = executable.signature
        self._ref = ref
        self._memo: dict[tuple[Any, ...], tuple[dict[str, int], list[tuple[int, ...]]]] = {}

    def __repr__(self) -> str:
        return f"<RemoteExecutable {self.executable.name} on {self.device.name}>"

    def _validated(
        self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any], vars: Mapping[str, int] | None
    ) -> tuple[dict[str, int], list[tuple[int, ...]]]:
        key: tuple[Any, ...] | None = (
            tuple(shapes),
            tuple(map(str, dtypes)),
            tuple(vars.items()) if vars else (),
        )
        try:
            hit = self._memo.get(key)  # type: ignore[arg-type]
        except TypeError:  # an unhashable var value: validated (and refused) below
            hit, key = None, None
        if hit is not None:  # the same shapes, dtypes and vars as an earlier call: the same verdict
            return hit
        sig = self.signature
        if len(shapes) != len(sig.inputs):
            raise ArgumentCountError(
                f"{self!r} takes {len(sig.inputs)} inputs ({[i.name for i in sig.inputs]}), got {len(shapes)}"
            )
        for spec, dt in zip(sig.inputs, dtypes, strict=True):
            if np.dtype(dt) != spec.dtype.np:
                raise DTypeMismatchError(f"{self!r}: input {spec.name!r} expects {spec.dtype.name}, got {dt}")
        given = dict(vars or {})
        if len(given) < len(sig.vars):
            given = {**sig.infer_vars(list(shapes)), **given}
        values = sig.var_values(given)
        sig.validate(list(shapes), [s.dtype for s in sig.inputs], values)
        result = dict(zip(sig.var_names, values, strict=True)), [tuple(s) for s in sig.output_shapes(values)]
        if key is not None:
            if len(self._memo) >= 64:
                self._memo.clear()
            self._memo[key] = result
        return result

    def execute(
        self,
        args: Sequence[RemoteBuffer],
        vars: Mapping[str, int] | None = None,
        *,
        donate: Sequence[int] = (),
    ) -> list[RemoteBuffer]:
        """Queue one run on the device; the outputs come back at once, not yet computed.

        Raises (here, before anything is sent):
            RemoteDeviceError: the device was closed.
            DeviceError: an argument on another device (``copy_to_device`` it first).
            BufferDeletedError, ShapeMismatchError, DTypeMismatchError, VarBoundsError,
            DonateIndexError: as a local ``execute``.
        """
        self.device._check_open()
        for a in args:
            if not isinstance(a, RemoteBuffer):
                raise ArgumentTypeError(f"{self!r}: arguments must be RemoteBuffers, got {type(a).__name__}")
            if a.device is not self.device:
                raise DeviceError(
                    f"{self!r}: {a!r} is on {a.device.name}, the plan on {self.device.name}; "
                    "move it with copy_to_device"
                )
            a._check()
        values, out_shapes = self._validated([a.shape for a in args], [a.dtype for a in args], vars)
        donated = _donated(self, donate, len(args))
        out_ids = [next(self.device._ids) for _ in out_shapes]
        ref = self.device.actor.execute.remote(self.id, [a.id for a in args], out_ids, values, donated)
        for i in donated:
            args[i]._deleted = f"donated to {self!r}"
        return [
            RemoteBuffer(self.device, bid, shape, spec.dtype.np, ref)
            for bid, shape, spec in zip(out_ids, out_shapes, self.signature.outputs, strict=True)
        ]

    def _run_ref(self, arrays: Sequence[npt.ArrayLike], vars: Mapping[str, int] | None) -> Any:
        self.device._check_open()
        arrs = [np.ascontiguousarray(a) for a in arrays]
        values, _ = self._validated([a.shape for a in arrs], [a.dtype for a in arrs], vars)
        return self.device.actor.run.remote(self.id, arrs, values)

    async def run_async(
        self, arrays: Sequence[npt.ArrayLike], vars: Mapping[str, int] | None = None
    ) -> list[npt.NDArray[Any]]:
        """Host arrays in, host arrays out, in one actor call, awaited without blocking the loop."""
        out = await await_ref(
            self._run_ref(arrays, vars), timeout=self.device.timeout, where=self.device.name
        )
        return [_owned(o) for o in out]

    def run(
        self, arrays: Sequence[npt.ArrayLike], vars: Mapping[str, int] | None = None
    ) -> list[npt.NDArray[Any]]:
        """``run_async`` for blocking callers."""
        out = get_ref(self._run_ref(arrays, vars), timeout=self.device.timeout, where=self.device.name)
        return [_owned(o) for o in out]


def _donated(exe: RemoteExecutable, donate: Sequence[int], n: int) -> list[int]:
    from ..errors import DonateIndexError

    out = []
    for i in donate:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= int(i) < n:
            raise DonateIndexError(f"{exe!r}: donate index {i!r} out of range for {n} inputs")
        out.append(int(i))
    return out
