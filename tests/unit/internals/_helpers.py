"""Builders shared by the core unit tests (cluster snapshots, accumulators, batches)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.metadata import BrokerNode, ClusterSnapshot, TopicInfo
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.types import TopicPartition


def snapshot(
    topics: Mapping[str, Sequence[int]], brokers: Sequence[int] = (1, 2, 3)
) -> ClusterSnapshot:
    """A cluster view: ``{"topic": [leader of p0, leader of p1, ...]}`` (-1: no leader)."""
    nodes = {n: BrokerNode(n, f"broker{n}", 9090 + n) for n in brokers}
    infos = {
        name: TopicInfo(name, tuple(leaders), (0,) * len(leaders))
        for name, leaders in topics.items()
    }
    return ClusterSnapshot.build(nodes, infos)


def accumulator(
    *,
    batch_size: int = 1000,
    linger_ms: int = 10,
    delivery_timeout_ms: int = 1000,
    buffer_memory: int = 1_000_000,
) -> RecordAccumulator:
    return RecordAccumulator(
        batch_size=batch_size,
        linger_ms=linger_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        budget=ByteBudget(buffer_memory),
    )


def append(
    acc: RecordAccumulator,
    tp: TopicPartition,
    value: bytes = b"v" * 30,
    now_ms: int = 0,
    key: bytes | None = None,
    timestamp_ms: int = 1_000,
) -> tuple[ProducerBatch, int, bool]:
    """Append like the producer does: the open batch, else a new one with reserved bytes.

    Returns the batch, the record's index in it, and whether a new batch was created.
    """
    appended = acc.try_append(tp, timestamp_ms, key, value, None)
    if appended is not None:
        return appended[0], appended[1], False
    need = acc.new_batch_size(key, value, None)
    assert acc.budget.try_reserve(need), "test budget too small"
    batch, index, _ = acc.append_new_batch(tp, timestamp_ms, key, value, None, now_ms, need)
    return batch, index, True


def new_batch(tp: TopicPartition, records: int = 1, now_ms: int = 0) -> ProducerBatch:
    """A stand-alone batch (not in any accumulator) with ``records`` small records."""
    builder = RecordBatchBuilder()
    for i in range(records):
        builder.try_append(1000, None, b"r%d" % i)
    return ProducerBatch(tp, builder, now_ms, reserved_bytes=0)
