"""Reading v2 record batches back: the decoder of what the builder writes.

The batch and record layout is described once, in :mod:`aiokprod.protocol.records` (the
builder's module). The producer reads a batch back only to split one the broker refused as
too large (``internals/split.py``); the reader also serves the tests, the simulator's broker
and the benchmarks. It checks the magic, the length field, the CRC-32C,
the record count against the last offset delta, and every record's framing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from crc32c import crc32c

from aiokprod.errors import CorruptRecordBatchError, ProtocolError
from aiokprod.protocol.primitives import Reader

# The header's struct and the CRC's start are the builder's (one definition of the layout).
from aiokprod.protocol.records import (
    _CRC_START,
    _HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    MAGIC,
    TRANSACTIONAL_FLAG,
    Decompressor,
    Header,
)

_INT16 = struct.Struct(">h")
_ATTRIBUTES_OFFSET = 21


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back from a batch."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded v2 record batch."""

    base_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[Record, ...]

    @property
    def compression(self) -> int:
        """The codec id from the attributes."""
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        """Whether the transactional attribute bit is set."""
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        """Whether this is a broker-written control batch (transaction markers)."""
        return bool(self.attributes & CONTROL_FLAG)


def read_record_batches(
    data: bytes | bytearray | memoryview,
    decompressors: Mapping[int, Decompressor] | None = None,
) -> Iterator[RecordBatch]:
    """Decode every v2 batch in a records blob (as found in a Produce request or a log).

    Raises:
        ProtocolError: truncated or malformed input; CorruptRecordBatchError for a wrong CRC.
    """
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < BATCH_HEADER_SIZE:
            raise ProtocolError(f"record batch header truncated at byte {pos}")
        length = int(struct.unpack_from(">i", view, pos + 8)[0])
        if length < BATCH_HEADER_SIZE - 12 or pos + 12 + length > len(view):
            raise ProtocolError(f"record batch length {length} at byte {pos} is impossible")
        yield read_record_batch(view[pos : pos + 12 + length], decompressors)
        pos += 12 + length


def read_record_batch(
    data: bytes | bytearray | memoryview,
    decompressors: Mapping[int, Decompressor] | None = None,
) -> RecordBatch:
    """Decode exactly one v2 record batch, checking its CRC and record framing.

    Raises:
        ProtocolError: truncated or malformed input; CorruptRecordBatchError for a wrong CRC.
    """
    view = memoryview(data)
    if len(view) < BATCH_HEADER_SIZE:
        raise ProtocolError(f"record batch of {len(view)} bytes is shorter than its header")
    (
        base_offset,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise ProtocolError(f"record batch magic {magic}, only magic 2 is supported")
    if length != len(view) - 12:
        raise ProtocolError(f"record batch length field {length} != {len(view) - 12}")
    actual_crc = crc32c(view[_CRC_START:])
    if actual_crc != crc:
        raise CorruptRecordBatchError(
            f"record batch CRC-32C is {actual_crc:#010x}, header says {crc:#010x}"
        )
    if count < 0 or (count and last_offset_delta != count - 1):
        raise ProtocolError(f"record count {count} and last offset delta {last_offset_delta}")
    codec = attributes & COMPRESSION_MASK
    body: bytes | memoryview = view[BATCH_HEADER_SIZE:]
    if codec:
        decompress = (decompressors or {}).get(codec)
        if decompress is None:
            raise ProtocolError(f"record batch uses compression codec {codec}, no decoder given")
        try:
            body = decompress(body)
        except ProtocolError:
            raise
        except Exception as exc:  # codec libraries raise their own types
            raise ProtocolError(f"record batch does not decompress (codec {codec}): {exc}") from exc
    reader = Reader(body, "record")
    if count > reader.remaining // 7:  # a record takes at least 7 bytes
        raise ProtocolError(f"record count {count} cannot fit in {reader.remaining} bytes")
    records = tuple(_read_record(reader, base_offset, base_ts) for _ in range(count))
    reader.expect_end()
    return RecordBatch(
        base_offset,
        leader_epoch,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        records,
    )


def _read_record(reader: Reader, base_offset: int, base_ts: int) -> Record:
    length = reader.read_varint()
    if length < 6 or length > reader.remaining:
        raise reader.fail(f"record length {length} with {reader.remaining} bytes left")
    start = reader.position
    reader.read_int8()  # attributes, unused
    ts_delta = reader.read_varlong()
    offset_delta = reader.read_varint()
    key = _read_varbytes(reader)
    value = _read_varbytes(reader)
    header_count = reader.read_varint()
    if header_count < 0 or header_count > reader.remaining // 2:
        raise reader.fail(f"header count {header_count}")
    headers = []
    for _ in range(header_count):
        hkey = _read_varbytes(reader)
        if hkey is None:
            raise reader.fail("null header key")
        try:
            hkey_text = hkey.decode("utf-8")
        except UnicodeDecodeError:
            raise reader.fail("header key is not UTF-8") from None
        headers.append((hkey_text, _read_varbytes(reader)))
    if reader.position - start != length:
        raise reader.fail(f"record length {length} != {reader.position - start} bytes read")
    return Record(base_offset + offset_delta, base_ts + ts_delta, key, value, tuple(headers))


def _read_varbytes(reader: Reader) -> bytes | None:
    n = reader.read_varint()
    if n < 0:
        if n != -1:
            raise reader.fail(f"negative length {n}")
        return None
    return reader.read_raw(n)


def batch_attributes(data: bytes | bytearray | memoryview) -> int:
    """The attributes field of a batch's header (compression, flags)."""
    return int(_INT16.unpack_from(data, _ATTRIBUTES_OFFSET)[0])
