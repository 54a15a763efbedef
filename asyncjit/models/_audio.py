"""Audio in for the speech models: WAV files, sample rates and chunk checks, with typed errors.

Silero VAD runs at 8 kHz or 16 kHz on chunks of 256 or 512 float32 samples. Everything a user
can get wrong on the way there (a stereo or 44.1 kHz file, an empty or truncated file, an int16
chunk, a 480-sample chunk, NaN samples) is caught here with a message that says how to fix it,
before any graph runs.

WAV reading uses the stdlib ``wave`` module: 16-bit PCM, mono. Rates: 8000 and 16000 Hz are
returned as they are; integer multiples of 16000 (32, 48, 96 kHz) are decimated to 16000 by
keeping every k-th sample, exactly as ``silero_vad.get_speech_timestamps`` does (no anti-alias
filter, so results match the package's); every other rate is rejected with a ``sox`` command
that converts the file.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from ..errors import AudioFormatError, DTypeMismatchError, ShapeMismatchError

__all__ = [
    "SAMPLE_RATES",
    "AudioFormatError",
    "check_chunk",
    "check_sample_rate",
    "chunk_samples",
    "context_samples",
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
            f"(for a file: sox in.wav -r 16000 out.wav)"
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
    """Read a mono 16-bit PCM WAV file as float32 samples in [-1, 1) and its sample rate.

    8000 and 16000 Hz files are returned as they are; multiples of 16000 Hz are decimated to
    16000 (as silero_vad does); other rates are rejected.

    Raises:
        FileNotFoundError: no file at ``path``.
        AudioFormatError: the file is empty, not a WAV file, truncated, not 16-bit PCM, not
            mono, has no samples, or has an unsupported rate; each message says how to convert.
    """
    p = Path(path)
    convert = f"sox {p.name!r} -r 16000 -c 1 -b 16 -e signed-integer out.wav"
    size = p.stat().st_size  # FileNotFoundError for a missing file, as open() would raise
    if size == 0:
        raise AudioFormatError(f"{str(p)!r} is empty (0 bytes), not a WAV file")
    try:
        with wave.open(str(p), "rb") as f:
            channels, width, rate, frames = (
                f.getnchannels(),
                f.getsampwidth(),
                f.getframerate(),
                f.getnframes(),
            )
            if channels != 1:
                raise AudioFormatError(
                    f"{str(p)!r} has {channels} channels; the VAD needs mono audio. "
                    f"Downmix it first: sox {p.name!r} -c 1 out.wav"
                )
            if width != 2:
                raise AudioFormatError(
                    f"{str(p)!r} has {8 * width}-bit samples; only 16-bit PCM is read. "
                    f"Convert it: sox {p.name!r} -b 16 -e signed-integer out.wav"
                )
            data = f.readframes(frames)
    except AudioFormatError:
        raise
    except (wave.Error, EOFError) as exc:
        raise AudioFormatError(
            f"{str(p)!r} is not a 16-bit PCM WAV file that Python's wave module can read ({exc}); "
            f"convert it: {convert}"
        ) from exc
    if frames == 0:
        raise AudioFormatError(f"{str(p)!r} is a WAV file with no samples")
    if len(data) < frames * 2:
        raise AudioFormatError(
            f"{str(p)!r} is truncated: its header declares {frames} samples, the file holds "
            f"{len(data) // 2}; re-export or re-download it"
        )
    samples = (np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)).astype(np.float32)
    if rate in SAMPLE_RATES:
        return samples, rate
    if rate > 16000 and rate % 16000 == 0:
        return np.ascontiguousarray(samples[:: rate // 16000]), 16000
    raise AudioFormatError(
        f"{str(p)!r} is sampled at {rate} Hz; the VAD takes 8000 or 16000 Hz (or a multiple of "
        f"16000, decimated). Resample it: {convert}"
    )
