"""Transactions on a pre-KIP-890 broker (Kafka 3.9): protocol 1 as the broker offers it.

Against 3.9 the producer finds no finalized ``transaction.version`` >= 2 and uses
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit <= v4, Produce <= v11 and EndTxn <= v4
on its own (no private switch). Read back with librdkafka in read_committed mode.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from txn_readback import read_committed

from aiokprod import Producer
from aiokprod import TopicPartition as Tp
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import start_or_give_up

pytestmark = pytest.mark.asyncio

OLD_BROKER = "3.9.2"


@pytest.fixture(scope="module")
def kafka_39() -> Iterator[LocalKafka]:
    instance = start_or_give_up(1, version=OLD_BROKER)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.mark.kafka_version(OLD_BROKER, smoke=True)
async def test_protocol1_on_kafka_39(kafka_39: LocalKafka) -> None:
    assert kafka_39.kafka_version == OLD_BROKER
    topic = f"txn39-{uuid.uuid4().hex[:8]}"
    kafka_39.create_topic(topic, 3, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with Producer(
        kafka_39.bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
    ) as producer:
        assert producer._txn is not None
        assert producer._txn.tv2 is False  # chosen from the broker's features, not forced
        async with producer.transaction():
            for i in range(30):
                await producer.send(topic, f"c-{i}".encode(), key=str(i).encode())
            await producer.send_offsets_to_transaction({Tp(topic, 0): 5}, group)
        await producer.begin_transaction()
        for i in range(30):
            await producer.send(topic, f"a-{i}".encode(), key=str(i).encode())
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"last")
    values = read_committed(kafka_39.bootstrap_servers, topic, partitions=3)
    assert sorted(values) == sorted([f"c-{i}".encode() for i in range(30)] + [b"last"])
    consumer = Consumer({"bootstrap.servers": kafka_39.bootstrap_servers, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        consumer.close()
    assert committed[0].offset == 5
