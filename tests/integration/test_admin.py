"""Prepared transactions and the admin client on a real broker, read back with librdkafka.

A producer prepares a transaction (records and a transactional offset with metadata) and
closes; an :class:`Admin` then commits or aborts it by producer id and epoch, as another
process would. Both transaction protocols: 2 as Kafka 4.4 offers it, 1 forced by the
producer's private switch (``test_transactions_versions.py`` has 1 on Kafka 3.9).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from txn_readback import committed_offsets, read_committed, stable_offset

from aiokprod import (
    IllegalStateError,
    KafkaTimeoutError,
    OffsetAndMetadata,
    PreparedTransaction,
    Producer,
)
from aiokprod import TopicPartition as Tp
from aiokprod.admin import Admin
from aiokprod.errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import NewTopic

pytestmark = pytest.mark.asyncio

PROTOCOLS = pytest.mark.parametrize("force_v1", [False, True], ids=["protocol2", "protocol1"])
RECORDS = 30


def txn_id() -> str:
    return f"prep-{uuid.uuid4().hex[:12]}"


async def prepare(
    kafka: LocalKafka, topic: str, marker: Tp, group: str, *, force_v1: bool
) -> PreparedTransaction:
    """A producer writes RECORDS records and a marker offset, prepares, and closes."""
    producer = Producer(kafka.bootstrap_servers, transactional_id=txn_id(), linger_ms=50)
    producer._rt.force_transaction_v1 = force_v1
    async with producer:
        await producer.begin_transaction()
        for i in range(RECORDS):
            await producer.send(topic, f"r-{i}".encode(), key=str(i).encode())
        await producer.send_offsets_to_transaction({marker: OffsetAndMetadata(7, "query-1")}, group)
        prepared = await producer.prepare_transaction()
        assert prepared.protocol == (1 if force_v1 else 2)
        # Nothing may join a prepared transaction.
        with pytest.raises(IllegalStateError, match="prepared"):
            await producer.send(topic, b"late")
        with pytest.raises(IllegalStateError, match="prepared"):
            await producer.send_offsets_to_transaction({marker: 8}, group)
        with pytest.raises(IllegalStateError, match="prepared"):
            await producer.begin_transaction()
    # close() left it open: read_committed readers stop at its first record.
    assert stable_offset(kafka.bootstrap_servers, topic) == 0
    return prepared


@PROTOCOLS
async def test_prepared_then_committed_by_another_client(
    kafka: LocalKafka, new_topic: NewTopic, force_v1: bool
) -> None:
    topic = new_topic(partitions=3)
    marker, group = Tp(topic, 0), f"g-{uuid.uuid4().hex[:8]}"  # a marker on the data's topic
    prepared = await prepare(kafka, topic, marker, group, force_v1=force_v1)
    async with Admin(kafka.bootstrap_servers) as admin:
        listed = await admin.list_transactions(states=["Ongoing"])
        assert (prepared.transactional_id, prepared.producer_id, "Ongoing") in [
            (t.transactional_id, t.producer_id, t.state) for t in listed
        ]
        described = await admin.describe_transactions([prepared.transactional_id, txn_id()])
        assert list(described) == [prepared.transactional_id]  # the unknown id is absent
        d = described[prepared.transactional_id]
        assert (d.state, d.producer_id, d.producer_epoch) == (
            "Ongoing",
            prepared.producer_id,
            prepared.producer_epoch,
        )
        assert {Tp(topic, p) for p in range(3)} <= d.topic_partitions
        assert d.start_time_ms > 0

        # RequireStable: the marker is pending, so a short deadline times out (5 s: long
        # enough for a first answer on a busy machine, whose UNSTABLE_OFFSET_COMMIT is the
        # cause)...
        async with Admin(kafka.bootstrap_servers, max_block_ms=5000) as impatient:
            with pytest.raises(KafkaTimeoutError) as caught:
                await impatient.list_consumer_group_offsets(group, [marker], require_stable=True)
            assert isinstance(caught.value.__cause__, UnstableOffsetCommitError)
        # ...and a patient reader gets the marker once the transaction is committed.
        waiting = asyncio.ensure_future(
            admin.list_consumer_group_offsets(group, [marker], require_stable=True)
        )
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await admin.complete_transaction(prepared, commit=True)
        assert await waiting == {marker: OffsetAndMetadata(7, "query-1")}
        await admin.complete_transaction(prepared, commit=True)  # again: accepted
        with pytest.raises(InvalidTxnStateError):
            await admin.complete_transaction(prepared, commit=False)
    values = read_committed(kafka.bootstrap_servers, topic, partitions=3)
    assert sorted(values) == sorted(f"r-{i}".encode() for i in range(RECORDS))
    assert await committed_offsets(kafka.bootstrap_servers, group) == {marker: (7, "query-1")}


@PROTOCOLS
async def test_prepared_then_aborted_by_another_client(
    kafka: LocalKafka, new_topic: NewTopic, force_v1: bool
) -> None:
    topic = new_topic()
    marker, group = Tp(topic, 0), f"g-{uuid.uuid4().hex[:8]}"
    prepared = await prepare(kafka, topic, marker, group, force_v1=force_v1)
    async with Admin(kafka.bootstrap_servers) as admin:
        await admin.complete_transaction(prepared, commit=False)
        await admin.complete_transaction(prepared, commit=False)  # again: accepted
        with pytest.raises(InvalidTxnStateError):
            await admin.complete_transaction(prepared, commit=True)
        assert await admin.list_consumer_group_offsets(group, [marker], require_stable=True) == {}
    assert stable_offset(kafka.bootstrap_servers, topic) == RECORDS + 1  # records + abort marker
    assert read_committed(kafka.bootstrap_servers, topic) == []


@PROTOCOLS
async def test_completing_after_fence_producers_fails_typed(
    kafka: LocalKafka, new_topic: NewTopic, force_v1: bool
) -> None:
    topic = new_topic()
    marker, group = Tp(topic, 0), f"g-{uuid.uuid4().hex[:8]}"
    prepared = await prepare(kafka, topic, marker, group, force_v1=force_v1)
    async with Admin(kafka.bootstrap_servers) as admin:
        # A never-used id beside it is fine (it gets a producer id).
        await admin.fence_producers([prepared.transactional_id, txn_id()])
        d = (await admin.describe_transactions([prepared.transactional_id]))[
            prepared.transactional_id
        ]
        assert d.state in ("CompleteAbort", "Empty")
        assert (d.producer_id, d.producer_epoch) != (prepared.producer_id, prepared.producer_epoch)
        with pytest.raises((ProducerFencedError, InvalidProducerIdMappingError)):
            await admin.complete_transaction(prepared, commit=True)
        assert await admin.list_consumer_group_offsets(group, [marker], require_stable=True) == {}
    assert read_committed(kafka.bootstrap_servers, topic) == []


async def test_prepared_transaction_completed_by_its_own_producer(
    kafka: LocalKafka, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, transactional_id=txn_id()) as producer:
        await producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="empty"):
            await producer.prepare_transaction()  # nothing to prepare yet; still open
        await producer.send(topic, b"a")
        await producer.prepare_transaction()
        await producer.commit_transaction()  # the local completion still works
        async with producer.transaction():  # and the next transaction runs as usual
            await producer.send(topic, b"b")
        async with producer.transaction():
            await producer.send(topic, b"c")
            prepared = await producer.prepare_transaction()
        # The block's exit left the prepared transaction alone: "c" is not visible yet.
    async with Admin(kafka.bootstrap_servers) as admin:
        (listing,) = await admin.list_transactions(producer_ids=[prepared.producer_id])
        assert (listing.transactional_id, listing.state) == (prepared.transactional_id, "Ongoing")
        await admin.complete_transaction(prepared, commit=True)
    assert read_committed(kafka.bootstrap_servers, topic) == [b"a", b"b", b"c"]


async def test_alter_and_list_group_offsets(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with Admin(kafka.bootstrap_servers) as admin:
        assert await admin.list_consumer_group_offsets(group) == {}
        await admin.alter_consumer_group_offsets(
            group, {Tp(topic, 0): OffsetAndMetadata(5, "batch 5"), Tp(topic, 2): 9}
        )
        assert await admin.list_consumer_group_offsets(group) == {
            Tp(topic, 0): OffsetAndMetadata(5, "batch 5"),
            Tp(topic, 2): OffsetAndMetadata(9, ""),
        }
        assert await admin.list_consumer_group_offsets(group, [Tp(topic, 0), Tp(topic, 1)]) == {
            Tp(topic, 0): OffsetAndMetadata(5, "batch 5")
        }
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.alter_consumer_group_offsets(group, {Tp(f"no-{topic}", 0): 1})
    assert await committed_offsets(kafka.bootstrap_servers, group) == {
        Tp(topic, 0): (5, "batch 5"),
        Tp(topic, 2): (9, ""),
    }


async def test_completing_after_the_timeout_abort_fails_typed(
    kafka: LocalKafka, new_topic: NewTopic
) -> None:
    topic = new_topic()
    prepared: list[PreparedTransaction] = []
    for force_v1 in (False, True):
        producer = Producer(
            kafka.bootstrap_servers, transactional_id=txn_id(), transaction_timeout_ms=1000
        )
        producer._rt.force_transaction_v1 = force_v1
        async with producer:
            await producer.begin_transaction()
            await producer.send(topic, b"too-late")
            prepared.append(await producer.prepare_transaction())
    async with Admin(kafka.bootstrap_servers) as admin:
        # The coordinator looks for timed-out transactions every 10 s (the broker default).
        deadline = asyncio.get_running_loop().time() + 60
        ids = [p.transactional_id for p in prepared]
        while any(d.state == "Ongoing" for d in (await admin.describe_transactions(ids)).values()):
            assert asyncio.get_running_loop().time() < deadline, "no timeout abort"
            await asyncio.sleep(0.5)
        tv2, tv1 = prepared
        # Kafka 4.4 answers INVALID_TXN_STATE under protocol 2 (a commit "retried" on an
        # aborted transaction); KAFKA-20785 makes it PRODUCER_FENCED.
        with pytest.raises((InvalidTxnStateError, ProducerFencedError)):
            await admin.complete_transaction(tv2, commit=True)
        await admin.complete_transaction(tv2, commit=False)  # the same outcome: accepted
        with pytest.raises(ProducerFencedError):  # protocol 1: the epoch moved on
            await admin.complete_transaction(tv1, commit=True)
    assert read_committed(kafka.bootstrap_servers, topic) == []
