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
a push that was lost is covered by the next one. A push is built in steps of
:data:`STEP_POINTS` data points (:meth:`TelemetryMetrics.build`; topics read one at a time
through :class:`TopicRows`), so that a producer of many topics does not hold the event loop
while it builds one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from aiokprod.internals.telemetry import Subscription
from aiokprod.protocol.compression import codec_for_id
from aiokprod.protocol.otlp import (
    CUMULATIVE,
    DELTA,
    GAUGE,
    SUM,
    Metric,
    NumberPoint,
    encode_attributes,
    encode_metric,
    encode_point,
    frame_points,
)
from aiokprod.protocol.otlp import encode_metrics_data as encode

T = TypeVar("T")

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
#: A push is built in steps of this many data points, the event loop given back between
#: them (10,000 topics are 90,000 points: about 0.2 s of CPU in one step otherwise).
STEP_POINTS: Final = 1000


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


class TopicRows(Mapping[str, Mapping[str, float]]):
    """``producer-topic-metrics`` read one topic at a time, as a push is built in steps.

    A topic released between two steps is skipped (its row is gone).
    """

    def __init__(self, names: list[str], row: Callable[[str], Mapping[str, float] | None]):
        self._names = names
        self._row = row

    def __getitem__(self, topic: str) -> Mapping[str, float]:
        row = self._row(topic)
        if row is None:
            raise KeyError(topic)
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(slots=True)
class Payload:
    """One push's bytes and what went into them."""

    data: bytes
    compression: int
    metrics: int
    points: int
    #: Metrics left out to stay within the broker's size limit.
    dropped: int
    #: The sums' values as of this push, for :meth:`TelemetryMetrics.commit` (those of the
    #: metrics left out too: they are not committed).
    sums: dict[_Key, tuple[float, int]] = field(default_factory=dict)
    dropped_names: frozenset[str] = frozenset()


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
        #: The sums' values read by the last :meth:`metrics`, and when.
        self._read: dict[_Key, tuple[float, int]] = {}
        #: (group, registry name) -> telemetry name, or None when not pushed; for one
        #: subscription (the names repeat every push).
        self._names: dict[tuple[str, str], str | None] = {}
        self._names_for: Subscription | None = None
        #: Encoded attributes by value (topics and nodes repeat every push).
        self._attributes: dict[tuple[tuple[str, str], ...], bytes] = {}

    def set_instance_id(self, text: str) -> None:
        """Put the broker-assigned instance id into the resource (first, once)."""
        if not any(key == "client_instance_id" for key, _ in self.resource):
            self.resource.insert(0, ("client_instance_id", text))

    def _name(self, group: str, raw: str, sub: Subscription) -> str | None:
        key = (group, raw)
        try:
            return self._names[key]
        except KeyError:
            name = pushed_name(group, raw)
            found = self._names[key] = name if name is not None and sub.wants(name) else None
            return found

    def metrics(self, groups: Groups, sub: Subscription, now_ns: int) -> list[Metric]:
        """The subscribed metrics of ``groups``, standard ones first (all in one step)."""
        return _run(self._collect(groups, sub, now_ns))

    def _collect(
        self, groups: Groups, sub: Subscription, now_ns: int
    ) -> Generator[None, None, list[Metric]]:
        """:meth:`metrics` in steps; the sums' values as read are kept for :meth:`payload`."""
        if self._delta is not sub.delta:
            self._last.clear()  # a change of temporality starts every sum afresh
            self._delta = sub.delta
        if self._names_for is not sub:
            self._names.clear()
            self._names_for = sub
        producer, topics, nodes = groups
        by_name: dict[str, Metric] = {}
        read = self._read = {}
        temporality = DELTA if sub.delta else CUMULATIVE
        done = 0
        rows: Iterator[tuple[str, tuple[tuple[str, str], ...], Mapping[str, float] | None]]
        rows = itertools.chain(
            [("producer-metrics", (), producer)],
            (("producer-node-metrics", (("node_id", f"node-{n}"),), g) for n, g in nodes.items()),
            (("producer-topic-metrics", (("topic", t),), topics.get(t)) for t in topics),
        )
        for group, attrs, values in rows:
            if values is None:
                continue  # a topic released meanwhile
            for raw, value in values.items():
                name = self._name(group, raw, sub)
                if name is None or not math.isfinite(value):
                    continue
                metric = by_name.get(name)
                if metric is None:
                    kind = SUM if raw.endswith("-total") else GAUGE
                    metric = by_name[name] = Metric(name, kind, temporality)
                value = float(value)
                if metric.kind == SUM:
                    read[name, attrs] = (value, now_ns)
                metric.points.append(self._point(metric, attrs, value, now_ns))
            done += len(values)
            if done >= STEP_POINTS:
                done = 0
                yield
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

    def _encode(self, metrics: list[Metric]) -> Generator[None, None, list[bytes]]:
        cache = self._attributes
        if len(cache) > 100_000:
            cache.clear()  # bounded: topics come and go
        out = []
        done = 0
        for metric in metrics:
            pieces = []
            points = []
            for point in metric.points:
                attrs = cache.get(point.attributes)
                if attrs is None:
                    attrs = cache[point.attributes] = encode_attributes(point.attributes)
                points.append(encode_point(point, attrs))
                done += 1
                if done >= STEP_POINTS:
                    pieces.append(frame_points(points))
                    points = []
                    done = 0
                    yield
            pieces.append(frame_points(points))
            out.append(encode_metric(metric, b"".join(pieces)))
        return out

    def payload(self, groups: Groups, sub: Subscription, now_ns: int) -> Payload:
        """The push: encoded, compressed, cut to the broker's size limit (in one step)."""
        return _run(self.build(groups, sub, now_ns))

    def build(
        self, groups: Groups, sub: Subscription, now_ns: int
    ) -> Generator[None, None, Payload]:
        """:meth:`payload` in steps: the caller gives the loop back at each ``yield``."""
        metrics = yield from self._collect(groups, sub, now_ns)
        encoded = yield from self._encode(metrics)
        codec = sub.compression(CODECS)
        compress = codec_for_id(codec).compressor()
        resource = tuple(self.resource)

        def build(count: int) -> bytes:
            return compress(encode(resource, "aiokprod", self._version, encoded[:count]))

        keep = len(metrics)
        data = build(keep)
        limit = sub.max_bytes
        if 0 < limit < len(data):
            # The most metrics that fit (standard ones first): a binary search.
            low, high = 0, keep - 1
            while low < high:
                yield
                mid = (low + high + 1) // 2
                if len(build(mid)) <= limit:
                    low = mid
                else:
                    high = mid - 1
            keep = low
            data = build(keep)
        points = sum(len(m.points) for m in metrics[:keep])
        dropped = frozenset(m.name for m in metrics[keep:])
        return Payload(data, codec, keep, points, len(metrics) - keep, self._read, dropped)

    def commit(self, payload: Payload) -> None:
        """The broker accepted ``payload``: the next deltas start from its values.

        Sums that were not in it (left out for the size limit) keep their last values; sums
        no longer read (a topic released) are forgotten.
        """
        if not payload.dropped_names:
            self._last = payload.sums
            return
        dropped = payload.dropped_names
        last = {k: v for k, v in payload.sums.items() if k[0] not in dropped}
        last.update((k, v) for k, v in self._last.items() if k[0] in dropped)
        self._last = last


def _run(steps: Generator[None, None, T]) -> T:
    """Run a stepped build to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result
