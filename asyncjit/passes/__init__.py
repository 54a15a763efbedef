"""Graph -> graph rewrites, each a small pure function, and the standard pipeline that runs them."""

from ._cse import cse as cse
from ._dce import dce as dce
from ._dce import live_nodes as live_nodes
from ._fold import fold_constants as fold_constants
from ._fusion import Claimed as Claimed
from ._fusion import FusionPlan as FusionPlan
from ._fusion import Kernel as Kernel
from ._fusion import fuse as fuse
from ._graph import Graph as Graph
from ._graph import rebuild as rebuild
from ._graph import remake as remake
from ._layout import channels_last as channels_last
from ._layout import channels_last_enabled as channels_last_enabled
from ._layout import kernel_layouts as kernel_layouts
from ._layout import set_channels_last as set_channels_last
from ._memory import ALIGN as ALIGN
from ._memory import MemoryPlan as MemoryPlan
from ._memory import Slot as Slot
from ._memory import in_place_kernels as in_place_kernels
from ._memory import plan_memory as plan_memory
from ._pipeline import optimize_graph as optimize_graph
from ._refine import canonicalize_dynamism as canonicalize_dynamism
from ._refine import refine as refine
from ._refine import refine_arguments as refine_arguments
from ._refine import refine_shapes as refine_shapes
from ._shard import split_axes as split_axes
from ._simplify import simplify as simplify

__all__ = [
    "ALIGN",
    "Claimed",
    "FusionPlan",
    "Graph",
    "Kernel",
    "MemoryPlan",
    "Slot",
    "canonicalize_dynamism",
    "channels_last",
    "channels_last_enabled",
    "cse",
    "dce",
    "fold_constants",
    "fuse",
    "live_nodes",
    "optimize_graph",
    "in_place_kernels",
    "kernel_layouts",
    "plan_memory",
    "rebuild",
    "refine",
    "refine_arguments",
    "refine_shapes",
    "remake",
    "set_channels_last",
    "simplify",
    "split_axes",
]
