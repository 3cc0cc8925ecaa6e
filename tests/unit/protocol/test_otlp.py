"""The hand-written OTLP encoder, read back by the OpenTelemetry reference classes."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.metrics.v1 import metrics_pb2

from aiokprod.protocol.otlp import (
    CUMULATIVE,
    DELTA,
    GAUGE,
    SUM,
    Metric,
    NumberPoint,
    encode_metrics_data,
)


def parse(data: bytes) -> metrics_pb2.MetricsData:
    return metrics_pb2.MetricsData.FromString(data)


def test_a_gauge_and_a_delta_sum_read_back() -> None:
    gauge = Metric(
        "org.apache.kafka.producer.node.request.latency.avg",
        GAUGE,
        points=[
            NumberPoint(4.5, 1_700_000_000_000_000_000, 0, (("node_id", "node-1"),)),
            NumberPoint(0.0, 1_700_000_000_000_000_000, 0, (("node_id", "node-2"),)),
        ],
    )
    total = Metric(
        "org.apache.kafka.producer.record.send.total",
        SUM,
        DELTA,
        description="records acknowledged",
        unit="1",
        points=[NumberPoint(120.0, 2_000, 1_000)],
    )
    data = encode_metrics_data(
        (("client_instance_id", "abc"), ("client_id", "p-1")), "aiokprod", "0.1.0", [gauge, total]
    )
    parsed = parse(data)
    assert len(parsed.resource_metrics) == 1
    rm = parsed.resource_metrics[0]
    assert [(kv.key, kv.value.string_value) for kv in rm.resource.attributes] == [
        ("client_instance_id", "abc"),
        ("client_id", "p-1"),
    ]
    (sm,) = rm.scope_metrics
    assert (sm.scope.name, sm.scope.version) == ("aiokprod", "0.1.0")
    first, second = sm.metrics
    assert first.name == gauge.name
    assert first.WhichOneof("data") == "gauge"
    assert [p.as_double for p in first.gauge.data_points] == [4.5, 0.0]
    assert [p.WhichOneof("value") for p in first.gauge.data_points] == ["as_double"] * 2
    assert [
        [(kv.key, kv.value.string_value) for kv in p.attributes] for p in first.gauge.data_points
    ] == [[("node_id", "node-1")], [("node_id", "node-2")]]
    assert first.gauge.data_points[0].time_unix_nano == 1_700_000_000_000_000_000
    assert first.gauge.data_points[0].start_time_unix_nano == 0
    assert second.WhichOneof("data") == "sum"
    assert (second.description, second.unit) == ("records acknowledged", "1")
    assert second.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    assert second.sum.is_monotonic
    (point,) = second.sum.data_points
    assert (point.as_double, point.start_time_unix_nano, point.time_unix_nano) == (120, 1000, 2000)


def test_cumulative_temporality_and_no_metrics() -> None:
    data = encode_metrics_data((), "s", "", [Metric("x", SUM, CUMULATIVE, monotonic=False)])
    (metric,) = parse(data).resource_metrics[0].scope_metrics[0].metrics
    assert metric.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
    assert not metric.sum.is_monotonic
    assert len(metric.sum.data_points) == 0
    empty = parse(encode_metrics_data((), "s", "v", []))
    assert len(empty.resource_metrics[0].scope_metrics[0].metrics) == 0


_text = st.text(min_size=1, max_size=30)
_point = st.builds(
    NumberPoint,
    st.floats(allow_nan=False),
    st.integers(1, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.lists(st.tuples(_text, st.text(max_size=30)), max_size=3).map(tuple),
)
_metric = st.builds(
    Metric,
    _text,
    st.sampled_from([GAUGE, SUM]),
    st.sampled_from([DELTA, CUMULATIVE]),
    st.booleans(),
    st.text(max_size=20),
    st.text(max_size=5),
    st.lists(_point, max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(
    resource=st.lists(st.tuples(_text, st.text(max_size=40)), max_size=4).map(tuple),
    metrics=st.lists(_metric, max_size=6),
)
def test_anything_encoded_reads_back_the_same(
    resource: tuple[tuple[str, str], ...], metrics: list[Metric]
) -> None:
    parsed = parse(encode_metrics_data(resource, "aiokprod", "1.2.3", metrics))
    rm = parsed.resource_metrics[0]
    assert [(kv.key, kv.value.string_value) for kv in rm.resource.attributes] == list(resource)
    got = rm.scope_metrics[0].metrics
    assert len(got) == len(metrics)
    for ours, theirs in zip(metrics, got, strict=True):
        assert (theirs.name, theirs.description, theirs.unit) == (
            ours.name,
            ours.description,
            ours.unit,
        )
        kind = theirs.WhichOneof("data")
        assert kind == ("gauge" if ours.kind == GAUGE else "sum")
        body = getattr(theirs, kind)
        if ours.kind == SUM:
            assert body.aggregation_temporality == ours.temporality
            assert body.is_monotonic == ours.monotonic
        assert len(body.data_points) == len(ours.points)
        for p, q in zip(ours.points, body.data_points, strict=True):
            assert q.as_double == p.value or (math.isnan(p.value) and math.isnan(q.as_double))
            assert (q.time_unix_nano, q.start_time_unix_nano) == (
                p.time_unix_nano,
                p.start_time_unix_nano,
            )
            assert [(kv.key, kv.value.string_value) for kv in q.attributes] == list(p.attributes)
