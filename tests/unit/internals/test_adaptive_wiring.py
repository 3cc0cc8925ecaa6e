"""Adaptive partitioning wired in: the accumulator feeds it, the sticky partitioner asks it.

Deterministic: seeded random sources and time passed in. A "slow" leader is one the test
never lets drain (as when its connection is at its in-flight limit), so its partitions' queues
grow while the other leaders' queues are drained on every pass.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.adaptive import AdaptivePartitioning
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.metadata import ClusterSnapshot
from aiokprod.internals.partitioner import PartitionChooser, StickyPartitionState
from aiokprod.types import TopicPartition

from ._helpers import snapshot

BATCH = 1000
VALUE = b"v" * 90
#: Six partitions, two led by each of nodes 1, 2 and 3 (node 2 leads partitions 1 and 4).
LEADERS = [1, 2, 3, 1, 2, 3]
SLOW_NODE = 2
SLOW_PARTITIONS = {1, 4}


class Rig:
    """An accumulator and a partition chooser sharing (or not) adaptive partitioning."""

    def __init__(
        self, *, adaptive: bool, timeout_ms: int = 0, seed: int = 1, working_set_size: int = 0
    ) -> None:
        self.adaptive = AdaptivePartitioning(timeout_ms) if adaptive else None
        self.acc = RecordAccumulator(
            batch_size=BATCH,
            linger_ms=0,
            delivery_timeout_ms=10**9,
            budget=ByteBudget(10**9),
            adaptive=self.adaptive,
        )
        self.chooser = PartitionChooser(
            "builtin",
            BATCH,
            rng=random.Random(seed),
            adaptive=self.adaptive,
            working_set_size=working_set_size,
            working_set_ms=20,
        )
        self.cluster: ClusterSnapshot = snapshot({"t": LEADERS})
        self.info = self.cluster.topics["t"]
        #: New batches per partition (what the partitioner decided).
        self.new_batches: Counter[int] = Counter()

    def send(self, records: int, now_ms: int) -> None:
        """Append unkeyed records as ``send()`` does (sticky accounting included)."""
        info = self.info
        for _ in range(records):
            p, sticky = self.chooser.choose("t", None, len(info.partitions), info.available)
            tp = TopicPartition("t", p)
            if self.acc.try_append(tp, 0, None, VALUE, None, sticky, info) is not None:
                continue
            need = self.acc.new_batch_size(None, VALUE, None)
            assert self.acc.budget.try_reserve(need)
            batch, _, size = self.acc.append_new_batch(tp, 0, None, VALUE, None, now_ms, need)
            self.new_batches[p] += 1
            assert sticky is not None
            sticky.on_append(size, batch.is_full, len(info.partitions), info.available, now_ms)

    def sender_pass(self, now_ms: int, drainable: set[int]) -> None:
        """One sender pass: ready, then drain only the leaders in ``drainable``.

        Drained batches are completed at once (the fast leaders keep up).
        """
        ready = self.acc.ready(self.cluster, now_ms)
        nodes = ready.ready_nodes & drainable
        if nodes:
            for batches in self.acc.drain(self.cluster, nodes, 10**9, now_ms).values():
                for batch in batches:
                    self.acc.deallocate(batch)

    def run(self, passes: int, drainable: set[int], start_ms: int = 0, step_ms: int = 5) -> int:
        """Alternate a burst of records and a sender pass; returns the time reached."""
        now = start_ms
        for _ in range(passes):
            self.send(30, now)  # about three batches' worth per pass
            now += step_ms
            self.sender_pass(now, drainable)
        return now

    def slow_share(self) -> float:
        total = sum(self.new_batches.values())
        return sum(self.new_batches[p] for p in SLOW_PARTITIONS) / total


def test_a_leader_with_long_queues_gets_fewer_new_batches() -> None:
    rig = Rig(adaptive=True)
    rig.run(200, drainable={1, 3})
    # Uniform would give node 2's two partitions a third of the batches; their queues only
    # grow, so each switch weighs them 1 against max_queue + 1 for the drained partitions.
    assert rig.slow_share() < 0.1, rig.new_batches
    assert all(rig.new_batches[p] > 0 for p in (0, 2, 3, 5))


def test_in_a_working_set_a_leader_with_long_queues_still_gets_fewer_new_batches() -> None:
    # Sets of 3 of the 6 partitions, drawn anew every 20 ms (4 passes): the draw and the
    # moves within a set are both weighted.
    rig = Rig(adaptive=True, working_set_size=3)
    rig.run(200, drainable={1, 3})
    assert rig.slow_share() < 0.1, rig.new_batches
    assert all(rig.new_batches[p] > 0 for p in (0, 2, 3, 5))


def test_in_a_working_set_without_adaptive_the_share_stays_even() -> None:
    rig = Rig(adaptive=False, working_set_size=3)
    rig.run(200, drainable={1, 3})
    assert 0.25 < rig.slow_share() < 0.42, rig.new_batches


def test_adaptive_off_ignores_queue_lengths() -> None:
    rig = Rig(adaptive=False)
    rig.run(200, drainable={1, 3})
    assert 0.25 < rig.slow_share() < 0.42, rig.new_batches


def test_with_even_queues_adaptive_chooses_exactly_as_uniform_sticky() -> None:
    # Even queues (all empty, or all the same length) mean no weighting: the choice is the
    # uniform sticky one, draw for draw (the weighting consumes no random draw then).
    for queues in ({}, dict.fromkeys(range(6), 3)):
        adaptive = AdaptivePartitioning()
        adaptive.queue_sizes = lambda topic, q=queues: q  # type: ignore[misc]
        on = StickyPartitionState(BATCH, random.Random(5), "t", adaptive)
        off = StickyPartitionState(BATCH, random.Random(5))
        picks_on: list[int] = []
        picks_off: list[int] = []
        for state, picks in ((on, picks_on), (off, picks_off)):
            picks.append(state.partition(6, range(6)))
            for _ in range(300):
                state.on_append(BATCH, True, 6, range(6), 0)
                picks.append(state.current)
        assert picks_on == picks_off
        assert set(picks_on) == set(range(6))


def test_the_queues_seen_at_a_switch_are_the_accumulators() -> None:
    rig = Rig(adaptive=True)
    rig.send(200, 0)  # nothing drained: every batch still queued
    sizes = rig.acc.queue_sizes("t")
    assert sum(sizes.values()) == sum(rig.new_batches.values())
    assert sizes == {p: n for p, n in rig.new_batches.items() if n}
    assert rig.acc.queue_sizes("other") == {}


@pytest.mark.parametrize("working_set_size", [0, 3])
def test_an_unavailable_leader_gets_no_new_batches_until_it_drains_again(
    working_set_size: int,
) -> None:
    rig = Rig(adaptive=True, timeout_ms=100, working_set_size=working_set_size)
    now = rig.run(5, drainable={1, 2, 3})  # every node seen and drained
    assert rig.adaptive is not None
    assert rig.adaptive.unavailable_nodes == frozenset()
    # Node 2 stops taking requests; within the timeout it is still a candidate.
    now = rig.run(10, drainable={1, 3}, start_ms=now)
    assert rig.adaptive.unavailable_nodes == frozenset()
    # Past the timeout (data ready, no drain for > 100 ms) its partitions are skipped.
    now = rig.run(20, drainable={1, 3}, start_ms=now, step_ms=10)
    assert rig.adaptive.unavailable_nodes == {SLOW_NODE}
    before = Counter(rig.new_batches)
    now = rig.run(100, drainable={1, 3}, start_ms=now)
    after = rig.new_batches - before
    assert sum(after[p] for p in SLOW_PARTITIONS) == 0, after
    assert sum(after.values()) > 100
    # It takes requests again: one drain makes it available, and it gets new batches again
    # once its backlog is gone.
    while any(rig.acc.queue_sizes("t").get(p) for p in SLOW_PARTITIONS):
        now += 5
        rig.sender_pass(now, drainable={1, 2, 3})
    assert rig.adaptive.unavailable_nodes == frozenset()
    before = Counter(rig.new_batches)
    rig.run(100, drainable={1, 2, 3}, start_ms=now)
    after = rig.new_batches - before
    assert sum(after[p] for p in SLOW_PARTITIONS) > 10, after


def test_without_the_timeout_a_stuck_leader_is_only_weighted_down() -> None:
    rig = Rig(adaptive=True, timeout_ms=0)
    rig.run(5, drainable={1, 2, 3})
    rig.run(300, drainable={1, 3}, start_ms=100, step_ms=10)
    assert rig.adaptive is not None
    assert rig.adaptive.unavailable_nodes == frozenset()
    assert rig.slow_share() < 0.1


def test_partitions_without_a_leader_are_never_chosen() -> None:
    rig = Rig(adaptive=True)
    rig.cluster = snapshot({"t": [1, -1, 3, 1, -1, 3]})
    rig.info = rig.cluster.topics["t"]
    rig.run(100, drainable={1})  # node 3 slow: queues uneven, so the weighting is used
    assert rig.new_batches[1] == rig.new_batches[4] == 0
    assert rig.new_batches[0] > rig.new_batches[2]


def test_round_robin_and_custom_partitioners_are_not_steered() -> None:
    from aiokprod.config import ProducerConfig
    from aiokprod.internals.runtime import ProducerRuntime

    def runtime(**options: object) -> ProducerRuntime:
        config = ProducerConfig.from_options("127.0.0.1:9092", **options)
        return ProducerRuntime(
            config,
            software_version="0",
            check_running=lambda: None,
            transport=None,
            clock=_Clock(),
            rng=random.Random(0),
        )

    rt = runtime()
    assert rt.accumulator.adaptive is not None
    assert rt.appender.partitions.adaptive is rt.accumulator.adaptive
    assert runtime(partitioner_adaptive_partitioning=False).accumulator.adaptive is None
    assert runtime(partitioner="round_robin").accumulator.adaptive is None
    timed = runtime(partitioner_availability_timeout_ms=250).accumulator.adaptive
    assert timed is not None
    assert timed.latency.availability_timeout_ms == 250


class _Clock:
    def monotonic_ms(self) -> int:
        return 0

    def monotonic(self) -> float:
        return 0.0
