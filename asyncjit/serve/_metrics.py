"""Prometheus metrics of a server (``prometheus-client``), one registry per server.

Counters and the step latency histogram are updated by the connections; the batch sizes are
read from the ``StreamMux``'s own per-size counts when Prometheus scrapes (no cost per batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from ..scheduler import StreamMux

__all__ = ["CONTENT_TYPE", "ServeMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class _BatchSizes(Collector):
    """``asyncjit_serve_batch_size``: the mux's batches by size, as a Prometheus histogram."""

    def __init__(self) -> None:
        self.mux: StreamMux | None = None

    def collect(self) -> Iterator[HistogramMetricFamily]:
        histogram: dict[int, int] = {} if self.mux is None else self.mux.metrics()["batch_size_histogram"]
        sizes = [0] * (max(histogram, default=0) + 1)
        for size, n in histogram.items():
            sizes[size] = n
        buckets: list[tuple[str, float]] = []
        total = 0
        size_sum = 0
        edges = iter(BATCH_BUCKETS)
        edge = next(edges)
        cum = 0
        for size, n in enumerate(sizes):
            while size > edge:
                buckets.append((str(edge), cum))
                edge = next(edges, 10**9)
            cum += n
            total += n
            size_sum += size * n
        for rest in (edge, *edges):
            if rest < 10**9:
                buckets.append((str(rest), cum))
        buckets.append(("+Inf", total))
        family = HistogramMetricFamily(
            "asyncjit_serve_batch_size", "streams per native call of the StreamMux"
        )
        family.add_metric([], buckets, size_sum)
        yield family


class ServeMetrics:
    """The server's counters, gauges and histograms in their own ``CollectorRegistry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.open_streams = Gauge(
            "asyncjit_serve_open_streams", "connections being served", ["protocol"], registry=r
        )
        self.chunks = Counter("asyncjit_serve_chunks", "model chunks stepped", registry=r)
        self.refusals = Counter(
            "asyncjit_serve_refusals", "connections refused at admission", ["reason"], registry=r
        )
        self.closes = Counter(
            "asyncjit_serve_closes", "connections closed, by reason", ["protocol", "reason"], registry=r
        )
        self.step_latency = Histogram(
            "asyncjit_serve_step_latency_seconds",
            "a chunk's submit to its result (queue + batch + compute)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._batches = _BatchSizes()
        r.register(self._batches)

    def attach(self, mux: StreamMux) -> None:
        self._batches.mux = mux

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def sample(self, name: str, **labels: Any) -> float:
        """One sample's current value (0 if absent), for tests and the benchmark."""
        value = self.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else float(value)
