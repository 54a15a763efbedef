"""Every surprising behaviour a user can hit, ranked, each shown handled by a test.

Ranked as tinygrad's ``test_jit_footguns.py`` does: silent wrong results first (the worst), then
silent slowness, then loud errors whose message must say what to do. Each test's docstring says
what a user might expect and what asyncjit does.

 1. closing over a host array bakes its value at trace time (silent stale value)
 2. holding an output buffer across steps (stale output reuse)
 3. unlisted vars keep a value left over from the previous call
 4. float64 inputs silently narrowed
 5. gather with out-of-range indices reads outside the buffer
 6. integer division by zero traps the process
 7. branching on a tensor value inside build/jit
 8. static values 1 and 1.0 sharing one compiled plan
 9. a new length recompiles every call (silent slowness)
10. wrong-size input reaches native code
11. a var out of its range reaches native code
12. writing an input view while an async execute reads it
13. reusing a recurrent wrapper after reset carries old state
14. using a buffer after delete / donation
15. an ONNX input that picks a branch, run with another value than the plan baked in
16. a float var value (2.5, 3.0) or a bool silently truncated to an int
17. ``donate=0`` or ``donate=[True]`` donating some other input, or none
18. a recurrent state replaced by one of another size between steps
19. a damaged compile-cache entry or serialized executable loaded as native code
20. unsigned ints wrapping
21. jit narrowing float64 arguments
22. a data-dependent size above its bound
23. an unbounded var without a size, or with a negative one
24. an argument refined to a shape it cannot take
"""

from __future__ import annotations

import numpy as np
import pytest

import asyncjit
from asyncjit import InputSpec, JitRecurrent, JitWrapper, LstmState, Tensor, Var, jit
from asyncjit.errors import (
    BufferDeletedError,
    DeviceError,
    ShapeMismatchError,
    VarBoundsError,
)


class Doubler(JitWrapper[None]):
    x = asyncjit.Input()
    t = asyncjit.VarSpec(1, 8)

    def build(self, model: None, x: Tensor, t: Var) -> Tensor:
        return x[:t] * 2.0


@pytest.fixture(scope="module")
def doubler() -> Doubler:
    return Doubler(None).prepare(InputSpec.f32((8,)))  # type: ignore[return-value]


def test_01_closed_over_array_is_a_constant_of_the_plan() -> None:
    """A host array read from outside the function is baked in when traced (as in JAX): later
    mutation is not seen. Pass values that change as arguments instead."""
    table = np.ones(3, np.float32)

    @jit
    def f(x: Tensor) -> Tensor:
        return x + table

    x = np.zeros(3, np.float32)
    np.testing.assert_array_equal(f(x).to_numpy_blocking(), 1)
    table[:] = 5  # not seen: the plan holds a copy
    np.testing.assert_array_equal(f(x).to_numpy_blocking(), 1)

    @jit
    def g(x: Tensor, table: Tensor) -> Tensor:
        return x + table

    np.testing.assert_array_equal(g(x, table).to_numpy_blocking(), 5)


def test_02_an_output_buffer_held_across_steps_keeps_its_values(doubler: Doubler) -> None:
    """Each execute produces fresh output buffers, so a buffer kept from step 1 still holds
    step 1's values after step 2 (no aliasing of a reused output)."""
    doubler.x_mut()[:] = 1
    doubler.execute()
    first = doubler.output()
    doubler.x_mut()[:] = 7
    doubler.execute()
    np.testing.assert_array_equal(first.to_numpy_blocking(), 2)
    np.testing.assert_array_equal(doubler.output().to_numpy_blocking(), 14)


def test_03_unlisted_vars_revert_to_their_prepare_value(doubler: Doubler) -> None:
    """execute() after execute_with_vars({"t": 3}) runs at t's upper bound, never at 3."""
    doubler.x_mut()[:] = 1
    doubler.execute_with_vars({"t": 3})
    assert doubler.output().shape == (3,)
    doubler.execute()
    assert doubler.output().shape == (8,)


def test_04_float64_inputs_to_jit_are_narrowed_to_float32() -> None:
    """As JAX does without x64: float64 arrays become float32, so the result is float32."""

    @jit
    def f(x: Tensor) -> Tensor:
        return x * 1.0

    out = f(np.array([1 / 3]))
    assert out.dtype == asyncjit.float32
    assert out.to_numpy_blocking()[0] == np.float32(1 / 3)


def test_05_gather_indices_out_of_range_are_clamped_not_read_out_of_bounds() -> None:
    """Indices are data; the native code clamps them into range instead of reading outside."""

    @jit
    def f(x: Tensor, idx: Tensor) -> Tensor:
        return x.gather(0, idx)

    x = np.arange(4, dtype=np.float32)
    out = f(x, np.array([-5, 1, 99, 3], np.int64)).to_numpy_blocking()
    np.testing.assert_array_equal(out, [0, 1, 3, 3])


def test_06_integer_division_by_zero_gives_zero_instead_of_trapping() -> None:
    """x // 0 and x % 0 on integers give 0 (native sdiv would kill the process with SIGFPE)."""

    @jit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a // b, a % b

    a = np.array([7, -7, np.iinfo(np.int32).min], np.int32)
    b = np.array([0, 0, -1], np.int32)
    q, r = f(a, b)
    np.testing.assert_array_equal(q.to_numpy_blocking()[:2], [0, 0])
    np.testing.assert_array_equal(r.to_numpy_blocking()[:2], [0, 0])


def test_07_branching_on_a_tensor_value_is_an_error_at_trace_time() -> None:
    """``if x > 0`` would bake one branch into the plan; asyncjit refuses with a TypeError that
    points to Tensor.where."""

    @jit
    def f(x: Tensor) -> Tensor:
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(TypeError, match="where"):
        f(np.ones(2, np.float32))


def test_08_static_one_and_one_point_zero_are_different_plans() -> None:
    """JAX keys 1 and 1.0 together; asyncjit keys static values by (type, value)."""

    @jit(static_argnames="k")
    def f(x: Tensor, k: object) -> Tensor:
        return x * k

    f(np.ones(1, np.float32), 1)
    f(np.ones(1, np.float32), 1.0)
    assert f.cache_size() == 2


def test_09_declared_dynamic_dims_do_not_recompile_per_length() -> None:
    """Without ``dynamic`` each new length compiles a new plan; with it, one plan serves all."""

    @jit
    def per_length(x: Tensor) -> Tensor:
        return x + 1.0

    @jit(dynamic={"x": {0: ("n", 1, 64)}})
    def bounded(x: Tensor) -> Tensor:
        return x + 1.0

    for n in (3, 4, 5):
        per_length(np.ones(n, np.float32))
        bounded(np.ones(n, np.float32))
    assert per_length.cache_size() == 3
    assert bounded.cache_size() == 1 and bounded.compiles == 1


def test_10_wrong_size_input_is_a_typed_error_before_native_code() -> None:
    """An input of the wrong shape never reaches the kernel: ShapeMismatchError names both."""
    t = Var("t", 1, 16)
    x = Tensor.placeholder((t,), name="x")
    exe = asyncjit.compiler.compile([x * 2.0], [x])
    with pytest.raises(ShapeMismatchError, match=r"input 'x'.*\(5,\).*\(6,\)"):
        exe.run([np.ones(6, np.float32)], {"t": 5})


def test_11_var_out_of_range_is_a_typed_error(doubler: Doubler) -> None:
    """t=9 for a plan bounded at 8 raises VarBoundsError instead of writing past the buffer."""
    with pytest.raises(VarBoundsError, match=r"\[1, 8\]"):
        doubler.execute_with_vars({"t": 9})


@pytest.mark.anyio
async def test_12_input_view_is_refused_while_an_async_execute_reads_it(doubler: Doubler) -> None:
    """Asking for an input view while execute_async is in flight raises DeviceError instead of
    letting the write race the kernel.

    The execution is really in flight: its input is the output of a plan held on the device by a
    ``Gate``, so the replay waits on the device queue until the test opens it.
    """
    import anyio

    from asyncjit.compiler import ArgSpec
    from asyncjit.devices import HostExecutable
    from asyncjit.testing import Gate

    original = doubler.input_buffer("x")
    dev = original.device
    gate = Gate()
    spec = [ArgSpec("x", (8,), asyncjit.float32)]
    held = dev.client.load(HostExecutable.build("held_x", gate, spec, spec, []), dev)
    (pending,) = held.execute_nowait([dev.client.buffer_from_host(np.ones(8, np.float32), dev)], inline=False)
    doubler.bind_input_buffer("x", pending)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(doubler.execute_async)
                await anyio.wait_all_tasks_blocked()  # execute_async awaits its (held) replay
                with pytest.raises(DeviceError, match="in-flight"):
                    doubler.x_mut()
                gate.open()
    finally:
        gate.open()
        doubler.bind_input_buffer("x", original)
    np.testing.assert_array_equal(doubler.output().to_numpy_blocking(), np.full(8, 2.0, np.float32))
    doubler.x_mut()[:] = 3  # allowed again once nothing is in flight


class Acc(JitWrapper[None]):
    x = asyncjit.Input()
    h = asyncjit.Input()
    c = asyncjit.Input()

    def build(self, model: None, x: Tensor, h: Tensor, c: Tensor) -> Tensor:
        return Tensor.cat([(h + x).sum(axis=1, keepdims=True), h + x, c], axis=1)

    def pack_state(self, state: LstmState) -> None:
        self.h_mut()[0] = state.h
        self.c_mut()[0] = state.c


def test_13_reset_starts_a_new_sequence() -> None:
    """After reset() the recurrent state is zero: the next step equals a fresh first step."""
    jit_ = Acc(None).prepare(InputSpec.f32((1, 2)), InputSpec.f32((1, 2)), InputSpec.f32((1, 2)))
    rnn = JitRecurrent(jit_, LstmState.zeros(2), head_len=1)

    def write(j: Acc) -> None:
        j.x_mut()[:] = 1

    first = rnn.step(write)[0]
    assert rnn.step(write)[0] == 2 * first  # state carried
    rnn.reset()
    assert rnn.step(write)[0] == first


def test_14_deleted_and_donated_buffers_raise_instead_of_reading_freed_memory() -> None:
    """A deleted buffer, or one donated to an execution, raises BufferDeletedError when used."""
    client = asyncjit.default_client()
    buf = client.buffer_from_host(np.ones(4, np.float32))
    buf.delete()
    with pytest.raises(BufferDeletedError):
        buf.to_numpy_blocking()
    x = Tensor.placeholder((4,), name="x")
    loaded = client.load(asyncjit.compiler.compile([x + 1.0], [x]))
    donated = client.buffer_from_host(np.ones(4, np.float32))
    (out,) = loaded.execute_blocking([donated], donate=[0])
    np.testing.assert_array_equal(out.to_numpy_blocking(), 2)
    with pytest.raises(BufferDeletedError):
        loaded.execute_blocking([donated])


def test_15_an_onnx_input_that_picks_a_branch_must_be_fixed_with_values() -> None:
    """An ``If`` on an input's value (Silero VAD's ``sr``) whose branches differ in shape cannot
    be one plan: the load says to fix that input with ``values=``; a feed of another value is
    then refused instead of silently running the branch baked in."""
    onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package")
    from onnx import TensorProto, helper

    import asyncjit.onnx as ao

    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["t"], axis=0)],
        "t",
        [],
        [helper.make_tensor_value_info("t", f, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "e", [], [helper.make_tensor_value_info("e", f, None)]
    )
    nodes = [
        helper.make_node("Equal", ["sr", "k"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", f, [3]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", f, None)],
        initializer=[helper.make_tensor("k", TensorProto.INT64, [], [16000])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    assert onnx is not None
    with pytest.raises(ao.OnnxImportError, match="values="):
        ao.load(data)
    sess = ao.InferenceSession(data, values={"sr": 16000})
    assert sess.run(None, {"x": np.ones(3, np.float32)})[0].shape == (6,)
    with pytest.raises(ValueError, match="fixed to 16000"):
        sess.run(None, {"x": np.ones(3, np.float32), "sr": np.array(8000)})


def test_16_float_and_bool_var_values_are_refused_not_truncated(doubler: Doubler) -> None:
    """``with_t_bound(2.5)`` used to become 2 and ``compile(fixed={"t": 2.5})`` 2; ``True`` is an
    int to Python. Each is a VarBoundsError naming the value: a length is never rounded."""
    with pytest.raises(VarBoundsError, match=r"2\.5"):
        Doubler(None).with_t_bound(2.5)  # type: ignore[arg-type]
    with pytest.raises(VarBoundsError, match="True"):
        Doubler(None).with_t_fixed(True)
    with pytest.raises(VarBoundsError, match=r"3\.0"):
        doubler.execute_with_vars({"t": 3.0})  # type: ignore[dict-item]
    x = Tensor.placeholder((Var("t", 1, 8),), name="x")
    with pytest.raises(VarBoundsError, match=r"2\.5"):
        asyncjit.compiler.compile([x * 2.0], [x], fixed={"t": 2.5})  # type: ignore[dict-item]


def test_17_donate_takes_a_list_of_input_indices() -> None:
    """``donate=0`` (meant as "input 0") used to donate nothing, ``donate=[True]`` donated input
    1: both are DonateIndexError now, as are indices out of range, and nothing is consumed."""
    from asyncjit.errors import DonateIndexError

    client = asyncjit.default_client()
    x = Tensor.placeholder((4,), name="x")
    y = Tensor.placeholder((4,), name="y")
    loaded = client.load(asyncjit.compiler.compile([x + y], [x, y]))
    a = client.buffer_from_host(np.ones(4, np.float32))
    b = client.buffer_from_host(np.ones(4, np.float32))
    for donate in (0, [True], [2], ["0"]):
        with pytest.raises(DonateIndexError):
            loaded.execute_blocking([a, b], donate=donate)  # type: ignore[arg-type]
    assert not a.is_deleted() and not b.is_deleted()
    (out,) = loaded.execute_blocking([a, b], donate=[0])
    np.testing.assert_array_equal(out.to_numpy_blocking(), 2)
    assert a.is_deleted() and not b.is_deleted()


def test_18_resized_recurrent_state_is_a_shape_error() -> None:
    """Replacing ``state.h`` by a longer array used to fail inside numpy ("could not broadcast")
    or split the output wrongly; the sizes are checked against the plan before every step."""
    jit_ = Acc(None).prepare(InputSpec.f32((1, 2)), InputSpec.f32((1, 2)), InputSpec.f32((1, 2)))
    rnn = JitRecurrent(jit_, LstmState.zeros(2), head_len=1)
    rnn.state.h = np.zeros(3, np.float32)
    with pytest.raises(ShapeMismatchError, match="h/c have 3/2 elements"):
        rnn.step()
    rnn.state.h = np.ones(2, np.float32)  # a replacement of the right size is fine
    assert rnn.step()[0] == 2.0


def test_19_damaged_object_code_is_refused_before_it_is_loaded() -> None:
    """A serialized executable (or cache entry) whose object bytes were damaged but whose
    checksum was fixed up used to crash the process in LLVM's loader; it is an ObjectCodeError."""
    import hashlib

    from asyncjit.compiler import deserialize
    from asyncjit.compiler._serialize import _DIGEST
    from asyncjit.errors import ObjectCodeError

    x = Tensor.placeholder((4,), name="x")
    exe = asyncjit.compiler.compile([x * 4.0], [x])
    blob = exe.serialize()
    obj = exe.object_code
    damaged = obj[:64] + bytes(len(obj) - 64)  # a valid ELF header, zeroed sections
    body = blob[:-_DIGEST].replace(obj, damaged)
    with pytest.raises(ObjectCodeError):
        deserialize(body + hashlib.blake2b(body, digest_size=_DIGEST).digest())


def test_20_unsigned_ints_wrap_and_refuse_negative_scalars() -> None:
    """uint8 arithmetic wraps (``0 - 1 == 255``) and a negative Python scalar next to an unsigned
    tensor is an ``OverflowError`` at record time (numpy 2's rule), not a silent 255."""
    from asyncjit.compiler import compile as aj_compile

    x = Tensor.placeholder((3,), asyncjit.uint8, "x")
    zero = np.zeros(3, np.uint8)
    (wrapped,) = aj_compile(-x, [x]).run([zero])
    assert wrapped.tolist() == [0, 0, 0]
    (under,) = aj_compile(x - Tensor.const(np.ones(3, np.uint8)), [x]).run([zero])
    assert under.tolist() == [255, 255, 255]
    with pytest.raises(OverflowError):
        _ = x + (-1)


def test_21_jit_turns_float64_into_float32_but_placeholders_keep_float64() -> None:
    """float64 is a real dtype (placeholders, Buffers, casts compute in double), but ``jit`` turns
    float64 *arguments* into float32 as JAX does without x64: ask for float64 with a placeholder."""
    from asyncjit import jit

    @jit
    def f(v: Tensor) -> Tensor:
        return v * 2

    assert f(np.ones(2)).dtype == asyncjit.float32
    p = Tensor.placeholder((2,), asyncjit.float64, "p")
    assert (p * 2).dtype == asyncjit.float64


def test_22_data_dependent_size_above_its_bound_raises_from_the_run() -> None:
    """A size computed in the graph (``nonzero()``, ``x[mask]``, ``x.prefix(count)``) larger than
    its bound cannot write past the buffer: the kernel copies at most the bound, and the run
    raises ``VarBoundsError`` naming the op (compiled plan and runtime buffers alike)."""
    from asyncjit.compiler import compile as aj_compile
    from asyncjit.errors import VarBoundsError

    x = Tensor.placeholder((64,), name="x")
    exe = aj_compile([x.nonzero(bound=8), x[x > 0].sum()], [x])
    with pytest.raises(VarBoundsError, match="nonzero computed size 64"):
        exe.run([np.ones(64, np.float32)])
    with asyncjit.runtime.Client() as client:
        outs = client.load(exe).execute_blocking([client.buffer_from_host(np.ones(64, np.float32))])
        with pytest.raises(VarBoundsError, match="nonzero"):
            outs[0].to_numpy_blocking()


def test_23_unbounded_var_needs_a_size_and_refuses_a_negative_one() -> None:
    """``Var("n", 1, None)`` has no upper bound to default to: a missing value or a negative one
    is a ``VarBoundsError`` before native code runs (never an arena sized from garbage)."""
    from asyncjit import Var
    from asyncjit.compiler import compile as aj_compile
    from asyncjit.errors import VarBoundsError

    n = Var("n", 1, None)
    x = Tensor.placeholder((n,), name="x")
    exe = aj_compile([x * 2], [x])
    with pytest.raises(VarBoundsError, match="unbounded"):
        exe.signature.var_values(None)
    with pytest.raises(VarBoundsError, match="out of its bounds"):
        exe.run([np.ones(3, np.float32)], {"n": -3})


def test_24_refining_an_argument_to_a_shape_it_cannot_take_is_an_error() -> None:
    """``refine_arguments`` with another rank, another static size, or a size outside a var's
    bounds raises a typed error naming the input and dim, never a graph that computes on a
    shape its ops were not checked for."""
    from asyncjit import Var
    from asyncjit.errors import ShapeMismatchError, VarBoundsError
    from asyncjit.passes import Graph, refine_arguments

    x = Tensor.placeholder((Var("t", 1, 64), 8), name="x")
    g = Graph.of([(x * 2).node], [x.node])
    with pytest.raises(ShapeMismatchError, match="dim 1 is static 8"):
        refine_arguments(g, {"x": (4, 16)})
    with pytest.raises(ShapeMismatchError, match="rank"):
        refine_arguments(g, {"x": (4, 8, 1)})
    with pytest.raises(VarBoundsError, match="no value of var 't'"):
        refine_arguments(g, {"x": (65, 8)})


def test_25_a_low_precision_onnx_output_buffer_holds_its_bits() -> None:
    """A bfloat16 (float8, int4...) ONNX output: ``run`` returns the ``ml_dtypes`` array, but
    ``execute``'s ``Buffer`` holds the storage bits (asyncjit has no such dtype), to be viewed;
    and a float32 feed for a bfloat16 input is refused, never rounded silently."""
    pytest.importorskip("onnx", reason="ONNX models need the onnx extra")
    import ml_dtypes
    from onnx import TensorProto, helper

    from asyncjit.errors import DTypeMismatchError
    from asyncjit.onnx import InferenceSession

    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "g",
        [vi("x", TensorProto.BFLOAT16, [2])],
        [vi("y", TensorProto.BFLOAT16, [2])],
    )
    sess = InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == ml_dtypes.bfloat16 and y.tolist() == [-1.5, 2.0]
    bits = sess.execute({"x": x})["y"].to_numpy_blocking()
    assert bits.dtype == np.uint16 and bits.view(ml_dtypes.bfloat16).tolist() == [-1.5, 2.0]
    with pytest.raises(DTypeMismatchError, match="bfloat16"):
        sess.run(None, {"x": np.array([1.5, -2.0], np.float32)})


def test_26_a_sharded_jit_that_mixes_rows_runs_whole_on_one_device_and_says_so() -> None:
    """``jit(f, in_shardings=...)`` over a function that reduces over the split axis (a batch
    mean) cannot run one shard per device without communication: it runs whole on the first
    device, gives the one-device answer, and logs ``jit.shard_fallback`` with the reason, rather
    than returning per-shard means."""
    from asyncjit import Client, Sharding, jit
    from asyncjit.testing import capture_events

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    with Client("cpu:2") as client:
        f = jit(lambda x: x - x.mean(axis=0), in_shardings=Sharding.split(client.devices(), 0))
        with capture_events() as events:
            y = f(x)
        np.testing.assert_allclose(np.asarray(y), x - x.mean(0))
        assert y.sharding.devices == (client.device(0),)
    assert [e["reason"] for e in events if e["event"] == "jit.shard_fallback"] == [
        "a reduction over the split axis"
    ]


def test_27_a_plan_refuses_a_column_major_buffer_instead_of_misreading_it() -> None:
    """Compiled plans read row-major bytes; a column-major (or tiled) buffer passed to ``execute``
    is a ``LayoutError`` that says how to relayout it, never a transposed result."""
    from asyncjit import Client
    from asyncjit.compiler import compile as aj_compile
    from asyncjit.errors import LayoutError

    x = Tensor.placeholder((2, 3), name="x")
    with Client() as client:
        loaded = client.load(aj_compile([x * 2], [x]))
        col = client.buffer_from_host(np.arange(6, dtype=np.float32).reshape(2, 3), layout="col_major")
        with pytest.raises(LayoutError, match="copy_to_device"):
            loaded.execute_blocking([col])


def test_28_a_donated_buffer_is_gone_and_forgetting_to_donate_costs_a_copy() -> None:
    """Donating an input the plan writes over hands its memory to the output: the buffer then
    raises ``DonatedBufferError`` (a ``BufferDeletedError``) instead of reading the output's data,
    and the caller's own copy made before stays as it was. Not donating keeps the input intact
    (the plan copies it first), so forgetting ``donate=`` costs a copy, never a wrong answer."""
    from asyncjit import Client
    from asyncjit.compiler import compile as aj_compile
    from asyncjit.errors import BufferDeletedError, DonatedBufferError

    x = Tensor.placeholder((4,), name="x")
    plan = aj_compile([x * 2], [x], donate=[0])
    with Client() as client:
        loaded = client.load(plan)
        buf = client.buffer_from_host(np.arange(4, dtype=np.float32))
        (kept,) = loaded.execute_blocking([buf])
        np.testing.assert_array_equal(buf.to_numpy_blocking(), [0, 1, 2, 3])
        (out,) = loaded.execute_blocking([buf], donate=[0])
        assert out.aliased
        np.testing.assert_array_equal(out.to_numpy_blocking(), [0, 2, 4, 6])
        with pytest.raises(DonatedBufferError):
            buf.to_numpy_blocking()
        with pytest.raises(BufferDeletedError):
            loaded.execute_blocking([buf])
        np.testing.assert_array_equal(kept.to_numpy_blocking(), [0, 2, 4, 6])
