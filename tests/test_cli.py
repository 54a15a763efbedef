"""The ``asyncjit`` command: the Silero VAD demo and its error handling."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from asyncjit.cli import main


def test_demo_finds_the_speech_segments_and_compares_with_onnxruntime(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``asyncjit demo`` prints four speech segments, latencies, and the ONNX Runtime ratio."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "speech segments (4):" in out
    assert "asyncjit      per-chunk latency" in out
    assert "ONNX Runtime  per-chunk latency" in out
    diff = float(out.rsplit("max |probability difference|", 1)[1])
    assert diff < 1e-4


def test_demo_streams_multiplexes_live_streams_through_one_mux(capsys: pytest.CaptureFixture[str]) -> None:
    """``asyncjit demo --streams N`` prints throughput, latency percentiles, batch sizes, both ONNX
    Runtime figures with ratios, and matches ONNX Runtime per stream."""
    assert main(["demo", "--streams", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 live streams x 241 chunks" in out
    assert "asyncjit StreamMux" in out and "chunks/s" in out and "p99" in out and "batches" in out
    assert "ONNX Runtime per stream" in out and "ONNX Runtime hand-batched" in out
    assert out.count("StreamMux is") == 2
    diff = float(out.rsplit("ONNX Runtime per stream:", 1)[1])
    assert diff < 1e-4


def test_demo_streams_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--streams", "0"])
    assert exc.value.code == 2 and "must be >= 1" in capsys.readouterr().err


def test_demo_on_a_user_file_at_8khz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--audio`` takes a user's mono WAV; 8 kHz runs the 8 kHz weights."""
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        t = np.arange(8000) / 8000
        w.writeframes((np.sin(2 * np.pi * 220 * t) * 3000).astype("<i2").tobytes())
    assert main(["demo", "--audio", str(path), "--no-compare"]) == 0
    out = capsys.readouterr().out
    assert "8000 Hz" in out and "resampled" not in out and "ONNX Runtime" not in out


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"RIFF0000WAVEjunk", "bad.wav' is not an audio file"), (None, "No such file")],
)
def test_demo_reports_bad_audio_as_an_error_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, match: str
) -> None:
    """Malformed or missing audio exits with status 2 and a one-line message, no traceback."""
    path = tmp_path / "bad.wav"
    if content is not None:
        path.write_bytes(content)
    assert main(["demo", "--audio", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncjit: error:") and match in err


def test_unknown_command_exits_with_usage() -> None:
    """A wrong subcommand is an argparse usage error, not a traceback."""
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"])
    assert exc.value.code == 2
