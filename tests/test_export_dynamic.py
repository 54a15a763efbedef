"""Dynamic StableHLO exports run on XLA: one module with a symbolic dim, refined by StableHLO's
own shape refinement (jaxlib's ``refine_polymorphic_shapes``, the pass JAX runs on its
shape-polymorphic exports) to each argument shape, then compiled and run by XLA at several
sizes, equal to asyncjit's plan at the same sizes.

This checks what only a dynamic module has: ``get_dimension_size`` of the arguments,
``dynamic_broadcast_in_dim``, ``dynamic_reshape`` and ``dynamic_iota`` over a var. The argument
types are made static the way StableHLO's ``refine-arguments`` pass does it (each argument
wrapped back to its dynamic type by ``stablehlo.shape_refinement_operand_wrapper``).
StableHLO's refinement does not take ``#stablehlo.bounds`` types, so the dims here are
unbounded; a bounded export's text is the same but for those annotations (``test_export.py``
parses one).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import multiprocessing
import re
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.compiler import compile
from asyncjit.export import stablehlo
from asyncjit.passes import Graph

if importlib.util.find_spec("jax") is None:
    pytest.skip("the jax extra (jaxlib's XLA) runs the exported modules", allow_module_level=True)

T = Var("t", 1, None)
RNG = np.random.default_rng(5)


def static_arguments(text: str, shapes: list[tuple[int, ...]]) -> str:
    """``text`` with ``@main``'s arguments of the given static shapes, each wrapped back to its
    dynamic type by ``stablehlo.shape_refinement_operand_wrapper`` (StableHLO's refine-arguments)."""
    start = text.index("func.func public @main(") + len("func.func public @main(")
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    signature = text[start : end - 1]
    args: list[tuple[str, str]] = []
    for m in re.finditer(r"(%arg\d+): tensor<", signature):
        j, nest = m.end(), 1
        while nest:
            nest += {"<": 1, ">": -1}.get(signature[j], 0)
            j += 1
        args.append((m.group(1), signature[m.end() - len("tensor<") : j]))
    assert len(args) == len(shapes)
    new_args, wraps = [], []
    for (name, ty), shape in zip(args, shapes, strict=True):
        elem = re.match(r"tensor<(?:[?\d]+x)*([a-z]+\d+)", ty)
        assert elem is not None, ty
        static = "tensor<" + "".join(f"{d}x" for d in shape) + elem.group(1) + ">"
        shape_ty = f"tensor<{len(shape)}xi64>"
        new_args.append(f"{name}_static: {static}")
        wraps.append(
            f"    {name}_shape = stablehlo.constant dense<[{', '.join(map(str, shape))}]> : {shape_ty}\n"
            f"    {name} = stablehlo.custom_call @stablehlo.shape_refinement_operand_wrapper("
            f"{name}_static, {name}_shape) {{indices_of_shape_operands = dense<1> : tensor<1xi64>}} "
            f": ({static}, {shape_ty}) -> {ty}\n"
        )
    out = text[:start] + ", ".join(new_args) + text[end - 1 :]
    body = out.index("{", out.index("func.func public @main")) + 1
    return out[:body] + "\n" + "".join(wraps) + out[body:]


def _refine_and_run(text: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """In the worker process: parse, refine the shapes with StableHLO's pass (jaxlib), compile
    with XLA's CPU client, run once."""
    import jax
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir

    jax.config.update("jax_enable_x64", True)  # int64 arguments stay int64
    cpu = jax.devices("cpu")[0]
    with mlir.make_ir_context():
        module = mlir.refine_polymorphic_shapes(ir.Module.parse(text))
        with module.context:
            exe = cpu.client.compile_and_load(module, xc.DeviceList((cpu,)), xc.CompileOptions())
    results = exe.execute_sharded([jax.device_put(a, cpu) for a in arrays])
    return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


@pytest.fixture(scope="module")
def xla() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One spawned process runs XLA (JAX's threads never start in the test process)."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        yield pool


W = RNG.standard_normal((6, 5)).astype(np.float32)

# (name, input shapes over t, dtype, function): every op that builds a shape from a var
CASES: list[tuple[str, list[tuple[object, ...]], type, Callable[..., Tensor]]] = [
    ("broadcast_const", [(T, 6)], np.float32, lambda x: (x + 1.5).tanh() * 2),
    ("reduce", [(T, 6)], np.float32, lambda x: x.sum(1) + x.max(1)),
    ("iota", [(T,)], np.float32, lambda x: x + Tensor.arange(T, asyncjit.float32)),
    ("matmul", [(T, 6)], np.float32, lambda x: (x @ Tensor.const(W)).sigmoid()),
    ("reshape", [(T, 6)], np.float32, lambda x: x.reshape(T * 2, 3) * 3),
    ("two_args", [(T, 6), (T, 6)], np.float32, lambda x, y: (x > y).where(x, y).mean(0)),
    ("int", [(T, 4)], np.int32, lambda x: (x * x - x).sum(1)),
    ("keepdims", [(T, 6)], np.float32, lambda x: x - x.mean(1, keepdims=True)),
    ("dim_value", [(T, 3)], np.int32, lambda x: x * (T * 3 - 1) + T // 2 - T % 3),
    ("dim_int64", [(T,)], np.int64, lambda x: x + Tensor.from_dim(T * T * 70000 * 70000, asyncjit.int64)),
    ("iota_expr", [(T,)], np.float32, lambda x: x.reshape(1, T) + Tensor.arange(2 * T - T, asyncjit.float32)),
]


@pytest.mark.parametrize(("name", "shapes", "dtype", "fn"), CASES, ids=[c[0] for c in CASES])
def test_one_dynamic_module_runs_on_xla_at_every_size(
    xla: concurrent.futures.ProcessPoolExecutor,
    name: str,
    shapes: list[tuple[object, ...]],
    dtype: type,
    fn: Callable[..., Tensor],
) -> None:
    ins = [Tensor.placeholder(s, dtype, name=f"in{k}") for k, s in enumerate(shapes)]
    out = fn(*ins)
    text = stablehlo(Graph.of([out.node], [i.node for i in ins]))
    assert "?" in text and "bounds" not in text
    plan = compile([out], ins)
    for t in (1, 3, 17):
        concrete = [tuple(t if d is T else d for d in s) for s in shapes]
        ints = np.dtype(dtype).kind == "i"
        feed = [(RNG.integers(-4, 5, c) if ints else RNG.standard_normal(c)).astype(dtype) for c in concrete]
        (want,) = plan.run(feed, {"t": t})
        (got,) = xla.submit(_refine_and_run, static_arguments(text, concrete), feed).result(timeout=300)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, t)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=f"{name} at t={t}")
