"""The ``JitError`` hierarchy, in one place.

The variants named by the jit-wrapper design (``NotPreparedError``, ``BuildError``, ...) are the
user-facing set. Others are named for who is at fault. Where an error resembles a builtin, it also
subclasses it, so existing ``except ValueError`` clauses keep working.
"""

from __future__ import annotations

__all__ = [
    "AdmissionTimeoutError",
    "ArgumentCountError",
    "ArgumentTypeError",
    "AudioFormatError",
    "BacklogFullError",
    "BufferDeletedError",
    "BuildError",
    "CacheError",
    "ClosedError",
    "CompileError",
    "DTypeMismatchError",
    "DeviceError",
    "DeviceMismatchError",
    "DeviceNotFoundError",
    "DimDivisionError",
    "DonateIndexError",
    "DonatedBufferError",
    "DonationError",
    "DuplicateInputBufferError",
    "IndexOutOfRangeError",
    "InputBufferNotFoundError",
    "InvalidArgumentError",
    "JitError",
    "KernelRuntimeError",
    "LayoutError",
    "ModelFormatError",
    "MuxClosedError",
    "NotPreparedError",
    "OutOfMemoryError",
    "ObjectCodeError",
    "RemoteDeviceError",
    "RemoteTimeoutError",
    "ReplicaDiedError",
    "OnnxImportError",
    "OutputLayoutMismatchError",
    "ScalarOverflowError",
    "ServiceFullError",
    "ShapeMismatchError",
    "ShardingError",
    "SlotIndexError",
    "StaticArgumentError",
    "StepCancelledError",
    "StreamBusyError",
    "StreamClosedError",
    "StreamIdleError",
    "TensorError",
    "UnsupportedDTypeError",
    "UnsupportedOpError",
    "VarBoundsError",
    "WouldBlock",
]


class JitError(Exception):
    """Base class of every error asyncjit raises on purpose."""


class NotPreparedError(JitError):
    """A per-step method was called before ``prepare``, or no output buffer exists yet."""


class InputBufferNotFoundError(JitError, KeyError):
    """An input name or buffer id could not be resolved inside a prepared plan."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


class DuplicateInputBufferError(JitError):
    """Two declared inputs map to the same device buffer."""


class BuildError(JitError):
    """The user's ``build`` raised; the original exception is the ``__cause__``."""


class TensorError(JitError, ValueError):
    """A tensor operation was given operands it cannot accept (shape, dtype, axis)."""


class ShapeMismatchError(TensorError):
    """An argument's shape does not match the shape its spec requires."""


class ScalarOverflowError(TensorError, OverflowError):
    """A Python int next to an int tensor does not fit the tensor's dtype (``x_uint8 + (-1)``,
    ``x_int32 * 2**40``): refused when the graph is built, as numpy 2 and JAX do, never wrapped."""


class DTypeMismatchError(TensorError, TypeError):
    """An argument's dtype does not match the dtype its spec requires."""


class UnsupportedDTypeError(JitError, TypeError):
    """A dtype asyncjit does not compute with (complex, strings, objects, ...): cast the data first.

    Only a ``TypeError`` (not a ``ValueError`` like ``DTypeMismatchError``): it says what the data
    is, not that it disagrees with a spec.
    """


class VarBoundsError(TensorError):
    """A symbolic var was bound to a value outside its declared ``[min, max]``, or not bound."""


class IndexOutOfRangeError(TensorError, IndexError):
    """An index a checked gather or scatter reads (``Tensor.checked_index``: every ONNX
    ``Gather*``/``Scatter*``) is outside its axis, found during the run: the run's outputs are
    not delivered (native code clamped the reads, so nothing outside the axis was touched)."""


class ArgumentCountError(ShapeMismatchError, TypeError):
    """Your call passed more or fewer arguments (inputs, buffers, outputs) than the plan takes."""


class InvalidArgumentError(JitError, ValueError):
    """Your call passed an option value outside what it accepts (a negative size or timeout, an
    unknown policy name, a malformed device spec, a setter called after ``prepare``)."""


class ArgumentTypeError(JitError, TypeError):
    """Your call passed an object of the wrong kind (a list where a ``Buffer`` or array is needed)."""


class SlotIndexError(InvalidArgumentError, IndexError):
    """A stream slot outside a slot pool's ``0..num_slots-1`` (or beyond the rows it holds while
    steps are in flight)."""


class DimDivisionError(InvalidArgumentError, ZeroDivisionError):
    """A symbolic dim was floor-divided (or taken modulo) by zero or a negative int."""


class DeviceError(JitError):
    """A device or buffer operation failed (bad device, wrong memory space, closed client)."""


class BufferDeletedError(DeviceError):
    """A buffer was used after ``delete()``, or after being donated to an execution."""


class DonatedBufferError(BufferDeletedError):
    """A buffer was used after being donated: its memory now belongs to the execution's output."""


class OutOfMemoryError(DeviceError, MemoryError):
    """A device could not allocate what a plan or a buffer needs (its arena sized for the largest
    var values, an output, a transfer). Nothing ran; smaller var bounds shrink a plan's arena."""


class DonationError(DeviceError, ValueError):
    """A donation that cannot be honoured: a buffer another pending command still reads, an
    input donated twice, or (at compile time) a donated input no output can be written over."""


class DeviceMismatchError(DeviceError, ValueError):
    """Buffers and devices do not line up: an argument list for one device holds a buffer of
    another, or two device lists that must match (shardings, replicas) differ."""


class LayoutError(JitError, ValueError):
    """A buffer's memory layout does not fit: an unknown layout, a tile that does not divide the
    shape, or a plan given a layout it does not take (relayout with ``copy_to_device``)."""


class ShardingError(JitError, ValueError):
    """A ``Sharding`` cannot place this array: the axis is out of range, does not divide over
    the devices (and a ragged last shard was not allowed), or leaves a device an empty shard."""


class DeviceNotFoundError(DeviceError, IndexError):
    """A device index (or kind) names no device of this client."""


class DonateIndexError(DeviceError, IndexError):
    """``donate=`` named an input that does not exist (out of range, or not an int)."""


class ClosedError(DeviceError):
    """The client or device was closed by your code, and cannot accept more work."""


class OutputLayoutMismatchError(JitError):
    """``JitRecurrent`` found an output that is not ``[head | h | c]`` of the declared sizes."""


class KernelRuntimeError(JitError, RuntimeError):
    """A compiled kernel (or its host-side launcher) failed while executing.

    Named so that it does not shadow the builtin ``RuntimeError``; it still subclasses it.
    """


class CompileError(JitError):
    """Lowering or native compilation of a graph failed; this is asyncjit's bug or a limit."""


class ObjectCodeError(CompileError):
    """Object code (from the disk cache or a serialized executable) is malformed or for another host.

    It is refused before LLVM's loader sees it; the cache treats it as a miss and recompiles.
    """


class CacheError(JitError):
    """The compile cache directory is unusable (for example writable by other users)."""


class StaticArgumentError(JitError, TypeError):
    """A static argument of ``jit`` is unhashable or otherwise unusable as a cache key."""


class ModelFormatError(JitError, ValueError):
    """A model or weights file is missing, malformed, or not the network we expect."""


class AudioFormatError(JitError, ValueError):
    """Audio a model cannot take: a file that is empty, not audio, truncated or ends in a partial
    frame, an unsupported sample rate, a chunk of the wrong size, or samples that are NaN or
    infinite. The message names the file (or chunk) and says how to fix it.

    A path that cannot be opened at all raises the builtin ``OSError`` subclass instead
    (``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError``), as ``open()`` does.
    """


class StreamIdleError(JitError):
    """Your stream sent no step for ``idle_timeout`` seconds, so the mux closed it and freed its slot.

    Open a new stream (its state starts afresh) or raise ``idle_timeout``.
    """


class StreamClosedError(ClosedError):
    """Your code closed this stream (or left its ``async with``); it accepts no more steps."""


class MuxClosedError(ClosedError):
    """The ``StreamMux`` is not serving: it was never entered with ``async with``, or has exited."""


class AdmissionTimeoutError(JitError, TimeoutError):
    """Every slot stayed busy for ``admission_timeout`` seconds while this stream waited in the backlog."""


class BacklogFullError(JitError):
    """``max_streams`` streams are open and the backlog is full: the service is over capacity."""


class StreamBusyError(JitError):
    """Two tasks waited to submit on one stream at once; give each producer its own stream."""


class StepCancelledError(JitError):
    """The step was cancelled before it was batched, so it never ran and has no result."""


class WouldBlock(JitError):
    """Raised by ``X_nowait`` functions when ``X`` would have to wait."""


class OnnxImportError(ModelFormatError):
    """An ONNX file could not be imported: unreadable or truncated, an input dim without bounds,
    a shape that depends on data, or a construct the importer cannot lower. The message names
    the file and, where there is one, the node."""


class UnsupportedOpError(OnnxImportError):
    """An ONNX model uses ops (or op versions, or attributes) asyncjit has no lowering for.

    ``nodes`` lists every offending ``(node name, op type, reason)``, all found at load time.
    """

    def __init__(self, message: str, nodes: tuple[tuple[str, str, str], ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class RemoteDeviceError(DeviceError):
    """A device in another process (a Ray actor) died or cannot be reached; the message names it.

    Buffers that lived there are gone: ``to_numpy`` on them raises this too.
    """


class ReplicaDiedError(RemoteDeviceError):
    """The replica serving this stream died; its state died with it. Other streams keep running
    and a replacement replica takes new streams: open a new stream to continue."""


class RemoteTimeoutError(RemoteDeviceError, TimeoutError):
    """A remote device or replica did not answer within its timeout (it is then treated as dead)."""


class ServiceFullError(BacklogFullError):
    """Every replica of a ``serve_streams`` service holds its ``max_streams``: the service is full."""
