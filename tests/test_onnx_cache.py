"""An ONNX CNN's compiled plan is found in the disk cache by a second process.

The disk-cache key hashes the plan's IR, so anything in lowering that depends on the process
(hash seeds ordering a set or dict, ``id()``-derived names, float reprs) makes every warm start
a cold compile. The model has the parts of the ``light_*`` CNNs that lower through their own
paths: conv with bias folded with BatchNormalization, a grouped (depthwise) conv, the channel
shuffle's Reshape/Transpose, Concat, pools, Gemm, Softmax.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the onnx extra)")
from onnx import TensorProto, helper, numpy_helper


def _cnn() -> bytes:
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    def positive(name: str, n: int) -> TensorProto:
        return numpy_helper.from_array(rng.uniform(0.5, 1.5, n).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g1", "be1", "m1", "v1"], ["n1"], epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "wd"], ["d1"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "wp"], ["q1"]),
        helper.make_node("Concat", ["d1", "q1"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "s5"], ["sh"]),
        helper.make_node("Transpose", ["sh"], ["tr"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["tr", "s4"], ["shuf"]),
        helper.make_node("GlobalAveragePool", ["shuf"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        init("w1", 8, 3, 3, 3),
        init("b1", 8),
        positive("g1", 8),
        init("be1", 8),
        init("m1", 8),
        positive("v1", 8),
        init("wd", 8, 1, 3, 3),
        init("wp", 8, 8, 1, 1),
        numpy_helper.from_array(np.array([1, 2, 8, 8, 8], np.int64), "s5"),
        numpy_helper.from_array(np.array([1, 16, 8, 8], np.int64), "s4"),
        init("wf", 10, 16),
        init("bf", 10),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", f, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", f, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return bytes(model.SerializeToString())


SCRIPT = """
import json, sys, numpy as np
import asyncjit.onnx as ao
from asyncjit.compiler import compile_stats
sess = ao.InferenceSession(sys.argv[1])
x = np.linspace(-1, 1, 3 * 32 * 32, dtype=np.float32).reshape(1, 3, 32, 32)
out = sess.run(None, {"x": x})[0]
s = compile_stats()
print(json.dumps({"cold": s.cold_compiles, "disk": s.disk_hits, "out": out.tolist()}))
"""


def test_cnn_plan_is_a_disk_hit_in_a_process_with_another_hash_seed(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    path.write_bytes(_cnn())
    cache = tmp_path / "cache"
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "ASYNCJIT_CACHE_DIR": str(cache), "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True, check=True
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert (first["cold"], first["disk"]) == (1, 0)
    assert (second["cold"], second["disk"]) == (0, 1)
    assert second["out"] == first["out"]
    onnxruntime = pytest.importorskip("onnxruntime", reason="the reference output needs onnxruntime")
    ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.linspace(-1, 1, 3 * 32 * 32, dtype=np.float32).reshape(1, 3, 32, 32)
    np.testing.assert_allclose(np.array(first["out"], np.float32), ort.run(None, {"x": x})[0], atol=1e-5)
