"""The bytecode container the shipped plugins share: a magic line, a JSON header naming each entry
point with its blob's offset and length (plus the plugin's own fields), then the blobs.

Bytecode comes back from caches and bundles, so ``unpack_entries`` refuses anything malformed with
a ``DeviceError`` naming the plugin, before any blob reaches a runtime.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from ..compiler._partition import CompiledResult
from ..errors import DeviceError

__all__ = ["pack_entries", "unpack_entries"]

_LEN = struct.Struct("<Q")


def pack_entries(magic: bytes, entries: Mapping[str, tuple[dict[str, Any], bytes]]) -> CompiledResult:
    """One blob per entry point, in order; each header row gets ``offset`` and ``length``."""
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for entry, (fields, blob) in entries.items():
        header[entry] = {**fields, "offset": offset, "length": len(blob)}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, sort_keys=True).encode()
    return CompiledResult(magic + _LEN.pack(len(head)) + head + b"".join(blobs), tuple(header))


def unpack_entries(magic: bytes, bytecode: bytes, plugin: str) -> dict[str, tuple[dict[str, Any], bytes]]:
    """Each entry point's header row and blob.

    Raises:
        DeviceError: not this plugin's bytecode, or a header or blob range that does not fit.
    """
    data = bytes(bytecode)
    start = len(magic) + _LEN.size
    if not data.startswith(magic) or len(data) < start:
        raise DeviceError(f"not {plugin}-plugin bytecode")
    (hlen,) = _LEN.unpack_from(data, len(magic))
    if hlen > len(data) - start:
        raise DeviceError(f"{plugin}-plugin bytecode is cut short: its header needs {hlen} bytes")
    try:
        header = json.loads(data[start : start + hlen])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeviceError(f"{plugin}-plugin bytecode has a malformed header: {exc}") from None
    body = data[start + hlen :]
    out: dict[str, tuple[dict[str, Any], bytes]] = {}
    if not isinstance(header, dict):
        raise DeviceError(f"{plugin}-plugin bytecode has a malformed header: not an object")
    for entry, row in header.items():
        offset, length = (row.get("offset"), row.get("length")) if isinstance(row, dict) else (None, None)
        if not (isinstance(offset, int) and isinstance(length, int) and 0 <= offset <= offset + length):
            raise DeviceError(f"{plugin}-plugin bytecode: entry {entry!r} has no valid blob range")
        if offset + length > len(body):
            raise DeviceError(
                f"{plugin}-plugin bytecode: entry {entry!r} reaches byte {offset + length} "
                f"of a {len(body)}-byte body"
            )
        out[entry] = (row, body[offset : offset + length])
    return out
