"""The built-in device kinds compile graphs: ``cpu`` with LLVM, ``reference`` with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit import Tensor, Var
from asyncjit.runtime import Client


@pytest.fixture(scope="module")
def client() -> Client:
    c = Client("cpu,reference")
    yield c
    c.close()


def _program() -> tuple[list[Tensor], list[Tensor]]:
    t = Var("t", 1, 32)
    x = Tensor.placeholder((2, t), name="x")
    return [(x * 3.0).exp().sum(axis=1)], [x]


def test_cpu_and_reference_devices_agree(client: Client) -> None:
    """The same program compiled for each kind gives the same numbers at a var binding."""
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32) * 0.3
    results = []
    for device in client.devices():
        loaded = client.compile(_program(), device)
        (out,) = loaded.execute_blocking([client.buffer_from_host(x, device=device)], {"t": 7})
        results.append(out.to_numpy_blocking())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5)
    np.testing.assert_allclose(results[0], np.exp(3 * x.astype(np.float64)).sum(1), rtol=1e-5)


def test_serialized_cpu_plan_loads_back(client: Client) -> None:
    """LoadedExecutable.serialize() -> Client.deserialize_executable() runs the same plan."""
    loaded = client.compile(_program(), 0)
    again = client.deserialize_executable(loaded.serialize(), 0)
    x = np.ones((2, 3), np.float32)
    a = loaded.execute_blocking([client.buffer_from_host(x)], {"t": 3})[0].to_numpy_blocking()
    b = again.execute_blocking([client.buffer_from_host(x)], {"t": 3})[0].to_numpy_blocking()
    np.testing.assert_array_equal(a, b)


def test_a_program_must_be_an_outputs_inputs_pair(client: Client) -> None:
    """Anything else is a TypeError saying what a program is."""
    with pytest.raises(TypeError, match=r"pair \(outputs, inputs\)"):
        client.compile(42, 0)
