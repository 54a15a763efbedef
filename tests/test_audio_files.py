"""Audio files in any common format, and every way a file can be bad, through every audio entry point.

Files are generated with soundfile/numpy (sox is not assumed on the machine): a stereo 44.1 kHz
WAV (extensible header, as sox writes), a float WAV, a 24-bit FLAC, an 8 kHz WAV and an OGG.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import numpy as np
import pytest
import soundfile as sf

from asyncjit.audio import AudioConverter, audio_info, load_audio, resample
from asyncjit.cli import main
from asyncjit.errors import AudioFormatError
from asyncjit.models import read_audio, read_wav
from asyncjit.scheduler import read_wav_header, wav_chunks

TONE_HZ = 440.0


def _tone(rate: int, seconds: float = 0.5, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.5 * np.sin(2 * np.pi * TONE_HZ * t)
    return np.stack([mono, 0.5 * mono], axis=1) if channels == 2 else mono


GOOD = {  # name: (format, subtype, rate, channels)
    "stereo_44k.wav": ("WAVEX", "PCM_16", 44100, 2),
    "float.wav": ("WAV", "FLOAT", 16000, 1),
    "pcm24.flac": ("FLAC", "PCM_24", 48000, 1),
    "narrow_8k.wav": ("WAV", "PCM_16", 8000, 1),
    "speech.ogg": ("OGG", "VORBIS", 22050, 1),
}


def _write_good(dir: Path, name: str) -> Path:
    fmt, subtype, rate, channels = GOOD[name]
    path = dir / name
    sf.write(path, _tone(rate, channels=channels), rate, subtype=subtype, format=fmt)
    return path


@pytest.mark.parametrize("name", sorted(GOOD))
def test_common_formats_load_as_mono_at_the_wanted_rate(tmp_path: Path, name: str) -> None:
    """Each file comes out float32 mono at 16 kHz (8 kHz kept), its conversions named."""
    _, _, rate, channels = GOOD[name]
    path = _write_good(tmp_path, name)
    clip = load_audio(path, 16000, keep=(8000, 16000))
    want_rate = rate if rate in (8000, 16000) else 16000
    assert clip.sample_rate == want_rate and clip.samples.dtype == np.float32 and clip.samples.ndim == 1
    assert abs(clip.samples.size - 0.5 * want_rate) <= 1
    assert clip.info.channels == channels and clip.info.sample_rate == rate
    said = "; ".join(clip.conversions)
    assert ("mixed down to mono" in said) == (channels == 2)
    assert (f"resampled {rate} Hz to 16000 Hz" in said) == (rate != want_rate)
    # the tone survives: its energy is at 440 Hz (the stereo mix is 0.75 of the left channel)
    spectrum = np.abs(np.fft.rfft(clip.samples))
    assert abs(np.argmax(spectrum) * want_rate / clip.samples.size - TONE_HZ) < 4
    amplitude = 0.375 if channels == 2 else 0.5
    assert abs(float(np.abs(clip.samples[100:-100]).max()) - amplitude) < 0.02


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(GOOD))
async def test_wav_chunks_reads_every_format_like_load_audio(tmp_path: Path, name: str) -> None:
    """Streamed block by block (read ahead, resampled on the way) equals the whole-file read."""
    path = _write_good(tmp_path, name)
    whole = load_audio(path, 16000).samples
    async with wav_chunks(path, 256, read_ahead=4, sample_rate=16000) as src:
        got = np.concatenate([c async for c in src])
    assert got.size == -(-whole.size // 256) * 256
    np.testing.assert_allclose(got[: whole.size], whole, atol=2e-6)


def test_converter_blocks_equal_one_call() -> None:
    """AudioConverter (for network audio): int16 stereo packets at 48 kHz give what one resample gives."""
    pcm = (_tone(48000, 0.3, channels=2) * 32767).astype(np.int16)
    conv = AudioConverter(48000, 16000, channels=2, source_format="PCM_16")
    parts = [conv.push(pcm[i : i + 960]) for i in range(0, len(pcm), 960)] + [conv.flush()]
    want = resample(pcm.astype(np.float32).mean(axis=1) / 32768, 48000, 16000)
    np.testing.assert_allclose(np.concatenate(parts), want, atol=1e-5)
    assert conv.conversions == (
        "PCM_16 to float32",
        "2 channels mixed down to mono",
        "resampled 48000 Hz to 16000 Hz (soxr HQ)",
    )
    with pytest.raises(AudioFormatError, match="expected 2 channel"):
        conv.push(np.zeros((4, 3), np.int16))
    with pytest.raises(AudioFormatError, match="from_rate must be a positive int"):
        AudioConverter(0, 16000)


# ---------------------------------------------------------------------------------------------
# Bad files: every audio entry point gives AudioFormatError naming the file, or the OSError
# subclass open() gives for a path that cannot be opened.


def _pcm_wav(path: Path, frames: int = 16000) -> bytes:
    sf.write(path, _tone(16000, frames / 16000), 16000, subtype="PCM_16")
    return path.read_bytes()


def _declares_more(path: Path) -> None:  # header says 16,000 frames, the file holds 8,000
    path.write_bytes(_pcm_wav(path)[: 44 + 16000])


def _header_cut(path: Path) -> None:
    path.write_bytes(_pcm_wav(path)[:30])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _text(path: Path) -> None:
    path.write_text("not audio at all\n" * 20)


def _half_sample(path: Path) -> None:  # a data chunk of 32,001 bytes: the last sample is half there
    data = bytearray(_pcm_wav(path))
    data[40:44] = struct.pack("<I", 32001)
    data[4:8] = struct.pack("<I", 32037 + 1)
    path.write_bytes(bytes(data) + b"\x01\x00")


def _stereo_partial_frame(path: Path) -> None:  # 16-bit stereo: 4-byte frames, 2 bytes left over
    sf.write(path, _tone(16000, 0.1, channels=2), 16000, subtype="PCM_16", format="WAV")
    data = bytearray(path.read_bytes())
    length = struct.unpack_from("<I", data, 40)[0]
    data[40:44] = struct.pack("<I", length + 2)
    path.write_bytes(bytes(data) + b"\x00\x00")


def _nan_float(path: Path) -> None:
    x = _tone(16000, 0.1).astype(np.float32)
    x[500] = np.nan
    sf.write(path, x, 16000, subtype="FLOAT")


def _no_samples(path: Path) -> None:
    sf.write(path, np.zeros(0, np.float32), 16000, subtype="PCM_16")


def _directory(path: Path) -> None:
    path.mkdir()


def _missing(path: Path) -> None:
    pass


BAD: dict[str, tuple[Callable[[Path], None], type[BaseException], str]] = {
    "declares_more": (
        _declares_more,
        AudioFormatError,
        "truncated: its header declares 16000 frames, the file holds 8000",
    ),
    "header_cut": (_header_cut, AudioFormatError, "not an audio file soundfile can read"),
    "empty": (_empty, AudioFormatError, r"is empty \(0 bytes\)"),
    "text": (_text, AudioFormatError, "not an audio file soundfile can read"),
    "half_sample": (_half_sample, AudioFormatError, r"ends in a partial frame \(1 of 2 bytes\)"),
    "stereo_partial": (_stereo_partial_frame, AudioFormatError, r"ends in a partial frame \(2 of 4 bytes\)"),
    "nan_float": (_nan_float, AudioFormatError, "NaN or infinite samples .*at sample 500"),
    "no_samples": (_no_samples, AudioFormatError, "no samples"),
    "directory": (_directory, IsADirectoryError, "is a directory"),
    "missing": (_missing, FileNotFoundError, "No such file"),
}


async def _drain(path: Path) -> None:
    async with wav_chunks(path, 512, sample_rate=16000) as src:
        async for _ in src:
            pass


ENTRY_POINTS: dict[str, Callable[[Path], object]] = {
    "load_audio": lambda p: load_audio(p, 16000),
    "audio_info": audio_info,
    "read_wav": read_wav,
    "read_audio": read_audio,
    "read_wav_header": read_wav_header,
    "wav_chunks": lambda p: anyio.run(_drain, p),
}
WHOLE_FILE_ONLY = {"audio_info", "read_wav_header"}  # header checks only: they never decode samples


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_raise_typed_errors_naming_the_file(tmp_path: Path, case: str, entry: str) -> None:
    make, error, message = BAD[case]
    path = tmp_path / f"{case}.wav"
    make(path)
    if case == "nan_float" and entry in WHOLE_FILE_ONLY:
        audio_info(path)  # a valid header: the NaN is found when the samples are read
        return
    with pytest.raises(error, match=message) as caught:
        ENTRY_POINTS[entry](path)
    assert str(path) in str(caught.value) or path.name in str(caught.value)


def test_mp3_renamed_wav_is_read_by_its_content(tmp_path: Path) -> None:
    """libsndfile >= 1.1 reads MP3 and detects it by content, so a misnamed file still works."""
    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile cannot read MP3 (needs >= 1.1.0); the text case covers unreadable files")
    sf.write(tmp_path / "a.mp3", _tone(16000), 16000, format="MP3")
    shutil.copy(tmp_path / "a.mp3", tmp_path / "renamed.wav")
    clip = load_audio(tmp_path / "renamed.wav", 16000)
    assert clip.info.format == "MP3" and clip.sample_rate == 16000 and clip.samples.size > 7000


@pytest.mark.parametrize("case", ["directory", "declares_more", "empty", "missing"])
def test_cli_demo_reports_bad_audio_in_one_line(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit status 2 and one line naming the file, no traceback."""
    make = BAD[case][0]
    path = tmp_path / f"{case}.wav"
    make(path)
    assert main(["demo", "--audio", str(path), "--no-compare"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncjit: error: ") and path.name in err and "Traceback" not in err


def test_cli_demo_runs_every_common_format(tmp_path: Path) -> None:
    """The issue's list: stereo 44.1 kHz WAV, float WAV, 24-bit FLAC and an 8 kHz file through
    ``asyncjit demo --audio`` (a subprocess, as a user runs it), each conversion reported."""
    for name in ["stereo_44k.wav", "float.wav", "pcm24.flac", "narrow_8k.wav"]:
        path = _write_good(tmp_path, name)
        run = subprocess.run(
            [sys.executable, "-m", "asyncjit.cli", "demo", "--audio", str(path), "--no-compare"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        assert "speech segments" in run.stdout and "per-chunk latency" in run.stdout
        if name == "stereo_44k.wav":
            assert "2 channels mixed down to mono; resampled 44100 Hz to 16000 Hz" in run.stdout
        if name == "narrow_8k.wav":
            assert "8000 Hz" in run.stdout and "resampled" not in run.stdout


def test_many_streams_example_takes_files(tmp_path: Path) -> None:
    """``examples/many_streams.py a b`` serves one stream per file, in any format and rate."""
    example = Path(__file__).resolve().parents[1] / "examples" / "many_streams.py"
    files = [_write_good(tmp_path, "stereo_44k.wav"), _write_good(tmp_path, "pcm24.flac")]
    run = subprocess.run(
        [sys.executable, str(example), *map(str, files), "--backend", "trio"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "\n2 streams, 32 chunks" in "\n" + run.stdout  # 0.5 s at 16 kHz: 16 chunks each
    assert "stereo_44k.wav): 16 chunks" in run.stdout and "pcm24.flac): 16 chunks" in run.stdout
