"""CNN kernels (conv2d, depthwise, pools) against ONNX Runtime on one thread, in one run.

    .venv/bin/python benchmarks/nn_kernels.py [--quick] [--pools]
    .venv/bin/python benchmarks/nn_kernels.py --pool-widths
    .venv/bin/python benchmarks/nn_kernels.py --winograd [--quick]
    .venv/bin/python benchmarks/nn_kernels.py --fft [--quick]

Each row runs one single-op graph: asyncjit's compiled plan (``compile(...).run``, host checks
included) and ONNX Runtime's ``InferenceSession`` on the same single-node ONNX model, both on one
thread (ORT with all graph optimisations: it may rewrite the conv to its NCHWc kernels; ours with
``set_intra_op_threads(1)``, where before it split big kernels over every core), best of several
repetitions. Shapes are layers of the ``light_*`` models in the onnx wheel (ResNet-50,
SqueezeNet, ShuffleNet, VGG). The ratio is asyncjit / ORT: below 1.0 is faster than ORT.
``--pools`` runs only the pooling rows. ``--pool-widths`` compiles each pool row with blocks of
8 output columns (AVX2's width) and of the host's vector width (16 with AVX-512) in one process
and prints both times (best of each, three interleaved rounds) and their ratio; the outputs must
be the same bits. ``--winograd`` runs the 3x3 stride-1 layers of VGG-19, ResNet-50 and SqueezeNet
(a 3x3 conv + relu each) three ways in turn: as compiled (``codegen._convwino`` takes the layers
``wino_chosen`` admits), with Winograd's conv turned off (the kernel the layer took before), and
ONNX Runtime's ``Conv`` + ``Relu``, then ours as compiled on two threads; it prints the times, the
ratios and which kernel ran. ``--fft`` runs the STFT of 2,000 Hann-windowed frames of K
samples (hop K/2, K from 32 to 2048) four ways: ours as compiled (a ``conv1d`` with the windowed
DFT basis, run by ``codegen._convfft``), ours with one basis entry nudged by 1e-3 (no longer a
basis: the plain ``conv1d`` kernel, the same multiply-adds), ONNX Runtime's ``STFT`` op with the
same window, and numpy's ``rfft`` of the windowed frames (pocketfft; its framing copy included).
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
from onnx import helper, numpy_helper

from asyncjit import Tensor
from asyncjit.codegen import _parallel
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


WINO_LAYERS = [  # label, cin, cout, height and width
    ("vgg 3x3 64 @224", 64, 64, 224),
    ("vgg 3x3 64->128 @112", 64, 128, 112),
    ("vgg 3x3 128 @112", 128, 128, 112),
    ("vgg 3x3 128->256 @56", 128, 256, 56),
    ("vgg 3x3 256 @56", 256, 256, 56),
    ("vgg 3x3 256->512 @28", 256, 512, 28),
    ("vgg 3x3 512 @28", 512, 512, 28),
    ("vgg 3x3 512 @14", 512, 512, 14),
    ("resnet 3x3 64 @56", 64, 64, 56),
    ("resnet 3x3 128 @28", 128, 128, 28),
    ("resnet 3x3 256 @14", 256, 256, 14),
    ("resnet 3x3 512 @7", 512, 512, 7),
    ("squeezenet 3x3 16->64 @55", 16, 64, 55),
    ("squeezenet 3x3 32->128 @27", 32, 128, 27),
    ("squeezenet 3x3 48->192 @13", 48, 192, 13),
    ("squeezenet 3x3 64->256 @13", 64, 256, 13),
]


def winograd_rows(rng: np.random.Generator) -> None:
    """Each 3x3 layer with and without Winograd's conv, beside ONNX Runtime, calls in turn."""
    from asyncjit.codegen import _convwino
    from asyncjit.compiler import _api

    head = f"{'3x3 conv + relu, batch 1, 1 thread':>34} {'kernel':>7} {'ours ms':>9} {'before ms':>9}"
    print(f"{head} {'ORT ms':>9} {'/before':>7} {'/ORT':>6} {'ours 2t ms':>10} {'1t/2t':>6} {'max err':>9}")
    for label, cin, cout, hw in WINO_LAYERS[:4] if QUICK else WINO_LAYERS:
        x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, 3, 3)) / (3 * math.sqrt(cin))).astype(np.float32)
        bias = rng.standard_normal(cout).astype(np.float32)
        xt = Tensor.placeholder(x.shape, np.float32, "x")
        y = xt.conv(Tensor.const(w), Tensor.const(bias), pads=1).relu()
        exes = []
        for tiles in (_convwino.WINO_MIN_TILES, 1 << 62):
            old, _convwino.WINO_MIN_TILES = _convwino.WINO_MIN_TILES, tiles
            try:
                _api._PLANS.clear()  # the in-memory plan cache would hand back the other build
                exes.append(compile(y, [xt], cache_dir="off"))
            finally:
                _convwino.WINO_MIN_TILES = old
        text = exes[0].ir_text() if callable(exes[0].ir_text) else exes[0].ir_text
        kind = "wino" if ".wino_in" in text else "other"
        graph = helper.make_graph(
            [
                helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=(1,) * 4),
                helper.make_node("Relu", ["c"], ["y"]),
            ],
            "g",
            [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
            [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")],
        )
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        fns = [lambda e=e, x=x: e.run([x]) for e in exes] + [lambda s=sess, x=x: s.run(None, {"x": x})]
        fns.append(_on_two_threads(fns[0]))  # as compiled, its big kernels split over two threads
        want = fns[2]()[0]
        err = max(float(np.max(np.abs(f()[0] - want)) / np.max(np.abs(want))) for f in fns[:2])
        best = [math.inf] * len(fns)
        for _ in range(2 if QUICK else 4):
            best = [min(b, best_time(f, 0.15)) for b, f in zip(best, fns, strict=True)]
        a, b, c, d = (t * 1e3 for t in best)
        print(
            f"{label:>34} {kind:>7} {a:9.3f} {b:9.3f} {c:9.3f} {a / b:7.2f} {a / c:6.2f}"
            f" {d:10.3f} {a / d:6.2f} {err:9.1e}"
        )


def fft_rows(rng: np.random.Generator) -> None:
    """The STFT by FFT against the plain conv1d, ONNX Runtime's STFT and numpy's rfft, per K."""
    frames = 2000
    print(
        f"{'STFT, 2000 frames, hop K/2, 1 thread':>40} {'ours ms':>9} {'conv1d ms':>9} {'ORT ms':>9}", end=""
    )
    print(f" {'numpy ms':>9} {'/conv1d':>7} {'/ORT':>6} {'/numpy':>6} {'max err':>9}")
    for k in (64, 256, 1024) if QUICK else (32, 64, 128, 256, 512, 1024, 2048):
        hop, f = k // 2, k // 2 + 1
        length = hop * (frames - 1) + k
        x = rng.standard_normal((1, length)).astype(np.float32)
        win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(k) / k)).astype(np.float32)
        phase = 2 * np.pi * ((np.arange(f)[:, None] * np.arange(k)) % k) / k
        basis = np.concatenate([win * np.cos(phase), -win * np.sin(phase)]).astype(np.float32)[:, None, :]
        nudged = basis.copy()
        nudged[3, 0, 5] += 1e-3
        exes = []
        for w in (basis, nudged):
            xt = Tensor.placeholder((1, 1, length), np.float32, "x")
            exes.append(compile(xt.conv1d(Tensor.const(w), stride=hop), [xt]))
        graph = helper.make_graph(
            [helper.make_node("STFT", ["x", "step", "win"], ["y"], onesided=1)],
            "g",
            [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), (1, length, 1))],
            [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
            [numpy_helper.from_array(np.array(hop, np.int64), "step"), numpy_helper.from_array(win, "win")],
        )
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        x3, xo = x.reshape(1, 1, length), x.reshape(1, length, 1)
        idx = np.arange(frames)[:, None] * hop + np.arange(k)

        def numpy_stft(x: np.ndarray = x, idx: np.ndarray = idx, win: np.ndarray = win) -> Any:
            return np.fft.rfft(x[0, idx] * win, axis=1)

        fns = [lambda e=e, x3=x3: e.run([x3]) for e in exes]
        fns += [lambda s=sess, xo=xo: s.run(None, {"x": xo}), numpy_stft]
        ours = fns[0]()[0][0]  # [2F, frames]
        want = fns[2]()[0][0]  # [frames, F, 2]
        err = float(
            np.max(np.abs(ours - np.concatenate([want[..., 0].T, want[..., 1].T]))) / np.abs(want).max()
        )
        best = [math.inf] * len(fns)
        for _ in range(2 if QUICK else 3):
            best = [min(b, best_time(fn, 0.15)) for b, fn in zip(best, fns, strict=True)]
        a, b, c, d = (t * 1e3 for t in best)
        times = f"{a:9.3f} {b:9.3f} {c:9.3f} {d:9.3f}"
        print(f"{'K = ' + str(k):>40} {times} {a / b:7.2f} {a / c:6.2f} {a / d:6.2f} {err:9.1e}")


def _on_two_threads(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        old = _parallel.set_intra_op_threads(2)
        try:
            return fn()
        finally:
            _parallel.set_intra_op_threads(old)

    return run


def main() -> None:
    global QUICK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer layers and rounds")
    ap.add_argument("--pools", action="store_true", help="only the pooling rows")
    ap.add_argument(
        "--pool-widths", action="store_true", help="pools with 8-column blocks against the host's width"
    )
    ap.add_argument("--winograd", action="store_true", help="3x3 layers with and without Winograd's conv")
    ap.add_argument("--fft", action="store_true", help="STFTs by FFT against the conv1d, ORT and numpy")
    args = ap.parse_args()
    QUICK = args.quick
    _parallel.set_intra_op_threads(1)  # ONNX Runtime runs on one thread too
    rng = np.random.default_rng(0)
    if args.pool_widths:
        pool_widths(rng)
        return
    if args.winograd:
        winograd_rows(rng)
        return
    if args.fft:
        fft_rows(rng)
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
