"""Bad-input rows for what is built on the runtime: ``jit``, wrappers, recurrent cells, the VAD, devices.

The tables cover ``jit``, ``JitWrapper``, ``JitRecurrent``, the Silero VAD with its stream mux,
and device selection. Each is a list of ``Case`` rows (see ``bad_inputs.py``), run by
``test_bad_input`` in ``test_bad_inputs.py``.
"""

from __future__ import annotations

import math

import numpy as np
from bad_inputs import AffineJit, Case, Env, Model

import asyncjit
from asyncjit import Client, InputSpec, JitRecurrent, LstmState, Tensor, jit
from asyncjit.devices import executable_kind
from asyncjit.errors import (
    ArgumentCountError,
    ArgumentTypeError,
    AudioFormatError,
    BufferDeletedError,
    CompileError,
    DeviceError,
    DeviceNotFoundError,
    DTypeMismatchError,
    InputBufferNotFoundError,
    InvalidArgumentError,
    NotPreparedError,
    ShapeMismatchError,
    StaticArgumentError,
    VarBoundsError,
)
from asyncjit.models.silero_vad import SileroVad, vad_mux
from asyncjit.runtime._executable import pack_executable
from asyncjit.scheduler import MuxClosedError, StreamMux


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
