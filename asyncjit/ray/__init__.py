"""asyncjit beyond one process, on Ray (the ``ray`` extra): remote devices and replicated streams.

* ``RayDevice``: an asyncjit device inside a Ray actor, on this machine or another; its buffers
  (``RemoteBuffer``) live there, executions return them at once, and their readiness is awaited
  through asyncjit's events on asyncio or trio. Transfers between two remote devices go actor
  to actor.
* ``serve_streams``: many multiplexed streams over N replicas (actors each running a
  ``StreamMux``), sticky per stream, one actor call per replica per batch of steps; a replica's
  death fails only its streams (``ReplicaDiedError``) and a replacement starts.

See ``docs/ray.md``.
"""

from __future__ import annotations

from ._await import await_ref, get_ref
from ._device import RayDevice, RemoteBuffer, RemoteExecutable
from ._streams import RemoteStream, StreamService, serve_streams

__all__ = [
    "RayDevice",
    "RemoteBuffer",
    "RemoteExecutable",
    "RemoteStream",
    "StreamService",
    "await_ref",
    "get_ref",
    "serve_streams",
]
