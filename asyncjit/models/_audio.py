"""Audio in for the speech models: WAV files, sample rates and chunk checks, with typed errors.

Silero VAD runs at 8 kHz or 16 kHz on chunks of 256 or 512 float32 samples. Everything a user
can get wrong on the way there (a stereo or 44.1 kHz file, an empty or truncated file, an int16
chunk, a 480-sample chunk, NaN samples) is caught here with a message that says how to fix it,
before any graph runs.

Files are read by ``asyncjit.audio`` (soundfile: WAV of any width and header, FLAC, OGG, ...),
mixed down to mono and, unless at 8000 or 16000 Hz, resampled to 16000 Hz with soxr (a
band-limited resampler, not the sample dropping ``get_speech_timestamps`` applies to multiples of
16 kHz).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import AudioFormatError, DTypeMismatchError, ShapeMismatchError

__all__ = [
    "SAMPLE_RATES",
    "AudioFormatError",
    "check_chunk",
    "check_sample_rate",
    "chunk_samples",
    "context_samples",
    "read_audio",
    "read_wav",
]

SAMPLE_RATES = (8000, 16000)
"""The sample rates Silero VAD has weights for."""

_CHUNK = {16000: 512, 8000: 256}
_CONTEXT = {16000: 64, 8000: 32}


def check_sample_rate(sample_rate: int) -> int:
    """Return ``sample_rate`` if Silero VAD supports it (8000 or 16000).

    Raises:
        AudioFormatError: any other rate, with how to resample.
    """
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer):
        raise AudioFormatError(f"sample_rate must be an int (8000 or 16000), got {sample_rate!r}")
    if int(sample_rate) not in SAMPLE_RATES:
        raise AudioFormatError(
            f"Silero VAD runs at 8000 or 16000 Hz, got {sample_rate} Hz; resample the audio first "
            f"(asyncjit.audio.resample(samples, rate, 16000); files: asyncjit.audio.load_audio(path, 16000))"
        )
    return int(sample_rate)


def chunk_samples(sample_rate: int) -> int:
    """New samples per step: 512 at 16 kHz, 256 at 8 kHz (32 ms)."""
    return _CHUNK[check_sample_rate(sample_rate)]


def context_samples(sample_rate: int) -> int:
    """Samples of the previous chunk prepended to each step: 64 at 16 kHz, 32 at 8 kHz."""
    return _CONTEXT[check_sample_rate(sample_rate)]


def check_chunk(chunk: object, sample_rate: int) -> np.ndarray:
    """Validate one chunk ``[n]`` or a batch of chunks ``[B, n]`` for the VAD at ``sample_rate``.

    Returns the array itself (no copy) when it is valid.

    Raises:
        DTypeMismatchError: not a numpy array, or not float32 (with the conversion to use).
        ShapeMismatchError: not 1-D/2-D, or ``n`` is not 512 (16 kHz) / 256 (8 kHz).
        AudioFormatError: a sample is NaN or infinite, or the sample rate is unsupported.
    """
    n = chunk_samples(sample_rate)
    if not isinstance(chunk, np.ndarray):
        raise DTypeMismatchError(
            f"a VAD chunk must be a numpy float32 array of {n} samples, got {type(chunk).__name__} "
            f"(use np.asarray(chunk, dtype=np.float32))"
        )
    if chunk.dtype != np.float32:
        if chunk.dtype.kind in "iu":
            fix = f"scale it to [-1, 1]: chunk.astype(np.float32) / {2 ** (8 * chunk.dtype.itemsize - 1)}"
        else:
            fix = "convert it: chunk.astype(np.float32)"
        raise DTypeMismatchError(f"a VAD chunk must be float32, got {chunk.dtype}; {fix}")
    if chunk.ndim not in (1, 2) or chunk.shape[-1] != n:
        raise ShapeMismatchError(
            f"Silero VAD at {sample_rate} Hz takes chunks of exactly {n} samples "
            f"({n * 1000 // sample_rate} ms) as [{n}] or [batch, {n}], got shape {chunk.shape}; "
            f"buffer samples until you have {n} and zero-pad the last chunk"
        )
    if not np.isfinite(chunk).all():
        bad = np.flatnonzero(~np.isfinite(chunk.reshape(-1)))
        raise AudioFormatError(
            f"the chunk has {bad.size} NaN or infinite sample(s), the first at flat index {int(bad[0])}; "
            f"the VAD state would be corrupted for the rest of the stream. Replace them "
            f"(np.nan_to_num(chunk, nan=0.0, posinf=1.0, neginf=-1.0)) or drop the chunk"
        )
    return chunk


def read_wav(path: str | os.PathLike[str]) -> tuple[np.ndarray, int]:
    """Read an audio file (WAV, FLAC, OGG, ...; any width, any channels) as float32 mono and its rate.

    8000 and 16000 Hz files are returned at their rate; every other rate is resampled to 16000 Hz
    with soxr; several channels are averaged. ``asyncjit.audio.load_audio`` does the same and also
    says what it converted.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: the path cannot be opened.
        AudioFormatError: the file is empty, not audio, truncated, ends in a partial frame, has
            no samples or holds NaN/infinite samples; the message names the file.
    """
    from ..audio import load_audio

    clip = load_audio(path, 16000, keep=SAMPLE_RATES)
    return clip.samples, clip.sample_rate


def read_audio(path: str | os.PathLike[str], sampling_rate: int = 16000) -> np.ndarray:
    """``silero_vad.read_audio``: a file as 1-D float32 mono at ``sampling_rate`` (numpy, not torch).

    Any format soundfile reads, resampled with soxr, channels averaged.
    """
    from ..audio import load_audio

    return load_audio(path, check_sample_rate(sampling_rate)).samples
