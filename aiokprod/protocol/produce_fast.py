"""Hand-written encoder and decoder for Produce, the one message on the hot path.

Every other message goes through the declarative codec (``protocol.schema``). Produce is sent
once per request and answered once per request, so a `send_and_wait()` pays for both on its
critical path; these two functions do the same work as the generic codec in a few straight
lines. They produce exactly the bytes, and exactly the objects, the generic codec does (the
tests check both ways over every version), and the decoder hands anything unusual (a tagged
field, a record error) back to the generic codec rather than handling it twice.
"""

from __future__ import annotations

import struct
from typing import Final, TypeVar

from aiokprod.protocol.messages.produce import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    ProduceTopicResponse,
)
from aiokprod.protocol.primitives import Reader, encode_unsigned_varint
from aiokprod.protocol.schema import Struct

_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
FIRST_FLEXIBLE: Final = 9
#: A partition's fixed fields in a Produce response, v3-v4 and v5+.
_PARTITION_V3: Final = struct.Struct(">ihqq")
_PARTITION_V5: Final = struct.Struct(">ihqqq")
_S = TypeVar("_S", bound=Struct)


def partition_data(index: int, records: bytes | bytearray | memoryview) -> ProducePartitionData:
    """``ProducePartitionData(index=index, records=records)``, made as cheaply as possible.

    One per batch sent; see :func:`_new`.
    """
    part = _new(ProducePartitionData)
    part.index = index
    part.records = records
    return part


def produce_request(
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: dict[str, list[ProducePartitionData]],
) -> ProduceRequest:
    """A ProduceRequest of each topic's partitions, made as cheaply as possible.

    One per request sent; see :func:`_new`.
    """
    topic_data = []
    for name, parts in topics.items():
        topic = _new(ProduceTopicData)
        topic.name = name
        topic.partition_data = parts
        topic_data.append(topic)
    request = _new(ProduceRequest)
    request.transactional_id = transactional_id
    request.acks = acks
    request.timeout_ms = timeout_ms
    request.topic_data = topic_data
    return request


def encode_produce_body(request: ProduceRequest, version: int, out: bytearray) -> None:
    """Append the body of ``request`` at ``version`` (3..12) to ``out``.

    Raises:
        ValueError: a field does not fit its wire type (as the generic codec raises).
    """
    try:
        _encode(request, version, out)
    except (struct.error, TypeError, AttributeError) as exc:
        raise ValueError(f"ProduceRequest: {exc}") from exc


def _encode(request: ProduceRequest, version: int, out: bytearray) -> None:
    flexible = version >= FIRST_FLEXIBLE
    txn = request.transactional_id
    if flexible:
        if txn is None:
            out.append(0)
        else:
            data = txn.encode()
            out += encode_unsigned_varint(len(data) + 1)
            out += data
    elif txn is None:
        out += b"\xff\xff"
    else:
        data = txn.encode()
        out += _INT16.pack(len(data))
        out += data
    out += _ACKS_TIMEOUT.pack(request.acks, request.timeout_ms)
    topics = request.topic_data
    if flexible:
        out += encode_unsigned_varint(len(topics) + 1)
        for topic in topics:
            name = topic.name.encode()
            out += encode_unsigned_varint(len(name) + 1)
            out += name
            parts = topic.partition_data
            out += encode_unsigned_varint(len(parts) + 1)
            for part in parts:
                out += _INT32.pack(part.index)
                records = part.records
                if records is None:
                    out.append(0)
                else:
                    out += encode_unsigned_varint(len(records) + 1)
                    out += records
                out.append(0)  # partition tagged fields
            out.append(0)  # topic tagged fields
        out.append(0)  # request tagged fields
    else:
        out += _INT32.pack(len(topics))
        for topic in topics:
            name = topic.name.encode()
            out += _INT16.pack(len(name))
            out += name
            parts = topic.partition_data
            out += _INT32.pack(len(parts))
            for part in parts:
                out += _INT32.pack(part.index)
                records = part.records
                if records is None:
                    out += b"\xff\xff\xff\xff"
                else:
                    out += _INT32.pack(len(records))
                    out += records


def decode_produce_body(reader: Reader, version: int) -> ProduceResponse | None:
    """Decode a Produce response body, or return None to leave it to the generic codec.

    None means the body holds something only the generic codec decodes (tagged fields such
    as leader hints, record errors, error messages).

    Raises:
        ProtocolError: truncated or malformed input.
    """
    flexible = version >= FIRST_FLEXIBLE
    compact = flexible
    topics = []
    n_topics = reader.read_array_length(compact=compact, min_item_size=2)
    if n_topics is None:
        return None
    for _ in range(n_topics):
        name = reader.read_string(compact=compact, nullable=False)
        n_parts = reader.read_array_length(compact=compact, min_item_size=14)
        if n_parts is None or name is None:
            return None
        parts = []
        for _ in range(n_parts):
            # index, error_code, base_offset, log_append_time_ms (v2+), log_start_offset
            # (v5+): read at once.
            fixed = reader.read_struct(_PARTITION_V5 if version >= 5 else _PARTITION_V3)
            # Typed names, not int(...): struct gives ints already, and in the compiled build
            # an int() of an object is a call of the int type where this is a type check.
            index: int = fixed[0]
            error_code: int = fixed[1]
            base_offset: int = fixed[2]
            log_append_time_ms: int = fixed[3]
            log_start_offset: int = fixed[4] if version >= 5 else -1
            if version >= 8:
                if reader.read_array_length(compact=compact, min_item_size=5):
                    return None  # record errors
                if reader.read_string(compact=compact, nullable=True) is not None:
                    return None  # an error message
            if flexible and reader.read_unsigned_varint() != 0:
                return None  # a tagged field (the KIP-951 leader hint)
            part = _new(ProducePartitionResponse)
            part.index = index
            part.error_code = error_code
            part.base_offset = base_offset
            part.log_append_time_ms = log_append_time_ms
            part.log_start_offset = log_start_offset
            part.record_errors = []
            part.error_message = None
            part.current_leader = None
            parts.append(part)
        if flexible and reader.read_unsigned_varint() != 0:
            return None
        topic = _new(ProduceTopicResponse)
        topic.name = name
        topic.partition_responses = parts
        topics.append(topic)
    throttle_time_ms = reader.read_int32()
    if flexible and reader.read_unsigned_varint() != 0:
        return None  # node endpoints (KIP-951)
    response = _new(ProduceResponse)
    response.responses = topics
    response.throttle_time_ms = throttle_time_ms
    response.node_endpoints = []
    return response


def _new(cls: type[_S]) -> _S:
    """An instance of a message class with no field set yet: the caller sets every field.

    Per request and response this is cheaper than the dataclass's ``__init__`` (keyword
    arguments, defaults, an interpreted frame), which is what the generic codec calls; the
    tests compare the objects both make.
    """
    return cls.__new__(cls)
