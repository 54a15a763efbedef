"""ONNX's inverse hyperbolic functions and Softplus against numpy over the whole float range:
the textbook forms lose everything for small arguments (``log(1 + 1e-8)`` rounds to 0), cancel
for negative ones (``asinh(-1000)``) and overflow for large ones (``x * x`` past 1.8e19 in
float32, 256 in float16); ``python tests/fuzz.py --onnx`` found ``asinh(-1e30)`` as -inf."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper

import asyncjit.onnx as ao

REFERENCE = {
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Softplus": lambda x: np.logaddexp(0.0, x),
}
ELEM = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _session(op: str, dtype: type) -> ao.InferenceSession:
    x = helper.make_tensor_value_info("x", ELEM[dtype], ["n"])
    y = helper.make_tensor_value_info("y", ELEM[dtype], ["n"])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ao.InferenceSession(model.SerializeToString(), {"n": (1, 1 << 14)})


def _arguments(op: str, dtype: type) -> np.ndarray:
    rng = np.random.default_rng(0)
    mags = np.concatenate([np.logspace(-40, 300, 2000), rng.uniform(0, 5, 1000), [0.5, 1.0, 2.0, np.inf]])
    with np.errstate(over="ignore"):
        x = np.unique(np.concatenate([mags, -mags, 1.0 + np.logspace(-16, -1, 50)]).astype(dtype))
    if op == "Atanh":
        x = x[np.abs(x) <= 1]
    if op == "Acosh":
        x = x[x >= 1]
    return x


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", list(REFERENCE))
def test_within_two_ulps_of_numpy_everywhere(op: str, dtype: type) -> None:
    x = _arguments(op, dtype)
    with np.errstate(all="ignore"):
        want = REFERENCE[op](x.astype(np.float64)).astype(dtype)
    got = _session(op, dtype).run(None, {"x": x})[0]
    assert got.dtype == dtype
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(all="ignore"):
        ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want)).astype(np.float64)
    bad = ~same & ~(np.isfinite(ulps) & (ulps <= 2.0))
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5], strict=True))


@pytest.mark.parametrize("op", ["Asinh", "Atanh"])
def test_odd_functions_keep_the_sign_of_zero(op: str) -> None:
    got = _session(op, np.float32).run(None, {"x": np.array([-0.0, 0.0], np.float32)})[0]
    assert np.signbit(got).tolist() == [True, False]


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5, -1.0, 0.0])
def test_celu_applies_alpha_inside_the_minimum(alpha: float) -> None:
    """``Celu = max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` as the spec writes it: a
    negative alpha flips the sign before the minimum (``alpha * min(...)`` gave ``x + 0.63`` for
    ``x = 1, alpha = -1``), alpha = 0 gives NaN where ``x / 0`` is infinite, as ONNX Runtime and
    ONNX's reference do (``python tests/fuzz.py --onnx`` found alpha = 0)."""
    ort = pytest.importorskip("onnxruntime")
    x = np.array([-30.0, -2.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0, 30.0], np.float32)
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [x.size]) for n in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Celu", ["x"], ["y"], alpha=alpha)], "g", info[:1], info[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    got = ao.InferenceSession(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
