"""AOT bundles: compiled in one process by ``asyncjit compile``, loaded here; payload choice,
fallbacks down to on-device compilation, and refusal of tampered or foreign bundles."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from plugin_models import mixed

from asyncjit import reference
from asyncjit.compiler._bundle import (
    MAGIC,
    BundleError,
    bundle_info,
    host_cpu,
    load_bundle,
    without_cpu,
)
from asyncjit.models import silero_vad as sv
from asyncjit.testing import capture_events

pytest.importorskip("onnxruntime", reason="the bundle holds onnxruntime-plugin bytecode")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), str(Path(__file__).parent)])}
    env["ASYNCJIT_CACHE_DIR"] = "off"
    return subprocess.run(
        [sys.executable, "-m", "asyncjit.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """One bundle for the host CPU and x86-64-v2, with onnxruntime bytecode, made by another process."""
    out = tmp_path_factory.mktemp("bundle") / "mixed.ajx"
    done = _cli(
        "compile",
        "plugin_models:mixed",
        "-o",
        str(out),
        "--plugin",
        "onnxruntime",
        "--option",
        "claim_all=true",
        "--cpu",
        "native,x86-64-v2",
        cwd=out.parent,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


def _check(exe: object) -> None:
    outs, (x,) = mixed()
    xv = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    got = exe.run([xv], {"t": 5})  # type: ignore[attr-defined]
    want = reference.evaluate(outs, {x: xv}, {"t": 5})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_bundle_from_another_process_picks_the_host_payload(bundle: bytes) -> None:
    info = bundle_info(bundle)
    assert info.cpus == (host_cpu(), "x86-64-v2") and info.plugins == ("onnxruntime",)
    exe = load_bundle(bundle)
    assert exe.chosen_payload == host_cpu()
    assert exe.dispatch and any("_plugin_onnxruntime" in k for k in exe.kernel_names)
    _check(exe)


def test_without_the_host_payload_x86_64_v2_runs(bundle: bytes) -> None:
    exe = load_bundle(without_cpu(bundle, [host_cpu()]))
    assert exe.chosen_payload == "x86-64-v2"
    _check(exe)


def test_without_any_cpu_payload_it_compiles_on_device(
    bundle: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCJIT_CACHE_DIR", "off")
    with capture_events() as events:
        exe = load_bundle(without_cpu(bundle, [host_cpu(), "x86-64-v2"]))
    assert exe.chosen_payload == "on-device"
    (logged,) = [e for e in events if e["event"] == "bundle_compile_on_device"]
    assert logged["reason"] == "the bundle has no CPU payload"
    _check(exe)


def _rewrite(bundle: bytes, edit: object) -> bytes:
    """The bundle with its metadata edited by ``edit(head)`` and a valid checksum again."""
    import struct

    head_struct = struct.Struct("<IQ")
    version, mlen = head_struct.unpack_from(bundle, len(MAGIC))
    pre = len(MAGIC) + head_struct.size
    head = json.loads(bundle[pre : pre + mlen])
    edit(head)  # type: ignore[operator]
    mb = json.dumps(head).encode()
    body = MAGIC + head_struct.pack(version, len(mb)) + mb + bundle[pre + mlen : -32]
    return body + hashlib.blake2b(body, digest_size=32).digest()


def test_tampered_foreign_and_unknown_bundles_are_refused(bundle: bytes) -> None:
    flipped = bytearray(bundle)
    flipped[len(flipped) // 2] ^= 0xFF
    with pytest.raises(BundleError, match="checksum"):
        load_bundle(bytes(flipped))
    with pytest.raises(BundleError, match=r"asyncjit 0\.0\.1"):
        load_bundle(_rewrite(bundle, lambda h: h.update(asyncjit="0.0.1")))
    with pytest.raises(BundleError, match="unknown payload kind 'gpu'"):
        load_bundle(
            _rewrite(bundle, lambda h: h["payloads"].append({"kind": "gpu", "offset": 0, "length": 0}))
        )
    with pytest.raises(BundleError, match="not an asyncjit bundle"):
        load_bundle(b"PK\x03\x04 not a bundle at all, but long enough to have a digest....")
    assert isinstance(BundleError("x"), ValueError)


def test_partition_and_plugins_commands(tmp_path: Path) -> None:
    done = _cli("plugins", cwd=tmp_path)
    assert done.returncode == 0 and "onnxruntime" in done.stdout and "manufacturer" in done.stdout
    done = _cli(
        "partition",
        "plugin_models:mixed",
        "--plugin",
        "onnxruntime",
        "--option",
        "claim_all=true",
        "--out",
        str(tmp_path / "g.dot"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "-> onnxruntime" in done.stdout and "gelu: onnxruntime: gelu has no ONNX translation" in done.stdout
    )
    assert "digraph" in (tmp_path / "g.dot").read_text()
    onnx_file = Path(sv.default_model_path()).with_name("silero_vad_16k_op15.onnx")
    done = _cli(
        "partition",
        str(onnx_file),
        "--plugin",
        "onnxruntime",
        "--option",
        "claim_all=true",
        "--dims",
        "batch=1:4",
        "sequence=512:512",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "conv1d: onnxruntime: conv1d has no ONNX translation" in done.stdout
    bad = _cli("partition", "plugin_models:nope", cwd=tmp_path)
    assert bad.returncode == 2 and "cannot load" in bad.stderr
