"""Adaptive partitioning against the real 3-node cluster, one broker slowed by the fault proxy.

The proxy in front of one broker holds that broker's responses most of the time (held for
``HOLD_S``, then let through for ``FLOW_S``, over and over): its connection sits at its
in-flight limit, its partitions' queues grow, and the sticky partitioner should move unkeyed
records away from it. Everything is read back with librdkafka: each record exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka_proxy import KafkaProxy
from readback import consume_all

from aiokprod import DeliveryFuture, Producer
from aiokprod.testing import LocalKafka

PARTITIONS = 6
RECORDS = 50_000
CHUNK = 1000
PAUSE_S = 0.01
HOLD_S = 1.0
FLOW_S = 0.05


def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader node, as librdkafka's admin client sees them."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


@contextlib.asynccontextmanager
async def slowed(proxy: KafkaProxy, node: int) -> AsyncIterator[None]:
    """Hold ``node``'s responses most of the time, for as long as the block runs."""

    async def pulse() -> None:
        while True:
            proxy.stall(node)
            await asyncio.sleep(HOLD_S)
            proxy.resume(node)
            await asyncio.sleep(FLOW_S)

    task = asyncio.create_task(pulse())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        proxy.resume(node)


async def send_paced(producer: Producer, topic: str) -> list[DeliveryFuture]:
    """``RECORDS`` unkeyed records, value ``"<i>"`` padded to 100 bytes, in paced chunks."""
    futures = []
    for i in range(RECORDS):
        futures.append(await producer.send(topic, str(i).encode().ljust(100, b".")))
        if (i + 1) % CHUNK == 0:
            await asyncio.sleep(PAUSE_S)
    return futures


async def run(cluster: LocalKafka, topic: str, **options: Any) -> tuple[float, Counter[int]]:
    """Send through the proxy with one leader slowed; returns its share and the per-partition
    counts, after checking that every record arrived exactly once."""
    leaders = leaders_of(cluster.bootstrap_servers, topic)
    assert set(leaders.values()) == set(cluster.nodes), leaders  # every broker leads some
    victim = leaders[0]
    proxy = KafkaProxy({n.node_id: (n.host, n.port) for n in cluster.nodes.values()})
    async with (
        proxy,
        Producer(proxy.bootstrap_servers, delivery_timeout_ms=120_000, **options) as producer,
    ):
        # Metadata and connections first, so the slowing starts with the records.
        await producer.send_and_wait(topic, b"warm-up".ljust(100, b"."))
        async with slowed(proxy, victim):
            futures = await send_paced(producer, topic)
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in futures)
    consumed = consume_all(cluster.bootstrap_servers, topic, RECORDS + 1, timeout_s=90)
    values = Counter(r.value for r in consumed)
    expected = {str(i).encode().ljust(100, b".") for i in range(RECORDS)}
    assert set(values) - {b"warm-up".ljust(100, b".")} == expected  # nothing lost
    assert all(n == 1 for n in values.values()), values.most_common(3)  # nothing doubled
    per_partition = Counter(r.partition for r in consumed if r.value in expected)
    slow = sum(n for p, n in per_partition.items() if leaders[p] == victim)
    share = slow / RECORDS
    print(f"\n{options}: slowed leader {victim} share {share:.3f}, per partition {per_partition}")
    return share, per_partition


async def test_slow_leader_gets_a_smaller_share_of_unkeyed_records(
    kafka_cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS, rf=1)
    share, per_partition = await run(kafka_cluster, topic, partitioner_availability_timeout_ms=200)
    # Uniform would give the slowed leader's 2 of 6 partitions about a third.
    assert share < 0.2, per_partition


async def test_without_adaptive_partitioning_the_share_stays_even(
    kafka_cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS, rf=1)
    share, per_partition = await run(kafka_cluster, topic, partitioner_adaptive_partitioning=False)
    # The uniform sticky choice ignores the backlog: about a third (hundreds of batches drawn).
    assert share > 0.22, per_partition


@pytest.fixture(autouse=True)
def _whole_cluster(kafka_cluster: LocalKafka) -> None:
    """Start any node an earlier test left stopped (the share needs three leaders)."""
    for node_id in kafka_cluster.nodes:
        if node_id not in kafka_cluster.running_node_ids:
            kafka_cluster.start_node(node_id)
