"""Read weights and structure out of an ONNX file without running it.

Models in ``asyncjit.models`` are rebuilt on the ``Tensor`` API; their weights come from the
files their authors publish. These helpers open such a file with the ``onnx`` package (imported
lazily, so ``import asyncjit.models`` needs neither onnx nor the model's own package), flatten
nested subgraphs, and turn anything unexpected into a ``ModelFormatError`` that names the file,
what was expected and what was found.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError

__all__ = ["OnnxGraph", "load_model", "package_data_file"]


def package_data_file(package: str, relative: str, install_hint: str) -> Path:
    """The path of a data file shipped inside ``package``, found *without importing it*.

    ``importlib.util.find_spec`` on a top-level name only locates the package; it does not run
    its ``__init__`` (silero-vad's imports torch, which we do not install).

    Raises:
        ModelFormatError: the package is not installed, or the file is not inside it.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFormatError(f"the {package!r} package is not installed; {install_hint}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise ModelFormatError(
        f"the installed {package!r} package ({list(spec.submodule_search_locations)}) has no "
        f"{relative!r}; reinstall it ({install_hint})"
    )


def load_model(path: Path) -> Any:
    """``onnx.load(path)`` with typed errors for a missing ``onnx``, file or a corrupt file."""
    try:
        import onnx
    except ImportError as exc:
        raise ModelFormatError(
            f"reading {path.name} needs the 'onnx' package: pip install onnx "
            "(or install asyncjit with the 'models' extra)"
        ) from exc
    if not path.is_file():
        raise ModelFormatError(f"ONNX model file {str(path)!r} does not exist")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf raises DecodeError; truncated files raise others
        raise ModelFormatError(f"{str(path)!r} is not a readable ONNX model: {exc}") from exc


class OnnxGraph:
    """One ONNX (sub)graph flattened with every nested subgraph: its nodes and constants.

    ``nodes`` lists every node of the graph and of the subgraphs of its ``If``/``Loop`` nodes;
    ``constants`` maps each ``Constant`` output and initializer name to its numpy value.
    """

    def __init__(self, graph: Any, source: Path) -> None:
        from onnx import AttributeProto, numpy_helper

        self.source = source
        self.nodes: list[Any] = []
        self.constants: dict[str, np.ndarray] = {}

        def walk(g: Any) -> None:
            for init in g.initializer:
                self.constants[init.name] = numpy_helper.to_array(init)
            for node in g.node:
                self.nodes.append(node)
                if node.op_type == "Constant":
                    for attr in node.attribute:
                        if attr.name == "value":
                            self.constants[node.output[0]] = numpy_helper.to_array(attr.t)
                for attr in node.attribute:
                    if attr.type == AttributeProto.GRAPH:
                        walk(attr.g)
                    elif attr.type == AttributeProto.GRAPHS:
                        for sub in attr.graphs:
                            walk(sub)

        walk(graph)

    def fail(self, what: str) -> ModelFormatError:
        """A ``ModelFormatError`` naming this file: the graph is not the network we expect."""
        return ModelFormatError(f"{self.source}: unexpected graph: {what}")

    def of_type(self, op_type: str) -> Iterator[Any]:
        return (n for n in self.nodes if n.op_type == op_type)

    def has_param(self, name: str) -> bool:
        return any(_matches(k, name) for k in self.constants)

    def param(self, name: str) -> np.ndarray:
        """The one constant whose name is ``name`` or ends with ``_`` or ``.`` + ``name``
        (exporters prefix names, e.g. ``If_0_then_branch__Inline_0__`` or ``model.``)."""
        hits = [k for k in self.constants if _matches(k, name)]
        if len(hits) != 1:
            found = "none" if not hits else f"{len(hits)}: {hits}"
            raise self.fail(f"expected one weight named {name!r}, found {found}")
        return self.constants[hits[0]]

    def param_name(self, name: str) -> str:
        """The full name of the constant that ``param(name)`` returns."""
        self.param(name)
        return next(k for k in self.constants if _matches(k, name))

    def scalar_ints(self, name: str) -> list[int]:
        """A constant's value as a flat list of Python ints (for Slice starts/ends)."""
        if name not in self.constants:
            raise self.fail(f"{name!r} is not a constant")
        return [int(v) for v in np.asarray(self.constants[name]).reshape(-1)]


def _matches(key: str, name: str) -> bool:
    return key == name or key.endswith(("_" + name, "." + name))


def attr_value(node: Any, name: str, default: Any = None) -> Any:
    """An attribute of an ONNX node as a Python value (``default`` when absent)."""
    from onnx import helper

    for attr in node.attribute:
        if attr.name == name:
            value = helper.get_attribute_value(attr)
            return value.decode() if isinstance(value, bytes) else value
    return default
