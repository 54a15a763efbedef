"""The serialized form of a ``CpuExecutable``: versioned, checksummed, no pickles.

Layout: ``MAGIC``, a ``<IQQQ`` header (format version, metadata length, object length, constants
length), JSON metadata (signature with symbolic dims through ``symbolic.to_json``, argument layout,
kernel names, the target key, ...), the object code, the constants' raw bytes, and a BLAKE2b
checksum of everything before it. Object code only runs on the machine kind that produced it, so
``deserialize`` refuses a different target key instead of risking illegal instructions.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import numpy as np

from ..codegen._module import ArgLayout
from ..codegen._target import host_target_key
from ..dtypes import from_numpy
from ..errors import CompileError
from ..symbolic import Var, from_json, to_json
from ._cache import load_code
from ._cost import KernelInfo
from ._cpu import CpuExecutable
from ._executable import ArgSpec, Signature

__all__ = ["FORMAT_VERSION", "MAGIC", "deserialize", "serialize_cpu"]

MAGIC = b"AJITEXE\n"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<IQQQ")
_DIGEST = 32


def _spec(a: ArgSpec) -> dict[str, Any]:
    return {"name": a.name, "shape": [to_json(d) for d in a.shape], "dtype": a.dtype.name}


def _unspec(d: dict[str, Any]) -> ArgSpec:
    return ArgSpec(str(d["name"]), tuple(from_json(x) for x in d["shape"]), from_numpy(d["dtype"]))


def serialize_cpu(exe: CpuExecutable) -> bytes:
    sig = exe.signature
    consts = [np.asarray(c, order="C") for c in exe.consts]  # 0-d stays 0-d
    meta = {
        "name": exe.name,
        "inputs": [_spec(a) for a in sig.inputs],
        "outputs": [_spec(a) for a in sig.outputs],
        "vars": [[v.name, v.min, v.max] for v in sig.vars],
        "layout": [exe.layout.n_inputs, exe.layout.n_outputs, exe.layout.n_consts, exe.layout.n_vars],
        "arena_bytes": exe.arena_bytes,
        "kernels": list(exe.kernel_names),
        "kernel_costs": [[k.kind, to_json(k.bytes_expr), to_json(k.flops_expr)] for k in exe.kernels],
        "fixed": exe.fixed,
        "code_key": exe.code_key,
        "target": list(host_target_key()),
        "consts": [{"dtype": c.dtype.str, "shape": list(c.shape), "nbytes": c.nbytes} for c in consts],
        "flops": exe.flops_estimate,
        "ir_text": exe.ir_text,
    }
    mb = json.dumps(meta, sort_keys=True).encode()
    cb = b"".join(c.tobytes() for c in consts)
    body = (
        MAGIC + _HEAD.pack(FORMAT_VERSION, len(mb), len(exe.object_code), len(cb)) + mb + exe.object_code + cb
    )
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def deserialize(data: bytes) -> CpuExecutable:
    """Rebuild a ``CpuExecutable`` from ``serialize()`` output and load its code.

    Raises:
        CompileError: not an asyncjit executable, another format version, corrupted, or compiled
            for a different CPU/LLVM (the object code could not run safely here).
    """
    data = bytes(data)
    pre = len(MAGIC) + _HEAD.size
    if len(data) < pre + _DIGEST or not data.startswith(MAGIC):
        raise CompileError("not a serialized asyncjit executable (bad magic or truncated)")
    version, mlen, olen, clen = _HEAD.unpack_from(data, len(MAGIC))
    if version != FORMAT_VERSION:
        raise CompileError(
            f"serialized executable has format version {version}; this asyncjit reads {FORMAT_VERSION}"
        )
    if len(data) != pre + mlen + olen + clen + _DIGEST:
        raise CompileError("serialized executable is truncated or has trailing bytes")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        raise CompileError("serialized executable is corrupted (checksum mismatch)")
    meta = json.loads(body[pre : pre + mlen])
    if tuple(meta["target"]) != host_target_key():
        raise CompileError(
            f"executable was compiled for {meta['target']}, this host is "
            f"{list(host_target_key())}; recompile it here"
        )
    obj = body[pre + mlen : pre + mlen + olen]
    raw = body[pre + mlen + olen :]
    consts = []
    pos = 0
    for c in meta["consts"]:
        arr = np.frombuffer(
            raw, dtype=np.dtype(c["dtype"]), count=int(np.prod(c["shape"], dtype=np.int64)), offset=pos
        )
        consts.append(arr.reshape(c["shape"]).copy())
        pos += int(c["nbytes"])
    sig = Signature(
        tuple(_unspec(a) for a in meta["inputs"]),
        tuple(_unspec(a) for a in meta["outputs"]),
        tuple(Var(n, lo, hi) for n, lo, hi in meta["vars"]),
        fixed={str(k): int(v) for k, v in meta["fixed"].items()},
    )
    return CpuExecutable(
        name=meta["name"],
        signature=sig,
        layout=ArgLayout(*meta["layout"]),
        consts=consts,
        arena_bytes=int(meta["arena_bytes"]),
        kernel_names=meta["kernels"],
        ir_text=meta["ir_text"],
        code_key=meta["code_key"],
        object_code=obj,
        loaded=load_code(meta["code_key"], obj),
        fixed={str(k): int(v) for k, v in meta["fixed"].items()},
        flops=int(meta["flops"]),
        kernels=[
            KernelInfo(str(name), str(kind), from_json(nbytes), from_json(flops))
            for name, (kind, nbytes, flops) in zip(meta["kernels"], meta.get("kernel_costs", []), strict=True)
        ]
        if "kernel_costs" in meta
        else None,
    )
