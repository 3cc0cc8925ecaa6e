"""When a new batch hands the event loop to the sender (``RecordAppender.append_new_batch``).

``send()`` and the bulk paths (``send_many()``) pass ``yield_at`` = the topic's partition count
(capped): the sender runs once that many partitions have a queued batch, so a Produce request
carries several batches instead of one (Java's sender drains one batch per partition per
request), or once twice as many batches are queued (records crowding into few partitions).
With ``yield_at`` = 1 (a one-partition topic) every new batch behind a queued one yields.
"""

from __future__ import annotations

import asyncio
import random

from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.appender import MAX_BATCHES_BEFORE_YIELD, MAX_HOLD_MS, RecordAppender
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.partitioner import PartitionChooser
from aiokprod.types import TopicPartition

from ._helpers import accumulator, append, snapshot

PARTITIONS = 6
TPS = [TopicPartition("t", p) for p in range(PARTITIONS)]


class ManualClock:
    """Time moves only when a test says (no test here may depend on the machine's speed)."""

    def __init__(self) -> None:
        self.now_ms = 1_000

    def monotonic_ms(self) -> int:
        return self.now_ms


def make_appender(clock: ManualClock | None = None) -> tuple[RecordAppender, RecordAccumulator]:
    acc = accumulator(batch_size=1000, linger_ms=10, delivery_timeout_ms=120_000)
    appender = RecordAppender(
        acc,
        ByteBudget(10_000_000),
        PartitionChooser("builtin", 1000, rng=random.Random(1)),
        record_limit=1_000_000,
        max_block_ms=1000,
        max_request_size=1_000_000,
        clock=clock or ManualClock(),
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


async def test_one_partition_yields_whenever_a_batch_is_queued() -> None:
    appender, acc = make_appender()
    append(acc, TPS[0])  # one batch queued
    probe = Probe()
    task = asyncio.create_task(probe.run())
    await new_batch(appender, TPS[1], yield_at=1)
    assert probe.turns == 1
    probe.stop = True
    await task


async def test_the_sender_runs_once_a_batch_per_partition_is_queued() -> None:
    appender, acc = make_appender()
    for tp in [TPS[0], *TPS[:4]]:
        append(acc, tp)[0].is_full = True  # 5 batches queued, partitions 0-3

    def fill(tp: TopicPartition) -> None:
        acc.queued(tp)[-1].is_full = True

    probe = Probe()
    task = asyncio.create_task(probe.run())
    await new_batch(appender, TPS[4], yield_at=PARTITIONS)  # 5 batches, 4 partitions: no turn
    fill(TPS[4])
    await new_batch(appender, TPS[0], yield_at=PARTITIONS)  # 6 batches, 5 partitions: no turn
    fill(TPS[0])
    await new_batch(appender, TPS[5], yield_at=PARTITIONS)  # 7 batches, 5 partitions: no turn
    assert probe.turns == 0
    fill(TPS[5])
    await new_batch(appender, TPS[1], yield_at=PARTITIONS)  # 8 batches, 6 partitions: a turn
    assert probe.turns == 1
    probe.stop = True
    await task


async def test_batches_crowding_into_few_partitions_still_let_the_sender_run() -> None:
    appender, acc = make_appender()
    for _ in range(2 * PARTITIONS - 2):
        append(acc, TPS[0])[0].is_full = True  # ten full batches of one partition
    probe = Probe()
    task = asyncio.create_task(probe.run())
    await new_batch(appender, TPS[1], yield_at=PARTITIONS)  # 10 batches queued, 1 partition
    assert probe.turns == 0
    acc.queued(TPS[1])[-1].is_full = True
    await new_batch(appender, TPS[1], yield_at=PARTITIONS)  # 11 batches, 2 partitions
    assert probe.turns == 0
    acc.queued(TPS[1])[-1].is_full = True
    await new_batch(appender, TPS[0], yield_at=PARTITIONS)  # 12: twice the threshold
    assert probe.turns == 1
    assert acc.queued_partitions() == 2
    probe.stop = True
    await task


async def test_a_run_of_appends_gives_the_loop_a_turn_every_max_hold_ms() -> None:
    clock = ManualClock()
    appender, acc = make_appender(clock)
    append(acc, TPS[0])[0].is_full = True  # one batch queued, of one partition
    probe = Probe()
    task = asyncio.create_task(probe.run())
    clock.now_ms += MAX_HOLD_MS - 1
    await new_batch(appender, TPS[1], yield_at=PARTITIONS)  # 2 partitions queued: no turn
    assert probe.turns == 0
    acc.queued(TPS[1])[-1].is_full = True
    clock.now_ms += 1  # MAX_HOLD_MS since the appender began
    await new_batch(appender, TPS[2], yield_at=PARTITIONS)
    assert probe.turns == 1
    acc.queued(TPS[2])[-1].is_full = True
    clock.now_ms += MAX_HOLD_MS - 1  # counted from that turn
    await new_batch(appender, TPS[3], yield_at=PARTITIONS)
    assert probe.turns == 1
    probe.stop = True
    await task


def test_the_threshold_is_a_batch_per_partition_up_to_what_a_request_holds() -> None:
    appender, _ = make_appender()  # batch_size 1000, max_request_size 1,000,000
    assert appender.yield_threshold(PARTITIONS) == PARTITIONS
    assert appender.yield_threshold(1) == 1
    assert appender.yield_threshold(5000) == MAX_BATCHES_BEFORE_YIELD  # the loop's other tasks
    small = RecordAppender(
        make_appender()[1],
        ByteBudget(10_000_000),
        PartitionChooser("builtin", 1000, rng=random.Random(1)),
        record_limit=4000,
        max_block_ms=1000,
        max_request_size=4000,
        clock=ManualClock(),
        check_running=lambda: None,
    )
    assert small.yield_threshold(PARTITIONS) == 4  # a request holds 4 batches of 1000 B
