"""Models for the plugin CLI tests, loaded as ``plugin_models:FUNCTION`` (MODEL arguments)."""

from __future__ import annotations

import numpy as np

from asyncjit import Tensor, Var

T = Var("t", 1, 8)


def mixed() -> tuple[list[Tensor], list[Tensor]]:
    """ORT (with ``claim_all``) takes the matmul/tanh and the scaling; gelu stays on the CPU."""
    x = Tensor.placeholder((T, 6), name="x")
    w = Tensor.const(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))
    y = (x @ w).tanh().gelu() * 2.0
    return [y, (x * x).sum(axis=1, keepdims=True)], [x]
