"""Malformed and hostile ONNX models get a typed error (``OnnxImportError``, ``TensorError``,
``OutOfMemoryError``, ...), never another exception: the classes ``python tests/fuzz.py --onnx``
found, each by a hand-made model, and a fixed slice of that fuzzer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx
from onnx import TensorProto, helper

import asyncjit.onnx as ao
from asyncjit import Tensor, Var
from asyncjit import dtypes as dt
from asyncjit.compiler import compile as compile_graph
from asyncjit.errors import JitError, OnnxImportError, OutOfMemoryError, TensorError
from asyncjit.graph._node import allocate_array

F = TensorProto.FLOAT


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 18) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _io(name: str, shape: list[int], elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _single(node: onnx.NodeProto, x_shape: list[int], y_elem: int = F, opset: int = 18) -> bytes:
    """A model of one node from input ``x`` (float32, ``x_shape``) to output ``y``."""
    return _model([node], [_io("x", x_shape)], [_io("y", None, y_elem)], opset=opset)


def _relu() -> bytes:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", [2])], [_io("y", [2])])


def _not_utf8() -> bytes:
    data = _relu()
    assert data.count(b"Relu") == 1
    return data.replace(b"Relu", b"R\xffl\xfe")  # the same length: still a valid protobuf


def _undefined_elem_type() -> bytes:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", [2], 0)], [_io("y", [2])])


def _zero_stride_pool() -> bytes:
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[0, 1])
    return _single(node, [1, 1, 4, 4])


def _bad_tensor_attribute() -> bytes:
    value = helper.make_tensor("v", F, [3], [1.0, 2.0, 3.0])
    del value.float_data[:]  # dims say 3 elements, the data holds none
    node = helper.make_node("Constant", [], ["c"], value=value)
    add = helper.make_node("Add", ["x", "c"], ["y"])
    return _model([node, add], [_io("x", [3])], [_io("y", [3])])


def _bad_initializer() -> bytes:
    w = helper.make_tensor("w", F, [2], [1.0, 2.0])
    w.dims[0] = 4  # 2 values for 4 elements
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_io("x", [4])], [_io("y", [4])], [w])


def _huge_scan_count() -> bytes:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "e"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
        "body",
        [_io("s", []), _io("e", [])],
        [_io("s2", []), _io("o", [])],
    )
    scan = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=2**40)
    return _model([scan], [_io("s0", []), _io("xs", [3])], [_io("s", []), _io("ys", [3])])


def _zero_kernel_conv() -> bytes:
    w = helper.make_tensor("w", F, [1, 1, 0], [])
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    return _model([node], [_io("x", [1, 1, 5])], [_io("y", None)], [w])


def _einsum_without_equation() -> bytes:
    node = helper.make_node("Einsum", ["x"], ["y"])  # "equation" is required
    return _single(node, [2, 3], opset=12)


def _split_into_2_31() -> bytes:
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2**31 - 1)
    return _model([node], [_io("x", [4])], [_io("a", None), _io("b", None)])


def _pool_window_2_40() -> bytes:
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2**40], auto_pad="SAME_LOWER")
    return _single(node, [1, 3, 32, 32])


def _keepdims_2() -> bytes:
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=0, keepdims=2)
    return _single(node, [3, 4], TensorProto.INT64)


def _empty_axes_attribute() -> bytes:
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[1])
    del node.attribute[0].ints[:]  # an INTS attribute with no ints (helper cannot type an empty list)
    return _single(node, [2, 3], opset=11)


def _space_to_depth_2_40() -> bytes:
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2**40)
    return _single(node, [1, 1, 0, 6])  # empty: the reshape's element counts agreed (0 = 0)


def _depth_to_space_uneven() -> bytes:
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)
    return _single(node, [1, 6, 2, 2])


BAD_MODELS = {
    "an op type that is not UTF-8": (_not_utf8, "not UTF-8 text"),
    "an input of element type 0 (UNDEFINED)": (_undefined_elem_type, "element type 0"),
    "a pool stride of 0": (_zero_stride_pool, "strides must be 2 ints >= 1"),
    "a tensor attribute whose data and dims disagree": (_bad_tensor_attribute, "unreadable attribute"),
    "an initializer whose data and dims disagree": (_bad_initializer, "initializer 'w' is unreadable"),
    "a Scan over 2^40 inputs": (_huge_scan_count, "num_scan_inputs"),
    "a conv kernel of width 0": (_zero_kernel_conv, "kernel_shape must be 1 ints >= 1"),
    "an Einsum without its equation": (_einsum_without_equation, "Einsum"),
    "a Split into 2^31 - 1 parts": (_split_into_2_31, "num_outputs must equal the node's 2 outputs"),
    "a pool window of 2^40": (_pool_window_2_40, "must stay under 2\\^31"),
    "keepdims = 2 (a 0/1 attribute)": (_keepdims_2, "'keepdims' must be 0 or 1, got 2"),
    "an empty axes attribute (opset 11)": (_empty_axes_attribute, "empty axes attribute"),
    "a SpaceToDepth block of 2^40 on an empty input": (_space_to_depth_2_40, "blocksize 1099511627776 does"),
    "a DepthToSpace block whose square does not divide the channels": (_depth_to_space_uneven, "channels"),
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_malformed_models_raise_onnx_import_errors(case: str) -> None:
    make, words = BAD_MODELS[case]
    with pytest.raises(OnnxImportError, match=words):
        ao.InferenceSession(make())


@pytest.mark.parametrize("op", ["conv", "conv1d"])
def test_conv_weights_with_an_empty_dim_are_refused_when_the_graph_is_built(op: str) -> None:
    """Out channels, in channels or kernel of 0: refused by the graph with a ``TensorError``
    (the kernels need each >= 1; it once passed the graph and failed in codegen)."""
    x = Tensor.placeholder((1, 3, 8), dt.float32)
    for shape in [(0, 3, 3), (2, 3, 0)]:
        w = Tensor.const(np.ones(shape, np.float32))
        with pytest.raises(TensorError, match="must be >= 1"):
            x.conv(w) if op == "conv" else x.conv1d(w)


def test_avg_pools_with_long_windows_count_their_taps_in_a_loop() -> None:
    """The divisor of an average pool's last axis was unrolled tap by tap at compile time (a
    window of 2^30 never finished compiling); beyond 8 taps it is a loop now, same results."""
    from asyncjit import reference

    rng = np.random.default_rng(0)
    x = Tensor.placeholder((1, 2, 5, 40), dt.float32)
    xv = rng.standard_normal((1, 2, 5, 40)).astype(np.float32)
    for k, stride, dil, pads, include in [
        (9, 1, 1, (4, 4), True),
        (12, 3, 2, (5, 7), False),
        (40, 1, 1, (39, 39), True),
    ]:
        y = x.avg_pool(
            (2, k), strides=(1, stride), dilations=(1, dil), pads=((1, 0), pads), count_include_pad=include
        )
        want = reference.evaluate([y], {x: xv}, {})[0]
        np.testing.assert_allclose(compile_graph([y], [x]).run([xv])[0], want, rtol=1e-5, atol=1e-6)


def test_memory_a_plan_cannot_get_is_an_out_of_memory_error() -> None:
    """A plan whose arena (sized for its vars' largest values) cannot be allocated: a typed
    ``OutOfMemoryError`` (a ``MemoryError``) naming the plan, when it is loaded."""
    with pytest.raises(OutOfMemoryError, match="for the test"):
        allocate_array(1 << 62, np.uint8, "the test")
    n = Var("n", 1, 1 << 47)  # 512 TiB: beyond x86-64's user address space, whatever the overcommit
    x = Tensor.placeholder((n,), dt.float32)
    exe = compile_graph([x.cumsum(0) * 2.0], [x], name="huge")  # the cumsum is kept in the arena
    assert exe.arena_bytes >= 4 << 47
    with pytest.raises(OutOfMemoryError, match="huge") as info:
        exe.run([np.ones(4, np.float32)], {"n": 4})
    assert isinstance(info.value, MemoryError)


def test_an_output_too_large_to_allocate_is_an_out_of_memory_error() -> None:
    """An ``Expand`` to 2^52 elements (16 PiB): its output cannot be allocated when it runs."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [2**24, 2**24, 16])
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    sess = ao.InferenceSession(_model([node], [_io("x", [1])], [_io("y", None)], [shape]))
    with pytest.raises(OutOfMemoryError, match="output"):
        sess.run(None, {"x": np.ones(1, np.float32)})


def test_fuzz_onnx_slice_fixed_seed() -> None:
    """The first mutated models of ``python tests/fuzz.py --onnx --seed 1``: every one runs or
    raises a typed error; no worker dies."""
    env = {**os.environ, "ASYNCJIT_CACHE_DIR": "off"}
    cmd = [sys.executable, str(Path(__file__).with_name("fuzz.py")), "--onnx", "--seed", "1", "--cases", "80"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "graphs=80 " in done.stdout and "mismatches=0 " in done.stdout and "crashes=0 " in done.stdout
    assert "outcomes: " in done.stdout and "ran=" in done.stdout


def test_every_error_the_fuzzer_accepts_is_a_jit_error() -> None:
    """The fuzzer's notion of typed: a ``JitError`` (``OutOfMemoryError`` is one)."""
    assert issubclass(OutOfMemoryError, JitError) and issubclass(OnnxImportError, JitError)


def test_fuzz_onnx_variants_match_onnx_runtime() -> None:
    """Every variant of the ONNX fuzzer's metamorphic runs (``fuzzing_onnx.VARIANTS``: a
    recurrent node batch first, with and without initial states given; an axis written from
    the end; a commutative op's inputs reversed; a Gemm operand fed transposed) on every node
    case it applies to: our outputs, mapped back, equal ONNX Runtime's on the model before."""
    pytest.importorskip("onnxruntime", reason="the peer the variants are compared with")
    from random import Random

    import fuzzing_onnx as fz
    from onnx import ModelProto

    applied = dict.fromkeys(fz.VARIANTS, 0)
    for case in fz.corpus(("node",)):
        for name, variant in fz.VARIANTS.items():
            for states in (False, True) if fz._rnn_node(case.model) is not None else (False,):
                model, feeds = ModelProto(), [np.array(x) for x in case.inputs]
                model.CopyFrom(case.model)
                if states and fz.rnn_state(model, feeds, Random(case.name)) is None:
                    continue
                changed, changed_feeds = ModelProto(), list(feeds)
                changed.CopyFrom(model)
                made = variant(changed, changed_feeds, Random(case.name))
                if made is None:
                    continue
                applied[name] += 1
                try:
                    ours = fz.run_asyncjit(changed.SerializeToString(), changed_feeds, strict=True)
                except JitError:  # then so must the model before (data-dependent shapes, ...)
                    with pytest.raises(JitError):
                        fz.run_asyncjit(model.SerializeToString(), feeds, strict=True)
                    continue
                theirs = fz._peer(model.SerializeToString(), feeds)
                if theirs is not None:  # ONNX Runtime runs no bfloat16 Compress, for one
                    assert fz._differs(made[1](ours), theirs) is None, (case.name, made[0])
    assert all(n >= 10 for n in applied.values()), applied


def test_an_input_without_a_shape_is_named() -> None:
    """A graph input that declares no shape has an unknown rank (not a scalar's): the load
    names it instead of compiling it as a scalar."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", None)], [_io("y", None)])
    with pytest.raises(OnnxImportError, match=r"'x' declares no shape"):
        ao.load(model)
    scalar = _model([helper.make_node("Relu", ["x"], ["y"])], [_io("x", [])], [_io("y", None)])
    (y,) = ao.InferenceSession(scalar).run(None, {"x": np.array(-2.0, np.float32)})
    assert float(y) == 0.0


def test_lrn_of_any_size_is_one_pool() -> None:
    """``LRN``'s channel window is a pool whatever its size: sizes even and odd, up to 1000
    (wider than the channels), equal the spec's formula in numpy (and ONNX Runtime, which takes
    odd sizes only); a size of 2^31 - 1 runs at once, its window clamped to the channels (it was
    a chain of that many adds, built until the worker hung); a size of 0 is refused; rank 2 with a
    symbolic batch and empty batches or channels run."""
    x = np.random.default_rng(3).standard_normal((1, 6, 3, 2)).astype(np.float32)
    alpha, beta, bias = 0.01, 0.6, 1.0
    for size in (1, 2, 4, 5, 1000):
        model = _single(
            helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta), [1, 6, 3, 2]
        )
        (got,) = ao.InferenceSession(model).run(None, {"x": x})
        lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
        sq = x.astype(np.float64) ** 2
        sums = np.stack([sq[:, max(0, c - lo) : min(6, c + hi + 1)].sum(1) for c in range(6)], 1)
        want = x / (bias + alpha / size * sums) ** beta
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        if size % 2:
            ort = pytest.importorskip("onnxruntime", reason="the peer LRN is also checked against")
            (peer,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
            np.testing.assert_allclose(got, peer, rtol=1e-5, atol=1e-6)
    huge = _single(helper.make_node("LRN", ["x"], ["y"], size=2**31 - 1), [1, 6, 3, 2])
    (got,) = ao.InferenceSession(huge).run(None, {"x": x})  # the window clamped to the channels
    want = x / (1.0 + 1e-4 / (2**31 - 1) * (x.astype(np.float64) ** 2).sum(1, keepdims=True)) ** 0.75
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(OnnxImportError, match="size"):
        ao.InferenceSession(_single(helper.make_node("LRN", ["x"], ["y"], size=0), [1, 6, 3, 2]))
    # rank 2 with a symbolic batch, and empty batch or channels
    for shape, dims, fed in (
        (["n", 5], {"n": (1, 8)}, (2, 5)),
        ([0, 4, 3], {}, (0, 4, 3)),
        ([2, 0, 3], {}, (2, 0, 3)),
    ):
        model = _model([helper.make_node("LRN", ["x"], ["y"], size=3)], [_io("x", shape)], [_io("y", None)])
        (y,) = ao.InferenceSession(model, dims).run(None, {"x": np.ones(fed, np.float32)})
        assert y.shape == fed
