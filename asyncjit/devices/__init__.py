"""Device kinds (``cpu``, ``reference``, plugins), their compilers and executable deserializers."""

from ._builtin import compile_for_cpu as compile_for_cpu
from ._builtin import compile_for_reference as compile_for_reference
from ._builtin import install as _install_builtin
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
from ._registry import set_device_plugins as set_device_plugins

register_deserializer(HostExecutable.kind, HostExecutable.deserialize)
_install_builtin()

__all__ = [
    "Compiler",
    "compile_for_cpu",
    "compile_for_reference",
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
    "set_device_plugins",
]
