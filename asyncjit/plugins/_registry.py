"""Finding plugins: the built-in ones and every ``asyncjit.plugins`` entry point.

A third-party plugin is a pip package whose metadata declares an entry point in the
``asyncjit.plugins`` group (``name = "package.module:PluginClass"``); installing it is enough,
no code changes. An entry point names a class or factory called with the options.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from .._log import get_logger
from ..compiler._partition import CompilerPlugin
from ..errors import CompileError

__all__ = ["GROUP", "PluginNotFoundError", "available_plugins", "get_plugin"]

GROUP = "asyncjit.plugins"

log = get_logger("asyncjit.plugins")

_BUILTIN = {
    "onnxruntime": "asyncjit.plugins._onnxruntime:OrtPlugin",
    "xla": "asyncjit.plugins._xla:XlaPlugin",
}


class PluginNotFoundError(CompileError, LookupError):
    """No installed plugin has this name."""


def _load(target: str) -> Callable[..., CompilerPlugin]:
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def available_plugins() -> dict[str, str]:
    """Plugin name -> ``module:attr`` for the built-in plugins and installed entry points."""
    found = dict(_BUILTIN)
    for ep in metadata.entry_points(group=GROUP):
        found[ep.name] = ep.value
    return found


def get_plugin(name: str, options: Mapping[str, Any] | None = None) -> CompilerPlugin:
    """A new instance of the installed plugin ``name`` with ``options``.

    Raises:
        PluginNotFoundError: no such plugin; CompileError: it failed to import (missing extra).
    """
    found = available_plugins()
    target = found.get(name)
    if target is None:
        raise PluginNotFoundError(f"no plugin named {name!r}; installed: {sorted(found)}")
    try:
        factory = _load(target)
    except ImportError as exc:
        raise CompileError(f"plugin {name!r} ({target}) failed to import: {exc}") from exc
    plugin = factory(dict(options or {}))
    log.debug("plugin_loaded", plugin=name, target=target)
    return plugin
