"""TelemetryMetrics: the registry's metrics under Java's telemetry names, deltas, size limit."""

from __future__ import annotations

import math
import uuid

from opentelemetry.proto.metrics.v1 import metrics_pb2

from aiokprod.internals.telemetry import Subscription
from aiokprod.internals.telemetry_metrics import STANDARD, TelemetryMetrics, pushed_name
from aiokprod.protocol.compression import codec_for_id
from aiokprod.protocol.otlp import GAUGE, SUM

ALL = ("org.apache.kafka.producer.",)
SECOND = 1_000_000_000


def sub(prefixes: tuple[str, ...] = ALL, **fields: object) -> Subscription:
    values: dict[str, object] = {
        "instance_id": uuid.UUID(int=1),
        "subscription_id": 1,
        "accepted_compression": (4,),
        "push_interval_ms": 1000,
        "max_bytes": 1 << 20,
        "delta": True,
        "prefixes": prefixes,
    }
    values.update(fields)
    return Subscription(**values)  # type: ignore[arg-type]


def groups(sent: float = 100.0, topic: str = "orders") -> tuple[dict, dict, dict]:  # type: ignore[type-arg]
    producer = {
        "record-send-rate": 3.5,
        "record-send-total": sent,
        "record-queue-time-avg": 2.0,
        "record-queue-time-max": 9.0,
        "produce-throttle-time-avg": math.nan,  # nothing recorded: left out
        "connection-creation-rate": 0.1,
        "connection-creation-total": 2.0,
        "batches-queued": 4.0,  # aiokprod's own: not pushed
        "records_sent": sent,  # a name of earlier versions: not pushed
        "telemetry-push-total": 5.0,  # the pushes' own metrics: not pushed
    }
    topics = {topic: {"record-send-total": sent, "byte-rate": 10.0}}
    nodes = {1: {"request-latency-avg": 4.0, "request-total": 7.0}}
    return producer, topics, nodes


def by_name(builder: TelemetryMetrics, data: tuple[dict, dict, dict], s: Subscription, now: int):  # type: ignore[type-arg]
    return {m.name: m for m in builder.metrics(data, s, now)}


def test_java_names_kinds_and_attributes() -> None:
    assert pushed_name("producer-metrics", "record-queue-time-avg") == (
        "org.apache.kafka.producer.record.queue.time.avg"
    )
    assert pushed_name("producer-node-metrics", "request-latency-max") == (
        "org.apache.kafka.producer.node.request.latency.max"
    )
    assert pushed_name("producer-topic-metrics", "byte-rate") == (
        "org.apache.kafka.producer.topic.byte.rate"
    )
    assert pushed_name("producer-metrics", "batches-in-flight") is None
    assert pushed_name("producer-metrics", "records_sent") is None
    assert pushed_name("latency-histograms", "send-to-ack-ms") is None
    metrics = by_name(TelemetryMetrics([], "1", 0), groups(), sub(), SECOND)
    assert set(metrics) == {
        "org.apache.kafka.producer.record.send.rate",
        "org.apache.kafka.producer.record.send.total",
        "org.apache.kafka.producer.record.queue.time.avg",
        "org.apache.kafka.producer.record.queue.time.max",
        "org.apache.kafka.producer.connection.creation.rate",
        "org.apache.kafka.producer.connection.creation.total",
        "org.apache.kafka.producer.topic.record.send.total",
        "org.apache.kafka.producer.topic.byte.rate",
        "org.apache.kafka.producer.node.request.latency.avg",
        "org.apache.kafka.producer.node.request.total",
    }
    assert metrics["org.apache.kafka.producer.record.send.total"].kind == SUM
    assert metrics["org.apache.kafka.producer.record.send.rate"].kind == GAUGE
    node = metrics["org.apache.kafka.producer.node.request.latency.avg"].points[0]
    assert node.attributes == (("node_id", "node-1"),)
    topic = metrics["org.apache.kafka.producer.topic.byte.rate"].points[0]
    assert topic.attributes == (("topic", "orders"),)


def test_standard_metrics_come_first() -> None:
    names = [m.name for m in TelemetryMetrics([], "1", 0).metrics(groups(), sub(), SECOND)]
    standard = [n for n in names if n in STANDARD]
    assert names[: len(standard)] == standard
    assert standard == [n for n in STANDARD if n in standard]


def test_only_subscribed_prefixes() -> None:
    s = sub(("org.apache.kafka.producer.node.", "org.apache.kafka.producer.record.queue"))
    assert set(by_name(TelemetryMetrics([], "1", 0), groups(), s, SECOND)) == {
        "org.apache.kafka.producer.node.request.latency.avg",
        "org.apache.kafka.producer.node.request.total",
        "org.apache.kafka.producer.record.queue.time.avg",
        "org.apache.kafka.producer.record.queue.time.max",
    }
    nothing = sub(("org.apache.kafka.consumer.",))
    assert TelemetryMetrics([], "1", 0).metrics(groups(), nothing, SECOND) == []


def test_deltas_start_from_the_last_accepted_push() -> None:
    builder = TelemetryMetrics([], "1", 7)
    s = sub()
    name = "org.apache.kafka.producer.record.send.total"
    first = builder.payload(groups(sent=100), s, 1 * SECOND)
    point = by_name(builder, groups(sent=100), s, 1 * SECOND)[name].points[0]
    assert (point.value, point.start_time_unix_nano) == (100, 7)  # since the producer started
    builder.commit(first)
    second = builder.payload(groups(sent=130), s, 2 * SECOND)
    point = by_name(builder, groups(sent=130), s, 2 * SECOND)[name].points[0]
    assert (point.value, point.start_time_unix_nano) == (30, 1 * SECOND)
    # The second push was lost (not committed): the third covers both intervals.
    point = by_name(builder, groups(sent=160), s, 3 * SECOND)[name].points[0]
    assert (point.value, point.start_time_unix_nano) == (60, 1 * SECOND)
    builder.commit(second)
    # A total that went down (a topic that idled out, used again) starts afresh.
    topic = "org.apache.kafka.producer.topic.record.send.total"
    point = by_name(builder, groups(sent=5), s, 4 * SECOND)[topic].points[0]
    assert point.value == 5


def test_cumulative_sums_and_a_change_of_temporality() -> None:
    builder = TelemetryMetrics([], "1", 7)
    name = "org.apache.kafka.producer.record.send.total"
    builder.commit(builder.payload(groups(sent=100), sub(), SECOND))
    cumulative = sub(delta=False)
    point = by_name(builder, groups(sent=130), cumulative, 2 * SECOND)[name].points[0]
    assert (point.value, point.start_time_unix_nano) == (130, 7)
    builder.commit(builder.payload(groups(sent=130), cumulative, 2 * SECOND))
    # Back to deltas: the ledger started afresh, so the first delta is the whole total.
    point = by_name(builder, groups(sent=150), sub(), 3 * SECOND)[name].points[0]
    assert point.value == 150


def test_the_payload_is_compressed_and_carries_the_resource() -> None:
    builder = TelemetryMetrics([("client_id", "p-1")], "0.1.0", 0)
    builder.set_instance_id("Jrzc3SGdQTGSyT0nrzqWrw")
    builder.set_instance_id("other")  # once
    for codec in (0, 1, 2, 3, 4):
        payload = builder.payload(groups(), sub(accepted_compression=(codec,)), SECOND)
        assert payload.compression == codec
        data = metrics_pb2.MetricsData.FromString(codec_for_id(codec).decompress(payload.data))
        attrs = [
            (a.key, a.value.string_value) for a in data.resource_metrics[0].resource.attributes
        ]
        assert attrs == [("client_instance_id", "Jrzc3SGdQTGSyT0nrzqWrw"), ("client_id", "p-1")]
        assert payload.metrics == len(data.resource_metrics[0].scope_metrics[0].metrics) == 10
        assert payload.dropped == 0


def test_a_size_limit_keeps_the_standard_metrics_that_fit() -> None:
    builder = TelemetryMetrics([], "1", 0)
    many_topics = groups()
    many_topics[1].update(
        {f"topic-{i}": {"record-send-total": i, "byte-rate": i} for i in range(300)}
    )
    full = builder.payload(many_topics, sub(accepted_compression=()), SECOND)
    limit = len(full.data) // 4
    cut = builder.payload(many_topics, sub(accepted_compression=(), max_bytes=limit), SECOND)
    assert len(cut.data) <= limit
    assert cut.dropped > 0
    assert cut.metrics + cut.dropped == full.metrics
    data = metrics_pb2.MetricsData.FromString(cut.data)
    names = [m.name for m in data.resource_metrics[0].scope_metrics[0].metrics]
    assert "org.apache.kafka.producer.connection.creation.rate" in names
    assert "org.apache.kafka.producer.record.queue.time.max" in names
    # Committed, the sums left out keep their last values: the next push carries their
    # deltas since the last push that held them.
    total = "org.apache.kafka.producer.topic.record.send.total"
    assert total not in names
    builder.commit(full)
    more = groups()
    more[1].update({f"topic-{i}": {"record-send-total": i + 1} for i in range(300)})
    tiny = builder.payload(more, sub(accepted_compression=(), max_bytes=10), 2 * SECOND)
    assert tiny.metrics == 0
    builder.commit(tiny)
    after = by_name(builder, more, sub(), 3 * SECOND)[total].points
    assert {p.attributes[0][1]: p.value for p in after}["topic-7"] == 1  # 8 - 7
