"""The partitioner's working set, through the real Producer against a simulated cluster.

On a topic with many partitions, unkeyed records go to ``partitioner_working_set_size``
partitions at a time, drawn again every ``partitioner_working_set_ms`` of the producer's clock
(virtual time here); with the set turned off they spread over the whole topic at once, as the
Java client's rule does (docs/design.md, "Partitioning").
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aiokprod import DeliveryFuture, Producer
from aiokprod.testing.sim.world import SimWorld, Topology

PARTITIONS = 200
CHUNKS = 40
PER_CHUNK = 200
PAUSE_S = 0.01  # 40 chunks, 10 ms apart: 400 ms of virtual time


def touched(**options: Any) -> tuple[set[int], int]:
    """Partitions that got a batch, and how many records were delivered."""
    world = SimWorld(random.Random(5), Topology(1, {"t": PARTITIONS}))
    futures: list[DeliveryFuture] = []

    async def main() -> None:
        producer: Producer = world.producer(random.Random(6), batch_size=2000, **options)
        await producer.start()
        await producer.partitions_for("t")
        for chunk in range(CHUNKS):
            for i in range(PER_CHUNK):
                futures.append(await producer.send("t", b"%06d" % (chunk * PER_CHUNK + i) * 16))
            await asyncio.sleep(PAUSE_S)
        await producer.flush()
        await producer.close()

    world.run(main())
    delivered = sum(1 for f in futures if f.done() and f.exception() is None)
    logs = world.cluster.partitions
    return {p for p in range(PARTITIONS) if logs["t", p].log.batches}, delivered


def test_a_large_topic_is_written_a_few_partitions_at_a_time() -> None:
    partitions, delivered = touched(partitioner_working_set_size=8, partitioner_working_set_ms=50)
    assert delivered == CHUNKS * PER_CHUNK
    # 400 ms in windows of 50 ms: at most 9 sets of 8 (the last window may be cut short).
    assert 8 < len(partitions) <= 9 * 8, sorted(partitions)


def test_without_a_working_set_the_moves_spread_over_the_whole_topic() -> None:
    partitions, delivered = touched(partitioner_working_set_size=0)
    assert delivered == CHUNKS * PER_CHUNK
    # About 400 batches drawn uniformly over 200 partitions touch most of them.
    assert len(partitions) > 120, len(partitions)


def test_the_default_is_a_set_of_8_for_100_ms() -> None:
    partitions, _ = touched()
    # 400 ms in windows of 100 ms: at most 5 sets of 8.
    assert 8 < len(partitions) <= 5 * 8, sorted(partitions)
