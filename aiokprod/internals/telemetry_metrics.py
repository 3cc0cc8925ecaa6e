"""What a KIP-714 push holds: the producer's own metrics, named as the Java client names them.

Nothing is counted twice: a push reads the metric groups ``Producer.metric_groups()`` returns
(the registry of :mod:`aiokprod.internals.stats`, and the runtime's gauges) and renames them
the way the Java client's telemetry reporter does, ``org.apache.kafka.`` + the group without
``-metrics`` + the name, dashes turned into dots:

* ``producer-metrics`` → ``org.apache.kafka.producer.<name>``
  (``record-queue-time-avg`` → ``org.apache.kafka.producer.record.queue.time.avg``);
* ``producer-node-metrics`` → ``org.apache.kafka.producer.node.<name>``, attribute
  ``node_id`` (``node-1``, as Java's tag);
* ``producer-topic-metrics`` → ``org.apache.kafka.producer.topic.<name>``, attribute
  ``topic``.

A ``*-total`` is a monotonic sum (delta or cumulative, as the subscription says), everything
else a gauge, as in Java. Metrics only aiokprod keeps (``batches-queued``, the telemetry
metrics themselves, the names of earlier versions) are not pushed: the ``org.apache.kafka.``
names mean what they mean in every client. A value with nothing recorded (NaN) is left out
(the KIP's sparse metrics). The KIP's standard producer metrics go first, so that they stay
when the broker's size limit leaves out the rest.

Deltas are taken against the last push the broker accepted (:meth:`TelemetryMetrics.commit`):
a push that was lost is covered by the next one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aiokprod.internals.telemetry import Subscription
from aiokprod.protocol.compression import codec_for_id
from aiokprod.protocol.otlp import CUMULATIVE, DELTA, GAUGE, SUM, Metric, NumberPoint
from aiokprod.protocol.otlp import encode_metrics_data as encode

PREFIX: Final = "org.apache.kafka.producer."
#: The KIP's standard producer metrics (and the two request-latency ones librdkafka adds).
STANDARD: Final = tuple(
    PREFIX + name
    for name in (
        "connection.creation.rate",
        "connection.creation.total",
        "node.request.latency.avg",
        "node.request.latency.max",
        "produce.throttle.time.avg",
        "produce.throttle.time.max",
        "record.queue.time.avg",
        "record.queue.time.max",
        "request.latency.avg",
        "request.latency.max",
    )
)
#: producer-metrics names only aiokprod has: not pushed under Kafka's names.
OWN_NAMES: Final = frozenset(
    {"batches-queued", "batches-in-flight", "batches-compressed-in-thread", "metadata-version"}
)
#: Codec ids this client compresses with (gzip, snappy, lz4, zstd).
CODECS: Final = (1, 2, 3, 4)

Groups = tuple[
    Mapping[str, float], Mapping[str, Mapping[str, float]], Mapping[int, Mapping[str, float]]
]
_Key = tuple[str, tuple[tuple[str, str], ...]]


def pushed_name(group: str, name: str) -> str | None:
    """The telemetry name of a registry metric (None: not pushed)."""
    if "_" in name or name.startswith("telemetry-") or name in OWN_NAMES:
        return None
    dotted = name.replace("-", ".")
    if group == "producer-metrics":
        return PREFIX + dotted
    if group == "producer-node-metrics":
        return PREFIX + "node." + dotted
    if group == "producer-topic-metrics":
        return PREFIX + "topic." + dotted
    return None


@dataclass(slots=True)
class Payload:
    """One push's bytes and what went into them."""

    data: bytes
    compression: int
    metrics: int
    points: int
    #: Metrics left out to stay within the broker's size limit.
    dropped: int
    #: The sums' values as of this push, for :meth:`TelemetryMetrics.commit`.
    sums: dict[_Key, tuple[float, int]] = field(default_factory=dict)


class TelemetryMetrics:
    """Builds pushes from the producer's metric groups (see the module docstring).

    Args:
        resource: the OTLP resource's attributes (the KIP's client labels).
        version: aiokprod's version (the instrumentation scope's).
        start_ns: wall-clock ns the producer started (cumulative sums start there).
    """

    def __init__(self, resource: list[tuple[str, str]], version: str, start_ns: int) -> None:
        self.resource = list(resource)
        self._version = version
        self._start_ns = start_ns
        #: Per sum, its value and time as of the last push the broker accepted.
        self._last: dict[_Key, tuple[float, int]] = {}
        self._delta: bool | None = None
        #: The sums' values read by the last :meth:`metrics`.
        self._totals: dict[_Key, float] = {}

    def set_instance_id(self, text: str) -> None:
        """Put the broker-assigned instance id into the resource (first, once)."""
        if not any(key == "client_instance_id" for key, _ in self.resource):
            self.resource.insert(0, ("client_instance_id", text))

    def metrics(self, groups: Groups, sub: Subscription, now_ns: int) -> list[Metric]:
        """The subscribed metrics of ``groups``, standard ones first.

        The sums' values as read are kept for :meth:`payload` (:attr:`Payload.sums`).
        """
        if self._delta is not sub.delta:
            self._last.clear()  # a change of temporality starts every sum afresh
            self._delta = sub.delta
        producer, topics, nodes = groups
        rows: list[tuple[str, tuple[tuple[str, str], ...], Mapping[str, float]]] = [
            ("producer-metrics", (), producer)
        ]
        rows += [
            ("producer-node-metrics", (("node_id", f"node-{n}"),), g) for n, g in nodes.items()
        ]
        rows += [("producer-topic-metrics", (("topic", t),), g) for t, g in topics.items()]
        by_name: dict[str, Metric] = {}
        self._totals = {}
        for group, attrs, values in rows:
            for raw, value in values.items():
                name = pushed_name(group, raw)
                if name is None or not sub.wants(name) or not math.isfinite(value):
                    continue
                metric = by_name.get(name)
                if metric is None:
                    kind = SUM if raw.endswith("-total") else GAUGE
                    temporality = DELTA if sub.delta else CUMULATIVE
                    metric = by_name[name] = Metric(name, kind, temporality)
                value = float(value)
                if metric.kind == SUM:
                    self._totals[name, attrs] = value
                metric.points.append(self._point(metric, attrs, value, now_ns))
        rank = {name: i for i, name in enumerate(STANDARD)}
        return sorted(by_name.values(), key=lambda m: rank.get(m.name, len(rank)))

    def _point(
        self, metric: Metric, attrs: tuple[tuple[str, str], ...], value: float, now_ns: int
    ) -> NumberPoint:
        if metric.kind == GAUGE:
            return NumberPoint(value, now_ns, 0, attrs)
        last = self._last.get((metric.name, attrs))
        if metric.temporality == CUMULATIVE or last is None:
            return NumberPoint(value, now_ns, self._start_ns, attrs)
        last_value, last_ns = last
        # A total that went down started afresh (a topic that idled out and came back).
        delta = value - last_value if value >= last_value else value
        return NumberPoint(delta, now_ns, last_ns, attrs)

    def payload(self, groups: Groups, sub: Subscription, now_ns: int) -> Payload:
        """The push: encoded, compressed, cut to the broker's size limit."""
        metrics = self.metrics(groups, sub, now_ns)
        codec = sub.compression(CODECS)
        compress = codec_for_id(codec).compressor()
        resource = tuple(self.resource)

        def build(count: int) -> bytes:
            return compress(encode(resource, "aiokprod", self._version, metrics[:count]))

        keep = len(metrics)
        data = build(keep)
        limit = sub.max_bytes
        if 0 < limit < len(data):
            # The most metrics that fit (standard ones first): a binary search.
            low, high = 0, keep - 1
            while low < high:
                mid = (low + high + 1) // 2
                if len(build(mid)) <= limit:
                    low = mid
                else:
                    high = mid - 1
            keep = low
            data = build(keep)
        kept = metrics[:keep]
        totals = self._totals
        sums = {
            (m.name, p.attributes): (totals[m.name, p.attributes], now_ns)
            for m in kept
            if m.kind == SUM
            for p in m.points
        }
        points = sum(len(m.points) for m in kept)
        return Payload(data, codec, keep, points, len(metrics) - keep, sums)

    def commit(self, payload: Payload) -> None:
        """The broker accepted ``payload``: the next deltas start from its values."""
        self._last.update(payload.sums)
