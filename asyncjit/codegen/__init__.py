"""Kernels to LLVM IR: the host target machine, fused loop kernels, the plan module with its one
entry point, and the hand-tiled matmul/conv1d and vectorisable math emitters they call.

Used by ``asyncjit.compiler``; nothing here is needed to *run* a compiled plan.
"""

from ._conv import conv1d_scratch_bytes as conv1d_scratch_bytes
from ._conv import emit_conv1d as emit_conv1d
from ._mathfn import emit_pow as emit_pow
from ._mathfn import emit_unary as emit_unary
from ._matmul import emit_matmul as emit_matmul
from ._matmul import matmul_scratch_bytes as matmul_scratch_bytes
from ._target import compile_to_object as compile_to_object
from ._target import host_target_key as host_target_key
from ._target import host_target_machine as host_target_machine
from ._target import load_object as load_object
from ._target import optimize as optimize

__all__ = [
    "compile_to_object",
    "conv1d_scratch_bytes",
    "emit_conv1d",
    "emit_matmul",
    "emit_pow",
    "emit_unary",
    "host_target_key",
    "host_target_machine",
    "load_object",
    "matmul_scratch_bytes",
    "optimize",
]
