"""``Pipeline``: stages (often on different devices) joined by bounded anyio memory streams.

Each stage is one task running ``await stage.fn(item)`` for every item, in order; a result of
``None`` drops the item (a gate), anything else goes to the next stage. Items are usually lists
of ``Buffer``: a stage returns the buffers ``execute`` gave it *before they are computed*, and
the next stage (``execute_stage``) on another device enqueues a copy of them on its own queue (a
receive, run once the producer's event fires) and its execution after it (invariant 5), so the
host never synchronises between stages: ``asyncjit.testing.host_waits`` and a profiler trace
show the only waits are on device queues.

Structured concurrency: the stages live in one task group. When a stage raises, the others are
cancelled, no task is left running, and ``run`` raises that stage's original exception (with a
note naming the stage); cancelling ``run`` cancels every stage.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import InvalidArgumentError
from ..runtime import Buffer, Device, LoadedExecutable
from ._groups import single_failure

__all__ = ["Pipeline", "PipelineStatistics", "Stage", "StageStatistics", "execute_stage"]

StageFunction = Callable[[Any], Awaitable[Any]]


@attrs.frozen
class Stage:
    """One step of a pipeline: ``fn(item) -> next item | None`` and the capacity of its output stream."""

    name: str
    fn: StageFunction
    buffer: int = 2


@attrs.frozen
class StageStatistics:
    name: str
    received: int
    sent: int
    dropped: int


@attrs.frozen
class PipelineStatistics:
    stages: tuple[StageStatistics, ...]
    fed: int
    delivered: int


def execute_stage(
    name: str,
    executable: LoadedExecutable,
    *,
    device: Device | None = None,
    vars: Mapping[str, int] | None = None,
    buffer: int = 2,
    transfer: bool = True,
) -> Stage:
    """A stage that executes ``executable`` on its item (a ``Buffer`` or a sequence of them).

    Returns the output buffers at once (one ``Buffer`` for a one-output plan), not computed yet.

    Args:
        transfer: an input produced on another device is first copied to this stage's device
            (``copy_to_device``: a receive on this device's queue, run once the producer's event
            fires), so the plan reads local memory and the producer's buffer is released as
            soon as the copy ran. False: the plan reads the other device's buffer in place.
    """
    single = len(executable.signature.outputs) == 1
    target = device if device is not None else executable.devices()[0]

    async def run(item: Buffer | Sequence[Buffer]) -> Buffer | list[Buffer]:
        args = [item] if isinstance(item, Buffer) else list(item)
        if transfer:
            args = [a.copy_to_device(target) if a.memory_space.device is not target else a for a in args]
        outs = await executable.execute(args, vars, device=device)
        return outs[0] if single else outs

    return Stage(name, run, buffer)


class _Counts:
    __slots__ = ("dropped", "received", "sent")

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0
        self.dropped = 0


class Pipeline:
    """Stages in order; ``await pipeline.run(source, sink)`` feeds, runs and drains them.

    Args:
        stages: at least one ``Stage`` (or ``(name, fn)`` pair).
        source_buffer: capacity of the stream from the source into the first stage.
    """

    def __init__(
        self, stages: Sequence[Stage | tuple[str, StageFunction]], *, source_buffer: int = 2
    ) -> None:
        if not stages:
            raise InvalidArgumentError("a Pipeline needs at least one stage")
        self.stages = tuple(s if isinstance(s, Stage) else Stage(*s) for s in stages)
        self.source_buffer = source_buffer
        self._counts = [_Counts() for _ in self.stages]
        self._fed = 0
        self._delivered = 0

    def __repr__(self) -> str:
        names = " -> ".join(s.name for s in self.stages)
        return f"<Pipeline {names} fed={self._fed} delivered={self._delivered}>"

    def statistics(self) -> PipelineStatistics:
        return PipelineStatistics(
            tuple(
                StageStatistics(s.name, c.received, c.sent, c.dropped)
                for s, c in zip(self.stages, self._counts, strict=True)
            ),
            self._fed,
            self._delivered,
        )

    async def run(
        self,
        source: AsyncIterable[Any] | Iterable[Any],
        sink: Callable[[Any], Awaitable[None]] | None = None,
    ) -> PipelineStatistics:
        """Push every item of ``source`` through the stages into ``sink`` (None: discard).

        Returns when the last item left the last stage.

        Raises:
            Exception: the original error of the first stage (or source, or sink) that failed.
        """
        failure: BaseException | None = None
        try:
            async with anyio.create_task_group() as tg:
                send, recv = anyio.create_memory_object_stream[Any](self.source_buffer)
                tg.start_soon(self._feed, source, send, name="pipeline source")
                for stage, counts in zip(self.stages, self._counts, strict=True):
                    nsend, nrecv = anyio.create_memory_object_stream[Any](stage.buffer)
                    tg.start_soon(
                        self._stage, stage, counts, recv, nsend, name=f"pipeline stage {stage.name}"
                    )
                    recv = nrecv
                tg.start_soon(self._drain, recv, sink, name="pipeline sink")
        except BaseExceptionGroup as group:
            failure = single_failure(group)
            if failure is None:
                raise
        if failure is not None:
            raise failure  # outside the handler: the original error, not wrapped in a group
        return self.statistics()

    async def _feed(
        self, source: AsyncIterable[Any] | Iterable[Any], send: MemoryObjectSendStream[Any]
    ) -> None:
        async with send:
            if isinstance(source, AsyncIterable):
                async for item in source:
                    await send.send(item)
                    self._fed += 1
            else:
                for item in source:
                    await send.send(item)
                    self._fed += 1

    async def _stage(
        self,
        stage: Stage,
        counts: _Counts,
        recv: MemoryObjectReceiveStream[Any],
        send: MemoryObjectSendStream[Any],
    ) -> None:
        fn = stage.fn
        async with recv, send:
            async for item in recv:
                counts.received += 1
                try:
                    out = await fn(item)
                except Exception as exc:
                    exc.add_note(f"raised in pipeline stage {stage.name!r}")
                    raise
                if out is None:
                    counts.dropped += 1
                    continue
                await send.send(out)
                counts.sent += 1

    async def _drain(
        self, recv: MemoryObjectReceiveStream[Any], sink: Callable[[Any], Awaitable[None]] | None
    ) -> None:
        async with recv:
            async for item in recv:
                if sink is not None:
                    await sink(item)
                self._delivered += 1
