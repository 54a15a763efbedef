"""Sample conversion shared by files and network audio: integer PCM to float32, downmix, resampling.

``AudioConverter`` turns blocks of any width, channel count and rate into float32 mono at the
rate a model takes, keeping resampler state across blocks (``soxr.ResampleStream``), so a file read
block by block and a socket delivering 20 ms packets give the same samples as one whole-array
conversion would (up to the resampler's float rounding). ``conversions`` says what it does, for the
user to see. Cut its output into model chunks with ``asyncjit.scheduler.Rechunker``.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import AudioFormatError

__all__ = ["AudioConverter", "resample", "to_float32", "to_mono"]

Samples = npt.NDArray[np.float32]
RESAMPLE_QUALITY = "HQ"
"""soxr's quality preset: 'HQ' (20-bit precision, the library's recommended default)."""


def to_float32(samples: npt.ArrayLike) -> Samples:
    """Float samples as float32; integer PCM scaled to [-1, 1) (uint8 is offset binary, as in WAV)."""
    a = np.asarray(samples)
    if a.dtype.kind == "f":
        return a.astype(np.float32, copy=False)
    if a.dtype == np.uint8:
        return ((a.astype(np.float32) - 128.0) / 128.0).astype(np.float32)
    if a.dtype.kind == "i":
        scale = float(2 ** (8 * a.dtype.itemsize - 1))
        return (a.astype(np.float64) / scale).astype(np.float32)
    raise AudioFormatError(f"audio samples must be integer PCM or float, got dtype {a.dtype}")


def to_mono(samples: Samples) -> Samples:
    """``[frames]`` as it is; ``[frames, channels]`` averaged over the channels (a downmix)."""
    if samples.ndim == 1:
        return samples
    if samples.ndim != 2:
        raise AudioFormatError(f"audio must be [frames] or [frames, channels], got shape {samples.shape}")
    if samples.shape[1] == 1:
        return samples[:, 0]
    mixed: Samples = samples.mean(axis=1, dtype=np.float32)
    return mixed


def resample(samples: npt.ArrayLike, from_rate: int, to_rate: int) -> Samples:
    """One whole mono signal from ``from_rate`` to ``to_rate`` Hz with soxr (band-limited)."""
    x = to_mono(to_float32(samples))
    if from_rate == to_rate:
        return x
    import soxr

    out: Any = soxr.resample(x, from_rate, to_rate, quality=RESAMPLE_QUALITY)
    return np.asarray(out, dtype=np.float32)


@attrs.define
class AudioConverter:
    """Blocks of PCM/float audio, any channels and rate, in; float32 mono at ``to_rate`` out.

    Stateful: feed blocks in order with ``push``, then ``flush`` once for the resampler's tail.
    """

    from_rate: int
    to_rate: int
    channels: int = 1
    source_format: str = ""
    _stream: Any = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for name, rate in (("from_rate", self.from_rate), ("to_rate", self.to_rate)):
            if isinstance(rate, bool) or not isinstance(rate, int | np.integer) or rate <= 0:
                raise AudioFormatError(f"{name} must be a positive int (Hz), got {rate!r}")
        if self.channels < 1:
            raise AudioFormatError(f"channels must be >= 1, got {self.channels}")
        if self.from_rate != self.to_rate:
            try:
                import soxr
            except ImportError as exc:
                raise ImportError(
                    f"resampling {self.from_rate} Hz to {self.to_rate} Hz needs soxr: "
                    "pip install 'asyncjit[audio]'"
                ) from exc
            self._stream = soxr.ResampleStream(
                self.from_rate, self.to_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY
            )

    @property
    def conversions(self) -> tuple[str, ...]:
        """What is done to the samples, in words (empty when they pass through as they are)."""
        done: list[str] = []
        if self.source_format and self.source_format != "FLOAT32":
            done.append(f"{self.source_format} to float32")
        if self.channels > 1:
            done.append(f"{self.channels} channels mixed down to mono")
        if self._stream is not None:
            done.append(f"resampled {self.from_rate} Hz to {self.to_rate} Hz (soxr {RESAMPLE_QUALITY})")
        return tuple(done)

    def push(self, block: npt.ArrayLike) -> Samples:
        """Convert the next block (``[frames]`` or ``[frames, channels]``); may return fewer or
        more frames than given while the resampler fills."""
        x = to_float32(block)
        if x.ndim == 2 and x.shape[1] != self.channels:
            raise AudioFormatError(f"expected {self.channels} channel(s), got a block of shape {x.shape}")
        x = np.ascontiguousarray(to_mono(x))
        if self._stream is None:
            return x
        return np.asarray(self._stream.resample_chunk(x, last=False), dtype=np.float32)

    def flush(self) -> Samples:
        """The resampler's last samples (none without resampling)."""
        if self._stream is None:
            return np.zeros(0, np.float32)
        return np.asarray(self._stream.resample_chunk(np.zeros(0, np.float32), last=True), dtype=np.float32)
