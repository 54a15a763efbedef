"""The partition stage: plugins claim nodes, the framework groups them, the CPU compiler takes the rest.

Two test plugins cover both ways a plugin's code runs: ``ElementwiseIR`` compiles partitions of
elementwise float ops to LLVM IR linked into the plan; ``NumpyDispatch`` compiles them to an
opaque blob that its dispatch runtime runs with the op registry's numpy semantics.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
from fuzzing import compare, perturbed_runs, tolerance_ulps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llvmlite import ir
from strategies import assert_outputs_match, graph_cases
from strategies_case import GraphCase

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import (
    CompiledResult,
    CompilerPlugin,
    PluginKernel,
    Subgraph,
    compile,
    partition,
    register_plugin,
    unregister_plugin,
)
from asyncjit.errors import CompileError, KernelRuntimeError
from asyncjit.graph import OPS, Node
from asyncjit.passes import Graph
from asyncjit.plugins import Plugin


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")


_IR_OPS = {"relu", "neg", "abs", "add", "sub", "mul"}


def _emit(b: ir.IRBuilder, op: str, args: list[ir.Value]) -> ir.Value:
    f32 = ir.FloatType()
    if op == "relu":
        cmp = b.fcmp_ordered(">", args[0], ir.Constant(f32, 0.0))
        return b.select(cmp, args[0], ir.Constant(f32, 0.0))
    if op == "neg":
        return b.fneg(args[0])
    if op == "abs":
        return b.select(b.fcmp_ordered("<", args[0], ir.Constant(f32, 0.0)), b.fneg(args[0]), args[0])
    return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul}[op](args[0], args[1])


class ElementwiseIR(Plugin):
    """Compiles partitions of static-shape float32 elementwise ops to one LLVM loop each."""

    name = "test-ir"
    ops = frozenset(_IR_OPS)

    def can_run(self, node: Node) -> str | None:
        if node.op not in self.ops or node.dtype.name != "float32":
            return "not a float32 op of this plugin"
        if not all(isinstance(d, int) for d in node.shape):
            return "symbolic shape"
        return None

    def compile(self, partitions: Sequence[Subgraph]) -> list[PluginKernel]:
        return [self._one(i, sub) for i, sub in enumerate(partitions)]

    def _one(self, index: int, sub: Subgraph) -> PluginKernel:
        f32, i64, ptr = ir.FloatType(), ir.IntType(64), ir.PointerType()
        module = ir.Module(name=f"p{index}")
        sym = f"test_ir_{index}_{sub.nodes[0].id}"
        fn = ir.Function(
            module, ir.FunctionType(ir.VoidType(), [ptr] * (len(sub.outputs) + len(sub.inputs) + 1)), sym
        )
        numel = int(np.prod(sub.outputs[0].shape))
        entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(i64)
        i.add_incoming(ir.Constant(i64, 0), entry)
        outs = fn.args[: len(sub.outputs)]
        ins = fn.args[len(sub.outputs) : len(sub.outputs) + len(sub.inputs)]
        value: dict[int, ir.Value] = {}
        for n, p in zip(sub.inputs, ins, strict=True):
            value[n.id] = b.load(b.gep(p, [i], source_etype=f32), typ=f32)
        for n in sub.nodes:
            value[n.id] = _emit(b, n.op, [value[x.id] for x in n.inputs])
        for n, p in zip(sub.outputs, outs, strict=True):
            b.store(value[n.id], b.gep(p, [i], source_etype=f32))
        nxt = b.add(i, ir.Constant(i64, 1))
        i.add_incoming(nxt, loop)
        b.cbranch(b.icmp_signed("<", nxt, ir.Constant(i64, numel)), loop, done)
        b.position_at_end(done)
        b.ret_void()
        return PluginKernel(sym, str(module))


class NumpyDispatch(Plugin):
    """Compiles partitions to a JSON program run by its dispatch runtime with numpy."""

    name = "test-numpy"
    ops = frozenset(OPS) - {"placeholder", "const"}

    def __init__(self, ops: Iterable[str] | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.allowed = frozenset(ops) if ops is not None else self.ops
        self.programs: dict[str, Subgraph] = {}
        self.invocations = 0

    def can_run(self, node: Node) -> str | None:
        return None if node.op in self.allowed else f"{node.op} not allowed"

    def compile(self, partitions: Sequence[Subgraph]) -> CompiledResult:
        entries = []
        for sub in partitions:
            entry = f"p{len(self.programs)}"
            self.programs[entry] = sub
            entries.append(entry)
        return CompiledResult(json.dumps(entries).encode(), entries)

    def load(self, bytecode: bytes) -> dict[str, Subgraph]:
        return {e: self.programs[e] for e in json.loads(bytecode)}

    def invoke(
        self,
        handle: dict[str, Subgraph],
        entry: str,
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        vars: dict[str, int],
    ) -> None:
        self.invocations += 1
        sub = handle[entry]
        values = {n.id: a for n, a in zip(sub.inputs, inputs, strict=True)}
        for n in sub.nodes:
            values[n.id] = OPS[n.op].reference(n, [values[i.id] for i in n.inputs], vars)
        for n, out in zip(sub.outputs, outputs, strict=True):
            np.copyto(out, values[n.id])


def _shapes() -> dict[str, Callable[[Tensor], list[Tensor]]]:
    def chain(x: Tensor) -> list[Tensor]:
        return [(x.relu().relu() - x) * x]

    def mul_relu(x: Tensor) -> list[Tensor]:
        return [(x * x).relu() + x]

    def diamond(x: Tensor) -> list[Tensor]:
        a = x.relu()
        return [(-a + a.abs()) * x]

    def fan_out(x: Tensor) -> list[Tensor]:
        a = (x * x).relu()
        return [a.abs() + x, -a - x, a * x]

    def touching_io(x: Tensor) -> list[Tensor]:
        a = x.relu()
        b = -a
        return [b, a, b]  # the partition starts at the placeholder and ends at graph outputs

    return {
        "chain": chain,
        "mul_relu": mul_relu,
        "diamond": diamond,
        "fan_out": fan_out,
        "touching_io": touching_io,
    }


@pytest.mark.parametrize("shape", list(_shapes()))
@pytest.mark.parametrize("plugin_cls", [ElementwiseIR, NumpyDispatch])
def test_multi_op_claims_of_every_shape(shape: str, plugin_cls: type[Plugin]) -> None:
    """Multi-op, multi-output partitions compile and equal the reference, linked or dispatched."""
    plugin = plugin_cls() if plugin_cls is ElementwiseIR else NumpyDispatch(ops=_IR_OPS)
    x = Tensor.placeholder((3, 4), name="x")
    outs = _shapes()[shape](x)
    exe = compile(outs, [x], plugins=[plugin])
    assert any("_plugin_test_" in k for k in exe.kernel_names), exe.kernel_names
    xv = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    got = exe.run([xv])
    want = reference.evaluate(outs, {x: xv})
    assert_outputs_match(got, want, shape)


def test_explicit_claims_still_allowed_and_checked() -> None:
    """A plugin may claim node sets itself; malformed or cyclic claims name the plugin."""
    x = Tensor.placeholder((4,), name="x")
    a = x.relu()
    b = -a
    y = b * x
    graph = Graph.of([y.node], [x.node])

    class Claims(NumpyDispatch):
        name = "test-claims"

        def __init__(self, claims: list[set[int]]) -> None:
            super().__init__(ops=())
            self.claims = claims

        def partition(self, graph: Graph) -> list[set[int]]:
            return self.claims

    ok = Claims([{a.node.id, b.node.id}])
    result = partition(graph, [ok])
    assert [set(n.id for n in s.nodes) for _, s in result.partitions] == [{a.node.id, b.node.id}]
    exe = compile(y, [x], plugins=[ok])
    xv = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_allclose(exe.run([xv])[0], -np.maximum(xv, 0) * xv)
    for bad, match in [
        ([{x.node.id}], "placeholders"),
        ([{a.node.id, y.node.id}], "cycle"),  # a -> b (outside) -> y needs b through the CPU
        ([{a.node.id}, {a.node.id, b.node.id}], "another claim"),
        ([{10**9}], "unknown"),
    ]:
        with pytest.raises(CompileError, match=match):
            partition(graph, [Claims(bad)])


def test_fallbacks_have_reasons() -> None:
    x = Tensor.placeholder((4,), name="x")
    y = (x.relu() + 1.0).exp()
    result = partition(Graph.of([y.node], [x.node]), [NumpyDispatch(ops={"relu"})])
    reasons = {f.node.op: f.reason for f in result.fallbacks}
    assert "exp not allowed" in reasons["exp"]
    assert "never claimed" in reasons["placeholder"]


def test_registered_plugin_and_protocol() -> None:
    """The registry still feeds compiles that choose no plugins; non-plugins are refused."""
    p = NumpyDispatch(ops={"relu"})
    assert isinstance(p, CompilerPlugin)
    register_plugin(p)
    try:
        x = Tensor.placeholder((4,), name="x")
        exe = compile((x * 2.0).relu() - 1.0, [x])
        assert p.invocations == 0
        exe.run([np.ones(4, np.float32)])
        assert p.invocations == 1
    finally:
        unregister_plugin(p.name)
    with pytest.raises(TypeError):
        register_plugin(object())  # type: ignore[arg-type]


def test_plugin_options_are_in_the_plan_key() -> None:
    """Two compiles differing only in a plugin's options are two plans."""

    class Opt(NumpyDispatch):
        name = "test-opt"
        default_options: ClassVar[dict[str, Any]] = {"level": 1}

    x = Tensor.placeholder((4,), name="x")
    y = x.relu()
    e1 = compile(y, [x], plugins=[Opt(ops={"relu"}, level=1)])
    e2 = compile(y, [x], plugins=[Opt(ops={"relu"}, level=2)])
    e3 = compile(y, [x], plugins=[])
    assert e1 is not e2 and e3 is not e1 and not e3.dispatch


def test_dispatch_runs_with_symbolic_shapes_and_profiles_under_plugin_name() -> None:
    t = Var("t", 1, 16)
    x = Tensor.placeholder((t, 4), name="x")
    y = ((x * 2.0).relu().exp() - 1.0).sum(axis=1)
    plugin = NumpyDispatch(ops={"relu", "exp"})
    exe = compile(y, [x], plugins=[plugin])
    xv = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    (got,) = exe.run([xv], {"t": 5})
    np.testing.assert_allclose(got, (np.exp(np.maximum(xv * 2, 0)) - 1).sum(1), rtol=1e-5)
    _, records = exe.profile([xv], {"t": 5})
    names = [r[0] for r in records]
    assert any(n.endswith("_plugin_test_numpy") for n in names), names
    assert all(r[1] >= 0 for r in records)


# ---------------------------------------------------------------------------------------------
# properties of the framework's partitioning on random graphs


def _quotient(graph: Graph, parts: Sequence[Subgraph]) -> dict[Any, set[Any]]:
    where: dict[int, Any] = {n.id: ("node", n.id) for n in graph.nodes}
    for k, sub in enumerate(parts):
        for n in sub.nodes:
            where[n.id] = ("part", k)
    edges: dict[Any, set[Any]] = {v: set() for v in where.values()}
    for n in graph.nodes:
        for i in n.inputs:
            if where[i.id] != where[n.id]:
                edges[where[i.id]].add(where[n.id])
    return edges


def _acyclic(edges: dict[Any, set[Any]]) -> bool:
    state: dict[Any, int] = {}

    def visit(v: Any) -> bool:
        stack = [(v, iter(edges[v]))]
        state[v] = 1
        while stack:
            u, it = stack[-1]
            w = next(it, None)
            if w is None:
                state[u] = 2
                stack.pop()
            elif state.get(w) == 1:
                return False
            elif w not in state:
                state[w] = 1
                stack.append((w, iter(edges[w])))
        return True

    return all(visit(v) for v in list(edges) if v not in state)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(graph_cases(max_steps=10), st.sets(st.sampled_from(sorted(OPS)), max_size=12), st.integers(0, 2**31))
def test_partition_properties(case: GraphCase, allowed: set[str], seed: int) -> None:
    """Every node in exactly one place; the quotient is acyclic; no two adjacent partitions of
    one plugin merge without a cycle; and the mixed plan equals the reference."""
    graph = Graph.of([t.node for t in case.outputs], [p.node for p in case.placeholders])
    rng = np.random.default_rng(seed)
    half = {op for op in allowed if rng.random() < 0.5}
    p1, p2 = NumpyDispatch(ops=half), NumpyDispatch(ops=allowed)
    p2.name = "test-numpy-2"  # type: ignore[misc]
    result = partition(graph, [p1, p2])
    seen: dict[int, int] = {}
    for k, (_, sub) in enumerate(result.partitions):
        for n in sub.nodes:
            assert n.id not in seen
            seen[n.id] = k
    assert set(seen).isdisjoint(f.node.id for f in result.fallbacks)
    assert set(seen) | {f.node.id for f in result.fallbacks} == {n.id for n in graph.nodes}
    subs = [s for _, s in result.partitions]
    assert _acyclic(_quotient(graph, subs))
    for i, (pa, a) in enumerate(result.partitions):
        for j, (pb, b) in enumerate(result.partitions[:i]):
            if pa is not pb:
                continue
            ids_a, ids_b = {n.id for n in a.nodes}, {n.id for n in b.nodes}
            adjacent = any(x.id in ids_b for n in a.nodes for x in n.inputs) or any(
                x.id in ids_a for n in b.nodes for x in n.inputs
            )
            if adjacent:
                merged = Subgraph(a.inputs, a.outputs, (*a.nodes, *b.nodes), a.vars)
                rest = [s for k, s in enumerate(subs) if k not in (i, j)]
                assert not _acyclic(_quotient(graph, [*rest, merged])), "two partitions could merge"
    exe = compile(case.outputs, case.placeholders, plugins=[p1, p2])
    bindings = {v.name: case.bindings[v.name] for v in exe.signature.vars}
    feed = case.make_inputs({**case.bindings, **bindings})
    got = exe.run([feed[p] for p in case.placeholders], bindings)
    used = {v.name for v in case.graph_vars}
    ref_bindings = {k: v for k, v in case.bindings.items() if k in used}
    want = reference.evaluate(case.outputs, feed, ref_bindings)
    outputs = [t.node for t in case.outputs]
    by_id = {p.node.id: feed[p] for p in case.placeholders}
    perturbed = perturbed_runs(outputs, by_id, ref_bindings, case.seed)
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, case.describe()
        bad, _ = compare(g, w, [p[j] for p in perturbed], tolerance_ulps(outputs))
        assert not bad.any(), f"output {j}: got {g[bad][:3]} want {w[bad][:3]}\n{case.describe()}"


def test_segmented_launcher_sees_addresses_changed_in_place() -> None:
    """Dispatch views follow the addresses even when a caller reuses and mutates its list."""
    x = Tensor.placeholder((4,), name="x")
    exe = compile((x - 1.0).relu() * 2.0, [x], plugins=[NumpyDispatch(ops={"relu"})])
    launcher = exe.launcher()
    xv = np.arange(4, dtype=np.float32)
    out1, out2 = np.zeros(4, np.float32), np.zeros(4, np.float32)
    addrs = [xv.ctypes.data, out1.ctypes.data]
    launcher(addrs, ())
    addrs[1] = out2.ctypes.data
    xv += 1
    launcher(addrs, ())
    np.testing.assert_array_equal(out1, np.maximum(np.arange(4) - 1, 0) * 2)
    np.testing.assert_array_equal(out2, np.maximum(np.arange(4), 0) * 2)


def test_a_failing_dispatch_runtime_is_a_kernel_runtime_error() -> None:
    class Broken(NumpyDispatch):
        name = "test-broken"

        def invoke(self, *args: Any) -> None:
            raise ValueError("device lost")

    x = Tensor.placeholder((4,), name="x")
    exe = compile(x.relu() + 1.0, [x], plugins=[Broken(ops={"relu"})])
    with pytest.raises(KernelRuntimeError, match=r"test-broken.*ValueError: device lost"):
        exe.run([np.zeros(4, np.float32)])
