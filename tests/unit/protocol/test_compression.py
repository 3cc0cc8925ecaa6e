"""Compression codecs: round trips, Java framing, and independent readers both ways."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError, ProtocolError
from aiokprod.protocol import compression as c
from aiokprod.protocol.record_reader import batch_attributes, read_record_batch, read_record_batches
from aiokprod.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder

from ._payloads import text_payload
from ._thirdparty import aiokafka_crecords, aiokafka_records, kafka_records

DATA = Path(__file__).parent / "data"
CODEC_NAMES = ("gzip", "snappy", "lz4", "zstd")
DECODERS = {
    "kafka-python": kafka_records.DefaultRecordBatch,
    "aiokafka-C": aiokafka_crecords.DefaultRecordBatch,
    "aiokafka-py": aiokafka_records._DefaultRecordBatchPy,
}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def levels_of(name: str) -> list[int | None]:
    codec = c.codec_for_name(name)
    if codec.level_range is None:
        return [None]
    lo, hi = codec.level_range
    return [None, lo, hi, codec.default_level]


def build_batch(codec: str, values: list[bytes], level: int | None = None) -> bytes:
    spec = c.codec_for_name(codec)
    builder = RecordBatchBuilder(compression=spec.id, compressor=spec.compressor(level))
    for i, value in enumerate(values):
        assert builder.try_append(1_700_000_000_000 + i, b"k%d" % i, value) == i
    closed = builder.close()
    closed.stamp(77, 1, 0)
    return bytes(closed.data)


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("size", [0, 1, 100, 65_535, 65_536, 65_537, 300_000])
def test_round_trip_sizes_and_levels(name: str, size: int) -> None:
    data = text_payload(size)
    codec = c.codec_for_name(name)
    for level in levels_of(name):
        compressed = codec.compressor(level)(memoryview(bytearray(data)))
        assert codec.decompress(compressed) == data, level
        assert c.DECOMPRESSORS[codec.id](memoryview(compressed)) == data


@pytest.mark.parametrize("name", CODEC_NAMES)
@SETTINGS
@given(data=st.binary(max_size=5000))
def test_round_trip_arbitrary_bytes(name: str, data: bytes) -> None:
    codec = c.codec_for_name(name)
    assert codec.decompress(codec.compressor()(data)) == data


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_compresses_for_real(name: str) -> None:
    data = text_payload(200_000)
    assert len(c.codec_for_name(name).compressor()(data)) < len(data) * 0.8


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_batch_round_trip_sets_codec_attribute(name: str) -> None:
    values = [text_payload(300, seed=i) for i in range(500)]
    data = build_batch(name, values)
    codec = c.codec_for_name(name)
    assert batch_attributes(data) & 0x07 == codec.id
    assert len(data) < (BATCH_HEADER_SIZE + sum(len(v) for v in values)) * 0.8
    decoded = read_record_batch(data, c.DECOMPRESSORS)
    assert [r.value for r in decoded.records] == values
    assert decoded.producer_id == 77
    with pytest.raises(ProtocolError, match=f"codec {codec.id}"):
        read_record_batch(data)  # no decoder given


# --- framing details ------------------------------------------------------------------------


def test_snappy_writes_xerial_framing() -> None:
    data = text_payload(100_000)
    framed = c.snappy_compress(data)
    assert framed[:16] == bytes.fromhex("82534e41505059000000000100000001")
    pos, blocks = 16, []
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(snappy.uncompress(framed[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_snappy_reader_accepts_raw_and_concatenated_streams() -> None:
    data = text_payload(50_000)
    assert c.snappy_decompress(snappy.compress(data)) == data  # raw block, no magic
    twice = c.snappy_compress(data[:20_000]) + c.snappy_compress(data[20_000:])
    assert c.snappy_decompress(twice) == data
    with pytest.raises(ProtocolError, match="impossible"):
        c.snappy_decompress(c.snappy_compress(data)[:-10])


def test_gzip_reader_accepts_concatenated_members() -> None:
    assert c.gzip_decompress(gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


def test_zstd_reader_accepts_streaming_frames_without_content_size() -> None:
    data = text_payload(100_000)
    stream = zstandard.ZstdCompressor(level=3).compressobj()
    frame = stream.compress(data) + stream.flush()
    assert c.zstd_decompress(frame) == data


# --- independent readers read our batches ---------------------------------------------------


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("decoder", DECODERS.values(), ids=DECODERS.keys())
def test_independent_readers_decode_our_compressed_batches(name: str, decoder: Any) -> None:
    values = [text_payload(200 + i % 300, seed=i) for i in range(400)]
    for level in levels_of(name):
        data = build_batch(name, values, level)
        batch = decoder(bytearray(data))
        assert batch.compression_type == c.codec_for_name(name).id
        assert batch.validate_crc()
        assert [r.value for r in batch] == values


# --- Java-written batches (from Kafka 4.3.1's own producer) read by ours --------------------


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_java_written_batches_decode(name: str) -> None:
    data = (DATA / f"java-{name}.bin").read_bytes()
    batches = list(read_record_batches(data, c.DECOMPRESSORS))
    assert [b.compression for b in batches] == [c.codec_for_name(name).id]
    expected = [f"java-{name}-record-{i:04d}-".encode() + b"abc" * (i % 7) for i in range(20)]
    assert [r.value for r in batches[0].records] == expected
    payload = memoryview(data)[BATCH_HEADER_SIZE:]
    if name == "lz4":
        assert bytes(payload[:7]) == c.LZ4_JAVA_HEADER
    if name == "snappy":
        assert bytes(payload[:16]) == c.XERIAL_HEADER


# --- registry and levels --------------------------------------------------------------------


def test_registry() -> None:
    assert [c.codec_for_name(n).id for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert c.codec_for_name("ZSTD") is c.codec_for_id(4)
    assert set(c.DECOMPRESSORS) == {1, 2, 3, 4}
    with pytest.raises(ConfigError):
        c.codec_for_name("brotli")
    with pytest.raises(ProtocolError):
        c.codec_for_id(5)


@pytest.mark.parametrize(
    ("name", "bad"),
    [("gzip", 0), ("gzip", 10), ("lz4", 0), ("lz4", 18), ("zstd", 23), ("zstd", -131073)],
)
def test_levels_out_of_range(name: str, bad: int) -> None:
    with pytest.raises(ConfigError, match="compression_level"):
        c.codec_for_name(name).compressor(bad)
    with pytest.raises(ConfigError, match="compression_level"):
        ProducerConfig.from_options("h:1", compression_type=name, compression_level=bad)


def test_level_defaults_and_codecs_without_levels() -> None:
    assert c.codec_for_name("gzip").check_level(None) == -1
    assert c.codec_for_name("gzip").check_level(-1) == -1
    assert c.codec_for_name("lz4").check_level(None) == 9
    assert c.codec_for_name("zstd").check_level(None) == 3
    with pytest.raises(ConfigError, match="no levels"):
        c.codec_for_name("snappy").compressor(1)
    with pytest.raises(ConfigError, match="no levels"):
        ProducerConfig.from_options("h:1", compression_type="snappy", compression_level=1)
    with pytest.raises(ConfigError, match="no levels"):
        ProducerConfig.from_options("h:1", compression_level=1)
    cfg = ProducerConfig.from_options("h:1", compression_type="zstd", compression_level=19)
    assert (cfg.compression_type, cfg.compression_level) == ("zstd", 19)


def test_gzip_default_level_is_six() -> None:
    data = text_payload(100_000)
    assert c.codec_for_name("gzip").compressor(-1)(data) == c.codec_for_name("gzip").compressor(6)(
        data
    )


def test_is_large_batch() -> None:
    assert not c.is_large_batch(c.LARGE_BATCH_BYTES - 1)
    assert c.is_large_batch(c.LARGE_BATCH_BYTES)
    assert c.is_large_batch(10, threshold=10)
