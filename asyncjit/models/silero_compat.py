"""The ``silero_vad`` package's Python API on asyncjit: change the import, keep the code.

``load_silero_vad``, ``get_speech_timestamps``, ``VADIterator``, ``read_audio``, ``save_audio``
and ``collect_chunks`` take the package's arguments and return what it returns (lists of
``{"start", "end"}`` dicts, in samples or rounded seconds), with numpy arrays where the package
uses torch tensors; neither torch nor the package's Python code is imported (the weights come
from its ONNX file, see ``asyncjit.models.silero_vad``)::

    from asyncjit.models.silero_compat import load_silero_vad, read_audio, get_speech_timestamps
    model = load_silero_vad()
    wav = read_audio("speech.wav")
    speech_timestamps = get_speech_timestamps(wav, model, return_seconds=True)

The segment logic is ``speech_timestamps`` (the package's state machine, kept step for step);
``tests/test_silero_compat.py`` runs the package's own functions, compiled from its installed
source with a numpy stand-in for the few torch calls, against these on the same audio.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ArgumentTypeError, AudioFormatError, InvalidArgumentError, ShapeMismatchError
from ._audio import check_chunk, check_sample_rate, read_audio
from ._timestamps import speech_timestamps

__all__ = [
    "SileroBatch",
    "SileroModel",
    "VADIterator",
    "collect_chunks",
    "get_speech_timestamps",
    "load_silero_vad",
    "read_audio",
    "save_audio",
]


class SileroBatch:
    """B independent streams stepped together in one plan: ``[B, n]`` chunks in, ``[B, 1]`` out.

    What the package's ``OnnxWrapper`` does with a batch; each row keeps its own LSTM state and
    audio context. (For many streams that come and go, use ``StreamMux`` / ``vad_mux``.)
    """

    def __init__(self, sample_rate: int, batch: int, device: Any = None) -> None:
        from .silero_vad import HIDDEN, SileroVadJit, load_weights

        self.sample_rate = check_sample_rate(sample_rate)
        self.batch = batch
        self.weights = load_weights(self.sample_rate)
        self._jit = SileroVadJit.prepared(self.weights, batch, device)
        self._hidden = HIDDEN
        self._ctx = self.weights.context_samples
        self.reset()

    def reset(self) -> None:
        self._context = np.zeros((self.batch, self._ctx), np.float32)
        self._h = np.zeros((self.batch, self._hidden), np.float32)
        self._c = np.zeros((self.batch, self._hidden), np.float32)

    def __call__(self, chunk: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        x = check_chunk(chunk, self.sample_rate)
        if x.ndim != 2 or x.shape[0] != self.batch:
            raise ShapeMismatchError(f"this SileroBatch steps {self.batch} streams, got shape {x.shape}")
        jit, ctx, hid = self._jit, self._ctx, self._hidden
        inputs = jit.chunk_mut()
        inputs[:, :ctx] = self._context
        inputs[:, ctx:] = x
        jit.state_h_mut()[:] = self._h
        jit.state_c_mut()[:] = self._c
        jit.execute_with_vars({"b": self.batch})
        out = jit.output().to_numpy_blocking().reshape(self.batch, -1)
        self._h, self._c = out[:, 1 : 1 + hid].copy(), out[:, 1 + hid :].copy()
        self._context = x[:, -ctx:].copy()
        return np.ascontiguousarray(out[:, :1])


class SileroModel:
    """What ``load_silero_vad()`` returns: ``model(chunk, sr)`` -> ``[B, 1]`` probabilities, keeping
    the stream state between calls like the package's ``OnnxWrapper``; ``reset_states()``.

    ``chunk`` is ``[512]`` / ``[B, 512]`` at 16 kHz (``[256]`` / ``[B, 256]`` at 8 kHz); a batch is
    B independent streams. A multiple of 16 kHz is decimated to 16 kHz, as the package does.
    """

    def __init__(self, device: Any = None) -> None:
        self._device = device
        self._vads: dict[int, Any] = {}
        self._batch: dict[tuple[int, int], Any] = {}
        self._last: tuple[int, int] | None = None  # (sample rate, batch size) of the last call

    def _vad(self, sr: int) -> Any:
        from .silero_vad import SileroVad

        if sr not in self._vads:
            self._vads[sr] = SileroVad(sr, self._device)
        return self._vads[sr]

    def __call__(self, x: npt.ArrayLike, sr: int) -> npt.NDArray[np.float32]:
        chunk = np.asarray(x, dtype=np.float32)
        if chunk.ndim == 1:
            chunk = chunk[None]
        if chunk.ndim != 2:
            raise ShapeMismatchError(f"too many dimensions for an audio chunk: shape {chunk.shape}")
        if sr != 16000 and sr % 16000 == 0:
            chunk, sr = chunk[:, :: sr // 16000], 16000
        sr = check_sample_rate(sr)
        key = (sr, chunk.shape[0])
        if self._last is not None and self._last != key:  # the package resets on either change
            self.reset_states()
        self._last = key
        if chunk.shape[0] == 1:
            return np.array([[self._vad(sr)(np.ascontiguousarray(chunk[0]))]], np.float32)
        if key not in self._batch:
            self._batch[key] = SileroBatch(sr, chunk.shape[0], self._device)
        probs: npt.NDArray[np.float32] = self._batch[key](np.ascontiguousarray(chunk))
        return probs

    def reset_states(self, batch_size: int = 1) -> None:
        """Start new streams (zero state and context), as the package's ``reset_states``."""
        for vad in [*self._vads.values(), *self._batch.values()]:
            vad.reset()
        self._last = None

    def audio_forward(self, x: npt.ArrayLike, sr: int) -> npt.NDArray[np.float32]:
        """Probabilities of whole waveforms ``[B, samples]``: ``[B, chunks]`` (resets first)."""
        audio = np.atleast_2d(np.asarray(x, dtype=np.float32))
        if sr != 16000 and sr % 16000 == 0:
            audio, sr = audio[:, :: sr // 16000], 16000
        n = 512 if check_sample_rate(sr) == 16000 else 256
        self.reset_states()
        padded = np.zeros((audio.shape[0], -(-audio.shape[1] // n) * n), np.float32)
        padded[:, : audio.shape[1]] = audio
        outs = [self(padded[:, i : i + n], sr) for i in range(0, padded.shape[1], n)]
        return np.concatenate(outs, axis=1)


def load_silero_vad(onnx: bool = False, opset_version: int = 16) -> SileroModel:
    """The Silero VAD model, compiled by asyncjit (``onnx``/``opset_version`` accepted for
    compatibility: the weights always come from the package's ONNX file)."""
    if opset_version not in (15, 16):
        raise InvalidArgumentError(f"opset_version must be 15 or 16 (as in silero_vad), got {opset_version}")
    return SileroModel()


def _mono(audio: npt.ArrayLike) -> npt.NDArray[np.float32]:
    try:
        a = np.asarray(audio, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError("Audio cannot be casted to an array. Cast it manually") from exc
    while a.ndim > 1 and a.shape[0] == 1:  # the package squeezes leading empty dimensions
        a = a[0]
    if a.ndim > 1:
        raise AudioFormatError(
            f"more than one dimension in audio (shape {a.shape}); are you passing 2 channels? "
            "Mix them down: audio.mean(axis=0)"
        )
    return np.ascontiguousarray(a)


def get_speech_timestamps(
    audio: npt.ArrayLike,
    model: Any,
    threshold: float = 0.5,
    sampling_rate: int = 16000,
    min_speech_duration_ms: int = 250,
    max_speech_duration_s: float = math.inf,
    min_silence_duration_ms: int = 100,
    speech_pad_ms: int = 30,
    return_seconds: bool = False,
    time_resolution: int = 1,
    visualize_probs: bool = False,
    progress_tracking_callback: Callable[[float], None] | None = None,
    neg_threshold: float | None = None,
    window_size_samples: int = 512,
    min_silence_at_max_speech: int = 98,
    use_max_poss_sil_at_max_speech: bool = True,
) -> list[dict[str, Any]]:
    """``silero_vad.get_speech_timestamps``: speech segments of a 1-D waveform as dicts.

    ``model`` is ``load_silero_vad()`` or anything called as ``model(chunk, sr)`` returning one
    probability (``.item()`` or ``float()``) with ``reset_states()``. ``window_size_samples`` is
    ignored, as in the package (512 at 16 kHz, 256 at 8 kHz).
    """
    wav = _mono(audio)
    step = 1
    if sampling_rate > 16000 and sampling_rate % 16000 == 0:
        step = sampling_rate // 16000
        sampling_rate = 16000
        wav = np.ascontiguousarray(wav[::step])
        warnings.warn("Sampling rate is a multiply of 16000, casting to 16000 manually!", stacklevel=2)
    check_sample_rate(sampling_rate)
    window = 512 if sampling_rate == 16000 else 256
    model.reset_states()
    n = wav.size
    probs: list[float] = []
    vad = model._vad(sampling_rate) if isinstance(model, SileroModel) else None
    for start in range(0, n, window):
        chunk = wav[start : start + window]
        if chunk.size < window:
            chunk = np.pad(chunk, (0, window - chunk.size))
        if vad is not None:
            probs.append(vad(chunk))  # the same network, without the [1, 1] array per call
        else:
            prob = model(chunk, sampling_rate)
            probs.append(float(prob.item() if hasattr(prob, "item") else prob))
        if progress_tracking_callback is not None:
            progress_tracking_callback(min(start + window, n) / n * 100)
    segments = speech_timestamps(
        probs,
        sampling_rate,
        threshold=threshold,
        neg_threshold=neg_threshold,
        min_speech_duration_ms=min_speech_duration_ms,
        max_speech_duration_s=max_speech_duration_s,
        min_silence_duration_ms=min_silence_duration_ms,
        speech_pad_ms=speech_pad_ms,
        window_size_samples=window,
        audio_length_samples=n,
        min_silence_at_max_speech=min_silence_at_max_speech,
        use_max_poss_sil_at_max_speech=use_max_poss_sil_at_max_speech,
        return_seconds=return_seconds,
        time_resolution=time_resolution,
        visualize_probs=visualize_probs,
    )
    out: list[dict[str, Any]] = [s.as_dict() for s in segments]
    if step > 1 and not return_seconds:
        out = [{"start": int(d["start"]) * step, "end": int(d["end"]) * step} for d in out]
    return out


class VADIterator:
    """``silero_vad.VADIterator``: feed chunks in order, get ``{"start": ...}`` when speech begins,
    ``{"end": ...}`` when it has ended (after ``min_silence_duration_ms``), else None."""

    def __init__(
        self,
        model: Any,
        threshold: float = 0.5,
        sampling_rate: int = 16000,
        min_silence_duration_ms: int = 100,
        speech_pad_ms: int = 30,
    ) -> None:
        if sampling_rate not in (8000, 16000):
            raise AudioFormatError("VADIterator does not support sampling rates other than [8000, 16000]")
        self.model = model
        self.threshold = threshold
        self.sampling_rate = sampling_rate
        self.min_silence_samples = sampling_rate * min_silence_duration_ms / 1000
        self.speech_pad_samples = sampling_rate * speech_pad_ms / 1000
        self.reset_states()

    def reset_states(self) -> None:
        self.model.reset_states()
        self.triggered = False
        self.temp_end = 0.0
        self.current_sample = 0

    def _stamp(self, sample: float, return_seconds: bool, time_resolution: int) -> int | float:
        return round(sample / self.sampling_rate, time_resolution) if return_seconds else int(sample)

    def __call__(
        self, x: npt.ArrayLike, return_seconds: bool = False, time_resolution: int = 1
    ) -> dict[str, int | float] | None:
        chunk = np.asarray(x, dtype=np.float32)
        window = chunk.shape[-1] if chunk.ndim else 0
        self.current_sample += window
        out = self.model(chunk, self.sampling_rate)
        prob = float(out.item() if hasattr(out, "item") else out)
        if prob >= self.threshold and self.temp_end:
            self.temp_end = 0
        if prob >= self.threshold and not self.triggered:
            self.triggered = True
            start = max(0, self.current_sample - self.speech_pad_samples - window)
            return {"start": self._stamp(start, return_seconds, time_resolution)}
        if prob < self.threshold - 0.15 and self.triggered:
            if not self.temp_end:
                self.temp_end = self.current_sample
            if self.current_sample - self.temp_end < self.min_silence_samples:
                return None
            end = self.temp_end + self.speech_pad_samples - window
            self.temp_end = 0
            self.triggered = False
            return {"end": self._stamp(end, return_seconds, time_resolution)}
        return None


def collect_chunks(
    tss: Sequence[dict[str, Any]], wav: npt.ArrayLike, seconds: bool = False, sampling_rate: int | None = None
) -> npt.NDArray[np.float32]:
    """The audio of the given segments, concatenated (``silero_vad.collect_chunks``)."""
    audio = np.asarray(wav, dtype=np.float32)
    if seconds:
        if not sampling_rate:
            raise InvalidArgumentError("sampling_rate is needed when the timestamps are in seconds")
        tss = [
            {"start": round(t["start"] * sampling_rate), "end": round(t["end"] * sampling_rate)} for t in tss
        ]
    if not tss:
        return np.zeros(0, np.float32)
    return np.concatenate([audio[int(t["start"]) : int(t["end"])] for t in tss])


def save_audio(path: str | os.PathLike[str], tensor: npt.ArrayLike, sampling_rate: int = 16000) -> None:
    """Write 16-bit PCM WAV (``silero_vad.save_audio``), with soundfile."""
    import soundfile

    soundfile.write(
        os.fspath(path), np.asarray(tensor, dtype=np.float32).reshape(-1), sampling_rate, "PCM_16"
    )
