"""Silero VAD's weights: read from the ``silero-vad`` package's ONNX file and checked.

The file's graph is parsed only as far as the network needs: the STFT basis, the four encoder
convolutions, the LSTM (whose gate reordering is checked against PyTorch's order) and the head.
Anything else in the file (a different architecture, a changed shape) is a typed
``ModelFormatError`` naming what differs, never a silently different network.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFormatError

# Chunk and context sizes are not in the graph (its input is ``[?, ?]``): ``_audio`` holds the
# values silero_vad.utils_vad.OnnxWrapper uses, which the model was trained with.
from ._audio import _CHUNK, _CONTEXT, check_sample_rate
from ._onnx_weights import OnnxGraph, attr_value, load_model, package_data_file

HIDDEN = 128
"""The LSTM width: the state is ``[2, B, HIDDEN]`` (h, c)."""

_INSTALL_HINT = (
    "install it with: pip install --no-deps silero-vad (its torch dependency is not needed), "
    "or point ASYNCJIT_SILERO_ONNX at a silero_vad.onnx file"
)


@attrs.frozen(eq=False, repr=False)
class ConvLayer:
    """One encoder layer: ``conv1d(weight [O, C, K], bias [O], stride, padding)`` then ReLU."""

    weight: np.ndarray
    bias: np.ndarray
    stride: int
    padding: int


@attrs.frozen(eq=False, repr=False)
class SileroWeights:
    """The Silero VAD weights for one sample rate, as read-only float32 numpy arrays.

    LSTM weights keep PyTorch's layout and gate order (i, f, g, o): ``w_ih``/``w_hh`` are
    ``[4*HIDDEN, in]``, the biases ``[4*HIDDEN]``.
    """

    sample_rate: int
    chunk_samples: int
    context_samples: int
    hop: int
    stft_basis: np.ndarray
    encoder: tuple[ConvLayer, ...]
    w_ih: np.ndarray
    w_hh: np.ndarray
    b_ih: np.ndarray
    b_hh: np.ndarray
    head_weight: np.ndarray
    head_bias: np.ndarray
    source: str

    @property
    def input_samples(self) -> int:
        """Samples per step fed to the network: ``context_samples + chunk_samples``."""
        return self.context_samples + self.chunk_samples

    @property
    def filter_length(self) -> int:
        """The STFT window ``K`` (256 at 16 kHz, 128 at 8 kHz)."""
        return int(self.stft_basis.shape[2])

    @property
    def n_freq(self) -> int:
        """STFT bins ``K // 2 + 1`` (129 at 16 kHz, 65 at 8 kHz)."""
        return int(self.stft_basis.shape[0]) // 2

    @property
    def frames(self) -> int:
        """STFT frames per step (4 at both rates): the encoder's input length."""
        return (self.input_samples + self.reflect_pad - self.filter_length) // self.hop + 1

    @property
    def reflect_pad(self) -> int:
        """Right reflect padding before the STFT: ``(K - hop) // 2`` (64 at 16 kHz, 32 at 8 kHz)."""
        return (self.filter_length - self.hop) // 2

    def __repr__(self) -> str:
        return (
            f"SileroWeights(sample_rate={self.sample_rate}, chunk={self.chunk_samples}, "
            f"context={self.context_samples}, stft={self.n_freq}x{self.filter_length}/{self.hop}, "
            f"source={self.source!r})"
        )


# ---------------------------------------------------------------------------------------------
# loading


def default_model_path() -> Path:
    """``$ASYNCJIT_SILERO_ONNX`` if set, else ``silero_vad/data/silero_vad.onnx`` of the installed
    ``silero-vad`` package, found without importing it (its ``__init__`` imports torch).

    Raises:
        ModelFormatError: the file named by ``ASYNCJIT_SILERO_ONNX`` does not exist, or
            ``silero-vad`` is not installed, or its data file is missing.
    """
    env = os.environ.get("ASYNCJIT_SILERO_ONNX")
    if env:
        if not Path(env).is_file():
            raise ModelFormatError(f"ASYNCJIT_SILERO_ONNX={env!r} is not a file")
        return Path(env)
    return package_data_file("silero_vad", "data/silero_vad.onnx", _INSTALL_HINT)


def load_weights(sample_rate: int = 16000, path: str | os.PathLike[str] | None = None) -> SileroWeights:
    """Read the Silero VAD weights for ``sample_rate`` (8000 or 16000) from its ONNX file.

    Args:
        sample_rate: 16000 or 8000; each has its own weights in the file.
        path: an ONNX file with the Silero VAD graph; the installed package's
            ``silero_vad.onnx`` by default.

    Raises:
        AudioFormatError: ``sample_rate`` is neither 8000 nor 16000.
        ModelFormatError: ``onnx`` or ``silero-vad`` is missing, the file is missing or
            unreadable, or its graph is not the network this module rebuilds.
    """
    check_sample_rate(sample_rate)
    resolved = default_model_path() if path is None else Path(path)
    return _load_cached(sample_rate, str(resolved.resolve()))


@functools.lru_cache(maxsize=8)
def _load_cached(sample_rate: int, path: str) -> SileroWeights:
    # The arrays are read-only, so one SileroWeights can be shared by every caller.
    model = load_model(Path(path))
    branches = _branches_by_rate(model, Path(path))
    if sample_rate not in branches:
        raise ModelFormatError(f"{path}: has weights for {sorted(branches)} Hz only, not {sample_rate} Hz")
    return _parse_branch(branches[sample_rate], sample_rate)


def _branches_by_rate(model: Any, source: Path) -> dict[int, OnnxGraph]:
    """Map each sample rate to the (sub)graph that holds its weights.

    The published file branches with ``If(Equal(sr, 16000))``: then = 16 kHz, else = 8 kHz. A
    file without that ``If`` holds one network; its STFT window tells which rate it is for.
    """
    graph = model.graph
    names = {i.name for i in graph.input}
    if not {"input", "state"} <= names:
        raise ModelFormatError(
            f"{source}: unexpected graph: inputs {sorted(names)}, expected input and state"
        )
    top = OnnxGraph(graph, source)
    produced = {out: n for n in graph.node for out in n.output}
    for node in graph.node:
        if node.op_type != "If":
            continue
        cond = produced.get(node.input[0])
        if cond is None or cond.op_type != "Equal" or "sr" not in cond.input:
            continue
        other = next(i for i in cond.input if i != "sr")
        if other not in top.constants or int(np.asarray(top.constants[other]).reshape(-1)[0]) != 16000:
            raise top.fail(f"the If on sr compares it with {other!r}, expected the constant 16000")
        branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
        return {
            16000: OnnxGraph(branches["then_branch"], source),
            8000: OnnxGraph(branches["else_branch"], source),
        }
    k = int(top.param("stft.forward_basis_buffer").shape[-1])
    rate = {256: 16000, 128: 8000}.get(k)
    if rate is None:
        raise top.fail(f"STFT window {k} matches neither 16 kHz (256) nor 8 kHz (128)")
    return {rate: top}


def _f32(a: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(a, dtype=np.float32)
    out.setflags(write=False)
    return out


def _conv_node(g: OnnxGraph, weight_name: str) -> Any:
    full = g.param_name(weight_name)
    hits = [n for n in g.of_type("Conv") if len(n.input) > 1 and n.input[1] == full]
    if len(hits) != 1:
        raise g.fail(f"expected one Conv using {weight_name!r}, found {len(hits)}")
    node = hits[0]
    if attr_value(node, "group", 1) != 1 or any(d != 1 for d in attr_value(node, "dilations", [1])):
        raise g.fail(f"the Conv using {weight_name!r} is grouped or dilated")
    return node


def _parse_branch(g: OnnxGraph, sample_rate: int) -> SileroWeights:
    basis = g.param("stft.forward_basis_buffer")
    if basis.ndim != 3 or basis.shape[1] != 1 or basis.shape[0] != 2 * (basis.shape[2] // 2 + 1):
        raise g.fail(f"STFT basis has shape {basis.shape}, expected [2*(K//2+1), 1, K]")
    stft = _conv_node(g, "stft.forward_basis_buffer")
    hop = int(attr_value(stft, "strides", [1])[0])
    if any(attr_value(stft, "pads", [0, 0])):
        raise g.fail("the STFT Conv pads its input; expected an explicit reflect Pad")
    if not any(n.input[0] == "input" and attr_value(n, "mode") == "reflect" for n in g.of_type("Pad")):
        raise g.fail("no reflect Pad of the input before the STFT")

    encoder: list[ConvLayer] = []
    for i in range(8):
        name = f"encoder.{i}.reparam_conv.weight"
        if not g.has_param(name):
            break
        node = _conv_node(g, name)
        pads = list(attr_value(node, "pads", [0, 0]))
        if len(pads) != 2 or pads[0] != pads[1]:
            raise g.fail(f"encoder layer {i} pads {pads}; expected symmetric padding")
        encoder.append(
            ConvLayer(
                weight=_f32(g.param(name)),
                bias=_f32(g.param(f"encoder.{i}.reparam_conv.bias")),
                stride=int(attr_value(node, "strides", [1])[0]),
                padding=int(pads[0]),
            )
        )
    if len(encoder) != 4:
        raise g.fail(f"{len(encoder)} encoder layers, expected 4")

    w_ih, w_hh = g.param("decoder.rnn.weight_ih"), g.param("decoder.rnn.weight_hh")
    b_ih, b_hh = g.param("decoder.rnn.bias_ih"), g.param("decoder.rnn.bias_hh")
    _check_lstm(g, w_ih.shape[0] // 4)
    weights = SileroWeights(
        sample_rate=sample_rate,
        chunk_samples=_CHUNK[sample_rate],
        context_samples=_CONTEXT[sample_rate],
        hop=hop,
        stft_basis=_f32(basis),
        encoder=tuple(encoder),
        w_ih=_f32(w_ih),
        w_hh=_f32(w_hh),
        b_ih=_f32(b_ih),
        b_hh=_f32(b_hh),
        head_weight=_f32(g.param("decoder.decoder.2.weight")),
        head_bias=_f32(g.param("decoder.decoder.2.bias")),
        source=str(g.source),
    )
    _check_shapes(g, weights)
    return weights


def _check_lstm(g: OnnxGraph, hidden: int) -> None:
    """The file must run a plain forward LSTM cell and feed it PyTorch's gates reordered to
    ONNX's (i, f, g, o) -> (i, o, f, c); that is what lets us use the PyTorch weights as they are."""
    lstms = list(g.of_type("LSTM"))
    if not lstms:
        raise g.fail("no LSTM op (a decomposed LSTM is not supported)")
    for node in lstms:
        acts = attr_value(node, "activations")
        plain = (
            attr_value(node, "hidden_size") == hidden
            and attr_value(node, "direction", "forward") == "forward"
            and attr_value(node, "clip") is None
            and attr_value(node, "input_forget", 0) == 0
            and (
                acts is None
                or [a.decode() if isinstance(a, bytes) else a for a in acts] == ["Sigmoid", "Tanh", "Tanh"]
            )
        )
        if not plain:
            raise g.fail(f"LSTM {node.name!r} is not a plain forward cell of hidden size {hidden}")
    full = g.param_name("decoder.rnn.weight_ih")
    slices = {n.output[0]: n for n in g.of_type("Slice") if n.input[0] == full}
    want = [(0, hidden), (3 * hidden, 4 * hidden), (hidden, 3 * hidden)]
    found: list[list[tuple[int, int]]] = []
    for cat in g.of_type("Concat"):
        if cat.input and all(i in slices for i in cat.input):
            found.append(
                [
                    (g.scalar_ints(slices[i].input[1])[0], g.scalar_ints(slices[i].input[2])[0])
                    for i in cat.input
                ]
            )
    if not found or any(f != want for f in found):
        raise g.fail(
            f"LSTM input weights are sliced as {found}; expected the PyTorch->ONNX gate reorder {want}"
        )


def _check_shapes(g: OnnxGraph, w: SileroWeights) -> None:
    """Every weight must line up with its neighbours, and the encoder must end at length 1."""
    channels = w.n_freq
    length = w.frames
    for i, layer in enumerate(w.encoder):
        o, c, k = layer.weight.shape
        if c != channels or layer.bias.shape != (o,):
            raise g.fail(
                f"encoder layer {i}: weight {layer.weight.shape} and bias {layer.bias.shape} "
                f"do not fit {channels} input channels"
            )
        channels = o
        length = (length + 2 * layer.padding - k) // layer.stride + 1
    if length != 1:
        raise g.fail(f"the encoder ends at length {length} for a {w.chunk_samples}-sample chunk, expected 1")
    h = HIDDEN
    want = {
        "weight_ih": (w.w_ih.shape, (4 * h, channels)),
        "weight_hh": (w.w_hh.shape, (4 * h, h)),
        "bias_ih": (w.b_ih.shape, (4 * h,)),
        "bias_hh": (w.b_hh.shape, (4 * h,)),
        "decoder.2.weight": (w.head_weight.shape, (1, h, 1)),
        "decoder.2.bias": (w.head_bias.shape, (1,)),
    }
    for name, (got, expected) in want.items():
        if got != expected:
            raise g.fail(f"{name} has shape {got}, expected {expected}")
