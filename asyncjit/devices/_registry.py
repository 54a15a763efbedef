"""Registries of device kinds, their compilers, and executable deserializers.

The CPU compiler plugs in later with one call, ``register_compiler("cpu", compile_fn)``;
until then ``Client.compile`` accepts a ``compiler=`` argument or an already-built ``Executable``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import attrs

from ..compiler._executable import Executable
from ..errors import DeviceError, InvalidArgumentError
from ._protocol import Compiler, Deserializer, DeviceKind

__all__ = [
    "device_kinds",
    "executable_kind",
    "get_deserializer",
    "get_device_kind",
    "register_compiler",
    "register_deserializer",
    "register_device_kind",
]

_lock = threading.Lock()
_kinds: dict[str, DeviceKind] = {
    "cpu": DeviceKind("cpu", "host CPU; plans compiled to native code with LLVM"),
    "reference": DeviceKind(
        "reference", "host CPU; loads any Executable (the numpy reference interpreter, host functions)"
    ),
}
_deserializers: dict[str, Deserializer] = {}


def register_device_kind(kind: DeviceKind, *, replace: bool = False) -> None:
    """Make ``Client(devices="<name>:N")`` possible for a new kind.

    Raises:
        ValueError: if the name is taken and ``replace`` is false.
    """
    with _lock:
        if kind.name in _kinds and not replace:
            raise InvalidArgumentError(f"device kind {kind.name!r} is already registered; pass replace=True")
        _kinds[kind.name] = kind


def get_device_kind(name: str) -> DeviceKind:
    """Raises: DeviceError naming the registered kinds."""
    try:
        return _kinds[name]
    except KeyError:
        raise DeviceError(f"unknown device kind {name!r}; registered kinds: {sorted(_kinds)}") from None


def device_kinds() -> tuple[str, ...]:
    return tuple(sorted(_kinds))


def register_compiler(kind_name: str, compiler: Compiler | None) -> None:
    """Install (or remove, with None) the compiler ``Client.compile`` uses for a device kind."""
    with _lock:
        _kinds[kind_name] = attrs.evolve(get_device_kind(kind_name), compiler=compiler)


def set_device_plugins(kind_name: str, plugins: Sequence[Any]) -> None:
    """The compiler plugins (objects or installed names, in order of preference) used by compiles
    for devices of ``kind_name`` that do not pass ``plugins=`` themselves (``()``: none)."""
    with _lock:
        _kinds[kind_name] = attrs.evolve(get_device_kind(kind_name), plugins=tuple(plugins))


def executable_kind(executable: Executable) -> str:
    """The key serialized executables are filed under: ``type(exe).kind`` or the class name."""
    kind = getattr(type(executable), "kind", None)
    return kind if isinstance(kind, str) else type(executable).__qualname__


def register_deserializer(kind: str, deserializer: Deserializer, *, replace: bool = True) -> None:
    with _lock:
        if kind in _deserializers and not replace:
            raise InvalidArgumentError(f"a deserializer for {kind!r} is already registered")
        _deserializers[kind] = deserializer


def get_deserializer(kind: str) -> Deserializer:
    """Raises: DeviceError naming the kinds that can be deserialized."""
    try:
        return _deserializers[kind]
    except KeyError:
        raise DeviceError(
            f"no deserializer for executables of kind {kind!r} (known: {sorted(_deserializers)}); "
            "register one with asyncjit.devices.register_deserializer or pass deserializer="
        ) from None
