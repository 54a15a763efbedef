"""The serialized form of a ``CpuExecutable``: versioned, checksummed, no pickles.

Layout: ``MAGIC``, a ``<IQQQ`` header (format version, metadata length, object length, constants
length), JSON metadata (signature with symbolic dims through ``symbolic.to_json``, argument layout,
kernel names, the target key, ...), the object code, the constants' raw bytes, and a BLAKE2b
checksum of everything before it. Object code only runs on the machine kind that produced it, so
``deserialize`` refuses a different target key instead of risking illegal instructions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..codegen._module import ArgLayout
from ..codegen._target import LoadedObject, host_target_key
from ..dtypes import from_numpy
from ..errors import CompileError
from ..graph import aligned_copy, broadcast_core
from ..symbolic import DataVar, Var, from_json, to_json
from ._cache import load_code
from ._cost import KernelInfo
from ._cpu import CpuExecutable
from ._dispatch import BufferRef, DispatchCall, Payload
from ._executable import ArgSpec, Signature
from ._partition import CompilerPlugin, plugin_identity, registered_plugins

__all__ = ["FORMAT_VERSION", "MAGIC", "build_executable", "deserialize", "plan_metadata", "serialize_cpu"]

MAGIC = b"AJITEXE\n"
FORMAT_VERSION = 3  # 2: plans with dispatched plugin partitions; 3: broadcast constants as cores
_READABLE = (1, 2, 3)
_HEAD = struct.Struct("<IQQQ")
_DIGEST = 32


def _spec(a: ArgSpec) -> dict[str, Any]:
    return {"name": a.name, "shape": [to_json(d) for d in a.shape], "dtype": a.dtype.name}


def _unspec(d: dict[str, Any]) -> ArgSpec:
    return ArgSpec(str(d["name"]), tuple(from_json(x) for x in d["shape"]), from_numpy(d["dtype"]))


def _ref(r: BufferRef) -> list[Any]:
    return [r.kind, r.index, r.offset, [to_json(d) for d in r.shape], r.dtype.name]


def _unref(d: list[Any]) -> BufferRef:
    kind, index, offset, shape, dtype = d
    if kind not in ("input", "output", "const", "arena"):
        raise CompileError(f"serialized executable has an unknown buffer kind {kind!r}")
    return BufferRef(
        str(kind), int(index), int(offset), tuple(from_json(x) for x in shape), from_numpy(dtype)
    )


def _check_call(
    call: DispatchCall, layout: ArgLayout, arena_bytes: int, n_payloads: int, n_kernels: int
) -> None:
    """Every buffer a dispatch call views lies inside the memory the plan owns (no wild views)."""
    from ..symbolic import upper

    if not (0 <= call.payload < n_payloads and 0 <= call.kernel < n_kernels):
        raise CompileError("serialized executable has a dispatch call outside its kernels or payloads")
    limit = {"input": layout.n_inputs, "output": layout.n_outputs, "const": layout.n_consts}
    for r in (*call.inputs, *call.outputs):
        nbytes = math.prod(max(upper(d), 0) for d in r.shape) * r.dtype.itemsize
        ok = (
            r.offset >= 0 and r.offset + nbytes <= arena_bytes
            if r.kind == "arena"
            else 0 <= r.index < limit[r.kind]
        )
        if not ok:
            raise CompileError(f"serialized executable has a dispatch buffer out of range: {r}")


def _as_tuple(x: Any) -> Any:
    return tuple(_as_tuple(i) for i in x) if isinstance(x, list) else x


def _plugin_for(p: Payload, given: Mapping[str, CompilerPlugin]) -> CompilerPlugin:
    """The plugin that runs a payload: given, registered, else installed (same name and version).

    Raises:
        CompileError: no such plugin, or its version differs from the one that compiled it.
    """
    registered = {q.name: q for q in registered_plugins()}
    plugin = given.get(p.plugin) or registered.get(p.plugin)
    if plugin is None:
        from ..plugins import get_plugin

        plugin = get_plugin(p.plugin, p.options)
    have, want = plugin_identity(plugin)[1], p.identity[1]
    if have != want:
        raise CompileError(
            f"executable was compiled by plugin {p.plugin!r} version {want!r}; the installed one is "
            f"{have!r} (recompile it)"
        )
    return plugin


def _data_var(data: object) -> DataVar:
    v = from_json(data)
    if not isinstance(v, DataVar):
        raise CompileError(f"serialized executable: {data!r} is not a data-dependent size")
    return v


def serialize_cpu(exe: CpuExecutable) -> bytes:
    meta, consts = plan_metadata(exe)
    mb = json.dumps(meta, sort_keys=True).encode()
    cb = b"".join(c.tobytes() for c in consts)
    body = (
        MAGIC + _HEAD.pack(FORMAT_VERSION, len(mb), len(exe.object_code), len(cb)) + mb + exe.object_code + cb
    )
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def plan_metadata(exe: CpuExecutable) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Everything about a plan but its object code, as JSON, and its constants in order."""
    sig = exe.signature
    # 0-d stays 0-d; a broadcast constant is stored as its core (written out when loaded)
    sources = [np.asarray(c) for c in exe.const_sources]
    cores = [broadcast_core(c) for c in sources]
    consts = [
        np.asarray(c, order="C") if core is None else core for c, core in zip(sources, cores, strict=True)
    ]
    meta = {
        "name": exe.name,
        "inputs": [_spec(a) for a in sig.inputs],
        "outputs": [_spec(a) for a in sig.outputs],
        "vars": [[v.name, v.min, v.max] for v in sig.vars],
        "layout": [
            exe.layout.n_inputs,
            exe.layout.n_outputs,
            exe.layout.n_consts,
            exe.layout.n_vars,
            exe.layout.n_data,
            exe.layout.dynamic,
        ],
        "dyn_bytes": to_json(exe.dyn_bytes),
        "data_vars": [to_json(v) for v in sig.data_vars],
        "aliases": [[j, i] for j, i in sig.aliases],
        "arena_bytes": exe.arena_bytes,
        "kernels": list(exe.kernel_names),
        "kernel_costs": [[k.kind, to_json(k.bytes_expr), to_json(k.flops_expr)] for k in exe.kernels],
        "fixed": exe.fixed,
        "code_key": exe.code_key,
        "target": list(host_target_key()),
        "consts": [
            {"dtype": c.dtype.str, "shape": list(src.shape), "nbytes": c.nbytes}
            | ({} if core is None else {"core": list(core.shape)})
            for c, src, core in zip(consts, sources, cores, strict=True)
        ],
        "flops": exe.flops_estimate,
        "ir_text": exe.ir_text,
    }
    if exe.dispatch:
        meta["segments"] = [list(seg) for seg in exe.segments]
        meta["dispatch"] = [
            {
                "kernel": c.kernel,
                "payload": c.payload,
                "entry": c.entry,
                "inputs": [_ref(r) for r in c.inputs],
                "outputs": [_ref(r) for r in c.outputs],
            }
            for c in exe.dispatch
        ]
        meta["payloads"] = [
            {
                "plugin": p.plugin,
                "identity": json.loads(json.dumps(p.identity)),
                "options": dict(p.options),
                "entries": list(p.entries),
                "bytecode": base64.b64encode(p.bytecode).decode(),
            }
            for p in exe.payloads
        ]
    return meta, consts


def deserialize(data: bytes, plugins: Sequence[CompilerPlugin] = ()) -> CpuExecutable:
    """Rebuild a ``CpuExecutable`` from ``serialize()`` output and load its code.

    A plan with dispatched partitions needs their plugins: from ``plugins``, the registered
    ones, or those installed (``asyncjit.plugins.get_plugin``), with the version that compiled it.

    Raises:
        CompileError: not an asyncjit executable, another format version, corrupted, or compiled
            for a different CPU/LLVM (the object code could not run safely here).
    """
    data = bytes(data)
    pre = len(MAGIC) + _HEAD.size
    if len(data) < pre + _DIGEST or not data.startswith(MAGIC):
        raise CompileError("not a serialized asyncjit executable (bad magic or truncated)")
    version, mlen, olen, clen = _HEAD.unpack_from(data, len(MAGIC))
    if version not in _READABLE:
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
    return build_executable(meta, obj, raw, plugins, load_code(meta["code_key"], obj))


def build_executable(
    meta: dict[str, Any], obj: bytes, raw: bytes, plugins: Sequence[CompilerPlugin], loaded: LoadedObject
) -> CpuExecutable:
    """A ``CpuExecutable`` from serialized metadata, its constants' bytes and loaded object code
    (shared by ``deserialize`` and AOT bundles, which choose among several objects)."""
    consts: list[np.ndarray] = []
    pos = 0
    for c in meta["consts"]:
        stored = c.get("core", c["shape"])
        count = math.prod(int(d) for d in stored)
        dtype = np.dtype(c["dtype"])
        if count < 0 or pos + count * dtype.itemsize > len(raw):
            raise CompileError(
                f"serialized executable: constant {len(consts)} runs past the constants' bytes"
            )
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=pos)
        if "core" in c:  # a broadcast constant: the executable writes it out
            try:
                view = np.broadcast_to(arr.reshape(stored).copy(), tuple(c["shape"]))
            except ValueError:
                view = None
            if view is None or broadcast_core(view) is None:
                raise CompileError(
                    f"serialized executable: constant core {stored} does not broadcast to {c['shape']}"
                )
            consts.append(view)
        else:
            consts.append(aligned_copy(arr.reshape(c["shape"])))
        pos += int(c["nbytes"])
    sig = Signature(
        tuple(_unspec(a) for a in meta["inputs"]),
        tuple(_unspec(a) for a in meta["outputs"]),
        tuple(Var(n, lo, hi) for n, lo, hi in meta["vars"]),  # hi None: unbounded
        fixed={str(k): int(v) for k, v in meta["fixed"].items()},
        data_vars=tuple(_data_var(d) for d in meta.get("data_vars", [])),
        aliases=tuple((int(j), int(i)) for j, i in meta.get("aliases", [])),
    )
    layout = ArgLayout(*meta["layout"])
    if layout.n_data != len(sig.data_vars) or layout.n_vars != len(sig.vars) + layout.n_data:
        raise CompileError("serialized executable: its argument layout does not match its signature")
    calls = [
        DispatchCall(
            int(c["kernel"]),
            int(c["payload"]),
            str(c["entry"]),
            tuple(_unref(r) for r in c["inputs"]),
            tuple(_unref(r) for r in c["outputs"]),
        )
        for c in meta.get("dispatch", [])
    ]
    payloads = [
        Payload(
            str(p["plugin"]),
            _as_tuple(p["identity"]),
            base64.b64decode(p["bytecode"]),
            tuple(p["entries"]),
            dict(p["options"]),
        )
        for p in meta.get("payloads", [])
    ]
    for call in calls:
        _check_call(call, layout, int(meta["arena_bytes"]), len(payloads), len(meta["kernels"]))
    given = {p.name: p for p in plugins}
    by_name = {p.plugin: _plugin_for(p, given) for p in payloads}
    return CpuExecutable(
        name=meta["name"],
        signature=sig,
        layout=layout,
        segments=[(int(a), int(b)) for a, b in meta.get("segments", [])],
        dispatch=calls,
        payloads=payloads,
        plugins=by_name,
        consts=consts,
        arena_bytes=int(meta["arena_bytes"]),
        dyn_bytes=from_json(meta.get("dyn_bytes", 0)),
        kernel_names=meta["kernels"],
        ir_text=meta["ir_text"],
        code_key=meta["code_key"],
        object_code=obj,
        loaded=loaded,
        fixed={str(k): int(v) for k, v in meta["fixed"].items()},
        flops=int(meta["flops"]),
        kernels=[
            KernelInfo(str(name), str(kind), from_json(nbytes), from_json(flops))
            for name, (kind, nbytes, flops) in zip(meta["kernels"], meta.get("kernel_costs", []), strict=True)
        ]
        if "kernel_costs" in meta
        else None,
    )
