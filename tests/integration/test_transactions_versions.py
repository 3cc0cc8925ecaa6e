"""Transactions on a pre-KIP-890 broker (Kafka 3.9): protocol 1 as the broker offers it.

Against 3.9 the producer finds no finalized ``transaction.version`` >= 2 and uses
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit <= v4, Produce <= v11 and EndTxn <= v4
on its own (no private switch). Read back with librdkafka in read_committed mode.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from txn_readback import read_committed

from aiokprod import OffsetAndMetadata, Producer
from aiokprod import TopicPartition as Tp
from aiokprod.admin import Admin
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


@pytest.mark.kafka_version(OLD_BROKER, smoke=True)
async def test_prepared_transaction_and_admin_on_kafka_39(kafka_39: LocalKafka) -> None:
    # Protocol 1 as the broker offers it (EndTxn <= v4) and the classic group coordinator,
    # which answers RequireStable with UNSTABLE_OFFSET_COMMIT while the marker is pending.
    topic = f"prep39-{uuid.uuid4().hex[:8]}"
    kafka_39.create_topic(topic, 2, 1)
    marker, group = Tp(topic, 1), f"g-{uuid.uuid4().hex[:8]}"
    async with Producer(
        kafka_39.bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}"
    ) as producer:
        await producer.begin_transaction()
        for i in range(10):
            await producer.send(topic, f"p-{i}".encode(), partition=0)
        await producer.send_offsets_to_transaction({marker: OffsetAndMetadata(3, "q")}, group)
        prepared = await producer.prepare_transaction()
    assert prepared.protocol == 1
    async with Admin(kafka_39.bootstrap_servers, max_block_ms=20_000) as admin:
        (listing,) = await admin.list_transactions(producer_ids=[prepared.producer_id])
        assert listing.state == "Ongoing"
        described = await admin.describe_transactions([prepared.transactional_id])
        assert Tp(topic, 0) in described[prepared.transactional_id].topic_partitions
        waiting = asyncio.ensure_future(
            admin.list_consumer_group_offsets(group, [marker], require_stable=True)
        )
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await admin.complete_transaction(prepared, commit=True)
        assert await waiting == {marker: OffsetAndMetadata(3, "q")}
    values = read_committed(kafka_39.bootstrap_servers, topic, partitions=2)
    assert sorted(values) == sorted(f"p-{i}".encode() for i in range(10))
