"""``asyncjit.testing``: the conformance check passes on every built-in device kind and path."""

from __future__ import annotations

import numpy as np
import pytest

from asyncjit.runtime import Client
from asyncjit.testing import Gate, check_device_conformance, host_plan

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("inline", ["auto", "always", "never"])
async def test_conformance_on_every_kind_and_inline_policy(inline: str) -> None:
    with Client("cpu:2,reference", inline=inline) as client:  # type: ignore[arg-type]
        for dev in client.devices():
            await check_device_conformance(client, dev)
            await check_device_conformance(client, dev, rows=8)  # again: reused memory


async def test_gate_holds_a_device_until_opened() -> None:
    with Client("cpu") as client:
        gate = Gate()
        ex = client.load(host_plan("gate", gate))
        x = client.buffer_from_host(np.ones((2, 4), np.float32))
        (y,) = await ex.execute([x, x], {"t": 2}, inline=False)
        assert gate.entered.wait(10)
        assert not y.is_ready()
        gate.open()
        np.testing.assert_array_equal(await y.to_numpy(), np.ones((2, 4), np.float32))
