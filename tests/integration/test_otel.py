"""aiokprod.otel with the OpenTelemetry SDK's in-memory reader and exporter, on the real broker."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from readback import consume_all

from aiokprod import Producer
from aiokprod.otel import TracingInterceptor, instrument_metrics
from aiokprod.testing import LocalKafka

RECORDS = 2_000


def points(reader: InMemoryMetricReader) -> dict[str, list[object]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[object]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_metrics_reach_an_otel_meter(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    async with Producer(kafka.bootstrap_servers, client_id="otel-test") as producer:
        instrument_metrics(producer, provider)
        for i in range(RECORDS):
            await producer.send(topic, b"v", key=str(i).encode())
        await producer.flush()
        found = points(reader)
    sent = found["kafka.producer.record_send_total"]
    assert [p.value for p in sent] == [RECORDS]  # type: ignore[attr-defined]
    assert sent[0].attributes == {"client.id": "otel-test"}  # type: ignore[attr-defined]
    per_topic = found["kafka.producer.topic.record_send_total"]
    assert [(p.attributes["topic"], p.value) for p in per_topic] == [(topic, RECORDS)]  # type: ignore[attr-defined]
    latency = found["kafka.producer.send_to_ack"]
    assert len(latency) == 1
    histogram = latency[0]
    assert isinstance(histogram, HistogramDataPoint)
    assert histogram.count > 0  # one per acknowledged batch
    assert histogram.sum > 0
    assert found["kafka.producer.request_latency"]


async def test_a_span_per_send_and_traceparent_headers(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=1)
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracing.get_tracer("test")
    async with Producer(
        kafka.bootstrap_servers, interceptors=[TracingInterceptor(tracing)]
    ) as producer:
        with tracer.start_as_current_span("handler") as parent:
            for i in range(3):
                await producer.send(topic, f"r{i}".encode(), headers=[("app", b"x")])
        await producer.flush()
    spans = [s for s in exporter.get_finished_spans() if s.name == f"{topic} publish"]
    assert len(spans) == 3
    trace_id = parent.get_span_context().trace_id
    for span in spans:
        assert span.context is not None
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert span.attributes is not None
        assert span.attributes["messaging.destination.name"] == topic
    records = consume_all(kafka.bootstrap_servers, topic, 3)
    assert len(records) == 3
    span_ids = {f"{s.context.span_id:016x}" for s in spans if s.context is not None}
    for record in records:
        headers = dict(record.headers)
        assert headers["app"] == b"x"  # the record's own headers are kept
        version, trace_hex, span_hex, _ = headers["traceparent"].decode().split("-")
        assert version == "00"
        assert int(trace_hex, 16) == trace_id
        assert span_hex in span_ids
