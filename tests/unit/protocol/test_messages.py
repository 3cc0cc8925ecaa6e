"""Every declared message x every version: round trips, cross-checks, golden vectors.

The round trip alone cannot see a field in the wrong place (our encoder and decoder share
the declaration), so every version is also checked against kafka-python 3.x, whose codec is
generated from Apache Kafka's own JSON message schemas: our bytes must decode there to the
same field values, and re-encode there to the very same bytes.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError, UnsupportedVersionError
from aiokprod.protocol import api as api_module
from aiokprod.protocol import schema
from aiokprod.protocol.api import (
    ALL_APIS,
    API_VERSIONS,
    METADATA,
    PRODUCE,
    SASL_HANDSHAKE,
    ApiSpec,
    api_for_request,
    negotiate_version,
)
from aiokprod.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokprod.protocol.messages.init_producer_id import InitProducerIdRequest
from aiokprod.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokprod.protocol.messages.produce import (
    LeaderIdAndEpoch,
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    ProduceTopicResponse,
)
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.schema import Struct, decode_struct, encode_struct

from ._strategies import field_specs, struct_strategy, travels
from ._thirdparty import KAFKA_PYTHON_MESSAGES, KafkaPythonApiMessage

CASES = [
    pytest.param(api, cls, version, id=f"{cls.__name__}-v{version}")
    for api in ALL_APIS
    for cls in (api.request, api.response)
    for version in range(api.min_version, api.max_version + 1)
]
#: APIs kafka-python 3.x has no schema for (client telemetry, KIP-714): golden vectors
#: written from the protocol guide stand in for the cross-check (below), and a real broker
#: reads them in tests/integration/test_telemetry.py.
NO_ORACLE = {"GetTelemetrySubscriptions", "PushTelemetry"}
ORACLE_APIS = [api for api in ALL_APIS if api.request.__name__ in KAFKA_PYTHON_MESSAGES]
ORACLE_CASES = [
    pytest.param(api, cls, version, id=f"{cls.__name__}-v{version}")
    for api in ORACLE_APIS
    for cls in (api.request, api.response)
    for version in range(api.min_version, api.max_version + 1)
]


def encode(value: Struct, version: int, flexible: bool) -> bytes:
    out = bytearray()
    encode_struct(value, version, flexible, out)
    return bytes(out)


def decode(cls: type[Struct], data: bytes, version: int, flexible: bool) -> Any:
    reader = Reader(data)
    value = decode_struct(cls, reader, version, flexible)
    reader.expect_end()
    return value


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "cls", "version"), CASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(api: ApiSpec, cls: type[Struct], version: int, data: st.DataObject) -> None:
    flexible = api.is_flexible(version)
    value = data.draw(struct_strategy(cls, version, flexible))
    encoded = encode(value, version, flexible)
    decoded = decode(cls, encoded, version, flexible)
    assert decoded == value
    assert encode(decoded, version, flexible) == encoded


# --- cross-check with kafka-python's JSON-schema codec --------------------------------------

# Our field names that differ from the snake_case of the Kafka JSON field names.
ALIASES = {
    ("MetadataResponse", "cluster_authorized_operations"): "authorized_operations",
    ("MetadataTopic", "topic_authorized_operations"): "authorized_operations",
    ("AddPartitionsToTxnRequest", "transactional_id"): "v3_and_below_transactional_id",
    ("AddPartitionsToTxnRequest", "producer_id"): "v3_and_below_producer_id",
    ("AddPartitionsToTxnRequest", "producer_epoch"): "v3_and_below_producer_epoch",
    ("AddPartitionsToTxnRequest", "topics"): "v3_and_below_topics",
    ("AddPartitionsToTxnResponse", "results_by_topic"): "results_by_topic_v3_and_below",
}


def assert_same_struct(ours: Struct, theirs: Any, version: int, flexible: bool, path: str) -> None:
    for f, spec in field_specs(type(ours)):
        if not travels(spec, version, flexible):
            continue
        name = ALIASES.get((type(ours).__name__, f.name), f.name)
        assert_same_value(
            getattr(ours, f.name), getattr(theirs, name), spec.type, version, flexible,
            f"{path}.{f.name}",
        )  # fmt: skip


def assert_same_value(
    ours: Any, theirs: Any, ftype: schema.FieldType, version: int, flexible: bool, path: str
) -> None:
    if isinstance(ftype, schema.ArrayOf):
        if ours is None:
            assert theirs is None, path
            return
        assert len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same_value(a, b, ftype.item, version, flexible, f"{path}[{i}]")
    elif isinstance(ftype, schema.StructType):
        if ours is None:  # an absent tagged struct: None there too, or the default instance
            if theirs is None:
                return
            ours = ftype.cls()
        assert theirs is not None, path
        assert_same_struct(ours, theirs, version, flexible, path)
    elif ftype is schema.Uuid and theirs is None:
        assert ours == schema.ZERO_UUID, path  # kafka-python reads the zero UUID as None
    elif isinstance(ftype, schema._Bytes):
        assert ours == (None if theirs is None else bytes(theirs)), path
    elif path.endswith("authorized_operations") and ftype is schema.Int32:
        # kafka-python decodes this int32 bit field as a set of bit indexes, {31} as None.
        bits = {b for b in range(32) if (ours & 0xFFFFFFFF) >> b & 1}
        assert (None if bits == {31} else bits) == theirs, path
    else:
        assert ours == theirs, path


@pytest.mark.parametrize(("api", "cls", "version"), ORACLE_CASES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_matches_kafka_python(
    api: ApiSpec, cls: type[Struct], version: int, data: st.DataObject
) -> None:
    flexible = api.is_flexible(version)
    theirs_cls = KAFKA_PYTHON_MESSAGES[cls.__name__]
    value = data.draw(struct_strategy(cls, version, flexible, canonical=True))
    encoded = encode(value, version, flexible)
    # The generic decoder: kafka-python's ApiVersionsResponse.decode switches to v0 whenever
    # the error code is non-zero (our fallback is covered in test_connection.py).
    theirs = KafkaPythonApiMessage.decode.__func__(theirs_cls, encoded, version=version)
    assert_same_struct(value, theirs, version, flexible, cls.__name__)
    if not hasattr(theirs, "_header"):
        theirs._header = None  # some kafka-python encode() overrides expect it
    assert bytes(theirs.encode()) == encoded


def test_only_the_named_apis_lack_an_oracle() -> None:
    assert {api.name for api in ALL_APIS if api not in ORACLE_APIS} <= NO_ORACLE


@pytest.mark.parametrize("api", ORACLE_APIS, ids=lambda a: a.name)
def test_api_table_matches_kafka_schemas(api: ApiSpec) -> None:
    for cls in (api.request, api.response):
        theirs = KAFKA_PYTHON_MESSAGES[cls.__name__]
        assert api.key == theirs.API_KEY
        lo, _, hi = theirs.json["validVersions"].partition("-")
        assert int(lo) <= api.min_version <= api.max_version <= int(hi or lo)
        flexible = theirs.json["flexibleVersions"]
        if api.flexible_from is None:
            assert flexible == "none"
        else:
            assert flexible == f"{api.flexible_from}+"
        for version in range(api.min_version, api.max_version + 1):
            assert api.is_flexible(version) == theirs.flexible_version_q(version)


# --- the API table --------------------------------------------------------------------------


def test_api_table_basics() -> None:
    assert len({api.key for api in ALL_APIS}) == len(ALL_APIS)
    assert (PRODUCE.min_version, PRODUCE.max_version) == (3, 12)  # names, not topic ids
    for api in ALL_APIS:
        assert api_for_request(api.request()) is api
        for version in range(api.min_version, api.max_version + 1):
            flexible = api.is_flexible(version)
            assert api.request_header_version(version) == (2 if flexible else 1)
            expected_response = 1 if flexible and api is not API_VERSIONS else 0
            assert api.response_header_version(version) == expected_response
    assert API_VERSIONS.response_header_version(4) == 0
    assert not SASL_HANDSHAKE.is_flexible(1)
    with pytest.raises(TypeError):
        api_for_request(ProduceTopicData(name="x"))


@pytest.mark.parametrize(
    ("api", "broker", "expected"),
    [
        (PRODUCE, (0, 11), 11),  # a 4.x broker still advertises Produce min 0
        (PRODUCE, (0, 13), 12),
        (METADATA, (0, 13), 13),
        (METADATA, (0, 8), 8),
        (API_VERSIONS, (0, 3), 3),
    ],
)
def test_negotiate_version(api: ApiSpec, broker: tuple[int, int], expected: int) -> None:
    assert negotiate_version(api, *broker) == expected


def test_negotiate_version_without_overlap() -> None:
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        negotiate_version(PRODUCE, 0, 2)
    with pytest.raises(UnsupportedVersionError):
        negotiate_version(METADATA, 14, 20)


# --- golden vectors written from the protocol description -----------------------------------


def test_golden_api_versions_request_v3() -> None:
    request = ApiVersionsRequest(client_software_name="a", client_software_version="1")
    assert encode(request, 3, True).hex() == "0261023100"
    assert encode(request, 2, False) == b""  # v0-v2 have an empty body


def test_golden_init_producer_id_v4() -> None:
    expected = "007fffffffffffffffffffffffffff00"
    assert encode(InitProducerIdRequest(), 4, True).hex() == expected
    assert encode(InitProducerIdRequest(), 1, False).hex() == "ffff7fffffff"


def test_golden_produce_request_v3_and_v9() -> None:
    request = ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceTopicData(
                name="t", partition_data=[ProducePartitionData(index=0, records=b"abc")]
            )
        ],
    )
    v3 = "ffffffff0000753000000001000174000000010000000000000003616263"
    assert encode(request, 3, False).hex() == v3
    v9 = "00ffff00007530020274020000000004616263000000"
    assert encode(request, 9, True).hex() == v9


def test_golden_metadata_request_v12() -> None:
    request = MetadataRequest(topics=[MetadataRequestTopic(name="t")])
    expected = "02" + "00" * 16 + "027400010000"
    assert encode(request, 12, True).hex() == expected
    assert encode(MetadataRequest(topics=None), 12, True).hex() == "00010000"
    assert encode(MetadataRequest(topics=None), 4, False).hex() == "ffffffff01"


def test_golden_produce_response_v10_leader_hint() -> None:
    response = ProduceResponse(
        responses=[
            ProduceTopicResponse(
                name="t",
                partition_responses=[
                    ProducePartitionResponse(
                        index=0,
                        error_code=6,
                        base_offset=-1,
                        current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=7),
                    )
                ],
            )
        ],
    )
    expected = (
        "02" "0274" "02" "00000000" "0006" "ffffffffffffffff" "ffffffffffffffff"
        "ffffffffffffffff" "01" "00"  # record errors [], error message null
        "01" "00" "09" "00000002" "00000007" "00"  # tag 0: CurrentLeader, 9 bytes
        "00"  # topic tag buffer
        "00000000" "00"  # throttle time, top-level tag buffer
    )  # fmt: skip
    assert encode(response, 10, True).hex() == expected
    assert decode(ProduceResponse, bytes.fromhex(expected), 10, True) == response


def test_golden_get_telemetry_subscriptions_v0() -> None:
    instance = uuid.UUID("00112233445566778899aabbccddeeff")
    request = GetTelemetrySubscriptionsRequest(client_instance_id=instance)
    assert encode(request, 0, True).hex() == "00112233445566778899aabbccddeeff00"
    assert encode(GetTelemetrySubscriptionsRequest(), 0, True) == bytes(17)
    response = GetTelemetrySubscriptionsResponse(
        client_instance_id=instance,
        subscription_id=-2,
        accepted_compression_types=[4, 3],
        push_interval_ms=1000,
        telemetry_max_bytes=1048576,
        delta_temporality=True,
        requested_metrics=["org.apache.kafka.producer."],
    )
    expected = (
        "00000000" "0000" "00112233445566778899aabbccddeeff" "fffffffe"
        "03" "04" "03"  # compact array of int8: length + 1, then the codec ids
        "000003e8" "00100000" "01"
        "02" "1b" + b"org.apache.kafka.producer.".hex() + "00"
    )  # fmt: skip
    assert encode(response, 0, True).hex() == expected
    assert decode(GetTelemetrySubscriptionsResponse, bytes.fromhex(expected), 0, True) == response


def test_golden_push_telemetry_v0() -> None:
    instance = uuid.UUID("00112233445566778899aabbccddeeff")
    request = PushTelemetryRequest(
        client_instance_id=instance,
        subscription_id=7,
        terminating=True,
        compression_type=4,
        metrics=b"\x0a\x00",
    )
    expected = "00112233445566778899aabbccddeeff000000070104030a0000"
    assert encode(request, 0, True).hex() == expected
    response = PushTelemetryResponse(throttle_time_ms=5, error_code=117)
    assert encode(response, 0, True).hex() == "00000005007500"
    assert decode(PushTelemetryResponse, bytes.fromhex("00000005007500"), 0, True) == response


# --- tagged fields in real messages ---------------------------------------------------------


def test_api_versions_tagged_defaults() -> None:
    # FinalizedFeaturesEpoch defaults to -1: not written at -1, written (and kept) at 0.
    assert encode(ApiVersionsResponse(), 3, True).hex() == "0000010000000000"
    zero = ApiVersionsResponse(finalized_features_epoch=0)
    encoded = encode(zero, 3, True)
    assert encoded.hex() == "00000100000000010108" + "00" * 8
    assert decode(ApiVersionsResponse, encoded, 3, True).finalized_features_epoch == 0
    absent = decode(ApiVersionsResponse, bytes.fromhex("0000010000000000"), 3, True)
    assert absent.finalized_features_epoch == -1


def test_unknown_top_level_tag_is_skipped() -> None:
    base = encode(ProduceResponse(), 10, True)
    assert base.hex() == "010000000000"
    with_unknown = bytes.fromhex("0100000000010703aabbcc")
    assert decode(ProduceResponse, with_unknown, 10, True) == ProduceResponse()


def test_tagged_struct_payload_must_be_consumed() -> None:
    # tag 0 (NodeEndpoints) claims 2 bytes but holds an empty array plus a stray byte
    data = bytes.fromhex("010000000001000201ff")
    with pytest.raises(ProtocolError):
        decode(ProduceResponse, data, 10, True)


def test_fields_outside_their_versions_keep_defaults() -> None:
    response = ProducePartitionResponse(
        index=1, error_code=0, base_offset=5, log_append_time_ms=9, log_start_offset=3
    )
    decoded = decode(ProducePartitionResponse, encode(response, 4, False), 4, False)
    assert decoded.log_append_time_ms == 9  # v2+
    assert decoded.log_start_offset == -1  # v5+: not sent at v4, back to its default
    assert decoded.current_leader is None


def test_topic_id_uuid_travels_from_v10() -> None:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    request = MetadataRequest(topics=[MetadataRequestTopic(topic_id=topic_id, name=None)])
    encoded = encode(request, 10, True)
    assert bytes.fromhex("0123456789abcdef0123456789abcdef") in encoded
    assert decode(MetadataRequest, encoded, 10, True).topics[0].topic_id == topic_id
    assert api_module.METADATA.is_flexible(10)
