"""Prometheus metrics of a server (``prometheus-client``), one registry per server.

The connections update the counters; the chunks answered and the step latency, updated once per
responder wake-up, are plain ints turned into samples when Prometheus scrapes (prometheus-client's
own metrics take a lock per update). The batch sizes are read from the ``StreamMux``'s own
per-size counts at scrape time too (no cost per batch).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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


class StepTally(Collector):
    """``asyncjit_serve_chunks_total`` and ``asyncjit_serve_step_latency_seconds`` (the same
    samples a ``Counter`` and a ``Histogram`` expose), counted in plain Python by ``record``."""

    def __init__(self) -> None:
        self.chunks = 0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last: over every bound (+Inf)
        self.latency_sum = 0.0
        self.created = time.time()

    def record(self, chunks: int, seconds: float) -> None:
        """``chunks`` answered, ``seconds`` after the first of them was submitted."""
        self.chunks += chunks
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        yield CounterMetricFamily(
            "asyncjit_serve_chunks", "model chunks stepped", value=self.chunks, created=self.created
        )
        name = "asyncjit_serve_step_latency_seconds"
        cum = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*map(floatToGoString, LATENCY_BUCKETS), "+Inf"), self.buckets, strict=True):
            cum += n
            buckets.append((bound, float(cum)))
        family = HistogramMetricFamily(
            name, "a chunk's submit to its result (queue + batch + compute)", buckets, self.latency_sum
        )
        family.samples.append(Sample(f"{name}_created", {}, self.created, None, None))
        yield family


class ServeMetrics:
    """The server's counters, gauges and histograms in their own ``CollectorRegistry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.open_streams = Gauge(
            "asyncjit_serve_open_streams", "connections being served", ["protocol"], registry=r
        )
        self.refusals = Counter(
            "asyncjit_serve_refusals", "connections refused at admission", ["reason"], registry=r
        )
        self.closes = Counter(
            "asyncjit_serve_closes", "connections closed, by reason", ["protocol", "reason"], registry=r
        )
        self.steps = StepTally()
        r.register(self.steps)
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
