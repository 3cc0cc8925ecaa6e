"""kill -9 of the transaction coordinator in the middle of a transaction (3-node cluster)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from txn_readback import read_committed

from aiokprod import Producer
from aiokprod.errors import KafkaError
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import NewTopic

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(400)]

RECORDS = 200


async def test_coordinator_killed_mid_transaction_commits_whole_or_aborts_whole(
    kafka_cluster: LocalKafka, new_cluster_topic: NewTopic
) -> None:
    topic = new_cluster_topic(partitions=3)
    tid = f"tx-{uuid.uuid4().hex[:12]}"
    victim: int | None = None
    committed = False
    try:
        async with Producer(
            kafka_cluster.bootstrap_servers, transactional_id=tid, linger_ms=5
        ) as producer:
            coordinator = producer._rt.coordinator
            assert coordinator is not None
            victim = coordinator.coordinator_node
            assert victim is not None
            await producer.begin_transaction()
            futures = [
                await producer.send(topic, f"v-{i}".encode(), key=str(i).encode())
                for i in range(RECORDS)
            ]
            await asyncio.gather(*futures, return_exceptions=True)
            await asyncio.to_thread(kafka_cluster.kill_node, victim)
            try:
                # EndTxn fails over to the new coordinator of the transaction log partition.
                await producer.commit_transaction()
                committed = True
            except KafkaError:
                await producer.abort_transaction()
            # The producer goes on with the next transaction.
            async with producer.transaction():
                await producer.send(topic, b"after")
    finally:
        if victim is not None:
            await asyncio.to_thread(kafka_cluster.start_node, victim)
    values = read_committed(kafka_cluster.bootstrap_servers, topic, partitions=3)
    batch = sorted(v for v in values if v != b"after")
    assert values.count(b"after") == 1
    if committed:
        assert batch == sorted(f"v-{i}".encode() for i in range(RECORDS))
    else:
        assert batch == []
    print(f"coordinator {victim} killed; transaction {'committed' if committed else 'aborted'}")
