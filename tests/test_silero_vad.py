"""Silero VAD on the Tensor API (reference backend) against ONNX Runtime on the same ONNX file.

ONNX Runtime is driven exactly as ``silero_vad.utils_vad.OnnxWrapper`` drives it (zero context and
state at the start, ``[context | chunk]`` fed, the last context-many samples kept), re-implemented
here because the package's module imports torch. To keep the numpy interpreter fast, each test
evaluates every stream of a case in one batched call per chunk.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import onnx  # installed by `make test` (the models extra); a missing one must fail, not skip
import onnxruntime as ort
import pytest

import asyncjit
from asyncjit import Tensor, reference
from asyncjit.errors import DTypeMismatchError, ModelFormatError, ShapeMismatchError
from asyncjit.models import AudioFormatError, OnnxRuntimeVad, read_wav, speech_sample_path, speech_timestamps
from asyncjit.models import silero_vad as sv

MAX_BATCH = 64
PROB_TOL = 1e-4
RATES = (16000, 8000)


def OrtVad(session: Any, sample_rate: int, batch: int) -> OnnxRuntimeVad:
    """The package's ONNX Runtime peer on the shared session."""
    return OnnxRuntimeVad(sample_rate, batch, session=session)


class RefVad:
    """The same driver around our graph, evaluated by the reference interpreter."""

    def __init__(self, graph: StepGraph, batch: int) -> None:
        self.g = graph
        self.reset(batch)

    def reset(self, batch: int) -> None:
        self.state = np.zeros((2, batch, 128), np.float32)
        self.context = np.zeros((batch, self.g.weights.context_samples), np.float32)

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        x = np.concatenate([self.context, chunk], axis=1)
        prob, self.state = reference.evaluate(
            [self.g.prob, self.g.new_state], {self.g.chunk: x, self.g.state: self.state}, {"b": len(x)}
        )
        self.context = x[..., -self.g.weights.context_samples :]
        return prob


class StepGraph:
    """``build_step_state`` over a bounded batch var: one graph for every batch size 1..64."""

    def __init__(self, weights: sv.SileroWeights) -> None:
        self.weights = weights
        b = asyncjit.Var("b", 1, MAX_BATCH)
        self.chunk = Tensor.placeholder([b, weights.input_samples], name="chunk")
        self.state = Tensor.placeholder([2, b, sv.HIDDEN], name="state")
        self.prob, self.new_state = sv.build_step_state(weights, self.chunk, self.state)


@pytest.fixture(scope="module")
def session() -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(sv.default_model_path()), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def graphs() -> dict[int, StepGraph]:
    return {sr: StepGraph(sv.load_weights(sr)) for sr in RATES}


@pytest.fixture(scope="module")
def speech() -> dict[int, np.ndarray]:
    """The shipped 16 kHz sample, and an 8 kHz version of it (every other sample)."""
    audio, sr = read_wav(speech_sample_path())
    assert sr == 16000
    return {16000: audio, 8000: np.ascontiguousarray(audio[::2])}


def _chunks(audio: np.ndarray, n: int, count: int) -> np.ndarray:
    """``count`` chunks of ``n`` samples, zero-padded at the end (as get_speech_timestamps pads)."""
    out = np.zeros(count * n, np.float32)
    out[: min(len(audio), count * n)] = audio[: count * n]
    return out.reshape(count, n)


def _signals(speech: np.ndarray, n: int, count: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(6)
    return {
        "speech": _chunks(speech, n, count),
        "silence": np.zeros((count, n), np.float32),
        "noise": rng.normal(0.0, 0.1, (count, n)).astype(np.float32),
    }


# ---------------------------------------------------------------------------------------------
# parity with ONNX Runtime


@pytest.mark.parametrize("sample_rate", RATES)
def test_probabilities_and_state_match_onnxruntime_over_200_chunks(
    sample_rate: int, session: Any, graphs: dict[int, StepGraph], speech: dict[int, np.ndarray]
) -> None:
    """Speech, silence and noise: every chunk's probability and state match ORT with state carried."""
    g = graphs[sample_rate]
    n = g.weights.chunk_samples
    count = max(200, -(-len(speech[sample_rate]) // n))
    signals = _signals(speech[sample_rate], n, count)
    names = list(signals)
    ours = RefVad(g, len(names))
    theirs = {name: OrtVad(session, sample_rate, 1) for name in names}  # one session per stream
    ours_p = np.zeros((count, len(names)), np.float32)
    theirs_p = np.zeros_like(ours_p)
    h_diff = c_rel = 0.0
    for t in range(count):
        ours_p[t] = ours(np.stack([signals[name][t] for name in names]))[:, 0]
        for j, name in enumerate(names):
            theirs_p[t, j] = theirs[name](signals[name][t][None])[0, 0]
            ref_state, ort_state = ours.state[:, j], theirs[name].state[:, 0]
            h_diff = max(h_diff, float(np.abs(ref_state[0] - ort_state[0]).max()))
            # c integrates over the whole stream and grows to ~30: compare it relative to its size
            c_err = np.abs(ref_state[1] - ort_state[1]) / np.maximum(1.0, np.abs(ort_state[1]))
            c_rel = max(c_rel, float(c_err.max()))
    diffs = {name: float(np.abs(ours_p[:, j] - theirs_p[:, j]).max()) for j, name in enumerate(names)}
    print(f"\n{sample_rate} Hz, {count} chunks: max |prob diff| {diffs}; h {h_diff:.2e}; c rel {c_rel:.2e}")
    assert all(d < PROB_TOL for d in diffs.values()), diffs
    assert h_diff < PROB_TOL
    assert c_rel < PROB_TOL
    # the cases are what they claim to be
    assert theirs_p[:, names.index("speech")].max() > 0.9
    assert theirs_p[:, names.index("silence")].max() < 0.1


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_batched_equals_unbatched_per_stream(
    batch: int, session: Any, graphs: dict[int, StepGraph], speech: dict[int, np.ndarray]
) -> None:
    """One graph at B = 1, 7, 64 gives each stream what it gets alone (and what ORT gets)."""
    g = graphs[16000]
    n, steps = g.weights.chunk_samples, 4
    rng = np.random.default_rng(batch)
    audio = speech[16000]
    starts = rng.integers(0, len(audio) - steps * n, batch)
    gains = rng.uniform(0.2, 1.5, batch).astype(np.float32)
    noise = rng.normal(0.0, 0.01, (batch, steps * n)).astype(np.float32)
    streams = np.stack([audio[s : s + steps * n] * k for s, k in zip(starts, gains, strict=True)]) + noise
    chunks = streams.reshape(batch, steps, n)

    batched = RefVad(g, batch)
    together = np.stack([batched(chunks[:, t])[:, 0] for t in range(steps)], axis=1)
    alone = np.zeros_like(together)
    ort_alone = np.zeros_like(together)
    for j in range(batch):
        single, ort_single = RefVad(g, 1), OrtVad(session, 16000, 1)
        for t in range(steps):
            alone[j, t] = single(chunks[j, t][None])[0, 0]
            ort_alone[j, t] = ort_single(chunks[j, t][None])[0, 0]
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(together, ort_alone, rtol=0, atol=PROB_TOL)


def test_reset_in_the_middle_matches_a_fresh_session(
    session: Any, graphs: dict[int, StepGraph], speech: dict[int, np.ndarray]
) -> None:
    """After a reset (zero state and context) the stream matches a brand-new ORT wrapper."""
    g = graphs[16000]
    n = g.weights.chunk_samples
    chunks = _chunks(speech[16000], n, 120)
    ours, before = RefVad(g, 1), OrtVad(session, 16000, 1)
    for t in range(60):
        ours(chunks[t][None])
        before(chunks[t][None])
    ours.reset(1)
    fresh = OrtVad(session, 16000, 1)
    got = [ours(chunks[t][None])[0, 0] for t in range(60, 120)]
    want = [fresh(chunks[t][None])[0, 0] for t in range(60, 120)]
    carried = [before(chunks[t][None])[0, 0] for t in range(60, 120)]
    np.testing.assert_allclose(got, want, rtol=0, atol=PROB_TOL)
    assert np.abs(np.array(carried) - np.array(want)).max() > 1e-3  # the reset did change something


def test_shipped_speech_is_found_by_onnxruntime(session: Any, speech: dict[int, np.ndarray]) -> None:
    """ORT's Silero VAD finds the three sentences of the shipped sample and the 1 s pauses.

    The sentences sit at 0.40-2.47 s, 3.47-5.02 s and 6.02-7.30 s (asyncjit/data/README.md); the
    comma in the first one ("Hello, this is ...") is a short pause the VAD may split at.
    """
    audio = speech[16000]
    vad = OrtVad(session, 16000, 1)
    probs = np.array([vad(c[None])[0, 0] for c in _chunks(audio, 512, -(-len(audio) // 512))])
    segments = speech_timestamps(probs, 16000, audio_length_samples=len(audio))
    assert 3 <= len(segments) <= 4, segments
    assert 0.2 < segments[0].start_s < 0.6 and 7.1 < segments[-1].end_s < 7.6
    long_gaps = [(a.end_s, b.start_s) for a, b in itertools.pairwise(segments) if b.start_s - a.end_s > 0.7]
    assert len(long_gaps) == 2, segments
    assert 2.3 < long_gaps[0][0] < long_gaps[0][1] < 3.7 and 4.9 < long_gaps[1][0] < long_gaps[1][1] < 6.2


# ---------------------------------------------------------------------------------------------
# the other builders


def test_packed_layout_is_prob_h_c() -> None:
    """``build_step_packed`` is ``[prob | h | c]`` per row, the JitRecurrent layout."""
    w = sv.load_weights(16000)
    b = asyncjit.Var("b", 1, 4)
    chunk = Tensor.placeholder([b, w.input_samples])
    h, c = Tensor.placeholder([b, sv.HIDDEN]), Tensor.placeholder([b, sv.HIDDEN])
    packed = sv.build_step_packed(w, chunk, h, c)
    assert packed.shape == (b, 1 + 2 * sv.HIDDEN)
    rng = np.random.default_rng(1)
    feed = {
        chunk: rng.normal(0, 0.1, (3, w.input_samples)).astype(np.float32),
        h: rng.normal(0, 0.5, (3, sv.HIDDEN)).astype(np.float32),
        c: rng.normal(0, 0.5, (3, sv.HIDDEN)).astype(np.float32),
    }
    got = reference.evaluate(packed, feed, {"b": 3})
    prob, h_new, c_new = reference.evaluate(list(sv.build_step(w, chunk, h, c)), feed, {"b": 3})
    np.testing.assert_array_equal(got, np.concatenate([prob, h_new, c_new], axis=1))


@pytest.mark.parametrize("rate", [16000, 8000])
def test_folded_stft_equals_the_convolution_and_asymmetric_bases_keep_it(rate: int) -> None:
    """The STFT runs as two half-size matmuls on folded frames when the basis is symmetric
    (both published files are); the result equals the plain ``[2F, K]`` convolution, and a basis
    without that symmetry is computed by the convolution."""
    import attrs

    w = sv.load_weights(rate)
    assert sv._folded_stft_basis(w) is not None
    rng = np.random.default_rng(3)
    chunk = Tensor.placeholder([3, w.input_samples])
    x = rng.normal(0, 0.3, (3, w.input_samples)).astype(np.float32)
    folded = reference.evaluate(sv._stft_magnitude(w, chunk, 3), {chunk: x})

    xp = np.pad(x.astype(np.float64), [(0, 0), (0, w.reflect_pad)], mode="reflect")
    k, hop, f = w.filter_length, w.hop, w.n_freq
    frames = np.stack([xp[:, i : i + k] for i in range(0, xp.shape[1] - k + 1, hop)], axis=1)
    spec = frames @ w.stft_basis[:, 0, :].astype(np.float64).T  # [b, frames, 2F]
    want = np.sqrt(spec[..., :f] ** 2 + spec[..., f:] ** 2)  # frame-major [b, frames, F]
    assert folded.shape == want.shape
    np.testing.assert_allclose(folded, want, rtol=1e-5, atol=1e-5)

    skewed = w.stft_basis.copy()
    skewed[1, 0, 1] += 0.5  # breaks cos[k, n] == cos[k, K - n]
    w2 = attrs.evolve(w, stft_basis=skewed)
    assert sv._folded_stft_basis(w2) is None
    spec2 = frames @ skewed[:, 0, :].astype(np.float64).T
    want2 = np.sqrt(spec2[..., :f] ** 2 + spec2[..., f:] ** 2)
    got2 = reference.evaluate(sv._stft_magnitude(w2, chunk, 3), {chunk: x})
    np.testing.assert_allclose(got2, want2, rtol=1e-5, atol=1e-5)

    # an input whose padded length is not whole hops (one sample of context more): the
    # convolution, which drops the remainder
    w3 = attrs.evolve(w, context_samples=w.context_samples + 1)
    assert sv._folded_stft_basis(w3) is None
    chunk3 = Tensor.placeholder([3, w3.input_samples])
    x3 = rng.normal(0, 0.3, (3, w3.input_samples)).astype(np.float32)
    xp3 = np.pad(x3.astype(np.float64), [(0, 0), (0, w3.reflect_pad)], mode="reflect")
    frames3 = np.stack([xp3[:, i : i + k] for i in range(0, xp3.shape[1] - k + 1, hop)], axis=1)
    spec3 = frames3 @ w.stft_basis[:, 0, :].astype(np.float64).T
    want3 = np.sqrt(spec3[..., :f] ** 2 + spec3[..., f:] ** 2)
    got3 = reference.evaluate(sv._stft_magnitude(w3, chunk3, 3), {chunk3: x3})
    np.testing.assert_allclose(got3, want3, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_encoder_per_tap_matmuls_equal_conv1d(rate: int) -> None:
    """The frame-major encoder (one matmul per tap, padding-only taps skipped) equals PyTorch-
    semantics ``conv1d`` + ReLU layer by layer, on the reference, for both rates' layers."""
    w = sv.load_weights(rate)
    rng = np.random.default_rng(4)
    x = np.abs(rng.normal(0, 1, (3, w.frames, w.n_freq))).astype(np.float32)
    length = w.frames
    for layer in w.encoder:
        frames_in = Tensor.placeholder([3, length, x.shape[2]])
        got, length = sv._conv_frames(frames_in, length, layer, 3)
        y = reference.evaluate(got, {frames_in: x})
        channels_major = Tensor.placeholder([3, x.shape[2], x.shape[1]])
        conv = channels_major.conv1d(
            Tensor.const(layer.weight), Tensor.const(layer.bias), stride=layer.stride, padding=layer.padding
        ).relu()
        want = reference.evaluate(conv, {channels_major: np.ascontiguousarray(x.transpose(0, 2, 1))})
        assert y.shape == (3, length, layer.weight.shape[0])
        np.testing.assert_allclose(y, want.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
        x = y
    assert length == 1


def test_per_tap_encoder_layers_equal_conv1d_for_any_geometry() -> None:
    """``_conv_frames`` against ``conv1d`` + ReLU over lengths, kernels, strides and paddings,
    including outputs that read nothing but padding (``relu(bias)``, the general path), and
    ``conv1d``'s own errors for a bad stride or padding."""
    from asyncjit.errors import TensorError

    rng = np.random.default_rng(5)
    for length, k, stride, pad in itertools.product(range(1, 6), range(1, 5), range(1, 4), range(4)):
        if (length + 2 * pad - k) // stride + 1 < 1:
            continue
        layer = sv.ConvLayer(
            rng.normal(size=(5, 3, k)).astype(np.float32), rng.normal(size=5).astype(np.float32), stride, pad
        )
        x = rng.normal(size=(2, length, 3)).astype(np.float32)
        frames_in = Tensor.placeholder([2, length, 3])
        y, length_out = sv._conv_frames(frames_in, length, layer, 2)
        got = reference.evaluate(y, {frames_in: x})
        channels_major = Tensor.placeholder([2, 3, length])
        conv = channels_major.conv1d(
            Tensor.const(layer.weight), Tensor.const(layer.bias), stride=stride, padding=pad
        )
        want = reference.evaluate(conv.relu(), {channels_major: np.ascontiguousarray(x.transpose(0, 2, 1))})
        assert got.shape == (2, length_out, 5), (length, k, stride, pad)
        np.testing.assert_allclose(
            got, want.transpose(0, 2, 1), rtol=1e-5, atol=1e-5, err_msg=str((length, k, stride, pad))
        )
    ones = np.ones((5, 3, 3), np.float32)
    for stride, pad in ((0, 1), (1, -1)):
        with pytest.raises(TensorError, match=r"stride|padding"):
            sv._conv_frames(
                Tensor.placeholder([2, 4, 3]), 4, sv.ConvLayer(ones, ones[:, 0, 0], stride, pad), 2
            )


def test_the_lstm_input_width_follows_the_last_encoder_layer() -> None:
    """The encoder's last layer may have other than 128 channels (the loader only ties it to
    ``w_ih``): a 64-channel one builds and steps."""
    import attrs

    w = sv.load_weights(16000)
    last = w.encoder[-1]
    narrow = sv.ConvLayer(last.weight[:64], last.bias[:64], last.stride, last.padding)
    w64 = attrs.evolve(w, encoder=(*w.encoder[:-1], narrow), w_ih=np.ascontiguousarray(w.w_ih[:, :64]))
    chunk = Tensor.placeholder([2, w.input_samples])
    h, c = Tensor.placeholder([2, sv.HIDDEN]), Tensor.placeholder([2, sv.HIDDEN])
    prob, _, _ = sv.build_step(w64, chunk, h, c)
    zeros = np.zeros((2, sv.HIDDEN), np.float32)
    x = np.random.default_rng(6).normal(0, 0.1, (2, w.input_samples)).astype(np.float32)
    got = reference.evaluate(prob, {chunk: x, h: zeros, c: zeros})
    assert got.shape == (2, 1) and np.all((got > 0) & (got < 1))


def test_slot_pool_step_matches_per_stream_runs(session: Any, speech: dict[int, np.ndarray]) -> None:
    """Streams stepped through a slot pool, in changing subsets and orders, match ORT per stream."""
    w = sv.load_weights(16000)
    max_streams, n = 6, w.chunk_samples
    b = asyncjit.Var("b", 1, max_streams)
    samples = Tensor.placeholder([b, n], name="samples")
    slots = Tensor.placeholder([b], asyncjit.int32, name="slots")
    pool_in = Tensor.placeholder([max_streams, sv.slot_row_width(w)], name="pool")
    prob, pool_out = sv.build_step_slots(w, samples, slots, pool_in)
    assert prob.shape == (b,) and pool_out.shape == pool_in.shape

    rng = np.random.default_rng(7)
    audio = speech[16000]
    streams = {s: audio[rng.integers(0, len(audio) - 20 * n) :] for s in range(max_streams)}
    oracle = {s: OrtVad(session, 16000, 1) for s in streams}
    position = dict.fromkeys(streams, 0)
    pool = np.zeros((max_streams, sv.slot_row_width(w)), np.float32)
    worst = 0.0
    for _ in range(12):
        ready = rng.permutation(max_streams)[: rng.integers(1, max_streams + 1)]
        batch = np.stack([streams[s][position[s] * n : (position[s] + 1) * n] for s in ready])
        got, pool = reference.evaluate(
            [prob, pool_out],
            {samples: batch, slots: ready.astype(np.int32), pool_in: pool},
            {"b": len(ready)},
        )
        for j, s in enumerate(ready):
            want = oracle[s](batch[j][None])[0, 0]
            worst = max(worst, abs(float(got[j]) - float(want)))
            row = pool[s]
            np.testing.assert_array_equal(row[2 * sv.HIDDEN :], batch[j][-w.context_samples :])
            np.testing.assert_allclose(row[: sv.HIDDEN], oracle[s].state[0, 0], atol=PROB_TOL)
            position[s] += 1
    print(f"\nslot pool, 12 steps of changing subsets: max |prob diff| vs ORT per stream {worst:.2e}")
    assert worst < PROB_TOL


# ---------------------------------------------------------------------------------------------
# loading and misuse


def test_weights_are_read_only_and_shaped_per_rate() -> None:
    """Both rates load with the published facts (windows, hops, state shapes); the arrays
    cannot be changed by accident."""
    w16, w8 = sv.load_weights(16000), sv.load_weights(8000)
    assert w16.stft_basis.shape == (258, 1, 256) and w16.hop == 128 and w16.reflect_pad == 64
    assert w8.stft_basis.shape == (130, 1, 128) and w8.hop == 64 and w8.reflect_pad == 32
    assert (w16.input_samples, w8.input_samples) == (576, 288)
    assert [layer.stride for layer in w16.encoder] == [1, 2, 2, 1]
    assert [layer.weight.shape for layer in w16.encoder] == [
        (128, 129, 3),
        (64, 128, 3),
        (64, 64, 3),
        (128, 64, 3),
    ]
    assert not w16.w_ih.flags.writeable
    assert sv.load_weights(16000) is w16  # cached
    assert "16000" in repr(w16) and "array" not in repr(w16)


def test_unsupported_sample_rate_is_a_typed_error() -> None:
    with pytest.raises(AudioFormatError, match="8000 or 16000"):
        sv.load_weights(44100)


def test_missing_package_or_file_is_named(tmp_path: Path) -> None:
    """A missing package, a missing file and a corrupt file each say which."""
    from asyncjit.models._onnx_weights import package_data_file

    with pytest.raises(ModelFormatError, match="'no_such_vad_pkg' package is not installed"):
        package_data_file("no_such_vad_pkg", "data/x.onnx", "pip install it")
    with pytest.raises(ModelFormatError, match=r"has no 'data/nope\.onnx'"):
        package_data_file("silero_vad", "data/nope.onnx", "pip install it")
    with pytest.raises(ModelFormatError, match="does not exist"):
        sv.load_weights(16000, tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not an onnx model" * 10)
    with pytest.raises(ModelFormatError, match="not a readable ONNX model"):
        sv.load_weights(16000, junk)


def test_missing_onnx_package_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)
    with pytest.raises(ModelFormatError, match="needs the 'onnx' package"):
        sv.load_weights(16000, tmp_path / "any.onnx")


def test_unexpected_graphs_are_rejected(tmp_path: Path) -> None:
    """Another network, or the Silero graph with a changed LSTM, is a ModelFormatError."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])
    other = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["input"], ["output"])], "g", [x], [y])
    )
    onnx.save(other, tmp_path / "other.onnx")
    with pytest.raises(ModelFormatError, match="unexpected graph"):
        sv.load_weights(16000, tmp_path / "other.onnx")

    model = onnx.load(str(sv.default_model_path()))

    def patch(graph: Any) -> None:
        for node in graph.node:
            for attr in node.attribute:
                if node.op_type == "LSTM" and attr.name == "hidden_size":
                    attr.i = 64
                if attr.type == onnx.AttributeProto.GRAPH:
                    patch(attr.g)

    patch(model.graph)
    onnx.save(model, tmp_path / "changed.onnx")
    with pytest.raises(ModelFormatError, match="not a plain forward cell"):
        sv.load_weights(8000, tmp_path / "changed.onnx")


def test_builders_reject_wrong_shapes_and_dtypes() -> None:
    w = sv.load_weights(16000)
    b, other = asyncjit.Var("b", 1, 8), asyncjit.Var("b2", 1, 8)
    h, c = Tensor.placeholder([b, sv.HIDDEN]), Tensor.placeholder([b, sv.HIDDEN])
    with pytest.raises(ShapeMismatchError, match=r"chunk must have shape \[b, 576\]"):
        sv.build_step(w, Tensor.placeholder([b, 512]), h, c)
    with pytest.raises(ShapeMismatchError, match="h must have shape"):
        sv.build_step(w, Tensor.placeholder([b, 576]), Tensor.placeholder([other, sv.HIDDEN]), c)
    with pytest.raises(DTypeMismatchError, match="chunk must be float32, got int32"):
        sv.build_step(w, Tensor.placeholder([b, 576], asyncjit.int32), h, c)
    with pytest.raises(ShapeMismatchError, match=r"state must have shape \[2, b, 128\]"):
        sv.build_step_state(w, Tensor.placeholder([b, 576]), Tensor.placeholder([b, sv.HIDDEN]))
    pool = Tensor.placeholder([4, sv.slot_row_width(w)])
    with pytest.raises(ShapeMismatchError, match="slots must be an int tensor"):
        sv.build_step_slots(w, Tensor.placeholder([b, 512]), Tensor.placeholder([b]), pool)
    with pytest.raises(ShapeMismatchError, match="pool must be float32"):
        sv.build_step_slots(
            w,
            Tensor.placeholder([b, 512]),
            Tensor.placeholder([b], asyncjit.int32),
            Tensor.placeholder([4, 256]),
        )
