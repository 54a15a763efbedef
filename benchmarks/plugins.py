"""Compiler-plugin benchmarks: dispatch overhead per plugin partition call, bundle load vs cold compile.

1. Dispatch overhead: a plan whose one partition runs in a plugin's dispatch runtime, replayed
   through its launcher, against the plugin's own ``invoke`` called directly on the same arrays
   (the difference is what asyncjit adds per partition call; goal < 2 us). For a no-op-sized
   plugin (numpy) and for ``onnxruntime`` (ORT session run).
2. Bundle load vs cold compile: the Silero VAD step graph compiled from scratch (no caches) against
   ``load_bundle`` of a bundle made from the same plan (goal: load < 5% of the cold compile).

Run: ``.venv/bin/python benchmarks/plugins.py``. Prints figures and ratios measured in this run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# benchmarks/silero_vad.py would shadow the silero_vad package whose weights the VAD loads
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["ASYNCJIT_CACHE_DIR"] = "off"

import numpy as np  # noqa: E402

from asyncjit import Tensor, Var  # noqa: E402
from asyncjit.compiler import CompiledResult, _api, _cache, compile  # noqa: E402
from asyncjit.compiler._bundle import build_bundle, load_bundle  # noqa: E402
from asyncjit.models import silero_vad as sv  # noqa: E402
from asyncjit.plugins import Plugin, get_plugin  # noqa: E402


def best(fn: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """Best-of-``repeat`` seconds per call of ``fn`` (``number`` calls per sample)."""
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        out = min(out, (time.perf_counter() - t0) / number)
    return out


class Copy(Plugin):
    """Claims relu and runs it with numpy into the output (the smallest real dispatch runtime)."""

    name = "bench-numpy"
    ops = frozenset({"relu"})

    def compile(self, partitions: Sequence[Any]) -> CompiledResult:
        return CompiledResult(b"", [str(i) for i in range(len(partitions))])

    def load(self, bytecode: bytes) -> None:
        return None

    def invoke(self, handle: Any, entry: str, inputs: Any, outputs: Any, vars: Any) -> None:
        np.maximum(inputs[0], 0, out=outputs[0])


def dispatch_overhead(plugin: Any, label: str) -> None:
    t = Var("t", 1, 64)
    x = Tensor.placeholder((t, 16), name="x")
    exe = compile(x.relu() if label == "numpy" else x.tanh(), [x], plugins=[plugin], name=f"bench_{label}")
    assert exe.dispatch and len(exe.kernel_names) == 1, exe.kernel_names
    xv = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    out = np.empty_like(xv)
    launcher = exe.launcher()
    addrs, values = [xv.ctypes.data, out.ctypes.data], (8,)
    launcher(addrs, values)
    step = launcher._steps[0][1]  # type: ignore[attr-defined]
    handle, entry = step.handle, step.entry
    ins, outs, var_map = step.ins, step.outs, step.vars
    number = 2000

    def direct() -> None:
        plugin.invoke(handle, entry, ins, outs, var_map)

    def through_plan() -> None:
        launcher(addrs, values)

    d = min(best(direct, number=number) for _ in range(3))
    p = min(best(through_plan, number=number) for _ in range(3))
    print(
        f"dispatch {label:12s}: plugin invoke {d * 1e6:8.2f} us, through the plan {p * 1e6:8.2f} us, "
        f"overhead {(p - d) * 1e6:6.2f} us per partition call (goal < 2 us), ratio {p / d:.3f}"
    )


def _cold_caches() -> None:
    _cache._LOADED.clear()  # the in-process object cache: a cold compile must redo codegen + LLVM
    _api._PLANS.clear()


def bundle_vs_cold() -> None:
    w = sv.load_weights(16000)
    b = Var("b", 1, 16)
    chunk = Tensor.placeholder([b, w.input_samples], name="chunk")
    h = Tensor.placeholder([b, sv.HIDDEN], name="h")
    c = Tensor.placeholder([b, sv.HIDDEN], name="c")
    outs = list(sv.build_step(w, chunk, h, c))
    colds, loads = [], []
    data = b""
    for _ in range(3):
        _cold_caches()
        t0 = time.perf_counter()
        exe = compile(outs, [chunk, h, c], name="vad", plugins=[])
        colds.append(time.perf_counter() - t0)
        data = build_bundle(exe, ["native", "x86-64-v2"])
        _cold_caches()
        t0 = time.perf_counter()
        loaded = load_bundle(data)
        loads.append(time.perf_counter() - t0)
        assert loaded.chosen_payload not in ("", "on-device")
    cold, load = min(colds), min(loads)
    print(
        f"silero VAD step: cold compile {cold * 1e3:8.1f} ms, bundle load {load * 1e3:6.2f} ms "
        f"({len(data) / 1e6:.2f} MB), load/cold = {load / cold:.2%} (goal < 5%)"
    )


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no options: --help prints the docstring
    print(f"load: {os.getloadavg()}")
    dispatch_overhead(Copy(), "numpy")
    dispatch_overhead(get_plugin("onnxruntime", {"claim_all": True}), "onnxruntime")
    bundle_vs_cold()


if __name__ == "__main__":
    main()
