"""Per-kernel cost estimates (bytes moved, floating-point operations), made at lowering time.

Both are symbolic ``Dim`` expressions over the plan's vars, so a profile reports the cost of the
var values it actually ran with. ``bytes`` counts the kernel's output once plus every buffer it
reads once at its full (bound) size: an upper estimate for kernels that read a slice of a buffer.
``flops`` counts a multiply-add as two; elementwise kernels one per fused op per element.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..codegen._nnkernels import conv_flops
from ..graph import OPS, Node
from ..passes import FusionPlan, Kernel
from ..symbolic import Dim, evaluate, prod, upper

__all__ = ["KernelInfo", "kernel_infos"]


@attrs.frozen
class KernelInfo:
    """One compiled kernel: ``name``, ``kind`` and its symbolic cost (see the module docstring)."""

    name: str
    kind: str
    bytes_expr: Dim
    flops_expr: Dim

    @property
    def bytes(self) -> int:
        """Bytes moved at the upper bound of every var."""
        return max(upper(self.bytes_expr), 0)

    @property
    def flops(self) -> int:
        """Floating-point operations at the upper bound of every var."""
        return max(upper(self.flops_expr), 0)

    def cost(self, bindings: Mapping[str, int]) -> tuple[int, int]:
        """``(bytes, flops)`` for the given var values."""
        return max(evaluate(self.bytes_expr, bindings), 0), max(evaluate(self.flops_expr, bindings), 0)


def _nbytes(n: Node) -> Dim:
    return prod(n.shape) * n.dtype.itemsize


def _computes(n: Node) -> bool:
    return OPS[n.op].kind != "movement" and n.op not in ("const", "placeholder")


def _info(k: Kernel) -> KernelInfo:
    n = k.node
    numel = prod(n.shape)
    moved: Dim = _nbytes(n) + sum((_nbytes(r) for r in k.reads), start=0)
    flops: Dim
    if k.kind == "matmul":
        flops = 2 * numel * n.inputs[0].shape[-1]
    elif k.kind == "conv1d":
        w = n.inputs[1]
        flops = 2 * numel * int(w.shape[1]) * int(w.shape[2])
    elif k.kind == "conv":
        flops = conv_flops(k.op_node)
    elif k.kind == "reduce":
        flops = prod(n.inputs[0].shape)
        flops = flops + numel * sum(1 for f in k.fused if _computes(f))
    elif k.kind in ("copy", "scatter", "nonzero", "prefix", "index_check", "plugin"):
        flops = 0
    else:
        flops = numel * sum(1 for f in (*k.fused, n) if _computes(f))
    return KernelInfo(k.name, k.kind, moved, flops)


def kernel_infos(fusion: FusionPlan) -> tuple[KernelInfo, ...]:
    """The cost record of every kernel of ``fusion``, in execution order."""
    return tuple(_info(k) for k in fusion.kernels)
