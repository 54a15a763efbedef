"""The model a server runs: its name, rate and chunk, and the ``StreamMux`` that serves it.

``--model silero-vad`` is the built-in Silero VAD (``vad_mux``). ``--model-path X.onnx --state
state:stateN`` serves any recurrent ONNX model through ``asyncjit.onnx.recurrent_step`` (the
ONNX importer): its per-step output's first element is read as the speech probability.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFormatError
from ..scheduler import StreamMux

__all__ = ["ServedModel", "load_model", "parse_state"]


@attrs.frozen
class ServedModel:
    """What the server needs of a model: ``make_mux(max_streams, **mux_options)`` and its audio."""

    name: str
    sample_rate: int
    chunk_samples: int
    languages: tuple[str, ...]
    make_mux: Callable[..., StreamMux]
    description: str = ""

    def probability(self, result: Any) -> float:
        """A step's output as one number: the speech probability (the first element)."""
        if type(result) is np.ndarray and result.size:
            return float(result.item(0))  # one call (once per chunk)
        arr = np.asarray(result)
        return float(arr if arr.ndim == 0 else arr.reshape(-1)[0])


def load_model(
    name: str = "silero-vad",
    *,
    sample_rate: int = 16000,
    model_path: str | None = None,
    state: str | None = None,
    context: int = 0,
    dims: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    batch_dim: str = "batch",
    max_streams: int = 1024,
    max_batch_size: int | None = None,
) -> ServedModel:
    """The model for ``asyncjit serve``'s ``--model`` / ``--model-path`` flags.

    Args:
        name: a built-in model (``silero-vad``).
        sample_rate: the rate the model takes (Silero: 16000 or 8000).
        model_path: a recurrent ONNX model instead, served through ``asyncjit.onnx.recurrent_step``
            (its per-step output's first element is taken as the speech probability).
        state: ``"in:out[,in2:out2]"``: each state input and the output that feeds it back.
        context: samples of the previous chunk the model takes in front of each chunk.
        dims, values: the ONNX inputs' symbolic dim bounds and fixed inputs (``asyncjit.onnx.load``);
            ``batch_dim`` is bounded by the batch size here.
        max_streams, max_batch_size: the slots an ONNX model's pool is built for.

    Raises:
        ModelFormatError: an unknown model name, a bad ``state``, or ``model_path`` while the
            ONNX importer (``asyncjit.onnx``, the ``onnx`` extra) is not installed.
        OnnxImportError: the ONNX model cannot be imported or is not recurrent as described.
        AudioFormatError: a sample rate the model has no weights for.
    """
    if model_path is not None:
        return _onnx_model(
            model_path,
            state,
            sample_rate,
            context,
            dims or {},
            values or {},
            batch_dim,
            max_streams,
            max_batch_size,
        )
    if name != "silero-vad":
        raise ModelFormatError(f"unknown model {name!r}; built in: 'silero-vad' (or --model-path X.onnx)")
    from ..models import check_sample_rate, chunk_samples
    from ..models.silero_vad import load_weights, vad_mux

    rate = check_sample_rate(sample_rate)
    weights = load_weights(rate)  # read once; a missing silero-vad package fails here, before serving

    def make_mux(max_streams: int, **options: Any) -> StreamMux:
        return vad_mux(rate, max_streams, weights=weights, **options)

    return ServedModel(
        "silero-vad",
        rate,
        chunk_samples(rate),
        ("*",),  # Silero VAD is trained on many languages and has no language setting
        make_mux,
        "Silero VAD (speech probability per 32 ms chunk), compiled with asyncjit",
    )


def parse_state(text: str | None) -> dict[str, str]:
    """``"state:stateN"`` (comma-separated pairs) to ``{"state": "stateN"}``.

    Raises:
        ModelFormatError: missing, or not ``in:out`` pairs.
    """
    pairs: dict[str, str] = {}
    for part in (text or "").split(","):
        name, sep, out = part.strip().partition(":")
        if not (sep and name and out):
            raise ModelFormatError(
                f"--state must be input:output pairs (like state:stateN), got {text!r}; a recurrent "
                "model's state input and the output that feeds it back"
            )
        pairs[name] = out
    return pairs


def _onnx_model(
    path: str,
    state: str | None,
    sample_rate: int,
    context: int,
    dims: Mapping[str, Any],
    values: Mapping[str, Any],
    batch_dim: str,
    max_streams: int,
    max_batch_size: int | None,
) -> ServedModel:
    try:
        from .. import onnx as aonnx
    except ImportError as exc:
        raise ModelFormatError(
            f"--model-path needs the ONNX importer (asyncjit.onnx, the onnx extra: "
            f"pip install 'asyncjit[onnx]'): {exc}"
        ) from None
    if not os.path.exists(path):
        raise ModelFormatError(f"--model-path {path}: no such file")
    pairs = parse_state(state)
    max_batch = min(max_streams, 256) if max_batch_size is None else max_batch_size
    sess = aonnx.InferenceSession(path, {batch_dim: (1, max_batch), **dims}, values=dict(values))
    step = aonnx.recurrent_step(
        sess, state=pairs, context=context, max_streams=max_streams, max_batch_size=max_batch
    )
    if len(step.chunk_shape) != 1:
        raise ModelFormatError(
            f"{path}: a served model takes 1-D chunks of audio, its chunk input is {step.chunk_shape}"
        )

    def make_mux(streams: int, **options: Any) -> StreamMux:
        if streams > step.num_slots:
            raise ModelFormatError(
                f"the ONNX step was built for {step.num_slots} streams, the server asks for {streams}"
            )
        return StreamMux(step, max_streams=streams, **options)

    name = os.path.splitext(os.path.basename(path))[0]
    return ServedModel(
        name,
        sample_rate,
        int(step.chunk_shape[0]),
        ("*",),
        make_mux,
        f"{name} (ONNX, compiled with asyncjit)",
    )
