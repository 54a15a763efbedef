"""Audio files in any common format, read with soundfile (libsndfile), every problem typed.

WAV (PCM 8/16/24/32-bit, float, extensible headers), FLAC, OGG/Vorbis, MP3 (libsndfile >= 1.1)
and the other formats libsndfile knows are read as float32. A path that cannot be opened raises
the ``OSError`` subclass ``open()`` would (``FileNotFoundError``, ``IsADirectoryError``,
``PermissionError``), naming the path; anything wrong inside the file raises ``AudioFormatError``
naming the file and the problem: empty, not audio, a header cut short, a WAV whose header
declares more frames than it holds, a data chunk ending in a partial frame, no samples, or NaN /
infinite float samples.

libsndfile quietly reads what is there from a truncated WAV; the RIFF walk in
``_riff_problem`` is what notices (about 30 lines: it reads the chunk headers, never the samples).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import AudioFormatError
from ._convert import AudioConverter

__all__ = ["AudioClip", "AudioInfo", "audio_info", "check_finite", "load_audio", "open_audio"]

_UNKNOWN_SIZE = 0xFFFFFFFF  # a WAV written to a pipe: "read to the end of the file"


@attrs.frozen
class AudioInfo:
    """What a file holds, before any conversion."""

    path: str
    format: str  # libsndfile's major format: "WAV", "FLAC", "OGG", "MP3", ...
    subtype: str  # "PCM_16", "PCM_24", "FLOAT", "VORBIS", ...
    sample_rate: int
    channels: int
    frames: int

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate

    def describe(self) -> str:
        return (
            f"{self.format} {self.subtype}, {self.channels} channel(s), {self.sample_rate} Hz, "
            f"{self.duration_s:.2f} s"
        )


@attrs.frozen
class AudioClip:
    """A whole file as float32 mono samples at ``sample_rate``, and what was done to get there."""

    samples: npt.NDArray[np.float32]
    sample_rate: int
    info: AudioInfo
    conversions: tuple[str, ...]


def _soundfile() -> Any:
    try:
        import soundfile
    except ImportError as exc:  # the audio extra is not installed
        raise ImportError("reading audio files needs soundfile: pip install 'asyncjit[audio]'") from exc
    return soundfile


def _check_path(path: str) -> int:
    """The file's size; the OSError ``open()`` would raise for a missing path or a directory."""
    st = os.stat(path)  # FileNotFoundError / PermissionError, naming the path
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not an audio file", path)
    if st.st_size == 0:
        raise AudioFormatError(f"{path!r} is empty (0 bytes), not an audio file")
    return st.st_size


def _riff_problem(path: str, size: int) -> str | None:
    """A RIFF/WAVE file whose data chunk is cut short or ends in a partial frame: what is wrong."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        block_align = 0
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            cid, length = struct.unpack("<4sI", f.read(8))
            if cid == b"fmt ":
                fmt = f.read(min(length, 16))
                if len(fmt) >= 14:
                    block_align = struct.unpack_from("<H", fmt, 12)[0]
            elif cid == b"data":
                if length == _UNKNOWN_SIZE or block_align == 0:
                    return None
                held = size - pos - 8
                if length > held:
                    return (
                        f"truncated: its header declares {length // block_align} frames, the file "
                        f"holds {held // block_align}; re-export or re-download it"
                    )
                if length % block_align:
                    return (
                        f"its data chunk ends in a partial frame ({length % block_align} of "
                        f"{block_align} bytes): the file was cut or written wrongly"
                    )
                return None
            pos += 8 + length + (length & 1)
    return None


def open_audio(path: str | os.PathLike[str]) -> tuple[Any, AudioInfo]:
    """Open a file for block reads: ``(soundfile.SoundFile, AudioInfo)``; close the first.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: the path cannot be opened.
        AudioFormatError: the file is not readable audio (see the module docstring).
    """
    sf = _soundfile()
    p = os.fspath(path)
    size = _check_path(p)
    try:
        f = sf.SoundFile(p)
    except sf.LibsndfileError as exc:
        raise AudioFormatError(
            f"{p!r} is not an audio file soundfile can read ({exc.error_string}); "
            f"formats: WAV, FLAC, OGG, MP3 and the others libsndfile reads"
        ) from exc
    try:
        info = AudioInfo(p, f.format, f.subtype, int(f.samplerate), int(f.channels), int(f.frames))
        problem = _riff_problem(p, size) if info.format in ("WAV", "WAVEX") else None
        if problem is not None:
            raise AudioFormatError(f"{p!r} is {problem}")
        if info.frames == 0:
            raise AudioFormatError(f"{p!r} is a {info.format} file with no samples")
    except BaseException:
        f.close()
        raise
    return f, info


def audio_info(path: str | os.PathLike[str]) -> AudioInfo:
    """Format, rate, channels and length of an audio file, after the checks of ``open_audio``."""
    f, info = open_audio(path)
    f.close()
    return info


def check_finite(samples: npt.NDArray[np.float32], where: str, offset: int = 0) -> None:
    """AudioFormatError naming ``where`` if a sample is NaN or infinite (float files can hold them)."""
    if not np.isfinite(samples).all():
        bad = int(np.flatnonzero(~np.isfinite(samples.reshape(-1)))[0])
        raise AudioFormatError(
            f"{where} holds NaN or infinite samples (the first at sample {offset + bad}); "
            f"a model's state would be corrupted. Repair the file or replace them with np.nan_to_num"
        )


def load_audio(
    path: str | os.PathLike[str], sample_rate: int | None = None, *, keep: tuple[int, ...] = ()
) -> AudioClip:
    """Read a whole file as float32 mono, resampled to ``sample_rate`` with soxr.

    Args:
        sample_rate: the rate wanted; None keeps the file's.
        keep: rates returned as they are even when ``sample_rate`` differs (the demo keeps 8000
            and 16000 Hz files, the two rates Silero VAD has weights for).
    """
    f, info = open_audio(path)
    with f:
        try:
            data = f.read(dtype="float32", always_2d=True)
        except _soundfile().LibsndfileError as exc:
            raise AudioFormatError(f"{info.path!r}: decoding failed ({exc.error_string})") from exc
    target = info.sample_rate if sample_rate is None or info.sample_rate in keep else sample_rate
    conv = AudioConverter(info.sample_rate, target, info.channels, source_format=info.subtype)
    samples = conv.push(data)
    samples = np.concatenate([samples, conv.flush()]) if target != info.sample_rate else samples
    check_finite(samples, repr(info.path))
    return AudioClip(np.ascontiguousarray(samples, dtype=np.float32), target, info, conv.conversions)
