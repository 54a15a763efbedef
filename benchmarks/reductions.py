"""The price of float64 accumulation in float32 ``sum``: asyncjit as shipped (float64 accumulator,
rounded once: the reference semantics) against the same kernel with a float32 accumulator (what
it did before, patched in for this measurement only) and numpy's float32 pairwise ``np.sum``.

    python benchmarks/reductions.py

Prints best-of-N milliseconds and the ratios against the float32-accumulator kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("ASYNCJIT_CACHE_DIR", "off")
sys.path.insert(0, os.path.dirname(__file__))

from _machine import machine_line

import asyncjit.codegen._kernels as kernels
from asyncjit import Tensor
from asyncjit.compiler import compile

REPEATS = 50


def best_ms(fn: Callable[[], Any]) -> float:
    fn()
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def with_float32_accumulator(build: Callable[[], Any]) -> Any:
    """Compile with the float32 accumulator the kernels used before (restored afterwards)."""
    acc, wide = kernels._float_acc, kernels._wide
    kernels._float_acc = lambda node: kernels.F64 if node.dtype.itemsize == 8 else kernels.F32
    kernels._wide = lambda b, v: v
    try:
        return build()
    finally:
        kernels._float_acc, kernels._wide = acc, wide


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no options: --help prints the docstring
    print(machine_line())
    rng = np.random.default_rng(0)
    for shape, axis in (((512, 2048), -1), ((512, 2048), 0), ((64, 64, 256), 1)):
        a = rng.standard_normal(shape).astype(np.float32)

        def build(tag: str, shape: tuple[int, ...] = shape, axis: int = axis) -> Any:
            x = Tensor.placeholder(shape, "float32", name="x")
            return compile([x.sum(axis)], [x], name=f"sum_{tag}_{len(shape)}_{axis}")

        f64 = build("f64acc")
        f32 = with_float32_accumulator(lambda b=build: b("f32acc"))
        t64 = best_ms(lambda e=f64, a=a: e.run([a]))
        t32 = best_ms(lambda e=f32, a=a: e.run([a]))
        tnp = best_ms(lambda a=a, ax=axis: np.sum(a, axis=ax))
        print(
            f"sum{list(shape)} axis {axis}: float64 acc {t64:.3f} ms, float32 acc {t32:.3f} ms, "
            f"numpy {tnp:.3f} ms; float64/float32 {t64 / t32:.2f}x, float64/numpy {t64 / tnp:.2f}x"
        )


if __name__ == "__main__":
    main()
