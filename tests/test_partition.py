"""The partition stage: plugins claim nodes, the CPU compiler takes the rest, bad claims are rejected."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from asyncjit import Tensor, Var
from asyncjit.compiler import (
    CompilerPlugin,
    PluginKernel,
    Subgraph,
    compile,
    register_plugin,
    unregister_plugin,
)
from asyncjit.errors import CompileError
from asyncjit.passes import Graph

# relu + 1000 over numel = vars[0] * 4 floats: distinguishable from the CPU compiler's relu
RELU_IR = """
define void @{sym}(ptr noalias %out, ptr noalias %x, ptr %vars) {{
entry:
  %t = load i64, ptr %vars
  %n = mul i64 %t, 4
  %has = icmp sgt i64 %n, 0
  br i1 %has, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px
  %r = call float @llvm.maxnum.f32(float %v, float 0.0)
  %s = fadd float %r, 1000.0
  %po = getelementptr float, ptr %out, i64 %i
  store float %s, ptr %po
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
declare float @llvm.maxnum.f32(float, float)
"""


class ReluPlugin:
    """Claims every float32 ``relu`` and compiles it itself."""

    name = "test-relu"

    def __init__(self, claim: str = "relu") -> None:
        self.claim = claim
        self.compiled: list[Subgraph] = []

    def partition(self, graph: Graph) -> Iterable[frozenset[int]]:
        return [frozenset({n.id}) for n in graph.nodes if n.op == self.claim]

    def compile(self, subgraph: Subgraph) -> PluginKernel:
        self.compiled.append(subgraph)
        sym = f"test_relu_{subgraph.output.id}"
        return PluginKernel(sym, RELU_IR.format(sym=sym))


@pytest.fixture
def plugin() -> Iterator[ReluPlugin]:
    p = ReluPlugin()
    register_plugin(p)
    yield p
    unregister_plugin(p.name)


def test_plugin_kernel_runs_inside_the_plan(plugin: ReluPlugin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claimed relu runs the plugin's code; the surrounding ops fall back to the CPU compiler."""
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")
    assert isinstance(plugin, CompilerPlugin)
    t = Var("t", 1, 16)
    x = Tensor.placeholder((t, 4), name="x")
    y = (x * 2.0).relu() - 1.0
    exe = compile(y, [x])
    assert len(plugin.compiled) == 1
    assert any("plugin" in k for k in exe.kernel_names)
    xv = np.array([[-1, 0.5, 2, -3]] * 3, np.float32)
    (got,) = exe.run([xv], {"t": 3})
    np.testing.assert_allclose(got, np.maximum(xv * 2, 0) + 1000 - 1)


def test_plugin_claiming_placeholders_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed claim is a CompileError naming the plugin; nothing is compiled."""
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")
    bad = ReluPlugin(claim="placeholder")
    register_plugin(bad)
    try:
        x = Tensor.placeholder((4,), name="x")
        with pytest.raises(CompileError, match="test-relu"):
            compile((x + 1.0).relu(), [x])
    finally:
        unregister_plugin(bad.name)


def test_register_rejects_non_plugins() -> None:
    """Objects without the protocol are refused at registration."""
    with pytest.raises(TypeError):
        register_plugin(object())  # type: ignore[arg-type]
