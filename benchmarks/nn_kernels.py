"""CNN kernels (conv2d, depthwise, pools) against ONNX Runtime on one thread, in one run.

    .venv/bin/python benchmarks/nn_kernels.py [--quick] [--pools]
    .venv/bin/python benchmarks/nn_kernels.py --pool-widths

Each row runs one single-op graph: asyncjit's compiled plan (``compile(...).run``, host checks
included) and ONNX Runtime's ``InferenceSession`` on the same single-node ONNX model (1 intra-op
thread, all graph optimisations: ORT may rewrite the conv to its NCHWc kernels), best of several
repetitions. Shapes are layers of the ``light_*`` models in the onnx wheel (ResNet-50,
SqueezeNet, ShuffleNet, VGG). The ratio is asyncjit / ORT: below 1.0 is faster than ORT.
``--pools`` runs only the pooling rows. ``--pool-widths`` compiles each pool row with blocks of
8 output columns (AVX2's width) and of the host's vector width (16 with AVX-512) in one process
and prints both times (best of each, three interleaved rounds) and their ratio; the outputs must
be the same bits.
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import helper

from asyncjit import Tensor
from asyncjit.compiler import compile

QUICK = False  # --quick: main() sets it from the command line (importing this module parses none)


def best_time(fn: Callable[[], object], min_total: float = 0.3, repeats: int = 5) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, int(min_total / repeats / one))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def ort_session(
    op: str, x: np.ndarray, consts: list[np.ndarray], attrs: dict[str, Any]
) -> Callable[[], object]:
    names = ["x"] + [f"c{i}" for i in range(len(consts))]
    inits = [
        helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(c.dtype), c.shape, c.flatten().tolist())
        for n, c in zip(names[1:], consts, strict=True)
    ]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})


def row(
    label: str, ours: Callable[[], Any], theirs: Callable[[], Any], check: tuple[Any, Any] | None = None
) -> None:
    got, want = ours(), theirs()
    err = float(np.max(np.abs(got[0] - want[0]))) if got[0].size else 0.0
    # interleaved rounds, best of each: on a shared, loaded machine both see the same quiet spells
    t_ours = t_ort = math.inf
    for _ in range(2 if QUICK else 4):
        t_ours, t_ort = min(t_ours, best_time(ours, 0.15)), min(t_ort, best_time(theirs, 0.15))
    print(f"{label:>44} {t_ours * 1e3:9.3f} {t_ort * 1e3:9.3f} {t_ours / t_ort:6.2f} {err:9.1e}")


CONVS = [  # label, x shape, (cout, cin/g, kh, kw), strides, pads, groups
    ("resnet conv1 7x7 s2", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ("resnet 3x3 64", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ("resnet 1x1 256->64", (1, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1),
    ("resnet 1x1 64->256", (1, 64, 56, 56), (256, 64, 1, 1), 1, 0, 1),
    ("resnet 3x3 128 s2", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1, 1),
    ("resnet 3x3 256 14x14", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1),
    ("resnet 1x1 512->2048 7x7", (1, 512, 7, 7), (2048, 512, 1, 1), 1, 0, 1),
    ("resnet 1x1 s2 512->1024", (1, 512, 28, 28), (1024, 512, 1, 1), 2, 0, 1),
    ("vgg 3x3 64 224", (1, 64, 224, 224), (64, 64, 3, 3), 1, 1, 1),
    ("squeezenet 1x1 96->16", (1, 96, 55, 55), (16, 96, 1, 1), 1, 0, 1),
    ("shufflenet depthwise 3x3", (1, 120, 28, 28), (120, 1, 3, 3), 1, 1, 120),
    ("shufflenet grouped 1x1 g3", (1, 240, 28, 28), (240, 80, 1, 1), 1, 0, 3),
    ("alexnet 11x11 s4", (1, 3, 224, 224), (96, 3, 11, 11), 4, 2, 1),
]
POOLS = [  # label, x shape, op, kernel, strides, pads
    ("maxpool 3x3 s2 112", (1, 64, 112, 112), "MaxPool", 3, 2, 1),
    ("maxpool 2x2 s2 224 (vgg)", (1, 64, 224, 224), "MaxPool", 2, 2, 0),
    ("avgpool 3x3 s1 28", (1, 256, 28, 28), "AveragePool", 3, 1, 1),
    ("maxpool 3x3 s2 109 (squeezenet)", (1, 96, 109, 109), "MaxPool", 3, 2, 0),
    ("avgpool 3x3 s1 14 (inception)", (1, 576, 14, 14), "AveragePool", 3, 1, 1),
    ("maxpool 3x3 s1 14 (inception)", (1, 576, 14, 14), "MaxPool", 3, 1, 1),
    ("global avgpool 7x7", (1, 2048, 7, 7), "GlobalAveragePool", 0, 0, 0),
]


def _pool(xt: Tensor, op: str, k: int, s: int, p: int) -> Tensor:
    return xt.max_pool(k, s, p) if op == "MaxPool" else xt.avg_pool(k, s, p)


def pool_widths(rng: np.random.Generator) -> None:
    """Each pool row compiled with 8-column blocks and with the host's width, in one process."""
    import asyncjit.codegen._nnkernels as nk
    from asyncjit.codegen._target import vector_width
    from asyncjit.compiler import _api

    wide = vector_width()
    print(f"{'pool, float32, batch 1':>40} {'8 columns ms':>13} {f'{wide} columns ms':>14} {'ratio':>6}")
    for label, xs, op, k, s, p in POOLS:
        if op == "GlobalAveragePool":
            continue
        x = rng.standard_normal(xs).astype(np.float32)
        xt = Tensor.placeholder(xs, np.float32, "x")
        exes = {}
        for lanes in (8, wide):
            nk.POOL_LANES = lanes
            _api._PLANS.clear()  # the in-memory plan cache would hand back the other width
            exes[lanes] = compile(_pool(xt, op, k, s, p), [xt], cache_dir="off")
        nk.POOL_LANES = None
        if not np.array_equal(exes[8].run([x])[0], exes[wide].run([x])[0], equal_nan=True):
            raise SystemExit(f"{label}: 8 and {wide} columns differ")
        times: dict[int, list[float]] = {8: [], wide: []}
        for _ in range(3):
            for lanes, exe in exes.items():
                times[lanes].append(best_time(lambda exe=exe, x=x: exe.run([x])))
        a, b = min(times[8]), min(times[wide])
        print(f"{label:>40} {a * 1e3:13.4f} {b * 1e3:14.4f} {a / b:5.2f}x")


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer layers and rounds")
    ap.add_argument("--pools", action="store_true", help="only the pooling rows")
    ap.add_argument(
        "--pool-widths", action="store_true", help="pools with 8-column blocks against the host's width"
    )
    args = ap.parse_args()
    QUICK = args.quick
    rng = np.random.default_rng(0)
    if args.pool_widths:
        pool_widths(rng)
        return
    print(f"{'single op, batch 1, float32':>44} {'ours ms':>9} {'ORT ms':>9} {'ratio':>6} {'max err':>9}")
    for label, xs, ws, s, p, g in [] if args.pools else CONVS[:4] if QUICK else CONVS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        bias = rng.standard_normal(ws[0]).astype(np.float32)
        xt = Tensor.placeholder(xs, np.float32, "x")
        exe = compile(xt.conv(Tensor.const(w), Tensor.const(bias), strides=s, pads=p, groups=g), [xt])
        attrs = dict(strides=(s, s), pads=(p,) * 4, group=g, kernel_shape=ws[2:])
        row(label, lambda exe=exe, x=x: exe.run([x]), ort_session("Conv", x, [w, bias], attrs))
    for label, xs, op, k, s, p in POOLS[:2] if QUICK else POOLS:
        x = rng.standard_normal(xs).astype(np.float32)
        xt = Tensor.placeholder(xs, np.float32, "x")
        if op == "MaxPool":
            y, attrs = xt.max_pool(k, s, p), dict(kernel_shape=(k, k), strides=(s, s), pads=(p,) * 4)
        elif op == "AveragePool":
            y, attrs = xt.avg_pool(k, s, p), dict(kernel_shape=(k, k), strides=(s, s), pads=(p,) * 4)
        else:
            y, attrs = xt.mean((2, 3), keepdims=True), {}
        exe = compile(y, [xt])
        row(label, lambda exe=exe, x=x: exe.run([x]), ort_session(op, x, [], attrs))


if __name__ == "__main__":
    main()
