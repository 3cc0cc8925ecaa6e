"""v2 record batches: our builder and reader, checked against kafka-python and aiokafka."""

from __future__ import annotations

import gzip
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokprod.errors import CorruptRecordBatchError, ProtocolError
from aiokprod.protocol.primitives import VARINT_CACHE_SIZE
from aiokprod.protocol.record_reader import batch_attributes, read_record_batch, read_record_batches
from aiokprod.protocol.records import (
    BATCH_HEADER_SIZE,
    MAX_RECORD_OVERHEAD,
    TRANSACTIONAL_FLAG,
    ClosedBatch,
    Header,
    RecordBatchBuilder,
    encode_headers,
    record_size_upper_bound,
)

from ._thirdparty import aiokafka_crecords, aiokafka_records, kafka_records

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies -----------------------------------------------------------------------------


def _blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


small_bytes = st.binary(max_size=40)
# Bigger than a 16 KiB batch and than the 2**14 varint table, without making Hypothesis draw
# tens of thousands of bytes one by one.
large_bytes = st.builds(_blob, st.integers(0, 2**32), st.integers(VARINT_CACHE_SIZE, 40_000))
payload = st.none() | small_bytes | large_bytes
header_key = st.text(max_size=12)  # unicode, including non-ASCII
header_value = st.none() | small_bytes | large_bytes
headers_strategy = st.lists(st.tuples(header_key, header_value), max_size=4)


@dataclass(frozen=True)
class In:
    """One record as given to a builder."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 30) -> list[In]:
    n = draw(st.integers(1, max_size))
    ts = draw(st.integers(0, 2**45) | st.just(0))
    # large keys, values and headers only in short batches, to keep examples fast
    data = payload if n < 8 else st.none() | small_bytes
    headers = headers_strategy if n < 8 else st.lists(st.tuples(header_key, st.none()), max_size=2)
    records = []
    for _ in range(n):
        records.append(In(ts, draw(data), draw(data), tuple(draw(headers))))
        # backwards, small steps, and far jumps (beyond int32 and the varint table)
        ts += draw(st.integers(-5, 5) | st.integers(-(2**40), 2**40))
    return records


producer_state = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
)


def build_ours(
    records: Sequence[In],
    state: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> ClosedBatch:
    builder = RecordBatchBuilder(transactional=transactional)
    for i, r in enumerate(records):
        headers = encode_headers(r.headers) if r.headers else None
        assert builder.try_append(r.timestamp, r.key, r.value, headers) == i
    batch = builder.close()
    batch.stamp(*state)
    return batch


def build_theirs(
    module: Any,
    records: Sequence[In],
    state: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = module(2, 0, transactional, *state, 2**31 - 1)
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


DECODERS = {
    "kafka-python": kafka_records.DefaultRecordBatch,
    "aiokafka-C": aiokafka_crecords.DefaultRecordBatch,
    "aiokafka-py": aiokafka_records._DefaultRecordBatchPy,
}
BUILDERS = {
    "kafka-python": kafka_records.DefaultRecordBatchBuilder,
    "aiokafka-C": aiokafka_crecords.DefaultRecordBatchBuilder,
    "aiokafka-py": aiokafka_records._DefaultRecordBatchBuilderPy,
}


def test_aiokafka_c_extension_is_importable() -> None:
    assert aiokafka_records.DefaultRecordBatch is aiokafka_crecords.DefaultRecordBatch
    assert DECODERS["aiokafka-C"] is not DECODERS["aiokafka-py"]


# --- our builder, our reader ----------------------------------------------------------------


@SETTINGS
@given(record_lists(), producer_state, st.booleans())
def test_round_trip(records: list[In], state: tuple[int, int, int], transactional: bool) -> None:
    batch = build_ours(records, state, transactional)
    assert batch.record_count == len(records)
    assert batch.size_in_bytes == len(batch.data) == batch.uncompressed_size
    decoded = read_record_batch(batch.data)
    assert decoded.base_offset == 0
    assert decoded.partition_leader_epoch == -1
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == state
    assert decoded.is_transactional is transactional
    assert not decoded.is_control
    assert decoded.compression == 0
    assert decoded.last_offset_delta == len(records) - 1
    assert decoded.base_timestamp == records[0].timestamp
    assert decoded.max_timestamp == max(r.timestamp for r in records)
    assert decoded.crc == crc32c(bytes(batch.data[21:]))
    got = [In(r.timestamp, r.key, r.value, r.headers) for r in decoded.records]
    assert got == records
    assert [r.offset for r in decoded.records] == list(range(len(records)))


@SETTINGS
@given(st.lists(record_lists(max_size=5), min_size=1, max_size=4))
def test_read_record_batches_concatenated(batches: list[list[In]]) -> None:
    blob = b"".join(bytes(build_ours(records).data) for records in batches)
    decoded = list(read_record_batches(blob))
    assert [[r.value for r in b.records] for b in decoded] == [
        [r.value for r in records] for records in batches
    ]


# --- our builder, independent decoders ------------------------------------------------------


def check_with_decoder(
    decoder: Any,
    data: bytes,
    records: Sequence[In],
    state: tuple[int, int, int],
    transactional: bool,
    compression: int = 0,
) -> None:
    batch = decoder(data)
    assert batch.validate_crc()
    assert batch.base_offset == 0
    assert batch.magic == 2
    assert batch.compression_type == compression
    assert batch.timestamp_type == 0
    assert not batch.is_control_batch
    assert batch.is_transactional is transactional
    assert batch.last_offset_delta == len(records) - 1
    assert batch.first_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == state
    got = list(batch)
    assert len(got) == len(records)
    for i, (theirs, ours) in enumerate(zip(got, records, strict=True)):
        assert theirs.offset == i
        assert theirs.timestamp == ours.timestamp
        assert theirs.key == ours.key
        assert theirs.value == ours.value
        assert [(k, v) for k, v in theirs.headers] == list(ours.headers)


@pytest.mark.parametrize("decoder", DECODERS.values(), ids=DECODERS.keys())
@SETTINGS
@given(records=record_lists(), state=producer_state, transactional=st.booleans())
def test_independent_decoders_read_our_batches(
    decoder: Any, records: list[In], state: tuple[int, int, int], transactional: bool
) -> None:
    batch = build_ours(records, state, transactional)
    check_with_decoder(decoder, bytes(batch.data), records, state, transactional)


@pytest.mark.parametrize("decoder", DECODERS.values(), ids=DECODERS.keys())
def test_independent_decoders_read_many_records(decoder: Any) -> None:
    # more records than the varint table holds offset deltas for
    records = [
        In(1_700_000_000_000 + (i * 7919) % 5000 - 2500, None if i % 3 else b"k%d" % i,
           b"v" * (i % 50), (("h", b"x"),) if i % 1000 == 0 else ())
        for i in range(VARINT_CACHE_SIZE + 700)
    ]  # fmt: skip
    state = (12345, 3, 2**31 - 20_000)
    batch = build_ours(records, state)
    check_with_decoder(decoder, bytes(batch.data), records, state, False)
    assert [r.offset for r in read_record_batch(batch.data).records][-1] == len(records) - 1


@pytest.mark.parametrize("name", BUILDERS.keys())
@SETTINGS
@given(records=record_lists(max_size=10), state=producer_state, transactional=st.booleans())
def test_same_bytes_as_independent_builders(
    name: str, records: list[In], state: tuple[int, int, int], transactional: bool
) -> None:
    ours = bytearray(build_ours(records, state, transactional).data)
    theirs = bytearray(build_theirs(BUILDERS[name], records, state, transactional))
    if name == "kafka-python":
        # kafka-python writes partition leader epoch 0 where Kafka's producer writes -1;
        # the field is outside the CRC and the broker overwrites it.
        assert theirs[12:16] == b"\x00\x00\x00\x00"
        theirs[12:16] = b"\xff\xff\xff\xff"
    assert ours == theirs


# --- independent builders, our reader -------------------------------------------------------


@pytest.mark.parametrize("name", BUILDERS.keys())
@SETTINGS
@given(records=record_lists(), state=producer_state, transactional=st.booleans())
def test_our_reader_reads_independent_batches(
    name: str, records: list[In], state: tuple[int, int, int], transactional: bool
) -> None:
    data = build_theirs(BUILDERS[name], records, state, transactional)
    decoded = read_record_batch(data)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == state
    assert decoded.is_transactional is transactional
    assert decoded.base_timestamp == records[0].timestamp
    assert decoded.max_timestamp == max(r.timestamp for r in records)
    assert [In(r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == records
    assert [r.offset for r in decoded.records] == list(range(len(records)))


def test_our_reader_reads_kafka_python_gzip() -> None:
    builder = kafka_records.DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 2**20)
    for i in range(50):
        builder.append(i, 1000 + i, None, b"value-%d" % i, [])
    data = bytes(builder.build())
    assert batch_attributes(data) & 0x07 == 1
    with pytest.raises(ProtocolError, match="codec 1"):
        read_record_batch(data)
    decoded = read_record_batch(data, {1: gzip.decompress})
    assert [r.value for r in decoded.records] == [b"value-%d" % i for i in range(50)]


# --- golden layout --------------------------------------------------------------------------


def test_single_record_batch_layout() -> None:
    builder = RecordBatchBuilder()
    assert builder.size_in_bytes == BATCH_HEADER_SIZE
    assert builder.try_append(1000, None, b"v") == 0
    batch = builder.close()
    data = bytes(batch.data)
    records = bytes.fromhex("0e00000001027600")
    assert data[BATCH_HEADER_SIZE:] == records
    assert len(data) == BATCH_HEADER_SIZE + len(records)
    header = struct.unpack(">qiibIhiqqqhii", data[:BATCH_HEADER_SIZE])
    assert header == (
        0, len(data) - 12, -1, 2, crc32c(data[21:]), 0, 0, 1000, 1000, -1, -1, -1, 1,
    )  # fmt: skip


def test_encode_headers_golden() -> None:
    assert encode_headers([]) == b"\x00"
    assert encode_headers([("a", b"b"), ("k", None)]).hex() == "0402610262026b01"
    assert encode_headers([("é", b"")]).hex() == "0204c3a900"


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_large_timestamp_delta_uses_varlong(base: int, step: int) -> None:
    builder = RecordBatchBuilder()
    builder.try_append(base, None, None)
    builder.try_append(base + step * 4, None, None)
    builder.try_append(base - step * 4, None, None)
    decoded = read_record_batch(builder.close().data)
    assert [r.timestamp for r in decoded.records] == [base, base + step * 4, base - step * 4]
    assert decoded.max_timestamp == base + step * 4


# --- sizing ---------------------------------------------------------------------------------


def test_try_append_respects_size_limit() -> None:
    limit = 1000
    builder = RecordBatchBuilder()
    accepted = 0
    while True:
        before = builder.size_in_bytes
        delta = builder.try_append(5, b"key", b"x" * 90, size_limit=limit)
        if delta == -1:
            assert builder.size_in_bytes == before  # a refused record leaves no trace
            assert builder.record_count == accepted
            break
        assert delta == accepted
        accepted += 1
        assert builder.size_in_bytes <= limit
    assert accepted > 1
    batch = builder.close()
    assert len(batch.data) <= limit
    assert batch.record_count == accepted


def test_try_append_boundary_is_exact() -> None:
    probe = RecordBatchBuilder()
    probe.try_append(0, None, b"a")
    size_one = probe.size_in_bytes
    probe.try_append(0, None, b"a")
    record_size = probe.size_in_bytes - size_one

    exact = RecordBatchBuilder()
    exact.try_append(0, None, b"a")
    assert exact.try_append(0, None, b"a", size_limit=size_one + record_size - 1) == -1
    assert exact.try_append(0, None, b"a", size_limit=size_one + record_size) == 1
    assert exact.size_in_bytes == size_one + record_size


def test_first_record_is_always_accepted() -> None:
    builder = RecordBatchBuilder()
    assert builder.try_append(0, None, b"x" * 100_000, size_limit=16_384) == 0
    assert builder.size_in_bytes > 100_000
    assert builder.try_append(0, None, b"", size_limit=16_384) == -1
    decoded = read_record_batch(builder.close().data)
    assert decoded.records[0].value == b"x" * 100_000


@given(small_bytes | st.none(), payload, headers_strategy)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
def test_record_size_upper_bound(
    key: bytes | None, value: bytes | None, headers: list[Header]
) -> None:
    encoded_headers = encode_headers(headers)
    builder = RecordBatchBuilder()
    builder.try_append(2**40, None, None)
    before = builder.size_in_bytes
    builder.try_append(0, key, value, encoded_headers)  # a large negative timestamp delta
    actual = builder.size_in_bytes - before
    bound = record_size_upper_bound(len(key or b""), len(value or b""), len(encoded_headers))
    assert actual <= bound
    # ...and not a loose one: at most one byte of slack per varint (5 of them, widths
    # 5/10/5/5/5 at most) beyond what these small lengths and deltas take.
    assert bound - actual <= MAX_RECORD_OVERHEAD


def test_close_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty"):
        RecordBatchBuilder().close()
    with pytest.raises(ValueError, match="compressor"):
        RecordBatchBuilder(compression=1)


# --- stamping and CRC -----------------------------------------------------------------------


def test_crc32c_check_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_stamp_rewrites_producer_fields_and_crc() -> None:
    builder = RecordBatchBuilder(transactional=True)
    builder.try_append(1, b"k", b"v")
    batch = builder.close()
    unstamped = bytes(batch.data)
    assert struct.unpack_from(">qhi", unstamped, 43) == (-1, -1, -1)
    assert batch_attributes(unstamped) == TRANSACTIONAL_FLAG

    batch.stamp(1000, 5, 42)
    first = bytes(batch.data)
    assert struct.unpack_from(">qhi", first, 43) == (1000, 5, 42)
    assert struct.unpack_from(">I", first, 17)[0] == crc32c(first[21:])
    assert first[:43] != unstamped[:43]  # the CRC changed
    assert first[57:] == unstamped[57:]  # records untouched

    batch.stamp(1000, 6, 0)  # an epoch bump renumbers the batch
    second = bytes(batch.data)
    for decoder in DECODERS.values():
        theirs = decoder(second)
        assert theirs.validate_crc()
        assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (1000, 6, 0)
        assert theirs.is_transactional
    assert read_record_batch(second).producer_epoch == 6


def test_reader_checks_crc() -> None:
    builder = RecordBatchBuilder()
    builder.try_append(1, b"k", b"value")
    data = bytearray(builder.close().data)
    data[-2] ^= 0x01
    with pytest.raises(CorruptRecordBatchError, match="CRC"):
        read_record_batch(data)
    for decoder in DECODERS.values():
        assert not decoder(bytes(data)).validate_crc()
    data[-2] ^= 0x01
    data[12:16] = b"\x00\x00\x00\x07"  # partition leader epoch is outside the CRC
    assert read_record_batch(data).partition_leader_epoch == 7


# --- compression ----------------------------------------------------------------------------


def test_gzip_batch_round_trip_and_kafka_python() -> None:
    builder = RecordBatchBuilder(compression=1, compressor=gzip.compress)
    records = [In(10 + i, b"k", b"value" * 20, (("h", None),)) for i in range(40)]
    for r in records:
        builder.try_append(r.timestamp, r.key, r.value, encode_headers(r.headers))
    batch = builder.close()
    assert batch.uncompressed_size > len(batch.data)
    batch.stamp(9, 0, 0)
    decoded = read_record_batch(batch.data, {1: gzip.decompress})
    assert decoded.compression == 1
    assert [In(r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == records
    check_with_decoder(
        kafka_records.DefaultRecordBatch, bytes(batch.data), records, (9, 0, 0), False, 1
    )


def test_bad_compressed_body() -> None:
    builder = RecordBatchBuilder(compression=1, compressor=lambda data: b"not gzip")
    builder.try_append(0, None, b"v")
    with pytest.raises(ProtocolError, match="decompress"):
        read_record_batch(builder.close().data, {1: gzip.decompress})


def test_header_key_must_be_utf8() -> None:
    builder = RecordBatchBuilder()
    builder.try_append(0, None, b"v", encode_headers([("é", b"x")]))
    data = bytearray(builder.close().data)
    at = data.index("é".encode())
    data[at + 1] = 0x28  # c3 28 is not UTF-8
    data[17:21] = struct.pack(">I", crc32c(bytes(data[21:])))
    with pytest.raises(ProtocolError, match="UTF-8"):
        read_record_batch(data)


def test_truncated_and_foreign_batches() -> None:
    builder = RecordBatchBuilder()
    builder.try_append(0, None, b"v")
    data = bytes(builder.close().data)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            read_record_batch(data[:cut])
        with pytest.raises(ProtocolError):
            list(read_record_batches(data[:cut] if cut else b"\x00"))
    magic1 = data[:16] + b"\x01" + data[17:]
    with pytest.raises(ProtocolError, match="magic"):
        read_record_batch(magic1)
    assert list(read_record_batches(b"")) == []
