"""ClientConnection: request framing and headers, correlation ids, response reassembly."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from aiokprod.errors import BrokerError, ProtocolError, UnsupportedVersionError
from aiokprod.protocol.api import (
    API_VERSIONS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    SASL_HANDSHAKE,
    ApiSpec,
)
from aiokprod.protocol.connection import (
    MAX_CORRELATION_ID,
    ClientConnection,
    Response,
    api_versions_retry_version,
    decode_api_versions_response,
    encode_request_frame,
)
from aiokprod.protocol.messages.api_versions import (
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokprod.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiokprod.protocol.messages.sasl import SaslHandshakeRequest
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.schema import Struct, decode_struct, encode_struct

from ._thirdparty import KAFKA_PYTHON_MESSAGES

BROKER_VERSIONS = ApiVersionsResponse(
    api_keys=[
        ApiVersionRange(api_key=PRODUCE.key, min_version=0, max_version=13),
        ApiVersionRange(api_key=METADATA.key, min_version=0, max_version=13),
        ApiVersionRange(api_key=API_VERSIONS.key, min_version=0, max_version=4),
        ApiVersionRange(api_key=SASL_HANDSHAKE.key, min_version=0, max_version=1),
    ]
)


def connection(client_id: str | None = "client-1", **kwargs: Any) -> ClientConnection:
    conn = ClientConnection(client_id, **kwargs)
    conn.set_broker_versions(BROKER_VERSIONS)
    return conn


def body_bytes(value: Struct, api: ApiSpec, version: int) -> bytes:
    out = bytearray()
    encode_struct(value, version, api.is_flexible(version), out)
    return bytes(out)


def response_frame(correlation_id: int, api: ApiSpec, version: int, body: Struct) -> bytes:
    """A size-prefixed response, response header v0 or v1 as the API and version want."""
    header = struct.pack(">i", correlation_id)
    if api.response_header_version(version) == 1:
        header += b"\x00"
    payload = header + body_bytes(body, api, version)
    return struct.pack(">i", len(payload)) + payload


METADATA_RESPONSE = MetadataResponse(
    brokers=[MetadataBroker(node_id=1, host="localhost", port=9092, rack=None)],
    cluster_id="cluster",
    controller_id=1,
)


# --- request framing ------------------------------------------------------------------------


def test_request_header_v1_layout() -> None:
    conn = connection("my-client")
    request = MetadataRequest(topics=[MetadataRequestTopic(name="t")])
    correlation_id, frame = conn.send(request, version=8)
    body = body_bytes(request, METADATA, 8)
    expected_header = (
        struct.pack(">hhi", METADATA.key, 8, correlation_id) + b"\x00\x09" + b"my-client"
    )
    assert bytes(frame) == struct.pack(">i", len(frame) - 4) + expected_header + body


def test_request_header_v2_keeps_classic_client_id_and_adds_tag_buffer() -> None:
    conn = connection("my-client")
    request = MetadataRequest(topics=None)
    correlation_id, frame = conn.send(request, version=12)
    body = body_bytes(request, METADATA, 12)
    expected_header = (
        struct.pack(">hhi", METADATA.key, 12, correlation_id) + b"\x00\x09my-client" + b"\x00"
    )
    assert bytes(frame) == struct.pack(">i", len(frame) - 4) + expected_header + body


def test_null_client_id() -> None:
    frame = encode_request_frame(SASL_HANDSHAKE, 1, 5, None, SaslHandshakeRequest(mechanism="P"))
    assert bytes(frame[4:14]) == struct.pack(">hhi", 17, 1, 5) + b"\xff\xff"


@pytest.mark.parametrize(("version", "topics"), [(8, [MetadataRequestTopic(name="x")]), (12, None)])
def test_request_frame_matches_kafka_python(
    version: int, topics: list[MetadataRequestTopic] | None
) -> None:
    conn = connection("cid")
    conn._next_correlation_id = 3
    request = MetadataRequest(topics=topics)
    correlation_id, frame = conn.send(request, version=version)
    theirs = KAFKA_PYTHON_MESSAGES["MetadataRequest"]
    decoded = theirs.decode(bytes(frame), version=version, header=True, framed=True)
    assert decoded.header.request_api_key == METADATA.key
    assert decoded.header.request_api_version == version
    assert decoded.header.correlation_id == correlation_id == 3
    assert decoded.header.client_id == "cid"
    # and kafka-python frames the same request into the same bytes
    same = theirs(
        version=version,
        topics=None if topics is None else [theirs.MetadataRequestTopic(name="x")],
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    same.with_header(correlation_id=3, client_id="cid")
    assert bytes(same.encode(header=True, framed=True)) == bytes(frame)


def test_send_rejects_versions_outside_the_table() -> None:
    conn = connection()
    with pytest.raises(UnsupportedVersionError):
        conn.send(ProduceRequest(acks=-1, timeout_ms=1), version=2)
    with pytest.raises(UnsupportedVersionError):
        encode_request_frame(PRODUCE, 13, 0, None, ProduceRequest())
    assert conn.in_flight == 0


def test_send_negotiates_the_version() -> None:
    conn = connection()
    _, frame = conn.send(ProduceRequest(acks=-1, timeout_ms=1))
    assert struct.unpack_from(">hh", frame, 4) == (PRODUCE.key, 12)
    _, frame = conn.send(MetadataRequest())
    assert struct.unpack_from(">hh", frame, 4) == (METADATA.key, 13)
    assert conn.version_for(API_VERSIONS) == 4
    # not advertised by this broker
    assert not conn.supports(INIT_PRODUCER_ID)
    with pytest.raises(UnsupportedVersionError, match="does not support"):
        conn.version_for(INIT_PRODUCER_ID)


def test_versions_unknown_before_api_versions() -> None:
    conn = ClientConnection()
    assert conn.version_for(API_VERSIONS) == API_VERSIONS.max_version
    with pytest.raises(UnsupportedVersionError, match="not known"):
        conn.version_for(PRODUCE)
    assert not conn.supports(METADATA)


def test_set_broker_versions_error_and_renegotiation() -> None:
    conn = connection()
    assert conn.version_for(PRODUCE) == 12
    with pytest.raises(BrokerError) as info:
        conn.set_broker_versions(ApiVersionsResponse(error_code=35))
    assert info.value.code == 35
    conn.set_broker_versions(
        ApiVersionsResponse(api_keys=[ApiVersionRange(api_key=0, min_version=0, max_version=9)])
    )
    assert conn.version_for(PRODUCE) == 9  # the cached negotiation was dropped


# --- correlation ids ------------------------------------------------------------------------


def test_correlation_ids_increase_and_wrap_below_the_reserved_range() -> None:
    conn = connection()
    ids = [conn.send(MetadataRequest())[0] for _ in range(3)]
    assert ids == [0, 1, 2]
    conn._next_correlation_id = MAX_CORRELATION_ID - 1
    sent = [conn.send(MetadataRequest()) for _ in range(3)]
    ids = [cid for cid, _ in sent]
    assert ids == [MAX_CORRELATION_ID - 1, MAX_CORRELATION_ID, 0]
    # The ids on the wire (header bytes 8..12 after the size prefix) are the same, and
    # none reaches Java's reserved SASL range [2**31-8, 2**31-1].
    on_wire = [int.from_bytes(frame[8:12], "big", signed=True) for _, frame in sent]
    assert on_wire == ids
    assert all(i < 2**31 - 8 for i in on_wire)


def test_wrapped_ids_still_match_responses() -> None:
    conn = connection()
    conn._next_correlation_id = MAX_CORRELATION_ID
    first, _ = conn.send(MetadataRequest(), version=12)
    second, _ = conn.send(MetadataRequest(), version=12)
    assert (first, second) == (MAX_CORRELATION_ID, 0)
    data = response_frame(first, METADATA, 12, METADATA_RESPONSE) + response_frame(
        second, METADATA, 12, METADATA_RESPONSE
    )
    assert [r.correlation_id for r in conn.receive_data(data)] == [first, second]


# --- receiving ------------------------------------------------------------------------------


def two_requests_and_their_responses() -> tuple[ClientConnection, bytes, list[Response]]:
    conn = connection()
    cid1, _ = conn.send(MetadataRequest(), version=12)
    cid2, _ = conn.api_versions_request("aiokprod", "0.1.0")
    conn.send(ProduceRequest(acks=0, timeout_ms=1), expect_response=False)
    cid4, _ = conn.send(MetadataRequest(), version=8)
    assert conn.in_flight == 3
    expected = [
        Response(cid1, METADATA, 12, METADATA_RESPONSE),
        Response(cid2, API_VERSIONS, 4, BROKER_VERSIONS),
        Response(cid4, METADATA, 8, METADATA_RESPONSE),
    ]
    data = b"".join(response_frame(r.correlation_id, r.api, r.version, r.body) for r in expected)
    return conn, data, expected


def test_several_responses_in_one_chunk() -> None:
    conn, data, expected = two_requests_and_their_responses()
    assert conn.receive_data(data) == expected
    assert conn.in_flight == 0
    assert conn.receive_data(b"") == []


def test_responses_split_at_every_byte_boundary() -> None:
    _, data, expected = two_requests_and_their_responses()
    for cut in range(len(data) + 1):
        conn, _, _ = two_requests_and_their_responses()
        got = conn.receive_data(data[:cut]) + conn.receive_data(memoryview(data)[cut:])
        assert got == expected, cut
        assert not conn.broken


def test_responses_fed_one_byte_at_a_time() -> None:
    conn, data, expected = two_requests_and_their_responses()
    got: list[Response] = []
    for i in range(len(data)):
        got += conn.receive_data(bytearray(data[i : i + 1]))
        assert conn.in_flight == 3 - len(got)
    assert got == expected


def test_acks_zero_produce_is_not_pending() -> None:
    conn = connection()
    conn.send(ProduceRequest(acks=0, timeout_ms=1), expect_response=False)
    assert conn.in_flight == 0
    with pytest.raises(ProtocolError, match="no request"):
        conn.receive_data(response_frame(0, PRODUCE, 12, ProduceResponse()))
    assert conn.broken


def test_mismatched_correlation_id_breaks_the_connection() -> None:
    conn = connection()
    cid, _ = conn.send(MetadataRequest(), version=12)
    with pytest.raises(ProtocolError, match="does not match"):
        conn.receive_data(response_frame(cid + 1, METADATA, 12, METADATA_RESPONSE))
    assert conn.broken
    with pytest.raises(ProtocolError, match="broken"):
        conn.receive_data(b"")
    with pytest.raises(ProtocolError, match="broken"):
        conn.send(MetadataRequest())


def test_response_to_nothing() -> None:
    conn = connection()
    with pytest.raises(ProtocolError):
        conn.receive_data(response_frame(0, METADATA, 12, METADATA_RESPONSE))
    assert conn.broken


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 3, 2**31 - 1, 1025])
def test_impossible_frame_sizes_fail_at_once(size: int) -> None:
    conn = connection(max_frame_bytes=1024)
    conn.send(MetadataRequest(), version=12)
    with pytest.raises(ProtocolError, match="frame size"):
        conn.receive_data(struct.pack(">i", size))  # no need to wait for the body
    assert conn.broken


def test_default_frame_limit_allows_100_mib() -> None:
    conn = connection()
    conn.send(MetadataRequest(), version=12)
    assert conn.receive_data(struct.pack(">i", 100 * 1024 * 1024)) == []  # waits for more
    assert not conn.broken
    conn = connection()
    conn.send(MetadataRequest(), version=12)
    with pytest.raises(ProtocolError):
        conn.receive_data(struct.pack(">i", 2**31 - 1))


def test_trailing_bytes_in_a_frame() -> None:
    conn = connection()
    cid, _ = conn.send(MetadataRequest(), version=12)
    frame = response_frame(cid, METADATA, 12, METADATA_RESPONSE)
    bad = struct.pack(">i", len(frame) - 4 + 1) + frame[4:] + b"\x00"
    with pytest.raises(ProtocolError, match="trailing"):
        conn.receive_data(bad)
    assert conn.broken


def test_flexible_response_header_tag_buffer_is_required() -> None:
    conn = connection()
    cid, _ = conn.send(MetadataRequest(), version=12)
    frame = response_frame(cid, METADATA, 12, METADATA_RESPONSE)
    no_tags = frame[8:9]  # drop the header's tag buffer byte
    assert no_tags == b"\x00"
    bad = struct.pack(">i", len(frame) - 5) + frame[4:8] + frame[9:]
    with pytest.raises(ProtocolError):
        conn.receive_data(bad)


def test_response_header_tags_are_skipped() -> None:
    conn = connection()
    cid, _ = conn.send(MetadataRequest(), version=12)
    body = body_bytes(METADATA_RESPONSE, METADATA, 12)
    payload = struct.pack(">i", cid) + bytes.fromhex("010502abcd") + body
    [response] = conn.receive_data(struct.pack(">i", len(payload)) + payload)
    assert response.body == METADATA_RESPONSE


def test_fail_pending() -> None:
    conn, data, _ = two_requests_and_their_responses()
    conn.receive_data(data[:7])
    pending = conn.fail_pending()
    assert [p.api for p in pending] == [METADATA, API_VERSIONS, METADATA]
    assert conn.in_flight == 0
    # the partial frame was dropped with them
    cid, _ = conn.send(MetadataRequest(), version=12)
    [response] = conn.receive_data(response_frame(cid, METADATA, 12, METADATA_RESPONSE))
    assert response.correlation_id == cid


# --- responses built by kafka-python --------------------------------------------------------


def test_kafka_python_response_frames_are_understood() -> None:
    conn = connection()
    cid1, _ = conn.api_versions_request("aiokprod", "1", version=3)
    cid2, _ = conn.send(MetadataRequest(), version=12)
    theirs_av = KAFKA_PYTHON_MESSAGES["ApiVersionsResponse"]
    av = theirs_av(
        version=3,
        error_code=0,
        api_keys=[theirs_av.ApiVersion(api_key=0, min_version=3, max_version=12)],
        throttle_time_ms=5,
        finalized_features_epoch=0,
    )
    av.with_header(correlation_id=cid1)
    theirs_md = KAFKA_PYTHON_MESSAGES["MetadataResponse"]
    md = theirs_md(
        version=12,
        throttle_time_ms=0,
        brokers=[theirs_md.MetadataResponseBroker(node_id=1, host="h", port=9092, rack="r")],
        cluster_id="c",
        controller_id=1,
        topics=[],
    )
    md.with_header(correlation_id=cid2)
    data = bytes(av.encode(header=True, framed=True)) + bytes(md.encode(header=True, framed=True))
    # ApiVersions v3: response header v0, so no tag byte right after the correlation id
    assert data[8:10] == b"\x00\x00"
    first, second = conn.receive_data(data)
    assert first.body == ApiVersionsResponse(
        api_keys=[ApiVersionRange(api_key=0, min_version=3, max_version=12)],
        throttle_time_ms=5,
        finalized_features_epoch=0,
    )
    assert isinstance(second.body, MetadataResponse)
    assert second.body.brokers == [MetadataBroker(node_id=1, host="h", port=9092, rack="r")]


# --- ApiVersions ----------------------------------------------------------------------------


def v0_error_frame(correlation_id: int, entries: list[tuple[int, int, int]]) -> bytes:
    """What a broker sends when it does not know our ApiVersions version: the v0 layout."""
    body = struct.pack(">hi", 35, len(entries)) + b"".join(
        struct.pack(">hhh", *entry) for entry in entries
    )
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("sent", [3, 4])
def test_api_versions_fallback_to_v0(sent: int) -> None:
    conn = ClientConnection("c")
    cid, _ = conn.api_versions_request("aiokprod", "0.1.0", version=sent)
    [response] = conn.receive_data(v0_error_frame(cid, [(18, 0, 2)]))
    body = response.body
    assert isinstance(body, ApiVersionsResponse)
    assert body.error_code == 35
    assert body.api_keys == [ApiVersionRange(api_key=18, min_version=0, max_version=2)]
    assert api_versions_retry_version(body, sent) == 2
    with pytest.raises(BrokerError):
        conn.set_broker_versions(body)
    # retry at v2 and get a v2 answer
    cid, frame = conn.api_versions_request("aiokprod", "0.1.0", version=2)
    assert struct.unpack_from(">hh", frame, 4) == (18, 2)
    assert len(frame) == 4 + 8 + 3  # header v1 with client id "c", empty body
    [response] = conn.receive_data(response_frame(cid, API_VERSIONS, 2, BROKER_VERSIONS))
    assert isinstance(response.body, ApiVersionsResponse)
    conn.set_broker_versions(response.body)
    assert conn.version_for(PRODUCE) == 12


@pytest.mark.parametrize(
    ("error", "entries", "sent", "expected"),
    [
        (35, [(18, 0, 2)], 4, 2),
        (35, [(18, 0, 3)], 4, 3),
        (35, [], 4, 0),  # no ApiVersions entry: v0
        (35, [(0, 0, 9)], 3, 0),
        (35, [(18, 0, 9)], 4, None),  # the broker claims to speak what we sent
        (35, [(18, 0, 2)], 0, None),  # an error to v0 cannot be retried
        (42, [(18, 0, 2)], 4, None),  # another error
        (0, [(18, 0, 4)], 4, None),
    ],
)
def test_api_versions_retry_version(
    error: int, entries: list[tuple[int, int, int]], sent: int, expected: int | None
) -> None:
    response = ApiVersionsResponse(
        error_code=error,
        api_keys=[
            ApiVersionRange(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in entries
        ],
    )
    assert api_versions_retry_version(response, sent) == expected


def test_decode_api_versions_response_at_sent_version() -> None:
    frame = response_frame(9, API_VERSIONS, 4, BROKER_VERSIONS)[4:]
    assert decode_api_versions_response(4, frame) == BROKER_VERSIONS
    with pytest.raises(ProtocolError):
        decode_api_versions_response(0, b"\x00\x00\x00\x09\x00")


def test_api_versions_request_software_names_are_sanitised() -> None:
    conn = ClientConnection()
    _, frame = conn.api_versions_request("my app_x", "1.0+local.")
    reader = Reader(bytes(frame))
    reader.skip(4 + 8)
    assert reader.read_string(compact=False, nullable=True) is None  # client id
    reader.skip(1)  # header tag buffer
    body = decode_struct(ApiVersionsRequest, reader, 4, True)
    assert body == ApiVersionsRequest(
        client_software_name="my-app-x", client_software_version="1.0-local"
    )
    _, frame = conn.api_versions_request("___", "1")
    assert b"\x08unknown" in frame


def test_init_producer_id_response_header_v1() -> None:
    conn = ClientConnection()
    conn.set_broker_versions(
        ApiVersionsResponse(api_keys=[ApiVersionRange(api_key=22, min_version=0, max_version=5)])
    )
    cid, _ = conn.send(InitProducerIdRequest())
    body = InitProducerIdResponse(producer_id=7, producer_epoch=1)
    theirs = KAFKA_PYTHON_MESSAGES["InitProducerIdResponse"]
    reply = theirs(version=5, throttle_time_ms=0, error_code=0, producer_id=7, producer_epoch=1)
    reply.with_header(correlation_id=cid)
    [response] = conn.receive_data(bytes(reply.encode(header=True, framed=True)))
    assert response.body == body
