"""The step-wise Metadata decoder agrees with the declarative codec, and takes bounded steps."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError
from aiokprod.protocol.api import METADATA, METADATA_IN_STEPS, api_for_request
from aiokprod.protocol.connection import decode_response_body, encode_request_frame
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataRequestInSteps,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
)
from aiokprod.protocol.metadata_fast import (
    MetadataDecoder,
    MetadataResponseBody,
    TopicPartitions,
    topics_of,
)
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.schema import decode_struct, encode_struct

from ._strategies import struct_strategy

VERSIONS = range(METADATA.min_version, METADATA.max_version + 1)


def encode(response: MetadataResponse, version: int) -> bytes:
    out = bytearray()
    encode_struct(response, version, METADATA.is_flexible(version), out)
    return bytes(out)


def as_tuples(topics: list[TopicPartitions]) -> list[tuple[object, ...]]:
    return [
        (t.error_code, t.name, t.topic_id, t.is_internal, t.indexes, t.leaders, t.epochs)
        for t in topics
    ]


def wide_response(topics: int, partitions: int, replicas: int = 3) -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataBroker(node_id=i, host=f"b{i}", port=9092) for i in range(replicas)],
        cluster_id="c",
        controller_id=0,
        topics=[
            MetadataTopic(
                error_code=0,
                name=f"t{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=[
                    MetadataPartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=p % replicas,
                        leader_epoch=t + p,
                        replica_nodes=list(range(replicas)),
                        isr_nodes=list(range(replicas)),
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decodes_like_the_generic_codec(version: int, data: st.DataObject) -> None:
    flexible = METADATA.is_flexible(version)
    response = data.draw(struct_strategy(MetadataResponse, version, flexible))
    wire = encode(response, version)
    generic = decode_struct(MetadataResponse, Reader(wire), version, flexible)
    step = data.draw(st.integers(1, 5))
    decoder = MetadataDecoder(wire, version)
    topics: list[TopicPartitions] = []
    while not decoder.done:
        topics += decoder.step(step)
    assert as_tuples(topics) == as_tuples(topics_of(generic))
    assert decoder.brokers == generic.brokers
    assert (decoder.cluster_id, decoder.controller_id) == (
        generic.cluster_id,
        generic.controller_id,
    )
    assert decoder.throttle_time_ms == generic.throttle_time_ms
    assert decoder.error_code == generic.error_code


@pytest.mark.parametrize("version", [7, 9, 13])
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    wire = encode(wide_response(2, 3), version)
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError):
            MetadataDecoder(wire[:cut], version).decode_all()
    with pytest.raises(ProtocolError, match="trailing"):
        MetadataDecoder(wire + b"\0", version).decode_all()


@pytest.mark.parametrize("version", [8, 12])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_corrupted_answer_is_refused_when_the_generic_codec_refuses_it(
    version: int, data: st.DataObject
) -> None:
    wire = bytearray(encode(wide_response(2, 2), version))
    for _ in range(data.draw(st.integers(1, 3))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    flexible = METADATA.is_flexible(version)
    try:
        reader = Reader(bytes(wire))
        generic = decode_struct(MetadataResponse, reader, version, flexible)
        reader.expect_end()
    except ProtocolError:
        with pytest.raises(ProtocolError):
            MetadataDecoder(bytes(wire), version).decode_all()
        return
    assert as_tuples(MetadataDecoder(bytes(wire), version).decode_all()) == as_tuples(
        topics_of(generic)
    )


def test_long_replica_lists_take_the_careful_path() -> None:
    """200 replicas: the compact array length takes two bytes."""
    response = wide_response(1, 3, replicas=200)
    decoded = MetadataDecoder(encode(response, 12), 12).decode_all()
    assert as_tuples(decoded) == as_tuples(topics_of(response))


def test_steps_read_a_bounded_number_of_partitions() -> None:
    wire = encode(wide_response(7, 1000), 13)
    decoder = MetadataDecoder(wire, 13)
    finished: list[str | None] = []
    steps = 0
    while not decoder.done:
        before = decoder.partitions_read
        finished += [t.name for t in decoder.step(300)]
        assert decoder.partitions_read - before <= 300
        steps += 1
    assert steps >= 7000 // 300
    assert finished == [f"t{t}" for t in range(7)]  # each once, in order, when complete
    assert decoder.partitions_read == 7000


def test_the_connection_hands_up_the_body_of_a_request_in_steps() -> None:
    request = MetadataRequestInSteps(topics=[MetadataRequestTopic(name="a")])
    assert api_for_request(request) is METADATA_IN_STEPS
    assert api_for_request(MetadataRequest(topics=[])) is METADATA
    plain = MetadataRequest(topics=[MetadataRequestTopic(name="a")])
    assert encode_request_frame(METADATA_IN_STEPS, 12, 7, "c", request) == encode_request_frame(
        METADATA, 12, 7, "c", plain
    )
    body = encode(wide_response(1, 2), 12)
    frame = (7).to_bytes(4, "big") + b"\0" + body  # correlation id, header tagged fields
    kept = decode_response_body(METADATA_IN_STEPS, 12, frame)
    assert isinstance(kept, MetadataResponseBody)
    assert (kept.data, kept.version) == (body, 12)
    assert isinstance(decode_response_body(METADATA, 12, frame), MetadataResponse)


def test_versions_outside_the_table_are_refused() -> None:
    with pytest.raises(ProtocolError):
        MetadataDecoder(b"", 3)
