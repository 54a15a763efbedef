"""The compilers of the built-in device kinds, registered when ``asyncjit.devices`` is imported.

``Client.compile(program, device)`` takes ``program = (outputs, inputs)`` (tensors or nodes): a
``cpu`` device compiles it with LLVM (``asyncjit.compiler.compile``), a ``reference`` device wraps
it in a ``ReferenceExecutable`` that the numpy interpreter runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compiler import CpuExecutable, ReferenceExecutable, deserialize
from ..compiler import compile as compile_graph
from ..compiler._executable import Executable
from ..errors import ArgumentTypeError
from ._registry import register_compiler, register_deserializer

__all__ = ["compile_for_cpu", "compile_for_reference", "install"]


def _split(program: Any) -> tuple[Sequence[Any], Sequence[Any]]:
    try:
        outputs, inputs = program
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"a program to compile is a pair (outputs, inputs) of tensors, got {type(program).__qualname__}"
        ) from None
    return list(outputs), list(inputs)


def compile_for_cpu(program: Any, **options: Any) -> Executable:
    """LLVM-compile ``(outputs, inputs)``; options are those of ``asyncjit.compiler.compile``
    (``plugins`` defaults to the ``cpu`` kind's, see ``set_device_plugins``)."""
    from ._registry import get_device_kind

    outputs, inputs = _split(program)
    kind_plugins = get_device_kind("cpu").plugins
    if "plugins" not in options and kind_plugins:
        options = {**options, "plugins": kind_plugins}
    return compile_graph(outputs, inputs, **options)


def compile_for_reference(program: Any, **options: Any) -> Executable:
    """Wrap ``(outputs, inputs)`` for the numpy reference interpreter (options: ``vars``, ``name``)."""
    outputs, inputs = _split(program)
    return ReferenceExecutable(outputs, inputs, options.get("vars"), name=options.get("name", "plan"))


def install() -> None:
    """Register the built-in compilers and the CPU executable deserializer."""
    register_compiler("cpu", compile_for_cpu)
    register_compiler("reference", compile_for_reference)
    kind = getattr(CpuExecutable, "kind", None) or CpuExecutable.__qualname__
    register_deserializer(kind, deserialize)
