"""Two builds of the float32 2-D conv kernels in one process, interleaved, against ONNX Runtime.

As ``matmul_ab.py`` does for the matmul: on a machine whose speed drifts by 20% over seconds,
two versions of a kernel can only be compared side by side. Each tree writes the conv kernels
``codegen._convnd.emit_convnd`` makes for the layers below (as IR text); both modules are loaded
into one process and each layer is timed in turns, one thread, best of ``ROUNDS`` interleaved
rounds, with ONNX Runtime's single-node session of the same layer in the same rounds::

    # in each tree (e.g. a git worktree of the older commit), write its kernel module:
    .venv/bin/python benchmarks/conv_ab.py --dump /tmp/old.ll
    .venv/bin/python benchmarks/conv_ab.py --dump /tmp/new.ll
    # then compare (outputs checked against ONNX Runtime first):
    .venv/bin/python benchmarks/conv_ab.py /tmp/old.ll /tmp/new.ll
    # or some layers (indices into LAYERS), each call's minimum over 80 calls in turn:
    .venv/bin/python benchmarks/conv_ab.py /tmp/old.ll /tmp/new.ll --layers 2,4,5 --calls 80

Prints milliseconds per call of each build and of ORT (``OMP_NUM_THREADS=1``, one intra-op
thread). Kernels are called directly (no plan around them), with generous scratch. Pass one
build twice as a control: on this host two copies of the same module, each with its own copy
of the weight, differed by up to 8% on a layer (20% on ZFNet's 5 MB weight, streamed from
memory), so a difference smaller than the control's is no difference; whole models
(``onnx_models.py --kernels``, trees alternated by process) settle it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import add_entry, caller, interleaved_best, load_builds

ROUNDS = 7

LAYERS = [  # label, (cin, H, W), (cout, kh, kw), stride, pad: the light models' conv layers
    ("resnet stem 7x7 s2", (3, 224, 224), (64, 7, 7), 2, 3),
    ("resnet 3x3 64 @56", (64, 56, 56), (64, 3, 3), 1, 1),
    ("resnet 3x3 128 s2 @56", (128, 56, 56), (128, 3, 3), 2, 1),
    ("resnet 3x3 128 @28", (128, 28, 28), (128, 3, 3), 1, 1),
    ("resnet 3x3 256 @14", (256, 14, 14), (256, 3, 3), 1, 1),
    ("resnet 3x3 512 @7", (512, 7, 7), (512, 3, 3), 1, 1),
    ("densenet 3x3 128->32 @56", (128, 56, 56), (32, 3, 3), 1, 1),
    ("squeezenet 3x3 16->64 @55", (16, 55, 55), (64, 3, 3), 1, 1),
    ("inception 5x5 16->32 @28", (16, 28, 28), (32, 5, 5), 1, 2),
    ("vgg 3x3 3->64 @224", (3, 224, 224), (64, 3, 3), 1, 1),
    ("vgg 3x3 64 @224", (64, 224, 224), (64, 3, 3), 1, 1),
    ("vgg 3x3 128 @112", (128, 112, 112), (128, 3, 3), 1, 1),
    ("vgg 3x3 256 @56", (256, 56, 56), (256, 3, 3), 1, 1),
    ("vgg 3x3 512 @28", (512, 28, 28), (512, 3, 3), 1, 1),
    ("alexnet 11x11 s4", (3, 224, 224), (96, 11, 11), 4, 2),
    ("alexnet 3x3 256->384 @13", (256, 13, 13), (384, 3, 3), 1, 1),
    ("zfnet 3x3 384 @13", (384, 13, 13), (384, 3, 3), 1, 1),
    ("resnet 3x3 256 s2 @28", (256, 28, 28), (256, 3, 3), 2, 1),
    ("resnet 1x1 64->256 @56", (64, 56, 56), (256, 1, 1), 1, 0),
    ("resnet 1x1 256->64 @56", (256, 56, 56), (64, 1, 1), 1, 0),
    ("resnet 1x1 512->128 @28", (512, 28, 28), (128, 1, 1), 1, 0),
    ("resnet 1x1 128->512 @28", (128, 28, 28), (512, 1, 1), 1, 0),
    ("resnet 1x1 1024->256 @14", (1024, 14, 14), (256, 1, 1), 1, 0),
    ("resnet 1x1 256->1024 @14", (256, 14, 14), (1024, 1, 1), 1, 0),
    ("resnet 1x1 2048->512 @7", (2048, 7, 7), (512, 1, 1), 1, 0),
    ("resnet 1x1 512->2048 @7", (512, 7, 7), (2048, 1, 1), 1, 0),
    ("resnet 1x1 s2 256->512 @56", (256, 56, 56), (512, 1, 1), 2, 0),
    ("squeezenet 1x1 128->16 @55", (128, 55, 55), (16, 1, 1), 1, 0),
    ("squeezenet 1x1 512->64 @13", (512, 13, 13), (64, 1, 1), 1, 0),
    ("densenet 1x1 256->128 @28", (256, 28, 28), (128, 1, 1), 1, 0),
    ("inception 1x1 192->64 @28", (192, 28, 28), (64, 1, 1), 1, 0),
    ("squeezenet stem 3x3 s2", (3, 224, 224), (64, 3, 3), 2, 0),
    ("squeezenet 1x1 64->16 @55", (64, 55, 55), (16, 1, 1), 1, 0),
    ("squeezenet 1x1 16->64 @55", (16, 55, 55), (64, 1, 1), 1, 0),
    ("squeezenet 3x3 32->128 @27", (32, 27, 27), (128, 3, 3), 1, 1),
    ("squeezenet 3x3 64->256 @13", (64, 13, 13), (256, 3, 3), 1, 1),
    ("squeezenet 1x1 512->1000 @13", (512, 13, 13), (1000, 1, 1), 1, 0),
    ("zfnet stem 7x7 s2 3->96", (3, 224, 224), (96, 7, 7), 2, 0),
    ("densenet 1x1 128->128 @56", (128, 56, 56), (128, 1, 1), 1, 0),
]


def _out(n: int, k: int, stride: int, pad: int) -> int:
    return (n + 2 * pad - k) // stride + 1


def dump(path: str) -> None:
    from llvmlite import ir

    from asyncjit.codegen._convnd import emit_convnd

    module = ir.Module("conv_ab")
    for i, (_label, (cin, h, w), (cout, kh, kw), s, p) in enumerate(LAYERS):
        shape = dict(cin=cin, cout=cout, ks=(kh, kw), strides=(s, s), dilations=(1, 1), pads=((p, p), (p, p)),
                     groups=1, **_bounds(emit_convnd, (h, w)))  # fmt: skip
        panels = _panels_chosen(shape)
        extra = {"w_panels": True} if panels else {}
        fn = emit_convnd(module, f"bench.conv{i}", has_bias=True, **shape, **extra)
        # a kernel reading its weight in the matmul's panels is named so: the caller lays it out
        add_entry(module, f"conv{i}{'p' if panels else ''}", fn)
    with open(path, "w") as f:
        f.write(str(module))


def _panels_chosen(shape: dict[str, object]) -> bool:
    """Whether this tree's compiler lays the layer's weight out in panels (older trees: never)."""
    try:
        from asyncjit.codegen._convpanels import panels_chosen
    except ImportError:
        return False
    return bool(panels_chosen(**shape))  # type: ignore[arg-type]


def _bounds(emit: object, s_max: tuple[int, int]) -> dict[str, object]:
    """``s_max`` for trees whose ``emit_convnd`` takes it (older ones do not)."""
    import inspect

    return {"s_max": s_max} if "s_max" in inspect.signature(emit).parameters else {}  # type: ignore[arg-type]


def _ort(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int) -> object:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=(s, s), pads=(p,) * 4)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _aligned(a: np.ndarray) -> np.ndarray:
    """A writable 64-byte aligned copy of ``a`` (the runtime's ``host_array``)."""
    from asyncjit.runtime import host_array

    out = host_array(a.shape, a.dtype)
    out[...] = a
    return out


def _has(obj: object, name: str) -> bool:
    try:
        obj.address(name)  # type: ignore[attr-defined]
    except KeyError:
        return False
    return True


def _panels_weight(w: np.ndarray) -> np.ndarray:
    from asyncjit.codegen._convpanels import panels_weight

    return panels_weight(w)


def _per_call_minima(fns: list[Any], calls: int) -> list[float]:
    """Each function's fastest single call, the functions called in turn ``calls`` times: on a
    host that steals whole milliseconds, a batch's mean carries the steal and a call's minimum
    does not (the quartiles of these calls were 10-30% above their minima here)."""
    best = [math.inf] * len(fns)
    for fn in fns:
        fn()
    for r in range(calls):
        # each round starts with the next function: a build always called right after ONNX
        # Runtime's call measured up to 8% slower than an identical build later in the round
        for j in range(len(fns)):
            k = (r + j) % len(fns)
            t0 = time.perf_counter()
            fns[k]()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def compare(files: list[str], layers: list[int] | None = None, calls: int = 0) -> None:
    objs = load_builds(files)
    rng = np.random.default_rng(0)
    names = " ".join(f"{os.path.basename(f):>10}" for f in files)
    how = f"fastest of {calls} calls in turn" if calls else f"best of {ROUNDS} interleaved rounds"
    print(f"{'layer (batch 1)':>28} {names}        ORT   (ms, 1 thread, {how})")
    for i, (label, (cin, h, w_), (cout, kh, kw), s, p) in enumerate(LAYERS):
        if layers is not None and i not in layers:
            continue
        oh, ow = _out(h, kh, s, p), _out(w_, kw, s, p)
        # 64-byte aligned, as a plan's constants and buffers are (numpy's start 16 bytes into a page)
        x = _aligned(rng.standard_normal((1, cin, h, w_)).astype(np.float32))
        w = _aligned((rng.standard_normal((cout, cin, kh, kw)) / math.sqrt(cin * kh * kw)).astype(np.float32))
        b = _aligned(rng.standard_normal(cout).astype(np.float32))
        y = _aligned(np.empty((1, cout, oh, ow), np.float32))
        # generous: either tree may lay its scratch out differently (im2col: cin*kh*kw*oh*ow floats)
        padded = (cin + cout) * (h + 2 * p + 16) * (w_ + 2 * p + 16)
        scratch = np.zeros(8 * (cin * kh * kw * oh * ow + padded) + (64 << 20), np.uint8)
        runs = []
        for o in objs:
            panels = _has(o, f"conv{i}p")
            wk = _aligned(_panels_weight(w)) if panels else w
            args = [*(a.ctypes.data for a in (x, wk, b, y, scratch)), 1, h, w_, oh, ow]
            runs.append(caller(o, f"conv{i}{'p' if panels else ''}", args))
            caller.keep.append(wk)  # type: ignore[attr-defined]
        sess = _ort(x, w, b, s, p)
        (want,) = sess.run(None, {"x": x})  # type: ignore[attr-defined]
        for run in runs:
            y[:] = np.nan
            run()
            np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3, err_msg=label)
        fns = [*runs, lambda sess=sess, x=x: sess.run(None, {"x": x})]  # type: ignore[attr-defined]
        best = _per_call_minima(fns, calls) if calls else interleaved_best(fns, ROUNDS, 0.05)
        print(f"{label:>28} " + " ".join(f"{t * 1e3:10.3f}" for t in best), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", metavar="BUILD.ll", help="the builds' kernel modules to compare")
    ap.add_argument("--dump", metavar="FILE", help="write this tree's kernel module (IR text) to FILE")
    ap.add_argument("--layers", metavar="I,J,...", help="only these layers (indices into LAYERS)")
    ap.add_argument(
        "--calls", type=int, default=0, metavar="N", help="each call's minimum over N calls in turn"
    )
    args = ap.parse_intermixed_args()  # the files and the options in any order
    if args.dump:
        dump(args.dump)
        return
    for f in args.files:
        if not f.endswith(".ll"):
            ap.error(f"not a .ll file: {f}")
    if not args.files:
        raise SystemExit(__doc__)
    layers = [int(v) for v in args.layers.split(",")] if args.layers else None
    compare(args.files, layers, args.calls)


if __name__ == "__main__":
    main()
