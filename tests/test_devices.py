"""Device kinds, compilers and deserializers (``asyncjit.devices``), and ``HostExecutable``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncjit import dtypes
from asyncjit.compiler._executable import ArgSpec, Executable
from asyncjit.devices import (
    DeviceKind,
    HostExecutable,
    device_kinds,
    executable_kind,
    get_device_kind,
    register_compiler,
    register_device_kind,
)
from asyncjit.errors import CompileError, DeviceError
from asyncjit.runtime import Client, parse_devices

F32 = dtypes.float32


def double(a: np.ndarray) -> np.ndarray:
    return a * 2


def double_plan(n: int = 4) -> HostExecutable:
    return HostExecutable.build("double", double, [ArgSpec("a", (n,), F32)], [ArgSpec("out", (n,), F32)])


def test_parse_devices() -> None:
    """Device specs: a kind, a kind with a count, several of them."""
    assert parse_devices("cpu") == [("cpu", 1)]
    assert parse_devices("cpu:2,reference") == [("cpu", 2), ("reference", 1)]
    assert parse_devices(["cpu:1", "reference:2"]) == [("cpu", 1), ("reference", 2)]
    for bad in ("cpu:0", "cpu:x", ":2", ""):
        with pytest.raises(ValueError):
            parse_devices(bad)


def test_kinds_registry() -> None:
    """``cpu`` and ``reference`` exist; unknown kinds name the known ones."""
    assert {"cpu", "reference"} <= set(device_kinds())
    with pytest.raises(DeviceError, match="registered kinds"):
        get_device_kind("martian")
    with pytest.raises(ValueError, match="already registered"):
        register_device_kind(DeviceKind("cpu", "again"))


def test_mixed_kinds_in_one_client() -> None:
    """A client holds devices of several kinds; the reference kind loads any executable."""
    with Client("cpu,reference") as c:
        assert [d.kind for d in c.devices()] == ["cpu", "reference"]
        ex = c.load(double_plan(), c.device(1))
        (y,) = ex.execute_blocking([c.buffer_from_host(np.ones(4, np.float32), 1)])
        np.testing.assert_array_equal(y.to_numpy_blocking(10), np.full(4, 2, np.float32))


def test_compile_takes_a_compiler_or_the_registered_one() -> None:
    """``Client.compile`` with ``compiler=``, with the kind's compiler, or with an Executable."""
    calls: list[tuple[Any, dict[str, Any]]] = []

    def compiler(program: Any, **options: Any) -> Executable:
        calls.append((program, options))
        return double_plan(program)

    register_device_kind(DeviceKind("testkind", "a kind with no compiler yet"), replace=True)
    with Client("testkind") as c:
        with pytest.raises(CompileError, match="register_compiler"):
            c.compile(4)
        assert c.compile(4, compiler=compiler, opt=1).name == "double"
        register_compiler("testkind", compiler)
        try:
            ex = c.compile(8)
        finally:
            register_compiler("testkind", None)
        assert ex.signature.inputs[0].shape == (8,)
        assert c.compile(double_plan()).name == "double"
    assert calls == [(4, {"opt": 1}), (8, {})]


def test_host_executable_checks_its_outputs() -> None:
    """A host function returning the wrong number or shape of outputs fails its command."""
    wrong = HostExecutable.build(
        "wrong", lambda a: (a, a), [ArgSpec("a", (4,), F32)], [ArgSpec("out", (4,), F32)]
    )
    bad_shape = HostExecutable.build(
        "bad_shape", lambda a: np.ones(5, np.float32), [ArgSpec("a", (4,), F32)], [ArgSpec("out", (4,), F32)]
    )
    with Client("reference") as c:
        x = c.buffer_from_host(np.ones(4, np.float32))
        for plan in (wrong, bad_shape):
            (y,) = c.load(plan).execute_blocking([x], inline=False)
            with pytest.raises(ValueError):
                y.block_until_ready(10)


def test_host_executable_serializes_by_reference() -> None:
    """Module-level functions pickle by name; the kind keys the deserializer."""
    plan = double_plan()
    assert executable_kind(plan) == "host"
    again = HostExecutable.deserialize(plan.serialize())
    assert again.name == "double" and again.fn is double and again.signature.inputs == plan.signature.inputs
    assert "double" in repr(again)
