"""``Tensor``: the lazy, numpy-like front end that records graph nodes.

The class lives in ``_tensor``; the bodies of its neural-network methods (normalisation,
convolution, pooling, scans, selection) in ``_nn``, one small function each.
"""

from ._tensor import Tensor as Tensor
from ._tensor import broadcast_shapes as broadcast_shapes

__all__ = ["Tensor", "broadcast_shapes"]
