"""Every Silero VAD ``.onnx`` file of the silero-vad package through the generic importer:
equal to ONNX Runtime on real speech, and through ``StreamMux`` equal to the per-stream session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the comparison peer needs onnxruntime (the onnx extra)")
import onnxruntime as ort

import asyncjit.onnx as ao
from asyncjit.models._audio import read_wav
from asyncjit.models._onnx_weights import package_data_file
from asyncjit.scheduler import StreamMux

CHUNKS = 24


def _path(name: str) -> Path:
    return package_data_file("silero_vad", f"data/{name}", "pip install --no-deps silero-vad")


def _speech() -> np.ndarray:
    wav = read_wav(Path(__file__).parents[1] / "asyncjit" / "data" / "speech_16k.wav")
    return np.asarray(wav[0] if isinstance(wav, tuple) else wav, dtype=np.float32)


# file, load arguments, takes sr, tolerance
VARIANTS: list[tuple[str, dict[str, Any], bool, float]] = [
    (
        "silero_vad.onnx",
        {"dims": {"input:0": (1, 4), "input:1": 576, "state:1": "input:0"}, "values": {"sr": 16000}},
        True,
        1e-4,
    ),
    (
        "silero_vad_16k_op15.onnx",
        {"dims": {"batch": (1, 4), "sequence": 576}, "values": {"sr": 16000}},
        True,
        1e-4,
    ),
    (
        "silero_vad_op18_ifless.onnx",
        {"dims": {"batch": (1, 4), "sequence": 576}, "values": {"sr": 16000}},
        True,
        1e-4,
    ),
    ("silero_vad_half.onnx", {"dims": {"batch": (1, 4), "sequence": 576}}, False, 1e-3),
    ("silero_vad_openvino_16k.onnx", {}, False, 1e-4),
]


@pytest.mark.parametrize(("name", "kwargs", "takes_sr", "tol"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_silero_file_matches_onnxruntime(
    name: str, kwargs: dict[str, Any], takes_sr: bool, tol: float
) -> None:
    """Streamed 512-sample chunks with 64 samples of context, state fed back, as the package does."""
    path = _path(name)
    sess = ao.InferenceSession(path, kwargs.get("dims"), values=kwargs.get("values"))
    peer = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    wav = _speech()
    state = np.zeros((2, 1, 128), np.float32)
    peer_state = state.copy()
    context = np.zeros(64, np.float32)
    worst = 0.0
    for i in range(CHUNKS):
        chunk = wav[(i + 40) * 512 : (i + 41) * 512]
        x = np.concatenate([context, chunk])[None]
        context = chunk[-64:]
        prob, state = sess.run(None, {"input": x, "state": state})
        feed = {"input": x, "state": peer_state}
        if takes_sr:
            feed["sr"] = np.array(16000, np.int64)
        want, peer_state = peer.run(None, feed)
        worst = max(worst, float(np.abs(prob - want).max()), float(np.abs(state - peer_state).max()))
    assert worst <= tol, f"{name}: max difference {worst} against ONNX Runtime"


def test_silero_sequence_model_matches_onnxruntime() -> None:
    """The sequence variant runs its LSTM over a symbolic number of frames (masked to the bound)."""
    path = _path("silero_vad_16k_sequence.onnx")
    sess = ao.InferenceSession(path, {"sequence_length": (1, 8)})
    peer = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    wav = _speech()
    for frames in (3, 8):
        x = np.stack([wav[i * 512 + 20000 : i * 512 + 20576] for i in range(frames)])
        h = np.zeros((1, 1, 128), np.float32)
        feed = {"input": x, "h": h, "c": h}
        got, want = sess.run(None, feed), peer.run(None, feed)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            assert float(np.abs(g - w).max()) <= 1e-4


@pytest.mark.anyio
async def test_recurrent_step_in_stream_mux_equals_session_bit_for_bit() -> None:
    """Three streams through one batched plan equal the per-stream session exactly."""
    path = _path("silero_vad_16k_op15.onnx")
    sess = ao.InferenceSession(path, {"batch": (1, 4), "sequence": 576}, values={"sr": 16000})
    step = ao.recurrent_step(sess, state={"state": "stateN"}, context=64, max_streams=4)
    assert step.chunk_shape == (512,)
    wav = _speech()
    steps = 12
    got: dict[int, np.ndarray] = {}

    async def stream(mux: StreamMux, k: int) -> None:
        async with mux.open_stream() as s:
            out = []
            for i in range(steps):
                at = (k * 30 + i) * 512
                out.append(np.asarray(await s.step(wav[at : at + 512])).reshape(-1))
            got[k] = np.concatenate(out)

    async with StreamMux(step, max_streams=4) as mux, anyio.create_task_group() as tg:
        for k in range(3):
            tg.start_soon(stream, mux, k)
    for k in range(3):
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros(64, np.float32)
        want = []
        for i in range(steps):
            at = (k * 30 + i) * 512
            chunk = wav[at : at + 512]
            prob, state = sess.run(None, {"input": np.concatenate([context, chunk])[None], "state": state})
            context = chunk[-64:]
            want.append(prob.reshape(-1))
        np.testing.assert_array_equal(got[k], np.concatenate(want))


def test_recurrent_step_check_state_refuses_bad_states_typed() -> None:
    """A stream's initial state is checked before it reaches the slot pool: wrong shape, a
    non-float array and NaN each give a typed error (NaN used to be a plain ``ValueError``)."""
    from asyncjit.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError

    path = _path("silero_vad_16k_op15.onnx")
    sess = ao.InferenceSession(path, {"batch": (1, 4), "sequence": 576}, values={"sr": 16000})
    step = ao.recurrent_step(sess, state={"state": "stateN"}, context=64, max_streams=4)
    with pytest.raises(ShapeMismatchError):
        step.check_state({"state": np.zeros((2, 64), np.float32)})
    with pytest.raises(DTypeMismatchError):
        step.check_state({"state": np.zeros((2, 128), np.int32)})
    with pytest.raises(InvalidArgumentError, match="finite"):
        step.check_state({"state": np.full((2, 128), np.nan, np.float32)})
    row = step.check_state({"state": np.ones((2, 128), np.float32)})
    assert row.dtype == np.float32 and float(row.sum()) == 256.0
