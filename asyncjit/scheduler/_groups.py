"""Unwrapping task-group errors: one failing task should surface as its own exception.

anyio task groups always raise an ``ExceptionGroup``, even for a single failure; the rest of the
group is the cancellations that failure caused. Users of a pipeline or a chunk source expect the
original error (``except ValueError``), so the scheduler re-raises it when it is the only one.
"""

from __future__ import annotations

import anyio

__all__ = ["single_failure"]


def single_failure(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one error in ``group`` that is not a cancellation, or None if there are zero or several."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        elif not isinstance(exc, cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None
