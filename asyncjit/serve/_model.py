"""The model a server runs: its name, rate and chunk, and the ``StreamMux`` that serves it.

``--model silero-vad`` is the built-in Silero VAD (``vad_mux``). ``--model-path X.onnx --state
state:stateN`` serves any recurrent ONNX model through ``asyncjit.onnx.recurrent_step``, the ONNX
importer; until that importer is part of the installed asyncjit, asking for it is a clear
``ModelFormatError`` rather than a flag that silently does nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFormatError
from ..scheduler import StreamMux

__all__ = ["ServedModel", "load_model"]


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
        arr = np.asarray(result)
        return float(arr if arr.ndim == 0 else arr.reshape(-1)[0])


def load_model(
    name: str = "silero-vad",
    *,
    sample_rate: int = 16000,
    model_path: str | None = None,
    state: str | None = None,
) -> ServedModel:
    """The model for ``asyncjit serve``'s ``--model`` / ``--model-path`` / ``--state`` flags.

    Raises:
        ModelFormatError: an unknown model name, or ``model_path`` while the ONNX importer
            (``asyncjit.onnx.recurrent_step``) is not available.
        AudioFormatError: a sample rate the model has no weights for.
    """
    if model_path is not None:
        return _onnx_model(model_path, state, sample_rate)
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


def _onnx_model(path: str, state: str | None, sample_rate: int) -> ServedModel:
    try:
        onnx_pkg = importlib.import_module("asyncjit.onnx")
        recurrent_step = onnx_pkg.recurrent_step
    except (ImportError, AttributeError):
        raise ModelFormatError(
            "--model-path needs the ONNX importer (asyncjit.onnx.recurrent_step), which this "
            "asyncjit does not include yet; serve the built-in model with --model silero-vad"
        ) from None
    raise ModelFormatError(  # pragma: no cover - reached only once the importer lands
        f"--model-path: the ONNX importer {recurrent_step!r} is present but asyncjit serve does not "
        f"wire it up yet ({path}, state {state!r}, {sample_rate} Hz)"
    )
