"""Adaptive partitioning decisions (internals/adaptive.py), with time passed in."""

from __future__ import annotations

import random
from collections import Counter

from aiokprod.internals.adaptive import (
    NodeLatency,
    adaptive_queue_sizes,
    load_stats,
    next_partition,
)


def test_equal_queues_mean_a_uniform_choice() -> None:
    assert load_stats({0: 2, 1: 2, 2: 2}, num_partitions=3) is None
    assert load_stats({}, num_partitions=3) is None


def test_weights_are_max_plus_one_minus_queue() -> None:
    stats = load_stats({0: 0, 1: 3, 2: 1}, num_partitions=3)
    assert stats is not None
    # weights 4, 1, 3 -> cumulative 4, 5, 8 (Java's cumulative frequency table)
    assert stats.cumulative == (4, 5, 8)
    assert stats.partition_ids == (0, 1, 2)


def test_a_subset_with_equal_queues_is_still_weighted() -> None:
    # Partition 2 was left out (unavailable leader): equal sizes over a subset are a table.
    stats = load_stats({0: 1, 1: 1}, num_partitions=3)
    assert stats is not None
    assert stats.partition_ids == (0, 1)


def test_each_draw_maps_to_the_first_bucket_above_it() -> None:
    stats = load_stats({0: 0, 1: 3, 2: 1}, num_partitions=3)
    assert stats is not None

    class Fixed(random.Random):
        def __init__(self, value: int) -> None:
            super().__init__(0)
            self.value = value

        def randrange(self, *args: object, **kwargs: object) -> int:
            return self.value

    picks = [next_partition(stats, 3, [0, 1, 2], Fixed(d)) for d in range(8)]
    assert picks == [0, 0, 0, 0, 1, 2, 2, 2]


def test_shorter_queues_get_more_new_batches() -> None:
    stats = load_stats({0: 0, 1: 8, 2: 4}, num_partitions=3)
    rng = random.Random(7)
    counts = Counter(next_partition(stats, 3, [0, 1, 2], rng) for _ in range(9000))
    assert counts[0] > counts[2] > counts[1] > 0


def test_uniform_choice_avoids_the_previous_partition() -> None:
    rng = random.Random(3)
    picks = {next_partition(None, 3, [0, 1, 2], rng, previous=1) for _ in range(200)}
    assert picks == {0, 2}
    assert next_partition(None, 1, [0], rng, previous=0) == 0


def test_node_unavailable_after_the_timeout_without_a_drain() -> None:
    latency = NodeLatency(availability_timeout_ms=500)
    latency.on_ready(1, 1_000, drained=True)
    latency.on_ready(2, 1_000, drained=True)
    latency.on_ready(2, 1_400, drained=False)
    assert latency.is_available(2)  # 400 ms waiting: within the timeout
    latency.on_ready(2, 1_600, drained=False)
    assert not latency.is_available(2)  # 600 ms with data and no drain
    assert latency.is_available(1)
    sizes = adaptive_queue_sizes({0: 1, 1: 5, 2: 0}, {0: 1, 1: 2, 2: 1}, latency)
    assert sizes == {0: 1, 2: 0}  # partition 1's leader (node 2) is skipped
    latency.on_ready(2, 1_700, drained=True)
    assert latency.is_available(2)  # it recovers on its next drain


def test_availability_check_off_by_default() -> None:
    latency = NodeLatency(availability_timeout_ms=0)
    latency.on_ready(1, 0, drained=True)
    latency.on_ready(1, 10**9, drained=False)
    assert latency.is_available(1)
