"""ONNX Runtime running the same Silero VAD file: the peer the demo and benchmarks compare with.

``OnnxRuntimeVad`` drives the session exactly as the package's ``OnnxWrapper`` does (state and
the last ``context`` samples carried between calls), for one stream or a batch of streams in
lockstep. It needs the ``onnxruntime`` package (``pip install 'asyncjit[models]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelFormatError
from ._audio import check_sample_rate, context_samples

__all__ = ["OnnxRuntimeVad"]


class OnnxRuntimeVad:
    """Silero VAD through ONNX Runtime for ``batch`` streams in lockstep.

    Args:
        sample_rate: 16000 or 8000.
        batch: streams per call (chunks are ``[batch, n]``).
        threads: intra-op threads (1 for a like-for-like single-thread comparison; 0 lets ONNX
            Runtime choose, its default).
        path: the ONNX file (default: the one shipped in the ``silero-vad`` package).
        session: an existing ``InferenceSession`` of that file to share between streams.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        batch: int = 1,
        threads: int = 1,
        path: str | None = None,
        session: Any = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise ModelFormatError(
                "onnxruntime is not installed; install it with: pip install 'asyncjit[models]'"
            ) from None
        from .silero_vad import default_model_path

        self.sample_rate = check_sample_rate(sample_rate)
        self.context_samples = context_samples(self.sample_rate)
        if session is None:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(path or default_model_path()), opts, providers=["CPUExecutionProvider"]
            )
        self.session: Any = session
        self._sr = np.array(self.sample_rate, dtype=np.int64)
        self.state = np.zeros((2, batch, 128), np.float32)
        self.context = np.zeros((batch, self.context_samples), np.float32)

    def reset(self, batch: int | None = None) -> None:
        """Zero the state and context (optionally for a new batch size)."""
        n = batch if batch is not None else self.state.shape[1]
        self.state = np.zeros((2, n, 128), np.float32)
        self.context = np.zeros((n, self.context_samples), np.float32)

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        """Probabilities ``[batch, 1]`` for chunks ``[batch, n]`` (or ``[n]`` for batch 1)."""
        x = np.concatenate([self.context, chunk.reshape(self.context.shape[0], -1)], axis=1)
        out, self.state = self.session.run(None, {"input": x, "state": self.state, "sr": self._sr})
        self.context = x[:, -self.context_samples :]
        return np.asarray(out, np.float32)
