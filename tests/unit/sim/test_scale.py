"""Issue 30 on the simulated cluster: many topics, idle topics released, partial refreshes.

The real Producer against :class:`~aiokprod.testing.sim.scale.ScaleWorld` (virtual time, no
faults). The assertions are on what the producer holds and asks for, never on time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokprod import Producer
from aiokprod.testing.sim.scale import ScaleWorld

HOT = "hot"
VALUE = b"v" * 100


def held(producer: Producer) -> dict[str, int]:
    """Per-topic state the producer holds, by where it is held."""
    rt = producer._rt
    assert rt.idempotence is not None
    return {
        "view": len(rt.metadata.snapshot.topics),
        "in use": len(rt.metadata.topics),
        "metrics": len(producer.metric_groups()["producer-topic-metrics"]),
        "partitions of": len(rt.appender._tps),
        "sticky": len(rt.appender.partitions._sticky),
        "sequences": rt.idempotence.partitions_held,
    }


def test_topics_used_once_are_released_once_idle() -> None:
    """Thousands of topics used once each: after they idle out, only the one in use is held."""
    topics = 10_000
    world = ScaleWorld(3, {HOT: 1, **{f"c{i}": 1 for i in range(topics)}})
    seen: dict[str, Any] = {}

    async def main() -> None:
        producer = world.producer(metadata_max_idle_ms=5000, metadata_max_age_ms=1000)
        await producer.start()
        await producer.send_and_wait(HOT, VALUE)
        asked = len(world.cluster.metadata_requests)
        sends = []
        for i in range(topics):  # first sends spread over a second, each waits for metadata
            sends.append(asyncio.ensure_future(producer.send(f"c{i}", VALUE)))
            await asyncio.sleep(1 / topics)
        await asyncio.gather(*sends)
        await producer.flush()
        seen["requests"] = [n for n in world.cluster.metadata_requests[asked:] if n]
        seen["used"] = held(producer)
        for _ in range(10):  # the hot topic stays in use, the others idle out
            await producer.send_and_wait(HOT, VALUE)
            await asyncio.sleep(1.0)
        seen["idle"] = held(producer)
        await producer.close()

    world.run(main())
    world.close()
    assert len(seen["requests"]) <= 20, seen["requests"]  # not one per topic
    assert max(seen["requests"]) < topics  # nor every topic each time
    assert seen["used"]["view"] == topics + 1
    assert seen["used"]["sequences"] == topics + 1
    assert seen["idle"] == {
        "view": 1,
        "in use": 1,
        "metrics": 1,
        "partitions of": 1,
        "sticky": 1,
        "sequences": 1,
    }


def test_a_leader_change_on_one_partition_refreshes_that_topic() -> None:
    world = ScaleWorld(3, {"a": 3, "b": 3, "c": 3}, placement={"a": [0, 1]})
    asked: list[int] = []

    async def main() -> None:
        producer = world.producer(metadata_max_age_ms=300_000)
        await producer.start()
        for topic in ("a", "b", "c"):
            await producer.send_and_wait(topic, VALUE)
        before = len(world.cluster.metadata_requests)
        world.cluster.elect(("a", 0), 1)
        for _ in range(20):
            await producer.send_and_wait("a", VALUE, partition=0)
            await asyncio.sleep(0.01)
        asked.extend(n for n in world.cluster.metadata_requests[before:] if n)
        await producer.close()

    world.run(main())
    world.close()
    assert asked == [1]  # topic "a" alone, once
