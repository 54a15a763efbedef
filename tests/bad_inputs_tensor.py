"""Bad-input rows for the ``Tensor`` API and the smaller entry points, each checked at the call.

Besides the Tensor operators and methods, the table covers symbolic vars, the serve
configuration, the profiler, plugins and stream slots. Its ``Case`` rows (see ``bad_inputs.py``)
are run by ``test_bad_input`` in ``test_bad_inputs.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bad_inputs import Case, T

import asyncjit
from asyncjit import Client, Tensor, Var
from asyncjit.compiler import compile
from asyncjit.errors import (
    ArgumentTypeError,
    DimDivisionError,
    InvalidArgumentError,
    ShapeMismatchError,
    SlotIndexError,
    TensorError,
    UnsupportedDTypeError,
    VarBoundsError,
)

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
