"""send_many(): the bulk path delivers exactly what per-record send() would, in order."""

from __future__ import annotations

from collections import defaultdict

import pytest
from readback import consume_all

from aiokprod import Producer, RecordTooLargeError
from aiokprod.testing import LocalKafka


async def test_unkeyed_bulk_round_trip_in_order(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    chunks = []
    for c in range(10):
        chunk: list[object] = [f"c{c}-{i}".encode() for i in range(5000)]
        chunk[7] = None  # tombstone
        chunk[8] = f"text-{c}"  # str goes through the default serializer
        chunks.append(chunk)
    async with Producer(kafka.bootstrap_servers, linger_ms=20) as producer:
        bulks = [await producer.send_many(topic, chunk) for chunk in chunks]
        with_headers = await producer.send_many(
            topic, [b"h1", b"h2"], headers=[("source", b"bulk")], partition=1
        )
        results = [await bulk for bulk in bulks]
        header_results = await with_headers
    assert all(len(r) == 5000 for r in results)
    consumed = consume_all(kafka.bootstrap_servers, topic, 50_002)
    by_position = {(r.partition, r.offset): r for r in consumed}
    per_partition: dict[int, list[int]] = defaultdict(list)
    for chunk, metadata in zip(chunks, results, strict=True):
        for value, md in zip(chunk, metadata, strict=True):
            expected = value.encode() if isinstance(value, str) else value
            assert by_position[(md.partition, md.offset)].value == expected
            assert md.serialized_value_size == (-1 if expected is None else len(expected))
            per_partition[md.partition].append(md.offset)
    assert len(per_partition) > 1, "the sticky partitioner moved on between batches"
    for offsets in per_partition.values():
        assert offsets == sorted(offsets), "input order is kept within each partition"
    for md, value in zip(header_results, [b"h1", b"h2"], strict=True):
        got = by_position[(md.partition, md.offset)]
        assert (md.partition, got.value, got.headers) == (1, value, (("source", b"bulk"),))


async def test_keyed_bulk_uses_the_same_partitions_as_send(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=6)
    keys = [f"user-{i % 300}".encode() for i in range(20_000)]
    values = [f"v{i}".encode() for i in range(20_000)]
    async with Producer(kafka.bootstrap_servers) as producer:
        bulk = await producer.send_many(topic, values, keys=keys)
        single = {
            k: (await producer.send_and_wait(topic, b"probe", key=k)).partition for k in keys[:300]
        }
        metadata = await bulk
    assert all(md.partition == single[k] for k, md in zip(keys, metadata, strict=True))
    consumed = consume_all(kafka.bootstrap_servers, topic, 20_300)
    seen = {(r.partition, r.offset): (r.key, r.value) for r in consumed}
    assert all(
        seen[(md.partition, md.offset)] == (k, v)
        for k, v, md in zip(keys, values, metadata, strict=True)
    )


async def test_bad_input_raises_and_keeps_what_was_queued(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, max_request_size=10_000) as producer:
        with pytest.raises(ValueError, match="nothing queued"):
            await producer.send_many(topic, [b"a", b"b"], keys=[b"k"])
        with pytest.raises(RecordTooLargeError):  # keyed: checked before anything is queued
            await producer.send_many(topic, [b"x", bytes(20_000)], keys=[b"k1", b"k2"])
        with pytest.raises(RecordTooLargeError):
            await producer.send_many(topic, [b"fine", bytes(20_000)])
        await producer.flush()
    # Unkeyed records before a failure were queued and delivered ("fine"); keyed calls are
    # validated as a whole first, so nothing of them was queued.
    values = sorted(r.value for r in consume_all(kafka.bootstrap_servers, topic, 1))
    assert values == [b"fine"]
