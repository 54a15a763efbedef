"""Per-kernel profiling: ``CpuExecutable.profile`` and ``JitWrapper.execute_profiled``."""

from __future__ import annotations

import time

import attrs
import numpy as np
import pytest

import asyncjit
from asyncjit import InputSpec, JitWrapper, KernelProfile, Tensor, Var
from asyncjit.compiler import KernelInfo, compile, deserialize
from asyncjit.errors import VarBoundsError


@attrs.frozen
class Model:
    w: np.ndarray


class MlpJit(JitWrapper[Model]):
    """relu(x[:b] @ w) summed per row, then a sigmoid: matmul, reduce and fused loops."""

    x = asyncjit.Input()
    b = asyncjit.VarSpec(1, 16)

    def build(self, model: Model, x: Tensor, b: Var) -> Tensor:
        h = (x[:b] @ Tensor.const(model.w)).relu()
        return (h.sum(axis=1) * 0.5).sigmoid()


@pytest.fixture(scope="module")
def prepared() -> MlpJit:
    w = np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)
    jit = MlpJit(Model(w))
    jit.prepare(InputSpec.f32((16, 32)))
    jit.x_mut()[:] = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    return jit


def test_profile_names_match_the_plan_and_durations_are_positive(prepared: MlpJit) -> None:
    """One record per kernel, in plan order, each with a positive duration."""
    profile = prepared.execute_with_vars_profiled({"b": 5})
    exe = prepared._ready().loaded.executable
    assert [p.name for p in profile] == list(exe.kernel_names)
    assert all(isinstance(p, KernelProfile) and p.duration > 0 for p in profile)
    assert all(p.bytes > 0 for p in profile)
    assert any(p.flops > 0 for p in profile)


def test_profiled_output_equals_a_normal_execute(prepared: MlpJit) -> None:
    """The profiled replay is the real plan: output() afterwards equals a plain execute."""
    prepared.execute_with_vars({"b": 7})
    plain = prepared.output().to_numpy_blocking().copy()
    prepared.execute_with_vars_profiled({"b": 7})
    np.testing.assert_array_equal(prepared.output().to_numpy_blocking(), plain)
    assert prepared.output().shape == (7,)


def test_costs_follow_the_var_values(prepared: MlpJit) -> None:
    """bytes and flops are evaluated at the var values of the profiled run."""
    small = {p.name: p for p in prepared.execute_with_vars_profiled({"b": 2})}
    large = {p.name: p for p in prepared.execute_with_vars_profiled({"b": 16})}
    mm = next(n for n in small if "matmul" in n)
    assert small[mm].flops == 2 * 2 * 48 * 32
    assert large[mm].flops == 2 * 16 * 48 * 32
    assert large[mm].bytes > small[mm].bytes


def test_profile_sum_is_close_to_a_replay() -> None:
    """The kernel durations add up to about the wall time of one replay (no timing thresholds
    beyond a generous sanity bound: the sum is positive and below the timed call)."""
    x = Tensor.placeholder((64, 256), asyncjit.float32, name="x")
    w = Tensor.const(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))
    y = ((x @ w).relu() @ w).tanh()
    exe = compile(y, [x], name="profiled_mlp")
    xs = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    sums, walls = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        _, records = exe.profile([xs])
        walls.append(time.perf_counter() - t0)
        sums.append(sum(r[1] for r in records))
    assert 0 < min(sums) <= min(walls)
    (out,) = exe.run([xs])
    (prof_out,), _ = exe.profile([xs])
    np.testing.assert_array_equal(out, prof_out)


def test_prepared_kernels_are_cost_records(prepared: MlpJit) -> None:
    """prepared_kernels() returns KernelInfo records with names and upper-bound costs."""
    kernels = prepared.prepared_kernels()
    assert kernels and all(isinstance(k, KernelInfo) for k in kernels)
    exe = prepared._ready().loaded.executable
    assert [k.name for k in kernels] == list(exe.kernel_names)
    mm = next(k for k in kernels if k.kind == "matmul")
    assert mm.flops == 2 * 16 * 48 * 32


def test_profile_checks_vars_before_running(prepared: MlpJit) -> None:
    """Bounds are checked exactly as for execute: a bad var never reaches native code."""
    with pytest.raises(VarBoundsError):
        prepared.execute_with_vars_profiled({"b": 17})


def test_cost_records_survive_serialization() -> None:
    """serialize/deserialize keeps the kernel records, and the copy can be profiled."""
    b = Var("b", 1, 8)
    x = Tensor.placeholder((b, 16), asyncjit.float32, name="x")
    exe = compile((x * 2.0 + 1.0).exp(), [x], [b], name="profiled_ser")
    copy = deserialize(exe.serialize())
    assert copy.kernels == exe.kernels
    xs = np.ones((3, 16), np.float32)
    out, records = copy.profile([xs], {"b": 3})
    np.testing.assert_allclose(out[0], np.exp(3.0 * np.ones((3, 16))), rtol=1e-6)
    assert records[0][3] == exe.kernels[0].cost({"b": 3})[1]
