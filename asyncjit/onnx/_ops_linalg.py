"""Linear algebra: Det, by Gaussian elimination with partial pivoting recorded step by step.

The matrix size is static, so the ``n`` elimination steps are unrolled into the plan; each step
picks its pivot row from the data (an argmax and a row gather), as LAPACK's ``getrf`` does. The
product runs in float64 and rounds once to the input's dtype.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..tensor import Tensor
from ._registry import NodeCtx, op
from ._values import Value

__all__: list[str] = []


@op("Det", since=11)
def _det(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not isinstance(x.shape[-1], int):
        raise n.fail(f"Det needs static square matrices in the last two axes, got {x.shape}")
    size = x.shape[-1]
    lead = x.shape[:-2]
    a = x.cast(dt.float64).reshape(-1, size, size)
    nb = a.shape[0]
    det = Tensor.ones([nb], dt.float64)
    rows = Tensor.arange(size, dt.int64).reshape(1, size)
    for k in range(size):
        pivot_row = (a[:, k:, k].abs().argmax(1) + k).reshape(nb, 1)  # first largest, as getrf
        swap = Tensor.select(rows == k, pivot_row, Tensor.select(rows == pivot_row, k, rows))
        a = a.take_along_axis(swap.unsqueeze(2).expand(nb, size, size), 1)
        pivot = a[:, k, k]
        det = Tensor.select(pivot_row.reshape(nb) != k, -det, det) * pivot
        if k + 1 < size:
            factor = a[:, k + 1 :, k] / Tensor.select(pivot == 0.0, 1.0, pivot).reshape(nb, 1)
            below = a[:, k + 1 :, :] - factor.unsqueeze(2) * a[:, k : k + 1, :]
            a = Tensor.cat([a[:, : k + 1, :], below], 1)
    return det.reshape(*lead).cast(x.dtype)
