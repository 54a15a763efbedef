"""Bad-input rows for the compiler and runtime: ``compile``, ``run``, ``execute*``, ``Client``, ``Buffer``.

Each table is a list of ``Case`` rows (see ``bad_inputs.py``), run by ``test_bad_input`` in
``test_bad_inputs.py``; the helpers and placeholders here are the ones these rows call.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from bad_inputs import Case, Env, T

from asyncjit import Client, Tensor, Var
from asyncjit.compiler import CpuExecutable, compile
from asyncjit.errors import (
    ArgumentCountError,
    ArgumentTypeError,
    BufferDeletedError,
    ClosedError,
    CompileError,
    DeviceError,
    DonateIndexError,
    DTypeMismatchError,
    InputBufferNotFoundError,
    InvalidArgumentError,
    ShapeMismatchError,
    TensorError,
    UnsupportedDTypeError,
    VarBoundsError,
)


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
