"""``send_many()``'s column paths: runs of records appended a batch at a time.

Functions over the producer's :class:`~aiokprod.internals.appender.RecordAppender` (they
read its accumulator and clock); ``Producer.send_many`` calls :func:`append_columns`.
Unkeyed values (:func:`append_values`) and serialized keyed columns (:func:`append_keyed`)
go in runs: each
run opens with the appender's one-record path (:meth:`RecordAppender.append`, then
:meth:`RecordAppender.append_new_batch` when a new batch is needed: the partition choice,
memory, sticky accounting and wakeups stay written once, there), then the batch builder's
inner loops add the rest of the run. Columns that encode themselves
(:mod:`aiokprod.protocol.encoded`, the Spark writer's Arrow columns, keyed or not) have the
rest of each fresh batch copied from their plan instead (:mod:`.bulk_columns`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiokprod.internals.accumulator import batch_of_one_size
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.bulk_columns import (
    append_encodable,
    append_keyed_columns,
    check_sizes,
    close_run,
    open_run,
)
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import KeyHasher
from aiokprod.internals.serialization import Serializer, serialize_key, serialize_value
from aiokprod.protocol.encoded import EncodableKeys, EncodableValues
from aiokprod.protocol.records import NO_LEFTOVER, RecordBatchBuilder

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
    partitioner. A keyed column (:class:`EncodableKeys`, the keys of ``values``) takes
    :func:`_append_keyed_column`, or else the lists' path. Anything else (a custom or
    round-robin partitioner, ...) returns False with nothing queued.
    """
    if isinstance(keys, EncodableKeys):
        if (
            header_bytes is None
            and not key_serializer
            and not value_serializer
            and isinstance(values, EncodableValues)
            and values.keys is keys
            and await _append_keyed_column(
                app, bulk, topic, values, partition, timestamp_ms, info, started_ms, hasher
            )
        ):
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
        await append_encodable(app, bulk, topic, values, partition, timestamp_ms, info, started_ms)
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
        batch, _, sticky = await open_run(
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
        close_run(app, bulk, batch, before, start, sticky, timestamp_ms, info)


async def _append_keyed_column(
    app: RecordAppender,
    bulk: BulkDelivery,
    topic: str,
    column: EncodableValues,
    partition: int | None,
    timestamp_ms: int,
    info: TopicInfo,
    started_ms: int,
    hasher: KeyHasher | None,
) -> bool:
    """A keyed column: to ``partition``, or split by the Java partition of each key.

    Without a partition, only when the partitioner hashes keys with murmur2 (``hasher``)
    and the column can split itself by it (:meth:`EncodableValues.split_by_murmur2`);
    False (nothing queued) otherwise. Every record is checked before any is queued.
    """
    if partition is not None:
        await append_encodable(app, bulk, topic, column, partition, timestamp_ms, info, started_ms)
        return True
    if hasher is None or not hasher.java_compatible:
        return False
    largest = check_sizes(app, column)
    split = column.split_by_murmur2(info.num_partitions)
    if split is None:
        return False
    order, ordered, runs = split
    await append_keyed_columns(
        app, bulk, topic, ordered, runs, order, timestamp_ms, info, started_ms, largest
    )
    return True


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
