"""Transactions on a real broker, read back with librdkafka in read_committed mode."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from txn_readback import read_committed, stable_offset

from aiokprod import (
    AbortableTransactionError,
    ConsumerGroupMetadata,
    IllegalStateError,
    Producer,
)
from aiokprod import TopicPartition as Tp
from aiokprod.errors import ConfigError, InvalidTxnStateError, ProducerFencedError
from aiokprod.errors import KafkaError as AiokprodError
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import NewTopic

pytestmark = pytest.mark.asyncio


def txn_id() -> str:
    return f"tx-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("force_v1", [False, True], ids=["protocol2", "protocol1"])
async def test_committed_visible_aborted_not(
    kafka: LocalKafka, new_topic: NewTopic, force_v1: bool
) -> None:
    topic = new_topic(partitions=3)
    producer = Producer(kafka.bootstrap_servers, transactional_id=txn_id(), linger_ms=20)
    producer._rt.force_transaction_v1 = force_v1
    async with producer:
        assert producer._txn is not None
        assert producer._txn.tv2 is (not force_v1)
        async with producer.transaction():
            for i in range(30):
                await producer.send(topic, f"c1-{i}".encode(), key=str(i).encode())
        await producer.begin_transaction()
        futures = [
            await producer.send(topic, f"a-{i}".encode(), key=str(i).encode()) for i in range(30)
        ]
        await producer.flush()
        await producer.abort_transaction()
        assert all(f.done() for f in futures)

        async def fail_midway() -> None:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, f"a2-{i}".encode())
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await fail_midway()
        async with producer.transaction():
            for i in range(30):
                await producer.send(topic, f"c2-{i}".encode(), key=str(i).encode())
    values = read_committed(kafka.bootstrap_servers, topic, partitions=3)
    expected = {f"c1-{i}".encode() for i in range(30)} | {f"c2-{i}".encode() for i in range(30)}
    assert sorted(values) == sorted(expected)


async def test_wrong_state_calls_raise(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, transactional_id=txn_id()) as producer:
        with pytest.raises(IllegalStateError, match="send"):
            await producer.send(topic, b"outside")
        with pytest.raises(IllegalStateError):
            await producer.commit_transaction()
        with pytest.raises(IllegalStateError):
            await producer.abort_transaction()
        await producer.begin_transaction()
        with pytest.raises(IllegalStateError):
            await producer.begin_transaction()
        await producer.send(topic, b"inside")
        await producer.commit_transaction()
        with pytest.raises(IllegalStateError):
            await producer.commit_transaction()
    async with Producer(kafka.bootstrap_servers) as plain:
        with pytest.raises(IllegalStateError, match="transactional_id"):
            await plain.begin_transaction()
    with pytest.raises(ConfigError):
        Producer(kafka.bootstrap_servers, transactional_id="x", enable_idempotence=False)
    assert read_committed(kafka.bootstrap_servers, topic) == [b"inside"]


async def test_second_producer_fences_first(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic()
    tid = txn_id()
    first = Producer(kafka.bootstrap_servers, transactional_id=tid)
    await first.start()
    try:
        await first.begin_transaction()
        await (await first.send(topic, b"old-1"))
        async with Producer(kafka.bootstrap_servers, transactional_id=tid) as second:
            # InitProducerId of the second aborts the first's open transaction and fences it.
            async with second.transaction():
                await second.send(topic, b"new-1")
            # Produce under the old epoch answers INVALID_PRODUCER_EPOCH: abortable, as in
            # the Java client (KIP-588); the abort's EndTxn then learns of the fencing.
            await first.send(topic, b"old-2")
            with pytest.raises((AbortableTransactionError, ProducerFencedError)):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()
            # Fatal from now on: every call raises the same error.
            with pytest.raises(ProducerFencedError):
                await first.begin_transaction()
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"old-3")
    finally:
        await first.close()
    assert read_committed(kafka.bootstrap_servers, topic) == [b"new-1"]


async def test_open_transaction_aborted_by_broker_timeout(
    kafka: LocalKafka, new_topic: NewTopic
) -> None:
    topic = new_topic()
    producer = Producer(
        kafka.bootstrap_servers, transactional_id=txn_id(), transaction_timeout_ms=2000
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        await (await producer.send(topic, b"left-open"))
        assert stable_offset(kafka.bootstrap_servers, topic) == 0  # open: nothing is stable
        # The coordinator aborts it after the timeout (it checks every 10 s by default):
        # then the abort marker follows the record and the stable offset moves past both.
        deadline = time.monotonic() + 90
        while stable_offset(kafka.bootstrap_servers, topic) == 0:
            assert time.monotonic() < deadline, "the broker did not abort the transaction"
            await asyncio.sleep(1)
        with pytest.raises(AiokprodError) as caught:
            await producer.commit_transaction()
        # Kafka 4.3.1 answers INVALID_TXN_STATE: the coordinator ended the transaction.
        assert isinstance(
            caught.value, InvalidTxnStateError | ProducerFencedError | AbortableTransactionError
        ), repr(caught.value)
    finally:
        await producer.close()
    assert read_committed(kafka.bootstrap_servers, topic) == []


async def test_close_aborts_an_open_transaction(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, transactional_id=txn_id()) as producer:
        await producer.begin_transaction()
        await (await producer.send(topic, b"never-visible"))
        assert stable_offset(kafka.bootstrap_servers, topic) == 0  # open
    # close() ended it with an abort marker at once (the timeout is 60 s): the stable
    # offset is past the record and the marker, and no committed record is there.
    assert stable_offset(kafka.bootstrap_servers, topic) == 2
    assert read_committed(kafka.bootstrap_servers, topic) == []


async def test_a_commit_cancelled_while_records_wait_leaves_it_open(
    kafka: LocalKafka, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers, transactional_id=txn_id(), linger_ms=60_000
    ) as producer:
        await producer.begin_transaction()
        for i in range(20):
            await producer.send(topic, f"r-{i}".encode())
        commit = asyncio.create_task(producer.commit_transaction())
        await asyncio.sleep(0)  # the commit runs until it waits for the records' acks
        commit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await commit
        # Nothing was decided: the transaction is open as before, records may still join,
        # and a second commit commits every record once.
        await producer.send(topic, b"after-the-cancel")
        await producer.commit_transaction()
    expected = [f"r-{i}".encode() for i in range(20)] + [b"after-the-cancel"]
    assert read_committed(kafka.bootstrap_servers, topic) == expected


@pytest.mark.parametrize("force_v1", [False, True], ids=["protocol2", "protocol1"])
async def test_offsets_commit_with_the_transaction_only(
    kafka: LocalKafka, new_topic: NewTopic, force_v1: bool
) -> None:
    source, sink = new_topic(partitions=2), new_topic()
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer(kafka.bootstrap_servers, transactional_id=txn_id())
    producer._rt.force_transaction_v1 = force_v1
    async with producer:
        await producer.begin_transaction()
        await producer.send(sink, b"aborted")
        await producer.send_offsets_to_transaction({Tp(source, 0): 100}, group)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(sink, b"committed")
            await producer.send_offsets_to_transaction(
                {Tp(source, 0): 7, Tp(source, 1): 3}, ConsumerGroupMetadata(group)
            )
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group})
    try:
        committed = consumer.committed(
            [TopicPartition(source, 0), TopicPartition(source, 1)], timeout=30
        )
    finally:
        consumer.close()
    assert [(c.partition, c.offset) for c in committed] == [(0, 7), (1, 3)]
    assert read_committed(kafka.bootstrap_servers, sink) == [b"committed"]
