"""Adaptive partitioning (Java's ``BuiltInPartitioner``, KIP-794): decisions with time passed in.

The sticky partitioner (internals/partitioner.py) sends unkeyed records to one partition
until about a batch's worth went there, then moves on; this module decides *where* it moves
when ``partitioner_adaptive_partitioning`` is on (the default, as in the Java client).

- **Queue-length weighting**: the next partition is drawn at random with weight ``max_queue
  + 1 - queue`` (queues counted in batches not yet sent, over the topic's partitions that
  have a leader), so partitions whose leader keeps up get more new batches. When every
  partition's queue has the same length the choice is uniform, exactly as without the option.
- **Availability** (``partitioner_availability_timeout_ms`` > 0, only with the weighting, as
  in Java): a leader that had data ready but could not take a request (no drain) for longer
  than the timeout is left out of the choice until it drains again.

Who feeds what (:class:`AdaptivePartitioning`): the accumulator's ready pass reports the nodes
with data ready and the snapshot it used, its drain reports the nodes that could take a
request (Java: ``Sender`` calling ``updateNodeLatencyStats``); the queue sizes are read from
the accumulator's queues when the sticky partitioner switches, once per batch, never per
record.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from aiokprod.internals.metadata import ClusterSnapshot


class PartitionLoadStats(NamedTuple):
    """A cumulative frequency table over partitions (Java's ``PartitionLoadStats``).

    ``cumulative[i]`` is the sum of the weights of ``partition_ids[0..i]``; the weight of a
    partition is ``max_queue + 1 - its queue``. (A named tuple: one is built per switch.)
    """

    cumulative: tuple[int, ...]
    partition_ids: tuple[int, ...]


def load_stats(queue_sizes: Mapping[int, int], num_partitions: int) -> PartitionLoadStats | None:
    """The weighting table from queue sizes (batches queued) of the partitions to consider.

    Returns None when the choice should be uniform: no partitions, or every partition of the
    topic has the same queue length (Java: ``updatePartitionLoadStats``).
    """
    ids = sorted(queue_sizes)
    return _table(ids, [queue_sizes[p] for p in ids], num_partitions)


def _table(ids: Sequence[int], sizes: list[int], num_partitions: int) -> PartitionLoadStats | None:
    """:func:`load_stats` over ``ids`` and their queue ``sizes`` (same order)."""
    if not sizes:
        return None
    largest = max(sizes)
    if len(sizes) == num_partitions and min(sizes) == largest:
        return None
    plus_one = largest + 1
    return PartitionLoadStats(
        tuple(itertools.accumulate([plus_one - size for size in sizes])), tuple(ids)
    )


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

    def known_nodes(self) -> Iterable[int]:
        """The nodes seen so far."""
        return self._ready_ms.keys()

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


#: ``queue_sizes(topic)``: partition -> batches queued (not yet sent), for partitions with any.
QueueSizes = Callable[[str], Mapping[int, int]]


def _no_queues(topic: str) -> Mapping[int, int]:
    return {}


class AdaptivePartitioning:
    """What the sticky partitioner needs to weigh its next partition, kept up to date.

    Created by the producer when ``partitioner_adaptive_partitioning`` is on and shared by
    the accumulator (which feeds it) and the sticky partitioner (which asks :meth:`choose`).

    Args:
        availability_timeout_ms: ``partitioner_availability_timeout_ms`` (0: no check).
    """

    __slots__ = ("_cluster", "_unavailable", "latency", "queue_sizes")

    def __init__(self, availability_timeout_ms: int = 0) -> None:
        self.latency = NodeLatency(availability_timeout_ms)
        #: Set by the accumulator that owns the queues.
        self.queue_sizes: QueueSizes = _no_queues
        self._cluster: ClusterSnapshot | None = None
        #: Nodes found unavailable at the last update (empty without the timeout).
        self._unavailable: frozenset[int] = frozenset()

    def on_ready(self, cluster: ClusterSnapshot, ready_nodes: Iterable[int], now_ms: int) -> None:
        """The ready pass: these leaders have data to send now (Java's ``readyTimeMs``)."""
        self._cluster = cluster
        if self.latency.availability_timeout_ms > 0:
            for node in ready_nodes:
                self.latency.on_ready(node, now_ms, drained=False)
            self._update_unavailable()

    def on_drain(self, nodes: Iterable[int], now_ms: int) -> None:
        """The drain: these leaders could take a request now (Java's ``drainTimeMs``)."""
        if self.latency.availability_timeout_ms > 0:
            for node in nodes:
                self.latency.on_ready(node, now_ms, drained=True)
            self._update_unavailable()

    def _update_unavailable(self) -> None:
        latency = self.latency
        self._unavailable = frozenset(
            n for n in latency.known_nodes() if not latency.is_available(n)
        )

    @property
    def unavailable_nodes(self) -> frozenset[int]:
        """Leaders the partitioner skips now (availability timeout exceeded)."""
        return self._unavailable

    def choose(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int],
        rng: random.Random,
    ) -> int | None:
        """The weighted next partition of ``topic``, or None for the uniform choice.

        Args:
            topic: the topic the sticky partitioner switches in.
            num_partitions: its partitions.
            available: its partitions with a leader.
            rng: the partitioner's random source.
        """
        queued = self.queue_sizes(topic)
        down = self._unavailable
        cluster = self._cluster
        candidates: Sequence[int] = available
        if down and cluster is not None:
            info = cluster.topics.get(topic)
            leaders = info.leaders if info is not None else ()
            candidates = [p for p in available if p < len(leaders) and leaders[p] not in down]
        elif not queued:
            return None  # every queue is empty: uniform
        get = queued.get
        stats = _table(candidates, [get(p, 0) for p in candidates], num_partitions)
        if stats is None:
            return None
        return next_partition(stats, num_partitions, available, rng)
