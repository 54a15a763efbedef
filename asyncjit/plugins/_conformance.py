"""``check_plugin_conformance``: the checks any plugin author can run against their plugin.

It checks the plugin's identity and protocol, then compiles small probe graphs (an elementwise
chain, a diamond with several outputs, a matmul, a reduction, a symbolic batch dim) with the
plugin as the only one chosen: whatever it claims must equal the numpy reference at several var
bindings, and a plan it dispatches must survive ``serialize``/``deserialize`` (its bytecode is
self-contained). Probes it claims nothing of are reported, not failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..compiler._partition import CompilerPlugin
from ..errors import JitError
from ..symbolic import Var
from ..symbolic import evaluate as evaluate_dim
from ..tensor import Tensor

__all__ = ["ConformanceError", "ConformanceReport", "check_plugin_conformance"]


class ConformanceError(JitError, AssertionError):
    """A plugin broke the plugin contract (the message says which check, on which probe)."""


@attrs.frozen
class ConformanceReport:
    """Which probes the plugin claimed part of (and passed) and which it left to the CPU."""

    plugin: str
    claimed: tuple[str, ...]
    unclaimed: tuple[str, ...]


Probe = Callable[[], tuple[list[Tensor], list[Tensor], list[dict[str, int]]]]


def _chain() -> tuple[list[Tensor], list[Tensor], list[dict[str, int]]]:
    x = Tensor.placeholder((4, 8), name="x")
    return [((x * 0.5).tanh() + x).relu().exp()], [x], [{}]


def _diamond() -> tuple[list[Tensor], list[Tensor], list[dict[str, int]]]:
    x = Tensor.placeholder((3, 5), name="x")
    a = x.sigmoid()
    b, c = a * x, a + x
    return [b - c, b, c.abs()], [x], [{}]


def _matmul() -> tuple[list[Tensor], list[Tensor], list[dict[str, int]]]:
    t = Var("t", 1, 6)
    x = Tensor.placeholder((t, 8), name="x")
    w = Tensor.const(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    return [(x @ w).tanh()], [x], [{"t": 1}, {"t": 6}, {"t": 3}]


def _reduce() -> tuple[list[Tensor], list[Tensor], list[dict[str, int]]]:
    t = Var("t", 1, 5)
    x = Tensor.placeholder((t, 7), name="x")
    return [x.exp().sum(axis=1, keepdims=True), x.max(axis=1, keepdims=True)], [x], [{"t": 1}, {"t": 5}]


PROBES: dict[str, Probe] = {"chain": _chain, "diamond": _diamond, "matmul": _matmul, "reduce": _reduce}


def _fail(plugin: str, probe: str, what: str) -> ConformanceError:
    return ConformanceError(f"plugin {plugin!r}, probe {probe!r}: {what}")


def _identity(plugin: Any) -> None:
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not name:
        raise ConformanceError(f"{plugin!r}: name must be a non-empty str")
    if not isinstance(plugin, CompilerPlugin) or not (
        hasattr(plugin, "supports") or hasattr(plugin, "partition")
    ):
        raise ConformanceError(f"plugin {name!r}: needs compile() and supports() or partition()")
    for attr in ("manufacturer", "version"):
        if not isinstance(getattr(plugin, attr, ""), str):
            raise ConformanceError(f"plugin {name!r}: {attr} must be a str")
    hw = getattr(plugin, "hardware", ())
    if not all(isinstance(h, str) for h in hw):
        raise ConformanceError(f"plugin {name!r}: hardware must be names (str)")


def check_plugin_conformance(
    plugin: CompilerPlugin, *, rtol: float = 1e-5, atol: float = 1e-6
) -> ConformanceReport:
    """Run the conformance checks on ``plugin``.

    Raises:
        ConformanceError: the first broken check, naming the probe.
    """
    from ..compiler import compile, deserialize
    from ..reference import evaluate

    _identity(plugin)
    claimed, unclaimed = [], []
    rng = np.random.default_rng(0)
    for probe_name, probe in PROBES.items():
        outs, ins, bindings = probe()
        try:
            exe = compile(outs, ins, plugins=[plugin], name=f"conformance_{probe_name}")
        except JitError as exc:
            raise _fail(plugin.name, probe_name, f"compile failed: {exc}") from exc
        if not any("_plugin_" in k for k in exe.kernel_names):
            unclaimed.append(probe_name)
            continue
        claimed.append(probe_name)
        again = deserialize(exe.serialize(), plugins=[plugin]) if exe.dispatch else exe
        for values in bindings:
            feed = [
                rng.standard_normal([evaluate_dim(d, values) for d in i.shape]).astype(i.dtype.np)
                for i in ins
            ]
            want = evaluate(outs, dict(zip(ins, feed, strict=True)), values)
            for label, runner in (("run", exe), ("deserialized run", again)):
                got = runner.run(feed, values)
                for k, (g, w) in enumerate(zip(got, want, strict=True)):
                    if g.shape != w.shape:
                        raise _fail(
                            plugin.name, probe_name, f"{label}: output {k} has shape {g.shape}, not {w.shape}"
                        )
                    if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
                        err = float(np.max(np.abs(g - w)))
                        raise _fail(
                            plugin.name, probe_name, f"{label}: output {k} at {values} is off by up to {err}"
                        )
    return ConformanceReport(plugin.name, tuple(claimed), tuple(unclaimed))
