"""The async runtime: a PJRT-style client with device actors, memory spaces and buffers.

Executions are enqueued on device actors and return buffers at once; readiness is awaited through
futures on asyncio or trio; the host event loop never blocks (DESIGN.md invariants 5-8).
"""

from ._buffer import Buffer as Buffer
from ._buffer import BufferStatistics as BufferStatistics
from ._buffer import HostBufferSemantics as HostBufferSemantics
from ._client import Client as Client
from ._client import ClientStatistics as ClientStatistics
from ._client import default_client as default_client
from ._client import parse_devices as parse_devices
from ._description import DeviceDescription as DeviceDescription
from ._device import Device as Device
from ._device import DeviceStatistics as DeviceStatistics
from ._device import InlinePolicy as InlinePolicy
from ._events import Event as Event
from ._executable import ExecutableStatistics as ExecutableStatistics
from ._executable import LoadedExecutable as LoadedExecutable
from ._layout import COL_MAJOR as COL_MAJOR
from ._layout import ROW_MAJOR as ROW_MAJOR
from ._layout import Layout as Layout
from ._memory import ALIGNMENT as ALIGNMENT
from ._memory import MemoryKind as MemoryKind
from ._memory import MemorySpace as MemorySpace
from ._memory import MemoryStats as MemoryStats
from ._memory import host_array as host_array
from ._sharding import ShardedBuffer as ShardedBuffer
from ._sharding import Sharding as Sharding
from ._wakeup import WakerStatistics as WakerStatistics
from ._wakeup import current_waker as current_waker
from ._wakeup import wait_event as wait_event

__all__ = [
    "ALIGNMENT",
    "COL_MAJOR",
    "ROW_MAJOR",
    "Buffer",
    "BufferStatistics",
    "Client",
    "ClientStatistics",
    "Device",
    "DeviceDescription",
    "DeviceStatistics",
    "Event",
    "ExecutableStatistics",
    "HostBufferSemantics",
    "InlinePolicy",
    "Layout",
    "LoadedExecutable",
    "MemoryKind",
    "MemorySpace",
    "MemoryStats",
    "ShardedBuffer",
    "Sharding",
    "WakerStatistics",
    "current_waker",
    "default_client",
    "host_array",
    "parse_devices",
    "wait_event",
]
