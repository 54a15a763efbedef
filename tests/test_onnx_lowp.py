"""Low-precision ONNX types (bfloat16, float8, float4, int4/2): exact conversions, ops, sessions.

The conversions are checked bit for bit against ``ml_dtypes`` (which ONNX's reference uses) on
every bit pattern a decode can see and, for encodes, on every float16 and bfloat16 value, every
rounding boundary of each type (midpoints and their neighbours) and the specials, through both
the numpy reference and compiled code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx", reason="low-precision ONNX types need the onnx extra")

import ml_dtypes
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from asyncjit import Tensor, reference
from asyncjit import dtypes as dt
from asyncjit.compiler import compile as aj_compile
from asyncjit.errors import DTypeMismatchError, OnnxImportError, TensorError
from asyncjit.onnx import InferenceSession, load
from asyncjit.onnx._lowp import FLOAT8_SATURATING, NAMES, LowP, decode, encode, encode_e8m0, storage_dtype
from asyncjit.onnx._ops_lowp import rint

pytestmark = pytest.mark.usefixtures("no_disk_cache")


@pytest.fixture
def no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


def _np(name: str) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
    return dtype


def _reference(model: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX's reference evaluator's outputs, as arrays."""
    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feed)]


def _boundaries(name: str) -> np.ndarray:
    """Every representable value of ``name``, the midpoints between neighbours and the float32
    values two ulps either side of each."""
    d = _np(name)
    if d.itemsize == 1:
        vals = np.arange(256, dtype=np.uint8).view(d).astype(np.float32)
    else:
        vals = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    vals = np.unique(vals[np.isfinite(vals)])
    mids = ((vals[1:].astype(np.float64) + vals[:-1]) / 2).astype(np.float32)
    near = [(mids.view(np.int32) + k).view(np.float32) for k in (-2, -1, 0, 1, 2)]
    return np.concatenate([vals, *near])


def _points() -> np.ndarray:
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32
    )
    nans = np.array([0x7F800001, 0xFFBFFFFF, 0x7FC00001, 0x7FFFFFFF, 0xFFC12345], np.uint32).view(np.float32)
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 2**32, 20000, dtype=np.uint32).view(np.float32)
    parts = [f16, bf16, specials, nans, rand] + [
        _boundaries(n) for n in NAMES if n not in ("int4", "uint4", "int2", "uint2")
    ]
    return np.concatenate(parts).astype(np.float32)


def _want(x: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    d = _np(name)
    with np.errstate(all="ignore"):
        if saturate:
            info = ml_dtypes.finfo(d)  # type: ignore[no-untyped-call]
            x = np.clip(x, info.min, info.max)
        return x.astype(d).view(storage_dtype(d).np)


def test_encode_matches_ml_dtypes_bit_for_bit() -> None:
    """float32 -> every type (and saturating float8), reference and compiled, equal ml_dtypes."""
    xs = _points()
    x = Tensor.placeholder((xs.size,), dt.float32, name="x")
    cases = [(n, False) for n in NAMES] + [(n, True) for n in FLOAT8_SATURATING]
    outs = [encode(x, _np(n), saturate=s).bits for n, s in cases]
    ref = reference.evaluate(outs, {x: xs}, {})
    got = aj_compile(outs, [x]).run([xs], {})
    for (name, sat), r, g in zip(cases, ref, got, strict=True):
        want = _want(xs, name, sat)
        bad = np.nonzero(r != want)[0]
        assert bad.size == 0, f"{name} saturate={sat}: reference differs at {xs[bad[:5]]}"
        assert g.tobytes() == want.tobytes(), f"{name} saturate={sat}: compiled differs"


@pytest.mark.parametrize("name", NAMES)
def test_decode_every_bit_pattern(name: str) -> None:
    """Every storage pattern decodes as ml_dtypes converts it (NaN payloads included)."""
    d = _np(name)
    st = storage_dtype(d)
    bits = np.arange(65536 if d.itemsize == 2 else 256, dtype=np.uint64).astype(st.np)
    b = Tensor.placeholder((bits.size,), st, name="b")
    out = decode(LowP(b, d))
    with np.errstate(all="ignore"):
        want = bits.view(d).astype(out.dtype.np)
    assert reference.evaluate(out, {b: bits}, {}).tobytes() == want.tobytes()
    assert aj_compile([out], [b]).run([bits], {})[0].tobytes() == want.tobytes()


def test_float64_and_float16_sources_round_as_ml_dtypes() -> None:
    """float64 rounds to float32 first (as ml_dtypes does); float16 converts exactly."""
    rng = np.random.default_rng(3)
    xs = np.concatenate(
        [
            rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 40, 5000),
            [1e300, -1e-300, 2.0**31 + 5, 2.0**31 - 3],
        ]
    )
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    x = Tensor.placeholder((xs.size,), dt.float64, name="x")
    y = Tensor.placeholder((h.size,), dt.float16, name="h")
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "int4"):
        d = _np(name)
        got = reference.evaluate([encode(x, d).bits, encode(y, d).bits], {x: xs, y: h}, {})
        with np.errstate(all="ignore"):
            assert got[0].tobytes() == xs.astype(d).tobytes(), name
            assert got[1].tobytes() == h.astype(d).tobytes(), name


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_matches_onnx(mode: str, saturate: bool) -> None:
    """float32 -> float8 e8m0 as ONNX's ``to_float8e8m0`` rounds, on every bfloat16 value and more."""
    from onnx.numpy_helper import to_float8e8m0

    rng = np.random.default_rng(1)
    xs = np.concatenate(
        [
            (np.arange(65536, dtype=np.uint32) << 16).view(np.float32),
            rng.integers(0, 2**32, 20000, dtype=np.uint32).view(np.float32),
        ]
    )
    x = Tensor.placeholder((xs.size,), dt.float32, name="x")
    out = encode_e8m0(x, _np("float8_e8m0fnu"), saturate=saturate, round_mode=mode).bits
    want = to_float8e8m0(xs, saturate, mode).view(np.uint8)
    assert reference.evaluate(out, {x: xs}, {}).tobytes() == want.tobytes()


def test_bitcast_op_keeps_every_bit() -> None:
    """``Tensor.bitcast`` compiled equals numpy's ``view``, NaN payloads and signalling NaNs too."""
    rng = np.random.default_rng(0)
    u = rng.integers(0, 2**32, 4096, dtype=np.uint32)
    u[:3] = [0x7F800001, 0xFFC00001, 0x7FA00000]
    x = Tensor.placeholder((u.size,), dt.uint32, name="u")
    outs = [
        x.bitcast(dt.float32),
        x.bitcast(dt.float32).bitcast(dt.int32),
        x.cast(dt.uint16).bitcast(dt.float16),
    ]
    got = aj_compile(outs, [x]).run([u], {})
    assert got[0].tobytes() == u.view(np.float32).tobytes()
    assert got[1].tobytes() == u.view(np.int32).tobytes()
    assert got[2].tobytes() == u.astype(np.uint16).view(np.float16).tobytes()
    with pytest.raises(TensorError, match="one size"):
        x.bitcast(dt.float64)
    with pytest.raises(TensorError, match="non-bool"):
        x.cast(dt.bool_).bitcast(dt.uint8)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 23) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    data: bytes = model.SerializeToString()
    return data


def test_session_feeds_and_returns_low_precision_arrays() -> None:
    """A bfloat16 input and a float8 output: ml_dtypes arrays in and out, equal to ONNX's reference;
    a float32 feed for the bfloat16 input is a typed error."""
    m = _model(
        [
            helper.make_node("Mul", ["x", "x"], ["sq"]),
            helper.make_node("Cast", ["sq"], ["y"], to=TensorProto.FLOAT8E4M3FN, saturate=0),
            helper.make_node("Cast", ["x"], ["z"], to=TensorProto.INT4),
        ],
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["n"])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, ["n"]),
            helper.make_tensor_value_info("z", TensorProto.INT4, ["n"]),
        ],
    )
    sess = InferenceSession(m, dims={"n": (1, 64)})
    assert sess.get_inputs()[0].dtype == _np("bfloat16")
    assert [o.dtype for o in sess.get_outputs()] == [_np("float8_e4m3fn"), _np("int4")]
    x = np.array([0.5, -3.0, 17.25, 300.0, -7.9, 1e-3], dtype=ml_dtypes.bfloat16)
    y, z = sess.run(None, {"x": x})
    want_y, want_z = _reference(m, {"x": x})
    assert y.dtype == want_y.dtype and y.view(np.uint8).tolist() == want_y.view(np.uint8).tolist()
    assert z.dtype == want_z.dtype and z.astype(np.int8).tolist() == want_z.astype(np.int8).tolist()
    again = sess.run(None, {"x": x})  # the memoized feed check: bits still go to the plan
    assert [a.tobytes() for a in again] == [y.tobytes(), z.tobytes()]
    with pytest.raises(DTypeMismatchError, match="bfloat16"):
        sess.run(None, {"x": x.astype(np.float32)})


@pytest.mark.parametrize(
    ("zp_type", "block", "axis"),
    [
        (TensorProto.INT4, 0, 1),
        (TensorProto.UINT8, 2, 1),
        (TensorProto.INT8, 3, 0),
        (TensorProto.UINT2, 4, 1),
        (TensorProto.FLOAT8E5M2, 0, 0),
        (TensorProto.FLOAT4E2M1, 0, 1),
    ],
)
def test_quantize_dequantize_matches_reference(zp_type: int, block: int, axis: int) -> None:
    """QuantizeLinear then DequantizeLinear (per axis, or blocked with a short last block),
    compiled, bit for bit equal to ONNX's reference evaluator."""
    shape = (4, 6)
    sshape = [shape[axis]] if not block else [*shape]
    if block:
        sshape[axis] = -(-shape[axis] // block)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    scale = (rng.random(sshape) + 0.25).astype(np.float32)
    zp_values = (
        rng.integers(0, 2, int(np.prod(sshape))).tolist()
        if zp_type in (TensorProto.UINT8, TensorProto.INT8)
        else [0] * int(np.prod(sshape))
    )
    attrs: dict[str, Any] = {"axis": axis, **({"block_size": block} if block else {})}
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], **attrs),
            helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **attrs),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("q", zp_type, shape),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
        ],
        initializer=[
            helper.make_tensor("s", TensorProto.FLOAT, sshape, scale.reshape(-1).tolist()),
            helper.make_tensor("zp", zp_type, sshape, zp_values),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    want_q, want_y = _reference(model, {"x": x})
    q, y = InferenceSession(model).run(None, {"x": x})
    assert q.dtype == want_q.dtype and q.tobytes() == want_q.tobytes()
    assert y.dtype == want_y.dtype and y.tobytes() == want_y.tobytes()


def test_mixed_low_precision_types_in_one_op_fail_at_load() -> None:
    """Adding a bfloat16 to a float8 is refused at load, naming the node and both types."""
    m = _model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")],
        [
            helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT8E4M3FN, [3]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.BFLOAT16, [3])],
    )
    with pytest.raises(OnnxImportError, match=r"'add'.*bfloat16, float8_e4m3fn"):
        load(m)


def _one_node(node: Any, inputs: list[Any], outputs: list[Any], opset: int = 21) -> Any:
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_movement_ops_keep_every_bit_pattern() -> None:
    """Transpose of all 256 float8 patterns (NaNs, -0 included) runs on the bits: exact."""
    vi = helper.make_tensor_value_info
    x = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e4m3fn)
    model = _one_node(
        helper.make_node("Transpose", ["x"], ["y"]),
        [vi("x", TensorProto.FLOAT8E4M3FN, [16, 16])],
        [vi("y", TensorProto.FLOAT8E4M3FN, [16, 16])],
    )
    (y,) = InferenceSession(model).run(None, {"x": x})
    assert y.dtype == x.dtype and y.view(np.uint8).tolist() == x.T.view(np.uint8).tolist()


@pytest.mark.parametrize(("op", "elem"), [("Add", TensorProto.INT4), ("Mul", TensorProto.FLOAT8E5M2)])
def test_arithmetic_matches_reference(op: str, elem: int) -> None:
    """An op on low-precision inputs computes on the decoded values and rounds its result back
    to the type: bit for bit ONNX's reference."""
    vi = helper.make_tensor_value_info
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(2)
    raw = rng.integers(-8, 8, (3, 5)) if elem == TensorProto.INT4 else rng.standard_normal((3, 5)) * 3
    x = raw.astype(np.float32).astype(np_type)
    model = _one_node(
        helper.make_node(op, ["x", "x"], ["y"]), [vi("x", elem, [3, 5])], [vi("y", elem, [3, 5])]
    )
    (y,) = InferenceSession(model).run(None, {"x": x})
    (want,) = _reference(model, {"x": x})
    assert y.dtype == want.dtype and y.tobytes() == want.tobytes()


def test_composite_op_rounds_once() -> None:
    """Softmax on bfloat16 is computed in float32 and rounded once (ONNX's reference rounds
    every intermediate to bfloat16, up to several ulps off): within one bfloat16 ulp of
    float32 softmax rounded to bfloat16."""
    vi = helper.make_tensor_value_info
    x = (np.random.default_rng(2).standard_normal((3, 5)) * 3).astype(ml_dtypes.bfloat16)
    model = _one_node(
        helper.make_node("Softmax", ["x"], ["y"]),
        [vi("x", TensorProto.BFLOAT16, [3, 5])],
        [vi("y", TensorProto.BFLOAT16, [3, 5])],
    )
    (y,) = InferenceSession(model).run(None, {"x": x})
    f = x.astype(np.float64)
    e = np.exp(f - f.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32).astype(ml_dtypes.bfloat16)
    ulps = np.abs(y.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
    assert y.dtype == want.dtype and ulps.max() <= 1


def test_ort_type_strings() -> None:
    """``TensorInfo.type`` spells low-precision types as ONNX Runtime does."""
    vi = helper.make_tensor_value_info
    model = _one_node(
        helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN),
        [vi("x", TensorProto.BFLOAT16, [2])],
        [vi("y", TensorProto.FLOAT8E4M3FN, [2])],
    )
    sess = InferenceSession(model)
    assert [i.type for i in sess.get_inputs() + sess.get_outputs()] == [
        "tensor(bfloat16)",
        "tensor(float8e4m3fn)",
    ]


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_cast_to_e8m0_round_modes(mode: str) -> None:
    """``Cast`` to FLOAT8E8M0 with each ``round_mode``, compiled, equals ONNX's reference."""
    vi = helper.make_tensor_value_info
    x = np.array([3.0, 0.7, 1e38, -5.0, 0.0, 1.5, 6.0, np.inf, np.nan, 2.0**-127], np.float32)
    model = _one_node(
        helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode=mode, saturate=1),
        [vi("x", TensorProto.FLOAT, [x.size])],
        [vi("y", TensorProto.FLOAT8E8M0, [x.size])],
        opset=25,
    )
    (y,) = InferenceSession(model).run(None, {"x": x})
    (want,) = _reference(model, {"x": x})
    assert y.dtype == want.dtype and y.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [dt.float16, dt.float32, dt.float64])
def test_rint_matches_numpy(dtype: dt.DType) -> None:
    """``rint`` (QuantizeLinear's rounding) equals numpy's on every float16, on random float32
    bit patterns and ties, signed zeros included, compiled and in the reference."""
    rng = np.random.default_rng(0)
    halves = np.arange(-300, 300, 0.5)
    if dtype == dt.float16:
        xs: np.ndarray = np.arange(65536, dtype=np.uint16).view(np.float16)
    elif dtype == dt.float32:
        extra = np.array([*halves, 2**22 + 0.5, -0.0], np.float32)
        xs = np.concatenate([rng.integers(0, 2**32, 100000, dtype=np.uint32).view(np.float32), extra])
    else:
        xs = np.concatenate([rng.standard_normal(100000) * 1e15, halves, [2.0**51 + 0.5, -0.0]])
    xs = xs.astype(dtype.np)
    x = Tensor.placeholder((xs.size,), dtype, name="x")
    out = rint(x)
    with np.errstate(all="ignore"):
        want = np.rint(xs.astype(out.dtype.np))
    for got in (aj_compile([out], [x]).run([xs], {})[0], reference.evaluate(out, {x: xs}, {})):
        nan = np.isnan(got) & np.isnan(want)
        assert np.array_equal(got[~nan], want[~nan]) and np.array_equal(
            np.signbit(got[~nan]), np.signbit(want[~nan])
        )
        assert np.array_equal(np.isnan(got), np.isnan(want))


def test_build_rounds_a_float32_tensor_fed_to_a_low_precision_input() -> None:
    """``OnnxModel.build`` (how ``recurrent_step`` traces a model on its own tensors) takes a
    float32 tensor for a bfloat16 input and rounds it to bfloat16, as a cast would."""
    vi = helper.make_tensor_value_info
    m = load(
        _model(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
            [vi("x", TensorProto.BFLOAT16, [4])],
            [vi("y", TensorProto.FLOAT, [4])],
        )
    )
    xs = np.array([1.0 + 2**-9, 3.14159, -1e-3, 65504.0], np.float32)
    x = Tensor.placeholder((4,), dt.float32, name="x")
    y = m.build({"x": x})["y"]
    assert isinstance(y, Tensor)
    want = xs.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert reference.evaluate(y, {x: xs}, {}).tobytes() == want.tobytes()


def test_cli_runs_a_low_precision_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``asyncjit run`` feeds random bfloat16, prints the float8 output's range, and says (exit
    1) that ONNX Runtime cannot run the model instead of a traceback."""
    from asyncjit.cli import main

    vi = helper.make_tensor_value_info
    path = tmp_path / "m.onnx"
    path.write_bytes(
        _model(
            [
                helper.make_node("Mul", ["x", "x"], ["y"]),
                helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT8E4M3FN),
            ],
            [vi("x", TensorProto.BFLOAT16, ["n", 4])],
            [vi("z", TensorProto.FLOAT8E4M3FN, ["n", 4])],
        )
    )
    assert main(["run", str(path), "--dims", "n=1:8", "--repeat", "2", "--compare-ort"]) == 1
    out = capsys.readouterr().out
    assert "z: float8_e4m3fn[8, 4] min 0" in out and "max 5.5" in out
    assert "onnxruntime cannot run this model" in out
