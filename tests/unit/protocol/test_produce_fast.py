"""The hand-written Produce codec agrees with the declarative one, byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.protocol.api import PRODUCE
from aiokprod.protocol.messages.produce import (
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
)
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.produce_fast import (
    decode_produce_body,
    encode_produce_body,
    partition_data,
    produce_request,
)
from aiokprod.protocol.schema import decode_struct, encode_struct

from ._strategies import struct_strategy

VERSIONS = range(PRODUCE.min_version, PRODUCE.max_version + 1)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_request_bytes_match_the_generic_codec(version: int, data: st.DataObject) -> None:
    flexible = PRODUCE.is_flexible(version)
    request = data.draw(struct_strategy(ProduceRequest, version, flexible))
    generic = bytearray()
    encode_struct(request, version, flexible, generic)
    fast = bytearray()
    encode_produce_body(request, version, fast)
    assert fast == generic


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_response_decodes_like_the_generic_codec(version: int, data: st.DataObject) -> None:
    flexible = PRODUCE.is_flexible(version)
    response = data.draw(struct_strategy(ProduceResponse, version, flexible))
    wire = bytearray()
    encode_struct(response, version, flexible, wire)
    fast = decode_produce_body(Reader(bytes(wire)), version)
    generic = decode_struct(ProduceResponse, Reader(bytes(wire)), version, flexible)
    if fast is not None:  # None: it left the message to the generic codec
        assert fast == generic
    else:
        has_extras = any(
            p.record_errors or p.error_message is not None or p.current_leader is not None
            for t in generic.responses
            for p in t.partition_responses
        ) or bool(generic.node_endpoints)
        assert has_extras, "the fast decoder may only decline messages with extras"


def test_out_of_range_fields_raise_value_error() -> None:
    with pytest.raises(ValueError, match="ProduceRequest"):
        encode_produce_body(ProduceRequest(acks=70000, timeout_ms=1), 9, bytearray())


@pytest.mark.parametrize("transactional_id", [None, "txn"])
def test_the_request_builders_make_what_the_constructors_make(transactional_id: str | None) -> None:
    parts = [partition_data(0, b"batch0"), partition_data(3, bytearray(b"batch3"))]
    assert parts == [
        ProducePartitionData(index=0, records=b"batch0"),
        ProducePartitionData(index=3, records=bytearray(b"batch3")),
    ]
    built = produce_request(transactional_id, -1, 30_000, {"a": parts[:1], "b": parts[1:]})
    assert built == ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceTopicData(name="a", partition_data=parts[:1]),
            ProduceTopicData(name="b", partition_data=parts[1:]),
        ],
    )
