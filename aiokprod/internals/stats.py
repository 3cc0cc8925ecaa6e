"""Producer metrics with the Java client's names and meanings, recorded per batch and request.

Like the Java producer's ``producer-metrics``, ``producer-topic-metrics`` and
``producer-node-metrics`` groups: totals since start, and rates, averages and maxima over a
sliding window of two 30 s samples (Java's ``metrics.sample.window.ms`` and
``metrics.num.samples`` defaults), computed as Java's ``Rate`` and ``SampledStat`` do. Three
latency histograms (request latency, record queue time, send to acknowledgement) keep
cumulative bucket counts for exporters. Nothing here runs per record: every call takes a
batch or a request, and the time comes from the producer's clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiokprod.internals.batch import ProducerBatch

#: Java's metrics.sample.window.ms and metrics.num.samples defaults.
WINDOW_MS: Final = 30_000
SAMPLES: Final = 2
#: ``Windowed._start_ms`` before the first observation (any time is a window past it).
_NO_SAMPLE: Final = -(2**62)
#: Upper bounds (ms) of the latency histograms' buckets; a last one takes everything above.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000,
)  # fmt: skip


class Windowed:
    """A sampled statistic: count, sum and max per 30 s sample, the last two kept.

    The current sample's figures are plain attributes (unboxed numbers in the compiled
    build): ``record`` runs about twenty times per Produce request and response.
    """

    __slots__ = ("_count", "_max", "_older", "_start_ms", "_sum", "total")

    def __init__(self) -> None:
        #: The sum of every observation since start (the ``*-total`` metrics).
        self.total: float = 0.0
        #: The current sample: its start (_NO_SAMPLE before the first observation), count,
        #: sum and max.
        self._start_ms = _NO_SAMPLE
        self._count = 0
        self._sum: float = 0.0
        self._max: float = -math.inf
        #: The samples before it, [start_ms, count, total, max] each, oldest first.
        self._older: list[list[float]] = []

    def record(self, value: float, now_ms: int) -> None:
        """Add one observation of ``value`` at ``now_ms``."""
        self.total += value
        if now_ms - self._start_ms >= WINDOW_MS:
            self._next_sample(now_ms)
        self._count += 1
        self._sum += value
        if value > self._max:
            self._max = value

    def _next_sample(self, now_ms: int) -> None:
        if self._start_ms != _NO_SAMPLE:
            older = self._older
            older.append([self._start_ms, self._count, self._sum, self._max])
            if len(older) > SAMPLES - 1:
                del older[0]
        self._start_ms = now_ms
        self._count = 0
        self._sum = 0.0
        self._max = -math.inf

    def _samples(self) -> list[list[float]]:
        if self._start_ms == _NO_SAMPLE:
            return []
        return [*self._older, [self._start_ms, self._count, self._sum, self._max]]

    def _live(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - SAMPLES * WINDOW_MS
        return [s for s in self._samples() if s[0] > horizon]

    def rate(self, now_ms: int) -> float:
        """Sum per second over the window (Java's ``Rate``; 0 with no observation).

        Like Java's ``Rate.windowSize``, it divides by at least ``SAMPLES - 1`` full windows,
        so a young producer's rate is not inflated by a short elapsed time.
        """
        live = self._live(now_ms)
        if not live:
            return 0.0
        elapsed = now_ms - live[0][0]
        full = int(elapsed // WINDOW_MS)
        if full < SAMPLES - 1:
            elapsed += (SAMPLES - 1 - full) * WINDOW_MS
        return sum(s[2] for s in live) / (max(elapsed, 1) / 1000)

    def avg(self, now_ms: int) -> float:
        """Mean observation over the window (NaN with none, as Java reports)."""
        live = self._live(now_ms)
        count = sum(s[1] for s in live)
        return sum(s[2] for s in live) / count if count else math.nan

    def max(self, now_ms: int) -> float:
        """Largest observation over the window (NaN with none)."""
        live = self._live(now_ms)
        return max((s[3] for s in live), default=math.nan)


class Histogram:
    """Cumulative latency buckets since start (for Prometheus/OpenTelemetry exporters)."""

    __slots__ = ("count", "counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def record(self, value_ms: float) -> None:
        """Add one latency."""
        index = 0
        for bound in LATENCY_BUCKETS_MS:
            if value_ms <= bound:
                break
            index += 1
        self.counts[index] += 1
        self.count += 1
        self.sum_ms += value_ms

    def snapshot(self) -> dict[str, object]:
        """``{"bounds_ms": [...], "counts": [...], "count": n, "sum_ms": s}``."""
        return {
            "bounds_ms": list(LATENCY_BUCKETS_MS),
            "counts": list(self.counts),
            "count": self.count,
            "sum_ms": self.sum_ms,
        }


@dataclass(slots=True)
class _Group:
    """Windowed statistics and totals of one metric group (producer, a topic or a node)."""

    stats: dict[str, Windowed] = field(default_factory=dict)

    def stat(self, name: str) -> Windowed:
        """The statistic ``name`` (created empty on first use)."""
        stat = self.stats.get(name)
        if stat is None:
            stat = self.stats[name] = Windowed()
        return stat

    def record(self, name: str, value: float, now_ms: int) -> None:
        self.stat(name).record(value, now_ms)

    def total(self, name: str) -> float:
        """The sum since start of ``name`` (0 if never recorded)."""
        stat = self.stats.get(name)
        return 0 if stat is None else stat.total


class _NodeStats:
    """A node's group and the statistics recorded per request (looked up once)."""

    __slots__ = ("group", "outgoing_byte", "request", "request_latency", "response")

    def __init__(self, group: _Group) -> None:
        self.group = group
        self.request = group.stat("request")
        self.outgoing_byte = group.stat("outgoing-byte")
        self.response = group.stat("response")
        self.request_latency = group.stat("request-latency")


class _TopicStats:
    """A topic's group and the statistics recorded per batch (looked up once)."""

    __slots__ = ("byte", "compression_rate", "group", "record_send")

    def __init__(self, group: _Group) -> None:
        self.group = group
        self.byte = group.stat("byte")
        self.compression_rate = group.stat("compression-rate")
        self.record_send = group.stat("record-send")


class ProducerStats:
    """Everything behind ``Producer.metrics()`` (recorded per batch and per request)."""

    def __init__(self) -> None:
        self._producer = _Group()
        self._topics: dict[str, _Group] = {}
        self._nodes: dict[int, _Group] = {}
        self._topic_stats: dict[str, _TopicStats] = {}
        self._node_stats: dict[int, _NodeStats] = {}
        self.request_latency = Histogram()
        self.record_queue_time = Histogram()
        self.send_to_ack = Histogram()
        self.batches_compressed_in_thread = 0
        #: Called with (histogram name, ms) for each latency recorded (exporters hook here).
        self.latency_listeners: list[Callable[[str, float], None]] = []
        # What is recorded per request, response and batch, looked up once. (A statistic
        # that exists but was never recorded reads like a missing one: rate 0, avg NaN.)
        p = self._producer.stat
        self._request = p("request")
        self._outgoing_byte = p("outgoing-byte")
        self._batch = p("batch")
        self._batch_size = p("batch-size")
        self._record_size = p("record-size")
        self._compression_rate = p("compression-rate")
        self._record_queue_time = p("record-queue-time")
        self._records_per_request = p("records-per-request")
        self._response = p("response")
        self._request_latency = p("request-latency")
        self._throttle_time = p("produce-throttle-time")
        self._record_send = p("record-send")
        self._connection_creation = p("connection-creation")

    def _latency(self, histogram: Histogram, name: str, value_ms: float) -> None:
        histogram.record(value_ms)
        for listener in self.latency_listeners:
            listener(name, value_ms)

    def _topic(self, topic: str) -> _Group:
        return self._topic_group(topic).group

    def _topic_group(self, topic: str) -> _TopicStats:
        stats = self._topic_stats.get(topic)
        if stats is None:
            group = self._topics[topic] = _Group()
            stats = self._topic_stats[topic] = _TopicStats(group)
        return stats

    def _node(self, node: int) -> _NodeStats:
        stats = self._node_stats.get(node)
        if stats is None:
            group = self._nodes[node] = _Group()
            stats = self._node_stats[node] = _NodeStats(group)
        return stats

    # --- recording --------------------------------------------------------------------------

    def on_request(self, node: int, batches: list[ProducerBatch], size: int, now_ms: int) -> None:
        """A Produce request with ``batches`` (``size`` bytes) was written to ``node``."""
        self._request.record(1, now_ms)
        self._outgoing_byte.record(size, now_ms)
        self._batch.record(len(batches), now_ms)
        batch_size, record_size = self._batch_size, self._record_size
        compression_rate, queue_time = self._compression_rate, self._record_queue_time
        records = 0
        for batch in batches:
            closed = batch.closed
            if closed is None:  # pragma: no cover - drained batches are closed
                continue
            count = closed.record_count
            records += count
            batch_size.record(closed.size_in_bytes, now_ms)
            record_size.record(closed.uncompressed_size / max(count, 1), now_ms)
            ratio = closed.size_in_bytes / max(closed.uncompressed_size, 1)
            compression_rate.record(ratio, now_ms)
            topic = self._topic_group(batch.tp.topic)
            topic.byte.record(closed.size_in_bytes, now_ms)
            topic.compression_rate.record(ratio, now_ms)
            if batch.attempts == 0:
                queued = now_ms - batch.created_ms
                queue_time.record(queued, now_ms)
                self._latency(self.record_queue_time, "record-queue-time-ms", queued)
        self._records_per_request.record(records, now_ms)
        n = self._node(node)
        n.request.record(1, now_ms)
        n.outgoing_byte.record(size, now_ms)

    def on_response(self, node: int, latency_ms: int, throttle_ms: int, now_ms: int) -> None:
        """``node`` answered a Produce request after ``latency_ms``."""
        self._response.record(1, now_ms)
        self._request_latency.record(latency_ms, now_ms)
        self._throttle_time.record(throttle_ms, now_ms)
        self._latency(self.request_latency, "request-latency-ms", latency_ms)
        n = self._node(node)
        n.response.record(1, now_ms)
        n.request_latency.record(latency_ms, now_ms)

    def on_success(self, batch: ProducerBatch, now_ms: int) -> None:
        """A batch was acknowledged."""
        count = batch.record_count
        self._record_send.record(count, now_ms)
        self._topic_group(batch.tp.topic).record_send.record(count, now_ms)
        self._latency(self.send_to_ack, "send-to-ack-ms", now_ms - batch.created_ms)

    def on_failure(self, batch: ProducerBatch, now_ms: int) -> None:
        """A batch failed for good."""
        count = batch.record_count
        self._producer.record("record-error", count, now_ms)
        self._topic(batch.tp.topic).record("record-error", count, now_ms)

    def on_retry(self, batch: ProducerBatch, now_ms: int) -> None:
        """A batch goes back to the queue for another attempt."""
        count = batch.record_count
        self._producer.record("record-retry", count, now_ms)
        self._topic(batch.tp.topic).record("record-retry", count, now_ms)

    def on_split(self, batch: ProducerBatch, now_ms: int) -> None:
        """A batch refused as too large was split (Java: ``batch-split``)."""
        self._producer.record("batch-split", 1, now_ms)

    def on_connection(self, now_ms: int) -> None:
        """A connection to a broker was opened (Java: ``connection-creation``)."""
        self._connection_creation.record(1, now_ms)

    def on_telemetry_push(self, size: int, dropped: int, now_ms: int) -> None:
        """The broker accepted a telemetry push of ``size`` bytes (KIP-714)."""
        g = self._producer
        g.record("telemetry-push", 1, now_ms)
        g.record("telemetry-push-size", size, now_ms)
        if dropped:
            g.record("telemetry-push-dropped-metrics", dropped, now_ms)

    def on_telemetry_error(self, now_ms: int) -> None:
        """A telemetry request failed: refused by the broker, or unanswered."""
        self._producer.record("telemetry-push-error", 1, now_ms)

    def release_topics(self, topics: list[str]) -> None:
        """Drop topics' metrics (they idled out of the producer's view, issue 30)."""
        for topic in topics:
            self._topics.pop(topic, None)
            self._topic_stats.pop(topic, None)
        # A dict keeps its size when emptied: new ones.
        self._topics = dict(self._topics)
        self._topic_stats = dict(self._topic_stats)

    # --- reading ----------------------------------------------------------------------------

    def total(self, name: str) -> float:
        """A producer-wide total since start (0 if never recorded)."""
        return self._producer.total(name)

    def producer_metrics(self, now_ms: int) -> dict[str, float]:
        """The ``producer-metrics`` group (Java names), rates per second."""
        g = self._producer
        out: dict[str, float] = {}
        for name in ("record-send", "record-error", "record-retry"):
            out[f"{name}-rate"] = _rate(g, name, now_ms)
            out[f"{name}-total"] = g.total(name)
        out["batch-split-rate"] = _rate(g, "batch-split", now_ms)
        out["batch-split-total"] = g.total("batch-split")
        out["request-rate"] = _rate(g, "request", now_ms)
        out["request-total"] = g.total("request")
        out["response-rate"] = _rate(g, "response", now_ms)
        out["response-total"] = g.total("response")
        out["outgoing-byte-rate"] = _rate(g, "outgoing-byte", now_ms)
        out["outgoing-byte-total"] = g.total("outgoing-byte")
        for name in (
            "request-latency",
            "batch-size",
            "record-size",
            "record-queue-time",
            "produce-throttle-time",
        ):
            out[f"{name}-avg"] = _avg(g, name, now_ms)
            out[f"{name}-max"] = _max(g, name, now_ms)
        out["records-per-request-avg"] = _avg(g, "records-per-request", now_ms)
        out["compression-rate-avg"] = _avg(g, "compression-rate", now_ms)
        out["connection-creation-rate"] = _rate(g, "connection-creation", now_ms)
        out["connection-creation-total"] = g.total("connection-creation")
        for name in ("telemetry-push", "telemetry-push-error"):
            out[f"{name}-rate"] = _rate(g, name, now_ms)
            out[f"{name}-total"] = g.total(name)
        out["telemetry-push-size-avg"] = _avg(g, "telemetry-push-size", now_ms)
        out["telemetry-push-size-max"] = _max(g, "telemetry-push-size", now_ms)
        out["telemetry-push-dropped-metrics-total"] = g.total("telemetry-push-dropped-metrics")
        return out

    def topic_metrics(self, now_ms: int) -> dict[str, dict[str, float]]:
        """``producer-topic-metrics`` per topic."""
        return {topic: _topic_row(g, now_ms) for topic, g in self._topics.items()}

    def topic_names(self) -> list[str]:
        """The topics of ``producer-topic-metrics`` (a copy)."""
        return list(self._topics)

    def topic_row(self, topic: str, now_ms: int) -> dict[str, float] | None:
        """One topic's ``producer-topic-metrics`` (None: not, or no longer, kept)."""
        g = self._topics.get(topic)
        return None if g is None else _topic_row(g, now_ms)

    def node_metrics(self, now_ms: int) -> dict[int, dict[str, float]]:
        """``producer-node-metrics`` per broker."""
        out: dict[int, dict[str, float]] = {}
        for node, g in self._nodes.items():
            out[node] = {
                "request-rate": _rate(g, "request", now_ms),
                "request-total": g.total("request"),
                "response-rate": _rate(g, "response", now_ms),
                "response-total": g.total("response"),
                "outgoing-byte-rate": _rate(g, "outgoing-byte", now_ms),
                "outgoing-byte-total": g.total("outgoing-byte"),
                "request-latency-avg": _avg(g, "request-latency", now_ms),
                "request-latency-max": _max(g, "request-latency", now_ms),
            }
        return out

    def histograms(self) -> dict[str, dict[str, object]]:
        """The latency histograms (cumulative since start)."""
        return {
            "request-latency-ms": self.request_latency.snapshot(),
            "record-queue-time-ms": self.record_queue_time.snapshot(),
            "send-to-ack-ms": self.send_to_ack.snapshot(),
        }


def _topic_row(g: _Group, now_ms: int) -> dict[str, float]:
    return {
        "record-send-rate": _rate(g, "record-send", now_ms),
        "record-send-total": g.total("record-send"),
        "byte-rate": _rate(g, "byte", now_ms),
        "byte-total": g.total("byte"),
        "compression-rate": _avg(g, "compression-rate", now_ms),
        "record-retry-rate": _rate(g, "record-retry", now_ms),
        "record-retry-total": g.total("record-retry"),
        "record-error-rate": _rate(g, "record-error", now_ms),
        "record-error-total": g.total("record-error"),
    }


def _rate(group: _Group, name: str, now_ms: int) -> float:
    stat = group.stats.get(name)
    return stat.rate(now_ms) if stat is not None else 0.0


def _avg(group: _Group, name: str, now_ms: int) -> float:
    stat = group.stats.get(name)
    return stat.avg(now_ms) if stat is not None else math.nan


def _max(group: _Group, name: str, now_ms: int) -> float:
    stat = group.stats.get(name)
    return stat.max(now_ms) if stat is not None else math.nan
