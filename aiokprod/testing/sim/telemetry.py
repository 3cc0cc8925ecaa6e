"""A simulated broker's client-telemetry receiver (KIP-714), scriptable for the error paths.

Set :attr:`SimCluster.telemetry <aiokprod.testing.sim.cluster.SimCluster.telemetry>` to a
:class:`SimTelemetry` and every simulated broker advertises GetTelemetrySubscriptions and
PushTelemetry and answers them as an Apache Kafka 4.x broker does
(``ClientMetricsManager``): it assigns the instance id, answers the subscription, and checks
each push in the broker's order: a push after a terminating one is an invalid request, one
that comes sooner than the push interval after the last (not right after a subscription
request) is throttled, then the subscription id, the compression type (here: one outside
the accepted list; Kafka refuses only unknown codec ids) and the size limit are checked.
What a real broker rarely does is scripted: :meth:`SimTelemetry.fail_next` answers the next
requests of an API with an error, :attr:`SimTelemetry.vanish_on_push` stops the broker when
a push reaches it (no answer: it is gone).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokprod.protocol.compression import codec_for_id
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from aiokprod.protocol.schema import ZERO_UUID, Struct

GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72
INVALID_REQUEST = 42
UNSUPPORTED_COMPRESSION_TYPE = 76
THROTTLING_QUOTA_EXCEEDED = 89
UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118


@dataclass(frozen=True, slots=True)
class SimPush:
    """A push the simulated brokers took (or refused, with ``error_code``)."""

    at_ms: int
    node_id: int
    subscription_id: int
    terminating: bool
    compression: int
    #: The OTLP ``MetricsData`` bytes, decompressed.
    metrics: bytes
    size: int
    error_code: int = 0


@dataclass(slots=True)
class SimTelemetry:
    """The cluster's telemetry subscription and what clients pushed (see the module)."""

    now_ms: Callable[[], int]
    #: Metric-name prefixes of the subscription; ``[]``: none.
    metrics: list[str] = field(default_factory=lambda: ["org.apache.kafka.producer."])
    interval_ms: int = 1000
    max_bytes: int = 1024 * 1024
    delta: bool = True
    #: Codec ids the brokers take, preferred first (Kafka's: zstd, lz4, gzip, snappy).
    compression: list[int] = field(default_factory=lambda: [4, 3, 1, 2])
    #: Every push, accepted or refused, in order of arrival.
    pushes: list[SimPush] = field(default_factory=list)
    #: Subscription requests answered: (time, node id, error code).
    subscriptions: list[tuple[int, int, int]] = field(default_factory=list)
    #: A node that stops (and cuts its connections) when a push reaches it: set by the test
    #: with :attr:`stop_broker`.
    vanish_on_push: int | None = None
    stop_broker: Callable[[int], None] = lambda node_id: None
    _version: int = 1
    _instance: uuid.UUID | None = None
    _last_get_ms: int = -(10**12)
    _last_push_ms: int = -(10**12)
    _terminated: bool = False
    _errors: dict[int, list[int]] = field(default_factory=dict)

    def change(self, **values: object) -> None:
        """Change the subscription (``metrics=``, ``interval_ms=``...): a new subscription id."""
        for name, value in values.items():
            setattr(self, name, value)
        self._version += 1
        self._last_get_ms = self._last_push_ms = -(10**12)  # as a broker's new instance

    def fail_next(self, api_key: int, *codes: int) -> None:
        """Answer the next requests of ``api_key`` with these error codes, in order."""
        self._errors.setdefault(api_key, []).extend(codes)

    @property
    def subscription_id(self) -> int:
        """The current subscription's id."""
        return 1000 + self._version

    def handle(self, node_id: int, api_key: int, request: Struct) -> Struct | None:
        """The answer of broker ``node_id`` (None: the broker went away)."""
        scripted = self._errors.get(api_key)
        code = scripted.pop(0) if scripted else 0
        if isinstance(request, GetTelemetrySubscriptionsRequest):
            return self._subscription(node_id, request, code)
        if isinstance(request, PushTelemetryRequest):
            if self.vanish_on_push == node_id:
                self.vanish_on_push = None
                self.stop_broker(node_id)
                return None
            return self._push(node_id, request, code)
        raise ValueError(f"not a telemetry request: {request!r}")

    def _subscription(
        self, node_id: int, request: GetTelemetrySubscriptionsRequest, code: int
    ) -> GetTelemetrySubscriptionsResponse:
        now = self.now_ms()
        if request.client_instance_id == ZERO_UUID:
            self._instance = uuid.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0001)
        elif self._instance is None:
            self._instance = request.client_instance_id
        self.subscriptions.append((now, node_id, code))
        if code:
            return GetTelemetrySubscriptionsResponse(error_code=code)
        self._last_get_ms = now
        return GetTelemetrySubscriptionsResponse(
            client_instance_id=self._instance,
            subscription_id=self.subscription_id,
            accepted_compression_types=list(self.compression),
            push_interval_ms=self.interval_ms,
            telemetry_max_bytes=self.max_bytes,
            delta_temporality=self.delta,
            requested_metrics=list(self.metrics),
        )

    def _push(
        self, node_id: int, request: PushTelemetryRequest, code: int
    ) -> PushTelemetryResponse:
        now = self.now_ms()
        if not code:
            code = self._check(request, now)
        metrics = b""
        if not code and request.compression_type in (0, 1, 2, 3, 4):
            metrics = codec_for_id(request.compression_type).decompress(request.metrics)
        self.pushes.append(
            SimPush(
                now,
                node_id,
                request.subscription_id,
                request.terminating,
                request.compression_type,
                metrics,
                len(request.metrics),
                code,
            )
        )
        return PushTelemetryResponse(error_code=code)

    def _check(self, request: PushTelemetryRequest, now: int) -> int:
        """The broker's checks, in its order (0: accepted)."""
        if self._terminated:
            return INVALID_REQUEST
        self._terminated = request.terminating
        early = self._last_get_ms <= self._last_push_ms and now - self._last_push_ms < (
            self.interval_ms
        )
        if early and not request.terminating:
            return THROTTLING_QUOTA_EXCEEDED
        self._last_push_ms = now
        if request.subscription_id != self.subscription_id:
            return UNKNOWN_SUBSCRIPTION_ID
        if request.compression_type not in self.compression and request.compression_type:
            return UNSUPPORTED_COMPRESSION_TYPE
        if len(request.metrics) > self.max_bytes:
            return TELEMETRY_TOO_LARGE
        return 0
