"""Checked indices (``Tensor.checked_index``, every ONNX ``Gather*``/``Scatter*`` from data): a
run whose indices fall outside their axis raises ``IndexOutOfRangeError`` on every path (the
reference, ``run``, a device's ``execute`` inline or queued, a serialized plan) instead of
clamping (gathers) or dropping (scatters) them, and the plan serves the next run as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncjit import Tensor, Var, reference
from asyncjit.compiler import compile as aj_compile
from asyncjit.errors import IndexOutOfRangeError, JitError, OnnxImportError, TensorError
from asyncjit.runtime import Client

N = Var("n", 1, 12)
INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]


def _gather_plan(index_dtype: Any = np.int64, what: str = "rows of x") -> tuple[Any, Tensor, Tensor, Tensor]:
    x = Tensor.placeholder((N, 3), np.float32, "x")
    i = Tensor.placeholder((4,), index_dtype, "i")
    y = x.gather(0, i.checked_index(x.shape[0], what)) + 1
    return aj_compile([y], [x, i]), x, i, y


def _rows(n: int) -> np.ndarray:
    return np.arange(n * 3, dtype=np.float32).reshape(n, 3)


def test_a_checked_gather_runs_in_range_and_raises_outside_naming_what_it_reads() -> None:
    exe, *_ = _gather_plan()
    x = _rows(10)
    ok = np.array([0, 9, 3, 9])
    np.testing.assert_array_equal(exe.run([x, ok], {"n": 10})[0], x[ok] + 1)
    for bad in ([0, 10, 3, 2], [-1, 0, 0, 0], [2**40, 0, 0, 0]):
        with pytest.raises(IndexOutOfRangeError, match="rows of x: 1 index is outside") as info:
            exe.run([x, np.array(bad)], {"n": 10})
        assert isinstance(info.value, IndexError) and isinstance(info.value, JitError)
    with pytest.raises(IndexOutOfRangeError, match="4 indices are outside"):
        exe.run([_rows(2), np.array([5, 6, 7, 8])], {"n": 2})  # the same indices, a shorter axis
    np.testing.assert_array_equal(
        exe.run([_rows(2), np.array([1, 0, 1, 0])], {"n": 2})[0], _rows(2)[[1, 0, 1, 0]] + 1
    )


def test_the_reference_raises_the_same_error() -> None:
    _exe, x, i, y = _gather_plan()
    np.testing.assert_array_equal(
        reference.evaluate([y], {x: _rows(5), i: np.array([4, 3, 2, 1])}, {"n": 5})[0],
        _rows(5)[[4, 3, 2, 1]] + 1,
    )
    with pytest.raises(IndexOutOfRangeError, match="rows of x"):
        reference.evaluate([y], {x: _rows(5), i: np.array([4, 3, 2, 5])}, {"n": 5})


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_integer_dtype_is_checked_by_its_own_range(dtype: Any) -> None:
    exe, *_ = _gather_plan(dtype)
    x = _rows(7)
    np.testing.assert_array_equal(
        exe.run([x, np.array([6, 0, 1, 2], dtype)], {"n": 7})[0], x[[6, 0, 1, 2]] + 1
    )
    high = np.array([7, 0, 0, np.iinfo(dtype).max], dtype)  # the type's largest value is outside too
    with pytest.raises(IndexOutOfRangeError, match="2 indices"):
        exe.run([x, high], {"n": 7})
    if np.iinfo(dtype).min < 0:
        with pytest.raises(IndexOutOfRangeError, match="1 index"):
            exe.run([x, np.array([0, 0, np.iinfo(dtype).min, 1], dtype)], {"n": 7})


def test_checked_scatter_and_take_along_axis() -> None:
    x = Tensor.placeholder((5, 2), np.float32, "x")
    i = Tensor.placeholder((3,), np.int32, "i")
    src = Tensor.placeholder((3, 2), np.float32, "src")
    j = Tensor.placeholder((5, 2), np.int64, "j")
    scattered = x.scatter(0, i.checked_index(5, "scatter rows"), src)
    taken = x.take_along_axis(j.checked_index(5, "take rows"), 0)
    exe = aj_compile([scattered, taken], [x, i, src, j])
    xv, sv = np.zeros((5, 2), np.float32), np.ones((3, 2), np.float32)
    jv = np.zeros((5, 2), np.int64)
    out = exe.run([xv, np.array([0, 4, 2], np.int32), sv, jv])
    np.testing.assert_array_equal(out[0][[0, 2, 4]], 1)
    with pytest.raises(IndexOutOfRangeError, match="scatter rows"):
        exe.run([xv, np.array([0, 5, 2], np.int32), sv, jv])
    jv[4, 1] = -1
    with pytest.raises(IndexOutOfRangeError, match="take rows"):
        exe.run([xv, np.array([0, 1, 2], np.int32), sv, jv])


def test_constant_indices_are_checked_when_the_plan_compiles() -> None:
    x = Tensor.placeholder((4, 3), np.float32, "x")
    y = x.gather(0, Tensor.const(np.array([0, 4], np.int64)).checked_index(4, "fixed rows"))
    with pytest.raises(IndexOutOfRangeError, match="fixed rows"):
        aj_compile([y], [x])
    good = x.gather(0, Tensor.const(np.array([0, 3], np.int64)).checked_index(4, "fixed rows"))
    np.testing.assert_array_equal(aj_compile([good], [x]).run([_rows(4)])[0], _rows(4)[[0, 3]])


def test_bad_arguments_are_typed() -> None:
    with pytest.raises(TensorError, match="integer"):
        Tensor.placeholder((3,), np.float32, "f").checked_index(4)


def test_a_serialized_plan_keeps_its_check() -> None:
    from asyncjit.compiler import deserialize

    exe, *_ = _gather_plan()
    again = deserialize(exe.serialize())
    x = _rows(6)
    np.testing.assert_array_equal(again.run([x, np.array([5, 4, 3, 2])], {"n": 6})[0], x[[5, 4, 3, 2]] + 1)
    with pytest.raises(IndexOutOfRangeError, match="rows of x"):
        again.run([x, np.array([6, 4, 3, 2])], {"n": 6})


@pytest.mark.anyio
@pytest.mark.parametrize("inline", ["never", "always"])
async def test_execute_on_a_device_fails_that_run_only(inline: str) -> None:
    exe, *_ = _gather_plan()
    x = _rows(10)
    with Client("cpu", inline=inline) as client:
        loaded = client.load(exe)
        for idx, ok in (([0, 9, 3, 2], True), ([0, 10, 3, 2], False), ([1, 1, 1, 1], True)):
            bufs = [client.buffer_from_host(x), client.buffer_from_host(np.array(idx))]
            out = await loaded.execute(bufs, {"n": 10})  # buffers at once; the run's error on await
            if ok:
                np.testing.assert_array_equal(await out[0].to_numpy(), x[idx] + 1)
            else:
                with pytest.raises(IndexOutOfRangeError, match="rows of x"):
                    await out[0].ready()


# -- ONNX: the Gather and Scatter family fail a run as ONNX Runtime does --------------------------
def _onnx_model(op: str, data: list[int], index: list[int], extra: dict[str, Any] | None = None) -> bytes:
    from onnx import TensorProto, helper

    ins = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, data),
        helper.make_tensor_value_info("i", TensorProto.INT64, index),
    ]
    names = ["x", "i"]
    if op.startswith("Scatter"):
        upd = index[:-1] + data[index[-1] :] if op == "ScatterND" else index
        ins.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, upd))
        names.append("u")
    node = helper.make_node(op, names, ["y"], **(extra or {}))
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


ONNX_CASES: list[tuple[str, list[int], list[int], dict[str, Any], list[Any], list[Any]]] = [
    # op, data shape, index shape, attributes, indices in range, indices out of range
    ("Gather", [5, 2], [2, 2], {"axis": 0}, [[0, 4], [-1, -5]], [[0, 5], [1, 2]]),
    ("Gather", [2, 5], [3], {"axis": 1}, [4, -5, 0], [4, -6, 0]),
    ("GatherElements", [5, 2], [2, 2], {"axis": 0}, [[0, 4], [-1, -5]], [[0, -6], [1, 2]]),
    ("GatherND", [5, 2], [2, 1], {}, [[4], [-5]], [[5], [0]]),
    ("ScatterElements", [5, 2], [2, 2], {"axis": 0}, [[0, 4], [-1, 3]], [[0, 7], [1, 2]]),
    ("ScatterND", [5, 2], [2, 1], {}, [[4], [-5]], [[4], [-6]]),
]


@pytest.mark.parametrize("case", ONNX_CASES, ids=lambda c: f"{c[0]}-axis{c[3].get('axis', 0)}")
def test_onnx_index_ops_equal_onnx_runtime_and_fail_where_it_fails(case: Any) -> None:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import asyncjit.onnx as ao

    op, data, index, attrs, good, bad = case
    model = _onnx_model(op, data, index, attrs)
    ours = ao.InferenceSession(model)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    x = rng.standard_normal(data).astype(np.float32)
    feeds = {"x": x}
    if op.startswith("Scatter"):
        feeds["u"] = rng.standard_normal(ours.get_inputs()[2].shape).astype(np.float32)
    feeds["i"] = np.array(good, np.int64)
    np.testing.assert_array_equal(ours.run(None, feeds)[0], theirs.run(None, feeds)[0])
    feeds["i"] = np.array(bad, np.int64)
    with pytest.raises(Exception):  # noqa: B017  (ONNX Runtime's own error types)
        theirs.run(None, feeds)
    with pytest.raises(IndexOutOfRangeError, match=op):
        ours.run(None, feeds)


def test_onnx_constant_gather_index_out_of_range_is_an_import_error() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import asyncjit.onnx as ao

    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 3], np.int64), "i")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(OnnxImportError, match=r"constant index is outside \[-3, 2\]"):
        ao.InferenceSession(model.SerializeToString())


# -- a property: compiled, every path, against numpy --------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(INT_DTYPES),
    st.integers(1, 12),
    st.lists(st.integers(-20, 20), min_size=0, max_size=9),
)
def test_checked_gather_equals_numpy_or_raises_where_numpy_does(dtype: Any, n: int, raw: list[int]) -> None:
    """``x[idx]`` in numpy raises ``IndexError`` for an index outside ``[-n, n)``; the checked
    gather (indices taken as they are, no wrap) raises for any outside ``[0, n)``."""
    info = np.iinfo(dtype)
    idx = np.array([min(max(v, info.min), info.max) for v in raw], dtype)
    x = Tensor.placeholder((N, 3), np.float32, "x")
    i = Tensor.placeholder((len(idx),), dtype, "i")
    y = x.gather(0, i.checked_index(x.shape[0]))
    exe = _cached(dtype, len(idx), lambda: aj_compile([y], [x, i]))
    xv = _rows(n)
    inside = bool(((idx.astype(np.int64) >= 0) & (idx.astype(np.int64) < n)).all()) if idx.size else True
    if inside:
        np.testing.assert_array_equal(exe.run([xv, idx], {"n": n})[0], xv[idx.astype(np.int64)])
    else:
        with pytest.raises(IndexOutOfRangeError):
            exe.run([xv, idx], {"n": n})


_PLANS: dict[tuple[Any, int], Any] = {}


def _cached(dtype: Any, m: int, make: Callable[[], Any]) -> Any:
    key = (np.dtype(dtype).name, m)
    if key not in _PLANS:
        _PLANS[key] = make()
    return _PLANS[key]


@pytest.mark.parametrize("ignore_index", [None, 7])
def test_onnx_nll_labels_count_from_the_end_and_fail_outside_as_onnx_runtime(
    ignore_index: int | None,
) -> None:
    """``NegativeLogLikelihoodLoss`` labels: negative ones count from the end (as ONNX Runtime's
    and the reference's gathers), ones outside ``[-C, C)`` fail the run."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    import asyncjit.onnx as ao

    attrs: dict[str, Any] = {"reduction": "none"}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    ours, theirs = ao.InferenceSession(model), ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    for labels in ([-1, 0], [-3, 2], [2, 1]):
        feeds = {"x": x, "t": np.array(labels, np.int64)}
        np.testing.assert_array_equal(ours.run(None, feeds)[0], theirs.run(None, feeds)[0])
    for labels in ([-4, 0], [3, 0]):
        feeds = {"x": x, "t": np.array(labels, np.int64)}
        with pytest.raises(Exception):  # noqa: B017  (ONNX Runtime's own error types)
            theirs.run(None, feeds)
        with pytest.raises(IndexOutOfRangeError, match="NegativeLogLikelihoodLoss"):
            ours.run(None, feeds)


def test_constant_indices_into_a_symbolic_axis_are_checked_by_each_run() -> None:
    """A constant index cannot be judged before the axis has a size: the plan compiles, and a
    run whose axis is too short for it fails (the fuzzer's find: folding it at compile time
    needed a var value and the compile failed)."""
    x = Tensor.placeholder((N, 3), np.float32, "x")
    y = x.gather(0, Tensor.const(np.array([0, 4], np.int64)).checked_index(x.shape[0], "fixed rows"))
    exe = aj_compile([y], [x])
    np.testing.assert_array_equal(exe.run([_rows(5)], {"n": 5})[0], _rows(5)[[0, 4]])
    with pytest.raises(IndexOutOfRangeError, match="fixed rows: 1 index"):
        exe.run([_rows(4)], {"n": 4})


# -- a reviewer's finds ------------------------------------------------------------------------
def _guarded_models() -> list[tuple[str, bytes, str, list[int]]]:
    """An ``If`` on data whose then-branch gathers ``x[i]`` (else -1), and a ``Loop`` that sums
    ``x[j]`` while ``j < n`` (trip count 8 > the 5 rows): ONNX Runtime never runs the gathers
    of the branch or iterations not taken, so their indices must not fail the run."""
    from onnx import TensorProto, helper, numpy_helper

    f32, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    vi = helper.make_tensor_value_info
    const = numpy_helper.from_array
    then_g = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["t"], axis=0)], "then", [], [vi("t", f32, [])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], value=const(np.array(-1.0, np.float32)))],
        "else",
        [],
        [vi("e", f32, [])],
    )
    branch = helper.make_graph(
        [helper.make_node("Less", ["i", "five"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "g", [vi("x", f32, [5]), vi("i", i64, [])], [vi("y", f32, [])],
        [const(np.array(5, np.int64), "five")],
    )  # fmt: skip
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "j"], ["xj"], axis=0),
         helper.make_node("Add", ["acc", "xj"], ["acc2"]),
         helper.make_node("Add", ["j", "one"], ["j2"]),
         helper.make_node("Less", ["j2", "n"], ["c2"])],
        "body", [vi("it", i64, []), vi("c", b, []), vi("j", i64, []), vi("acc", f32, [])],
        [vi("c2", b, []), vi("j2", i64, []), vi("acc2", f32, [])], [const(np.array(1, np.int64), "one")],
    )  # fmt: skip
    loop = helper.make_graph(
        [helper.make_node("Less", ["zero", "n"], ["c0"]),
         helper.make_node("Loop", ["trip", "c0", "zero", "facc"], ["jf", "y"], body=body)],
        "g", [vi("x", f32, [5]), vi("n", i64, [])], [vi("y", f32, [])],
        [const(np.array(8, np.int64), "trip"), const(np.array(0, np.int64), "zero"),
         const(np.array(0.0, np.float32), "facc")],
    )  # fmt: skip
    opset = [helper.make_opsetid("", 18)]
    return [
        ("If", helper.make_model(branch, opset_imports=opset).SerializeToString(), "i", [3, 7]),
        ("Loop", helper.make_model(loop, opset_imports=opset).SerializeToString(), "n", [3, 5]),
    ]


def test_onnx_gathers_in_a_branch_or_iteration_not_taken_do_not_fail_the_run() -> None:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import asyncjit.onnx as ao

    x = np.arange(5, dtype=np.float32) * 10
    for _name, model, feed, values in _guarded_models():
        ours, theirs = (
            ao.InferenceSession(model),
            ort.InferenceSession(model, providers=["CPUExecutionProvider"]),
        )
        for v in values:
            feeds = {"x": x, feed: np.array(v, np.int64)}
            np.testing.assert_array_equal(ours.run(None, feeds)[0], theirs.run(None, feeds)[0])


def test_guarded_check_counts_only_while_its_condition_holds() -> None:
    x = Tensor.placeholder((5,), np.float32, "x")
    i = Tensor.placeholder((), np.int64, "i")
    on = Tensor.placeholder((), np.bool_, "on")
    y = x.gather(0, i.reshape(1).checked_index(5, "guarded", when=on))
    exe = aj_compile([y], [x, i, on])
    xv = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(
        exe.run([xv, np.array(9), np.array(False)])[0], [4.0]
    )  # clamped, not checked
    with pytest.raises(IndexOutOfRangeError, match="guarded"):
        exe.run([xv, np.array(9), np.array(True)])
    with pytest.raises(IndexOutOfRangeError, match="guarded"):
        reference.evaluate([y], {x: xv, i: np.array(9), on: np.array(True)})


@pytest.mark.anyio
async def test_a_checked_plan_keeps_its_output_shapes_so_queued_runs_chain() -> None:
    """Only index checks among its data vars: outputs keep their shapes (no pending shape), so a
    queued output goes straight into the next plan, as without the check."""
    x = Tensor.placeholder((10, 3), np.float32, "x")
    i = Tensor.placeholder((4,), np.int64, "i")
    first = aj_compile([x.gather(0, i.checked_index(10, "rows")) + 1], [x, i])
    y = Tensor.placeholder((4, 3), np.float32, "y")
    second = aj_compile([y * 2], [y])
    with Client("cpu", inline="never") as client:
        a, b = client.load(first), client.load(second)
        bx = client.buffer_from_host(np.ones((10, 3), np.float32))
        (ya,) = await a.execute([bx, client.buffer_from_host(np.array([0, 1, 2, 3]))])
        assert type(ya.shape) is tuple and ya.shape == (4, 3)
        (yb,) = await b.execute([ya])
        np.testing.assert_array_equal(await yb.to_numpy(), np.full((4, 3), 4.0, np.float32))
        (bad,) = await a.execute([bx, client.buffer_from_host(np.array([0, 1, 2, 10]))])
        (after,) = await b.execute([bad])
        with pytest.raises(IndexOutOfRangeError, match="rows"):
            await after.ready()  # the failed run poisons what reads its output


def test_constant_indices_into_a_data_dependent_axis_are_checked_by_each_run() -> None:
    v = Tensor.placeholder((6,), np.float32, "v")
    nz = v.nonzero()  # [k, 1], k data-dependent
    rows = nz.reshape(nz.shape[0]).pad([(0, 1)])  # a gather needs an axis that cannot be empty
    picked = rows.gather(0, Tensor.const(np.array([0, 2], np.int64)).checked_index(nz.shape[0], "rows of nz"))
    exe = aj_compile([picked], [v])
    np.testing.assert_array_equal(exe.run([np.array([1, 0, 1, 1, 0, 0], np.float32)])[0], [0, 3])
    with pytest.raises(IndexOutOfRangeError, match="rows of nz"):
        exe.run([np.array([1, 0, 0, 0, 0, 1], np.float32)])


@pytest.mark.parametrize("what", ["x²", "node 'Gather_①' (Gather)", "row ½", "行", "2nd"])
def test_any_label_makes_a_valid_name(what: str) -> None:
    x = Tensor.placeholder((3,), np.float32, "x")
    i = Tensor.placeholder((2,), np.int64, "i")
    exe = aj_compile([x.gather(0, i.checked_index(3, what))], [x, i])
    with pytest.raises(IndexOutOfRangeError, match=what.replace("(", r"\(").replace(")", r"\)")):
        exe.run([np.zeros(3, np.float32), np.array([0, 3])])


def test_a_plugin_cannot_claim_an_index_check() -> None:
    from asyncjit.compiler._partition import _data_dependent

    i = Tensor.placeholder((2,), np.int64, "i")
    assert _data_dependent(i.checked_index(3).node)
    assert not _data_dependent((i + 1).node)
