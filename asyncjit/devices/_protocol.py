"""The device-kind plugin protocol: what a kind supplies to the runtime.

Every device kind shipped today runs on host RAM with the same actor (``runtime.Device``); kinds
differ in how they *compile* a program into an ``Executable``. A kind is therefore a name, a
description and an optional compiler. Accelerator plugins would add memory and launch hooks here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ..compiler._executable import Executable

__all__ = ["Compiler", "Deserializer", "DeviceKind"]


class Compiler(Protocol):
    """Turns a program (a graph, a traced function, ...) into a device-independent ``Executable``."""

    def __call__(self, program: Any, **options: Any) -> Executable: ...


Deserializer = Callable[[bytes], Executable]
"""Rebuilds an ``Executable`` from the payload its ``serialize()`` produced."""


@attrs.frozen
class DeviceKind:
    """A kind of device: ``cpu`` (LLVM-compiled plans), ``reference`` (any executable), plugins."""

    name: str
    description: str
    compiler: Compiler | None = attrs.field(default=None, eq=False)
    plugins: tuple[Any, ...] = attrs.field(default=(), eq=False)
    """Compiler plugins (objects or installed names) for compiles on this kind that choose none."""
