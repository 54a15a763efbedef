"""``JitWrapper``: declaration, var setters, prepare, execute, accessors and errors."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

import asyncjit
from asyncjit import InputSpec, JitWrapper, PrepareConfig, Tensor, Var
from asyncjit.errors import (
    BuildError,
    DuplicateInputBufferError,
    InputBufferNotFoundError,
    NotPreparedError,
    ShapeMismatchError,
    TensorError,
    VarBoundsError,
)


@attrs.frozen
class Config:
    max_len: int = 64


@attrs.frozen
class Model:
    config: Config = Config()
    gain: float = 2.0


class ScaleJit(JitWrapper[Model]):
    """x[:, :t] * gain + bias, summed over t: vars b (batch) and t (length)."""

    x = asyncjit.Input()
    bias = asyncjit.Input()
    b = asyncjit.VarSpec(1, 4)
    t = asyncjit.VarSpec(1, lambda model: model.config.max_len)

    def build(self, model: Model, x: Tensor, bias: Tensor, b: Var, t: Var) -> Tensor:
        return (x[:b, :t] * model.gain + bias[:b]).sum(axis=1)


@pytest.fixture(scope="module")
def prepared() -> ScaleJit:
    jit = ScaleJit(Model())
    jit.prepare(InputSpec.f32((4, 64)), InputSpec.f32((4, 1)))
    return jit


class TestDeclaration:
    def test_build_parameters_must_name_inputs_or_vars(self) -> None:
        """A build parameter that is neither an input nor a var fails at class definition."""
        with pytest.raises(TypeError, match="'y' names neither an input"):

            class Bad(JitWrapper[Model]):
                x = asyncjit.Input()

                def build(self, model: Model, x: Tensor, y: Tensor) -> Tensor:
                    return x

    def test_var_bounds_resolve_against_the_model(self) -> None:
        """Callable bounds are evaluated at construction into Vars."""
        jit = ScaleJit(Model(Config(max_len=10)))
        assert jit.vars["t"] == Var("t", 1, 10)
        assert jit.vars["b"] == Var("b", 1, 4)

    def test_generated_methods_act_on_their_var_or_input(self) -> None:
        """Each generated setter narrows exactly its own var; each ``<input>_mut`` is a writable
        view of exactly its own device buffer, at the prepared shape."""
        jit = ScaleJit(Model())
        assert jit.with_b_bound(2) is jit
        assert jit.vars == {"b": Var("b", 1, 2), "t": Var("t", 1, 64)}
        assert jit.with_t_min_bound(5) is jit
        assert jit.vars == {"b": Var("b", 1, 2), "t": Var("t", 5, 64)}
        assert jit.with_t_fixed(7) is jit
        assert jit.vars == {"b": Var("b", 1, 2), "t": Var("t", 7, 7)}
        jit = ScaleJit(Model()).prepare(InputSpec.f32((4, 64)), InputSpec.f32((4, 1)))
        for name, mut, shape in (("x", jit.x_mut, (4, 64)), ("bias", jit.bias_mut, (4, 1))):
            view = mut()
            assert view.shape == shape and view.flags.writeable
            view[:] = len(name)
            np.testing.assert_array_equal(jit.input_buffer(name).to_numpy_blocking(), len(name))


class TestSetters:
    def test_builder_style_setters_narrow_vars(self) -> None:
        """Setters return self and narrow the bounds."""
        jit = ScaleJit(Model()).with_t_bound(32).with_t_min_bound(2).with_b_fixed(3)
        assert jit.vars["t"] == Var("t", 2, 32)
        assert jit.vars["b"] == Var("b", 3, 3)

    @pytest.mark.parametrize(
        ("call", "match"),
        [
            (lambda j: j.with_t_bound(0), "max < min"),
            (lambda j: j.with_t_min_bound(65), "min > max"),
            (lambda j: j.with_t_fixed(0), r"declared in \[1, 64\]"),
            (lambda j: j.with_t_bound(1000), "declared with max 64"),
            (lambda j: j.with_t_fixed(100), r"declared in \[1, 64\]"),
            (lambda j: j.with_t_bound(2.7), "var bounds are ints, got float"),
            (lambda j: j.with_t_fixed(True), "var bounds are ints, got bool"),
            (lambda j: j.with_t_min_bound("3"), "var bounds are ints, got str"),
        ],
    )
    def test_invalid_setter_values_raise_value_error(self, call: Any, match: str) -> None:
        """max < min, min > max, beyond the model's declared bounds, and non-integers raise
        VarBoundsError (a ValueError) at the call; nothing is clamped or truncated."""
        with pytest.raises(VarBoundsError, match=match):
            call(ScaleJit(Model()))
        assert issubclass(VarBoundsError, ValueError)
        assert ScaleJit(Model()).with_t_bound(np.int64(10)).vars["t"].max == 10  # numpy ints are ints

    def test_setters_after_prepare_raise(self, prepared: ScaleJit) -> None:
        """Narrowing a var after prepare is a ValueError: the plan is compiled."""
        with pytest.raises(ValueError, match="before prepare"):
            prepared.with_t_bound(10)


class TestLifecycle:
    def test_per_step_methods_before_prepare_raise_not_prepared(self) -> None:
        """Every per-step method before prepare raises NotPreparedError."""
        jit = ScaleJit(Model())
        for call in (jit.execute, jit.output, jit.x_mut, jit.buffers, jit.input_buffer_ids):
            with pytest.raises(NotPreparedError):
                call()
        with pytest.raises(NotPreparedError):
            jit.execute_with_vars({"t": 3})

    def test_prepare_needs_one_spec_per_input(self) -> None:
        """A wrong number of specs is a TypeError naming the inputs."""
        with pytest.raises(TypeError, match="one InputSpec per input"):
            ScaleJit(Model()).prepare(InputSpec.f32((4, 64)))

    def test_execute_with_vars_computes_the_actual_slice(self, prepared: ScaleJit) -> None:
        """Vars bound per call select the rows and columns that are computed."""
        x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
        prepared.x_mut()[:] = x
        prepared.bias_mut()[:] = 0.5
        prepared.execute_with_vars({"b": 2, "t": 5})
        out = prepared.output().to_numpy_blocking()
        np.testing.assert_allclose(out, (x[:2, :5] * 2 + 0.5).sum(1), rtol=1e-5)
        prepared.execute_with_vars([("b", 3), ("t", 7)])
        np.testing.assert_allclose(
            prepared.output().to_numpy_blocking(), (x[:3, :7] * 2 + 0.5).sum(1), rtol=1e-5
        )

    def test_unlisted_vars_take_their_prepare_value_not_the_last_one(self, prepared: ScaleJit) -> None:
        """After a call with t=3, a call listing only b uses t's upper bound (64), not 3."""
        x = np.ones((4, 64), np.float32)
        prepared.x_mut()[:] = x
        prepared.bias_mut()[:] = 0
        prepared.execute_with_vars({"t": 3, "b": 1})
        prepared.execute_with_vars({"b": 1})
        np.testing.assert_allclose(prepared.output().to_numpy_blocking(), [128.0])
        prepared.execute()
        np.testing.assert_allclose(prepared.output().to_numpy_blocking(), [128.0] * 4)

    def test_vars_out_of_bounds_or_unknown_raise(self, prepared: ScaleJit) -> None:
        """Out-of-range and unknown vars raise VarBoundsError before anything runs."""
        with pytest.raises(VarBoundsError, match="out of its bounds"):
            prepared.execute_with_vars({"t": 65})
        with pytest.raises(VarBoundsError, match="no var 'q'"):
            prepared.execute_with_vars({"q": 1})

    def test_output_before_any_execute_is_zero(self) -> None:
        """The output buffer exists from prepare on (zeros until the first execute)."""
        jit = ScaleJit(Model()).with_t_bound(8)
        jit.prepare(InputSpec.f32((4, 64)), InputSpec.f32((4, 1)))
        out = jit.output()
        assert tuple(out.shape) == (4,)
        np.testing.assert_array_equal(out.to_numpy_blocking(), 0)

    def test_fixed_var_becomes_a_constant_of_the_plan(self) -> None:
        """with_<var>_fixed pins the var; only its fixed value is accepted at execute."""
        jit = ScaleJit(Model()).with_t_fixed(4)
        jit.prepare(InputSpec.f32((4, 64)), InputSpec.f32((4, 1)))
        jit.x_mut()[:] = 1
        jit.execute_with_vars({"b": 1, "t": 4})
        np.testing.assert_allclose(jit.output().to_numpy_blocking(), [8.0])
        with pytest.raises(VarBoundsError):
            jit.execute_with_vars({"t": 5})


class TestAccessors:
    def test_buffers_and_ids(self, prepared: ScaleJit) -> None:
        """buffers() lists inputs then the output; ids are distinct device buffer ids."""
        bufs = prepared.buffers()
        assert len(bufs) == 3
        ids = prepared.input_buffer_ids()
        assert len(set(ids)) == 2 and ids == [bufs[0].id, bufs[1].id]
        assert prepared.output_buffers() == [prepared.output()]
        kernels = prepared.prepared_kernels()
        exe = prepared._ready().loaded.executable
        assert [k.name for k in kernels] == list(exe.kernel_names) and len(kernels) >= 1
        assert all(k.kind and k.name for k in kernels)

    def test_binding_the_same_buffer_to_two_inputs_is_rejected(self, prepared: ScaleJit) -> None:
        """DuplicateInputBufferError when one buffer would back two inputs."""
        with pytest.raises(DuplicateInputBufferError):
            prepared.bind_input_buffer("bias", prepared.input_buffer("x"))

    def test_unknown_input_name(self, prepared: ScaleJit) -> None:
        """InputBufferNotFoundError names the inputs that exist."""
        with pytest.raises(InputBufferNotFoundError, match="no input 'nope'"):
            prepared.input_buffer("nope")

    def test_binding_a_buffer_of_the_wrong_shape_is_rejected(self, prepared: ScaleJit) -> None:
        """A replacement input buffer must match the prepared spec."""
        client = prepared.input_buffer("x").client
        other = client.buffer_from_host(np.zeros((2, 2), np.float32))
        with pytest.raises(ShapeMismatchError):
            prepared.bind_input_buffer("x", other)


class TestBuildErrors:
    def test_build_exception_is_wrapped_with_its_cause(self) -> None:
        """A non-asyncjit exception in build becomes BuildError with __cause__ kept."""

        class Broken(JitWrapper[Model]):
            x = asyncjit.Input()

            def build(self, model: Model, x: Tensor) -> Tensor:
                raise KeyError("missing weight")

        with pytest.raises(BuildError) as exc:
            Broken(Model()).prepare(InputSpec.f32((2,)))
        assert isinstance(exc.value.__cause__, KeyError)

    def test_tensor_errors_pass_through(self) -> None:
        """A shape error inside build surfaces as TensorError (a JitError)."""

        class BadShapes(JitWrapper[Model]):
            x = asyncjit.Input()

            def build(self, model: Model, x: Tensor) -> Tensor:
                return x + Tensor.zeros((3,))

        with pytest.raises(TensorError, match="broadcast"):
            BadShapes(Model()).prepare(InputSpec.f32((2,)))

    def test_build_must_return_a_tensor(self) -> None:
        """Returning something else is a BuildError."""

        class NotTensor(JitWrapper[Model]):
            x = asyncjit.Input()

            def build(self, model: Model, x: Tensor) -> Any:
                return 3

        with pytest.raises(BuildError, match="must return a Tensor"):
            NotTensor(Model()).prepare(InputSpec.f32((2,)))


class TestConfig:
    def test_from_env_reads_documented_variables(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """ASYNCJIT_* variables configure prepare."""
        monkeypatch.setenv("ASYNCJIT_OPT_LEVEL", "1")
        monkeypatch.setenv("ASYNCJIT_PROFILE", "true")
        monkeypatch.setenv("ASYNCJIT_DEVICE", "0")
        cfg = PrepareConfig.from_env()
        assert cfg == PrepareConfig(device=0, opt_level=1, cache_dir=cfg.cache_dir, profiling=True)

    def test_from_env_rejects_malformed_values(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A malformed variable is a ValueError naming it."""
        monkeypatch.setenv("ASYNCJIT_OPT_LEVEL", "fast")
        with pytest.raises(ValueError, match="ASYNCJIT_OPT_LEVEL"):
            PrepareConfig.from_env()

    def test_input_spec_helpers(self) -> None:
        """f32/i32/i64 helpers set the dtype."""
        assert InputSpec.f32((2, 3)) == InputSpec((2, 3), asyncjit.float32)
        assert InputSpec.i32([4]).dtype == asyncjit.int32
        assert InputSpec.i64((1,)).dtype == asyncjit.int64


@pytest.mark.anyio
async def test_execute_async_awaits_without_blocking(prepared: ScaleJit) -> None:
    """execute_with_vars_async gives the same result as the blocking call."""
    prepared.x_mut()[:] = 1
    prepared.bias_mut()[:] = 0
    await prepared.execute_with_vars_async({"b": 2, "t": 10})
    np.testing.assert_allclose(await prepared.output().to_numpy(), [20.0, 20.0])
