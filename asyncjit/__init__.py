"""asyncjit: bounded-shape tensor graphs compiled once with llvmlite, replayed on async device actors.

The package namespace re-exports the names users meet first; the submodules hold the rest.
"""

from . import dtypes as dtypes
from . import errors as errors
from . import lax as lax
from . import reference as reference
from . import symbolic as symbolic
from . import tree as tree
from .dtypes import DType as DType
from .dtypes import bool_ as bool_
from .dtypes import float16 as float16
from .dtypes import float32 as float32
from .dtypes import float64 as float64
from .dtypes import int8 as int8
from .dtypes import int16 as int16
from .dtypes import int32 as int32
from .dtypes import int64 as int64
from .dtypes import uint8 as uint8
from .dtypes import uint16 as uint16
from .dtypes import uint32 as uint32
from .dtypes import uint64 as uint64
from .errors import JitError as JitError
from .jit import Jitted as Jitted
from .jit import jit as jit
from .recurrent import JitRecurrent as JitRecurrent
from .recurrent import LstmState as LstmState
from .recurrent import RecurrentJit as RecurrentJit
from .runtime import Buffer as Buffer
from .runtime import Client as Client
from .runtime import HostBufferSemantics as HostBufferSemantics
from .runtime import ShardedBuffer as ShardedBuffer
from .runtime import Sharding as Sharding
from .runtime import default_client as default_client
from .symbolic import Var as Var
from .tensor import Tensor as Tensor
from .wrapper import Input as Input
from .wrapper import InputSpec as InputSpec
from .wrapper import JitWrapper as JitWrapper
from .wrapper import KernelProfile as KernelProfile
from .wrapper import PrepareConfig as PrepareConfig
from .wrapper import VarSpec as VarSpec

__version__ = "0.1.0"

__all__ = [
    "Buffer",
    "Client",
    "DType",
    "HostBufferSemantics",
    "Input",
    "InputSpec",
    "JitError",
    "JitRecurrent",
    "JitWrapper",
    "Jitted",
    "KernelProfile",
    "LstmState",
    "PrepareConfig",
    "RecurrentJit",
    "ShardedBuffer",
    "Sharding",
    "Tensor",
    "Var",
    "VarSpec",
    "bool_",
    "default_client",
    "dtypes",
    "errors",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "jit",
    "lax",
    "reference",
    "symbolic",
    "tree",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
