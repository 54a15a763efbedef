"""``PcmConverter``: raw PCM bytes as a socket delivers them, to float32 mono at a model's rate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asyncjit.audio import AudioConverter, PcmConverter, PcmFormat
from asyncjit.errors import AudioFormatError

pytest.importorskip("soxr")


def _signal(n: int, channels: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.clip(rng.normal(0, 0.3, (n, channels)), -1, 1).astype(np.float32)


@pytest.mark.parametrize(
    ("encoding", "dtype", "scale"),
    [("s8", "i1", 127), ("s16le", "<i2", 32767), ("s32le", "<i4", 2**31 - 1), ("f32le", "<f4", 1)],
)
@pytest.mark.parametrize(("rate", "channels"), [(16000, 1), (16000, 2), (48000, 1), (44100, 3)])
def test_pieces_of_any_length_give_audio_converters_samples(
    encoding: str, dtype: str, scale: int, rate: int, channels: int
) -> None:
    """Bytes cut anywhere (inside a sample or a frame) convert to what ``AudioConverter`` gives
    for the whole array: the same values, the same length after ``flush``."""
    x = _signal(rate // 4, channels)
    pcm = (x.astype(np.float64) * scale).astype(dtype)
    data = pcm.tobytes()
    conv = PcmConverter(PcmFormat(rate, channels, encoding), 16000)
    cuts = [0, 1, 7, 333, 1000, 4097, len(data)]
    pieces = [conv.push(data[a:b]) for a, b in itertools.pairwise(cuts)] + [conv.flush()]
    got = np.concatenate(pieces)
    ref = AudioConverter(rate, 16000, channels)
    want = np.concatenate([ref.push(pcm if channels > 1 else pcm.reshape(-1)), ref.flush()])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "fmt",
    [
        PcmFormat(10**9),
        PcmFormat(16000, 0),
        PcmFormat(16000, 33),
        PcmFormat(16000, 1, "mp3"),
        PcmFormat(True),
    ],  # type: ignore[arg-type]
)
def test_formats_out_of_range_are_audio_format_errors(fmt: PcmFormat) -> None:
    with pytest.raises(AudioFormatError):
        PcmConverter(fmt, 16000)


def test_width_must_be_1_2_or_4_bytes() -> None:
    assert PcmFormat.from_width(16000, 2, 1) == PcmFormat(16000, 1, "s16le")
    with pytest.raises(AudioFormatError, match="width"):
        PcmFormat.from_width(16000, 3, 1)


def test_nan_float_samples_are_refused() -> None:
    conv = PcmConverter(PcmFormat(16000, 1, "f32le"), 16000)
    with pytest.raises(AudioFormatError, match="NaN"):
        conv.push(np.array([0.0, np.nan], "<f4").tobytes())
