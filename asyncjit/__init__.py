"""asyncjit: bounded-shape tensor graphs compiled once with llvmlite, replayed on async device actors.

The package namespace re-exports the names users meet first; the submodules hold the rest.
"""

from . import dtypes as dtypes
from . import errors as errors
from . import reference as reference
from . import symbolic as symbolic
from .dtypes import DType as DType
from .dtypes import bool_ as bool_
from .dtypes import float16 as float16
from .dtypes import float32 as float32
from .dtypes import int32 as int32
from .dtypes import int64 as int64
from .errors import JitError as JitError
from .symbolic import Var as Var
from .tensor import Tensor as Tensor

__version__ = "0.1.0"

__all__ = [
    "DType",
    "JitError",
    "Tensor",
    "Var",
    "bool_",
    "dtypes",
    "errors",
    "float16",
    "float32",
    "int32",
    "int64",
    "reference",
    "symbolic",
]
