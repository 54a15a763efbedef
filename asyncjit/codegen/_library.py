"""Which matmul/conv1d emitters to use: the tuned ones in ``_matmul``/``_conv`` when importable.

Chosen once (at first use), never per call. The tuned emitters handle float32 only; other dtypes
and symbolic conv paddings use the simple loops in ``_kernels``.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["conv_library", "matmul_library"]


@functools.cache
def matmul_library() -> Any | None:
    """The ``_matmul`` module (``emit_matmul``, ``matmul_scratch_bytes``) or ``None``."""
    try:
        from . import _matmul

        return _matmul
    except ImportError:
        return None


@functools.cache
def conv_library() -> Any | None:
    """The ``_conv`` module (``emit_conv1d``, ``conv1d_scratch_bytes``) or ``None``."""
    try:
        from . import _conv

        return _conv
    except ImportError:
        return None
