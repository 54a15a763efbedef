"""``MuxMetrics``: bounded-memory counters and samples of a ``StreamMux``, read as a dict.

Recording is on the service's path, once per batch plus one list store per request, so it keeps
plain Python lists of fixed size (rings) and counts; percentiles are computed only when read.
Memory does not grow with the number of requests served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

__all__ = ["MuxMetrics", "Ring"]


class Ring:
    """The last ``size`` float samples."""

    __slots__ = ("_data", "_i", "_n", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._data = [0.0] * size
        self._i = 0
        self._n = 0

    def add(self, value: float) -> None:
        i = self._i
        self._data[i] = value
        self._i = 0 if i + 1 == self._size else i + 1
        if self._n < self._size:
            self._n += 1

    def extend(self, values: Sequence[float]) -> None:
        """``add`` each value, by slices (a batch's queue delays in one call)."""
        size, total = self._size, len(values)
        kept = values[-size:]  # what ``add`` one by one would leave, written where it would be
        i, n = (self._i + total - len(kept)) % size, len(kept)
        head = min(n, size - i)
        self._data[i : i + head] = kept[:head]
        self._data[: n - head] = kept[head:]
        self._i = (i + n) % size
        self._n = min(size, self._n + total)

    def __len__(self) -> int:
        return self._n

    def percentiles(self, qs: Sequence[float]) -> list[float]:
        """``qs`` in [0, 100]; zeros when empty."""
        if not self._n:
            return [0.0 for _ in qs]
        data = np.asarray(self._data[: self._n] if self._n < self._size else self._data)
        return [float(x) for x in np.percentile(data, qs)]

    def __repr__(self) -> str:
        return f"<Ring {self._n}/{self._size}>"


@attrs.define(eq=False)
class MuxMetrics:
    """Everything ``StreamMux.metrics()`` reports besides its live gauges."""

    max_batch_size: int
    samples: int = 4096
    batches: int = 0
    requests: int = 0
    failed_batches: int = 0
    failed_requests: int = 0
    refused: int = 0  # steps whose chunk had NaN/inf samples: failed before any batch ran them
    cancelled: int = 0
    dropped: int = 0
    opened: int = 0
    closed: int = 0
    idle_expired: int = 0
    admission_timeouts: int = 0
    backlog_rejected: int = 0
    batch_sizes: list[int] = attrs.field(init=False)
    queue_delay: Ring = attrs.field(init=False)
    step_time: Ring = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.batch_sizes = [0] * (self.max_batch_size + 1)
        self.queue_delay = Ring(self.samples)
        self.step_time = Ring(self.samples)

    def record_batch(self, size: int, seconds: float, failed: bool) -> None:
        self.batches += 1
        self.requests += size
        self.batch_sizes[size] += 1
        self.step_time.add(seconds)
        if failed:
            self.failed_batches += 1
            self.failed_requests += size

    def as_dict(self, **gauges: Any) -> dict[str, Any]:
        """A JSON-friendly snapshot; delays and durations in milliseconds."""
        qd50, qd99, qdmax = self.queue_delay.percentiles((50, 99, 100))
        st50, st99, stmax = self.step_time.percentiles((50, 99, 100))
        sizes = {b: n for b, n in enumerate(self.batch_sizes) if n}
        mean = sum(b * n for b, n in sizes.items()) / self.batches if self.batches else 0.0
        return {
            **gauges,
            "batches": self.batches,
            "requests": self.requests,
            "failed_batches": self.failed_batches,
            "failed_requests": self.failed_requests,
            "refused_requests": self.refused,
            "cancelled": self.cancelled,
            "dropped_results": self.dropped,
            "opened": self.opened,
            "closed": self.closed,
            "idle_expired": self.idle_expired,
            "admission_timeouts": self.admission_timeouts,
            "backlog_rejected": self.backlog_rejected,
            "batch_size_histogram": sizes,
            "batch_size_mean": round(mean, 2),
            "queue_delay_ms": {"p50": _ms(qd50), "p99": _ms(qd99), "max": _ms(qdmax)},
            "step_ms": {"p50": _ms(st50), "p99": _ms(st99), "max": _ms(stmax)},
        }


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)
