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
from typing import Final

from aiokprod.protocol.messages.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from aiokprod.protocol.primitives import Reader, encode_unsigned_varint

_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
FIRST_FLEXIBLE: Final = 9


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
            index = reader.read_int32()
            error_code = reader.read_int16()
            base_offset = reader.read_int64()
            log_append_time_ms = reader.read_int64() if version >= 2 else -1
            log_start_offset = reader.read_int64() if version >= 5 else -1
            if version >= 8:
                if reader.read_array_length(compact=compact, min_item_size=5):
                    return None  # record errors
                if reader.read_string(compact=compact, nullable=True) is not None:
                    return None  # an error message
            if flexible and reader.read_unsigned_varint() != 0:
                return None  # a tagged field (the KIP-951 leader hint)
            parts.append(
                ProducePartitionResponse(
                    index=index,
                    error_code=error_code,
                    base_offset=base_offset,
                    log_append_time_ms=log_append_time_ms,
                    log_start_offset=log_start_offset,
                )
            )
        if flexible and reader.read_unsigned_varint() != 0:
            return None
        topics.append(ProduceTopicResponse(name=name, partition_responses=parts))
    throttle_time_ms = reader.read_int32()
    if flexible and reader.read_unsigned_varint() != 0:
        return None  # node endpoints (KIP-951)
    return ProduceResponse(responses=topics, throttle_time_ms=throttle_time_ms)
