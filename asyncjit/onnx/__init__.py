"""ONNX models in asyncjit: import with bounded symbolic dims, run ORT-style, serve recurrent ones.

``load`` imports a file into a traced graph (``OnnxModel``); ``InferenceSession`` compiles it and
runs it like ONNX Runtime (plus ``run_async`` and ``execute``); ``recurrent_step`` turns a model
whose state output feeds its state input into a batched step for ``StreamMux``; ``backend`` is
the ``onnx.backend.base.Backend`` the ONNX conformance tests run against. Needs the ``onnx``
package (``pip install 'asyncjit[onnx]'``).
"""

from ..errors import OnnxImportError as OnnxImportError
from ..errors import UnsupportedOpError as UnsupportedOpError
from . import _ops_attention as _ops_attention  # registers the op table
from . import _ops_control as _ops_control
from . import _ops_dynamic as _ops_dynamic
from . import _ops_elementwise as _ops_elementwise
from . import _ops_int as _ops_int
from . import _ops_linalg as _ops_linalg
from . import _ops_lowp as _ops_lowp
from . import _ops_ml as _ops_ml
from . import _ops_nn as _ops_nn
from . import _ops_reduce as _ops_reduce
from . import _ops_resize as _ops_resize
from . import _ops_rnn as _ops_rnn
from . import _ops_sample as _ops_sample
from . import _ops_scatter as _ops_scatter
from . import _ops_shape as _ops_shape
from . import _ops_signal as _ops_signal
from ._importer import OnnxModel as OnnxModel
from ._importer import TensorInfo as TensorInfo
from ._importer import load as load
from ._importer import unsupported_nodes as unsupported_nodes
from ._recurrent import OnnxRecurrentStep as OnnxRecurrentStep
from ._recurrent import recurrent_step as recurrent_step
from ._registry import supported_ops as supported_ops
from ._session import InferenceSession as InferenceSession

__all__ = [
    "InferenceSession",
    "OnnxImportError",
    "OnnxModel",
    "OnnxRecurrentStep",
    "TensorInfo",
    "UnsupportedOpError",
    "load",
    "recurrent_step",
    "supported_ops",
    "unsupported_nodes",
]
