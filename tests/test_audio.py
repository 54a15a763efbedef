"""Audio in for the speech models: WAV reading, sample rates and chunk checks, each misuse typed."""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from asyncjit.errors import DTypeMismatchError, JitError, ShapeMismatchError
from asyncjit.models import (
    AudioFormatError,
    check_chunk,
    check_sample_rate,
    chunk_samples,
    context_samples,
    read_wav,
    speech_sample_path,
)


def _write_wav(path: Path, samples: np.ndarray, rate: int, channels: int = 1, width: int = 2) -> Path:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(samples.tobytes())
    return path


def _ramp(n: int) -> np.ndarray:
    return (np.arange(n) * 37 % 2000 - 1000).astype("<i2")


class TestReadWav:
    def test_shipped_sample(self) -> None:
        """The shipped speech is 7.7 s of 16 kHz float32 audio in [-1, 1)."""
        audio, rate = read_wav(speech_sample_path())
        assert rate == 16000 and audio.dtype == np.float32 and audio.shape == (123181,)
        assert 0.3 < float(np.abs(audio).max()) < 1.0

    @pytest.mark.parametrize("rate", [8000, 16000])
    def test_supported_rates_are_returned_as_they_are(self, tmp_path: Path, rate: int) -> None:
        """Samples are int16 / 32768, exactly."""
        pcm = _ramp(1000)
        audio, got = read_wav(_write_wav(tmp_path / "a.wav", pcm, rate))
        assert got == rate
        np.testing.assert_array_equal(audio, pcm.astype(np.float32) / 32768)

    @pytest.mark.parametrize("rate", [32000, 48000, 44100, 22050, 11025])
    def test_other_rates_are_resampled_to_16k_with_soxr(self, tmp_path: Path, rate: int) -> None:
        """Band-limited resampling (not sample dropping): the samples equal soxr's."""
        import soxr

        pcm = _ramp(3000)
        audio, got = read_wav(_write_wav(tmp_path / "a.wav", pcm, rate))
        assert got == 16000 and audio.dtype == np.float32
        want = soxr.resample(pcm.astype(np.float32) / 32768, rate, 16000, quality="HQ")
        np.testing.assert_allclose(audio, want, atol=1e-6)

    def test_stereo_is_mixed_down(self, tmp_path: Path) -> None:
        pcm = _ramp(400)
        audio, _ = read_wav(_write_wav(tmp_path / "st.wav", pcm, 16000, channels=2))
        pairs = pcm.reshape(-1, 2).astype(np.float32) / 32768
        np.testing.assert_allclose(audio, pairs.mean(axis=1), atol=1e-7)

    def test_8_bit_is_read(self, tmp_path: Path) -> None:
        audio, _ = read_wav(_write_wav(tmp_path / "u8.wav", np.full(100, 192, np.uint8), 16000, width=1))
        np.testing.assert_array_equal(audio, np.full(100, 0.5, np.float32))

    def test_float_wav_is_read(self, tmp_path: Path) -> None:
        """A 32-bit float WAV (format 3, written by hand) is read as it is."""
        samples = np.linspace(-0.9, 0.9, 16, dtype=np.float32)
        data = samples.tobytes()
        fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)
        riff = (
            b"WAVE"
            + b"fmt "
            + struct.pack("<I", len(fmt))
            + fmt
            + b"data"
            + struct.pack("<I", len(data))
            + data
        )
        path = tmp_path / "f32.wav"
        path.write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
        audio, rate = read_wav(path)
        assert rate == 16000
        np.testing.assert_array_equal(audio, samples)

    def test_empty_file(self, tmp_path: Path) -> None:
        (tmp_path / "e.wav").write_bytes(b"")
        with pytest.raises(AudioFormatError, match=r"e.wav' is empty \(0 bytes\)"):
            read_wav(tmp_path / "e.wav")

    def test_wav_without_samples(self, tmp_path: Path) -> None:
        with pytest.raises(AudioFormatError, match="no samples"):
            read_wav(_write_wav(tmp_path / "z.wav", np.zeros(0, "<i2"), 16000))

    def test_not_a_wav_file(self, tmp_path: Path) -> None:
        (tmp_path / "t.wav").write_text("this is a text file, not audio\n" * 4)
        with pytest.raises(AudioFormatError, match=r"t.wav' is not an audio file soundfile can read"):
            read_wav(tmp_path / "t.wav")

    def test_truncated_data(self, tmp_path: Path) -> None:
        """A file cut short inside its samples says how many the header promised."""
        path = _write_wav(tmp_path / "cut.wav", _ramp(1000), 16000)
        path.write_bytes(path.read_bytes()[:-500])
        with pytest.raises(
            AudioFormatError, match=r"truncated: its header declares 1000 frames, the file holds 750"
        ):
            read_wav(path)

    def test_truncated_header(self, tmp_path: Path) -> None:
        path = _write_wav(tmp_path / "cut.wav", _ramp(1000), 16000)
        path.write_bytes(path.read_bytes()[:30])
        with pytest.raises(AudioFormatError, match=r"cut\.wav"):
            read_wav(path)

    def test_missing_file_is_file_not_found(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match=r"nope\.wav"):
            read_wav(tmp_path / "nope.wav")

    def test_audio_errors_are_jit_and_value_errors(self) -> None:
        """Existing ``except ValueError`` clauses keep catching them."""
        assert issubclass(AudioFormatError, JitError) and issubclass(AudioFormatError, ValueError)


class TestSampleRate:
    def test_sizes(self) -> None:
        assert (chunk_samples(16000), context_samples(16000)) == (512, 64)
        assert (chunk_samples(8000), context_samples(8000)) == (256, 32)
        assert check_sample_rate(np.int64(8000)) == 8000  # type: ignore[arg-type]

    @pytest.mark.parametrize("rate", [44100, 48000, 0, -16000])
    def test_unsupported(self, rate: int) -> None:
        with pytest.raises(AudioFormatError, match=f"8000 or 16000 Hz, got {rate} Hz; resample"):
            check_sample_rate(rate)

    @pytest.mark.parametrize("rate", [True, 16000.0, "16000"])
    def test_not_an_int(self, rate: object) -> None:
        with pytest.raises(AudioFormatError, match="must be an int"):
            check_sample_rate(rate)  # type: ignore[arg-type]


class TestCheckChunk:
    def test_valid_chunks_pass_through_uncopied(self) -> None:
        one = np.zeros(512, np.float32)
        batch = np.zeros((7, 256), np.float32)
        assert check_chunk(one, 16000) is one
        assert check_chunk(batch, 8000) is batch

    @pytest.mark.parametrize(("rate", "length"), [(16000, 480), (16000, 256), (8000, 512), (16000, 576)])
    def test_wrong_length(self, rate: int, length: int) -> None:
        want = chunk_samples(rate)
        with pytest.raises(ShapeMismatchError, match=rf"exactly {want} samples .* got shape \({length},\)"):
            check_chunk(np.zeros(length, np.float32), rate)

    def test_wrong_rank(self) -> None:
        with pytest.raises(ShapeMismatchError):
            check_chunk(np.zeros((1, 2, 512), np.float32), 16000)

    def test_int16_says_how_to_scale(self) -> None:
        with pytest.raises(DTypeMismatchError, match=r"int16; scale it to \[-1, 1\]: .* / 32768"):
            check_chunk(np.zeros(512, np.int16), 16000)

    def test_float64_says_how_to_convert(self) -> None:
        with pytest.raises(DTypeMismatchError, match=r"float64; convert it: chunk.astype\(np.float32\)"):
            check_chunk(np.zeros(512), 16000)

    def test_not_an_array(self) -> None:
        with pytest.raises(DTypeMismatchError, match="got list"):
            check_chunk([0.0] * 512, 16000)

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_nan_and_inf(self, bad: float) -> None:
        chunk = np.zeros(512, np.float32)
        chunk[100] = bad
        with pytest.raises(AudioFormatError, match=r"1 NaN or infinite sample.*flat index 100"):
            check_chunk(chunk, 16000)

    def test_unsupported_rate(self) -> None:
        with pytest.raises(AudioFormatError):
            check_chunk(np.zeros(512, np.float32), 44100)
