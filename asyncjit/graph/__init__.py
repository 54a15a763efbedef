"""The tensor graph: SSA nodes with symbolic shapes, and the op registry that defines them."""

from . import _index as _index  # registers gather, scatter, nonzero
from ._dynamic import check_size as check_size
from ._dynamic import defined_var as defined_var
from ._dynamic import new_data_var as new_data_var
from ._nn import pool_out_len as pool_out_len
from ._node import Node as Node
from ._node import aligned_copy as aligned_copy
from ._node import as_node as as_node
from ._node import broadcast_core as broadcast_core
from ._node import content_digest as content_digest
from ._node import derived_const as derived_const
from ._node import graph_vars as graph_vars
from ._node import make_node as make_node
from ._node import shape_str as shape_str
from ._node import structural_key as structural_key
from ._node import toposort as toposort
from ._ops import OPS as OPS
from ._ops import OpDef as OpDef
from ._ops import cast_array as cast_array
from ._ops import cast_scalar as cast_scalar
from ._ops import conv_out_len as conv_out_len
from ._ops import reduce_identity as reduce_identity
from ._ops import slice_length as slice_length

__all__ = [
    "OPS",
    "Node",
    "OpDef",
    "aligned_copy",
    "as_node",
    "broadcast_core",
    "content_digest",
    "derived_const",
    "cast_array",
    "cast_scalar",
    "check_size",
    "conv_out_len",
    "defined_var",
    "graph_vars",
    "make_node",
    "new_data_var",
    "pool_out_len",
    "reduce_identity",
    "shape_str",
    "slice_length",
    "structural_key",
    "toposort",
]
