"""Every codec against the real broker, read back by librdkafka and by Kafka's own Java consumer.

The broker stores a producer's v2 batches as they arrived (``compression.type=producer``), so
the log segments also show what we put on the wire: the codec id in each batch's attributes
and the framing (xerial snappy header, Java's LZ4 frame header).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

import pytest
from readback import consume_all

from aiokprod import Producer, RecordMetadata
from aiokprod.protocol.compression import (
    DECOMPRESSORS,
    LZ4_JAVA_HEADER,
    XERIAL_HEADER,
    codec_for_name,
)
from aiokprod.protocol.record_reader import read_record_batches
from aiokprod.protocol.records import BATCH_HEADER_SIZE
from aiokprod.testing import LocalKafka

RECORDS = 50_000
PARTITIONS = 3
Codec = Literal["gzip", "snappy", "lz4", "zstd"]
CODECS: tuple[Codec, ...] = ("gzip", "snappy", "lz4", "zstd")
_WORDS = ["order", "user", "sku", "status", "shipped", "amount", "currency", "EUR", "note"]


def value_for(codec: str, i: int) -> bytes:
    """Distinct, compressible, newline-free values of 30..~700 bytes."""
    rng = random.Random(i)
    fields = ",".join(f'"{rng.choice(_WORDS)}":{rng.randrange(10**6)}' for _ in range(1 + i % 40))
    return f"{codec}|{i:06d}|{{{fields}}}".encode()


def key_for(i: int) -> bytes | None:
    return None if i % 4 == 0 else f"key-{i % 977}".encode()


def headers_for(i: int) -> list[tuple[str, bytes | None]]:
    return [("n", str(i).encode()), ("none", None)] if i % 50 == 0 else []


def segment_batches(kafka: LocalKafka, topic: str) -> list[tuple[int, bytes]]:
    """(partition, raw batch bytes) of every batch in the topic's log segments."""
    out = []
    data_dirs = list(Path(kafka.data_dir).glob("node*/data"))
    for partition in range(PARTITIONS):
        for data_dir in data_dirs:
            for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
                raw = segment.read_bytes()
                pos = 0
                while pos < len(raw):
                    length = int.from_bytes(raw[pos + 8 : pos + 12], "big")
                    out.append((partition, raw[pos : pos + 12 + length]))
                    pos += 12 + length
    return out


@pytest.mark.parametrize("codec", CODECS)
async def test_codec_50k_records_read_back_exactly(
    codec: Codec, kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    futures = []
    async with Producer(kafka.bootstrap_servers, compression_type=codec, linger_ms=20) as p:
        for i in range(RECORDS):
            futures.append(
                await p.send(topic, value_for(codec, i), key=key_for(i), headers=headers_for(i))
            )
        await p.flush()
        metadata: list[RecordMetadata] = [await f for f in futures]
        sent_bytes = p.metrics()["bytes_sent"]
    record_bytes = sum(len(value_for(codec, i)) for i in range(RECORDS))
    assert sent_bytes < record_bytes * 0.8, "compression should shrink what goes on the wire"

    # 1. librdkafka reads every record back, byte for byte, where the broker said it is.
    consumed = consume_all(kafka.bootstrap_servers, topic, RECORDS, timeout_s=120)
    assert len(consumed) == RECORDS
    by_position = {(r.partition, r.offset): r for r in consumed}
    for i, md in enumerate(metadata):
        got = by_position[(md.partition, md.offset)]
        assert got.value == value_for(codec, i), i
        assert got.key == key_for(i), i
        assert list(got.headers) == headers_for(i), i

    # 2. The broker kept our batches as they were: every one carries the codec and framing.
    batches = segment_batches(kafka, topic)
    assert batches
    codec_id = codec_for_name(codec).id
    stored = 0
    for _, raw in batches:
        (batch,) = read_record_batches(raw, DECOMPRESSORS)
        assert batch.compression == codec_id
        stored += len(batch.records)
        body = raw[BATCH_HEADER_SIZE:]
        if codec == "lz4":
            assert body[:7] == LZ4_JAVA_HEADER
        elif codec == "snappy":
            assert body[:16] == XERIAL_HEADER
    assert stored == RECORDS

    # 3. Apache Kafka's own console consumer (Java, from the same jars) reads them too.
    done = kafka.run_java_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", kafka.bootstrap_servers,
        "--topic", topic,
        "--from-beginning",
        "--max-messages", str(RECORDS),
        "--timeout-ms", "60000",
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == RECORDS
    assert sorted(lines) == sorted(value_for(codec, i).decode() for i in range(RECORDS))


@pytest.mark.parametrize("codec", CODECS)
def test_java_producer_batches_decode_with_our_codecs(
    codec: str, kafka: LocalKafka, new_topic
) -> None:
    """The other direction: what Kafka's Java producer writes, our readers decode."""
    topic = new_topic()
    lines = [f"java-{codec}-{i:05d}-" + "payload " * (i % 30) for i in range(3000)]
    done = kafka.run_java_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server", kafka.bootstrap_servers,
        "--topic", topic,
        "--compression-codec", codec,
        "--producer-property", "linger.ms=200",
        "--producer-property", "batch.size=262144",
        input="\n".join(lines) + "\n",
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    values = []
    for partition, raw in segment_batches(kafka, topic):
        assert partition == 0
        (batch,) = read_record_batches(raw, DECOMPRESSORS)
        assert batch.compression == codec_for_name(codec).id
        values += [r.value for r in batch.records]
    assert values == [line.encode() for line in lines]
