"""Use counts of buffers: how a command keeps the memory it touches alive (invariant 8).

One lock guards every buffer's use count and deleted flag. A command takes or drops the uses of
all its buffers in one round trip, and creating a buffer creates no lock. The lock is held for a
few loads and stores, never across a call that could block or free memory.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BufferDeletedError

if TYPE_CHECKING:
    from ._buffer import Buffer
    from ._memory import Block

__all__ = ["acquire_uses", "release_uses"]

_uses_lock = threading.Lock()


def acquire_uses(buffers: Sequence[Buffer]) -> None:
    """Take a use of each buffer (one lock round trip), or of none if one was deleted.

    Raises:
        BufferDeletedError: naming the first deleted or donated buffer.
    """
    with _uses_lock:
        for b in buffers:
            if b._deleted is not None:
                break
        else:
            for b in buffers:
                b._uses += 1
            return
    raise BufferDeletedError(f"{b!r} was {b._deleted}; it cannot be used any more")


def release_uses(buffers: Sequence[Buffer]) -> None:
    """Drop one use of each buffer (one lock round trip); free the memory of deleted ones."""
    freed: list[Block] | None = None
    with _uses_lock:
        for b in buffers:
            b._uses -= 1
            if not b._uses and b._deleted is not None:
                block, b._block = b._block, None
                b._host = None
                if block is not None:
                    if freed is None:
                        freed = [block]
                    else:
                        freed.append(block)
    if freed is not None:
        for block in freed:
            if block.space is not None:
                block.space.release(block)
