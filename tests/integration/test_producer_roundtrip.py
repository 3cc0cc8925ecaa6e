"""The producer against the real local broker, checked by reading back with librdkafka."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest
from readback import consume_all

from aiokprod import (
    DeliveryFuture,
    MetadataTimeoutError,
    Producer,
    ProducerClosedError,
    RecordMetadata,
    RecordTooLargeError,
)
from aiokprod.testing import LocalKafka

RECORDS = 100_000
PARTITIONS = 6


def record_for(
    i: int, base_ts: int
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]:
    """Key, value, headers and timestamp of record ``i`` (every shape appears)."""
    key = None if i % 10 == 0 else f"key-{i % 1000}".encode()
    value = None if i % 997 == 0 else f"value-{i}-".encode() + bytes(i % 200)
    headers = [("idx", str(i).encode()), ("empty", b""), ("null", None)] if i % 3 == 0 else []
    timestamp = base_ts + i if i % 2 == 0 else None
    return key, value, headers, timestamp


async def test_100k_records_arrive_exactly(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=PARTITIONS)
    base_ts = int(time.time() * 1000) - 3_600_000
    futures: list[DeliveryFuture] = []
    sent_at: list[int] = []
    async with Producer(kafka.bootstrap_servers) as producer:
        for i in range(RECORDS):
            key, value, headers, ts = record_for(i, base_ts)
            sent_at.append(int(time.time() * 1000))
            futures.append(
                await producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
            )
        await producer.flush()
        metadata: list[RecordMetadata] = [await f for f in futures]

    consumed = consume_all(kafka.bootstrap_servers, topic, RECORDS)
    assert len(consumed) == RECORDS
    by_position = {(r.partition, r.offset): r for r in consumed}
    order: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, md in enumerate(metadata):
        key, value, headers, ts = record_for(i, base_ts)
        got = by_position[(md.partition, md.offset)]
        assert (got.key, got.value) == (key, value), i
        assert list(got.headers) == headers, i
        assert got.timestamp_ms == md.timestamp_ms
        if ts is not None:
            assert got.timestamp_ms == ts
        else:
            assert sent_at[i] - 5 <= got.timestamp_ms <= sent_at[i] + 1000
        assert md.serialized_key_size == (len(key) if key is not None else -1)
        assert md.serialized_value_size == (len(value) if value is not None else -1)
        order[md.partition].append((md.offset, i))
    assert sorted(order) == list(range(PARTITIONS)), "every partition got records"
    for partition, pairs in order.items():
        offsets_in_send_order = [offset for offset, _ in pairs]
        assert offsets_in_send_order == sorted(offsets_in_send_order), partition


async def test_same_key_same_partition_and_keys_spread(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=PARTITIONS)
    async with Producer(kafka.bootstrap_servers) as producer:
        futures = [await producer.send(topic, b"v", key=f"k{i % 50}".encode()) for i in range(500)]
        results = [await f for f in futures]
    by_key: dict[int, set[int]] = defaultdict(set)
    for i, md in enumerate(results):
        by_key[i % 50].add(md.partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    assert len({next(iter(p)) for p in by_key.values()}) > 1


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_each_acks_setting_delivers(kafka: LocalKafka, new_topic, acks) -> None:
    topic = new_topic(partitions=3)
    count = 2000
    async with Producer(kafka.bootstrap_servers, acks=acks) as producer:
        futures = [await producer.send(topic, f"m{i}".encode()) for i in range(count)]
        await producer.flush()
        results = [await f for f in futures]
    if acks == 0:
        assert all(not md.has_offset and md.offset == -1 for md in results)
    else:
        assert all(md.has_offset for md in results)
        assert len({(md.partition, md.offset) for md in results}) == count
    consumed = consume_all(kafka.bootstrap_servers, topic, count)
    assert sorted(r.value for r in consumed) == sorted(f"m{i}".encode() for i in range(count))


async def test_acks_zero_close_right_after_flush_loses_nothing(
    kafka: LocalKafka, new_topic
) -> None:
    # flush() returns once the records are written; close() right after used to abort the
    # connections while asyncio and the broker still held most of 2 MB (2,220 of 20,000
    # arrived): it now waits until the broker has read them (ConnectionPool.wait_written).
    topic = new_topic(partitions=3)
    count = 20_000
    # Every partition's leader takes appends first: a broker answers an acks=0 Produce that
    # fails (NOT_LEADER_OR_FOLLOWER on a topic just made) by closing the connection, which
    # loses that request and what followed it - acks=0's own risk, not what is tested here.
    async with Producer(kafka.bootstrap_servers) as warm:
        for partition in range(3):
            await warm.send_and_wait(topic, b"warm-up", partition=partition)
    async with Producer(kafka.bootstrap_servers, acks=0) as producer:
        for i in range(count):
            await producer.send(topic, b"%06d" % i + b"v" * 94)
        await producer.flush()
    consumed = consume_all(kafka.bootstrap_servers, topic, count + 3, timeout_s=30)
    values = [r.value for r in consumed if r.value != b"warm-up"]
    assert len(values) == count
    assert {v[:6] for v in values} == {b"%06d" % i for i in range(count)}


async def test_unknown_topic_fails_within_max_block_ms(kafka: LocalKafka) -> None:
    max_block_ms = 1500
    async with Producer(
        kafka.bootstrap_servers, allow_auto_create_topics=False, max_block_ms=max_block_ms
    ) as producer:
        started = time.monotonic()
        with pytest.raises(MetadataTimeoutError, match="no-such-topic"):
            await producer.send("no-such-topic-aiokprod", b"x")
        elapsed = time.monotonic() - started
    assert max_block_ms / 1000 * 0.9 <= elapsed < max_block_ms / 1000 + 5


async def test_record_larger_than_max_request_size_fails_at_once(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, max_request_size=10_000) as producer:
        await producer.send_and_wait(topic, b"small")  # metadata known: no wait involved
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await asyncio.wait_for(producer.send(topic, bytes(20_000)), timeout=5)
        assert producer.metrics()["batches_queued"] == 0


async def test_close_delivers_everything_accepted(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    producer = Producer(kafka.bootstrap_servers, linger_ms=60_000, batch_size=1_000_000)
    await producer.start()
    futures = [await producer.send(topic, f"c{i}".encode()) for i in range(10_000)]
    assert not any(f.done() for f in futures), "linger keeps them queued until close"
    await producer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(consume_all(kafka.bootstrap_servers, topic, 10_000)) == 10_000
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"late")


async def test_close_with_zero_timeout_fails_everything_pending(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    producer = Producer(kafka.bootstrap_servers, linger_ms=60_000, batch_size=1_000_000)
    await producer.start()
    await producer.send_and_wait(topic, b"warm-up")
    futures = [await producer.send(topic, f"z{i}".encode()) for i in range(10_000)]
    await producer.close(timeout=0)
    assert all(f.done() for f in futures), "nothing is left pending"
    errors = {type(f.exception()) for f in futures}
    assert errors == {ProducerClosedError}
    with pytest.raises(ProducerClosedError, match="closed before"):
        futures[0].result()


async def test_send_and_wait_does_not_sit_out_linger(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, linger_ms=30_000) as producer:
        await producer.send_and_wait(topic, b"first")
        # With a 30 s linger a plain send would wait; send_and_wait must not.
        md = await asyncio.wait_for(producer.send_and_wait(topic, b"second"), timeout=10)
    assert md.offset == 1
