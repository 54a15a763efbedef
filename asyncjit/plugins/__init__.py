"""Compiler plugins: vendor compilers that take partitions of a graph (LiteRT's model).

``Plugin`` is the base class (identity, options, per-op support); ``get_plugin``/
``available_plugins`` find the built-in ``onnxruntime`` and ``xla`` plugins and any installed
through the ``asyncjit.plugins`` entry-point group. See docs/plugins.md.
"""

from ._base import Plugin as Plugin
from ._base import env_options as env_options
from ._registry import GROUP as GROUP
from ._registry import PluginNotFoundError as PluginNotFoundError
from ._registry import available_plugins as available_plugins
from ._registry import get_plugin as get_plugin

__all__ = ["GROUP", "Plugin", "PluginNotFoundError", "available_plugins", "env_options", "get_plugin"]
