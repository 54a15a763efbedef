"""``serve_streams``: multiplexed streams spread over N Ray actors, each running a ``StreamMux``.

Each replica is an async Ray actor whose event loop runs one ``StreamMux`` built by the user's
factory. Here, in the caller's process, every stream is pinned to one replica when it opens
(sticky: its recurrent state lives in that replica's slot pool) and a pump task per replica
sends all the steps queued for it since its last call as **one** actor call (``step_many``):
opens, chunks and closes together. A Ray round trip costs about a millisecond, so this is what
lets one caller keep hundreds of streams moving: the cost is paid per batch, not per step. One
call per replica is in flight at a time, which keeps every stream's steps in order.

**Failure.** A replica that dies (or does not answer within ``timeout``) fails exactly its own
streams with ``ReplicaDiedError``: the steps in flight and every later step of those streams.
The other replicas' streams never notice. A replacement actor is started at once and takes new
streams. **Admission**: a stream opens on the live replica with the fewest streams; when every
replica holds ``max_streams``, ``open_stream`` raises ``ServiceFullError`` (never a silent wait).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import numpy as np
import numpy.typing as npt
import ray

from .._log import get_logger
from ..errors import (
    InvalidArgumentError,
    JitError,
    MuxClosedError,
    RemoteDeviceError,
    RemoteTimeoutError,
    ReplicaDiedError,
    ServiceFullError,
    StreamClosedError,
)
from ._await import await_ref

__all__ = ["RemoteStream", "StreamService", "serve_streams"]

_log = get_logger("asyncjit.ray")


class MuxReplica:
    """The remote side: one ``StreamMux`` on the actor's event loop; streams by the caller's ids."""

    def __init__(self, factory: Callable[[], Any], max_streams: int) -> None:
        self.factory = factory
        self.max_streams = max_streams
        self.streams: dict[int, Any] = {}

    async def start(self) -> int:
        from ..scheduler import StreamMux

        made = self.factory()
        self.mux = made if isinstance(made, StreamMux) else StreamMux(made, max_streams=self.max_streams)
        self._stop = asyncio.Event()
        ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._serve(ready))
        await ready.wait()
        return int(self.mux.max_streams)

    async def _serve(self, ready: asyncio.Event) -> None:
        async with self.mux:
            ready.set()
            await self._stop.wait()

    async def stop(self) -> None:
        self._stop.set()
        await self._task

    async def step_many(
        self,
        opens: list[tuple[int, Any]],
        ids: list[int],
        chunks: list[np.ndarray],
        closes: list[int],
    ) -> list[Any]:
        """Close, open, then run one step per ``ids[i]`` (in list order per stream); per step
        its output or the exception that step raised (one bad chunk fails only its step)."""
        for sid in closes:
            s = self.streams.pop(sid, None)
            if s is not None:
                s.close()
        for sid, state in opens:
            self.streams[sid] = await self.mux.open_stream(state, name=f"s{sid}").__aenter__()
        streams = [self.streams.get(i) for i in ids]
        results: list[Any] = [None] * len(ids)
        futures: list[tuple[int, Any]] = []
        try:
            live = [k for k, s in enumerate(streams) if s is not None]
            got = await self.mux.submit_many([self.streams[ids[k]] for k in live], [chunks[k] for k in live])
            futures = list(zip(live, got, strict=True))
        except JitError:  # one bad chunk or stream: submit one by one to find it
            for k, s in enumerate(streams):
                if s is None:
                    continue
                try:
                    futures.append((k, await s.submit(chunks[k])))
                except JitError as exc:
                    results[k] = exc
        for k, s in enumerate(streams):
            if s is None:
                results[k] = StreamClosedError(f"stream {ids[k]} is not open on this replica")
        await self.mux.wait_all([f for _, f in futures])
        for k, f in futures:
            try:
                results[k] = f.result()
            except JitError as exc:
                results[k] = exc
        return results


class _Step:
    __slots__ = ("chunk", "done", "error", "stream", "value")

    def __init__(self, stream: RemoteStream, chunk: np.ndarray) -> None:
        self.stream = stream
        self.chunk = chunk
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class _Replica:
    """Here: one replica's actor, its streams and the steps queued for its next call."""

    def __init__(self, index: int, actor: Any) -> None:
        self.index = index
        self.actor = actor
        self.name = f"replica {index}"
        self.streams: set[RemoteStream] = set()
        self.queue: list[_Step] = []
        self.opens: list[tuple[int, Any]] = []
        self.closes: list[int] = []
        self.wake = anyio.Event()
        self.dead: str | None = None
        self.capacity = 0
        self.calls = 0
        self.steps = 0

    def nudge(self) -> None:
        self.wake.set()


class RemoteStream:
    """One stream of a ``StreamService``, pinned to one replica: ``await s.step(chunk)``."""

    def __init__(self, service: StreamService, sid: int, replica: _Replica) -> None:
        self.service = service
        self.id = sid
        self.replica = replica
        self._closed = False

    def __repr__(self) -> str:
        return f"<RemoteStream {self.id} on {self.replica.name}>"

    async def __aenter__(self) -> RemoteStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Free its slot on the replica (sent with the replica's next call). Idempotent."""
        if self._closed:
            return
        self._closed = True
        r = self.replica
        r.streams.discard(self)
        if r.dead is None:
            r.closes.append(self.id)
            r.nudge()

    async def step(self, chunk: npt.ArrayLike) -> Any:
        """The step's output, computed on this stream's replica.

        Raises:
            ReplicaDiedError: the replica died (now or before); this stream's state is gone.
            StreamClosedError: the stream was closed.
            the step's own error (a wrong chunk: ``ShapeMismatchError``, ``AudioFormatError``).
        """
        if self._closed:
            raise StreamClosedError(f"{self!r} is closed")
        r = self.replica
        if r.dead is not None:
            raise ReplicaDiedError(r.dead)
        st = _Step(self, np.asarray(chunk))
        r.queue.append(st)
        r.nudge()
        await st.done.wait()
        if st.error is not None:
            raise st.error
        return st.value


class StreamService:
    """Streams multiplexed over ``replicas`` Ray actors; see ``serve_streams``."""

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        replicas: int,
        max_streams: int,
        num_cpus: float,
        timeout: float | None,
        actor_options: dict[str, Any],
    ) -> None:
        if replicas < 1 or max_streams < 1:
            raise InvalidArgumentError(
                f"serve_streams needs replicas >= 1 and max_streams >= 1, got {replicas}, {max_streams}"
            )
        self.factory = factory
        self.n_replicas = replicas
        self.max_streams = max_streams
        self.timeout = timeout
        self._num_cpus = num_cpus
        self._actor_cls = ray.remote(MuxReplica).options(num_cpus=num_cpus, **actor_options)
        self._replicas: list[_Replica] = []
        self._ids = itertools.count(1)
        self._replica_ids = itertools.count()
        self._tg: anyio.abc.TaskGroup | None = None
        self.replaced = 0

    async def __aenter__(self) -> StreamService:
        if not ray.is_initialized():
            raise RemoteDeviceError(
                "Ray is not initialized: call ray.init() (or ray.init(address=...)) first"
            )
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            for _ in range(self.n_replicas):
                await self._start_replica()
        except BaseException:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)
        for r in self._replicas:
            ray.kill(r.actor)
        self._replicas = []

    async def _start_replica(self) -> _Replica:
        assert self._tg is not None
        r = _Replica(next(self._replica_ids), self._actor_cls.remote(self.factory, self.max_streams))
        try:
            slots = await await_ref(
                r.actor.start.remote(), timeout=self.timeout, where=r.name, dead=ReplicaDiedError
            )
        except RemoteTimeoutError as exc:
            ray.kill(r.actor)
            free = ray.available_resources()  # type: ignore[no-untyped-call]
            raise RemoteTimeoutError(
                f"{exc}; is the cluster short of resources? each replica reserves num_cpus="
                f"{self._num_cpus} (ray.available_resources(): {free})"
            ) from None
        r.capacity = min(self.max_streams, slots)  # a factory's own mux may hold fewer
        self._replicas.append(r)
        self._tg.start_soon(self._pump, r)
        _log.info("ray.replica_started", replica=r.index)
        return r

    def open_stream(self, state: object | None = None) -> RemoteStream:
        """A stream on the live replica with the fewest streams (``async with`` closes it).

        Raises:
            ServiceFullError: every replica holds ``max_streams`` streams.
            MuxClosedError: the service is not running.
        """
        if self._tg is None or not self._replicas:
            raise MuxClosedError("the service is not running: use `async with serve_streams(...)`")
        live = [r for r in self._replicas if r.dead is None and len(r.streams) < r.capacity]
        if not live:
            raise ServiceFullError(
                f"all {len(self._replicas)} replicas are full ({[r.capacity for r in self._replicas]} "
                "streams each); close some or add replicas"
            )
        r = min(live, key=lambda r: len(r.streams))
        s = RemoteStream(self, next(self._ids), r)
        r.streams.add(s)
        r.opens.append((s.id, state))
        return s

    def statistics(self) -> list[dict[str, Any]]:
        """Per replica: streams open, actor calls made, steps served, and why it died (or None)."""
        return [
            {
                "replica": r.index,
                "streams": len(r.streams),
                "calls": r.calls,
                "steps": r.steps,
                "dead": r.dead,
            }
            for r in self._replicas
        ]

    async def _pump(self, r: _Replica) -> None:
        """Send everything queued for ``r`` as one call, resolve it, repeat; on death, fail its streams."""
        while r.dead is None:
            if not (r.queue or r.opens or r.closes):
                await r.wake.wait()
                r.wake = anyio.Event()
                continue
            batch, r.queue = r.queue, []
            opens, r.opens = r.opens, []
            closes, r.closes = r.closes, []
            ref = r.actor.step_many.remote(
                opens, [s.stream.id for s in batch], [s.chunk for s in batch], closes
            )
            try:
                results: Sequence[Any] = await await_ref(
                    ref, timeout=self.timeout, where=r.name, dead=ReplicaDiedError
                )
            except RemoteDeviceError as exc:
                self._replica_died(r, batch, exc)
                return
            r.calls += 1
            r.steps += len(batch)
            for st, res in zip(batch, results, strict=True):
                if isinstance(res, BaseException):
                    st.error = res
                else:
                    st.value = res
                st.done.set()

    def _replica_died(self, r: _Replica, batch: list[_Step], exc: RemoteDeviceError) -> None:
        r.dead = f"{r.name} died ({exc}); its {len(r.streams)} streams' state was lost: open new streams"
        _log.warning("ray.replica_died", replica=r.index, streams=len(r.streams), error=str(exc))
        for st in [*batch, *r.queue]:
            st.error = ReplicaDiedError(r.dead)
            st.done.set()
        r.queue = []
        self._replicas.remove(r)
        ray.kill(r.actor)
        self.replaced += 1
        assert self._tg is not None
        self._tg.start_soon(self._replace)

    async def _replace(self) -> None:
        try:
            await self._start_replica()
        except RemoteDeviceError as exc:
            _log.error("ray.replica_start_failed", error=str(exc))


def serve_streams(
    step_factory: Callable[[], Any],
    *,
    replicas: int = 2,
    max_streams: int = 256,
    num_cpus: float = 1,
    timeout: float | None = 60.0,
    **actor_options: Any,
) -> StreamService:
    """Serve multiplexed streams from ``replicas`` Ray actors, each running one ``StreamMux``.

    ``async with serve_streams(factory) as svc: async with svc.open_stream() as s: await s.step(x)``
    on asyncio or trio, after ``ray.init()`` (local) or ``ray.init(address=...)`` (a cluster).

    Args:
        step_factory: called in each replica to build its ``StreamMux`` or its ``BatchedStep``
            (then wrapped in a ``StreamMux`` of ``max_streams``); it is pickled to the actors, so
            use a module-level function or ``functools.partial`` (e.g. of ``vad_mux``).
        max_streams: streams per replica; beyond ``replicas * max_streams`` opens are refused.
        num_cpus: Ray CPUs each replica reserves; ``actor_options`` go to Ray as well.
        timeout: seconds a replica may take to answer one call before it is treated as dead.
    """
    return StreamService(
        step_factory,
        replicas=replicas,
        max_streams=max_streams,
        num_cpus=num_cpus,
        timeout=timeout,
        actor_options=actor_options,
    )
