"""Commands a device queue runs in order: execute, host-to-device, device-to-host, device-to-device.

A command holds a *use* of every buffer it touches (taken at enqueue, dropped in ``finish``), so
memory of a buffer deleted meanwhile is freed only after the command is done (invariant 8), and
a launcher never sees a freed address. ``run`` never raises: an exception becomes the value of
the command's event, which poisons its outputs (invariant 6).
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from .._log import get_logger
from ..errors import JitError, KernelRuntimeError
from ..graph._node import allocate_array
from ._events import Event
from ._uses import release_command_uses

if TYPE_CHECKING:
    from ..compiler._executable import Launcher, Signature
    from ._buffer import Buffer
    from ._memory import Block

__all__ = [
    "Command",
    "CopyCommand",
    "ExecuteCommand",
    "HostToDeviceCommand",
    "RelayoutCommand",
    "ToHostCommand",
    "launch_error",
    "target_block",
]

_perf_ns = time.perf_counter_ns
_log = get_logger("asyncjit.runtime")
_CHEAP_BYTES = 1 << 20
"""Copies up to this size count as cheap (a worker may hold earlier completions across them)."""


_KERNEL_ERRORS: dict[type[BaseException], type[KernelRuntimeError]] = {}


def _kernel_error_type(cls: type[BaseException]) -> type[KernelRuntimeError]:
    """``KernelRuntimeError`` that is also ``cls``: ``except ValueError`` keeps catching a
    kernel's ``ValueError``, ``except KernelRuntimeError`` catches every kernel failure."""
    made = _KERNEL_ERRORS.get(cls)
    if made is None:
        try:
            made = type(f"KernelRuntimeError[{cls.__name__}]", (KernelRuntimeError, cls), {})
        except TypeError:  # a layout that cannot be combined (rare builtins): the plain class
            made = KernelRuntimeError
        _KERNEL_ERRORS[cls] = made
    return made


def launch_error(exc: BaseException, plan: str = "") -> BaseException:
    """What a launcher raised, as the error that poisons the outputs.

    A ``JitError`` (already typed) or a ``BaseException`` that is not an ``Exception`` stays as
    it is; any other exception becomes a ``KernelRuntimeError`` naming the plan that also
    subclasses the original type, with the original as ``__cause__`` and its traceback.

    The runtime's own frame is dropped from the traceback: the error lives as long as the
    buffers it poisons, and that frame holds the command (or the inputs), so keeping it would
    keep those buffers' memory alive through a reference cycle until the garbage collector
    runs. The launcher's frames stay.
    """
    tb = exc.__traceback__
    tb = tb.tb_next if tb is not None else None
    if isinstance(exc, JitError) or not isinstance(exc, Exception):
        return exc.with_traceback(tb)
    cls = _kernel_error_type(type(exc))
    wrapped = cls.__new__(cls)
    Exception.__init__(wrapped, f"kernel failure in plan {plan or '?'!r}: {type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    exc.__traceback__ = tb
    return wrapped.with_traceback(tb)


class PlanTiming:
    """Per (plan, device): a moving average of the launcher's wall time, for the inline choice."""

    __slots__ = ("calls", "ema_ns", "plan")

    def __init__(self, plan: str) -> None:
        self.plan = plan
        self.ema_ns = -1.0
        self.calls = 0

    def observe(self, ns: int) -> None:
        self.calls += 1
        self.ema_ns = float(ns) if self.ema_ns < 0 else 0.8 * self.ema_ns + 0.2 * ns


class Command:
    """Base: ``inputs`` are read, ``outputs`` written; both hold one use until ``finish``."""

    __slots__ = ("event", "inputs", "outputs")
    counted = True
    label = "command"

    def __init__(self, event: Event, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        self.event = event
        self.inputs = inputs
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label} {self.event!r}>"

    def inputs_ready(self) -> bool:
        for b in self.inputs:  # noqa: SIM110 - a plain loop: no generator on the hot path
            if not b._event._done:
                return False
        return True

    def wait_inputs(self) -> Event | None:
        """Block until every input is done (only other devices' can be pending); the failed one."""
        bad = None
        for b in self.inputs:
            ev = b._event
            if not ev._done:
                ev.wait_blocking()
            if bad is None and ev._error is not None:
                bad = ev
        return bad

    def run(self) -> BaseException | None:
        """Do the work (inputs are done and healthy); return the error instead of raising."""
        return None

    def cheap(self, limit_ns: float) -> bool:
        """Known to run in under ``limit_ns``: the worker may hold earlier completions across it."""
        return True

    def signal(self, error: BaseException | None, poisoned_by: Event | None = None) -> None:
        """Fire the event: done, failed with ``error``, or poisoned by an input's event."""
        if poisoned_by is not None:
            self.event.poison_from(poisoned_by)
        elif error is not None:
            self.event.fail(error)
        else:
            self.event.set()

    def finish(self, error: BaseException | None, poisoned_by: Event | None = None) -> None:
        """Drop the uses of every buffer (memory of deleted ones is freed), then ``signal``: a
        task woken by the event must already see the command gone from its buffers' use counts
        (it may donate one of them at once)."""
        release_command_uses(self.inputs, self.outputs)
        self.signal(error, poisoned_by)


class Noop(Command):
    """Used to calibrate the thread hop and to mark the end of a queue."""

    __slots__ = ()
    counted = False
    label = "noop"


class ExecuteCommand(Command):
    __slots__ = ("addrs", "launcher", "signature", "timing", "values")
    label = "execute"

    def __init__(
        self,
        event: Event,
        inputs: Sequence[Buffer],
        outputs: Sequence[Buffer],
        launcher: Launcher,
        addrs: list[int],
        values: tuple[int, ...],
        timing: PlanTiming,
    ) -> None:
        self.event = event
        self.inputs = inputs
        self.outputs = outputs
        self.launcher = launcher
        self.addrs = addrs
        self.values = values
        self.timing = timing
        self.signature: Signature | None = None  # set for plans that compute sizes

    def cheap(self, limit_ns: float) -> bool:
        return 0 <= self.timing.ema_ns < limit_ns

    def run(self) -> BaseException | None:
        timing = self.timing
        try:
            if timing.calls & 7:  # time one run in eight: enough for the moving average
                timing.calls += 1
                self.launcher(self.addrs, self.values)
            else:
                t0 = _perf_ns()
                self.launcher(self.addrs, self.values)
                timing.observe(_perf_ns() - t0)
            if self.signature is not None:
                shapes = actual_shapes(self.signature, self.launcher, self.values)
                for buf, shape in zip(self.outputs, shapes or (), strict=bool(shapes)):
                    buf.shape, buf.nbytes = shape, math.prod(shape) * buf.dtype.itemsize
        except BaseException as exc:  # errors are values: poison the outputs
            return launch_error(exc, timing.plan)
        return None


def actual_shapes(
    signature: Signature, launcher: Launcher, values: Sequence[int]
) -> list[tuple[int, ...]] | None:
    """Output shapes after a run of a plan that computes sizes (outputs are allocated at their
    bounds; kernels write the actual shape from the start of each buffer); None when no output
    shape uses one (a plan whose only data vars are index checks: its run is checked alone).

    Raises:
        VarBoundsError: a computed size was out of bounds, naming the op.
        IndexOutOfRangeError: an index check counted indices outside their axis.
    """
    used, raw = launcher.data_sizes()  # type: ignore[attr-defined]
    signature.check_data(used, raw)
    if not signature.sized_outputs:
        return None
    return signature.output_shapes((*values, *used))


def target_block(out: Buffer) -> Block:
    """The memory a command will write ``out`` into, taken when the command is made.

    A command writes the memory it was given, whatever becomes of the ``Buffer`` meanwhile: a
    pending output may be donated to an execution queued behind its producer, which takes the
    block from the ``Buffer`` at once (``take_donated``) and reads it once this command has run
    (as ``ExecuteCommand`` keeps its output addresses from the submit)."""
    block = out._block
    assert block is not None  # a fresh output: nothing can have taken it yet
    return block


class CopyCommand(Command):
    """Device-to-device (or memory-space-to-memory-space) copy of ``nbytes``."""

    __slots__ = ("dst", "nbytes")
    label = "d2d"

    def __init__(self, event: Event, src: Buffer, dst: Buffer) -> None:
        super().__init__(event, (src,), (dst,))
        self.nbytes = src.nbytes
        self.dst = target_block(dst)

    def cheap(self, limit_ns: float) -> bool:
        return self.nbytes <= _CHEAP_BYTES

    def run(self) -> BaseException | None:
        src = self.inputs[0]._block
        assert src is not None  # it holds a use: neither freed nor donated (take_donated refuses)
        ctypes.memmove(self.dst.addr, src.addr, self.nbytes)
        return None


class HostToDeviceCommand(Command):
    """The asynchronous half of ``IMMUTABLE_UNTIL_TRANSFER_COMPLETES``: copy, then tell the host."""

    __slots__ = ("dst", "host", "on_done")
    label = "h2d"

    def __init__(
        self, event: Event, dst: Buffer, host: npt.NDArray[Any], on_done: Callable[[], None] | None
    ) -> None:
        super().__init__(event, (), (dst,))
        self.host: npt.NDArray[Any] | None = host
        self.on_done = on_done
        self.dst = target_block(dst)

    def cheap(self, limit_ns: float) -> bool:
        return self.host is None or self.host.nbytes <= _CHEAP_BYTES

    def run(self) -> BaseException | None:
        assert self.host is not None
        ctypes.memmove(self.dst.addr, self.host.ctypes.data, self.host.nbytes)
        return None

    def finish(self, error: BaseException | None, poisoned_by: Event | None = None) -> None:
        self.host = None  # done with the host buffer: the caller may mutate or free it now
        super().finish(error, poisoned_by)
        if self.on_done is not None:
            try:
                self.on_done()
            except Exception as exc:  # the user's callback must not take the device down
                _log.error("h2d.on_done_failed", error=repr(exc))


class ToHostCommand(Command):
    """Device-to-host: copy into a fresh numpy array on the worker (``copy_to_host_async``)."""

    __slots__ = ("result",)
    label = "d2h"

    def __init__(self, event: Event, src: Buffer) -> None:
        super().__init__(event, (src,), ())
        self.result: npt.NDArray[Any] | None = None

    def cheap(self, limit_ns: float) -> bool:
        return self.inputs[0].nbytes <= _CHEAP_BYTES

    def run(self) -> BaseException | None:
        src = self.inputs[0]
        block = src._block
        assert block is not None
        if src._layout.kind != "row_major":
            self.result = src._layout.from_physical(
                block.array[: src.nbytes].view(src.dtype.np), src.shape
            ).copy()
            return None
        out = allocate_array(src.shape, src.dtype.np, "a host copy")
        ctypes.memmove(out.ctypes.data, block.addr, src.nbytes)
        self.result = out
        return None


class RelayoutCommand(Command):
    """Copy into another layout (row-major, column-major, tiled) on the target's queue."""

    __slots__ = ("dst",)
    label = "relayout"

    def __init__(self, event: Event, src: Buffer, dst: Buffer) -> None:
        super().__init__(event, (src,), (dst,))
        self.dst = target_block(dst)

    def cheap(self, limit_ns: float) -> bool:
        return self.inputs[0].nbytes <= _CHEAP_BYTES // 4

    def run(self) -> BaseException | None:
        src, dst = self.inputs[0], self.outputs[0]
        s_block, d_block = src._block, self.dst
        assert s_block is not None  # it holds a use
        logical = src._layout.from_physical(s_block.array[: src.nbytes].view(src.dtype.np), src.shape)
        phys = d_block.array[: dst.nbytes].view(dst.dtype.np).reshape(dst._layout.physical_shape(dst.shape))
        phys[...] = dst._layout.to_physical(logical)
        return None
