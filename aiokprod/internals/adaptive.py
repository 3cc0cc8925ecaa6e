"""Adaptive partitioning decisions (Java's ``BuiltInPartitioner``, KIP-794), pure and timed.

NOT WIRED INTO THE SEND PATH YET (issue 13, part 3): this module holds the decision code
with time passed in, tested on its own; the accumulator's ready pass would feed it queue
sizes and node drain times, and the sticky partitioner would call :func:`next_partition`
when it switches.

- **Queue-length weighting** (``partitioner_adaptive_partitioning``): when the sticky
  partitioner moves on, it picks a partition at random with weight ``max_queue + 1 -
  queue`` (queues counted in batches), so partitions with shorter queues (faster brokers)
  get more new batches. When every partition's queue has the same length the choice is
  uniform, as without the option.
- **Availability** (``partitioner_availability_timeout_ms`` > 0): a partition whose leader
  had data ready but could not take a request (no drain) for longer than the timeout is left
  out of the choice until the leader drains again.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionLoadStats:
    """A cumulative frequency table over partitions (Java's ``PartitionLoadStats``).

    ``cumulative[i]`` is the sum of the weights of ``partition_ids[0..i]``; the weight of a
    partition is ``max_queue + 1 - its queue``.
    """

    cumulative: tuple[int, ...]
    partition_ids: tuple[int, ...]


def load_stats(queue_sizes: Mapping[int, int], num_partitions: int) -> PartitionLoadStats | None:
    """The weighting table from queue sizes (batches queued) of the partitions to consider.

    Returns None when the choice should be uniform: no partitions, or every partition of the
    topic has the same queue length (Java: ``updatePartitionLoadStats``).
    """
    if not queue_sizes:
        return None
    ids = tuple(sorted(queue_sizes))
    sizes = [queue_sizes[p] for p in ids]
    largest = max(sizes)
    if len(ids) == num_partitions and all(s == largest for s in sizes):
        return None
    cumulative: list[int] = []
    total = 0
    for size in sizes:
        total += largest + 1 - size
        cumulative.append(total)
    return PartitionLoadStats(tuple(cumulative), ids)


def next_partition(
    stats: PartitionLoadStats | None,
    num_partitions: int,
    available: Sequence[int],
    rng: random.Random,
    previous: int = -1,
) -> int:
    """The partition the sticky partitioner moves to (Java: ``nextPartition``).

    Weighted by ``stats`` when there are any; otherwise uniform over ``available`` (or all).
    """
    if stats is None:
        choices: Sequence[int] = available or range(num_partitions)
        if len(choices) > 1 and previous in choices:
            choices = [p for p in choices if p != previous]
        return choices[rng.randrange(len(choices))]
    draw = rng.randrange(stats.cumulative[-1])
    index = bisect.bisect_right(stats.cumulative, draw)
    return stats.partition_ids[index]


class NodeLatency:
    """When each broker last had data ready and last took a request (Java: ``NodeLatencyStats``).

    Args:
        availability_timeout_ms: ``partitioner_availability_timeout_ms``; 0 turns the
            availability check off.
    """

    def __init__(self, availability_timeout_ms: int) -> None:
        self.availability_timeout_ms = availability_timeout_ms
        self._ready_ms: dict[int, int] = {}
        self._drain_ms: dict[int, int] = {}

    def on_ready(self, node_id: int, now_ms: int, *, drained: bool) -> None:
        """The ready pass found data for ``node_id``; ``drained`` if a request went to it."""
        self._ready_ms[node_id] = now_ms
        if drained or node_id not in self._drain_ms:
            # A node first seen counts as drained now: it gets the timeout to prove itself.
            self._drain_ms[node_id] = now_ms

    def is_available(self, node_id: int) -> bool:
        """False if the node had data waiting longer than the timeout without a drain."""
        timeout = self.availability_timeout_ms
        if timeout <= 0:
            return True
        ready = self._ready_ms.get(node_id)
        if ready is None:
            return True
        return ready - self._drain_ms.get(node_id, ready) <= timeout


def adaptive_queue_sizes(
    queue_sizes: Mapping[int, int],
    leaders: Mapping[int, int],
    latency: NodeLatency,
) -> dict[int, int]:
    """The queue sizes of the partitions whose leader is available (the rest are skipped).

    Args:
        queue_sizes: partition -> batches queued, for partitions with a leader.
        leaders: partition -> leader node id.
        latency: the drain history of the nodes.
    """
    return {
        p: size
        for p, size in queue_sizes.items()
        if p in leaders and latency.is_available(leaders[p])
    }
