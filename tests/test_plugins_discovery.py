"""Plugin identity, options and discovery: a plugin package installed from a local wheel is found
through the ``asyncjit.plugins`` entry-point group, with no code change; conformance checks."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from asyncjit.plugins import Plugin, PluginNotFoundError, available_plugins, env_options, get_plugin
from asyncjit.plugins._conformance import ConformanceError
from asyncjit.testing import check_plugin_conformance

PLUGIN_SOURCE = '''
import numpy as np
from asyncjit.compiler import CompiledResult
from asyncjit.plugins import Plugin


class Doubler(Plugin):
    """Claims relu; its "bytecode" is a scale factor the dispatch runtime applies."""

    name = "wheelplug"
    manufacturer = "Example Corp"
    version = "1.2"
    hardware = ("example-npu",)
    ops = frozenset({"relu"})
    default_options = {"scale": 1}

    def compile(self, partitions):
        return CompiledResult(str(self.options["scale"]).encode(), [f"e{i}" for i in range(len(partitions))])

    def load(self, bytecode):
        return float(bytecode.decode())

    def invoke(self, handle, entry, inputs, outputs, vars):
        np.copyto(outputs[0], np.maximum(inputs[0], 0) * handle)
'''


def _wheel(directory: Path) -> Path:
    """A minimal, valid wheel of the ``wheelplug`` package (hashes in RECORD) built here."""
    files = {
        "wheelplug/__init__.py": PLUGIN_SOURCE,
        "wheelplug-1.2.dist-info/METADATA": "Metadata-Version: 2.1\nName: wheelplug\nVersion: 1.2\n",
        "wheelplug-1.2.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: asyncjit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        "wheelplug-1.2.dist-info/entry_points.txt": "[asyncjit.plugins]\nwheelplug = wheelplug:Doubler\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("wheelplug-1.2.dist-info/RECORD,,")
    path = directory / "wheelplug-1.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("wheelplug-1.2.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_plugin_installed_from_a_wheel_is_discovered(tmp_path: Path) -> None:
    target = tmp_path / "site"
    wheel = _wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target)]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=300)
    script = """
import numpy as np
from asyncjit import Tensor
from asyncjit.compiler import compile
from asyncjit.plugins import available_plugins
assert "wheelplug" in available_plugins()
x = Tensor.placeholder((4,), name="x")
exe = compile((x - 1.0).relu() + 1.0, [x], plugins=["wheelplug"])
print(exe.payloads[0].plugin, exe.run([np.array([0, 1, 2, 3], np.float32)])[0].tolist())
"""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), os.getcwd()]),
        "ASYNCJIT_CACHE_DIR": "off",
        "ASYNCJIT_PLUGIN_WHEELPLUG_SCALE": "3",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]  # structlog's events come first
    assert last.split() == ["wheelplug", "[1.0,", "1.0,", "4.0,", "7.0]"]  # relu(x - 1) * 3 + 1


def test_identity_options_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    class P(Plugin):
        name = "my-plug"
        default_options = {"level": 1, "fast": False, "mode": "a"}  # noqa: RUF012

    monkeypatch.setenv("ASYNCJIT_PLUGIN_MY_PLUG_LEVEL", "3")
    monkeypatch.setenv("ASYNCJIT_PLUGIN_MY_PLUG_FAST", "yes")
    assert env_options("my-plug", P.default_options) == {"level": 3, "fast": True, "mode": "a"}
    assert P(mode="b").options == {"level": 3, "fast": True, "mode": "b", "soc": ""}
    with pytest.raises(TypeError, match="no option"):
        P(unknown=1)
    with pytest.raises(PluginNotFoundError):
        get_plugin("no-such-plugin")
    assert {"onnxruntime", "xla"} <= set(available_plugins())


def test_conformance_passes_for_onnxruntime_and_catches_a_wrong_plugin() -> None:
    report = check_plugin_conformance(get_plugin("onnxruntime", {"claim_all": True}))
    assert set(report.claimed) == {"chain", "diamond", "matmul", "reduce"}

    import numpy as np

    from asyncjit.compiler import CompiledResult

    class Wrong(Plugin):
        name = "wrong"
        ops = frozenset({"tanh"})

        def compile(self, partitions):  # type: ignore[no-untyped-def]
            return CompiledResult(b"", [str(i) for i in range(len(partitions))])

        def load(self, bytecode: bytes) -> None:
            return None

        def invoke(self, handle, entry, inputs, outputs, vars):  # type: ignore[no-untyped-def]
            for o in outputs:
                o[...] = np.float32(0.5)  # not tanh

    with pytest.raises(ConformanceError, match="probe 'chain'"):
        check_plugin_conformance(Wrong())
