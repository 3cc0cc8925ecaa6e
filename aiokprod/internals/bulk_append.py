"""``send_many()``'s column paths: runs of records appended a batch at a time.

Functions over the producer's :class:`~aiokprod.internals.appender.RecordAppender` (they
read its accumulator and clock); ``Producer.send_many`` calls :func:`append_columns`.
Unkeyed values (:func:`append_values`) and serialized keyed columns (:func:`append_keyed`)
go in runs: each
run opens with the appender's one-record path (:meth:`RecordAppender.append`, then
:meth:`RecordAppender.append_new_batch` when a new batch is needed: the partition choice,
memory, sticky accounting and wakeups stay written once, there), then the batch builder's
inner loops add the rest of the run. Values that encode themselves
(:mod:`aiokprod.protocol.encoded`, the Spark writer's Arrow columns) have the rest of each
fresh batch copied from their plan instead (:meth:`RecordBatchBuilder.append_encoded`);
so do keyed columns (their keys hashed by the caller) sent to one partition.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiokprod.internals.accumulator import batch_of_one_size
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import KeyHasher, StickyPartitionState
from aiokprod.internals.serialization import Serializer, serialize_key, serialize_value
from aiokprod.protocol.encoded import EncodableKeys, EncodableValues, EncodedBatches
from aiokprod.protocol.records import BATCH_HEADER_SIZE, NO_LEFTOVER, RecordBatchBuilder
from aiokprod.types import TopicPartition

if TYPE_CHECKING:
    from aiokprod.internals.appender import RecordAppender


def prepare_keyed(
    app: RecordAppender,
    keys: list[Any],
    values: list[Any],
    key_serializer: Serializer | None,
    value_serializer: Serializer | None,
    hasher: KeyHasher,
    num_partitions: int,
) -> list[int] | None:
    """Serialize keyed columns in place and check every size; returns the partitions.

    Everything is checked before anything is queued. None when a key is None (such a
    record is not hashed: the caller sends the call down the per-record path).
    """
    for i, key in enumerate(keys):
        key = keys[i] = serialize_key(key_serializer, key)
        if key is None:
            return None
    limit = app.record_limit
    for i, value in enumerate(values):
        value = values[i] = serialize_value(value_serializer, value)
        size = batch_of_one_size(len(keys[i]), -1 if value is None else len(value), 0)
        if size > limit:
            raise app.too_large(size)
    return hasher.partitions(keys, num_partitions)


async def append_columns(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    keys: list[Any] | EncodableKeys | None,
    values: Iterable[Any],
    *,
    partition: int | None,
    timestamp_ms: int,
    header_bytes: bytes | None,
    info: TopicInfo,
    started_ms: int,
    key_serializer: Serializer | None,
    value_serializer: Serializer | None,
    hasher: KeyHasher | None,
) -> bool:
    """``send_many()``'s column paths through ``app``; False when the records must go one by one.

    Keyed columns take :func:`prepare_keyed` and :func:`append_keyed` when the keys are
    hashed (``hasher``, a built-in partitioner), without a fixed partition, headers or None
    keys; unkeyed ones take :func:`append_values` with a fixed partition or the sticky
    partitioner; a keyed column (:class:`EncodableKeys`) with a fixed partition takes
    :func:`_append_encodable` (and otherwise the lists' path). Anything else (a custom or
    round-robin partitioner, ...) returns False with nothing queued.
    """
    if isinstance(keys, EncodableKeys):
        if (
            partition is not None
            and header_bytes is None
            and not key_serializer
            and not value_serializer
            and isinstance(values, EncodableValues)
            and values.keys is keys
        ):
            await _append_encodable(
                app, bulk, topic, values, partition, timestamp_ms, info, started_ms
            )
            return True
        keys = list(keys)
    if keys is not None:
        if partition is not None or header_bytes is not None or hasher is None:
            return False
        value_list = list(values)
        partitions = prepare_keyed(
            app, keys, value_list, key_serializer, value_serializer, hasher, info.num_partitions
        )
        if partitions is None:
            return False
        await append_keyed(
            app, bulk, topic, keys, value_list, partitions, timestamp_ms, info, started_ms
        )
        return True
    if partition is None and not app.partitions.is_sticky_for_unkeyed:
        return False
    await append_values(
        app,
        bulk,
        topic,
        values,
        value_serializer,
        partition,
        timestamp_ms,
        header_bytes,
        info,
        started_ms,
    )
    return True


async def append_values(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    values: Iterable[Any],
    value_serializer: Serializer | None,
    partition: int | None,
    timestamp_ms: int,
    header_bytes: bytes | None,
    info: TopicInfo,
    started_ms: int,
) -> None:
    """Unkeyed records, one partition at a time (fixed, or the sticky one).

    The partition only changes when a batch fills, so each run opens with the one-record
    path and the builder's inner loop (``append_values``) adds the rest of the batch; the
    sticky partitioner is fed the bytes of the whole run at once.
    """
    if (
        isinstance(values, EncodableValues)
        and values.keys is None  # a keyed column given without its keys: values only
        and header_bytes is None
        and not value_serializer
    ):
        await _append_encodable(app, bulk, topic, values, partition, timestamp_ms, info, started_ms)
        return
    acc = app._acc
    batch_size = acc.batch_size
    tps = app.partitions_of(topic, info.num_partitions)
    yield_at = app.yield_threshold(len(tps))
    headers_size = len(header_bytes) if header_bytes else 0
    largest_value = app.record_limit - batch_of_one_size(-1, 0, headers_size)
    value_sizes = bulk._value_sizes
    remaining: Iterator[Any] = iter(values)
    if value_serializer is not None:
        remaining = (serialize_value(value_serializer, v) for v in remaining)
    pending: Any = NO_LEFTOVER  # a value taken from the iterator and not appended yet
    while True:
        if pending is NO_LEFTOVER:
            pending = next(remaining, NO_LEFTOVER)
            if pending is NO_LEFTOVER:
                return
        if pending is not None and type(pending) is not bytes:
            pending = serialize_value(None, pending)
        size = -1 if pending is None else len(pending)
        if size > largest_value:
            raise app.too_large(batch_of_one_size(-1, size, headers_size))
        batch, _, sticky = await _open_run(
            app,
            bulk,
            topic,
            tps,
            partition,
            timestamp_ms,
            None,
            pending,
            size,
            header_bytes,
            info,
            started_ms,
            yield_at,
        )
        pending = NO_LEFTOVER
        builder = batch.builder
        if builder is None or batch.is_full:
            continue
        before = builder.size_in_bytes
        start = builder.record_count
        if header_bytes is None:
            pending = builder.append_values(
                timestamp_ms, remaining, batch_size, largest_value, value_sizes
            )
        else:
            pending = _append_with_headers(
                builder, timestamp_ms, remaining, header_bytes, batch_size, value_sizes
            )
        _close_run(app, bulk, batch, before, start, sticky, timestamp_ms, info)


async def _open_run(
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


def _close_run(
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


async def _append_encodable(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    column: EncodableValues,
    partition: int | None,
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
) -> None:
    """:func:`append_values` for a column that encodes its own records (protocol.encoded).

    The same runs as there: each opens with the one-record path (the partition choice,
    memory, a new batch, sticky accounting, wakeups); then, if that record began a
    batch, the rest of the batch is copied from the column's plan of fresh batches in
    one piece (the builder checks the batch is in the state the plan assumed), and
    otherwise (a half-full batch) taken record by record as there. A keyed column
    (``column.keys``) comes with its partition: its records, keys and all, go there in
    order.
    """
    acc = app._acc
    batch_size = acc.batch_size
    tps = app.partitions_of(topic, info.num_partitions)
    yield_at = app.yield_threshold(len(tps))
    keys = column.keys
    keyed = keys is not None
    # the most bytes of key and value a record may have (a null key or value counts 0)
    largest = app.record_limit - batch_of_one_size(0, 0, 0)
    value_sizes = bulk._value_sizes
    key_sizes = bulk._key_sizes
    total = len(column)
    if keys is not None:  # keyed records are all checked before any is queued
        j = column.first_larger_than(largest)
        if j >= 0:
            value = column.value(j)
            raise app.too_large(
                batch_of_one_size(len(keys.key(j)), -1 if value is None else len(value), 0)
            )
    plan: EncodedBatches | None = None
    i = 0
    while i < total:
        value = column.value(i)
        size = -1 if value is None else len(value)
        key = None if keys is None else keys.key(i)
        record_bytes = (0 if key is None else len(key)) + (size if size > 0 else 0)
        if record_bytes > largest:
            raise app.too_large(batch_of_one_size(-1 if key is None else len(key), size, 0))
        batch, index, sticky = await _open_run(
            app,
            bulk,
            topic,
            tps,
            partition,
            timestamp_ms,
            key,
            value,
            size,
            None,
            info,
            started_ms,
            yield_at,
        )
        i += 1
        builder = batch.builder
        if builder is None or batch.is_full or i >= total:
            continue
        before = builder.size_in_bytes
        start = builder.record_count
        k = -1
        if index == 0:  # a fresh batch: the plan's batch from this record fits it
            k = plan.batch_at(i - 1) if plan is not None else -1
            if k < 0 or plan is None:
                plan = column.encode_batches(i - 1, batch_size, largest)
                k = plan.batch_at(i - 1)
        if k >= 0 and plan is not None:
            end = plan.firsts[k + 1]
            if builder.append_encoded(
                timestamp_ms,
                plan.rest(k),
                end - i,
                1,
                BATCH_HEADER_SIZE + plan.first_sizes[k],
                batch_size,
                plan.next_sizes[k],
            ):
                value_sizes.extend(plan.value_sizes(i, end))
                if keyed:
                    key_sizes.extend(plan.key_sizes(i, end))
        elif keyed:
            _append_keyed_from(column, builder, i, timestamp_ms, batch_size, largest, bulk)
        else:
            builder.append_values(
                timestamp_ms, column.values_from(i), batch_size, largest, value_sizes
            )
        i += _close_run(app, bulk, batch, before, start, sticky, timestamp_ms, info, keyed)


def _append_keyed_from(
    column: EncodableValues,
    builder: RecordBatchBuilder,
    index: int,
    timestamp_ms: int,
    batch_size: int,
    largest: int,
    bulk: BulkDelivery,
) -> None:
    """A keyed column's records from ``index`` into a half-full batch, one by one."""
    room = batch_size - builder.size_in_bytes
    keys, values = column.records_from(index, room, largest)
    builder.append_keyed(
        timestamp_ms,
        keys,
        values,
        iter(range(len(keys))),
        batch_size,
        bulk._key_sizes,
        bulk._value_sizes,
        array("i"),  # the records stay in the column's order
    )


async def append_keyed(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    keys: list[bytes],
    values: list[bytes | None],
    partitions: list[int],
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
) -> None:
    """Serialized keyed records with their partitions, appended partition by partition.

    Records of one partition keep their input order (all Kafka orders); each run opens
    with the one-record path, then the builder's inner loop (``append_keyed``) fills
    the batch.
    """
    acc = app._acc
    batch_size = acc.batch_size
    tps = app.partitions_of(topic, info.num_partitions)
    # A stable sort: records of one partition stay in input order.
    by_partition = sorted(range(len(keys)), key=partitions.__getitem__)
    yield_at = app.yield_threshold(len(tps))
    bulk._order = order = array("i")
    key_sizes = bulk._key_sizes
    value_sizes = bulk._value_sizes
    run_start = 0
    total = len(by_partition)
    while run_start < total:
        p = partitions[by_partition[run_start]]
        run_end = run_start
        while run_end < total and partitions[by_partition[run_end]] == p:
            run_end += 1
        tp = tps[p]
        app.enlist(tp)
        indexes = iter(by_partition[run_start:run_end])
        run_start = run_end
        pending = next(indexes, -1)
        while pending >= 0:
            i, pending = pending, -1
            key, value = keys[i], values[i]
            opened = app.append(tp, timestamp_ms, key, value, None, None, info)
            if opened is None:
                opened = await app.append_new_batch(
                    tp, timestamp_ms, key, value, None, None, info, started_ms, yield_at
                )
            batch, index = opened
            key_sizes.append(len(key))
            value_sizes.append(-1 if value is None else len(value))
            order.append(i)
            bulk._add_run(batch.result, tp, index, 1, timestamp_ms)
            builder = batch.builder
            if builder is not None and not builder.full:
                start = builder.record_count
                pending = builder.append_keyed(
                    timestamp_ms,
                    keys,
                    values,
                    indexes,
                    batch_size,
                    key_sizes,
                    value_sizes,
                    order,
                )
                added = builder.record_count - start
                if added:
                    bulk._add_run(batch.result, tp, start, added, timestamp_ms)
            if builder is None or builder.full:
                batch.is_full = True
                app.wakeup()
            if pending < 0 and batch.is_full:
                pending = next(indexes, -1)


def _append_with_headers(
    builder: RecordBatchBuilder,
    timestamp_ms: int,
    values: Iterator[Any],
    header_bytes: bytes,
    batch_size: int,
    value_sizes: array[int],
) -> object:
    """``append_values`` for records with headers (one ``try_append`` each); the leftover."""
    for value in values:
        value = serialize_value(None, value)
        if builder.try_append(timestamp_ms, None, value, header_bytes, batch_size) < 0:
            return value
        value_sizes.append(-1 if value is None else len(value))
        if builder.full:
            break
    return NO_LEFTOVER
