"""``send_many()``'s runs, and the columns that encode their own records (protocol.encoded).

A *run* is what one bulk append adds to one batch: :func:`open_run` appends its first
record the one-record way (:meth:`RecordAppender.append`, then
:meth:`RecordAppender.append_new_batch` when a new batch is needed: the partition choice,
``buffer_memory``, the size limits, sticky accounting and wakeups stay written once,
there); the caller adds the rest of the batch; :func:`close_run` accounts for it.

Columns that encode themselves (:class:`~aiokprod.protocol.encoded.EncodableValues`, the
Spark writer's Arrow columns) add the rest of each batch by copying it from their plan
(:meth:`~aiokprod.protocol.records.RecordBatchBuilder.append_encoded`, which checks that
the batch is in the state the plan assumed): of a fresh batch from the plan they have, of
a half-full one from a plan made for it (its records, bytes and base timestamp):

- :func:`append_encodable`: unkeyed values (to a fixed partition or the sticky one), or a
  keyed column sent to one partition;
- :func:`append_keyed_columns`: a keyed column ordered by partition, the partitions'
  batches appended in turn (a batch of one partition, then one of the next, ...): the
  sender finds a batch of every partition queued, and each Produce request carries one per
  partition, as with records that arrive in no particular order. One plan covers every
  partition (its batches end where a partition's records do), the partitions' open
  batches included: their rest is appended first, with no await in between; a partition
  whose records went elsewhere than planned gets a plan of its own.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Final

from aiokprod.internals.accumulator import batch_of_one_size
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import StickyPartitionState
from aiokprod.protocol.encoded import EncodableValues, EncodedBatches
from aiokprod.protocol.records import BATCH_HEADER_SIZE
from aiokprod.types import TopicPartition

if TYPE_CHECKING:
    from aiokprod.internals.appender import RecordAppender

#: The key size of an unkeyed record (-1), repeated by ``*`` for a run of them.
_NO_KEYS: Final = array("i", (-1,))


async def open_run(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    tps: tuple[TopicPartition, ...],
    partition: int | None,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    size: int,
    header_bytes: bytes | None,
    info: TopicInfo,
    started_ms: int,
    yield_at: int,
) -> tuple[ProducerBatch, int, StickyPartitionState | None]:
    """A run's first record, the one-record way (sticky counts it there).

    The partition (fixed, or the sticky one: unkeyed records only), then its open batch
    or a new one. Returns the batch, the record's index in it, and the sticky state (None:
    fixed).
    """
    if partition is not None:
        p, sticky = partition, None
    else:
        p, sticky = app.partitions.choose(topic, None, len(tps), info.available)
    tp = tps[p]
    app.enlist(tp)
    opened = app.append(tp, timestamp_ms, key, value, header_bytes, sticky, info)
    if opened is None:
        opened = await app.append_new_batch(
            tp, timestamp_ms, key, value, header_bytes, sticky, info, started_ms, yield_at
        )
    batch, index = opened
    bulk._add(batch.result, tp, index, -1 if key is None else len(key), size, timestamp_ms)
    return batch, index, sticky


def close_run(
    app: RecordAppender,
    bulk: BulkDelivery,
    batch: ProducerBatch,
    before: int,
    start: int,
    sticky: StickyPartitionState | None,
    timestamp_ms: int,
    info: TopicInfo,
    keyed: bool = False,
) -> int:
    """Account for a run's bulk append; returns how many records it added.

    ``before`` and ``start`` are the batch's bytes and records before it: the bulk
    delivery counts what was added (``keyed``: their key sizes are in already), a full
    batch wakes the sender, and sticky is fed the bytes.
    """
    builder = batch.builder
    if builder is None:  # pragma: no cover - the caller appended to it
        return 0
    added = builder.record_count - start
    if added:
        bulk._extend_last(added, timestamp_ms, keyed)
    if builder.full:
        batch.is_full = True
        app.wakeup()
    if sticky is not None:
        sticky.on_append(
            builder.size_in_bytes - before,
            batch.is_full,
            info.num_partitions,
            info.available,
            app._clock.monotonic_ms(),
        )
    return added


class _Column:
    """Records ``start`` to ``stop - 1`` of a column on their way into batches.

    ``next`` is the next record to append; ``plan`` the plan its batches come from (shared
    by all partitions of a column until one of them needs its own).
    """

    __slots__ = ("column", "next", "partition", "plan", "stop")

    def __init__(
        self, column: EncodableValues, partition: int | None, start: int, stop: int
    ) -> None:
        self.column = column
        self.partition = partition
        self.next = start
        self.stop = stop
        self.plan: EncodedBatches | None = None


def check_sizes(app: RecordAppender, column: EncodableValues) -> int:
    """Refuse a column holding a record too large; returns the most bytes of key and value.

    (A null key or value counts 0.) Keyed records are all checked before any is queued.
    """
    largest = app.record_limit - batch_of_one_size(0, 0, 0)
    keys = column.keys
    if keys is not None:
        j = column.first_larger_than(largest)
        if j >= 0:
            value = column.value(j)
            key_size = len(keys.key(j))
            raise app.too_large(batch_of_one_size(key_size, -1 if value is None else len(value), 0))
    return largest


async def append_encodable(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    column: EncodableValues,
    partition: int | None,
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
) -> None:
    """A column's records, run after run.

    Unkeyed records go to ``partition`` or the sticky one, keyed ones (``column.keys``) to
    ``partition``, in order.
    """
    if column.keys is not None and partition is None:
        raise ValueError("a keyed column needs its partition")  # pragma: no cover - caller
    largest = check_sizes(app, column)
    tps = app.partitions_of(topic, info.num_partitions)
    yield_at = app.yield_threshold(len(tps))
    state = _Column(column, partition, 0, len(column))
    while state.next < state.stop:
        await _run(app, bulk, topic, tps, state, timestamp_ms, info, started_ms, yield_at, largest)


async def append_keyed_columns(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    column: EncodableValues,
    runs: list[tuple[int, int, int]],
    order: array[int],
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
    largest: int,
) -> None:
    """A keyed column ordered by partition, a batch of each partition in turn.

    ``runs`` holds ``(partition, start, stop)`` of each partition's records in ``column``,
    ``order`` the input position of each record (see the module docstring; the records
    were checked already: ``largest`` is :func:`check_sizes`'s answer).
    """
    tps = app.partitions_of(topic, info.num_partitions)
    yield_at = app.yield_threshold(len(tps))
    states = [_Column(column, partition, start, stop) for partition, start, stop in runs]
    bulk._order = appended = array("i")
    # One plan for all, continuing the partitions' open batches: their rest first.
    acc = app._acc
    batch_size = acc.batch_size
    open_batches = {
        s.next: acc.open_batch(tps[p]) for s in states if (p := s.partition) is not None
    }
    opens = {
        index: (builder.record_count, builder.size_in_bytes, timestamp_ms - builder.base_timestamp)
        for index, batch in open_batches.items()
        if batch is not None and (builder := batch.builder) is not None
    }
    plan = column.encode_batches(states[0].next, batch_size, largest, -1, opens)
    for state in states:
        state.plan = plan
        batch = open_batches.get(state.next)
        k = plan.continuation_at(state.next)
        if batch is None or k < 0 or state.partition is None:
            continue
        app.enlist(tps[state.partition])
        start = state.next
        if _append_planned(app, bulk, batch, plan, k, timestamp_ms, True):
            state.next = plan.firsts[k + 1]
            appended.extend(order[start : state.next])
    states = [state for state in states if state.next < state.stop]
    while states:
        for state in states:
            start = state.next
            await _run(
                app, bulk, topic, tps, state, timestamp_ms, info, started_ms, yield_at, largest
            )
            appended.extend(order[start : state.next])
        states = [state for state in states if state.next < state.stop]


async def _run(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    tps: tuple[TopicPartition, ...],
    state: _Column,
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
    yield_at: int,
    largest: int,
) -> None:
    """One run of a column: its next record the one-record way, then the rest of the batch.

    The rest of the batch is copied from a plan in one piece: the plan's batch from that
    record if it began a batch, or a plan that continues the half-full batch it went into.
    """
    column = state.column
    keys = column.keys
    i = state.next
    value = column.value(i)
    size = -1 if value is None else len(value)
    key = None if keys is None else keys.key(i)
    if (0 if key is None else len(key)) + (size if size > 0 else 0) > largest:
        raise app.too_large(batch_of_one_size(-1 if key is None else len(key), size, 0))
    batch, index, sticky = await open_run(
        app,
        bulk,
        topic,
        tps,
        state.partition,
        timestamp_ms,
        key,
        value,
        size,
        None,
        info,
        started_ms,
        yield_at,
    )
    i = state.next = i + 1
    builder = batch.builder
    if builder is None or batch.is_full or i >= state.stop:
        return
    batch_size = app._acc.batch_size
    before = builder.size_in_bytes
    plan = state.plan
    if index == 0:  # a fresh batch: the plan's batch from this record fits it
        k = plan.batch_at(i - 1) if plan is not None else -1
        if k < 0 or plan is None:
            # A first plan covers the other partitions too; a later one only this one's.
            stop = -1 if plan is None else state.stop
            plan = state.plan = column.encode_batches(i - 1, batch_size, largest, stop)
            k = plan.batch_at(i - 1)
    else:  # a half-full batch: a plan that continues it (and the fresh ones after it)
        k = plan.continuation_at(i) if plan is not None else -1
        if k < 0 or plan is None:
            stop = -1 if plan is None else state.stop
            delta = timestamp_ms - builder.base_timestamp
            opens = {i: (builder.record_count, builder.size_in_bytes, delta)}
            plan = state.plan = column.encode_batches(i, batch_size, largest, stop, opens)
            k = plan.continuation_at(i)
    if k >= 0 and _append_planned(app, bulk, batch, plan, k, timestamp_ms, keys is not None):
        state.next = plan.firsts[k + 1]
    if sticky is not None:
        sticky.on_append(
            builder.size_in_bytes - before,
            batch.is_full,
            info.num_partitions,
            info.available,
            app._clock.monotonic_ms(),
        )


def _append_planned(
    app: RecordAppender,
    bulk: BulkDelivery,
    batch: ProducerBatch,
    plan: EncodedBatches,
    k: int,
    timestamp_ms: int,
    keyed: bool,
) -> bool:
    """Planned batch ``k`` into ``batch``: a fresh batch's rest, or what continues it.

    The builder checks that the batch is in the state the plan assumed (its first record
    alone, or the records, bytes and base timestamp of the open batch the plan continues);
    if so the bulk delivery counts the records and a full batch wakes the sender. Returns
    whether the records were appended.
    """
    builder = batch.builder
    if builder is None:  # pragma: no cover - an open batch has its builder
        return False
    opened = plan.opened(k)
    first = plan.firsts[k]
    end = plan.firsts[k + 1]
    if opened is None:  # fresh: the first record is in the batch already
        start = first + 1
        expect_count, expect_size, timestamp_delta = 1, BATCH_HEADER_SIZE + plan.first_sizes[k], 0
    else:
        start = first
        expect_count, expect_size, timestamp_delta = opened
    count = end - start
    if not builder.append_encoded(
        timestamp_ms,
        plan.rest(k),
        count,
        expect_count,
        expect_size,
        app._acc.batch_size,
        plan.next_sizes[k],
        timestamp_delta,
    ):
        return False
    if count:
        bulk._value_sizes.extend(plan.value_sizes(start, end))
        if keyed:
            bulk._key_sizes.extend(plan.key_sizes(start, end))
        bulk._add_run(batch.result, batch.tp, expect_count, count, timestamp_ms)
        if not keyed:
            bulk._key_sizes += _NO_KEYS * count
    if builder.full:
        batch.is_full = True
        app.wakeup()
    return True
