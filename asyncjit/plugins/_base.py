"""``Plugin``: the base class of compiler plugins (identity, options, per-op support).

A plugin has a name, a manufacturer, a version and the hardware it supports (SoC/CPU model
names), and takes options at creation: a ``dict``, overridden by environment variables
``ASYNCJIT_PLUGIN_<NAME>_<OPTION>`` (name and option upper-cased, ``-`` as ``_``), so a deployment
tunes a plugin without code. Per-op support is ``ops`` (op names) and ``accepts(node)`` (a
predicate on top); ``force`` (node ids or a predicate given as the ``force`` option) claims
nodes the plugin supports even when ``accepts`` would leave them to the CPU compiler.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..compiler._partition import CompiledResult, PluginKernel, Subgraph
from ..errors import ArgumentTypeError, CompileError
from ..graph import Node

__all__ = ["Plugin", "env_options"]


def _env_name(plugin: str, option: str) -> str:
    return "ASYNCJIT_PLUGIN_" + re.sub(r"[^A-Z0-9]", "_", f"{plugin}_{option}".upper())


def env_options(plugin: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` with every option that has an ``ASYNCJIT_PLUGIN_<NAME>_<OPTION>`` variable
    replaced by the variable's text, converted to the default's type (bool, int, float, str)."""
    out = dict(defaults)
    for key, default in defaults.items():
        raw = os.environ.get(_env_name(plugin, key))
        if raw is None:
            continue
        if isinstance(default, bool):
            out[key] = raw.strip().lower() in ("1", "true", "yes", "on")
        elif isinstance(default, int):
            out[key] = int(raw)
        elif isinstance(default, float):
            out[key] = float(raw)
        elif isinstance(default, str) or default is None:
            out[key] = raw
    return out


class Plugin:
    """Base class: subclass it, set the identity class attributes and ``ops``, implement
    ``compile`` (and ``load``/``invoke`` when ``compile`` returns bytecode)."""

    name: ClassVar[str] = ""
    manufacturer: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    hardware: ClassVar[tuple[str, ...]] = ()
    ops: ClassVar[frozenset[str]] = frozenset()
    default_options: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        given = {**(options or {}), **kwargs}
        unknown = set(given) - set(self.default_options) - {"force", "soc"}
        if unknown:
            raise ArgumentTypeError(f"plugin {self.name!r} has no option(s) {sorted(unknown)}")
        merged = env_options(self.name, {**self.default_options, "soc": given.get("soc", "")})
        merged.update({k: v for k, v in given.items() if k != "force"})
        self.options: dict[str, Any] = merged
        force = given.get("force")
        self._force: Callable[[Node], bool] | None
        if force is None:
            self._force = None
        elif callable(force):
            self._force = force
        else:
            ids = frozenset(int(i) for i in force)
            self._force = lambda n: n.id in ids

    def __repr__(self) -> str:
        return f"<plugin {self.name} {self.version} by {self.manufacturer or '?'} options={self.options}>"

    def info(self) -> dict[str, Any]:
        """Identity for tooling (``asyncjit plugins``)."""
        return {
            "name": self.name,
            "manufacturer": self.manufacturer,
            "version": self.version,
            "hardware": list(self.hardware),
            "options": dict(self.options),
        }

    def accepts(self, node: Node) -> str | None:
        """``None`` when this plugin should take a node of one of its ``ops``, else the reason
        it leaves it to the CPU compiler (the default takes every one)."""
        return None

    def can_run(self, node: Node) -> str | None:
        """``None`` when this plugin can compute ``node`` at all, else why not (forcing cannot
        override this)."""
        return None if node.op in self.ops else f"{node.op} is not one of its ops"

    def unsupported_reason(self, node: Node) -> str | None:
        why = self.can_run(node)
        if why is not None:
            return why
        if self._force is not None and self._force(node):
            return None
        return self.accepts(node)

    def supports(self, node: Node) -> bool:
        return self.unsupported_reason(node) is None

    def compile(self, partitions: Sequence[Subgraph]) -> CompiledResult | Sequence[PluginKernel]:
        """The plugin's compiler; a plugin that only declares support (to inspect partitions)
        may leave it out, and a compile that reaches it then fails naming the plugin."""
        raise CompileError(
            f"plugin {self.name!r} claimed {len(partitions)} partition(s) but defines no compile()"
        )
