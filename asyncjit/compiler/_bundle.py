"""AOT bundles (``.ajx``): one plan with CPU object code for several CPU targets and plugin bytecode.

Layout: ``MAGIC``, a ``<IQ`` header (bundle format version, metadata length), JSON metadata, the
payload bytes, a BLAKE2b checksum of everything before it. The metadata holds the asyncjit
version that wrote it (another version is refused: plans and their ABI change between versions),
the plan (``plan_metadata``: signature, layout, kernels, constants' layout, plugin bytecode,
the IR text for on-device compilation) and the payload table: each ``{"kind", "offset", "length",
...}``; ``consts`` holds the constants, ``cpu`` one object file for ``{"cpu", "features"}``.

Loading picks the first CPU payload (in bundle order, best first) this host can run: an x86-64
psABI level (``x86-64``, ``x86-64-v2``..``v4``) when the host has every feature of the level,
any other CPU name only on a host of exactly that CPU model. When none fits, the plan is
compiled on the device from the IR in the bundle, and the reason is logged.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import llvmlite.binding as llvm

from .._log import get_logger
from ..codegen._target import _initialize, host_target_key, optimized_module
from ..errors import CompileError
from ._cache import load_code
from ._cpu import CpuExecutable
from ._partition import CompilerPlugin
from ._serialize import build_executable, plan_metadata

__all__ = [
    "BundleError",
    "BundleInfo",
    "PSABI",
    "build_bundle",
    "bundle_info",
    "load_bundle",
    "object_for_cpu",
]

log = get_logger("asyncjit.bundle")

MAGIC = b"AJBUNDL\n"
BUNDLE_VERSION = 1
_HEAD = struct.Struct("<IQ")
_DIGEST = 32

_V2 = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf")
_V3 = (*_V2, "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
PSABI: dict[str, tuple[str, ...]] = {
    "x86-64": (),
    "x86-64-v2": _V2,
    "x86-64-v3": _V3,
    "x86-64-v4": (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
"""The x86-64 micro-architecture levels and the CPU features each requires (psABI)."""


class BundleError(CompileError, ValueError):
    """A bundle that is not one, is corrupted, from another asyncjit version, or has a payload
    this asyncjit does not know."""


@attrs.frozen
class BundleInfo:
    """What a bundle holds (for tooling): version, plan name, CPU targets, plugins."""

    asyncjit_version: str
    plan: str
    cpus: tuple[str, ...]
    plugins: tuple[str, ...]


def _host_features() -> set[str]:
    _initialize()
    feats = llvm.get_host_cpu_features()
    return {k for k, v in feats.items() if v}


def host_cpu() -> str:
    _initialize()
    return str(llvm.get_host_cpu_name())


def object_for_cpu(ir_text: str, cpu: str) -> tuple[bytes, str]:
    """Object code of ``ir_text`` for ``cpu`` (``native`` = this host), and the features it assumes.

    Raises:
        BundleError: LLVM does not know the CPU name.
    """
    _initialize()
    if cpu in ("native", host_cpu()):
        from ..codegen._target import compile_to_object, host_features

        return compile_to_object(ir_text), host_features()
    features = ",".join(f"+{f}" for f in PSABI.get(cpu, ()))
    target = llvm.Target.from_triple(llvm.get_process_triple())
    # the large code model, as host_target_machine explains: sections may load far apart
    tm = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="static", codemodel="large")
    mod = optimized_module(_for_target(ir_text, cpu, _target_features(cpu)), 3)
    obj = bytes(tm.emit_object(mod))
    return obj, features


_X86_INTRINSIC_FEATURES = (
    ("llvm.x86.avx512.", "avx512f"),
    ("llvm.x86.avx2.", "avx2"),
    ("llvm.x86.fma.", "fma"),
    ("llvm.x86.avx.", "avx"),
)
"""Target-specific intrinsic families and the feature each needs: one a target lacks makes LLVM
abort the process (``Do not know how to split ...``), so it is replaced or refused first."""


def _target_features(cpu: str) -> set[str]:
    """The features a payload for ``cpu`` may assume: a psABI level's list; for a CPU named
    otherwise the x86-64 baseline (llvmlite tells a named CPU's features only for the host)."""
    return set(PSABI.get(cpu, ())) | {"sse", "sse2"}


def _for_target(ir_text: str, cpu: str, have: set[str]) -> str:
    """``ir_text`` (generated on the host that built the bundle) made compilable for ``cpu``
    with the features ``have``: the AVX-512 table permute of ``tanh``/``erf`` becomes plain IR
    unless the CPU has AVX-512F; any other target-specific intrinsic it lacks is a
    ``BundleError`` (LLVM would abort the process)."""
    from ..codegen._mathlut import PERMUTE, portable_permute

    if PERMUTE in ir_text and "avx512f" not in have:
        portable = "asyncjit.portable.vpermi2var.ps.512"
        lines = [ln for ln in ir_text.splitlines() if not (ln.startswith("declare") and f"@{PERMUTE}(" in ln)]
        ir_text = (
            "\n".join(lines).replace(f"@{PERMUTE}(", f"@{portable}(") + "\n" + portable_permute(portable)
        )
    for prefix, feature in _X86_INTRINSIC_FEATURES:
        if f"@{prefix}" in ir_text and feature not in have:
            at = ir_text.index(f"@{prefix}")
            name = ir_text[at + 1 : ir_text.index("(", at)]
            raise BundleError(f"cannot compile for CPU {cpu!r}: the plan uses {name}, which needs {feature}")
    return ir_text


def _runs_here(entry: dict[str, Any], host: str, have: set[str]) -> str | None:
    """``None`` when this host can run a CPU payload, else why not."""
    cpu = str(entry["cpu"])
    if entry.get("triple") != llvm.get_process_triple():
        return f"{cpu}: triple {entry.get('triple')} is not this host's"
    if cpu in PSABI:
        missing = sorted(set(PSABI[cpu]) - have)
        return f"{cpu}: host lacks {', '.join(missing)}" if missing else None
    if cpu != host:
        return f"{cpu}: host CPU is {host}"
    need = {f[1:] for f in str(entry.get("features", "")).split(",") if f.startswith("+")}
    missing = sorted(need - have)
    return f"{cpu}: host lacks {', '.join(missing[:5])}" if missing else None


def build_bundle(exe: CpuExecutable, cpus: Sequence[str] = ("native",)) -> bytes:
    """A bundle of ``exe`` with object code for each CPU in ``cpus`` (best first; ``native`` is
    this host's CPU).

    Raises:
        BundleError: an unknown CPU name.
    """
    from .. import __version__

    meta, consts = plan_metadata(exe)
    ir_text = exe.ir_text
    blobs: list[bytes] = []
    table: list[dict[str, Any]] = []
    offset = 0

    def add(kind: str, data: bytes, **extra: Any) -> None:
        nonlocal offset
        table.append({"kind": kind, "offset": offset, "length": len(data), **extra})
        blobs.append(data)
        offset += len(data)

    add("consts", b"".join(c.tobytes() for c in consts))
    for cpu in dict.fromkeys(cpus):
        name = host_cpu() if cpu == "native" else cpu
        try:
            obj, features = object_for_cpu(ir_text, cpu)
        except RuntimeError as exc:
            raise BundleError(f"cannot compile for CPU {cpu!r}: {exc}") from exc
        add("cpu", obj, cpu=name, features=features, triple=llvm.get_process_triple())
    head = {"asyncjit": __version__, "plan": meta, "payloads": table}
    mb = json.dumps(head, sort_keys=True).encode()
    body = MAGIC + _HEAD.pack(BUNDLE_VERSION, len(mb)) + mb + b"".join(blobs)
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def _parse(data: bytes) -> tuple[dict[str, Any], bytes]:
    from .. import __version__

    data = bytes(data)
    pre = len(MAGIC) + _HEAD.size
    if len(data) < pre + _DIGEST or not data.startswith(MAGIC):
        raise BundleError("not an asyncjit bundle (bad magic or truncated)")
    version, mlen = _HEAD.unpack_from(data, len(MAGIC))
    if version != BUNDLE_VERSION:
        raise BundleError(f"bundle format version {version}; this asyncjit reads {BUNDLE_VERSION}")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        raise BundleError("bundle is corrupted (checksum mismatch)")
    if pre + mlen > len(body):
        raise BundleError("bundle metadata runs past its end")
    head = json.loads(body[pre : pre + mlen])
    if head.get("asyncjit") != __version__:
        raise BundleError(f"bundle was written by asyncjit {head.get('asyncjit')}; this is {__version__}")
    blob = body[pre + mlen :]
    for entry in head["payloads"]:
        if entry.get("kind") not in ("consts", "cpu"):
            raise BundleError(f"bundle has an unknown payload kind {entry.get('kind')!r}")
        if not (0 <= int(entry["offset"]) <= int(entry["offset"]) + int(entry["length"]) <= len(blob)):
            raise BundleError("bundle payload runs past the end of the bundle")
    return head, blob


def _slice(blob: bytes, entry: dict[str, Any]) -> bytes:
    return blob[int(entry["offset"]) : int(entry["offset"]) + int(entry["length"])]


def bundle_info(data: bytes) -> BundleInfo:
    head, _ = _parse(data)
    plan = head["plan"]
    return BundleInfo(
        head["asyncjit"],
        str(plan["name"]),
        tuple(str(e["cpu"]) for e in head["payloads"] if e["kind"] == "cpu"),
        tuple(str(p["plugin"]) for p in plan.get("payloads", [])),
    )


def without_cpu(data: bytes, cpus: Sequence[str]) -> bytes:
    """The same bundle with the CPU payloads for ``cpus`` removed (re-checksummed)."""
    head, blob = _parse(data)
    keep = [e for e in head["payloads"] if not (e["kind"] == "cpu" and e["cpu"] in cpus)]
    blobs, offset = [], 0
    for e in keep:
        piece = _slice(blob, e)
        e["offset"] = offset
        offset += len(piece)
        blobs.append(piece)
    head["payloads"] = keep
    mb = json.dumps(head, sort_keys=True).encode()
    body = MAGIC + _HEAD.pack(BUNDLE_VERSION, len(mb)) + mb + b"".join(blobs)
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def load_bundle(source: bytes | str | Path, plugins: Sequence[CompilerPlugin] = ()) -> CpuExecutable:
    """The plan in a bundle, with the best CPU payload this host runs (else compiled here).

    ``chosen_payload`` on the result names the CPU payload used (``"on-device"`` when compiled).

    Raises:
        BundleError: not a bundle, corrupted, another asyncjit version, an unknown payload.
        CompileError: a plugin the plan dispatches to is missing or of another version.
    """
    data = Path(source).read_bytes() if isinstance(source, str | Path) else source
    head, blob = _parse(data)
    meta = head["plan"]
    consts = next((_slice(blob, e) for e in head["payloads"] if e["kind"] == "consts"), b"")
    host, have = host_cpu(), _host_features()
    reasons = []
    for entry in head["payloads"]:
        if entry["kind"] != "cpu":
            continue
        why = _runs_here(entry, host, have)
        if why is not None:
            reasons.append(why)
            continue
        obj = _slice(blob, entry)
        key = f"bundle:{meta['code_key']}:{entry['cpu']}"
        exe = build_executable(meta, obj, consts, plugins, load_code(key, obj))
        exe.chosen_payload = str(entry["cpu"])
        log.info("bundle_loaded", plan=meta["name"], cpu=entry["cpu"])
        return exe
    reason = "; ".join(reasons) or "the bundle has no CPU payload"
    log.warning("bundle_compile_on_device", plan=meta["name"], reason=reason)
    from ._cache import get_code

    # the IR of the host that built the bundle: this one may lack its instructions
    ir_text = _for_target(str(meta["ir_text"]), host, have)
    code_key, obj, loaded = get_code(ir_text, str(meta["name"]))
    meta = {**meta, "code_key": code_key, "target": list(host_target_key())}
    exe = build_executable(meta, obj, consts, plugins, loaded)
    exe.chosen_payload = "on-device"
    return exe
