"""Compile graphs to native code: partition by plugins, passes, LLVM codegen, compile caches.

Public API: ``compile`` (tensors -> ``CpuExecutable``), ``deserialize``, ``compile_stats``,
``ReferenceExecutable``, the plugin protocol (``CompilerPlugin``, ``register_plugin``) and the
runtime contract (``ArgSpec``, ``Signature``, ``Executable``, ``Launcher``).
"""

from ._api import compile as compile
from ._bundle import BundleError as BundleError
from ._bundle import build_bundle as build_bundle
from ._bundle import load_bundle as load_bundle
from ._cache import CacheDirectoryWarning as CacheDirectoryWarning
from ._cache import CompileStats as CompileStats
from ._cache import cache_dir as cache_dir
from ._cache import compile_stats as compile_stats
from ._cost import KernelInfo as KernelInfo
from ._cpu import CpuExecutable as CpuExecutable
from ._cpu import CpuLauncher as CpuLauncher
from ._executable import ArgSpec as ArgSpec
from ._executable import Executable as Executable
from ._executable import Launcher as Launcher
from ._executable import Signature as Signature
from ._partition import CompiledResult as CompiledResult
from ._partition import CompilerPlugin as CompilerPlugin
from ._partition import Fallback as Fallback
from ._partition import PartitionResult as PartitionResult
from ._partition import PluginKernel as PluginKernel
from ._partition import Subgraph as Subgraph
from ._partition import partition as partition
from ._partition import register_plugin as register_plugin
from ._partition import registered_plugins as registered_plugins
from ._partition import unregister_plugin as unregister_plugin
from ._reference import ReferenceExecutable as ReferenceExecutable
from ._serialize import deserialize as deserialize

__all__ = [
    "ArgSpec",
    "BundleError",
    "CacheDirectoryWarning",
    "CompileStats",
    "CompiledResult",
    "CompilerPlugin",
    "CpuExecutable",
    "CpuLauncher",
    "Executable",
    "Fallback",
    "KernelInfo",
    "Launcher",
    "PartitionResult",
    "PluginKernel",
    "ReferenceExecutable",
    "Signature",
    "Subgraph",
    "cache_dir",
    "compile",
    "build_bundle",
    "compile_stats",
    "deserialize",
    "load_bundle",
    "partition",
    "register_plugin",
    "registered_plugins",
    "unregister_plugin",
]
