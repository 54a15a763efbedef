"""Low-precision ONNX conversions: asyncjit's compiled bit arithmetic against ml_dtypes (numpy)
and ONNX Runtime, side by side in one run.

    .venv/bin/python benchmarks/onnx_lowp.py [--n 1048576] [--repeat 20]

Each case is a one-node ONNX model (Cast, QuantizeLinear, DequantizeLinear) over ``n`` elements,
run through ``InferenceSession.run`` (numpy in and out, as an ORT user calls it), against
ONNX Runtime's session on the same model (1 thread and default threads, where ORT implements
the case) and against numpy with ``ml_dtypes`` (``astype``, the ONNX reference's arithmetic).
Outputs are checked equal bit for bit before timing. Ratios are asyncjit / peer: below 1.0 is
faster.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

# --n and --repeat: main() sets these from the command line (importing this module parses none)
N = 1 << 20
REPEAT = 20


def median_time(fn: Callable[[], object]) -> float:
    fn()
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def model(node: Any, x_type: int, y_type: int, inits: list[Any], opset: int = 21) -> bytes:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [vi("x", x_type, [N])], [vi("y", y_type, [N])], initializer=inits)
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
    return data


def main() -> None:
    global N, REPEAT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=N, help=f"elements per case (default {N})")
    ap.add_argument("--repeat", type=int, default=REPEAT, help=f"runs per median (default {REPEAT})")
    args = ap.parse_args()
    N, REPEAT = args.n, args.repeat
    import onnxruntime as ort

    from asyncjit.onnx import InferenceSession

    print(machine_line())
    rng = np.random.default_rng(0)
    f32 = (rng.standard_normal(N) * 100).astype(np.float32)
    u8 = rng.integers(0, 256, N).astype(np.uint8)
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.37])
    cases: list[tuple[str, bytes, np.ndarray, Callable[[], np.ndarray]]] = [
        (
            "Cast float32 -> bfloat16",
            model(
                helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16),
                TensorProto.FLOAT,
                TensorProto.BFLOAT16,
                [],
            ),
            f32,
            lambda: f32.astype(ml_dtypes.bfloat16),
        ),
        (
            "Cast float32 -> float8e4m3fn (saturate)",
            model(
                helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN),
                TensorProto.FLOAT,
                TensorProto.FLOAT8E4M3FN,
                [],
            ),
            f32,
            lambda: np.clip(f32, -448, 448).astype(ml_dtypes.float8_e4m3fn),
        ),
        (
            "Cast float8e5m2 -> float32",
            model(
                helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
                TensorProto.FLOAT8E5M2,
                TensorProto.FLOAT,
                [],
            ),
            f32.astype(ml_dtypes.float8_e5m2),
            lambda: f32.astype(ml_dtypes.float8_e5m2).astype(np.float32),
        ),
        (
            "QuantizeLinear float32 -> int4",
            model(
                helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
                TensorProto.FLOAT,
                TensorProto.INT4,
                [scale, helper.make_tensor("z", TensorProto.INT4, [], [0])],
            ),
            f32,
            lambda: np.clip(np.rint(f32 / np.float32(0.37)), -8, 7).astype(ml_dtypes.int4),
        ),
        (
            "DequantizeLinear uint8 -> float32",
            model(
                helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"]),
                TensorProto.UINT8,
                TensorProto.FLOAT,
                [scale, helper.make_tensor("z", TensorProto.UINT8, [], [128])],
            ),
            u8,
            lambda: (u8.astype(np.float32) - 128) * np.float32(0.37),
        ),
    ]
    print(f"n = {N} elements, median of {REPEAT} runs; ratio = asyncjit / peer")
    print(f"{'case':42s} {'asyncjit':>10s} {'ml_dtypes':>10s} {'ORT 1t':>10s} {'ORT':>10s}   ratios")
    for name, data, x, numpy_fn in cases:
        sess = InferenceSession(data)
        ours = sess.run(None, {"x": x})[0]
        t_ours = median_time(lambda: sess.run(None, {"x": x}))  # noqa: B023 (called here)
        t_np = median_time(numpy_fn)
        peers = {"ml_dtypes": t_np}
        for label, threads in (("ORT 1t", 1), ("ORT", 0)):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            try:
                o = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
                got = o.run(None, {"x": x})[0]
            except Exception as exc:  # ORT lacks some kernels (int4 outputs, ...)
                print(f"  ({label}: not run: {type(exc).__name__}: {str(exc).splitlines()[0][:80]})")
                continue
            if got.tobytes() != ours.tobytes():
                print(f"  ({label}: its output differs from asyncjit's; timed anyway)")
            peers[label] = median_time(lambda: o.run(None, {"x": x}))  # noqa: B023 (called here)
        cells = [
            f"{peers[k] * 1e3:8.2f}ms" if k in peers else f"{'-':>10s}"
            for k in ("ml_dtypes", "ORT 1t", "ORT")
        ]
        ratios = ", ".join(f"{t_ours / v:.2f}x {k}" for k, v in peers.items())
        print(f"{name:42s} {t_ours * 1e3:8.2f}ms {' '.join(cells)}   {ratios}")


if __name__ == "__main__":
    main()
