"""``asyncjit info MODEL.onnx`` and ``asyncjit run MODEL.onnx``: look at and run an ONNX model.

``info`` reads the file only (no trace, no compile): inputs and outputs with their symbolic dims
(unnamed ones spelled ``<input>:<axis>``, the key ``--dims`` takes), op counts, and every node
whose op asyncjit cannot import. ``run`` imports, compiles (with progress: rich if installed,
plain lines otherwise), feeds ``--input`` arrays (random data for the rest, at the dims' upper
bounds) and prints the outputs and the latency; ``--compare-ort`` runs ONNX Runtime on the same
inputs and prints the largest difference and the latency ratio.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import OnnxImportError

__all__ = ["add_commands", "parse_dims"]


def parse_dims(items: list[str]) -> dict[str, Any]:
    """``["T=1:3000", "batch=4", "state:1=input:0"]`` -> ``{"T": (1, 3000), "batch": 4, ...}``.

    A value that is neither ``N`` nor ``LO:HI`` is an alias of another dim key.
    """
    dims: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.rpartition("=")
        if not sep or not key:
            raise OnnxImportError(f"--dims takes NAME=MIN:MAX, NAME=N or NAME=OTHER, got {item!r}")
        lo, colon, hi = value.partition(":")
        if lo.isdigit() and (not colon or hi.isdigit()):
            dims[key] = (int(lo), int(hi)) if colon else int(lo)
        else:
            dims[key] = value
    return dims


def _dim_labels(inp: Any) -> list[str]:
    out = []
    for axis, d in enumerate(inp.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            out.append(str(d.dim_value))
        else:
            out.append(d.dim_param or f"{inp.name}:{axis}")
    return out


def _info(args: argparse.Namespace) -> int:
    from ._importer import read_model, unsupported_nodes, walk_nodes
    from ._values import np_dtype

    model, label, data = read_model(args.model)
    g = model.graph
    print(
        f"{label}: {len(data) / 1e6:.2f} MB, IR {model.ir_version}, opsets "
        + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    )
    inits = {t.name for t in g.initializer}
    print("inputs:")
    for inp in g.input:
        if inp.name in inits:
            continue
        if not inp.type.HasField("tensor_type"):
            print(f"  {inp.name}: not a tensor")
            continue
        print(f"  {inp.name}: {np_dtype(inp.type.tensor_type.elem_type)}[{', '.join(_dim_labels(inp))}]")
    print("outputs:")
    for out in g.output:
        if out.type.HasField("tensor_type"):
            print(f"  {out.name}: {np_dtype(out.type.tensor_type.elem_type)}[{', '.join(_dim_labels(out))}]")
    counts = collections.Counter(n.op_type for n in walk_nodes(g))
    print(f"ops ({sum(counts.values())} nodes): " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    bad = unsupported_nodes(model)
    if bad:
        print(f"unsupported ({len(bad)} nodes):")
        for name, op_type, why in bad:
            print(f"  {name}: {op_type} ({why})")
        return 1
    print("unsupported: none")
    return 0


@contextlib.contextmanager
def _progress(text: str) -> Iterator[None]:
    """A spinner while a model imports and compiles (rich if installed, plain text otherwise)."""
    try:
        from rich.console import Console
    except ImportError:
        print(f"{text} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        yield
        print(f"{text}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        return
    console = Console(stderr=True)
    t0 = time.perf_counter()
    with console.status(text):
        yield
    console.print(f"{text}: done in {time.perf_counter() - t0:.1f} s")


def _feed_for(sess: Any, given: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    from ..symbolic import upper
    from ._lowp import is_lowp_dtype

    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    for info in sess.get_inputs():
        if info.name in given:
            feed[info.name] = given[info.name]
            continue
        shape = tuple(upper(d) for d in info.shape)
        low_int = is_lowp_dtype(info.dtype) and info.dtype.name.startswith(("int", "uint"))
        if info.dtype.kind == "f" or (is_lowp_dtype(info.dtype) and not low_int):
            feed[info.name] = rng.standard_normal(shape).astype(np.float32).astype(info.dtype)
        elif low_int:
            feed[info.name] = rng.integers(0, 2, shape).astype(info.dtype)
        elif info.dtype.kind == "b":
            feed[info.name] = rng.random(shape) < 0.5
        else:
            feed[info.name] = np.zeros(shape, info.dtype)
    return feed


def _time(fn: Any, repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _run(args: argparse.Namespace) -> int:
    from ._lowp import is_lowp_dtype
    from ._session import InferenceSession

    dims = parse_dims(args.dims or [])
    values: dict[str, Any] = {}
    for item in args.value or []:
        key, _, v = item.partition("=")
        values[key] = np.array(float(v) if "." in v else int(v))
    given: dict[str, np.ndarray] = {}
    for item in args.input or []:
        key, sep, path = item.partition("=")
        if not sep:
            raise OnnxImportError(f"--input takes NAME=FILE.npy, got {item!r}")
        given[key] = np.load(path)
    with _progress(f"importing and compiling {args.model}"):
        sess = InferenceSession(args.model, dims, values=values)
    feed = _feed_for(sess, given, args.seed)
    outs = sess.run(None, feed)
    for info, out in zip(sess.get_outputs(), outs, strict=True):
        stats = ""
        if out.size and (out.dtype.kind in "fiub" or is_lowp_dtype(out.dtype)):
            f = out.astype(np.float64)
            stats = f" min {f.min():.6g} max {f.max():.6g} mean {f.mean():.6g}"
        print(f"{info.name}: {out.dtype}{list(out.shape)}{stats}")
    latency = _time(lambda: sess.run(None, feed), args.repeat)
    print(f"latency: {latency * 1e3:.3f} ms (median of {args.repeat})")
    if args.compare_ort:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.ort_threads
        try:
            peer = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
            ort_feed = dict(feed)
            ort_feed.update({k: v for k, v in values.items()})
            names = {i.name for i in peer.get_inputs()}
            ort_feed = {k: v for k, v in ort_feed.items() if k in names}
            want = peer.run(None, ort_feed)
        except Exception as exc:  # ORT lacks kernels for some types (bfloat16 Mul, float8 feeds...)
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
            print(f"onnxruntime cannot run this model, nothing to compare: {type(exc).__name__}: {first}")
            return 1
        worst = max(
            (float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0)
            for a, b in zip(outs, want, strict=True)
        )
        peer_latency = _time(lambda: peer.run(None, ort_feed), args.repeat)
        print(
            f"onnxruntime ({args.ort_threads or 'default'} threads): max abs difference {worst:.3g}, "
            f"latency {peer_latency * 1e3:.3f} ms, asyncjit/ORT {latency / peer_latency:.2f}x"
        )
    return 0


def add_commands(sub: Any) -> None:
    """Register ``info`` and ``run`` on the ``asyncjit`` command's subparsers."""
    info = sub.add_parser(
        "info", help="an ONNX model's inputs, outputs, ops and unsupported nodes (no compile)"
    )
    info.add_argument("model", metavar="MODEL.onnx")
    info.set_defaults(func=_info)
    run = sub.add_parser(
        "run", help="compile and run an ONNX model; --compare-ort checks it against ONNX Runtime"
    )
    run.add_argument("model", metavar="MODEL.onnx")
    run.add_argument("--dims", nargs="*", metavar="NAME=MIN:MAX", help="bounds of symbolic dims (or NAME=N)")
    run.add_argument("--value", nargs="*", metavar="NAME=V", help="inputs fixed to a scalar (e.g. sr=16000)")
    run.add_argument("--input", nargs="*", metavar="NAME=FILE.npy", help="input arrays (random for the rest)")
    run.add_argument("--repeat", type=int, default=20, help="timed runs (median reported)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--compare-ort", action="store_true", help="also run ONNX Runtime and compare")
    run.add_argument(
        "--ort-threads", type=int, default=1, help="ONNX Runtime intra-op threads (0: its default)"
    )
    run.set_defaults(func=_run)
