"""``asyncjit.onnx``: the importer's folding and errors, the session's feed checks and async runs,
the CLI. Small models are built with ``onnx.helper`` here; real ones are in test_onnx_silero.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the onnx extra)")
import onnx
from onnx import TensorProto, helper

import asyncjit.onnx as ao
from asyncjit.cli import main
from asyncjit.errors import DTypeMismatchError, InputBufferNotFoundError, ShapeMismatchError, VarBoundsError
from asyncjit.onnx import OnnxImportError, UnsupportedOpError
from asyncjit.symbolic import Var


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 18) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return m.SerializeToString()


def _reshape_by_shape_model() -> bytes:
    """y = reshape(x, [shape(x)[0], -1]) * 2: the Shape -> Gather -> Concat chain of exports."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["y"]),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
        helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("two", f, [], [2.0]),
    ]
    x = helper.make_tensor_value_info("x", f, ["batch", "T", 3])
    y = helper.make_tensor_value_info("y", f, None)
    return _model(nodes, [x], [y], inits)


def test_shape_subgraph_folds_into_symbolic_dims() -> None:
    """One plan serves every size in range: the reshape target is ``[batch, T*3]``, symbolic."""
    model = ao.load(_reshape_by_shape_model(), {"batch": (1, 4), "T": (1, 10)})
    (out,) = model.outputs
    b, t = model.vars
    assert isinstance(b, Var) and b.name == "batch"
    assert out.shape == (b, t * 3)
    sess = ao.InferenceSession(model)
    for shape in [(1, 1, 3), (4, 10, 3), (2, 5, 3)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, (x * 2).reshape(shape[0], -1))


def test_feed_errors_name_input_and_axis() -> None:
    """Wrong name, dtype, rank, size out of bounds, fixed size: typed errors; nothing converted."""
    sess = ao.InferenceSession(_reshape_by_shape_model(), {"batch": (1, 4), "T": (1, 10)})
    ok = np.zeros((2, 3, 3), np.float32)
    with pytest.raises(InputBufferNotFoundError, match="no input named 'z'"):
        sess.run(None, {"x": ok, "z": ok})
    with pytest.raises(InputBufferNotFoundError, match="'x' is missing"):
        sess.run(None, {})
    with pytest.raises(DTypeMismatchError, match="'x' expects float32, got float64"):
        sess.run(None, {"x": ok.astype(np.float64)})
    with pytest.raises(ShapeMismatchError, match="rank 3"):
        sess.run(None, {"x": ok[0]})
    with pytest.raises(VarBoundsError, match=r"input 'x' axis 1 \(T\) is 11, outside its bounds \[1, 10\]"):
        sess.run(None, {"x": np.zeros((2, 11, 3), np.float32)})
    with pytest.raises(ShapeMismatchError, match="axis 2 must be 3, got 4"):
        sess.run(None, {"x": np.zeros((2, 3, 4), np.float32)})
    with pytest.raises(InputBufferNotFoundError, match="no output named 'q'"):
        sess.run(["q"], {"x": ok})


def test_run_replays_on_the_callers_thread_per_feed_shape() -> None:
    """``run`` binds the plan once per feed shape and replays it on this thread: alternating
    shapes stay right, returned arrays are the caller's own, a memoized feed signature never
    lets another shape or dtype through, threads racing for the bound arrays get right answers,
    and a closed client refuses."""
    import threading

    from asyncjit.errors import ClosedError
    from asyncjit.runtime import Client

    client = Client("cpu")
    sess = ao.InferenceSession(_reshape_by_shape_model(), {"batch": (1, 4), "T": (1, 10)}, client=client)
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 3), (4, 10, 3), (2, 3, 3), (1, 1, 3)]]
    firsts = []
    for x in feeds:
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, (x * 2).reshape(x.shape[0], -1))
        firsts.append(y)
    firsts[0][...] = 7.0  # the caller's own array: the next run must not see or overwrite it
    (again,) = sess.run(None, {"x": feeds[0]})
    np.testing.assert_array_equal(again, (feeds[0] * 2).reshape(2, -1))
    assert not np.shares_memory(again, firsts[0])
    _, values = sess.check_feed({"x": feeds[0]})
    values["T"] = 99  # the memo hands out copies
    assert sess.check_feed({"x": feeds[0]})[1] == {"batch": 2, "T": 3}
    with pytest.raises(ShapeMismatchError, match="axis 2 must be 3, got 4"):
        sess.run(None, {"x": np.zeros((2, 3, 4), np.float32)})
    with pytest.raises(DTypeMismatchError):
        sess.run(None, {"x": feeds[0].astype(np.float64)})
    # a feed like one already run replays without the checks: any layout of the same shape,
    # outputs by name, and the checks still run for a name or shape not seen
    (by_name,) = sess.run(["y"], {"x": np.asfortranarray(feeds[0])})
    (by_name_again,) = sess.run(("y",), {"x": feeds[0][..., ::-1][..., ::-1]})
    np.testing.assert_array_equal(by_name, (feeds[0] * 2).reshape(2, -1))
    np.testing.assert_array_equal(by_name_again, by_name)
    assert not np.shares_memory(by_name, by_name_again)
    with pytest.raises(InputBufferNotFoundError, match="no output named 'z'"):
        sess.run(["z"], {"x": feeds[0]})
    with pytest.raises(InputBufferNotFoundError, match="no output named"):
        sess.run([["y"]], {"x": feeds[0]})  # type: ignore[list-item]
    with pytest.raises(InputBufferNotFoundError, match="no input named 'w'"):
        sess.run(None, {"x": feeds[0], "w": feeds[0]})
    with pytest.raises(VarBoundsError):
        sess.run(None, {"x": np.zeros((5, 3, 3), np.float32)})

    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for _ in range(40):
                x = r.standard_normal((3, 5, 3)).astype(np.float32)
                (y,) = sess.run(None, {"x": x})
                np.testing.assert_array_equal(y, (x * 2).reshape(3, -1))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and errors == []
    client.close()
    with pytest.raises(ClosedError):
        sess.run(None, {"x": feeds[0]})


def test_unbounded_dims_are_all_listed() -> None:
    with pytest.raises(OnnxImportError, match=r"x axis 0 \('batch'\), x axis 1 \('T'\)"):
        ao.load(_reshape_by_shape_model())
    with pytest.raises(OnnxImportError, match="names no symbolic input dim"):
        ao.load(_reshape_by_shape_model(), {"batch": 2, "T": 3, "Q": (1, 2)})


def test_unsupported_ops_are_all_listed_at_load() -> None:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("TfIdfVectorizer", ["a"], ["b"], name="tfidf1"),
        helper.make_node("StringNormalizer", ["b"], ["y"], name="norm"),
    ]
    data = _model(
        nodes, [helper.make_tensor_value_info("x", f, [2, 2])], [helper.make_tensor_value_info("y", f, None)]
    )
    with pytest.raises(UnsupportedOpError) as info:
        ao.load(data)
    assert {(n, op) for n, op, _ in info.value.nodes} == {
        ("tfidf1", "TfIdfVectorizer"),
        ("norm", "StringNormalizer"),
    }
    assert "tfidf1" in str(info.value) and "norm" in str(info.value)


def test_truncated_and_non_onnx_files_name_the_file(tmp_path: Path) -> None:
    good = _reshape_by_shape_model()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(OnnxImportError, match=r"cut\.onnx"):
        ao.load(cut, {"batch": 2, "T": 3})
    text = tmp_path / "notes.onnx"
    text.write_text("hello, I am not a model\n")
    with pytest.raises(OnnxImportError, match=r"notes\.onnx"):
        ao.load(text)
    with pytest.raises(OnnxImportError, match="does not exist"):
        ao.load(tmp_path / "missing.onnx")


def test_if_with_folded_condition_is_inlined_and_fixed_values_are_checked() -> None:
    """``If (sr == 16000)`` folds once ``sr`` is fixed; a feed of another ``sr`` is refused."""
    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", f, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", f, None)]
    )
    nodes = [
        helper.make_node("Equal", ["sr", "k"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    inputs = [
        helper.make_tensor_value_info("x", f, [3]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
    ]
    data = _model(
        nodes,
        inputs,
        [helper.make_tensor_value_info("y", f, None)],
        [helper.make_tensor("k", TensorProto.INT64, [], [16000])],
    )
    sess = ao.InferenceSession(data, values={"sr": 16000})
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + x)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "sr": np.array(16000)})[0], x + x)
    with pytest.raises(ValueError, match="fixed to 16000"):
        sess.run(None, {"x": x, "sr": np.array(8000)})
    sess8 = ao.InferenceSession(data, values={"sr": 8000})
    np.testing.assert_array_equal(sess8.run(None, {"x": x})[0], -x)


@pytest.mark.anyio
async def test_run_async_and_execute() -> None:
    sess = ao.InferenceSession(_reshape_by_shape_model(), {"batch": (1, 4), "T": (1, 10)})
    x = np.ones((3, 2, 3), np.float32)
    (y,) = await sess.run_async(["y"], {"x": x})
    np.testing.assert_array_equal(y, np.full((3, 6), 2.0, np.float32))
    bufs = sess.execute({"x": x})
    np.testing.assert_array_equal(await bufs["y"].to_numpy(), y)


def test_supported_ops_listed_in_docs() -> None:
    """docs/onnx.md lists exactly the ops the table lowers."""
    doc = (Path(__file__).parents[1] / "docs" / "onnx.md").read_text()
    section = doc.split("<!-- supported-ops -->")[1]
    listed = sorted(
        op.strip("` ")
        for op in section.split("<!-- /supported-ops -->")[0].replace("\n", " ").split(",")
        if op.strip()
    )
    assert listed == ao.supported_ops()


def test_cli_info_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_reshape_by_shape_model())
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x: float32[batch, T, 3]" in out and "Shape 1" in out and "unsupported: none" in out
    np.save(tmp_path / "x.npy", np.ones((2, 4, 3), np.float32))
    assert (
        main(
            [
                "run",
                str(path),
                "--dims",
                "batch=1:4",
                "T=1:8",
                "--input",
                f"x={tmp_path / 'x.npy'}",
                "--repeat",
                "2",
                "--compare-ort",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "y: float32[2, 12] min 2 max 2" in out
    assert "max abs difference 0" in out and "asyncjit/ORT" in out
    assert main(["run", str(path)]) == 2  # unbounded dims: a clear error, not a traceback
    assert "unbounded" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("...ij,...jk", [(2, 3, 4), (4, 5)]),
        ("i...,i...->...", [(3, 2, 1), (3, 1, 4)]),
        ("...ii->...i", [(2, 3, 3)]),
    ],
)
def test_einsum_ellipsis_broadcasts_like_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    """An ellipsis stands for the broadcast dims, aligned from the right (size-1 dims broadcast)."""
    from asyncjit.onnx.backend import AsyncjitBackend

    f = TensorProto.FLOAT
    names = [f"x{i}" for i in range(len(shapes))]
    data = _model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [helper.make_tensor_value_info(nm, f, s) for nm, s in zip(names, shapes, strict=True)],
        [helper.make_tensor_value_info("y", f, None)],
    )
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    model = onnx.load_from_string(data)
    for device in ("REFERENCE", "CPU"):
        (got,) = AsyncjitBackend.prepare(model, device).run(xs)
        np.testing.assert_allclose(got, np.einsum(equation, *xs), rtol=1e-5, atol=1e-6)


def test_det_pivots_and_singular_matrices() -> None:
    """Det equals numpy's, for matrices that need row swaps, a singular one and a zero column."""
    from asyncjit.onnx.backend import AsyncjitBackend

    f = TensorProto.FLOAT
    data = _model(
        [helper.make_node("Det", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f, [4, 5, 5])],
        [helper.make_tensor_value_info("y", f, None)],
    )
    x = np.random.default_rng(0).standard_normal((4, 5, 5)).astype(np.float32)
    x[0] = x[0][[4, 3, 2, 1, 0]] * np.array([[1e-3], [1], [1], [1], [1]], np.float32)  # small first pivot
    x[1, 2] = x[1, 0]  # singular
    x[2, :, 0] = 0.0  # a zero column: every pivot candidate is 0
    model = onnx.load_from_string(data)
    for device in ("REFERENCE", "CPU"):
        (got,) = AsyncjitBackend.prepare(model, device).run([x])
        np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_gemm_with_a_constant_transposed_weight(rows: int) -> None:
    """``Gemm(transB=1)`` with an initializer weight ``[N, K]`` (a PyTorch ``Linear``), ``alpha``,
    ``beta`` and a bias: equal to numpy for any batch (the weight is stored transposed at load)."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((24, 37)).astype(np.float32)
    c = rng.standard_normal(24).astype(np.float32)
    model = _model(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
        [helper.make_tensor_value_info("x", f, ["batch", 37])],
        [helper.make_tensor_value_info("y", f, None)],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(c, "c")],
    )
    sess = ao.InferenceSession(model, {"batch": (1, 64)})
    x = rng.standard_normal((rows, 37)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(got, 0.5 * (x @ w.T) + 2.0 * c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_a_filled_weight_stays_a_broadcast_constant(op: str) -> None:
    """A ``ConstantOfShape`` weight (the ``light_*`` models' placeholder weights) of 2^16 elements
    or more is imported as a broadcast view of its fill, not written out: its digest hashes the
    fill; the compiler lays it out once. Results equal numpy's on the dense weight."""
    from asyncjit.graph import toposort

    f = TensorProto.FLOAT
    if op == "Conv":
        wshape, xshape = [64, 128, 3, 3], (1, 128, 6, 6)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    else:
        wshape, xshape = [300, 256], (4, 300)
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    fill = helper.make_tensor("fill", f, [1], [0.02])
    model = _model(
        [helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=fill), node],
        [helper.make_tensor_value_info("x", f, list(xshape))],
        [helper.make_tensor_value_info("y", f, None)],
        [helper.make_tensor("wshape", TensorProto.INT64, [len(wshape)], wshape)],
    )
    m = ao.load(model)
    consts = [
        n.attrs["value"]
        for n in toposort([t.node for t in m.outputs_traced.values()])
        if n.op == "const" and n.attrs["value"].size >= 1 << 16
    ]
    assert consts and all(0 in c.strides for c in consts), [c.strides for c in consts]
    x = np.random.default_rng(1).standard_normal(xshape).astype(np.float32)
    (got,) = ao.InferenceSession(model).run(None, {"x": x})
    w = np.full(wshape, 0.02, np.float32)
    if op == "Conv":
        ort = pytest.importorskip("onnxruntime", reason="the peer this conv is checked against")
        (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    else:
        want = x @ w
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_one_step_from_a_given_state_is_one_matmul(op: str, direction: str) -> None:
    """An ``LSTM``/``RNN`` of one step whose state is an input (a streaming model feeding its
    state back) with initializer weights runs ``[x | h] @ [W^T; R^T]``, one matmul per
    direction; equal to ONNX Runtime, and a sequence length of 0 keeps the state."""
    from asyncjit.graph import toposort

    ort = pytest.importorskip("onnxruntime", reason="the peer this recurrence is checked against")
    f, dirs, gates, hid, inp = (
        TensorProto.FLOAT,
        1 + (direction == "bidirectional"),
        4 if op == "LSTM" else 1,
        16,
        12,
    )
    rng = np.random.default_rng(dirs * gates)
    w = rng.standard_normal((dirs, gates * hid, inp)).astype(np.float32) * 0.3
    r = rng.standard_normal((dirs, gates * hid, hid)).astype(np.float32) * 0.3
    b = rng.standard_normal((dirs, 2 * gates * hid)).astype(np.float32) * 0.1
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    outs = ["y", "hn", "cn"] if op == "LSTM" else ["y", "hn"]
    node = helper.make_node(
        op, ["x", "w", "r", "b", "lens", *states], outs, hidden_size=hid, direction=direction
    )
    model = _model(
        [node],
        [
            helper.make_tensor_value_info("x", f, [1, "batch", inp]),
            helper.make_tensor_value_info("lens", TensorProto.INT32, ["batch"]),
            *(helper.make_tensor_value_info(s, f, [dirs, "batch", hid]) for s in states),
        ],
        [helper.make_tensor_value_info(o, f, None) for o in outs],
        [onnx.numpy_helper.from_array(a, n) for a, n in ((w, "w"), (r, "r"), (b, "b"))],
    )
    m = ao.load(model, {"batch": (1, 8)})
    matmuls = [n for n in toposort([t.node for t in m.outputs_traced.values()]) if n.op == "matmul"]
    assert len(matmuls) == dirs
    sess = ao.InferenceSession(model, {"batch": (1, 8)})
    peer = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        feed = {
            "x": rng.standard_normal((1, batch, inp)).astype(np.float32),
            "lens": np.array([1, 0, 1][:batch], np.int32),
            **{s: rng.standard_normal((dirs, batch, hid)).astype(np.float32) for s in states},
        }
        got, want = sess.run(None, feed), peer.run(None, feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)  # Y: zeros past a length
        for i, s in enumerate(states, 1):
            live = feed["lens"] > 0
            np.testing.assert_allclose(got[i][:, live], want[i][:, live], rtol=1e-5, atol=1e-5)
            # a length of 0 keeps the initial state (ONNX Runtime writes zeros; the spec is silent)
            np.testing.assert_array_equal(got[i][:, ~live], feed[s][:, ~live])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("steps", [1, 2])
def test_batch_first_layout_reads_its_initial_states_batch_first(op: str, steps: int) -> None:
    """``layout=1`` gives ``X``, the initial states and the outputs batch first: equal to ONNX
    Runtime on the same model in ``layout=0`` (which ONNX Runtime runs) with the feeds and
    outputs transposed, for 3 rows in both directions (3 != 2 directions: a swap cannot hide)."""
    ort = pytest.importorskip("onnxruntime", reason="the peer this recurrence is checked against")
    f, hid, inp, batch, dirs = TensorProto.FLOAT, 5, 4, 3, 2
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(gates + steps)
    w = rng.standard_normal((dirs, gates * hid, inp)).astype(np.float32) * 0.4
    r = rng.standard_normal((dirs, gates * hid, hid)).astype(np.float32) * 0.4
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    outs = ["y", "hn", "cn"] if op == "LSTM" else ["y", "hn"]

    def model(layout: int) -> bytes:
        lead = (batch, steps) if layout else (steps, batch)
        node = helper.make_node(
            op,
            ["x", "w", "r", "", "", *states],
            outs,
            hidden_size=hid,
            direction="bidirectional",
            layout=layout,
        )
        shape = [batch, dirs, hid] if layout else [dirs, batch, hid]
        return _model(
            [node],
            [
                helper.make_tensor_value_info("x", f, [*lead, inp]),
                *(helper.make_tensor_value_info(s, f, shape) for s in states),
            ],
            [helper.make_tensor_value_info(o, f, None) for o in outs],
            [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(r, "r")],
        )

    x = rng.standard_normal((batch, steps, inp)).astype(np.float32)
    init = {s: rng.standard_normal((batch, dirs, hid)).astype(np.float32) for s in states}
    got = ao.InferenceSession(model(1)).run(None, {"x": x, **init})
    peer = ort.InferenceSession(model(0), providers=["CPUExecutionProvider"])
    want = peer.run(None, {"x": x.transpose(1, 0, 2), **{s: v.transpose(1, 0, 2) for s, v in init.items()}})
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-5)  # [B, T, D, H]
    for g, wv in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(g, wv.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_of_a_range_of_zero_is_scale_one() -> None:
    """All zeros (silence) have no range: scale 1 and zero point 0, as ONNX Runtime gives (the
    spec's formula divides 0 by 0)."""
    f, u8 = TensorProto.FLOAT, TensorProto.UINT8
    model = _model(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
        [helper.make_tensor_value_info("x", f, ["n"])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("y", u8), ("s", f), ("z", u8))],
    )
    sess = ao.InferenceSession(model, {"n": (1, 16)})
    y, s, z = sess.run(None, {"x": np.zeros(5, np.float32)})
    assert y.tolist() == [0] * 5 and float(s) == 1.0 and int(z) == 0
    y, s, z = sess.run(None, {"x": np.array([0.0, 1.5, -2.0], np.float32)})
    assert y.tolist() == [146, 255, 0] and np.isclose(float(s), 3.5 / 255) and int(z) == 146


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_with_empty_axes_drops_every_single_dim(opset: int) -> None:
    """An explicitly empty ``axes`` (attribute before opset 13, input from it) squeezes every
    dim of 1, as if absent: what ONNX Runtime and ONNX's reference do."""
    from onnx import AttributeProto

    f = TensorProto.FLOAT
    inits = []
    if opset >= 13:
        node = helper.make_node("Squeeze", ["x", "axes"], ["y"])
        inits = [helper.make_tensor("axes", TensorProto.INT64, [0], [])]
    else:
        node = helper.make_node("Squeeze", ["x"], ["y"])
        empty = node.attribute.add()
        empty.name, empty.type = "axes", AttributeProto.INTS
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", f, [1, 3, 1, 2])],
        [helper.make_tensor_value_info("y", f, None)],
        inits,
        opset,
    )
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)
    (y,) = ao.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(3, 2))
