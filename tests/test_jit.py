"""``asyncjit.jit``: cache keys, pytrees, bounded dynamic dims, miss reasons, sync and async calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, jit, lax
from asyncjit.errors import DTypeMismatchError, ShapeMismatchError, StaticArgumentError, VarBoundsError
from asyncjit.testing import capture_events
from asyncjit.tree import register_pytree_node


def _np(buf: Any) -> np.ndarray:
    return np.asarray(buf.to_numpy_blocking())


class ConfigBox:
    """The seed example's pytree: an array leaf (dynamic) and a scalar (static aux)."""

    def __init__(self, vec: Any, scale: Any) -> None:
        self.vec = vec
        self.scale = scale

    def step_fn(self, st: Tensor, inp: Tensor) -> Tensor:
        return (self.vec + st + Tensor.ones((self.scale,))) * inp


register_pytree_node(
    ConfigBox,
    lambda box: ((box.vec,), {"scale": box.scale}),
    lambda aux, leaves: ConfigBox(*leaves, **aux),
)


def _step_wrapper(cfg: ConfigBox, st: Tensor, inp: Tensor) -> tuple[Tensor, list[Tensor]]:
    nxt = cfg.step_fn(st, inp)
    return nxt, [nxt]


@jit
def run_scan_jit(cfg: ConfigBox) -> Any:
    body = lambda st, inp: _step_wrapper(cfg, st, inp)  # noqa: E731 - the seed's closure
    st0 = Tensor.const(np.array([0.0, 1.0], np.float32))
    seq = Tensor.const(np.array([1.0, 2.0, 3.0], np.float32))
    return lax.scan(body, st0, seq)


def _scan_numpy(vec: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    st = np.array([0.0, 1.0])
    outs = []
    for y in (1.0, 2.0, 3.0):
        st = (vec + st + np.ones(scale)) * y
        outs.append(st)
    return st, np.stack(outs)


class TestSeedCacheExample:
    def test_leaf_values_do_not_recompile_and_results_are_right(self) -> None:
        """Changing only the array leaf keeps cache_size() == 1; each result matches numpy."""
        run_scan_jit.cache_clear()
        for vec in ([1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]):
            arr = np.array(vec, np.float32)
            last, outs = run_scan_jit(ConfigBox(arr, 2))
            want_last, want_outs = _scan_numpy(arr, 2)
            np.testing.assert_allclose(_np(last), want_last, rtol=1e-6)
            np.testing.assert_allclose(_np(outs[0]), want_outs, rtol=1e-6)
            assert run_scan_jit.cache_size() == 1

    def test_scalar_aux_change_grows_the_cache(self) -> None:
        """Changing the static scale recompiles: the cache grows to 2."""
        run_scan_jit.cache_clear()
        run_scan_jit(ConfigBox(np.array([1.0, 2.0], np.float32), 2))
        with pytest.raises(ShapeMismatchError):  # ones(3) cannot broadcast with a [2] state
            run_scan_jit(ConfigBox(np.array([1.0, 2.0], np.float32), 3))
        run_scan_jit(ConfigBox(np.array([1.0, 2.0], np.float32), 1))
        assert run_scan_jit.cache_size() == 2


def test_basic_call_returns_buffers_and_caches() -> None:
    """One trace and compile per key; calls return Buffers with the right values."""

    @jit
    def f(x: Tensor) -> Tensor:
        return x * 2.0 + 1.0

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = f(x)
    assert isinstance(out, asyncjit.Buffer)
    np.testing.assert_allclose(_np(out), x * 2 + 1)
    f(x + 1)
    assert f.cache_size() == 1 and f.compiles == 1
    f(np.zeros((3, 3), np.float32))
    assert f.cache_size() == 2


def test_static_int_and_float_are_different_keys() -> None:
    """Unlike JAX, ``scale=1`` and ``scale=1.0`` compile separately."""

    @jit(static_argnames="scale")
    def f(x: Tensor, scale: Any) -> Tensor:
        return x * scale

    x = np.ones(4, np.float32)
    f(x, 1)
    f(x, 1.0)
    f(x, 1)
    assert f.cache_size() == 2


def test_unhashable_static_value_is_a_clear_error() -> None:
    """An unhashable static argument raises StaticArgumentError naming the function."""

    @jit(static_argnums=1)
    def f(x: Tensor, table: Any) -> Tensor:
        return x

    with pytest.raises(StaticArgumentError, match="unhashable"):
        f(np.ones(2, np.float32), np.arange(3))
    f(np.ones(2, np.float32), [1, 2])  # lists and dicts key by their contents
    f(np.ones(2, np.float32), [1, 2])
    assert f.cache_size() == 1


def test_miss_reason_names_what_changed() -> None:
    """Each miss logs ``jit.cache_miss`` with the differing leaf or static value."""

    @jit(static_argnames="k")
    def f(x: Tensor, k: int) -> Tensor:
        return x + k

    with capture_events() as logs:
        f(np.ones(3, np.float32), 1)
        f(np.ones(4, np.float32), 1)
        f(np.ones(4, np.float32), 2)
        f(np.ones(4, np.int32), 2)
    misses = [e["reason"] for e in logs if e["event"] == "jit.cache_miss"]
    assert misses[0] == "first call"
    assert "['x'] shape (3) -> (4)" in misses[1]
    assert "static k: 1 (int) -> 2 (int)" in misses[2]
    assert "['x'] dtype float32 -> int32" in misses[3]


def test_bounded_dynamic_dims_serve_every_length_with_one_compile() -> None:
    """``dynamic`` makes dims symbolic: 12 lengths, one compiled plan, exact results."""

    @jit(dynamic={"x": {1: ("t", 1, 3000)}})
    def f(x: Tensor) -> Tensor:
        return (x * x).sum(axis=1) / x.shape[1]

    rng = np.random.default_rng(0)
    for t in (1, 2, 3, 17, 100, 512, 999, 1000, 2047, 2999, 3000, 7):
        x = rng.standard_normal((2, t)).astype(np.float32)
        np.testing.assert_allclose(_np(f(x)), (x.astype(np.float64) ** 2).mean(1), rtol=1e-5)
    assert f.compiles == 1


def test_dynamic_dim_out_of_bounds_is_a_typed_error() -> None:
    """A length outside the declared bounds raises VarBoundsError before anything runs."""

    @jit(dynamic={"x": {0: ("n", 2, 8)}})
    def f(x: Tensor) -> Tensor:
        return x + 1.0

    with pytest.raises(VarBoundsError, match=r"outside the bounds \[2, 8\]"):
        f(np.ones(9, np.float32))
    with pytest.raises(VarBoundsError):
        f(np.ones(1, np.float32))


def test_shared_var_must_agree_across_arguments() -> None:
    """Two arguments that declare the same var must have the same size there."""

    @jit(dynamic={"a": {0: ("n", 1, 16)}, "b": {0: ("n", 1, 16)}})
    def f(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    np.testing.assert_allclose(_np(f(np.ones(5, np.float32), np.ones(5, np.float32))), 2.0)
    with pytest.raises(ShapeMismatchError):
        f(np.ones(5, np.float32), np.ones(6, np.float32))


def test_pytree_arguments_and_outputs_keep_their_structure() -> None:
    """Dict/tuple inputs flatten to leaves; outputs come back as the same structure of Buffers."""

    @jit
    def f(params: dict[str, Tensor], xs: tuple[Tensor, Tensor]) -> dict[str, Any]:
        return {"sum": xs[0] + xs[1], "scaled": (params["w"] * xs[0], None)}

    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    out = f({"w": np.full(3, 2.0, np.float32)}, (a, b))
    assert set(out) == {"sum", "scaled"} and out["scaled"][1] is None
    np.testing.assert_allclose(_np(out["sum"]), a + b)
    np.testing.assert_allclose(_np(out["scaled"][0]), 2 * a)


def test_float64_arrays_become_float32_and_other_dtypes_are_rejected() -> None:
    """float64 data is converted as JAX does; unsupported dtypes raise DTypeMismatchError."""

    @jit
    def f(x: Tensor) -> Tensor:
        return x + 1

    out = f(np.ones(2))
    assert out.dtype == asyncjit.float32
    with pytest.raises(DTypeMismatchError, match="complex64"):
        f(np.ones(2, np.complex64))


def test_python_scalars_are_dynamic_leaves() -> None:
    """A Python float argument is a dynamic 0-d float32 leaf: new values do not recompile."""

    @jit
    def f(x: Tensor, s: Tensor) -> Tensor:
        return x * s

    x = np.ones(3, np.float32)
    np.testing.assert_allclose(_np(f(x, 2.0)), 2.0)
    np.testing.assert_allclose(_np(f(x, 3.5)), 3.5)
    assert f.cache_size() == 1


def test_cache_clear_forces_a_new_compile() -> None:
    """``cache_clear`` empties the cache; the next call compiles again."""

    @jit
    def f(x: Tensor) -> Tensor:
        return -x

    f(np.ones(2, np.float32))
    f.cache_clear()
    assert f.cache_size() == 0
    f(np.ones(2, np.float32))
    assert f.compiles == 2


def test_bad_configuration_is_rejected_at_decoration() -> None:
    """Unknown static or dynamic names, and an argument both static and dynamic, fail early."""

    def f(x: Tensor, y: Tensor) -> Tensor:
        return x

    with pytest.raises(ValueError, match="not parameters"):
        jit(f, static_argnames="z")
    with pytest.raises(ValueError, match="not a parameter"):
        jit(f, dynamic={"z": {0: ("n", 1, 2)}})
    with pytest.raises(ValueError, match="both static and dynamic"):
        jit(f, static_argnames="x", dynamic={"x": {0: ("n", 1, 2)}})


def test_scan_rejects_symbolic_lengths_with_a_clear_error() -> None:
    """``lax.scan`` needs a static length and says so."""
    t = asyncjit.Var("t", 1, 10)
    xs = Tensor.placeholder((t, 2))
    with pytest.raises(asyncjit.errors.TensorError, match="symbolic length"):
        lax.scan(lambda c, x: (c + x, x), Tensor.zeros((2,)), xs)


@pytest.mark.anyio
async def test_aio_returns_ready_buffers() -> None:
    """``await f.aio(...)`` returns buffers that are already ready, on asyncio and trio."""

    @jit
    def f(x: Tensor) -> Tensor:
        return x.exp()

    x = np.linspace(-1, 1, 16, dtype=np.float32)
    out = await f.aio(x)
    assert out.is_ready()
    np.testing.assert_allclose(await out.to_numpy(), np.exp(x), rtol=1e-6)


# -- the fast path of a repeated call: the same keys as the full path -----------------------------
def _affine(x: Tensor, h: Tensor) -> Tensor:
    return x * 2.0 + h


def test_repeated_calls_with_new_values_do_not_recompile_and_see_new_values() -> None:
    f = jit(_affine)
    for i in range(5):
        x = np.full((1, 4), float(i), np.float32)
        h = np.arange(4, dtype=np.float32)[None]
        np.testing.assert_allclose(_np(f(x, h)), x * 2 + h)
    assert f.compiles == 1 and f.cache_size() == 1


@pytest.mark.parametrize(
    "second, recompiles",
    [
        (np.ones((1, 4), np.float64), False),  # float64 keys as float32, as on the full path
        (np.ones((1, 4), np.int32), True),
        (np.ones((1, 5), np.float32), True),
        (np.ones((4,), np.float32), True),
        (np.ones((4, 1), np.float32).T, False),  # a non-contiguous view of the same shape
    ],
)
def test_a_hit_after_a_hit_keys_exactly_like_the_full_path(second: np.ndarray, recompiles: bool) -> None:
    f = jit(lambda x: x + 1.0)
    first = np.zeros((1, 4), np.float32)
    f(first)
    f(first)  # now on the fast path
    got = _np(f(second))
    assert f.compiles == (2 if recompiles else 1)
    np.testing.assert_allclose(got, np.asarray(second, np.float32) + 1)
    fresh = jit(lambda x: x + 1.0)
    fresh(second)
    assert {k.leaves for k in fresh._cache} <= {k.leaves for k in f._cache}


def test_fast_path_keys_structure_statics_and_dict_keys_exactly() -> None:
    calls: list[str] = []

    def fn(tree: Any, k: Any) -> Tensor:
        calls.append(type(tree).__name__)
        leaves = asyncjit.tree.tree_leaves(tree)
        out = leaves[0] * float(k)
        for leaf in leaves[1:]:
            out = out + leaf
        return out

    f = jit(fn, static_argnames="k")
    a, b = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
    f((a, b), 1)
    f((a, b), 1)
    assert f.compiles == 1
    f([a, b], 1)  # list, not tuple
    f((a, b), 1.0)  # 1.0 is not 1
    f({"a": a, "b": b}, 1)
    f({"a": a, "c": b}, 1)  # another key name
    f({"a": a, "b": b}, 1)  # back to a cached key: a hit, no compile
    assert f.compiles == 5
    np.testing.assert_allclose(_np(f({"a": b, "b": a}, 3)), b * 3 + a)


def test_buffer_arguments_take_the_fast_path_and_key_by_device_dtype_shape() -> None:
    from asyncjit.jit import device_put

    f = jit(lambda w, x: x.matmul(w))
    params = device_put({"w": np.eye(4, dtype=np.float64) * 2})
    assert isinstance(params["w"], asyncjit.Buffer) and params["w"].dtype is asyncjit.float32
    for i in range(3):
        x = np.full((1, 4), float(i), np.float32)
        np.testing.assert_allclose(_np(f(params["w"], x)), x * 2)
    assert f.compiles == 1
    f(np.eye(4, dtype=np.float32), np.ones((1, 4), np.float32))  # a host array keys by "host"
    f(params["w"], np.ones((1, 4), np.float32))  # back to the Buffer's key: a hit
    assert f.compiles == 2 and f.cache_size() == 2


def test_weights_as_a_pytree_dict_argument() -> None:
    @jit
    def layer(params: dict[str, Any], x: Tensor) -> Tensor:
        return x.matmul(params["w"]) + params["b"]

    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 2)).astype(np.float32), "b": np.ones(2, np.float32)}
    x = rng.standard_normal((1, 3)).astype(np.float32)
    want = x @ params["w"] + params["b"]
    np.testing.assert_allclose(_np(layer(params, x)), want, rtol=1e-5)
    from asyncjit.jit import device_put

    on_device = device_put(params)
    for _ in range(2):
        np.testing.assert_allclose(_np(layer(on_device, x)), want, rtol=1e-5)
    assert layer.compiles == 2  # host leaves and Buffer leaves are different keys (device)


def test_input_arrays_may_be_refilled_at_once_even_when_calls_are_queued() -> None:
    """Inputs are copied (never aliased), so refilling the array after a call is safe."""
    for inline in (True, False, None):
        f = jit(lambda x: x * 3.0, inline=inline)
        x = np.zeros((2, 8), np.float32)
        outs = []
        for i in range(6):
            x[...] = i
            outs.append(f(x))
        for i, out in enumerate(outs):
            np.testing.assert_allclose(_np(out), np.full((2, 8), 3.0 * i))
        assert f.compiles == 1


def test_inline_call_returns_ready_buffers_on_an_idle_device() -> None:
    f = jit(lambda x: x + 1.0)
    x = np.ones(4, np.float32)
    f(x).block_until_ready()
    assert f(x).is_ready()


def test_calls_from_several_threads_see_their_own_inputs() -> None:
    import threading

    f = jit(lambda x: x * 2.0)
    f(np.zeros(16, np.float32))
    errors: list[BaseException] = []

    def worker(v: float) -> None:
        try:
            x = np.full(16, v, np.float32)
            for _ in range(200):
                np.testing.assert_allclose(_np(f(x)), 2 * x)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(float(v),)) for v in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert f.compiles == 1


def test_bounded_dims_on_the_fast_path_check_bounds_and_agreement() -> None:
    f = jit(lambda x, y: x + y, dynamic={"x": {0: ("t", 1, 8)}, "y": {0: ("t", 1, 8)}})
    for t in (3, 3, 5, 8):
        a = np.arange(t, dtype=np.float32)
        np.testing.assert_allclose(_np(f(a, a)), 2 * a)
    assert f.compiles == 1
    with pytest.raises(VarBoundsError):
        f(np.ones(9, np.float32), np.ones(9, np.float32))
    with pytest.raises(ShapeMismatchError):
        f(np.ones(3, np.float32), np.ones(4, np.float32))


@pytest.mark.anyio
async def test_aio_after_sync_calls_uses_its_own_buffers() -> None:
    f = jit(lambda x: x - 1.0)
    x = np.full(4, 5.0, np.float32)
    f(x)
    f(x)
    out = await f.aio(x)
    np.testing.assert_allclose(await out.to_numpy(), x - 1)


def test_flatten_like_agrees_with_tree_flatten_or_declines() -> None:
    from asyncjit.tree import flatten_like, tree_flatten

    a, b = np.zeros(2), np.ones(3)
    base = {"x": (a, [b, None]), "y": b}
    _, treedef = tree_flatten(base)
    same = {"x": (b, [a, None]), "y": a}
    leaves: list[Any] = []
    assert flatten_like(treedef, same, leaves)
    assert all(x is y for x, y in zip(leaves, tree_flatten(same)[0], strict=True))
    for other in (
        {"x": [a, [b, None]], "y": b},  # list for tuple
        {"x": (a, [b, a]), "y": b},  # None became a leaf
        {"x": (a, [b, None]), "z": b},  # key renamed
        {"x": (a, [b, None]), "y": b, "z": a},  # extra key
        {"x": (a, [b, None]), "y": (b,)},  # a leaf became a node
        {"x": (a, [b, None]), "y": ConfigBox(a, 1)},  # a registered node where a leaf was
    ):
        assert tree_flatten(other)[1] != treedef
        assert not flatten_like(treedef, other, [])


def test_keyword_positional_and_default_calls_share_one_key() -> None:
    def fn(x: Tensor, y: Tensor, scale: float = 2.0) -> Tensor:
        return x * scale + y

    f = jit(fn, static_argnames="scale")
    x, y = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    for out in (f(x, y), f(x, y=y), f(y=y, x=x), f(x, y, 2.0), f(x, y, scale=2.0)):
        np.testing.assert_allclose(_np(out), x * 2 + y)
    assert f.compiles == 1
    np.testing.assert_allclose(_np(f(x, y, 3.0)), x * 3 + y)
    assert f.compiles == 2
    with pytest.raises(TypeError, match="fn"):
        f(x)
