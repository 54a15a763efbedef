"""Traces and kernel profiles people can look at: ``with asyncjit.profiler.trace("out.json"):``.

Open the file in https://ui.perfetto.dev (or chrome://tracing). See ``_trace.py`` for what is
recorded; ``asyncjit demo --trace out.json`` records the demo.
"""

from ._trace import KernelStats as KernelStats
from ._trace import Trace as Trace
from ._trace import trace as trace

__all__ = ["KernelStats", "Trace", "trace"]
