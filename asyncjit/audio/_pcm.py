"""``PcmConverter``: raw PCM of any rate, width and channel count to float32 mono at a model's rate.

Network clients send interleaved integer PCM in pieces that need not end on a frame (Wyoming
says "rate, width, channels"; a browser sends float32 at 44.1 or 48 kHz). The converter keeps the
odd bytes between pieces and hands whole frames to ``AudioConverter`` (downmix by the mean,
``soxr``'s streaming resampler), so a stream cut into pieces gives the same samples as the whole.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import AudioFormatError
from ._convert import AudioConverter

__all__ = ["PCM_ENCODINGS", "PcmConverter", "PcmFormat"]

PCM_ENCODINGS = ("s8", "s16le", "s32le", "f32le")
"""Sample encodings ``PcmFormat`` takes: signed 8/16/32-bit integers and float32, little-endian."""

MIN_RATE, MAX_RATE = 4000, 384000
MAX_CHANNELS = 32

_DTYPES: dict[str, np.dtype[Any]] = {
    "s8": np.dtype("i1"),
    "s16le": np.dtype("<i2"),
    "s32le": np.dtype("<i4"),
    "f32le": np.dtype("<f4"),
}
_WIDTH_ENCODING = {1: "s8", 2: "s16le", 4: "s32le"}


@attrs.frozen
class PcmFormat:
    """Interleaved PCM as a client sends it: ``rate`` Hz, ``channels``, ``encoding`` (``PCM_ENCODINGS``)."""

    rate: int
    channels: int = 1
    encoding: str = "s16le"

    @classmethod
    def from_width(cls, rate: object, width: object, channels: object) -> PcmFormat:
        """A Wyoming ``audio-start``'s ``rate``/``width``/``channels`` (integer PCM, ``width`` bytes).

        Raises:
            AudioFormatError: a width other than 1, 2 or 4, or a value out of range (see ``checked``).
        """
        if not isinstance(width, int) or isinstance(width, bool) or width not in _WIDTH_ENCODING:
            raise AudioFormatError(f"PCM width must be 1, 2 or 4 bytes, got {width!r}")
        return cls(rate, channels, _WIDTH_ENCODING[width]).checked()  # type: ignore[arg-type]

    @property
    def frame_bytes(self) -> int:
        return int(_DTYPES[self.encoding].itemsize) * self.channels

    def checked(self) -> PcmFormat:
        """This format if it is one a converter can take.

        Raises:
            AudioFormatError: a rate outside 4 kHz..384 kHz, 0 or more than 32 channels, an
                unknown encoding, or values that are not ints.
        """
        for name, value in (("rate", self.rate), ("channels", self.channels)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise AudioFormatError(f"PCM {name} must be an int, got {value!r}")
        if not MIN_RATE <= self.rate <= MAX_RATE:
            raise AudioFormatError(f"PCM rate must be within {MIN_RATE}..{MAX_RATE} Hz, got {self.rate}")
        if not 1 <= self.channels <= MAX_CHANNELS:
            raise AudioFormatError(f"PCM channels must be within 1..{MAX_CHANNELS}, got {self.channels}")
        if not isinstance(self.encoding, str) or self.encoding not in _DTYPES:  # a list is unhashable
            raise AudioFormatError(f"PCM encoding must be one of {PCM_ENCODINGS}, got {self.encoding!r}")
        return self


class PcmConverter:
    """Bytes of ``source`` PCM in, float32 mono samples at ``rate`` out, piece by piece.

    The bytes layer of ``AudioConverter`` (which does the conversion and the resampling): a piece
    may end inside a frame; that partial frame waits for the next piece.

    Raises:
        AudioFormatError: a bad ``source`` (see ``PcmFormat.checked``), or NaN/inf float samples.
        ImportError: resampling is needed and ``soxr`` is not installed (the ``audio`` extra).
    """

    def __init__(self, source: PcmFormat, rate: int) -> None:
        self.source = source.checked()
        self.rate = rate
        self._dtype = _DTYPES[source.encoding]
        self._float = source.encoding == "f32le"
        self._frame = source.frame_bytes
        self._rest = b""
        self._converter = AudioConverter(source.rate, rate, source.channels, source.encoding)
        # mono integer PCM at the model's rate: one scaling, the value AudioConverter computes
        # (the scale is a power of two, so float32 and float64 division agree exactly)
        self._direct = (
            None
            if self._float or source.channels > 1 or source.rate != rate
            else np.float32(1.0 / 2 ** (8 * self._dtype.itemsize - 1))
        )

    def push(self, data: bytes) -> npt.NDArray[np.float32]:
        """Convert the next piece (any length; a partial frame waits for the next piece)."""
        if self._rest:
            data = self._rest + data
        whole = len(data) - len(data) % self._frame
        self._rest = data[whole:]
        if not whole:
            return np.zeros(0, np.float32)
        pcm = np.frombuffer(data, self._dtype, count=whole // self._dtype.itemsize)
        if self._direct is not None:  # one ufunc: converted to float32, then scaled
            out: npt.NDArray[np.float32] = np.multiply(pcm, self._direct, dtype=np.float32)
            return out
        if self._float and not np.isfinite(pcm).all():
            raise AudioFormatError("float32 PCM holds NaN or inf samples")
        channels = self.source.channels
        return self._converter.push(pcm.reshape(-1, channels) if channels > 1 else pcm)

    def flush(self) -> npt.NDArray[np.float32]:
        """The resampler's last samples at the end of the stream (a partial frame is dropped)."""
        self._rest = b""
        return self._converter.flush()
