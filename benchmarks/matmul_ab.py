"""Two builds of the float32 matmul kernel in one process, interleaved, against numpy.

On a machine whose speed drifts between runs, two versions of a kernel can only be compared
side by side: this loads the ``emit_matmul`` module of two source trees (as IR text) into one
process and times them in turns, one thread, best of ``ROUNDS`` interleaved rounds::

    # in each tree (e.g. a git worktree of the older commit), write its kernel module:
    .venv/bin/python benchmarks/matmul_ab.py --dump /tmp/old.ll
    .venv/bin/python benchmarks/matmul_ab.py --dump /tmp/new.ll
    # then compare (shapes as MxNxK; default: the Silero step's and CNN layers' shapes):
    .venv/bin/python benchmarks/matmul_ab.py /tmp/old.ll /tmp/new.ll [512x129x129 ...]
    # a conv's product: B (the weight) in the matmul's panels, read cold as inside a model
    .venv/bin/python benchmarks/matmul_ab.py --dump /tmp/new.ll --panels
    .venv/bin/python benchmarks/matmul_ab.py /tmp/old.ll /tmp/new.ll --panels --cold 49x2048x512

Prints GFLOP/s of each build and of numpy (``OPENBLAS_NUM_THREADS=1``, set before numpy loads).
``--panels`` dumps and times the kernel on a B laid out once in panels (``emit_matmul(b_panels
=True)``, the conv weight's layout; numpy then multiplies the logical B). ``--cold`` writes 96 MB
elsewhere before each timed call, so that A, B and C come from memory as a layer's weight does
inside a model (each build's fastest of ``COLD_CALLS`` such calls, the builds in turn).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import math
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import MODEL_MATMULS, add_entry, caller, interleaved_best, load_builds

ROUNDS = 15
COLD_CALLS = 30
SHAPES = [*MODEL_MATMULS, (512, 512, 512), (2048, 256, 256)]


def dump(path: str, panels: bool) -> None:
    from llvmlite import ir

    from asyncjit.codegen._matmul import emit_matmul

    module = ir.Module("matmul_ab")
    add_entry(module, "mm", emit_matmul(module, "bench.matmul", b_panels=panels))
    with open(path, "w") as f:
        f.write(str(module))


def cold_best(fns: list[Callable[[], object]], calls: int) -> list[float]:
    """Each function's fastest call, every call after writing 96 MB elsewhere (caches flushed)."""
    junk = np.ones(96 << 20, np.uint8)
    best = [math.inf] * len(fns)
    for _ in range(calls):
        for i, fn in enumerate(fns):
            junk += 1
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def compare(files: list[str], shapes: list[tuple[int, int, int]], panels: bool, cold: bool) -> None:
    from asyncjit.codegen._matmul import matmul_scratch_bytes, panel_layout
    from asyncjit.codegen._matmul_tile import matmul_tiling

    objs = load_builds(files)
    rng = np.random.default_rng(0)
    names = " ".join(f"{os.path.basename(f):>10}" for f in files)
    how = f"fastest of {COLD_CALLS} cold calls in turn" if cold else f"best of {ROUNDS} interleaved rounds"
    how += ", B in panels" if panels else ""
    print(f"{'M x N x K':>16} {names}      numpy   (GFLOP/s, 1 thread, {how})")
    nr = matmul_tiling().nr
    for m, n, k in shapes:
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        # generous: the other tree may block the packed operands differently (more scratch)
        scratch = np.zeros(4 * matmul_scratch_bytes(m, n, k) + (8 << 20), np.uint8)
        wb = np.ascontiguousarray(panel_layout(w)) if panels else w
        args = [a.ctypes.data, wb.ctypes.data, c.ctypes.data, scratch.ctypes.data, 1, m, n, k]
        args += [0, k, 1, 0, nr, k, m * n, n] if panels else [0, k, 1, 0, n, 1, m * n, n]
        runs = [caller(o, "mm", args) for o in objs]
        for run in runs:
            c[:] = 0
            run()
            np.testing.assert_allclose(c, a @ w, rtol=1e-3, atol=1e-3 * math.sqrt(k))
        out = np.empty((m, n), np.float32)
        fns = [*runs, partial(np.matmul, a, w, out=out)]
        best = cold_best(fns, COLD_CALLS) if cold else interleaved_best(fns, ROUNDS, 0.02)
        gf = 2 * m * n * k / 1e9
        print(f"{m:>5} x {n:>4} x {k:>4} " + " ".join(f"{gf / t:10.1f}" for t in best))


def _shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(v) for v in text.split("x"))
    return m, n, k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "args",
        nargs="*",
        metavar="BUILD.ll | MxNxK",
        help="the builds' kernel modules to compare, and shapes as MxNxK (default: the Silero "
        "step's and CNN layers' shapes)",
    )
    ap.add_argument("--dump", metavar="FILE", help="write this tree's kernel module (IR text) to FILE")
    ap.add_argument("--panels", action="store_true", help="B laid out in the matmul's panels (a conv weight)")
    ap.add_argument("--cold", action="store_true", help="flush the caches (write 96 MB) before each call")
    args = ap.parse_intermixed_args()
    if args.dump:
        dump(args.dump, args.panels)
        return
    files = [a for a in args.args if a.endswith(".ll")]
    shapes: list[tuple[int, int, int]] = []
    for a in args.args:
        if not a.endswith(".ll"):
            try:
                shapes.append(_shape(a))
            except ValueError:
                ap.error(f"neither a .ll file nor a shape MxNxK: {a}")
    if not files:
        raise SystemExit(__doc__)
    compare(files, shapes or SHAPES, args.panels, args.cold)


if __name__ == "__main__":
    main()
