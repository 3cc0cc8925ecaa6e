"""Delivery under faults against the real 3-node cluster (RF 3, min.insync.replicas 2).

Each scenario streams 100,000 keyed records while brokers die, restart or stall, then reads
everything back with librdkafka and counts: lost = 0, duplicated = 0, per-key order kept,
every future completed. The counts are printed and collected for docs/delivery-guarantees.md.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from faults import Stream, audit, busiest_leader, wait_full_isr
from kafka_proxy import KafkaProxy

from aiokprod import DeliveryTimeoutError, Producer
from aiokprod.testing import LocalKafka

PARTITIONS = 6


def restore(cluster: LocalKafka) -> None:
    """Start every stopped node again (so later tests get a whole cluster)."""
    for node_id in cluster.nodes:
        if node_id not in cluster.running_node_ids:
            cluster.start_node(node_id)


@pytest.fixture
def cluster(kafka_cluster: LocalKafka):
    restore(kafka_cluster)
    yield kafka_cluster
    restore(kafka_cluster)


async def test_kill_9_the_busiest_leader_mid_stream(cluster: LocalKafka, new_cluster_topic) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    bootstrap = cluster.bootstrap_servers
    wait_full_isr(bootstrap, topic, 3)
    victim = busiest_leader(bootstrap, topic)
    stream = Stream()
    started = time.monotonic()
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        sending = asyncio.create_task(stream.run(producer, topic))
        await stream.wait_acknowledged(15_000)
        await asyncio.to_thread(cluster.kill_node, victim)
        await asyncio.sleep(4)  # the stream goes on while the leader is dead
        await asyncio.to_thread(cluster.start_node, victim)
        stream.slow.clear()
        await sending
        await producer.flush()
        metrics = producer.metrics()
    result = audit(
        "kill -9 busiest leader", bootstrap, topic, stream, time.monotonic() - started, metrics
    )
    assert result.clean, result


async def test_rolling_restart_of_all_brokers(cluster: LocalKafka, new_cluster_topic) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    bootstrap = cluster.bootstrap_servers
    wait_full_isr(bootstrap, topic, 3)
    stream = Stream(pause_s=0.1)
    started = time.monotonic()
    async with Producer(bootstrap, request_timeout_ms=5000) as producer:
        sending = asyncio.create_task(stream.run(producer, topic))
        await stream.wait_acknowledged(5_000)
        for node_id in sorted(cluster.nodes):
            await asyncio.to_thread(cluster.stop_node, node_id)
            await asyncio.to_thread(cluster.start_node, node_id)
            await asyncio.to_thread(wait_full_isr, bootstrap, topic, 3)
        stream.slow.clear()
        await sending
        await producer.flush()
        metrics = producer.metrics()
    result = audit("rolling restart", bootstrap, topic, stream, time.monotonic() - started, metrics)
    assert result.clean, result


def proxy_for(cluster: LocalKafka) -> KafkaProxy:
    return KafkaProxy({n.node_id: (n.host, n.port) for n in cluster.nodes.values()})


async def test_proxy_cuts_stalls_and_trickles(cluster: LocalKafka, new_cluster_topic) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    wait_full_isr(cluster.bootstrap_servers, topic, 3)
    stream = Stream(pause_s=0.05)
    started = time.monotonic()
    async with (
        proxy_for(cluster) as proxy,
        Producer(
            proxy.bootstrap_servers, request_timeout_ms=2000, delivery_timeout_ms=90_000
        ) as producer,
    ):
        sending = asyncio.create_task(stream.run(producer, topic))
        await stream.wait_acknowledged(5_000)
        for _ in range(5):  # connections cut with requests in flight
            proxy.cut()
            await asyncio.sleep(0.4)
        proxy.stall()  # responses held past request_timeout_ms: connections time out
        await asyncio.sleep(3)
        proxy.resume()
        proxy.chunk(7, 0.0005)  # responses delivered a few bytes at a time
        await asyncio.sleep(3)
        proxy.chunk(None)
        stream.slow.clear()
        await sending
        await producer.flush()
        metrics = producer.metrics()
    result = audit(
        "proxy: cut, stall, trickle",
        cluster.bootstrap_servers,
        topic,
        stream,
        time.monotonic() - started,
        metrics,
    )
    assert result.clean, result


async def test_brokers_down_at_start_come_up_within_max_block_ms(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    bootstrap = cluster.bootstrap_servers
    wait_full_isr(bootstrap, topic, 3)
    # All at once, like a cluster outage (one by one, the last controller cannot finish a
    # controlled shutdown without a quorum and hangs until it is killed).
    await asyncio.gather(
        *(asyncio.to_thread(cluster.stop_node, n, 15.0) for n in sorted(cluster.nodes))
    )
    stream = Stream(pause_s=0.0)
    started = time.monotonic()
    async with Producer(bootstrap, max_block_ms=90_000) as producer:
        sending = asyncio.create_task(stream.run(producer, topic))
        await asyncio.sleep(2)
        assert stream.sent == 0, "send() waits for metadata while every broker is down"
        await asyncio.gather(
            *(asyncio.to_thread(cluster.start_node, n) for n in sorted(cluster.nodes))
        )
        await sending
        await producer.flush()
        metrics = producer.metrics()
    result = audit(
        "brokers down at start", bootstrap, topic, stream, time.monotonic() - started, metrics
    )
    assert result.clean, result


async def test_stall_longer_than_delivery_timeout_fails_within_the_bound(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    wait_full_isr(cluster.bootstrap_servers, topic, 3)
    delivery_timeout_ms = 6000
    async with (
        proxy_for(cluster) as proxy,
        Producer(
            proxy.bootstrap_servers,
            request_timeout_ms=2000,
            delivery_timeout_ms=delivery_timeout_ms,
        ) as producer,
    ):
        await producer.send_and_wait(topic, b"before", key=b"k")
        proxy.stall()
        sent_at: list[float] = []
        failed_at: dict[int, float] = {}
        futures = []
        for i in range(2000):
            sent_at.append(time.monotonic())
            future = await producer.send(topic, f"stalled-{i}".encode(), key=f"k{i}".encode())
            future.add_done_callback(lambda f, i=i: failed_at.setdefault(i, time.monotonic()))
            futures.append(future)
        await asyncio.wait_for(producer.flush(), timeout=delivery_timeout_ms / 1000 + 10)
        assert all(f.done() for f in futures), "no future is left pending"
        assert {type(f.exception()) for f in futures} == {DeliveryTimeoutError}
        late = max(failed_at[i] - sent_at[i] for i in range(len(futures)))
        assert late <= delivery_timeout_ms / 1000 + 1.5, f"failed {late:.2f} s after send"
        proxy.resume()
        # The lost sequences were repaired (epoch bump): new records go through.
        after = await asyncio.wait_for(producer.send_and_wait(topic, b"after", key=b"k"), 30)
        assert after.has_offset
