"""Graphs as text: ``dump`` (the readable form ``Graph.dump()`` prints) and ``stablehlo``
(StableHLO MLIR, with bounded dims as ``#stablehlo.bounds``)."""

from ._dump import dump as dump
from ._stablehlo import ExportError as ExportError
from ._stablehlo import stablehlo as stablehlo
from ._types import tensor_type as tensor_type

__all__ = ["ExportError", "dump", "stablehlo", "tensor_type"]
