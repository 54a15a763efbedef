"""Use counts of buffers: how a command keeps the memory it touches alive (invariant 8).

One lock guards every buffer's use count and deleted flag. A command takes or drops the uses of
all its buffers in one round trip, and creating a buffer creates no lock. The lock is held for a
few loads and stores, never across a call that could block or free memory.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BufferDeletedError, DonatedBufferError, DonationError

if TYPE_CHECKING:
    from ._buffer import Buffer
    from ._memory import Block

__all__ = ["acquire_uses", "deleted_error", "release_command_uses", "release_uses", "take_donated"]

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
    raise deleted_error(b)


def deleted_error(b: Buffer) -> BufferDeletedError:
    """The error for a use of deleted ``b`` (``DonatedBufferError`` when it was donated)."""
    why = b._deleted or "deleted"
    cls = DonatedBufferError if why.startswith("donated") else BufferDeletedError
    return cls(f"{b!r} was {why}; it cannot be used any more")


def take_donated(b: Buffer, why: str) -> Block | None:
    """Delete ``b`` and hand its memory to the output an execution writes over it (the caller
    holds one use of ``b``, taken for that execution). None when ``b`` holds no block.

    Raises:
        DonationError: another pending command still reads ``b`` (it would see the output's
            data); its producer, which holds a use until it finishes, does not count.
    """
    with _uses_lock:
        readers = b._uses - 1 - b._writing
        if readers > 0:
            raise DonationError(
                f"{b!r} is donated but {readers} other pending command(s) still read it; await "
                "them first, or pass a copy"
            )
        block, b._block = b._block, None
        b._deleted = why
    return block


def release_command_uses(inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
    """``release_uses`` for a finished command: its outputs are no longer being written (under
    the same lock, so ``take_donated`` never sees the flag and the count disagree)."""
    release_uses((*inputs, *outputs) if outputs else inputs, outputs)


def release_uses(buffers: Sequence[Buffer], written: Sequence[Buffer] = ()) -> None:
    """Drop one use of each buffer (one lock round trip); free the memory of deleted ones;
    ``written`` (among ``buffers``) are outputs their producer has finished writing."""
    freed: list[Block] | None = None
    with _uses_lock:
        for b in written:
            b._writing = False
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
