"""Device kinds (``cpu``, ``reference``, plugins), their compilers and executable deserializers."""

from ._host import HostExecutable as HostExecutable
from ._protocol import Compiler as Compiler
from ._protocol import Deserializer as Deserializer
from ._protocol import DeviceKind as DeviceKind
from ._registry import device_kinds as device_kinds
from ._registry import executable_kind as executable_kind
from ._registry import get_deserializer as get_deserializer
from ._registry import get_device_kind as get_device_kind
from ._registry import register_compiler as register_compiler
from ._registry import register_deserializer as register_deserializer
from ._registry import register_device_kind as register_device_kind

register_deserializer(HostExecutable.kind, HostExecutable.deserialize)

__all__ = [
    "Compiler",
    "Deserializer",
    "DeviceKind",
    "HostExecutable",
    "device_kinds",
    "executable_kind",
    "get_deserializer",
    "get_device_kind",
    "register_compiler",
    "register_deserializer",
    "register_device_kind",
]
