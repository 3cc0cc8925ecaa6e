"""OpenTelemetry metrics (OTLP ``MetricsData``, protobuf) for PushTelemetry, written by hand.

KIP-714 has clients push their metrics as an ``opentelemetry.proto.metrics.v1.MetricsData``
message. Only the part a client needs is here, and only the encoding: one resource (its
attributes), one instrumentation scope, and metrics that are gauges or sums of double data
points with string attributes. Field numbers are those of opentelemetry-proto's
``metrics.proto``, ``resource.proto`` and ``common.proto`` (v1); the tests decode the output
with the reference classes (the ``opentelemetry-proto`` package), which aiokprod does not need
at run time.

Protobuf in brief: each field is a key ``(number << 3) | wire type`` as a varint, then its
value; wire type 0 is a varint, 1 eight little-endian bytes (``fixed64``, ``double``), 2 a
varint length and that many bytes (strings, nested messages).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

#: ``Metric.data``: which of the oneof's messages a metric is.
GAUGE: Final = 5
SUM: Final = 7
#: ``AggregationTemporality``.
DELTA: Final = 1
CUMULATIVE: Final = 2

_DOUBLE: Final = struct.Struct("<d")
_FIXED64: Final = struct.Struct("<Q")

Attributes = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class NumberPoint:
    """One ``NumberDataPoint`` (a double value), with its string attributes."""

    value: float
    time_unix_nano: int
    start_time_unix_nano: int = 0
    attributes: Attributes = ()


@dataclass(slots=True)
class Metric:
    """One ``Metric``: a gauge, or a sum (monotonic, delta or cumulative), and its points."""

    name: str
    kind: int = GAUGE
    temporality: int = CUMULATIVE
    monotonic: bool = True
    description: str = ""
    unit: str = ""
    points: list[NumberPoint] = field(default_factory=list)


def _varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _key(out: bytearray, number: int, wire_type: int) -> None:
    _varint(out, number << 3 | wire_type)


def _bytes_field(out: bytearray, number: int, data: bytes | bytearray) -> None:
    _key(out, number, 2)
    _varint(out, len(data))
    out += data


def _string_field(out: bytearray, number: int, text: str) -> None:
    if text:
        _bytes_field(out, number, text.encode())


def _key_value(key: str, value: str) -> bytes:
    """``KeyValue{key, value: AnyValue{string_value}}``."""
    any_value = bytearray()
    _bytes_field(any_value, 1, value.encode())  # AnyValue.string_value
    out = bytearray()
    _string_field(out, 1, key)
    _bytes_field(out, 2, any_value)
    return bytes(out)


#: A point's start time, time and double value: keys 2, 3 (fixed64) and 4 (double).
_TIMES_VALUE: Final = struct.Struct("<BQBQBd")
_TIME_VALUE: Final = struct.Struct("<BQBd")


def encode_attributes(attributes: Attributes) -> bytes:
    """A data point's attributes, encoded (callers may keep them: they repeat every push)."""
    out = bytearray()
    for key, value in attributes:
        _bytes_field(out, 7, _key_value(key, value))  # NumberDataPoint.attributes
    return bytes(out)


def encode_point(point: NumberPoint, attributes: bytes | None = None) -> bytes:
    """One ``NumberDataPoint`` (``attributes``: its attributes already encoded, if known)."""
    if point.start_time_unix_nano:
        head = _TIMES_VALUE.pack(
            0x11, point.start_time_unix_nano, 0x19, point.time_unix_nano, 0x21, point.value
        )
    else:
        head = _TIME_VALUE.pack(0x19, point.time_unix_nano, 0x21, point.value)
    if attributes is None:
        attributes = encode_attributes(point.attributes)
    return head + attributes


def frame_points(points: Sequence[bytes]) -> bytes:
    """Encoded data points framed as a metric's ``data_points`` fields.

    A metric's points may be framed in any number of pieces: :func:`encode_metric` takes
    them joined.
    """
    out = bytearray()
    for point in points:
        _bytes_field(out, 1, point)  # Gauge/Sum.data_points
    return bytes(out)


def encode_metric(metric: Metric, framed_points: bytes | None = None) -> bytes:
    """One ``Metric`` (``framed_points``: its points from :func:`frame_points`, else its own)."""
    if framed_points is None:
        framed_points = frame_points([encode_point(p) for p in metric.points])
    data = bytearray(framed_points)
    if metric.kind == SUM:
        _key(data, 2, 0)  # Sum.aggregation_temporality
        _varint(data, metric.temporality)
        if metric.monotonic:
            _key(data, 3, 0)  # Sum.is_monotonic
            data.append(1)
    out = bytearray()
    _string_field(out, 1, metric.name)
    _string_field(out, 2, metric.description)
    _string_field(out, 3, metric.unit)
    _bytes_field(out, metric.kind, data)
    return bytes(out)


def encode_metrics_data(
    resource: Attributes,
    scope_name: str,
    scope_version: str,
    metrics: Sequence[Metric | bytes],
) -> bytes:
    """``MetricsData`` with one ``ResourceMetrics`` holding one ``ScopeMetrics``.

    Args:
        resource: the resource's attributes (string values), in order.
        scope_name: ``InstrumentationScope.name`` (the client library).
        scope_version: ``InstrumentationScope.version``.
        metrics: the metrics, in order, or their bytes from :func:`encode_metric`; a metric
            without points is still written.
    """
    resource_msg = bytearray()
    for key, value in resource:
        _bytes_field(resource_msg, 1, _key_value(key, value))  # Resource.attributes
    scope = bytearray()
    _string_field(scope, 1, scope_name)
    _string_field(scope, 2, scope_version)
    scope_metrics = bytearray()
    _bytes_field(scope_metrics, 1, scope)  # ScopeMetrics.scope
    for metric in metrics:
        encoded = metric if isinstance(metric, bytes) else encode_metric(metric)
        _bytes_field(scope_metrics, 2, encoded)  # ScopeMetrics.metrics
    resource_metrics = bytearray()
    _bytes_field(resource_metrics, 1, resource_msg)  # ResourceMetrics.resource
    _bytes_field(resource_metrics, 2, scope_metrics)  # ResourceMetrics.scope_metrics
    out = bytearray()
    _bytes_field(out, 1, resource_metrics)  # MetricsData.resource_metrics
    return bytes(out)
