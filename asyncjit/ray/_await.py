"""Awaiting Ray object refs on asyncio or trio, through asyncjit's own ``Event``.

A Ray ref completes on one of Ray's threads. Its concurrent future fires an ``Event``, and the
loop waits on that event with ``wait_event``, exactly as it waits on a local buffer: one batched
wake-up per drain, the same code on asyncio and trio (Ray's own ``await ref`` exists only on
asyncio). Every wait has a timeout and is cancellable; errors come back typed: the remote
asyncjit error itself, or ``RemoteDeviceError`` / ``RemoteTimeoutError`` naming the device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import ray
import ray.exceptions

from ..errors import JitError, RemoteDeviceError, RemoteTimeoutError
from ..runtime._events import Event
from ..runtime._wakeup import wait_event

__all__ = ["await_ref", "get_ref", "remote_error"]


def remote_error(
    exc: BaseException, where: str, dead: type[RemoteDeviceError] = RemoteDeviceError
) -> Exception:
    """The typed error for a failed remote call: the asyncjit error raised over there, else
    ``dead`` (the actor is gone) or ``RemoteDeviceError`` (anything else), naming ``where``."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, JitError):
            return cause
        return RemoteDeviceError(f"{where}: the remote call failed: {cause!r}")
    if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.ActorUnavailableError):
        return dead(f"{where} died or cannot be reached ({type(exc).__name__})")
    if isinstance(exc, ray.exceptions.GetTimeoutError):
        return RemoteTimeoutError(f"{where}: no answer in time")
    if isinstance(exc, JitError):
        return exc
    return RemoteDeviceError(f"{where}: {exc!r}")


async def await_ref(
    ref: ray.ObjectRef[Any],
    *,
    timeout: float | None,
    where: str,
    dead: type[RemoteDeviceError] = RemoteDeviceError,
) -> Any:
    """The value of ``ref``, awaited without blocking the loop.

    Raises:
        RemoteTimeoutError: no value within ``timeout`` seconds.
        ``dead`` / RemoteDeviceError / the remote JitError: see ``remote_error``.
    """
    future = ref.future()
    if not future.done():
        ev = Event()
        future.add_done_callback(lambda _f: ev.set())
        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                await wait_event(ev)
        except TimeoutError:
            raise RemoteTimeoutError(f"{where}: no answer within {timeout} s") from None
    try:
        return future.result()
    except BaseException as exc:
        raise remote_error(exc, where, dead) from None


def get_ref(ref: ray.ObjectRef[Any], *, timeout: float | None, where: str) -> Any:
    """``await_ref`` for blocking callers (scripts)."""
    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise RemoteTimeoutError(f"{where}: no answer within {timeout} s") from None
    except BaseException as exc:
        raise remote_error(exc, where) from None
