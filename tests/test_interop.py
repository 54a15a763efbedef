"""numpy / DLPack interop of Buffers, zero-copy that says when it copied, ``exe.run`` reading vars
from input shapes, and ``jit(...).lower(x)`` with ``.as_text()`` / ``.compile()`` like JAX's."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import asyncjit
from asyncjit import Tensor, Var
from asyncjit.errors import ShapeMismatchError, VarBoundsError
from asyncjit.runtime import Client, HostBufferSemantics, host_array
from asyncjit.testing import capture_events


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("cpu") as c:
        yield c


def test_array_protocol_blocks_and_copies(client: Client) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = client.buffer_from_host(data)
    got = np.asarray(buf)
    np.testing.assert_array_equal(got, data)
    assert got.dtype == np.float32 and not np.shares_memory(got, buf.numpy_view())
    view = np.asarray(buf, copy=False)  # zero-copy, read-only
    assert np.shares_memory(view, buf.numpy_view()) and not view.flags.writeable
    np.testing.assert_array_equal(np.asarray(buf, dtype=np.float64), data.astype(np.float64))
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(buf, dtype=np.float64, copy=False)
    assert np.array(buf).sum() == data.sum()  # np.array, ufuncs and friends go through it too


def test_dlpack_shares_the_host_memory(client: Client) -> None:
    data = np.arange(10, dtype=np.int32)
    buf = client.buffer_from_host(data)
    assert buf.__dlpack_device__() == (1, 0)
    imported = np.from_dlpack(buf)
    np.testing.assert_array_equal(imported, data)
    assert np.shares_memory(imported, buf.numpy_view())


def test_a_computed_buffer_through_dlpack(client: Client) -> None:
    """An execution's output, not ready when returned, is waited for and exported."""
    t = Var("t", 1, 64)
    x = Tensor.placeholder((t,), asyncjit.float32, name="x")
    loaded = client.compile(([x * 2.0], [x]), client.device(0))
    (out,) = loaded.execute_blocking([client.buffer_from_host(np.ones(5, np.float32))], {"t": 5})
    np.testing.assert_array_equal(np.from_dlpack(out), np.full(5, 2.0, np.float32))


def test_zero_copy_aliases_or_says_it_copied(client: Client) -> None:
    S = HostBufferSemantics
    aligned = host_array((256,), np.float32)
    raw = np.zeros(257 * 4 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4  # 4 bytes past a 64-byte boundary
    unaligned = raw[start : start + 1024].view(np.float32)
    with capture_events() as events:
        alias = client.buffer_from_host(aligned, semantics=S.IMMUTABLE_ZERO_COPY)
        copy = client.buffer_from_host(unaligned, semantics=S.IMMUTABLE_ZERO_COPY)
        strided = client.buffer_from_host(aligned[::2], semantics=S.IMMUTABLE_ZERO_COPY)
    assert alias.aliases_host and not copy.aliases_host and not strided.aliases_host
    reasons = [e["reason"] for e in events if e["event"] == "buffer.copied"]
    assert len(reasons) == 2 and "not 64-byte aligned" in reasons[0] and reasons[1] == "not C-contiguous"
    np.testing.assert_array_equal(copy.to_numpy_blocking(), unaligned)


def test_run_reads_vars_from_input_shapes() -> None:
    t, b = Var("t", 1, 100), Var("b", 1, 8)
    x = Tensor.placeholder((b, t), asyncjit.float32, name="x")
    y = Tensor.placeholder((t,), asyncjit.float32, name="y")
    exe = asyncjit.compiler.compile([x * y], [x, y])
    xs, ys = np.ones((3, 7), np.float32), np.arange(7, dtype=np.float32)
    (inferred,) = exe.run([xs, ys])
    (explicit,) = exe.run([xs, ys], {"b": 3, "t": 7})
    np.testing.assert_array_equal(inferred, explicit)
    (partial,) = exe.run([xs, ys], {"b": 3})
    np.testing.assert_array_equal(partial, explicit)
    with pytest.raises(ShapeMismatchError, match=r"var 't' is 7 from input 'x' dim 1 and 6 from input 'y'"):
        exe.run([xs, ys[:6]])
    with pytest.raises(VarBoundsError):
        exe.run([np.ones((3, 101), np.float32), np.ones(101, np.float32)])


def test_lower_as_text_and_compile() -> None:
    @asyncjit.jit(dynamic={"x": {0: ("t", 1, 1000)}})
    def f(x: Tensor) -> Tensor:
        return (x * 3.0).exp()

    x = np.linspace(0, 1, 50, dtype=np.float32)
    lowered = f.lower(x)
    text = lowered.as_text()
    assert "placeholder" in text and "mul" in text and "exp" in text and "t" in text
    inputs, outputs = lowered  # still unpacks as (inputs, outputs)
    assert len(inputs) == len(outputs) == 1
    compiled = lowered.compile()
    assert "define" in compiled.as_text() and f.cache_size() == 1
    np.testing.assert_allclose(compiled(x).to_numpy_blocking(), np.exp(x * 3), rtol=1e-6)
    np.testing.assert_allclose(compiled(x[:20]).to_numpy_blocking(), np.exp(x[:20] * 3), rtol=1e-6)
    assert f.compiles == 1  # the call through f used the same plan
    f(x)
    assert f.compiles == 1
    with pytest.raises(ShapeMismatchError, match=r"compiled for other arguments: .*dtype float32 -> int32"):
        compiled(np.ones(5, np.int32))
