"""The event loops asyncjit runs on, by name: ``asyncio`` (the standard library's loop),
``uvloop`` (asyncio on uvloop's loop, what ``asyncjit serve`` takes when it is installed) and
``trio``; one place that turns a name into ``anyio.run``'s arguments, for the server, its tests
and the benchmarks."""

from __future__ import annotations

from typing import Any

__all__ = ["LOOP_NAMES", "run_options", "uvloop_installed"]

LOOP_NAMES = ("asyncio", "uvloop", "trio")


def uvloop_installed() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run_options(name: str) -> tuple[str, dict[str, Any]]:
    """``anyio.run``'s ``backend`` and ``backend_options`` for the loop ``name``.

    Raises:
        ValueError: not one of ``LOOP_NAMES``.
    """
    if name == "trio":
        return "trio", {}
    if name in ("asyncio", "uvloop"):
        return "asyncio", {"use_uvloop": name == "uvloop"}
    raise ValueError(f"unknown event loop {name!r}; expected one of {', '.join(LOOP_NAMES)}")
