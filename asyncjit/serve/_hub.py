"""Reads without a task switch per connection: ``Tap`` (asyncio) and ``ReadHub`` (trio).

On asyncio a read is answered in the transport's callback: ``Tap`` stands between the transport
and anyio's protocol and offers each read to ``Connection.fast_read`` first, so a connection in
its steady state costs no task switch. Trio has no callbacks: each
reader task waits for its own socket (``wait_readable``: the task's wake-up, trio's scheduling
around it and an ``epoll_ctl`` per wait). The hub puts those sockets in an epoll of its own
(level-triggered, registered once while the reader stays parked) and waits for that one file
descriptor in one task: each wake-up reads every ready socket and hands the data to its
connection's ``fast_read``; what that leaves (a control event, a full queue, the end of the
stream) wakes the connection's reader with the data, which takes the general path.

Linux only (``select.epoll``); elsewhere readers wait for their sockets themselves.
"""

from __future__ import annotations

import contextlib
import select
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._session import Connection

__all__ = ["ReadHub", "Tap", "read_hub_available"]

EVENTS_PER_WAKE = 64
"""Sockets read per wake-up of the hub before it lets other tasks run."""


def read_hub_available() -> bool:
    return hasattr(select, "epoll")


class ReadHub:
    """The epoll and the connections registered with it (by file descriptor)."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._conns: dict[int, Connection] = {}

    def add(self, fd: int, conn: Connection) -> None:
        self._epoll.register(fd, select.EPOLLIN)
        self._conns[fd] = conn

    def discard(self, fd: int) -> None:
        if self._conns.pop(fd, None) is not None:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: dropped already
                self._epoll.unregister(fd)

    async def run(self) -> None:
        """Serve until cancelled (the server's shutdown); the epoll is closed on the way out."""
        import trio

        epoll = self._epoll
        conns = self._conns
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                for fd, _ in epoll.poll(0, EVENTS_PER_WAKE):
                    conn: Any = conns.get(fd)
                    if conn is None:
                        continue
                    try:
                        conn._hub_readable()
                    except Exception as exc:  # a bug of ours: that connection ends, the rest go on
                        self.discard(fd)
                        conn._crashed(exc)
        finally:
            for fd in list(conns):
                self.discard(fd)
            epoll.close()


class Tap:
    """Stands between an asyncio transport and anyio's protocol for it: a read the connection
    handles in the callback (``Connection.fast_read``) never wakes the reader task, which skips a
    task switch, anyio's receive and the loop's scheduling around it. Everything else goes to
    anyio's protocol as before."""

    __slots__ = ("_conn", "_proto")

    def __init__(self, proto: Any, conn: Connection) -> None:
        self._proto = proto
        self._conn = conn

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        try:
            if conn._parked and not self._proto.read_queue and conn.fast_read(data):
                return
        except Exception as exc:  # a bug of ours: this connection ends, the transport stays ours
            conn._crashed(exc)
            return
        self._proto.data_received(data)

    def __getattr__(self, name: str) -> Any:  # connection_lost, eof_received, pause_writing...
        return getattr(self._proto, name)
