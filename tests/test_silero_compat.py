"""``asyncjit.models.silero_compat`` against the ``silero_vad`` package's own Python functions.

The package imports torch at the top, so we cannot import it. Its ``get_speech_timestamps`` and
``VADIterator`` are compiled from the installed ``utils_vad.py`` (as tests/test_speech_timestamps.py
does for ``get_speech_timestamps_from_probs``) with a numpy stand-in for the five torch calls they
make, and run side by side with ours on the shipped speech and on generated audio. The package's
README example runs with only its import line changed.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import typing
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from asyncjit.audio import resample
from asyncjit.errors import ShapeMismatchError
from asyncjit.models import OnnxRuntimeVad, SpeechSegment, read_wav, speech_sample_path, speech_timestamps
from asyncjit.models.silero_compat import (
    SileroModel,
    VADIterator,
    collect_chunks,
    get_speech_timestamps,
    load_silero_vad,
    read_audio,
    save_audio,
)
from asyncjit.models.silero_vad import SileroVad


class _T(np.ndarray):  # type: ignore[type-arg]
    """The torch.Tensor methods the package's functions call, on numpy."""

    def dim(self) -> int:
        return self.ndim

    def squeeze(self, axis: Any = None) -> Any:  # torch's squeeze(0) of a non-1 dim is a no-op
        if axis is not None and self.shape[axis] != 1:
            return self
        return np.squeeze(np.asarray(self), axis).view(_T)


def _pad(x: Any, pad: tuple[int, int], value: float = 0.0) -> Any:
    return np.pad(np.asarray(x), pad, constant_values=value).view(_T)


def _decorate() -> Callable[[Any], Any]:
    return lambda f: f


TORCH = SimpleNamespace(
    is_tensor=lambda x: isinstance(x, _T),
    Tensor=lambda a: np.asarray(a, np.float32).view(_T),
    no_grad=_decorate,
    nn=SimpleNamespace(functional=SimpleNamespace(pad=_pad)),
)


def _package() -> dict[str, Any]:
    spec = importlib.util.find_spec("silero_vad")  # locates the package; does not import it
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "utils_vad.py"
    tree = ast.parse(source.read_text())
    wanted = {"get_speech_timestamps", "get_speech_timestamps_from_probs", "VADIterator"}
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in wanted]
    assert {n.name for n in body} == wanted
    namespace: dict[str, Any] = {
        "torch": TORCH,
        "List": typing.List,  # noqa: UP006 - the package annotates with it
        "Callable": typing.Callable,
        "warnings": warnings,
        "make_visualization": None,
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), str(source), "exec"), namespace)
    return namespace


PACKAGE = _package()


class _OrtModel:
    """ONNX Runtime on the package's ONNX file, called the way the package calls its model."""

    def __init__(self) -> None:
        self._vads: dict[int, OnnxRuntimeVad] = {}

    def __call__(self, x: Any, sr: int) -> np.ndarray:
        if sr not in self._vads:
            self._vads[sr] = OnnxRuntimeVad(sr, threads=1)
        return self._vads[sr](np.asarray(x, np.float32).reshape(1, -1))

    def reset_states(self) -> None:
        for v in self._vads.values():
            v.reset()


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    audio, rate = read_wav(speech_sample_path())
    assert rate == 16000
    return audio


@pytest.fixture(scope="module")
def model() -> SileroModel:
    return load_silero_vad()


def test_the_package_readme_example_runs_unchanged() -> None:
    """The first Python example of silero-vad's README, its import pointed at asyncjit, gives the
    segments the package's function gives with ONNX Runtime running the package's model."""
    readme = metadata.metadata("silero-vad").get_payload()  # type: ignore[attr-defined]
    block = re.search(r"```python3\n(from silero_vad import.*?)```", readme, re.S)
    assert block is not None
    code = block.group(1).replace("from silero_vad import", "from asyncjit.models.silero_compat import")
    code = code.replace("'path_to_audio_file'", repr(speech_sample_path()))
    scope: dict[str, Any] = {}
    exec(compile(code, "silero-vad README", "exec"), scope)
    ours = scope["speech_timestamps"]
    wav = read_audio(speech_sample_path())
    theirs = PACKAGE["get_speech_timestamps"](wav.view(_T), _OrtModel(), return_seconds=True)
    assert ours == theirs and len(ours) == 4
    assert all(isinstance(s["start"], float) for s in ours)


def _generated(rate: int, speech: np.ndarray) -> np.ndarray:
    """Speech pieces with silences, noise and a long stretch (to reach max_speech_duration_s)."""
    rng = np.random.default_rng(7)
    pieces = [
        np.zeros(rate // 3, np.float32),
        speech[16000:40000],
        (rng.normal(0, 0.01, rate // 2)).astype(np.float32),
        speech[60000:],
        np.zeros(rate // 10, np.float32),
        speech[:50000],
    ]
    audio = np.concatenate(pieces).astype(np.float32)
    return audio if rate == 16000 else resample(audio, 16000, rate)


@pytest.mark.parametrize("rate", [16000, 8000])
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"threshold": 0.3, "speech_pad_ms": 0, "min_silence_duration_ms": 300},
        {"max_speech_duration_s": 1.5, "use_max_poss_sil_at_max_speech": False},
        {"max_speech_duration_s": 2.0, "min_silence_at_max_speech": 30, "neg_threshold": 0.2},
        {"return_seconds": True, "time_resolution": 3, "min_speech_duration_ms": 100},
    ],
)
def test_get_speech_timestamps_equals_the_package(
    speech: np.ndarray, rate: int, params: dict[str, Any]
) -> None:
    """Same audio, same model, every parameter: the same dicts, and the same progress reports."""
    audio = _generated(rate, speech)
    ours_progress: list[float] = []
    theirs_progress: list[float] = []
    ours = get_speech_timestamps(
        audio,
        load_silero_vad(),
        sampling_rate=rate,
        progress_tracking_callback=ours_progress.append,
        **params,
    )
    theirs = PACKAGE["get_speech_timestamps"](
        audio.view(_T),
        SileroModel(),
        sampling_rate=rate,
        progress_tracking_callback=theirs_progress.append,
        **params,
    )
    assert ours == theirs and ours
    assert ours_progress == theirs_progress and ours_progress[-1] == 100.0


def test_multiples_of_16k_are_decimated_like_the_package(speech: np.ndarray, model: SileroModel) -> None:
    audio = np.repeat(speech[:60000], 3)  # "48 kHz"
    with pytest.warns(UserWarning, match="multiply of 16000"):
        ours = get_speech_timestamps(audio, model, sampling_rate=48000)
    with pytest.warns(UserWarning, match="multiply of 16000"):
        theirs = PACKAGE["get_speech_timestamps"](audio.view(_T), SileroModel(), sampling_rate=48000)
    assert ours == theirs and ours


@pytest.mark.parametrize("rate", [16000, 8000])
def test_vad_iterator_events_equal_the_package(speech: np.ndarray, rate: int) -> None:
    audio = _generated(rate, speech)
    n = 512 if rate == 16000 else 256
    ours = VADIterator(load_silero_vad(), sampling_rate=rate)
    theirs = PACKAGE["VADIterator"](SileroModel(), sampling_rate=rate)
    events: list[tuple[Any, Any]] = []
    for i in range(0, audio.size - n + 1, n):
        chunk = np.ascontiguousarray(audio[i : i + n])
        events.append(
            (ours(chunk, return_seconds=i % 2 == 0), theirs(chunk.view(_T), return_seconds=i % 2 == 0))
        )
    assert all(a == b for a, b in events)
    assert sum(a is not None for a, _ in events) >= 4  # starts and ends did happen


def test_batches_are_independent_streams(speech: np.ndarray) -> None:
    """``model([B, 512], sr)`` steps B streams, each as if alone (the package's batch semantics)."""
    streams = np.stack([speech[:16384], speech[20000:36384], np.zeros(16384, np.float32)])
    batched = load_silero_vad()
    got = np.concatenate([batched(streams[:, i : i + 512], 16000) for i in range(0, 16384, 512)], axis=1)
    for row in range(3):
        alone = SileroVad(16000).probabilities(streams[row])
        np.testing.assert_allclose(got[row], alone, atol=2e-6)
    np.testing.assert_allclose(batched.audio_forward(streams, 16000), got, atol=2e-6)
    with pytest.raises(ShapeMismatchError, match="512 samples"):
        batched(np.zeros((2, 480), np.float32), 16000)


def test_silero_vad_takes_one_row_batches(speech: np.ndarray) -> None:
    a, b = SileroVad(16000), SileroVad(16000)
    for i in range(0, 5120, 512):
        assert a(speech[i : i + 512]) == b(speech[i : i + 512][None])
    with pytest.raises(ShapeMismatchError, match="SileroBatch"):
        a(np.zeros((2, 512), np.float32))


def test_segments_index_like_dicts(speech: np.ndarray) -> None:
    probs = SileroVad(16000).probabilities(speech)
    segs = speech_timestamps(probs, sampling_rate=16000, return_seconds=True, time_resolution=2)
    assert all(isinstance(s, SpeechSegment) for s in segs)
    assert [dict(s.as_dict()) for s in segs] == [{"start": s["start"], "end": s["end"]} for s in segs]
    assert segs[0]["start"] == round(segs[0].start / 16000, 2) and isinstance(segs[0].start, int)
    with pytest.raises(KeyError):
        segs[0]["middle"]
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(ImportError, match="matplotlib"):
            speech_timestamps(probs, visualize_probs=True)
    else:
        assert speech_timestamps(probs, visualize_probs=True) == speech_timestamps(probs)


def test_collect_chunks_and_save_audio(tmp_path: Path, speech: np.ndarray) -> None:
    tss = [{"start": 100, "end": 300}, {"start": 1000, "end": 1100}]
    np.testing.assert_array_equal(collect_chunks(tss, speech), np.r_[speech[100:300], speech[1000:1100]])
    secs = [{"start": 0.5, "end": 0.75}]
    np.testing.assert_array_equal(
        collect_chunks(secs, speech, seconds=True, sampling_rate=16000), speech[8000:12000]
    )
    save_audio(tmp_path / "out.wav", speech[:1600])
    np.testing.assert_allclose(read_audio(tmp_path / "out.wav"), speech[:1600], atol=1 / 32768)
    assert math.isclose(len(read_audio(tmp_path / "out.wav", 8000)), 800, abs_tol=1)
