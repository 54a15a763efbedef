"""Serving many streams and chaining devices: ``StreamMux``, ``Pipeline`` and chunk sources.

``StreamMux`` runs one batched recurrent plan (a ``BatchedStep`` with a device-side slot pool)
for many live streams; ``Pipeline`` joins stages on different devices with bounded streams;
``wav_chunks`` / ``array_chunks`` read audio ahead of the compute in worker threads or tasks.
"""

from ._device_pool import DevicePool as DevicePool
from ._device_pool import Launched as Launched
from ._device_pool import PooledStep as PooledStep
from ._errors import AdmissionTimeoutError as AdmissionTimeoutError
from ._errors import BacklogFullError as BacklogFullError
from ._errors import MuxClosedError as MuxClosedError
from ._errors import StepCancelledError as StepCancelledError
from ._errors import StreamBusyError as StreamBusyError
from ._errors import StreamClosedError as StreamClosedError
from ._errors import StreamIdleError as StreamIdleError
from ._host_step import HostBatchedStep as HostBatchedStep
from ._host_step import StepFunction as StepFunction
from ._host_step import run_unbatched as run_unbatched
from ._host_step import toy_step as toy_step
from ._io import ChunkSource as ChunkSource
from ._io import ChunkSourceStatistics as ChunkSourceStatistics
from ._io import Rechunker as Rechunker
from ._io import WavHeader as WavHeader
from ._io import array_chunks as array_chunks
from ._io import read_wav_header as read_wav_header
from ._io import wav_chunks as wav_chunks
from ._mux import MuxStatistics as MuxStatistics
from ._mux import StreamMux as StreamMux
from ._pipeline import Pipeline as Pipeline
from ._pipeline import PipelineStatistics as PipelineStatistics
from ._pipeline import Stage as Stage
from ._pipeline import StageStatistics as StageStatistics
from ._pipeline import execute_stage as execute_stage
from ._protocol import BatchedStep as BatchedStep
from ._stream import MuxStream as MuxStream
from ._stream import StepFuture as StepFuture
from ._stream import StreamStatistics as StreamStatistics

__all__ = [
    "AdmissionTimeoutError",
    "ChunkSource",
    "ChunkSourceStatistics",
    "DevicePool",
    "PooledStep",
    "Launched",
    "Pipeline",
    "PipelineStatistics",
    "Rechunker",
    "Stage",
    "StageStatistics",
    "WavHeader",
    "array_chunks",
    "execute_stage",
    "read_wav_header",
    "wav_chunks",
    "BacklogFullError",
    "BatchedStep",
    "HostBatchedStep",
    "MuxClosedError",
    "MuxStatistics",
    "MuxStream",
    "StepCancelledError",
    "StepFuture",
    "StepFunction",
    "StreamBusyError",
    "StreamClosedError",
    "StreamIdleError",
    "StreamMux",
    "StreamStatistics",
    "run_unbatched",
    "toy_step",
]
