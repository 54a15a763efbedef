"""The compiled per-stream ``SileroVad`` and the batched ``SileroVadJit`` plan against ONNX Runtime.

``test_silero_vad.py`` checks the network (reference interpreter); these run the native plans the
users get (prebound replay on this thread, the device queue for ``call_async``, the batched plan
through ``execute_with_vars``) on speech, silence and noise, with the state carried.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit.errors import DTypeMismatchError, ShapeMismatchError
from asyncjit.models import AudioFormatError, OnnxRuntimeVad, read_wav, speech_sample_path
from asyncjit.models.silero_vad import HIDDEN, SileroVad, SileroVadJit, load_weights

TOL = 1e-4


@pytest.fixture(scope="module", params=[16000, 8000])
def rate(request: Any) -> int:
    return int(request.param)


def _signal(rate: int, chunks: int) -> np.ndarray:
    """Speech, then silence, then noise, as [chunks, n]."""
    n = 512 if rate == 16000 else 256
    speech, sr = read_wav(speech_sample_path())
    if sr != rate:
        speech = speech[:: sr // rate].astype(np.float32)
    rng = np.random.default_rng(rate)
    parts = [speech[: n * (chunks // 2)], np.zeros(n * (chunks // 4), np.float32)]
    parts.append((rng.standard_normal(n * chunks) * 0.2).astype(np.float32))
    audio = np.concatenate(parts)[: n * chunks]
    return audio.reshape(chunks, n)


def test_stream_matches_onnxruntime_sync_and_async(rate: int) -> None:
    """__call__ and call_async (mixed on one stream, on asyncio then trio) follow ONNX Runtime
    chunk by chunk."""
    import anyio

    chunks = _signal(rate, 120)
    ort = OnnxRuntimeVad(rate)
    want = np.array([float(ort(c)[0, 0]) for c in chunks])
    vad = SileroVad(rate)
    got = [vad(c) for c in chunks[:60]]

    async def rest(part: np.ndarray) -> list[float]:
        out = []
        for i, c in enumerate(part):
            out.append(await vad.call_async(c) if i % 2 else vad(c))
        return out

    got += anyio.run(rest, chunks[60:90], backend="asyncio")
    got += anyio.run(rest, chunks[90:], backend="trio")
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert vad.last_timing is not None and vad.last_timing.exec >= 0
    vad.reset()
    ort.reset()
    np.testing.assert_allclose(
        [vad(c) for c in chunks[:10]], [float(ort(c)[0, 0]) for c in chunks[:10]], atol=TOL, rtol=0
    )


def test_bad_chunks_raise_and_leave_the_stream_untouched() -> None:
    """Typed errors for NaN, wrong dtype, length or rank; the next good chunk continues exactly."""
    chunks = _signal(16000, 6)
    ref = SileroVad(16000)
    want = [ref(c) for c in chunks]
    vad = SileroVad(16000)
    got = [vad(c) for c in chunks[:3]]
    bad = chunks[3].copy()
    bad[7] = np.nan
    with pytest.raises(AudioFormatError):
        vad(bad)
    bad[7] = np.inf
    with pytest.raises(AudioFormatError):
        vad(bad)
    with pytest.raises(DTypeMismatchError):
        vad(chunks[3].astype(np.float64))
    with pytest.raises(ShapeMismatchError):
        vad(chunks[3][:-1])
    with pytest.raises(ShapeMismatchError):
        vad(chunks[3:5])
    with pytest.raises(DTypeMismatchError):
        vad(list(chunks[3]))  # type: ignore[arg-type]
    got += [vad(c) for c in chunks[3:]]
    assert got == want


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_batched_plan_matches_onnxruntime(batch: int) -> None:
    """The max_batch=64 plan at b < 64 follows a batched ONNX Runtime session per stream."""
    weights = load_weights(16000)
    jit = SileroVadJit.prepared(weights, max_batch=64)
    for view in (jit.chunk_mut(), jit.state_h_mut(), jit.state_c_mut()):
        view[:] = 0
    ort = OnnxRuntimeVad(16000, batch=batch)
    rng = np.random.default_rng(batch)
    speech = _signal(16000, 40)
    ctx = weights.context_samples
    for step in range(20):
        audio = (speech[step] + 0.05 * rng.standard_normal((batch, 512))).astype(np.float32)
        want = ort(audio)[:, 0]
        chunk = jit.chunk_mut()
        chunk[:batch, ctx:] = audio
        jit.execute_with_vars({"b": batch})
        out = jit.output().to_numpy_blocking()
        np.testing.assert_allclose(out[:, 0], want, atol=TOL, rtol=0)
        jit.state_h_mut()[:batch] = out[:, 1 : 1 + HIDDEN]
        jit.state_c_mut()[:batch] = out[:, 1 + HIDDEN :]
        chunk[:batch, :ctx] = audio[:, -ctx:]
