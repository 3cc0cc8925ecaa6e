"""When a new batch hands the event loop to the sender (``RecordAppender.append_new_batch``).

One record at a time (``send()``), the loop yields at every new batch while others are queued,
so the sender runs between the batches of a tight send loop. The bulk paths
(``send_many()``) pass ``yield_at`` = the topic's partition count: the sender runs once a
batch per partition is queued, so a Produce request carries several batches instead of one
(Java's sender drains one batch per partition per request).
"""

from __future__ import annotations

import asyncio
import random

from aiokprod.clock import SystemClock
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.appender import RecordAppender
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.partitioner import PartitionChooser
from aiokprod.types import TopicPartition

from ._helpers import accumulator, append, snapshot

PARTITIONS = 6
TPS = [TopicPartition("t", p) for p in range(PARTITIONS)]


def make_appender() -> tuple[RecordAppender, RecordAccumulator]:
    acc = accumulator(batch_size=1000, linger_ms=10, delivery_timeout_ms=120_000)
    appender = RecordAppender(
        acc,
        ByteBudget(10_000_000),
        PartitionChooser("builtin", 1000, rng=random.Random(1)),
        record_limit=1_000_000,
        max_block_ms=1000,
        max_request_size=1_000_000,
        clock=SystemClock(),
        check_running=lambda: None,
    )
    return appender, acc


class Probe:
    """A task that counts how often the loop let it run."""

    def __init__(self) -> None:
        self.turns = 0
        self.stop = False

    async def run(self) -> None:
        while not self.stop:
            self.turns += 1
            await asyncio.sleep(0)


async def new_batch(appender: RecordAppender, tp: TopicPartition, yield_at: int) -> None:
    info = snapshot({"t": [1] * PARTITIONS}).topics["t"]
    await appender.append_new_batch(tp, 1000, None, b"v" * 30, None, None, info, -1, yield_at)


async def test_one_record_at_a_time_yields_whenever_a_batch_is_queued() -> None:
    appender, acc = make_appender()
    append(acc, TPS[0])  # one batch queued
    probe = Probe()
    task = asyncio.create_task(probe.run())
    await new_batch(appender, TPS[1], yield_at=1)
    assert probe.turns == 1
    probe.stop = True
    await task


async def test_the_bulk_paths_yield_once_a_batch_per_partition_is_queued() -> None:
    appender, acc = make_appender()
    for tp in TPS[:4]:
        append(acc, tp)
    probe = Probe()
    task = asyncio.create_task(probe.run())
    await new_batch(appender, TPS[4], yield_at=PARTITIONS)  # 4 queued: no turn
    assert probe.turns == 0
    await new_batch(appender, TPS[5], yield_at=PARTITIONS)  # 5 queued: no turn
    assert probe.turns == 0
    append(acc, TopicPartition("u", 0))
    await new_batch(appender, TopicPartition("u", 1), yield_at=PARTITIONS)  # 7 queued
    assert probe.turns == 1
    probe.stop = True
    await task


def test_the_bulk_threshold_is_a_batch_per_partition_up_to_what_a_request_holds() -> None:
    appender, _ = make_appender()  # batch_size 1000, max_request_size 1,000,000
    assert appender.bulk_yield_at(PARTITIONS) == PARTITIONS
    assert appender.bulk_yield_at(1) == 1
    assert appender.bulk_yield_at(5000) == 1000  # a request holds 1,000 batches of 1000 B
