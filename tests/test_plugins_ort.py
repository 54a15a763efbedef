"""The ``onnxruntime`` plugin: partitions as ONNX sub-models dispatched through ORT sessions."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import compile, deserialize
from asyncjit.graph import Node
from asyncjit.models import silero_vad as sv
from asyncjit.plugins import get_plugin
from asyncjit.plugins._onnxruntime import OrtPlugin

pytest.importorskip("onnxruntime", reason="the onnxruntime plugin needs the onnx extra")


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def test_mixed_graph_equals_reference() -> None:
    """ORT partitions (matmul, reductions, movement, several outputs) between CPU kernels."""
    t = Var("t", 1, 8)
    x = Tensor.placeholder((t, 6), name="x")
    w = Tensor.const(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))
    h = (x @ w).tanh()
    gate = h.sigmoid() * h
    y = gate.sum(axis=1, keepdims=True).exp()
    z = (gate + 1.0).relu()
    outs = [y, z, gate.permute((1, 0)).reshape(4 * t), h[:, 1:3]]
    plugin = OrtPlugin(claim_all=True)
    exe = compile(outs, [x], plugins=[plugin])
    assert exe.dispatch and any("_plugin_onnxruntime" in k for k in exe.kernel_names)
    for n in (1, 5, 8):
        xv = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
        got = exe.run([xv], {"t": n})
        want = reference.evaluate(outs, {x: xv}, {"t": n})
        for g, e in zip(got, want, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_default_claims_nothing_and_env_option_claims_all(monkeypatch: pytest.MonkeyPatch) -> None:
    x = Tensor.placeholder((4,), name="x")
    y = x.exp() * 2.0
    assert not compile(y, [x], plugins=[OrtPlugin()]).dispatch
    monkeypatch.setenv("ASYNCJIT_PLUGIN_ONNXRUNTIME_CLAIM_ALL", "1")
    plugin = get_plugin("onnxruntime")
    assert plugin.options["claim_all"] is True  # type: ignore[attr-defined]
    exe = compile(y, [x], plugins=[plugin])
    assert exe.dispatch
    np.testing.assert_allclose(
        exe.run([np.arange(4, dtype=np.float32)])[0], np.exp(np.arange(4)) * 2, rtol=1e-6
    )


def _descends(node: Node, names: set[str], stop: str, memo: dict[int, bool]) -> bool:
    """Whether ``node`` depends on a placeholder named in ``names`` without passing a ``stop`` op."""
    if node.id not in memo:
        if node.op == "placeholder":
            memo[node.id] = node.attrs["name"] in names
        elif node.op == stop:
            memo[node.id] = False
        else:
            memo[node.id] = any(_descends(i, names, stop, memo) for i in node.inputs)
    return memo[node.id]


def test_silero_vad_with_its_lstm_forced_to_ort_equals_the_cpu_plan() -> None:
    """The LSTM cell (every op fed by the state, up to the head's ReLU) runs in ORT; the STFT,
    encoder and head stay on the CPU; results equal the all-CPU plan within 1e-5."""
    w = sv.load_weights(16000)
    b = Var("b", 1, 4)
    chunk = Tensor.placeholder([b, w.input_samples], name="chunk")
    h = Tensor.placeholder([b, sv.HIDDEN], name="h")
    c = Tensor.placeholder([b, sv.HIDDEN], name="c")
    outs = list(sv.build_step(w, chunk, h, c))
    memo: dict[int, bool] = {}
    plugin = OrtPlugin(force=lambda n: _descends(n, {"h", "c"}, "relu", memo))
    mixed = compile(outs, [chunk, h, c], plugins=[plugin], name="vad_ort")
    cpu = compile(outs, [chunk, h, c], plugins=[], name="vad_cpu")
    assert len(mixed.dispatch) >= 1 and not cpu.dispatch
    rng = np.random.default_rng(0)
    state = [np.zeros((3, sv.HIDDEN), np.float32)] * 2
    state_cpu = list(state)
    for _ in range(4):
        x = (rng.standard_normal((3, w.input_samples)) * 0.1).astype(np.float32)
        p1, h1, c1 = mixed.run([x, *state], {"b": 3})
        p2, h2, c2 = cpu.run([x, *state_cpu], {"b": 3})
        for got, want in ((p1, p2), (h1, h2), (c1, c2)):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
        state, state_cpu = [h1, c1], [h2, c2]
    again = deserialize(mixed.serialize())
    np.testing.assert_allclose(again.run([x, *state], {"b": 3})[0], mixed.run([x, *state], {"b": 3})[0])
