"""OpenTelemetry for aiokprod: the producer's metrics through a Meter, and opt-in tracing.

Install with ``pip install 'aiokprod[otel]'`` (the OpenTelemetry API; add the SDK and an
exporter of your choice). Nothing here is imported by the producer itself.

- :func:`instrument_metrics` registers observable instruments that read
  :meth:`Producer.metric_groups` when the SDK collects (nothing runs per record), and feeds
  the latency histograms as requests and batches complete.
- :class:`TracingInterceptor` is a producer interceptor: for each ``send()`` it starts and
  ends a ``PRODUCER`` span named ``<topic> publish`` (OpenTelemetry's messaging conventions)
  and injects the W3C ``traceparent`` (and ``tracestate``) header into the record, so that a
  consumer can continue the trace. It costs a span per record: opt in where traces matter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import CallbackOptions, Observation

from aiokprod.types import Header, ProducerRecord, RecordMetadata

if TYPE_CHECKING:
    from aiokprod.producer import Producer

#: Producer-wide metrics exported, by Java name: (OpenTelemetry instrument kind, unit).
_PRODUCER_METRICS: dict[str, tuple[str, str]] = {
    "record-send-total": ("counter", "{record}"),
    "record-error-total": ("counter", "{record}"),
    "record-retry-total": ("counter", "{record}"),
    "request-total": ("counter", "{request}"),
    "response-total": ("counter", "{response}"),
    "outgoing-byte-total": ("counter", "By"),
    "record-send-rate": ("gauge", "{record}/s"),
    "request-latency-avg": ("gauge", "ms"),
    "request-latency-max": ("gauge", "ms"),
    "record-queue-time-avg": ("gauge", "ms"),
    "batch-size-avg": ("gauge", "By"),
    "compression-rate-avg": ("gauge", "1"),
    "buffer-available-bytes": ("gauge", "By"),
    "buffer-total-bytes": ("gauge", "By"),
    "requests-in-flight": ("gauge", "{request}"),
    "waiting-threads": ("gauge", "{call}"),
}
_TOPIC_METRICS = ("record-send-total", "record-error-total", "record-retry-total", "byte-total")


def instrument_metrics(
    producer: Producer,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    prefix: str = "kafka.producer",
    attributes: dict[str, str] | None = None,
) -> None:
    """Export ``producer``'s metrics through an OpenTelemetry Meter.

    Names are the Java ones under ``prefix`` with dashes turned into underscores
    (``kafka.producer.record_send_total``); per-topic metrics carry a ``topic`` attribute;
    the histograms are ``<prefix>.request_latency``, ``.record_queue_time`` and
    ``.send_to_ack`` in ms.

    Args:
        producer: the producer to observe (instrument it once).
        meter_provider: default: the global one.
        prefix: the instrument name prefix.
        attributes: added to every observation (e.g. ``{"client.id": ...}``).
    """
    meter = (meter_provider or metrics.get_meter_provider()).get_meter("aiokprod")
    base = dict(attributes or {})
    base.setdefault("client.id", producer.config.client_id)

    def reader(name: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            value = producer.metrics().get(name)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                return []
            return [Observation(value, base)]

        return observe

    for name, (kind, unit) in _PRODUCER_METRICS.items():
        otel_name = f"{prefix}.{name.replace('-', '_')}"
        if kind == "counter":
            meter.create_observable_counter(otel_name, [reader(name)], unit=unit)
        else:
            meter.create_observable_gauge(otel_name, [reader(name)], unit=unit)

    def topic_reader(name: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            groups = producer.metric_groups()["producer-topic-metrics"]
            return [
                Observation(values[name], {**base, "topic": topic})
                for topic, values in groups.items()
            ]

        return observe

    for name in _TOPIC_METRICS:
        meter.create_observable_counter(
            f"{prefix}.topic.{name.replace('-', '_')}", [topic_reader(name)]
        )

    histograms = {
        "request-latency-ms": meter.create_histogram(f"{prefix}.request_latency", unit="ms"),
        "record-queue-time-ms": meter.create_histogram(f"{prefix}.record_queue_time", unit="ms"),
        "send-to-ack-ms": meter.create_histogram(f"{prefix}.send_to_ack", unit="ms"),
    }

    def on_latency(histogram: str, value_ms: float) -> None:
        histograms[histogram].record(value_ms, base)

    producer._rt.stats.latency_listeners.append(on_latency)


class TracingInterceptor:
    """A span per ``send()`` and W3C trace context in the record's headers.

    Pass it in ``interceptors=[TracingInterceptor()]``. The span (kind ``PRODUCER``) is a
    child of the caller's current span and ends when the record is queued; its trace context
    is injected as ``traceparent``/``tracestate`` headers (replacing any of those already
    there).

    Args:
        tracer_provider: default: the global one.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("aiokprod")

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Start and end the span, inject its context into the headers."""
        with self._tracer.start_as_current_span(
            f"{record.topic} publish",
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "publish",
                "messaging.destination.name": record.topic,
            },
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        headers: list[Header] = [
            (k, v) for k, v in (record.headers or ()) if k not in ("traceparent", "tracestate")
        ]
        headers.extend((k, v.encode()) for k, v in carrier.items())
        return ProducerRecord(
            record.topic,
            record.value,
            record.key,
            record.partition,
            record.timestamp_ms,
            headers,
        )

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, error: BaseException | None
    ) -> None:
        """Nothing to do: the span ended when the record was queued."""
