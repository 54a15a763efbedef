"""What the op tests (``test_ops*.py``) share: the bound vars, shapes and bindings, and run/compare helpers.

Each op runs at several shapes whose symbolic dims are bound to their minimum (``t = 1``), their
maximum and a value in between (the ``bindings`` and ``shapes`` marks), through the reference
interpreter (``run``) on reproducible data (``data``), and is compared with ``close``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit import dtypes as dt
from asyncjit.graph import graph_vars, toposort
from asyncjit.symbolic import Dim, evaluate

t = Var("t", 1, 6)
s = Var("s", 2, 4)
BINDINGS = [{"t": 1, "s": 2}, {"t": 6, "s": 4}, {"t": 3, "s": 3}]
BIND_IDS = ["min", "max", "mid"]
SHAPES: list[tuple[Dim, ...]] = [(), (t,), (2, t), (s, t, 3)]
SHAPE_IDS = ["scalar", "t", "2xt", "sxtx3"]

bindings = pytest.mark.parametrize("b", BINDINGS, ids=BIND_IDS)
shapes = pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)


def run(out: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray], b: Mapping[str, int]) -> Any:
    """Evaluate with the bindings the graph actually uses."""
    outs = [out] if isinstance(out, Tensor) else list(out)
    used = {v.name for v in graph_vars(toposort([o.node for o in outs]))}
    result = reference.evaluate(outs, feed, {k: v for k, v in b.items() if k in used})
    return result[0] if isinstance(out, Tensor) else result


def concrete(shape: Sequence[Dim], b: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, b) for d in shape)


def data(shape: Sequence[Dim], b: Mapping[str, int], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    """Reproducible test data: floats in [-3, 3] with exact quarters, small ints, random bools."""
    rng = np.random.default_rng(seed)
    shp = concrete(shape, b)
    npd = np.dtype(dtype)
    if npd.kind == "f":
        return (rng.integers(-12, 13, size=shp) / 4).astype(npd)
    if npd.kind == "b":
        return rng.integers(0, 2, size=shp).astype(bool)
    return rng.integers(-7, 8, size=shp).astype(npd)


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def ph(shape: Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
    return Tensor.placeholder(tuple(shape), dtype)
