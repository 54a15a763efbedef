"""The one switch the hot paths read: ``active`` is the running ``Trace`` or None.

Kept free of imports so the runtime, compiler and scheduler can read it without cycles; a hook is
one attribute load and one ``is None`` test when no trace runs.
"""

from __future__ import annotations

from typing import Any

active: Any = None
"""The ``asyncjit.profiler.Trace`` being recorded, or None (the default: no tracing)."""
