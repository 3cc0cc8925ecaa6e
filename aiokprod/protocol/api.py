"""The table of APIs this client speaks: key, versions, flexibility, message classes.

Version ranges are the intersection of what Apache Kafka 4.x brokers accept and what this
client declares. The broker's own range comes from ApiVersions on each connection, and
:func:`negotiate_version` picks the highest version both sides speak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokprod.errors import UnsupportedVersionError
from aiokprod.protocol.messages.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiokprod.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokprod.protocol.messages.coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestInSteps,
    MetadataResponse,
)
from aiokprod.protocol.messages.offsets import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from aiokprod.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiokprod.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from aiokprod.protocol.messages.transactions import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aiokprod.protocol.messages.txn_admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from aiokprod.protocol.metadata_fast import MetadataResponseBody, keep_metadata_body
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.produce_fast import decode_produce_body, encode_produce_body
from aiokprod.protocol.schema import Struct

BodyEncoder = Callable[[Any, int, bytearray], None]
BodyDecoder = Callable[[Reader, int], Struct | None]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One Kafka API as this client speaks it."""

    key: int
    name: str
    request: type[Struct]
    response: type[Struct]
    min_version: int
    max_version: int
    #: First flexible (KIP-482) version; None if no supported version is flexible.
    flexible_from: int | None
    #: A hand-written body encoder used instead of the declarative codec (hot messages).
    encode_body: BodyEncoder | None = None
    #: A hand-written body decoder; it may return None to leave a body to the generic codec.
    decode_body: BodyDecoder | None = None

    def is_flexible(self, version: int) -> bool:
        """Whether ``version`` uses compact types and tagged fields."""
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        """Request header v2 for flexible versions, else v1."""
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """Response header v1 for flexible versions, else v0; ApiVersions always v0."""
        if self.key == API_VERSIONS.key:
            return 0
        return 1 if self.is_flexible(version) else 0


# Produce is the one message per request on the hot path: it has a hand-written codec,
# tested to agree with the declarative one (tests/unit/protocol/test_produce_fast.py).
PRODUCE = ApiSpec(
    0,
    "Produce",
    ProduceRequest,
    ProduceResponse,
    3,
    12,
    9,
    encode_body=encode_produce_body,
    decode_body=decode_produce_body,
)
METADATA = ApiSpec(3, "Metadata", MetadataRequest, MetadataResponse, 4, 13, 9)
# The same API for the producer's view: the body is kept as bytes and decoded by the caller
# in steps (protocol/metadata_fast.py), so a large cluster's answer never holds the loop.
METADATA_IN_STEPS = ApiSpec(
    3,
    "Metadata",
    MetadataRequestInSteps,
    MetadataResponseBody,
    4,
    13,
    9,
    decode_body=keep_metadata_body,
)
# The admin client's group APIs: OffsetCommit v0-v1 are gone from Kafka 4.0 (KIP-896);
# OffsetFetch v8 (batched groups, Kafka 3.0) is the oldest form declared.
OFFSET_COMMIT = ApiSpec(8, "OffsetCommit", OffsetCommitRequest, OffsetCommitResponse, 2, 9, 8)
OFFSET_FETCH = ApiSpec(9, "OffsetFetch", OffsetFetchRequest, OffsetFetchResponse, 8, 9, 6)
FIND_COORDINATOR = ApiSpec(
    10, "FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse, 0, 6, 3
)
SASL_HANDSHAKE = ApiSpec(
    17, "SaslHandshake", SaslHandshakeRequest, SaslHandshakeResponse, 0, 1, None
)
API_VERSIONS = ApiSpec(18, "ApiVersions", ApiVersionsRequest, ApiVersionsResponse, 0, 4, 3)
CREATE_TOPICS = ApiSpec(19, "CreateTopics", CreateTopicsRequest, CreateTopicsResponse, 2, 7, 5)
DELETE_TOPICS = ApiSpec(20, "DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse, 1, 6, 4)
INIT_PRODUCER_ID = ApiSpec(
    22, "InitProducerId", InitProducerIdRequest, InitProducerIdResponse, 0, 5, 2
)
ADD_PARTITIONS_TO_TXN = ApiSpec(
    24, "AddPartitionsToTxn", AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3, 3
)
ADD_OFFSETS_TO_TXN = ApiSpec(
    25, "AddOffsetsToTxn", AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 4, 3
)
END_TXN = ApiSpec(26, "EndTxn", EndTxnRequest, EndTxnResponse, 0, 5, 3)
TXN_OFFSET_COMMIT = ApiSpec(
    28, "TxnOffsetCommit", TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 5, 3
)
SASL_AUTHENTICATE = ApiSpec(
    36, "SaslAuthenticate", SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2, 2
)
DESCRIBE_TRANSACTIONS = ApiSpec(
    65,
    "DescribeTransactions",
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    0,
    0,
    0,
)
LIST_TRANSACTIONS = ApiSpec(
    66, "ListTransactions", ListTransactionsRequest, ListTransactionsResponse, 0, 2, 0
)
# Client telemetry (KIP-714): advertised only by brokers with a telemetry receiver.
GET_TELEMETRY_SUBSCRIPTIONS = ApiSpec(
    71,
    "GetTelemetrySubscriptions",
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    0,
    0,
    0,
)
PUSH_TELEMETRY = ApiSpec(72, "PushTelemetry", PushTelemetryRequest, PushTelemetryResponse, 0, 0, 0)

ALL_APIS: tuple[ApiSpec, ...] = (
    PRODUCE,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    SASL_HANDSHAKE,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    SASL_AUTHENTICATE,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    GET_TELEMETRY_SUBSCRIPTIONS,
    PUSH_TELEMETRY,
)
BY_KEY: dict[int, ApiSpec] = {api.key: api for api in ALL_APIS}
BY_REQUEST: dict[type[Struct], ApiSpec] = {api.request: api for api in ALL_APIS}
BY_REQUEST[METADATA_IN_STEPS.request] = METADATA_IN_STEPS


def api_for_request(request: Struct) -> ApiSpec:
    """The API a request object belongs to.

    Raises:
        TypeError: ``request`` is not a declared request message.
    """
    try:
        return BY_REQUEST[type(request)]
    except KeyError:
        raise TypeError(f"{type(request).__name__} is not a known request message") from None


def negotiate_version(api: ApiSpec, broker_min: int, broker_max: int) -> int:
    """The highest version of ``api`` that both this client and the broker speak.

    Raises:
        UnsupportedVersionError: the ranges do not overlap.
    """
    high = min(api.max_version, broker_max)
    low = max(api.min_version, broker_min)
    if high < low:
        raise UnsupportedVersionError(
            f"{api.name}: this client speaks v{api.min_version}-v{api.max_version}, "
            f"the broker v{broker_min}-v{broker_max}"
        )
    return high
