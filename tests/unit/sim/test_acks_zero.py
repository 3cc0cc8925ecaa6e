"""acks=0 against a simulated cluster: nothing answers a Produce request, so nothing but the
sender itself may bring the next batch of a partition out (a response wakes it otherwise)."""

from __future__ import annotations

import asyncio
import random

import pytest

from aiokprod import DeliveryFuture, Producer
from aiokprod.testing.sim.world import SimWorld, Topology

PARTITIONS = 3


def logged_records(world: SimWorld) -> int:
    return sum(
        len(batch.records)
        for p in range(PARTITIONS)
        for batch in world.cluster.partitions["t", p].log.batches
    )


@pytest.mark.parametrize("linger_ms", [0, 5])
def test_acks_zero_sends_every_queued_batch_without_responses(linger_ms: int) -> None:
    world = SimWorld(random.Random(3), Topology(1, {"t": PARTITIONS}))
    futures: list[DeliveryFuture] = []

    async def main() -> None:
        producer: Producer = world.producer(
            random.Random(4), acks=0, linger_ms=linger_ms, batch_size=1000
        )
        await producer.start()
        await producer.partitions_for("t")
        for i in range(2000):
            futures.append(await producer.send("t", b"%05d" % i, key=b"%d" % (i % 7)))
        # Several batches per partition are queued: one is drained per partition and pass,
        # and with acks=0 no answer wakes the sender for the next one.
        await producer.flush(timeout=30)
        await asyncio.sleep(1)  # virtual time: the last requests reach the broker
        await producer.close()

    world.run(main())
    assert all(f.done() and f.exception() is None for f in futures)
    assert logged_records(world) == 2000


def test_acks_zero_close_right_after_flush_waits_until_the_broker_read_everything() -> None:
    # flush() returns once the records are written; close() then asks each connection for
    # one more answer before aborting it (ConnectionPool.wait_written): without it the
    # simulated broker had 426 of the 2,000 records when the connection went.
    world = SimWorld(random.Random(3), Topology(1, {"t": PARTITIONS}))

    async def main() -> None:
        producer: Producer = world.producer(random.Random(4), acks=0, batch_size=1000)
        await producer.start()
        await producer.partitions_for("t")
        for i in range(2000):
            await producer.send("t", b"%05d" % i, key=b"%d" % (i % 7))
        await producer.flush(timeout=30)
        await producer.close()
        await asyncio.sleep(1)  # virtual time: anything still on its way would arrive

    world.run(main())
    assert logged_records(world) == 2000
