"""Buffer layouts: row-major, column-major, tiled; relayout on transfer; plans state theirs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import asyncjit as aj
from asyncjit import Client, Sharding, Tensor
from asyncjit.compiler import compile as compile_graph
from asyncjit.errors import LayoutError
from asyncjit.runtime import COL_MAJOR, ROW_MAJOR, Buffer, Layout


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client("cpu:2")
    yield c
    c.close()


def _bytes(buf: Buffer) -> bytes:
    assert buf._block is not None
    return bytes(buf._block.array[: buf.nbytes])


X = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)


def test_layouts_order_the_bytes_and_reads_stay_logical(client: Client) -> None:
    row = client.buffer_from_host(X)
    col = client.buffer_from_host(X, layout="col_major")
    tiled = client.buffer_from_host(X, layout=Layout.tiled(2, 3))
    assert (row.layout, col.layout, str(tiled.layout)) == (ROW_MAJOR, COL_MAJOR, "tiled2x3")
    assert _bytes(row) == X.tobytes() and _bytes(col) == X.T.tobytes()
    tiles = [X[i : i + 2, j : j + 3] for i in (0, 2) for j in (0, 3)]
    assert _bytes(tiled) == b"".join(t.tobytes() for t in tiles)
    for buf in (row, col, tiled):
        np.testing.assert_array_equal(np.asarray(buf), X)
    np.testing.assert_array_equal(col.numpy_view(), X)  # column-major has a strided view
    assert "col_major" in repr(col)
    with pytest.raises(LayoutError, match="tiled"):
        tiled.numpy_view()


@pytest.mark.anyio
async def test_relayout_on_transfer(client: Client) -> None:
    d0, d1 = client.devices()
    row = client.buffer_from_host(X, d0)
    col = row.copy_to_device(d1, layout="col_major")
    tiled = col.copy_to_device(d0, layout=Layout.tiled(4, 2))
    back = tiled.copy_to_memory_space(d1.memory_space("pinned_host"), layout=ROW_MAJOR)
    same = col.copy_to_device(d0)  # keeps its layout: a plain copy
    assert (col.layout, tiled.layout, back.layout, same.layout) == (
        COL_MAJOR,
        Layout.tiled(4, 2),
        ROW_MAJOR,
        COL_MAJOR,
    )
    await col.ready()
    assert _bytes(col) == X.T.tobytes()
    for buf in (col, tiled, back, same):
        np.testing.assert_array_equal(await buf.to_numpy(), X)
    assert _bytes(back) == X.tobytes()


@pytest.mark.anyio
async def test_plans_take_row_major_and_say_so(client: Client) -> None:
    x = Tensor.placeholder((4, 6), aj.float32)
    loaded = client.load(compile_graph([x + 1.0], [x]))
    assert loaded.input_layouts == (ROW_MAJOR,) and loaded.output_layouts == (ROW_MAJOR,)
    col = client.buffer_from_host(X, layout=COL_MAJOR)
    with pytest.raises(LayoutError, match=r"takes row_major inputs.*col_major"):
        await loaded.execute([col])
    (out,) = await loaded.execute([col.copy_to_device(col.device, layout="row_major")])
    np.testing.assert_array_equal(await out.to_numpy(), X + 1)


def test_sharding_a_column_major_buffer(client: Client) -> None:
    col = client.buffer_from_host(X, layout="col_major")
    sx = client.device_put(col, Sharding.split(client.devices(), 1))
    np.testing.assert_array_equal(np.asarray(sx.shards[1]), X[:, 3:])
    assert all(s.layout is ROW_MAJOR for s in sx.shards)


def test_bad_layouts(client: Client) -> None:
    with pytest.raises(LayoutError, match="multiples of 4 and 4"):
        client.buffer_from_host(X, layout=Layout.tiled(4, 4))
    with pytest.raises(LayoutError, match="unknown layout"):
        client.buffer_from_host(X, layout="diagonal")
    with pytest.raises(LayoutError, match="needs a tile"):
        Layout("tiled")
    with pytest.raises(LayoutError, match="multiples"):
        client.buffer_from_host(np.zeros(6, np.float32)).copy_to_device(
            client.device(0), layout=Layout.tiled(2, 2)
        )
    assert Layout("row_major") == ROW_MAJOR
