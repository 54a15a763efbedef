"""The shipped plugins' bytecode container: round trip, and every malformed form refused typed."""

from __future__ import annotations

import json
import struct

import pytest

from asyncjit.errors import DeviceError
from asyncjit.plugins._container import pack_entries, unpack_entries

MAGIC = b"AJTEST1\n"


def test_round_trip_keeps_fields_and_blobs_in_order() -> None:
    result = pack_entries(MAGIC, {"partition_0": ({"takes": [1]}, b"abc"), "partition_1": ({}, b"")})
    assert result.entries == ("partition_0", "partition_1")
    got = unpack_entries(MAGIC, result.bytecode, "test")
    assert list(got) == ["partition_0", "partition_1"]
    assert got["partition_0"][1] == b"abc" and got["partition_0"][0]["takes"] == [1]
    assert got["partition_1"][1] == b""


def _with_header(header: object, body: bytes = b"xyz", declared: int | None = None) -> bytes:
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(head) if declared is None else declared) + head + body


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"other bytes entirely", "not test-plugin bytecode"),
        (MAGIC + b"\x01", "not test-plugin bytecode"),
        (_with_header({}, declared=1 << 40), "cut short"),
        (MAGIC + struct.pack("<Q", 3) + b"{{{", "malformed header"),
        (MAGIC + struct.pack("<Q", 2) + b"\xff\xfe", "malformed header"),
        (_with_header([1, 2]), "not an object"),
        (_with_header({"e": {"offset": 0}}), "no valid blob range"),
        (_with_header({"e": {"offset": -1, "length": 2}}), "no valid blob range"),
        (_with_header({"e": {"offset": 1, "length": -1}}), "no valid blob range"),
        (_with_header({"e": {"offset": "0", "length": 1}}), "no valid blob range"),
        (_with_header({"e": {"offset": 2, "length": 5}}), "reaches byte 7 of a 3-byte body"),
    ],
)
def test_malformed_bytecode_is_a_device_error(data: bytes, match: str) -> None:
    with pytest.raises(DeviceError, match=match):
        unpack_entries(MAGIC, data, "test")


def test_a_plugin_without_compile_fails_typed_naming_itself() -> None:
    """A plugin that declares support but no compiler gives a ``CompileError`` naming it."""
    import numpy as np

    from asyncjit import Tensor, compiler, float32
    from asyncjit.errors import CompileError
    from asyncjit.plugins import Plugin

    class SupportOnly(Plugin):
        name = "support-only"
        ops = frozenset({"relu"})

        def accepts(self, node: object) -> str | None:
            return None

    x = Tensor.placeholder((4,), float32, name="x")
    with pytest.raises(CompileError, match="support-only"):
        compiler.compile([x.relu()], [x], plugins=[SupportOnly()]).run([np.ones(4, np.float32)])
