"""Every ```python block of README.md runs as written, standalone, in a fresh namespace.

Blocks that drive the event loop (``anyio.run(main)``) run twice, on asyncio and on trio: the test
points ``anyio.run``'s default backend at each in turn, the code itself is unchanged.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


def _cases() -> list[Any]:
    cases = []
    for i, code in enumerate(BLOCKS):
        backends = ["asyncio", "trio"] if "anyio.run(" in code else [None]
        for backend in backends:
            cases.append(pytest.param(code, backend, id=f"block{i}-{backend or 'sync'}"))
    return cases


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize(("code", "backend"), _cases())
def test_readme_block_runs(
    code: str, backend: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    if backend is not None:
        monkeypatch.setattr(anyio, "run", functools.partial(anyio.run, backend=backend))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    root, ours = logging.getLogger(), logging.getLogger("asyncjit")
    saved = root.handlers[:], root.level, ours.level
    try:
        exec(compile(code, str(README), "exec"), namespace)
    finally:  # a block may configure logging, as a program does; later tests get it back as it was
        root.handlers[:], (root.level, ours.level) = saved[0], saved[1:]
