"""Bad inputs at every public entry point: each row must raise a typed ``JitError`` naming the problem.

One table per entry point. A row is (id, call, expected error class, message fragment); the call
gets the module's ``Env`` (one compiled plan, one client, buffers). Every expected class is a
``JitError`` subclass, and the test also checks that the error is one (not a bare builtin that
happens to share a base). Rows with ``error=None`` are inputs that look wrong but are valid
(Fortran-order and strided arrays, numpy integer var values): they must give the right result.

Audio readers (``wav_chunks``, ``read_wav``, ``demo --audio``) have their own table in
``tests/test_audio.py``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import numpy as np
import pytest

import asyncjit
from asyncjit import Client, InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor, Var, jit
from asyncjit.compiler import CpuExecutable, compile
from asyncjit.devices import executable_kind
from asyncjit.errors import (
    ArgumentCountError,
    ArgumentTypeError,
    AudioFormatError,
    BufferDeletedError,
    ClosedError,
    CompileError,
    DeviceError,
    DeviceNotFoundError,
    DimDivisionError,
    DonateIndexError,
    DTypeMismatchError,
    InputBufferNotFoundError,
    InvalidArgumentError,
    JitError,
    NotPreparedError,
    ShapeMismatchError,
    SlotIndexError,
    StaticArgumentError,
    TensorError,
    UnsupportedDTypeError,
    VarBoundsError,
)
from asyncjit.models.silero_vad import SileroBatchedStep, SileroVad, vad_mux
from asyncjit.runtime import Buffer, LoadedExecutable
from asyncjit.runtime._executable import pack_executable
from asyncjit.scheduler import HostBatchedStep, MuxClosedError, StreamClosedError, StreamMux

T = Var("t", 1, 8)


@attrs.frozen
class Model:
    gain: float = 2.0


class AffineJit(JitWrapper[Model]):
    """x[:t] * gain + bias, summed: one input pair, one var."""

    x = asyncjit.Input()
    bias = asyncjit.Input()
    t = asyncjit.VarSpec(1, 8)

    def build(self, model: Model, x: Tensor, bias: Tensor, t: Var) -> Tensor:
        return (x[:t] * model.gain + bias).sum(axis=0)


class StateJit(JitWrapper[Model]):
    """A recurrent cell with output ``[head(1) | h(4) | c(4)]``."""

    h = asyncjit.Input()
    c = asyncjit.Input()

    def build(self, model: Model, h: Tensor, c: Tensor) -> Tensor:
        head = h.sum(axis=0).reshape(1)
        return Tensor.cat([head, h * 0.5, c + 1.0], axis=0)

    def pack_state(self, state: LstmState) -> None:
        self.h_mut()[:] = state.h
        self.c_mut()[:] = state.c


class Env:
    """What the rows act on, built once for the module."""

    def __init__(self) -> None:
        x = Tensor.placeholder((T, 4), name="x")
        y = Tensor.placeholder((4,), name="y")
        self.exe: CpuExecutable = compile(x * 2.0 + y, [x, y], name="bad_inputs")
        self.client = Client("cpu")
        self.other = Client("cpu")
        self.loaded: LoadedExecutable = self.client.load(self.exe)
        self.x = np.ones((3, 4), np.float32)
        self.y = np.full(4, 0.5, np.float32)
        self.bx = self.client.buffer_from_host(self.x)
        self.by = self.client.buffer_from_host(self.y)
        self._vad: SileroVad | None = None
        self._slot_step: SileroBatchedStep | None = None

    def fresh(self, arr: Any, client: Client | None = None) -> Buffer:
        return (client or self.client).buffer_from_host(arr)

    def deleted(self, client: Client | None = None, arr: Any = None) -> Buffer:
        b = self.fresh(self.x if arr is None else arr, client)
        b.delete()
        return b

    def pair(self) -> list[Buffer]:
        """Fresh, donatable inputs: a row that donates must not consume the shared buffers."""
        S = asyncjit.HostBufferSemantics
        return [
            self.client.buffer_from_host(a.copy(), semantics=S.MUTABLE_ZERO_COPY) for a in (self.x, self.y)
        ]

    def donated(self) -> Buffer:
        b = self.fresh(self.x)
        self.loaded.execute_blocking([b, self.by], {"t": 3}, donate=[0])
        return b

    def closed_client(self) -> Client:
        c = Client("cpu")
        c.close()
        return c

    def wrapper(self) -> AffineJit:
        return AffineJit(Model())

    def prepared(self) -> AffineJit:
        return AffineJit(Model()).prepare(InputSpec.f32((8, 4)), InputSpec.f32((4,)))

    def host_step(self) -> HostBatchedStep:
        return HostBatchedStep(self.client, max_batch_size=4, num_slots=4)

    def vad(self) -> SileroVad:
        if self._vad is None:
            self._vad = SileroVad(16000)
        return self._vad

    def slot_step(self) -> SileroBatchedStep:
        if self._slot_step is None:
            self._slot_step = SileroBatchedStep(16000, max_streams=2, client=self.client)
        return self._slot_step

    def recurrent(self) -> JitRecurrent[StateJit]:
        j = StateJit(Model()).prepare(InputSpec.f32((4,)), InputSpec.f32((4,)))
        return JitRecurrent(j, LstmState.zeros(4), head_len=1)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.client.close()
    e.other.close()


@attrs.frozen
class Case:
    id: str
    call: Callable[[Env], object]
    error: type[JitError] | None
    match: str = ""


def _run_ok(env: Env, arrays: list[Any]) -> None:
    out = env.exe.run(arrays, {"t": 3})[0]
    np.testing.assert_array_equal(out, np.ascontiguousarray(arrays[0]) * 2.0 + arrays[1])


_FIXED: list[CpuExecutable] = []


def _fixed_exe() -> CpuExecutable:
    """The module's plan with ``t`` fixed at 3 (its ``run`` still takes ``t``, if it equals 3)."""
    if not _FIXED:
        x = Tensor.placeholder((T, 4), name="x")
        y = Tensor.placeholder((4,), name="y")
        _FIXED.append(compile(x * 2.0 + y, [x, y], name="bad_inputs_fixed", fixed={"t": 3}))
    return _FIXED[0]


def _set_h(env: Env, n: int) -> None:
    r = env.recurrent()
    r.state.h = np.zeros(n, np.float32)
    r.step()


def _mutate_after_prepare(env: Env) -> None:
    env.prepared().with_t_bound(4)


def _replace_output_dtype(env: Env) -> None:
    r = env.recurrent()
    r.state.c = np.zeros((2, 2), np.float32)  # same size, other shape: flattened by LstmState
    r.step()


COMPILE = [
    Case(
        "compile/input_not_placeholder",
        lambda e: compile(Tensor.placeholder((2,)) * 2, [Tensor.placeholder((2,)) + 1]),
        CompileError,
        "placeholders",
    ),
    Case(
        "compile/missing_input",
        lambda e: compile(Tensor.placeholder((2,), name="q") * 2, []),
        InputBufferNotFoundError,
        "'q'",
    ),
    Case("compile/output_not_tensor", lambda e: compile("hello", []), ArgumentTypeError, "str"),
    Case(
        "compile/inputs_not_sequence",
        lambda e: compile(Tensor.placeholder((2,)), Tensor.placeholder((2,))),
        ArgumentTypeError,
        "inputs",
    ),
    Case("compile/duplicate_input", lambda e: compile(_p2 * 2, [_p2, _p2]), CompileError, "twice"),
    Case(
        "compile/fixed_out_of_bounds",
        lambda e: compile(_pt * 4, [_pt], fixed={"t": 99}),
        VarBoundsError,
        "99",
    ),
    Case(
        "compile/fixed_unknown_var", lambda e: compile(_pt * 2, [_pt], fixed={"zz": 3}), VarBoundsError, "zz"
    ),
    Case("compile/fixed_float", lambda e: compile(_pt * 3, [_pt], fixed={"t": 2.5}), VarBoundsError, "2.5"),
    Case("tensor/negative_dim", lambda e: Tensor.placeholder((-1, 2)), TensorError, "-1"),
    Case("tensor/float_dim", lambda e: Tensor.placeholder((2.5,)), ArgumentTypeError, "2.5"),
    Case(
        "tensor/unknown_dtype",
        lambda e: Tensor.placeholder((2,), "complex64"),
        UnsupportedDTypeError,
        "complex64",
    ),
    Case("var/min_above_max", lambda e: Var("n", 5, 2), VarBoundsError, "n"),
    Case("var/negative_min", lambda e: Var("n", -1, 2), VarBoundsError, "-1"),
    Case("var/float_bound", lambda e: Var("n", 1, 2.5), VarBoundsError, "2.5"),
]
_p2 = Tensor.placeholder((2,), name="p2")
_pt = Tensor.placeholder((T,), name="pt")

RUN = [
    Case("run/no_inputs", lambda e: e.exe.run([], {"t": 3}), ArgumentCountError, "takes 2 inputs"),
    Case("run/three_inputs", lambda e: e.exe.run([e.x, e.y, e.y], {"t": 3}), ArgumentCountError, "got 3"),
    Case("run/array_not_list", lambda e: e.exe.run(e.x, {"t": 3}), ArgumentTypeError, "sequence"),
    Case(
        "run/float64", lambda e: e.exe.run([e.x.astype(np.float64), e.y], {"t": 3}), DTypeMismatchError, "'x'"
    ),
    Case(
        "run/int_input",
        lambda e: e.exe.run([e.x.astype(np.int32), e.y], {"t": 3}),
        DTypeMismatchError,
        "int32",
    ),
    Case("run/string_input", lambda e: e.exe.run(["abc", e.y], {"t": 3}), DTypeMismatchError, "'x'"),
    Case("run/none_input", lambda e: e.exe.run([None, e.y], {"t": 3}), DTypeMismatchError, "'x'"),
    Case(
        "run/object_input",
        lambda e: e.exe.run([np.array([object()]), e.y], {"t": 3}),
        DTypeMismatchError,
        "'x'",
    ),
    Case("run/wrong_rank", lambda e: e.exe.run([e.x.reshape(-1), e.y], {"t": 3}), ShapeMismatchError, "'x'"),
    Case("run/shape_vs_var", lambda e: e.exe.run([e.x, e.y], {"t": 4}), ShapeMismatchError, "(4, 4)"),
    Case(
        "run/var_above_max",
        lambda e: e.exe.run([np.ones((9, 4), np.float32), e.y], {"t": 9}),
        VarBoundsError,
        "9",
    ),
    Case("run/var_zero", lambda e: e.exe.run([e.x, e.y], {"t": 0}), VarBoundsError, "0"),
    Case("run/var_negative", lambda e: e.exe.run([e.x, e.y], {"t": -3}), VarBoundsError, "-3"),
    Case("run/var_float", lambda e: e.exe.run([e.x, e.y], {"t": 3.0}), VarBoundsError, "3.0"),
    Case("run/var_nan", lambda e: e.exe.run([e.x, e.y], {"t": math.nan}), VarBoundsError, "nan"),
    Case("run/var_bool", lambda e: e.exe.run([e.x, e.y], {"t": True}), VarBoundsError, "True"),
    Case("run/var_string", lambda e: e.exe.run([e.x, e.y], {"t": "3"}), VarBoundsError, "'3'"),
    Case("run/var_unknown", lambda e: e.exe.run([e.x, e.y], {"t": 3, "u": 1}), VarBoundsError, "'u'"),
    Case("run/vars_not_mapping", lambda e: e.exe.run([e.x, e.y], [("t", 3)]), ArgumentTypeError, "mapping"),
    Case("run/fixed_var_float", lambda e: _fixed_exe().run([e.x, e.y], {"t": 3.0}), VarBoundsError, "3.0"),
    Case(
        "run/fortran_ok",
        lambda e: _run_ok(e, [np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)), e.y]),
        None,
    ),
    Case(
        "run/strided_ok",
        lambda e: _run_ok(e, [np.arange(24, dtype=np.float32).reshape(6, 4)[::2], e.y[::-1]]),
        None,
    ),
    Case("run/numpy_int_var_ok", lambda e: e.exe.run([e.x, e.y], {"t": np.int64(3)}), None),
    Case("run/nan_data_ok", lambda e: e.exe.run([np.full((3, 4), np.nan, np.float32), e.y], {"t": 3}), None),
]

EXECUTE = [
    Case(
        "execute_blocking/too_many_buffers",
        lambda e: e.loaded.execute_blocking([e.bx, e.by, e.by], {"t": 3}),
        ArgumentCountError,
        "expected 2 inputs",
    ),
    Case(
        "execute_blocking/too_few_buffers",
        lambda e: e.loaded.execute_blocking([e.bx], {"t": 3}),
        ArgumentCountError,
        "got 1",
    ),
    Case(
        "execute_nowait/too_many_buffers",
        lambda e: e.loaded.execute_nowait([e.bx, e.by, e.bx], {"t": 3}),
        ArgumentCountError,
        "got 3",
    ),
    Case(
        "execute_blocking/ndarray_arg",
        lambda e: e.loaded.execute_blocking([e.x, e.by], {"t": 3}),
        ArgumentTypeError,
        "ndarray",
    ),
    Case(
        "execute_blocking/extra_ndarray_arg",
        lambda e: e.loaded.execute_blocking([e.bx, e.by, e.x], {"t": 3}),
        ArgumentCountError,
        "got 3",
    ),
    Case(
        "execute_blocking/args_not_sequence",
        lambda e: e.loaded.execute_blocking(e.bx, {"t": 3}),
        ArgumentTypeError,
        "sequence",
    ),
    Case(
        "execute_blocking/donate_out_of_range",
        lambda e: e.loaded.execute_blocking(e.pair(), {"t": 3}, donate=[5]),
        DonateIndexError,
        "5",
    ),
    Case(
        "execute_blocking/donate_negative",
        lambda e: e.loaded.execute_blocking(e.pair(), {"t": 3}, donate=[-1]),
        DonateIndexError,
        "-1",
    ),
    Case(
        "execute_blocking/donate_not_int",
        lambda e: e.loaded.execute_blocking(e.pair(), {"t": 3}, donate=["x"]),
        DonateIndexError,
        "'x'",
    ),
    Case(
        "execute_blocking/donate_bool",
        lambda e: e.loaded.execute_blocking(e.pair(), {"t": 3}, donate=[True]),
        DonateIndexError,
        "True",
    ),
    Case(
        "execute_blocking/donate_bare_int",
        lambda e: e.loaded.execute_blocking(e.pair(), {"t": 3}, donate=0),
        DonateIndexError,
        "donate=[0]",
    ),
    Case(
        "execute_blocking/deleted_buffer",
        lambda e: e.loaded.execute_blocking([e.deleted(), e.by], {"t": 3}),
        BufferDeletedError,
        "deleted",
    ),
    Case(
        "execute_blocking/donated_buffer",
        lambda e: e.loaded.execute_blocking([e.donated(), e.by], {"t": 3}),
        BufferDeletedError,
        "donated",
    ),
    Case(
        "execute_blocking/other_client_buffer",
        lambda e: e.loaded.execute_blocking([e.fresh(e.x, e.other), e.by], {"t": 3}),
        DeviceError,
        "another client",
    ),
    Case(
        "execute_blocking/other_client_device",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": 3}, device=e.other.device(0)),
        DeviceError,
        "another client",
    ),
    Case(
        "execute_blocking/device_not_a_device",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": 3}, device="cpu"),
        ArgumentTypeError,
        "str",
    ),
    Case(
        "execute_blocking/dtype",
        lambda e: e.loaded.execute_blocking([e.fresh(e.x.astype(np.int32)), e.by], {"t": 3}),
        DTypeMismatchError,
        "'x'",
    ),
    Case(
        "execute_blocking/shape",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": 5}),
        ShapeMismatchError,
        "'x'",
    ),
    Case(
        "execute_blocking/var_above_max",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": 99}),
        VarBoundsError,
        "99",
    ),
    Case(
        "execute_blocking/var_float",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": 3.5}),
        VarBoundsError,
        "3.5",
    ),
    Case(
        "execute_blocking/var_nan",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": math.nan}),
        VarBoundsError,
        "nan",
    ),
    Case(
        "execute_blocking/var_bool",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"t": True}),
        VarBoundsError,
        "True",
    ),
    Case(
        "execute_blocking/var_unknown",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], {"z": 3}),
        VarBoundsError,
        "'z'",
    ),
    Case(
        "execute_blocking/vars_not_mapping",
        lambda e: e.loaded.execute_blocking([e.bx, e.by], [3]),
        ArgumentTypeError,
        "mapping",
    ),
]

CLIENT = [
    Case("client/unknown_kind", lambda e: Client("gpu"), DeviceError, "gpu"),
    Case("client/zero_devices", lambda e: Client("cpu:0"), InvalidArgumentError, "cpu:0"),
    Case("client/bad_spec", lambda e: Client("cpu:x"), InvalidArgumentError, "cpu:x"),
    Case("client/empty_spec", lambda e: Client(""), InvalidArgumentError, "bad device spec ''"),
    Case("client/spec_not_string", lambda e: Client(["cpu", 2]), ArgumentTypeError, "cpu:2"),
    Case(
        "client/max_in_flight_zero",
        lambda e: Client("cpu", max_in_flight=0),
        InvalidArgumentError,
        "max_in_flight",
    ),
    Case(
        "client/inline_policy", lambda e: Client("cpu", inline="sometimes"), InvalidArgumentError, "sometimes"
    ),
    Case("client/device_index", lambda e: e.client.device(7), DeviceError, "7"),
    Case("client/load_closed", lambda e: e.closed_client().load(e.exe), ClosedError, "closed"),
    Case("client/load_not_executable", lambda e: e.client.load("plan"), ArgumentTypeError, "str"),
    Case("client/buffer_closed", lambda e: e.closed_client().buffer_from_host(e.x), ClosedError, "closed"),
    Case("client/buffer_device_index", lambda e: e.client.buffer_from_host(e.x, device=9), DeviceError, "9"),
    Case(
        "client/buffer_object_array",
        lambda e: e.client.buffer_from_host(np.array([object()])),
        UnsupportedDTypeError,
        "object",
    ),
    Case(
        "client/buffer_strings", lambda e: e.client.buffer_from_host(["a", "b"]), UnsupportedDTypeError, "<U1"
    ),
    Case(
        "client/buffer_complex",
        lambda e: e.client.buffer_from_host(np.ones(2, np.complex64)),
        UnsupportedDTypeError,
        "complex64",
    ),
    Case(
        "client/buffer_semantics",
        lambda e: e.client.buffer_from_host(e.x, semantics="copy"),
        ArgumentTypeError,
        "semantics",
    ),
    Case(
        "client/deserialize_garbage",
        lambda e: e.client.deserialize_executable(b"not an executable"),
        DeviceError,
        "magic",
    ),
    Case(
        "client/deserialize_truncated",
        lambda e: e.client.deserialize_executable(e.loaded.serialize()[:100]),
        CompileError,
        "truncated",
    ),
]

BUFFER = [
    Case("buffer/read_deleted", lambda e: e.deleted().to_numpy_blocking(), BufferDeletedError, "deleted"),
    Case("buffer/view_deleted", lambda e: e.deleted().numpy_view(), BufferDeletedError, "deleted"),
    Case(
        "buffer/copy_deleted",
        lambda e: e.deleted().copy_to_device(e.client.device(0)),
        BufferDeletedError,
        "deleted",
    ),
    Case(
        "buffer/copy_other_client",
        lambda e: e.bx.copy_to_device(e.other.device(0)),
        DeviceError,
        "another client",
    ),
    Case("buffer/copy_not_device", lambda e: e.bx.copy_to_device(0), ArgumentTypeError, "int"),
    Case(
        "buffer/timeout_negative",
        lambda e: e.bx.block_until_ready(timeout=-1.0),
        InvalidArgumentError,
        "-1.0",
    ),
    Case(
        "buffer/timeout_nan", lambda e: e.bx.block_until_ready(timeout=math.nan), InvalidArgumentError, "nan"
    ),
]

JIT = [
    Case(
        "jit/tensor_argument",
        lambda e: jit(lambda a: a * 2)(Tensor.placeholder((2,))),
        ArgumentTypeError,
        "Tensor",
    ),
    Case("jit/string_argument", lambda e: jit(lambda a: a * 2)("abc"), ArgumentTypeError, "str"),
    Case(
        "jit/string_array_argument",
        lambda e: jit(lambda a: a * 2)(np.array(["abc"])),
        DTypeMismatchError,
        "<U3",
    ),
    Case("jit/object_argument", lambda e: jit(lambda a: a * 2)(object()), ArgumentTypeError, "object"),
    Case(
        "jit/complex_argument",
        lambda e: jit(lambda a: a * 2)(np.ones(2, np.complex64)),
        DTypeMismatchError,
        "complex64",
    ),
    Case("jit/big_int", lambda e: jit(lambda a: a * 2)(2**40), DTypeMismatchError, "int32"),
    Case(
        "jit/unhashable_static",
        lambda e: jit(lambda a, k: a, static_argnums=1)(e.x, np.ones(2)),
        StaticArgumentError,
        "ndarray",
    ),
    Case("jit/static_argnum_range", lambda e: jit(lambda a: a, static_argnums=3), InvalidArgumentError, "3"),
    Case(
        "jit/static_argname_unknown",
        lambda e: jit(lambda a: a, static_argnames="zz"),
        InvalidArgumentError,
        "zz",
    ),
    Case(
        "jit/dynamic_min_above_max",
        lambda e: jit(lambda a: a * 2, dynamic={"a": {0: ("n", 5, 2)}})(e.x),
        VarBoundsError,
        "n",
    ),
    Case(
        "jit/dynamic_axis_range",
        lambda e: jit(lambda a: a * 2, dynamic={"a": {5: ("n", 1, 8)}})(e.x),
        ShapeMismatchError,
        "5",
    ),
    Case(
        "jit/dynamic_unknown_arg",
        lambda e: jit(lambda a: a * 2, dynamic={"zz": {0: ("n", 1, 8)}}),
        InvalidArgumentError,
        "zz",
    ),
    Case(
        "jit/dynamic_above_bound",
        lambda e: jit(lambda a: a * 2, dynamic={"a": {0: ("n", 1, 2)}})(e.x),
        VarBoundsError,
        "n",
    ),
    Case("jit/returns_non_tensor", lambda e: jit(lambda a: "result")(e.x), ArgumentTypeError, "str"),
    Case("jit/too_many_args", lambda e: jit(lambda a: a * 2)(e.x, e.x), ArgumentCountError, "argument"),
    Case("jit/missing_arg", lambda e: jit(lambda a, b: a * b)(e.x), ArgumentCountError, "argument"),
    Case(
        "jit/deleted_buffer",
        lambda e: jit(lambda a: a * 2)(e.deleted(asyncjit.default_client())),
        BufferDeletedError,
        "deleted",
    ),
    Case("jit/other_client_buffer", lambda e: jit(lambda a: a * 2)(e.bx), DeviceError, "another client"),
    Case(
        "jit/fortran_ok",
        lambda e: np.testing.assert_array_equal(
            jit(lambda a: a * 2)(np.asfortranarray(e.x.reshape(2, 6))).to_numpy_blocking(),
            e.x.reshape(2, 6) * 2,
        ),
        None,
    ),
]

WRAPPER = [
    Case(
        "wrapper/prepare_too_few_specs",
        lambda e: e.wrapper().prepare(InputSpec.f32((8, 4))),
        ArgumentCountError,
        "one InputSpec per input",
    ),
    Case(
        "wrapper/prepare_not_spec",
        lambda e: e.wrapper().prepare((8, 4), InputSpec.f32((4,))),
        ArgumentTypeError,
        "tuple",
    ),
    Case("wrapper/spec_negative_dim", lambda e: InputSpec.f32((-2, 4)), InvalidArgumentError, "-2"),
    Case("wrapper/spec_float_dim", lambda e: InputSpec.f32((2.5, 4)), InvalidArgumentError, "2.5"),
    Case("wrapper/setter_below_min", lambda e: e.wrapper().with_t_bound(0), VarBoundsError, "with_t_bound"),
    Case("wrapper/setter_float", lambda e: e.wrapper().with_t_bound(2.5), VarBoundsError, "2.5"),
    Case("wrapper/setter_bool", lambda e: e.wrapper().with_t_fixed(True), VarBoundsError, "True"),
    Case("wrapper/setter_string", lambda e: e.wrapper().with_t_bound("4"), VarBoundsError, "'4'"),
    Case("wrapper/setter_nan", lambda e: e.wrapper().with_t_min_bound(math.nan), VarBoundsError, "nan"),
    Case("wrapper/fixed_zero", lambda e: e.wrapper().with_t_fixed(0), VarBoundsError, "0"),
    Case("wrapper/min_above_max", lambda e: e.wrapper().with_t_min_bound(9), VarBoundsError, "9"),
    Case("wrapper/setter_after_prepare", _mutate_after_prepare, InvalidArgumentError, "before prepare"),
    Case("wrapper/execute_before_prepare", lambda e: e.wrapper().execute(), NotPreparedError, "prepare"),
    Case("wrapper/mut_before_prepare", lambda e: e.wrapper().x_mut(), NotPreparedError, "prepare"),
    Case("wrapper/vars_unknown", lambda e: e.prepared().execute_with_vars({"zz": 1}), VarBoundsError, "zz"),
    Case("wrapper/vars_above_max", lambda e: e.prepared().execute_with_vars({"t": 9}), VarBoundsError, "9"),
    Case("wrapper/vars_float", lambda e: e.prepared().execute_with_vars({"t": 2.5}), VarBoundsError, "2.5"),
    Case(
        "wrapper/vars_nan", lambda e: e.prepared().execute_with_vars({"t": math.nan}), VarBoundsError, "nan"
    ),
    Case("wrapper/vars_bool", lambda e: e.prepared().execute_with_vars({"t": True}), VarBoundsError, "True"),
    Case(
        "wrapper/vars_not_pairs", lambda e: e.prepared().execute_with_vars([1, 2]), ArgumentTypeError, "pairs"
    ),
    Case("wrapper/vars_string", lambda e: e.prepared().execute_with_vars("t"), ArgumentTypeError, "pairs"),
    Case(
        "wrapper/input_buffer_unknown",
        lambda e: e.prepared().input_buffer("zz"),
        InputBufferNotFoundError,
        "zz",
    ),
    Case(
        "wrapper/bind_wrong_shape",
        lambda e: e.prepared().bind_input_buffer("x", e.fresh(e.x, asyncjit.default_client())),
        ShapeMismatchError,
        "'x'",
    ),
    Case(
        "wrapper/bind_ndarray",
        lambda e: e.prepared().bind_input_buffer("bias", e.y),
        ArgumentTypeError,
        "ndarray",
    ),
    Case(
        "wrapper/bind_deleted",
        lambda e: e.prepared().bind_input_buffer("bias", e.deleted(arr=e.y)),
        BufferDeletedError,
        "deleted",
    ),
    Case(
        "wrapper/bind_other_client",
        lambda e: e.prepared().bind_input_buffer("bias", e.fresh(e.y)),
        DeviceError,
        "another client",
    ),
    Case(
        "wrapper/profile_vars_float",
        lambda e: e.prepared().execute_with_vars_profiled({"t": 1.5}),
        VarBoundsError,
        "1.5",
    ),
]

RECURRENT = [
    Case("recurrent/longer_h", lambda e: _set_h(e, 9), ShapeMismatchError, "h"),
    Case("recurrent/shorter_h", lambda e: _set_h(e, 3), ShapeMismatchError, "h"),
    Case("recurrent/reshaped_c_ok", _replace_output_dtype, None),
    Case(
        "recurrent/negative_head",
        lambda e: JitRecurrent(e.recurrent().jit, LstmState.zeros(4), head_len=-1),
        InvalidArgumentError,
        "-1",
    ),
    Case(
        "recurrent/float_head",
        lambda e: JitRecurrent(e.recurrent().jit, LstmState.zeros(4), head_len=1.0),
        InvalidArgumentError,
        "1.0",
    ),
    Case(
        "recurrent/layout",
        lambda e: JitRecurrent(e.recurrent().jit, LstmState.zeros(3), head_len=1),
        asyncjit.errors.OutputLayoutMismatchError,
        "float32",
    ),
    Case(
        "recurrent/not_a_jit",
        lambda e: JitRecurrent(object(), LstmState.zeros(4), head_len=1),
        ArgumentTypeError,
        "RecurrentJit",
    ),
    Case("recurrent/state_strings", lambda e: LstmState(["a"], ["b"]), DTypeMismatchError, "float32"),
]

_CHUNK = np.zeros(512, np.float32)

VAD = [
    Case("silero/sample_rate", lambda e: SileroVad(44100), AudioFormatError, "44100"),
    Case("silero/short_chunk", lambda e: e.vad()(np.zeros(100, np.float32)), ShapeMismatchError, "512"),
    Case("silero/float64_chunk", lambda e: e.vad()(np.zeros(512)), DTypeMismatchError, "float64"),
    Case("silero/int16_chunk", lambda e: e.vad()(np.zeros(512, np.int16)), DTypeMismatchError, "int16"),
    Case("silero/nan_chunk", lambda e: e.vad()(np.full(512, np.nan, np.float32)), AudioFormatError, "NaN"),
    Case("silero/list_chunk", lambda e: e.vad()([0.0] * 512), DTypeMismatchError, "list"),
    Case(
        "silero/batch_chunk",
        lambda e: e.vad()(np.zeros((2, 512), np.float32)),
        ShapeMismatchError,
        "one stream",
    ),
    Case(
        "silero/waveform_2d",
        lambda e: e.vad().probabilities(np.zeros((2, 512), np.float32)),
        DTypeMismatchError,
        "1-D",
    ),
    Case("vad_mux/sample_rate", lambda e: vad_mux(44100), AudioFormatError, "44100"),
    Case(
        "vad_mux/zero_streams", lambda e: vad_mux(16000, max_streams=0), InvalidArgumentError, "max_streams"
    ),
    Case("vad_mux/float_streams", lambda e: vad_mux(16000, max_streams=2.5), InvalidArgumentError, "2.5"),
    Case(
        "vad_mux/state_nan",
        lambda e: e.slot_step().check_state((np.full(128, np.nan, np.float32), np.zeros(128, np.float32))),
        InvalidArgumentError,
        "finite",
    ),
    Case(
        "vad_mux/state_shape",
        lambda e: e.slot_step().check_state(np.zeros(7, np.float32)),
        ShapeMismatchError,
        "(7,)",
    ),
    Case(
        "vad_mux/state_int",
        lambda e: e.slot_step().check_state(np.zeros(7, np.int32)),
        DTypeMismatchError,
        "int32",
    ),
    Case(
        "mux/max_streams_zero",
        lambda e: StreamMux(e.host_step(), max_streams=0),
        InvalidArgumentError,
        "max_streams",
    ),
    Case(
        "mux/max_streams_float",
        lambda e: StreamMux(e.host_step(), max_streams=2.5),
        InvalidArgumentError,
        "2.5",
    ),
    Case(
        "mux/batch_above_plan",
        lambda e: StreamMux(e.host_step(), max_batch_size=99),
        InvalidArgumentError,
        "99",
    ),
    Case(
        "mux/negative_delay",
        lambda e: StreamMux(e.host_step(), max_queue_delay=-1.0),
        InvalidArgumentError,
        "-1.0",
    ),
    Case(
        "mux/nan_idle_timeout",
        lambda e: StreamMux(e.host_step(), idle_timeout=math.nan),
        InvalidArgumentError,
        "nan",
    ),
    Case(
        "mux/zero_idle_timeout",
        lambda e: StreamMux(e.host_step(), idle_timeout=0),
        InvalidArgumentError,
        "idle_timeout",
    ),
    Case(
        "mux/negative_backlog",
        lambda e: StreamMux(e.host_step(), backlog=-1),
        InvalidArgumentError,
        "backlog",
    ),
    Case(
        "mux/queue_depth_zero",
        lambda e: StreamMux(e.host_step(), queue_depth=0),
        InvalidArgumentError,
        "queue_depth",
    ),
    Case(
        "mux/not_entered",
        lambda e: StreamMux(e.host_step()).open_stream_nowait(),
        MuxClosedError,
        "async with",
    ),
]

DEVICES = [
    Case(
        "devices/wrapper_device_string",
        lambda e: AffineJit(Model(), device="cpu").prepare(InputSpec.f32((8, 4)), InputSpec.f32((4,))),
        ArgumentTypeError,
        "'cpu'",
    ),
    Case(
        "devices/wrapper_device_index",
        lambda e: AffineJit(Model(), device=9).prepare(InputSpec.f32((8, 4)), InputSpec.f32((4,))),
        DeviceNotFoundError,
        "9",
    ),
    Case(
        "devices/jit_device_string",
        lambda e: jit(lambda a: a * 2, device="gpu")(e.x),
        ArgumentTypeError,
        "'gpu'",
    ),
    Case("devices/jit_device_index", lambda e: jit(lambda a: a * 2, device=9)(e.x), DeviceNotFoundError, "9"),
    Case("devices/silero_device", lambda e: SileroVad(16000, device="cpu"), ArgumentTypeError, "'cpu'"),
    Case("devices/client_spec_none", lambda e: Client(None), ArgumentTypeError, "None"),
    Case(
        "devices/deserialize_unknown_kind",
        lambda e: e.client.deserialize_executable(pack_executable("nokind", b"")),
        DeviceError,
        "nokind",
    ),
    Case(
        "devices/deserialize_junk_payload",
        lambda e: e.client.deserialize_executable(pack_executable(executable_kind(e.exe), b"junk")),
        CompileError,
        "not a serialized",
    ),
    Case(
        "buffer/copy_to_space_not_space",
        lambda e: e.bx.copy_to_memory_space("host"),
        ArgumentTypeError,
        "'host'",
    ),
    Case(
        "client/buffer_space_not_space",
        lambda e: e.client.buffer_from_host(e.x, memory_space="host"),
        ArgumentTypeError,
        "'host'",
    ),
    Case("recurrent/pack_not_callable", lambda e: e.recurrent().step(3), ArgumentTypeError, "pack_inputs"),
]

_x = Tensor.placeholder((3, 4), name="tx")
_xi = Tensor.placeholder((3, 4), asyncjit.dtypes.int32, name="txi")
_xt = Tensor.placeholder((T,), name="txt")
_x3 = Tensor.placeholder((1, 3, 8), name="tx3")
_w = Tensor.placeholder((2, 3, 1), name="tw")


def _serve_config(**kw: Any) -> object:
    from asyncjit.serve import ServeConfig

    return ServeConfig(**kw)


def _parse_address(text: str, scheme: str) -> object:
    from asyncjit.serve import parse_address

    return parse_address(text, scheme)


def _silero_compat() -> Any:
    from asyncjit.models import silero_compat

    return silero_compat


def _trace_save() -> None:
    from asyncjit.profiler import trace

    with trace() as t:
        pass
    t.save()


def _register_plugin(plugin: Any) -> None:
    from asyncjit.compiler._partition import register_plugin

    register_plugin(plugin)


def _compile_for_cpu(program: Any) -> None:
    from asyncjit.devices._builtin import compile_for_cpu

    compile_for_cpu(program)


def _two_vars_one_name() -> None:
    a, b = Tensor.placeholder((Var("q", 1, 4),)), Tensor.placeholder((Var("q", 1, 5),))
    compile(a.sum() + b.sum(), [a, b])


TENSOR = [
    # operands of the Tensor API: every op checks them at the call
    Case("tensor/add_str", lambda e: _x + "a", ArgumentTypeError, "cannot combine a Tensor with str"),
    Case(
        "tensor/radd_list",
        lambda e: [1, 2] + _x,  # noqa: RUF005 - the list is the bad operand
        ArgumentTypeError,
        "list",
    ),
    Case("tensor/mul_none", lambda e: _x * None, ArgumentTypeError, "NoneType"),
    Case("tensor/sub_complex", lambda e: _x - 1j, ArgumentTypeError, "complex"),
    Case("tensor/pow_str", lambda e: _x ** "a", ArgumentTypeError, "str"),
    Case("tensor/matmul_str", lambda e: _x @ "a", ArgumentTypeError, "str"),
    Case("tensor/compare_str", lambda e: _x < "a", ArgumentTypeError, "str"),
    Case("tensor/and_str", lambda e: _xi & "a", ArgumentTypeError, "str"),
    Case("tensor/maximum_dict", lambda e: _x.maximum({}), ArgumentTypeError, "dict"),
    Case("tensor/clip_str", lambda e: _x.clip("a", 1), ArgumentTypeError, "str"),
    Case("tensor/where_str", lambda e: Tensor.where(_x > 0, "a", _x), ArgumentTypeError, "str"),
    Case("tensor/where_float_condition", lambda e: Tensor.where(_x, _x, _x), TensorError, "bool Tensor"),
    Case("tensor/bool", lambda e: bool(_x), ArgumentTypeError, "no value while the graph is built"),
    Case("tensor/len_rank0", lambda e: len(Tensor.placeholder(())), ArgumentTypeError, "0-d"),
    Case("tensor/len_symbolic", lambda e: len(_xt), ArgumentTypeError, "symbolic"),
    Case("tensor/iter", lambda e: iter(_x), ArgumentTypeError, "iterating"),
    Case("tensor/wrap_not_node", lambda e: Tensor("node"), ArgumentTypeError, "graph Node"),
    Case("tensor/index_str", lambda e: _x["a"], ArgumentTypeError, "unsupported index 'a'"),
    Case("tensor/index_float", lambda e: _x[1.5], ArgumentTypeError, "1.5"),
    Case("tensor/index_list", lambda e: _x[[1, 2]], ArgumentTypeError, "[1, 2]"),
    Case("tensor/index_out_of_range", lambda e: _x[5], TensorError, "out of range"),
    Case("tensor/too_many_indices", lambda e: _x[0, 0, 0], TensorError, "too many indices (3)"),
    Case("tensor/sum_axis_str", lambda e: _x.sum(axis="a"), ArgumentTypeError, "axis must be an int"),
    Case("tensor/sum_axis_float", lambda e: _x.sum(axis=1.5), ArgumentTypeError, "float"),
    Case("tensor/sum_axis_out_of_range", lambda e: _x.sum(axis=5), TensorError, "axis 5"),
    Case("tensor/sum_repeated_axis", lambda e: _x.sum(axis=(0, -2)), TensorError, "repeated"),
    Case("tensor/softmax_axis_str", lambda e: _x.softmax("a"), ArgumentTypeError, "axis"),
    Case("tensor/var_ddof_str", lambda e: _x.var(ddof="a"), ArgumentTypeError, "ddof"),
    Case("tensor/permute_str", lambda e: _x.permute("a", 0), ArgumentTypeError, "axis"),
    Case("tensor/transpose_str", lambda e: _x.transpose("a", 0), ArgumentTypeError, "axis"),
    Case("tensor/unsqueeze_str", lambda e: _x.unsqueeze("a"), ArgumentTypeError, "axis"),
    Case("tensor/unsqueeze_out_of_range", lambda e: _x.unsqueeze(7), TensorError, "axis 7"),
    Case("tensor/squeeze_str", lambda e: _x.squeeze("a"), ArgumentTypeError, "axis"),
    Case("tensor/flatten_str", lambda e: _x.flatten("a"), ArgumentTypeError, "axis"),
    Case("tensor/reshape_str", lambda e: _x.reshape("a"), ArgumentTypeError, "'a'"),
    Case("tensor/reshape_wrong_size", lambda e: _x.reshape(5, 5), ShapeMismatchError, "12 and 25"),
    Case("tensor/cast_unknown_dtype", lambda e: _x.cast("float128"), UnsupportedDTypeError, "float128"),
    Case("tensor/pad_value_str", lambda e: _x.pad([(1, 0), (0, 0)], value="a"), ArgumentTypeError, "str"),
    Case("tensor/pad_mode", lambda e: _x.pad([(1, 0), (0, 0)], mode="zz"), TensorError, "zz"),
    Case("tensor/cat_str_member", lambda e: Tensor.cat([_x, "a"]), ArgumentTypeError, "str among them"),
    Case("tensor/cat_a_tensor", lambda e: Tensor.cat(_x), ArgumentTypeError, "list or tuple"),
    Case("tensor/cat_empty", lambda e: Tensor.cat([]), TensorError, "at least one"),
    Case("tensor/stack_str_member", lambda e: Tensor.stack([_x, "a"]), ArgumentTypeError, "str"),
    Case("tensor/split_str", lambda e: _x.split("a"), ArgumentTypeError, "split sizes"),
    Case("tensor/split_wrong_total", lambda e: _x.split([1, 1]), ShapeMismatchError, "add up"),
    Case("tensor/chunk_str", lambda e: _x.chunk("a"), ArgumentTypeError, "chunk count"),
    Case("tensor/chunk_zero", lambda e: _x.chunk(0), TensorError, "chunk count"),
    Case("tensor/gather_str", lambda e: _x.gather(0, "a"), ArgumentTypeError, "str"),
    Case("tensor/scatter_str", lambda e: _x.scatter(0, "a", _x), ArgumentTypeError, "str"),
    Case("tensor/conv1d_weight_str", lambda e: _x3.conv1d("a"), ArgumentTypeError, "conv1d weight"),
    Case(
        "tensor/conv1d_stride_str", lambda e: _x3.conv1d(_w, stride="a"), TensorError, "stride must be an int"
    ),
    Case("tensor/conv_weight_str", lambda e: _x3.conv("a"), ArgumentTypeError, "conv weight"),
    Case("tensor/conv_strides_str", lambda e: _x3.conv(_w, strides="a"), ArgumentTypeError, "strides"),
    Case("tensor/linear_weight_str", lambda e: _x.linear("a"), ArgumentTypeError, "linear weight"),
    Case(
        "tensor/layer_norm_weight_str", lambda e: _x.layer_norm("a"), ArgumentTypeError, "layer_norm weight"
    ),
    Case("tensor/max_pool_kernel_str", lambda e: _x3.max_pool("a"), ArgumentTypeError, "kernel"),
    Case("tensor/cumsum_axis_str", lambda e: _x.cumsum("a"), ArgumentTypeError, "axis"),
    Case("tensor/argmax_axis_str", lambda e: _x.argmax("a"), ArgumentTypeError, "axis"),
    Case("tensor/take_along_axis_str", lambda e: _x.take_along_axis("a", 0), ArgumentTypeError, "str"),
    Case("tensor/glu_axis_str", lambda e: _x.glu("a"), ArgumentTypeError, "axis"),
    Case("tensor/const_object", lambda e: Tensor.const(object()), UnsupportedDTypeError, "object"),
    Case(
        "tensor/const_complex",
        lambda e: Tensor.const(np.ones(2, np.complex64)),
        UnsupportedDTypeError,
        "complex64",
    ),
    Case("tensor/full_value_str", lambda e: Tensor.full((2,), "a"), ArgumentTypeError, "number"),
    Case("tensor/full_shape_str", lambda e: Tensor.full("a", 1.0), ArgumentTypeError, "shape"),
    Case("tensor/arange_str", lambda e: Tensor.arange("a"), ArgumentTypeError, "'a'"),
    Case("tensor/placeholder_shape_str", lambda e: Tensor.placeholder("ab"), ArgumentTypeError, "shape"),
    Case(
        "tensor/placeholder_name_int", lambda e: Tensor.placeholder((2,), name=5), ArgumentTypeError, "name"
    ),
    Case(
        "tensor/unknown_op", lambda e: asyncjit.graph.make_node("nope", ()), TensorError, "unknown op 'nope'"
    ),
    Case(
        "tensor/two_vars_one_name",
        lambda e: _two_vars_one_name(),
        VarBoundsError,
        "two different vars named 'q'",
    ),
    Case("symbolic/mul_str", lambda e: T * "a", ArgumentTypeError, "str"),
    Case("symbolic/floordiv_zero", lambda e: T // 0, DimDivisionError, "positive int"),
    Case("symbolic/mod_negative", lambda e: T % -2, DimDivisionError, "positive int"),
    Case("symbolic/symbolic_divisor", lambda e: T // T, ArgumentTypeError, "symbolic divisor"),
    Case(
        "client/intra_op_threads_str",
        lambda e: Client("cpu", intra_op_threads="2"),
        InvalidArgumentError,
        "'2'",
    ),
    Case(
        "client/intra_op_threads_zero", lambda e: Client("cpu", intra_op_threads=0), InvalidArgumentError, "0"
    ),
    Case(
        "buffer/array_no_copy_dtype",
        lambda e: np.asarray(e.bx, dtype=np.float64, copy=False),
        InvalidArgumentError,
        "needs a copy",
    ),
    Case(
        "serve/max_streams_zero", lambda e: _serve_config(max_streams=0), InvalidArgumentError, "max_streams"
    ),
    Case(
        "serve/idle_timeout_negative",
        lambda e: _serve_config(idle_timeout=-1.0),
        InvalidArgumentError,
        "idle_timeout",
    ),
    Case(
        "serve/address_scheme", lambda e: _parse_address("http://x:1", "tcp"), InvalidArgumentError, "tcp://"
    ),
    Case(
        "serve/address_no_port", lambda e: _parse_address("tcp://x", "tcp"), InvalidArgumentError, "no port"
    ),
    Case(
        "silero_compat/opset",
        lambda e: _silero_compat().load_silero_vad(opset_version=12),
        InvalidArgumentError,
        "opset_version",
    ),
    Case(
        "silero_compat/audio_not_array",
        lambda e: _silero_compat().get_speech_timestamps(object(), None),
        ArgumentTypeError,
        "Audio cannot be casted",
    ),
    Case("profiler/save_without_path", lambda e: _trace_save(), InvalidArgumentError, "no path"),
    Case(
        "plugins/register_non_plugin",
        lambda e: _register_plugin(object()),
        ArgumentTypeError,
        "CompilerPlugin",
    ),
    Case(
        "devices/compile_not_a_pair",
        lambda e: _compile_for_cpu("abc"),
        ArgumentTypeError,
        "pair (outputs, inputs)",
    ),
    Case(
        "slots/outside_pool", lambda e: e.host_step().reset_slot(9), SlotIndexError, "slot 9 is outside 0..3"
    ),
    Case("slots/negative", lambda e: e.host_step().read_slot(-1), SlotIndexError, "slot -1 is outside"),
]

TABLE = [*COMPILE, *RUN, *EXECUTE, *CLIENT, *BUFFER, *JIT, *WRAPPER, *RECURRENT, *VAD, *DEVICES, *TENSOR]


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
def test_bad_input(env: Env, case: Case) -> None:
    """The row's call raises its typed error (a JitError) naming the problem, or succeeds if valid."""
    if case.error is None:
        case.call(env)
        return
    assert issubclass(case.error, JitError)
    with pytest.raises(case.error, match=_re(case.match)) as info:
        case.call(env)
    assert isinstance(info.value, JitError)


def _re(fragment: str) -> str:
    import re

    return re.escape(fragment)


def test_table_ids_unique() -> None:
    """Every row has its own id (a copy-pasted row would hide a missing case)."""
    ids = [c.id for c in TABLE] + [f"async:{c.id}" for c in ASYNC]
    assert len(ids) == len(set(ids))


# -- async entry points: the same checks, awaited on asyncio and on trio --------------------------


async def _mux_stream_step(env: Env, chunk: Any) -> None:
    async with StreamMux(env.host_step()) as mux, mux.open_stream() as s:
        await s.step(chunk)


async def _mux_closed_stream(env: Env) -> None:
    async with StreamMux(env.host_step()) as mux:
        async with mux.open_stream() as s:
            await s.step(np.zeros(16, np.float32))
        await s.step(np.zeros(16, np.float32))


async def _mux_bad_state(env: Env) -> None:
    async with StreamMux(env.host_step()) as mux, mux.open_stream(np.zeros(3, np.float32)):
        pass


async def _recurrent_async_longer_h(env: Env) -> None:
    r = env.recurrent()
    r.state.h = np.zeros(9, np.float32)
    await r.step_async()


@attrs.frozen
class AsyncCase:
    id: str
    call: Callable[[Env], Awaitable[object]]
    error: type[JitError]
    match: str = ""


ASYNC = [
    AsyncCase(
        "execute/too_many_buffers",
        lambda e: e.loaded.execute([e.bx, e.by, e.by], {"t": 3}),
        ArgumentCountError,
        "got 3",
    ),
    AsyncCase(
        "execute/donate_out_of_range",
        lambda e: e.loaded.execute(e.pair(), {"t": 3}, donate=[5]),
        DonateIndexError,
        "5",
    ),
    AsyncCase(
        "execute/var_float", lambda e: e.loaded.execute([e.bx, e.by], {"t": 3.5}), VarBoundsError, "3.5"
    ),
    AsyncCase(
        "execute/deleted_buffer",
        lambda e: e.loaded.execute([e.deleted(), e.by], {"t": 3}),
        BufferDeletedError,
        "deleted",
    ),
    AsyncCase(
        "execute_portable/not_a_device",
        lambda e: e.loaded.execute_portable([e.bx, e.by], "cpu", {"t": 3}),
        ArgumentTypeError,
        "str",
    ),
    AsyncCase(
        "execute_sharded/other_client",
        lambda e: e.loaded.execute_sharded([e.bx, e.by], e.other.device(0), {"t": 3}),
        DeviceError,
        "another client",
    ),
    AsyncCase("buffer/ready_deleted", lambda e: e.deleted().ready(), BufferDeletedError, "deleted"),
    AsyncCase("buffer/to_numpy_deleted", lambda e: e.deleted().to_numpy(), BufferDeletedError, "deleted"),
    AsyncCase(
        "jit/aio_tensor_argument",
        lambda e: jit(lambda a: a * 2).aio(Tensor.placeholder((2,))),
        ArgumentTypeError,
        "Tensor",
    ),
    AsyncCase(
        "wrapper/execute_async_unprepared", lambda e: e.wrapper().execute_async(), NotPreparedError, "prepare"
    ),
    AsyncCase(
        "wrapper/execute_with_vars_async_float",
        lambda e: e.prepared().execute_with_vars_async({"t": 2.5}),
        VarBoundsError,
        "2.5",
    ),
    AsyncCase("recurrent/step_async_longer_h", _recurrent_async_longer_h, ShapeMismatchError, "h/c"),
    AsyncCase(
        "silero/call_async_nan",
        lambda e: e.vad().call_async(np.full(512, np.inf, np.float32)),
        AudioFormatError,
        "inf",
    ),
    AsyncCase(
        "silero/call_async_short",
        lambda e: e.vad().call_async(np.zeros(3, np.float32)),
        ShapeMismatchError,
        "512",
    ),
    AsyncCase(
        "mux/step_wrong_shape",
        lambda e: _mux_stream_step(e, np.zeros(15, np.float32)),
        ShapeMismatchError,
        "(16,)",
    ),
    AsyncCase(
        "mux/step_int_pcm", lambda e: _mux_stream_step(e, np.zeros(16, np.int16)), DTypeMismatchError, "int16"
    ),
    AsyncCase("mux/step_string", lambda e: _mux_stream_step(e, "abc"), DTypeMismatchError, "<U3"),
    AsyncCase("mux/step_after_close", _mux_closed_stream, StreamClosedError, "closed"),
    AsyncCase("mux/open_bad_state", _mux_bad_state, ShapeMismatchError, "(3,)"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("case", ASYNC, ids=[c.id for c in ASYNC])
async def test_bad_input_async(env: Env, case: AsyncCase) -> None:
    """Awaited entry points raise the same typed errors on asyncio and trio."""
    assert issubclass(case.error, JitError)
    with pytest.raises(case.error, match=_re(case.match)) as info:
        await case.call(env)
    assert isinstance(info.value, JitError)


# -- the command line -----------------------------------------------------------------------------

CLI = [
    (["demo", "--streams", "0"], "must be >= 1"),
    (["demo", "--streams", "x"], "invalid"),
    (["nonsense"], "invalid choice"),
    (["serve", "--wyoming", "http://127.0.0.1:1"], "expected a tcp:// address"),
    (["serve", "--websocket", "127.0.0.1"], "has no port"),
    (["serve", "--max-streams", "0"], "max_streams must be >= 1"),
    (["serve", "--idle-timeout", "-1"], "idle_timeout must be > 0"),
    (["serve", "--dim", "nonsense"], "--dim takes NAME=VALUE"),
    ([], "required"),
]


@pytest.mark.parametrize(("argv", "message"), CLI, ids=[" ".join(a) or "no-args" for a, _ in CLI])
def test_cli_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad command lines exit 2 (argparse's exit, or the subcommand's status) with a message
    naming the problem, no traceback."""
    from asyncjit.cli import main

    try:
        code: object = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
