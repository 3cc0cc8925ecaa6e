"""GetTelemetrySubscriptions (key 71) and PushTelemetry (key 72): client metrics, KIP-714.

Written from KIP-714 and the protocol guide (Kafka 3.7+). Both are flexible from v0, the only
version. A broker advertises them only when a client-telemetry receiver is configured
(``metric.reporters``); a client sends neither to a broker that does not.

The client asks for its subscription with the zero instance id the first time and gets an
instance id assigned; every later request (to any broker) carries that id. ``requested_metrics``
holds metric-name prefixes: an empty list subscribes to nothing, a single empty string (Java
clients also take ``"*"``) to everything. ``accepted_compression_types`` lists the codecs the
broker takes for the push, in its order of preference (record-batch codec ids).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ZERO_UUID,
    ArrayOf,
    Bool,
    Bytes,
    Int8,
    Int16,
    Int32,
    String,
    Struct,
    Uuid,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class GetTelemetrySubscriptionsRequest(Struct):
    """GetTelemetrySubscriptions request: the zero id asks the broker to assign one."""

    client_instance_id: uuid.UUID = kfield(Uuid, default=ZERO_UUID)


@dataclass(kw_only=True, slots=True)
class GetTelemetrySubscriptionsResponse(Struct):
    """GetTelemetrySubscriptions response: the subscription that applies to this client."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)
    client_instance_id: uuid.UUID = kfield(Uuid, default=ZERO_UUID)
    subscription_id: int = kfield(Int32)
    accepted_compression_types: list[int] = kfield(ArrayOf(Int8))
    push_interval_ms: int = kfield(Int32)
    telemetry_max_bytes: int = kfield(Int32)
    delta_temporality: bool = kfield(Bool)
    requested_metrics: list[str] = kfield(ArrayOf(String))


@dataclass(kw_only=True, slots=True)
class PushTelemetryRequest(Struct):
    """PushTelemetry request: OTLP ``MetricsData`` bytes, compressed with ``compression_type``."""

    client_instance_id: uuid.UUID = kfield(Uuid, default=ZERO_UUID)
    subscription_id: int = kfield(Int32)
    terminating: bool = kfield(Bool)
    compression_type: int = kfield(Int8)
    metrics: bytes = kfield(Bytes)


@dataclass(kw_only=True, slots=True)
class PushTelemetryResponse(Struct):
    """PushTelemetry response."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)


def kafka_uuid_text(value: uuid.UUID) -> str:
    """A Kafka ``Uuid`` as Kafka prints it: URL-safe base64 of its 16 bytes, no padding.

    (``kafka-client-metrics.sh``, broker logs and the Java client's ``Uuid.toString()``.)
    """
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
