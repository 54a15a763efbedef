"""``Graph.dump()`` and ``asyncjit.export.stablehlo``: the text is stable, and exported modules
are parsed by MLIR and compiled and run by XLA (through jaxlib) with asyncjit's results."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.compiler import compile
from asyncjit.export import ExportError, stablehlo
from asyncjit.graph import make_node
from asyncjit.passes import Graph, optimize_graph, refine_arguments, refine_shapes

# jax runs only in the worker process (never imported here: its threads and fork hooks would
# reach later tests in this process)
if importlib.util.find_spec("jax") is None:
    pytest.skip("the jax extra (jaxlib's XLA) runs the exported modules", allow_module_level=True)

RNG = np.random.default_rng(3)


def _xla_worker(text: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """In the worker process: parse ``text`` with jaxlib's MLIR, compile it with XLA's CPU
    client and run it once."""
    import jax as jax_
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir

    jax_.config.update("jax_enable_x64", True)  # int64 arguments stay int64 in device_put
    cpu = jax_.devices("cpu")[0]
    if not text:
        return []
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        exe = cpu.client.compile_and_load(module, xc.DeviceList((cpu,)), xc.CompileOptions())
    results = exe.execute_sharded([jax_.device_put(a, cpu) for a in arrays])
    return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


def _parse_worker(text: str) -> bool:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        return bool(ir.Module.parse(text).operation.verify())


@pytest.fixture(scope="module")
def xla() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One spawned process runs XLA for this module: JAX's threads never start in the test
    process (they would make a later test's fork() warn)."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        yield pool


def _xla_run(
    pool: concurrent.futures.ProcessPoolExecutor, text: str, arrays: list[np.ndarray]
) -> list[np.ndarray]:
    return pool.submit(_xla_worker, text, arrays).result(timeout=300)


def _parses(pool: concurrent.futures.ProcessPoolExecutor, text: str) -> None:
    assert pool.submit(_parse_worker, text).result(timeout=300)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


W = _f32(8, 6)
K = _f32(4, 3, 3)
K2 = _f32(6, 2, 3, 2)  # groups=2 below: 4 input channels, 2 per group
B2 = _f32(6)

# (name, input specs, function): 54 graphs over every exported op family
CASES: list[tuple[str, list[tuple[tuple[int, ...], Any]], Callable[..., Tensor]]] = [
    ("unary", [((5, 8), np.float32)], lambda x: (x.exp() + x.sin() * x.cos()).tanh()),
    ("sqrt_log", [((4, 8), np.float32)], lambda x: (x.abs() + 1).sqrt().log() + (x.abs() + 1).rsqrt()),
    ("sigmoid_relu", [((6,), np.float32)], lambda x: x.sigmoid() + x.relu() - x.floor() + x.ceil()),
    ("erf_gelu", [((3, 5), np.float32)], lambda x: x.erf() + x.gelu() + x.gelu(approximate="tanh")),
    ("recip_neg", [((3, 4), np.float32)], lambda x: 1.0 / (x.abs() + 0.5) - x),
    ("binary", [((4, 8), np.float32), ((4, 8), np.float32)], lambda x, y: x * y - x / (y.abs() + 1)),
    (
        "minmax_pow",
        [((4, 8), np.float32), ((4, 8), np.float32)],
        lambda x, y: x.maximum(y) + x.minimum(y) + x.abs() ** 1.5,
    ),
    ("compare_where", [((4, 8), np.float32), ((4, 8), np.float32)], lambda x, y: (x > y).where(x, y * 2)),
    ("int_ops", [((6,), np.int32), ((6,), np.int32)], lambda x, y: (x * y + x - y).maximum(x)),
    (
        "int_floordiv_mod",
        [((40,), np.int32), ((40,), np.int32)],
        lambda x, y: Tensor.cat([x // y, x % y, x // 3, x % -3, (x * 1000) // -7, y % 2], 0),
    ),
    (
        "float_floordiv_mod",
        [((16,), np.float32), ((16,), np.float32)],
        lambda x, y: Tensor.cat([x // y, x % y, 1.0 / (x // y), 1.0 / (x % y)], 0),  # 1/r: zero signs
    ),
    (
        "float16_floordiv_mod",
        [((16,), np.float16), ((16,), np.float16)],
        lambda x, y: Tensor.cat([x // y, x % y, 1.0 / (x // y), 1.0 / (x % y)], 0),
    ),
    (
        "uint_floordiv_mod",
        [((12,), np.uint8), ((12,), np.uint8)],
        lambda x, y: Tensor.cat([x // y, x % y], 0),
    ),
    ("logical", [((6,), np.int32)], lambda x: ((x > 0) & (x < 3)) | ~(x == 1)),
    (
        "cast",
        [((4, 3), np.float32)],
        lambda x: (x * 4).cast(asyncjit.int32).cast(asyncjit.float32) + (x > 0).cast(asyncjit.float32),
    ),
    (
        "saturating_cast",
        [((12,), np.float32)],
        lambda x: Tensor.stack(
            [x.cast(t).cast(asyncjit.int64) for t in (asyncjit.int32, asyncjit.uint8, asyncjit.int8)]
            + [x.cast(asyncjit.uint32).cast(asyncjit.int64), x.cast(asyncjit.int64)],
            0,
        ),
    ),
    (
        "bitcast",
        [((6,), np.float32), ((6,), np.int16)],
        lambda x, y: Tensor.cat(
            [
                (x.bitcast(asyncjit.int32) + 1).bitcast(asyncjit.float32) - x,
                y.bitcast(asyncjit.float16).cast(asyncjit.float32),
            ],
            0,
        ),
    ),
    ("cast_bool", [((5,), np.int32)], lambda x: x.cast(asyncjit.bool_).cast(asyncjit.int32)),
    ("sum", [((4, 8), np.float32)], lambda x: x.sum(1) + x.mean(1)),
    ("max_min_prod", [((3, 5), np.float32)], lambda x: x.max(0) - x.min(0) + (x * 0.5 + 1).prod(0)),
    ("int_reduce", [((3, 5), np.int32)], lambda x: x.sum(0) * x.max(1).sum()),
    ("matmul", [((5, 8), np.float32)], lambda x: (x @ Tensor.const(W)).tanh()),
    ("batched_matmul", [((2, 3, 4), np.float32), ((2, 4, 5), np.float32)], lambda x, y: x @ y),
    ("reshape_permute", [((4, 6), np.float32)], lambda x: x.reshape(2, 12).permute(1, 0) * 2),
    ("expand", [((4, 1), np.float32)], lambda x: x + Tensor.const(_f32(1, 5))),
    ("slice", [((8, 6), np.float32)], lambda x: x[1:7:2, ::3] + 1),
    ("pad", [((3, 4), np.float32)], lambda x: x.pad([(1, 2), (0, 1)], value=-1.5)),
    (
        "reflect_edge_pad",
        [((3, 4, 5), np.float32)],
        lambda x: (
            x.pad([(2, 1), (0, 3), (1, 1)], mode="reflect") * 2 + x.pad([(1, 2), (3, 0), (2, 0)], mode="edge")
        ),
    ),
    ("int_edge_pad", [((2, 3), np.int32)], lambda x: x.pad([(1, 1), (2, 2)], mode="edge")),
    ("cat", [((3, 4), np.float32), ((2, 4), np.float32)], lambda x, y: Tensor.cat([x, y], 0)),
    ("gather", [((6, 3), np.float32), ((4,), np.int32)], lambda x, i: x.gather(0, i)),
    ("arange", [((5,), np.float32)], lambda x: x + Tensor.arange(5, asyncjit.float32)),
    (
        "argmax_argmin_ties",
        [((5, 7), np.float32)],
        lambda x: Tensor.cat(
            [
                x.argmax(1, keepdims=True),
                x.argmin(1, keepdims=True),
                x.argmax(1, keepdims=True, last=True),
                x.argmin(1, keepdims=True, last=True),
                x.argmax(0, keepdims=True).permute(1, 0)[:5],
            ],
            1,
        ),
    ),
    (
        "int_argmax_ties",
        [((6, 5), np.int32)],
        lambda x: Tensor.stack([x.argmax(0), x.argmin(0, last=True), x.argmin(1)[:5]], 0),
    ),
    (
        "topk_ties",
        [((4, 9), np.float32)],
        lambda x: Tensor.cat([x.topk(5, 1)[1], x.topk(6, 1, largest=False)[1]], 1),
    ),
    ("int_topk_ties", [((7, 3), np.int32)], lambda x: x.topk(4, 0)[1] * 10 + x.topk(4, 0, largest=False)[1]),
    (
        "take_along_axis",
        [((4, 6), np.float32), ((4, 3), np.int32)],
        lambda x, i: (
            x.take_along_axis(i, 1) + x.permute(1, 0).take_along_axis(i.permute(1, 0), 0).permute(1, 0)
        ),
    ),
    (
        "take_along_axis_uint64",  # an index past 2**63 - 1 is read by its bits: negative, clamped to 0
        [((2, 5), np.float32), ((2, 3), np.uint64)],
        lambda x, i: x.take_along_axis(i, 1),
    ),
    ("topk_values", [((3, 8), np.float32)], lambda x: x.topk(3, 1)[0] - x.topk(2, 0, largest=False)[0].sum()),
    (
        "scatter",
        [((5, 3), np.float32), ((7,), np.int32), ((7, 3), np.float32)],
        lambda x, i, s: x.scatter(0, i, s),
    ),
    (
        "scatter_reduce",
        [((3, 6), np.float32), ((8,), np.int64), ((3, 8), np.float32)],
        lambda x, i, s: Tensor.cat(
            [x.scatter(1, i, s, reduce=r) for r in ("add", "mul", "max", "min")] + [x.scatter(1, i, s)], 0
        ),
    ),
    (
        "int_scatter",
        [((6,), np.int32), ((9,), np.uint8), ((9,), np.int32)],
        lambda x, i, s: Tensor.stack([x.scatter(0, i, s), x.scatter(0, i, s, reduce="add")], 0),
    ),
    (
        "nonzero_size",
        [((3, 4), np.float32)],
        lambda x: Tensor.cat(
            [x.relu().nonzero(size=4, fill_value=-1)[0], (x > 0.5).nonzero(size=9, fill_value=7)[0]], 0
        ),
    ),
    (
        "int_nonzero_size",
        [((11,), np.int32)],
        lambda x: Tensor.cat([x.nonzero(size=14)[0], x.nonzero(size=3)[0]], 0),
    ),
    ("conv1d", [((2, 3, 10), np.float32)], lambda x: x.conv1d(Tensor.const(K), padding=1)),
    (
        "conv2d",
        [((1, 4, 6, 7), np.float32)],
        lambda x: x.conv(Tensor.const(K2), Tensor.const(B2), strides=[1, 2], pads=[(1, 0), (1, 1)], groups=2),
    ),
    (  # the layout the compiler's channels-last pass gives convs: [N, H, W, C] in and out
        "conv2d_channels_last",
        [((1, 6, 7, 4), np.float32)],
        lambda x: Tensor(
            make_node(
                "conv",
                (x.node, Tensor.const(K2).node, Tensor.const(B2).node),
                strides=(1, 2),
                pads=((1, 0), (1, 1)),
                dilations=(1, 1),
                groups=2,
                channels_last_in=True,
                channels_last_out=True,
            )
        ),
    ),
    (
        "max_pool",
        [((1, 2, 7, 6), np.float32)],
        lambda x: x.max_pool([3, 2], strides=[2, 2], pads=[(1, 1), (0, 1)]),
    ),
    (
        "ceil_max_pool",
        [((1, 2, 7, 6), np.float32)],
        lambda x: x.max_pool([3, 2], strides=[2, 2], pads=[(1, 0), (0, 1)], ceil_mode=True),
    ),
    ("int_max_pool", [((2, 1, 10), np.int32)], lambda x: x.max_pool([3], strides=[2], ceil_mode=True)),
    (
        "avg_pool",
        [((2, 3, 7, 6), np.float32)],
        lambda x: (
            x.avg_pool([3, 2], strides=[2, 1], pads=[(1, 1), (0, 1)])
            + x.avg_pool([3, 2], strides=[2, 1], pads=[(1, 1), (0, 1)], count_include_pad=True)
        ),
    ),
    (
        "avg_pool_ceil",
        [((1, 2, 8, 7), np.float32)],
        lambda x: Tensor.cat(
            [
                x.avg_pool([3, 3], strides=[2, 2], pads=[(0, 0), (1, 0)], ceil_mode=True),
                x.avg_pool(
                    [2, 3],
                    strides=[2, 2],
                    pads=[(0, 0), (0, 1)],
                    dilations=[2, 1],
                    ceil_mode=True,
                    count_include_pad=True,
                ),
            ],
            1,
        ),
    ),
    (
        "float16_pool_cumsum",
        [((1, 2, 6, 5), np.float16)],
        lambda x: Tensor.cat(
            [
                x.avg_pool([2, 2], strides=[2, 2], pads=[(1, 0), (0, 0)], ceil_mode=True).reshape(-1),
                x.max_pool([2, 3], strides=[2, 2], ceil_mode=True).reshape(-1),
                x.cumsum(3, exclusive=True).reshape(-1),
                x.cumsum(2).reshape(-1),
            ],
            0,
        ),
    ),
    ("cumsum", [((3, 6), np.float32)], lambda x: x.cumsum(1) + x.cumsum(0, reverse=True)),
    (
        "exclusive_cumsum",
        [((3, 6), np.float32)],
        lambda x: x.cumsum(1, exclusive=True) + x.cumsum(0, exclusive=True, reverse=True) * 2,
    ),
    (
        "int_exclusive_cumsum",
        [((4, 5), np.int32)],
        lambda x: x.cumsum(1, exclusive=True, reverse=True) - x.cumsum(0, exclusive=True),
    ),
]


def _feed(specs: list[tuple[tuple[int, ...], Any]], name: str) -> list[np.ndarray]:
    out = []
    for shape, dtype in specs:
        if name in ("gather", "take_along_axis") and np.dtype(dtype).kind == "i":
            out.append(RNG.integers(-2, 8, shape).astype(dtype))  # out of range: clamped in both
        elif np.dtype(dtype).kind in "iu" or dtype == np.float16:  # negative ints wrap in uints;
            out.append(RNG.integers(-4, 5, shape).astype(dtype))  # float16 sums of these are exact
        else:
            out.append(_f32(*shape))
    if name == "take_along_axis_uint64":
        out[1][:] = np.array([[2**63, 3, 2**64 - 1], [7, 2**63 + 5, 1]], np.uint64)
    if "scatter" in name:  # repeated, negative and past-the-end indices (uint8: 255 and 252)
        out[1][:] = RNG.permutation(np.resize(np.array([0, 2, 2, -1, 2, 9, 0, -4, 1], np.int64), len(out[1])))
        out[1] = out[1].astype(specs[1][1])
    if name.endswith("_ties"):  # few distinct values (ties); float rows with NaNs, one all NaN
        out = [np.round(RNG.integers(-2, 3, a.shape) * 0.5, 1).astype(a.dtype) for a in out]
        if out[0].dtype.kind == "f":
            out[0][0, :] = np.nan
            out[0][1, [1, 4]] = np.nan
            out[0][2, -1] = np.nan
            out[0][3, 2] = np.inf
    if name == "saturating_cast":  # NaN, infinities and values past each int's range
        out[0][:] = [np.nan, np.inf, -np.inf, 1e10, -1e10, 3e9, -3e9, 255.7, -0.7, 127.5, -128.9, 2.5]
    if name.startswith("float") and "floordiv" in name:  # signs, zeros, inf, NaN, quotients to snap
        out[0][:] = [
            7.5,
            -7.5,
            7.5,
            -7.5,
            1.0,
            0.0,
            -0.0,
            5,
            -5,
            np.inf,
            np.nan,
            3,
            1e-3,
            -2,
            9.4012299,
            -4364.3525,
        ]
        out[1][:] = [2, 2, -2, -2, 0.1, 3, -3, np.inf, np.inf, 2, 1, 0, 3, -0.0, -0.10365402, -1.2404418]
    if name == "int_floordiv_mod":  # INT_MIN // -1 wraps, INT_MIN % -1 is 0; by zero gives 0
        out[0][:3] = np.iinfo(np.int32).min
        out[1][:3] = [-1, 0, 3]
    return out


@pytest.mark.parametrize(("name", "specs", "fn"), CASES, ids=[c[0] for c in CASES])
def test_exported_module_runs_on_xla_like_asyncjit(
    xla: concurrent.futures.ProcessPoolExecutor,
    name: str,
    specs: list[tuple[tuple[int, ...], Any]],
    fn: Callable[..., Tensor],
) -> None:
    """Each graph, exported and run by XLA, equals the compiled asyncjit plan."""
    ins = [Tensor.placeholder(shape, dtype, name=f"in{k}") for k, (shape, dtype) in enumerate(specs)]
    out = fn(*ins)
    feed = _feed(specs, name)
    (want,) = compile([out], ins).run(feed)
    graph = optimize_graph(Graph.of([out.node], [i.node for i in ins]))
    (got,) = _xla_run(xla, stablehlo(graph), feed)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_bounded_dims_export_as_stablehlo_bounds_and_refine_to_static(
    xla: concurrent.futures.ProcessPoolExecutor,
) -> None:
    """A graph over ``t <= 4096`` exports with ``#stablehlo.bounds`` (valid MLIR); refined to
    ``t = 16`` it is static, and XLA runs it with asyncjit's result."""
    t = Var("t", 1, 4096)
    x = Tensor.placeholder((t, 512), name="x")
    y = (x + 1).tanh().sum(1)
    g = Graph.of([y.node], [x.node])
    text = stablehlo(g)
    assert "tensor<?x512xf32, #stablehlo.bounds<4096, ?>>" in text
    assert "dynamic_broadcast_in_dim" in text and "get_dimension_size" in text
    _parses(xla, text)
    u = Var("u", 1, None)
    xu = Tensor.placeholder((u, 4), name="xu")
    unbounded = stablehlo(Graph.of([(xu * 2).node], [xu.node]))
    assert "tensor<?x4xf32>" in unbounded and "bounds" not in unbounded
    _parses(xla, unbounded)
    static = refine_shapes(refine_arguments(g, {"x": (16, 512)}))
    xv = _f32(16, 512)
    (want,) = compile([y], [x]).run([xv])
    (got,) = _xla_run(xla, stablehlo(optimize_graph(static)), [xv])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_elementwise_and_window_ops_export_over_a_bounded_dim(
    xla: concurrent.futures.ProcessPoolExecutor,
) -> None:
    """Integer ``//`` and ``%`` broadcast their constants over a bounded dim; pools and
    inclusive cumsums keep a bounded batch (average and ceil-mode windows over static axes, max
    pools over bounded ones too): valid MLIR."""
    t = Var("t", 1, 64)
    x = Tensor.placeholder((t,), asyncjit.int32, name="x")
    y = Tensor.placeholder((t,), asyncjit.int32, name="y")
    text = stablehlo(optimize_graph(Graph.of([(x // y + x % y).node], [x.node, y.node])))
    assert "dynamic_broadcast_in_dim" in text and '"stablehlo.remainder"' in text
    _parses(xla, text)
    im = Tensor.placeholder((t, 2, 6, 5), name="im")
    outs = [im.max_pool([2, 2], ceil_mode=True), im.avg_pool([3, 2], pads=[(1, 1), (0, 0)]), im.cumsum(3)]
    s = Var("s", 4, 32)  # a max pool without ceil_mode needs no static spatial size
    seq = Tensor.placeholder((t, 2, s), name="seq")
    outs.append(seq.max_pool([3], strides=[2], pads=[(1, 1)]))
    text = stablehlo(optimize_graph(Graph.of([o.node for o in outs], [im.node, seq.node])))
    assert "#stablehlo.bounds<64, ?, ?, ?>" in text and "dynamic_broadcast_in_dim" in text
    _parses(xla, text)


def test_ops_without_a_stablehlo_form_raise_export_error() -> None:
    """Data-dependent sizes are ExportErrors naming the op and saying why."""
    f = Tensor.placeholder((4,), name="f")
    with pytest.raises(ExportError, match=r"'prefix' is not exported: its output dim is data-dependent"):
        stablehlo(Graph.of([f.prefix((f > 0).cast(asyncjit.int64).sum()).node], [f.node]))
    with pytest.raises(ExportError, match="'prefix'"):
        stablehlo(Graph.of([f[f > 0].node], [f.node]))
    with pytest.raises(ExportError, match="'prefix'"):
        stablehlo(Graph.of([f.nonzero().node], [f.node]))


def test_dump_is_stable_and_shows_bounds() -> None:
    """Two graphs built the same way dump to the same text, with types and bounds."""

    def build() -> str:
        t = Var("t", 1, 4096)
        x = Tensor.placeholder((t, 512), name="x")
        return Graph.of([(x * 2).sum(1).node], [x.node]).dump()

    text = build()
    assert text == build()
    assert "%x: tensor<?x512xf32, bounds=[4096, -]> (t, 512)" in text
    assert "var t in [1, 4096]" in text and "return %" in text
