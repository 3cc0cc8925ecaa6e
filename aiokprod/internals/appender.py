"""RecordAppender: the one path from serialized records into the accumulator.

Everything a record goes through after ``send()`` or ``send_many()`` has checked its
arguments lives here, written once: the size bound (:func:`batch_of_one_size`, which serves
the ``max_request_size`` check and the ``buffer_memory`` reservation alike), the partition
choice, the append into the partition's open batch, the wait for memory when a new batch is
needed, the KIP-794 sticky partitioner fed with the bytes each append actually added (as the
Java client feeds it ``RecordAppendResult.appendedBytes``), and the sender's wakeup when a
batch is new or full.

The per-record path is split in two so that the common case never awaits: :meth:`append`
is synchronous and fills the open batch; only when a new batch is needed does the caller
await :meth:`append_new_batch`. The bulk paths (:meth:`append_values`,
:meth:`append_keyed`) open each run of records with those same two calls, then let the
batch builder's inner loops add the rest of the run; values that encode themselves
(:mod:`aiokprod.protocol.encoded`, the Spark writer's Arrow columns) have the rest of each
fresh batch copied from their plan instead (:meth:`RecordBatchBuilder.append_encoded`).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from aiokprod.clock import Clock
from aiokprod.errors import KafkaError, RecordTooLargeError
from aiokprod.internals.accumulator import RecordAccumulator, batch_of_one_size
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import KeyHasher, PartitionChooser, StickyPartitionState
from aiokprod.internals.serialization import Serializer, serialize_key, serialize_value
from aiokprod.protocol.encoded import EncodableValues, EncodedBatches
from aiokprod.protocol.records import BATCH_HEADER_SIZE, NO_LEFTOVER, RecordBatchBuilder
from aiokprod.types import TopicPartition

#: The most partitions with a queued batch before a new batch gives the sender its turn
#: (:meth:`RecordAppender.yield_threshold`): a Produce request's fixed cost is then spread
#: over up to 16 batches (with many partitions, :data:`MAX_HOLD_MS` usually comes first).
MAX_BATCHES_BEFORE_YIELD: Final = 16

#: The longest a run of appends keeps the event loop before a new batch gives it up (a
#: turn for the sender and the loop's other tasks, whatever is queued). A task woken by a
#: timer needs two turns to run, so it waits up to about twice this (measured, a tight loop
#: of 100 B records: 2.5 ms at the median with 6 partitions, 5 ms with 1,000; a turn at
#: every batch gave 0.6 ms).
MAX_HOLD_MS: Final = 2


class RecordAppender:
    """Appends serialized records to the accumulator (see the module docstring).

    Args:
        accumulator: the batches.
        budget: ``buffer_memory``.
        partitions: the partitioner for unkeyed records (and custom strategies).
        record_limit: the largest record, ``min(max_request_size, buffer_memory)``.
        max_block_ms: how long a send may wait for metadata and memory together.
        max_request_size: reported in the too-large error.
        clock: the producer's clock.
        check_running: raises if the producer stopped meanwhile (after every await).
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        budget: ByteBudget,
        partitions: PartitionChooser,
        *,
        record_limit: int,
        max_block_ms: int,
        max_request_size: int,
        clock: Clock,
        check_running: Callable[[], None],
    ) -> None:
        self._acc = accumulator
        self._budget = budget
        self.partitions = partitions
        self.record_limit = record_limit
        #: ``key_size + value_size + headers_size`` up to this cannot exceed ``record_limit``
        #: (``batch_of_one_size`` adds at most its framing plus 3): the per-record check
        #: compares against it and computes the exact bound only above it.
        self.fast_size_limit = record_limit - batch_of_one_size(0, 0, 0) - 2
        self._max_block_ms = max_block_ms
        self._max_request_size = max_request_size
        self._clock = clock
        self._check_running = check_running
        #: Wakes the sender (a new or full batch); set once the sender exists.
        self.wakeup: Callable[[], None] = _no_wakeup
        #: ``schedule(now_ms, delay_ms)``: a pass is needed by then (the sender's timer moves
        #: if it sleeps longer; no extra pass as with ``wakeup``).
        self.schedule: Callable[[int, int], None] = _no_schedule
        #: A transactional producer's partitions join the transaction before their first
        #: record is appended (protocol 1: AddPartitionsToTxn); the send path sets it.
        self.enlist: Callable[[TopicPartition], None] = _no_enlist
        self._tps: dict[str, tuple[TopicPartition, ...]] = {}
        #: When a new batch last gave the loop a turn (see :data:`MAX_HOLD_MS`).
        self._turn_ms = clock.monotonic_ms()

    # --- shared pieces ----------------------------------------------------------------------

    def too_large(self, size: int) -> KafkaError:
        """The error for a record of ``size`` bytes (see :func:`batch_of_one_size`)."""
        return RecordTooLargeError(
            f"the record is {size} bytes when serialized, larger than max_request_size "
            f"({self._max_request_size}) or buffer_memory ({self._budget.total})"
        )

    def partitions_of(self, topic: str, num_partitions: int) -> tuple[TopicPartition, ...]:
        """The topic's partitions as TopicPartition objects (cached: no per-record objects)."""
        tps = self._tps.get(topic)
        if tps is None or len(tps) != num_partitions:
            tps = self._tps[topic] = tuple(TopicPartition(topic, p) for p in range(num_partitions))
        return tps

    def release_topics(self, topics: list[str]) -> None:
        """Forget what is kept per topic (they idled out of the view, issue 30)."""
        for topic in topics:
            self._tps.pop(topic, None)
        self._tps = dict(self._tps)  # a dict keeps its size when emptied: a new one
        self.partitions.release_topics(topics)

    # --- one record -------------------------------------------------------------------------

    def append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: bytes | None,
        sticky: StickyPartitionState | None,
        info: TopicInfo,
    ) -> tuple[ProducerBatch, int] | None:
        """Append to the partition's open batch; None when a new batch is needed.

        ``send()`` inlines this (it runs per record): the accumulator's ``try_append``
        with the sticky accounting, then a wakeup if the batch filled up.
        """
        appended = self._acc.try_append(tp, timestamp_ms, key, value, headers, sticky, info)
        if appended is None:
            return None
        batch = appended[0]
        if batch.is_full:
            self.wakeup()
        return batch, appended[1]

    async def append_new_batch(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: bytes | None,
        sticky: StickyPartitionState | None,
        info: TopicInfo,
        started_ms: int,
        yield_at: int = 1,
    ) -> tuple[ProducerBatch, int]:
        """Reserve memory for a new batch and append the record to it.

        The wait for memory is bounded by what is left of ``max_block_ms`` since
        ``started_ms`` (all of it when -1: metadata did not have to be awaited).
        ``yield_at``: the sender gets its turn (below) once this many partitions have a
        queued batch (:meth:`yield_threshold`), twice as many batches are queued, or
        :data:`MAX_HOLD_MS` have passed since the last turn taken here.
        """
        acc = self._acc
        # A checkpoint at a new batch (never per record) while other batches wait: lets the
        # sender run between the batches of a tight send loop. Nothing is queued yet, so
        # cancellation here loses nothing. With nothing queued (a lone send_and_wait) there
        # is nothing for the sender to do, and the record goes out without the extra turn.
        # The turn waits until a request's worth is queued: the sender drains one batch per
        # partition per request (as Java's does), so a turn after every batch made Produce
        # requests of one or two batches where they can carry one per partition, and the
        # sender and the broker pay per request (unkeyed 100 B records, 6 partitions: about
        # 4.5 times the requests of a keyed load of the same size, docs/benchmarks.md). The
        # batch count bounds the wait when records crowd into fewer partitions, and
        # MAX_HOLD_MS how long the loop's other tasks wait.
        if acc.has_undrained() and (
            yield_at <= 1
            or acc.queued_partitions() >= yield_at
            or acc.queued_batches() >= 2 * yield_at
            or self._clock.monotonic_ms() - self._turn_ms >= MAX_HOLD_MS
        ):
            await asyncio.sleep(0)
            self._turn_ms = self._clock.monotonic_ms()
            self._check_running()
        appended = acc.try_append(tp, timestamp_ms, key, value, headers)
        if appended is None:
            need = acc.new_batch_size(key, value, headers)
            if not self._budget.try_reserve(need):
                spent_ms = self._clock.monotonic_ms() - started_ms if started_ms >= 0 else 0
                self.wakeup()  # memory is short: drain everything now
                await self._budget.reserve(need, max(self._max_block_ms - spent_ms, 0) / 1000)
                try:
                    self._check_running()
                except BaseException:
                    self._budget.release(need)
                    raise
            appended = acc.append_new_batch(
                tp, timestamp_ms, key, value, headers, self._clock.monotonic_ms(), need
            )
        batch, index, size = appended
        if sticky is not None:
            sticky.on_append(
                size,
                batch.is_full,
                info.num_partitions,
                info.available,
                self._clock.monotonic_ms(),
            )
        if batch.is_full or acc.sendable_now(tp):
            self.wakeup()
        else:
            # The new batch is ready when it has lingered: the sender must look by then.
            self.schedule(batch.created_ms, acc.linger_ms)
        return batch, index

    # --- many records -----------------------------------------------------------------------

    def yield_threshold(self, num_partitions: int) -> int:
        """Partitions with a queued batch before a new batch gives the sender its turn.

        A batch per partition of the topic (a Produce request takes one per partition), but
        no more than a request can hold (``max_request_size // batch_size``) nor
        :data:`MAX_BATCHES_BEFORE_YIELD`: with a thousand partitions a tight send loop still
        lets the sender (and the loop's other tasks) run every few milliseconds.
        """
        per_request = max(self._max_request_size // max(self._acc.batch_size, 1), 1)
        return max(min(num_partitions, per_request, MAX_BATCHES_BEFORE_YIELD), 1)

    def prepare_keyed(
        self,
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
        limit = self.record_limit
        for i, value in enumerate(values):
            value = values[i] = serialize_value(value_serializer, value)
            size = batch_of_one_size(len(keys[i]), -1 if value is None else len(value), 0)
            if size > limit:
                raise self.too_large(size)
        return hasher.partitions(keys, num_partitions)

    async def append_columns(
        self,
        bulk: BulkDelivery,
        topic: str,
        keys: list[Any] | None,
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
        """``send_many()``'s column paths; False when the records must go one by one.

        Keyed columns take :meth:`append_keyed` when the keys are hashed (``hasher``, a
        built-in partitioner), without a fixed partition, headers or None keys; unkeyed ones
        take :meth:`append_values` with a fixed partition or the sticky partitioner. Anything
        else (a custom or round-robin partitioner, ...) returns False with nothing queued.
        """
        if keys is not None:
            if partition is not None or header_bytes is not None or hasher is None:
                return False
            value_list = list(values)
            partitions = self.prepare_keyed(
                keys, value_list, key_serializer, value_serializer, hasher, info.num_partitions
            )
            if partitions is None:
                return False
            await self.append_keyed(
                bulk, topic, keys, value_list, partitions, timestamp_ms, info, started_ms
            )
            return True
        if partition is None and not self.partitions.is_sticky_for_unkeyed:
            return False
        await self.append_values(
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
        self,
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
        if isinstance(values, EncodableValues) and header_bytes is None and not value_serializer:
            await self._append_encodable(
                bulk, topic, values, partition, timestamp_ms, info, started_ms
            )
            return
        acc = self._acc
        batch_size = acc.batch_size
        tps = self.partitions_of(topic, info.num_partitions)
        yield_at = self.yield_threshold(len(tps))
        headers_size = len(header_bytes) if header_bytes else 0
        largest_value = self.record_limit - batch_of_one_size(-1, 0, headers_size)
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
                raise self.too_large(batch_of_one_size(-1, size, headers_size))
            batch, _, sticky = await self._open_run(
                bulk,
                topic,
                tps,
                partition,
                timestamp_ms,
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
            self._close_run(bulk, batch, before, start, sticky, timestamp_ms, info)

    async def _open_run(
        self,
        bulk: BulkDelivery,
        topic: str,
        tps: tuple[TopicPartition, ...],
        partition: int | None,
        timestamp_ms: int,
        value: bytes | None,
        size: int,
        header_bytes: bytes | None,
        info: TopicInfo,
        started_ms: int,
        yield_at: int,
    ) -> tuple[ProducerBatch, int, StickyPartitionState | None]:
        """A run's first unkeyed record, the one-record way (sticky counts it there).

        The partition (fixed, or the sticky one), then its open batch or a new one.
        Returns the batch, the record's index in it, and the sticky state (None: fixed).
        """
        if partition is not None:
            p, sticky = partition, None
        else:
            p, sticky = self.partitions.choose(topic, None, len(tps), info.available)
        tp = tps[p]
        self.enlist(tp)
        opened = self.append(tp, timestamp_ms, None, value, header_bytes, sticky, info)
        if opened is None:
            opened = await self.append_new_batch(
                tp, timestamp_ms, None, value, header_bytes, sticky, info, started_ms, yield_at
            )
        batch, index = opened
        bulk._add(batch.result, tp, index, -1, size, timestamp_ms)
        return batch, index, sticky

    def _close_run(
        self,
        bulk: BulkDelivery,
        batch: ProducerBatch,
        before: int,
        start: int,
        sticky: StickyPartitionState | None,
        timestamp_ms: int,
        info: TopicInfo,
    ) -> int:
        """Account for a run's bulk append; returns how many records it added.

        ``before`` and ``start`` are the batch's bytes and records before it: the bulk
        delivery counts what was added, a full batch wakes the sender, and sticky is fed
        the bytes.
        """
        builder = batch.builder
        if builder is None:  # pragma: no cover - the caller appended to it
            return 0
        added = builder.record_count - start
        if added:
            bulk._extend_last(added, timestamp_ms)
        if builder.full:
            batch.is_full = True
            self.wakeup()
        if sticky is not None:
            sticky.on_append(
                builder.size_in_bytes - before,
                batch.is_full,
                info.num_partitions,
                info.available,
                self._clock.monotonic_ms(),
            )
        return added

    async def _append_encodable(
        self,
        bulk: BulkDelivery,
        topic: str,
        column: EncodableValues,
        partition: int | None,
        timestamp_ms: int,
        info: TopicInfo,
        started_ms: int,
    ) -> None:
        """:meth:`append_values` for a column that encodes its own records (protocol.encoded).

        The same runs as there: each opens with the one-record path (the partition choice,
        memory, a new batch, sticky accounting, wakeups); then, if that record began a
        batch, the rest of the batch is copied from the column's plan of fresh batches in
        one piece (the builder checks the batch is in the state the plan assumed), and
        otherwise (a half-full batch) taken record by record as there.
        """
        acc = self._acc
        batch_size = acc.batch_size
        tps = self.partitions_of(topic, info.num_partitions)
        yield_at = self.yield_threshold(len(tps))
        largest_value = self.record_limit - batch_of_one_size(-1, 0, 0)
        value_sizes = bulk._value_sizes
        total = len(column)
        plan: EncodedBatches | None = None
        i = 0
        while i < total:
            value = column.value(i)
            size = -1 if value is None else len(value)
            if size > largest_value:
                raise self.too_large(batch_of_one_size(-1, size, 0))
            batch, index, sticky = await self._open_run(
                bulk,
                topic,
                tps,
                partition,
                timestamp_ms,
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
                    plan = column.encode_batches(i - 1, batch_size, largest_value)
                    k = plan.batch_at(i - 1)
            if k < 0 or plan is None:
                builder.append_values(
                    timestamp_ms, column.values_from(i), batch_size, largest_value, value_sizes
                )
            else:
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
            i += self._close_run(bulk, batch, before, start, sticky, timestamp_ms, info)

    async def append_keyed(
        self,
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
        acc = self._acc
        batch_size = acc.batch_size
        tps = self.partitions_of(topic, info.num_partitions)
        # A stable sort: records of one partition stay in input order.
        by_partition = sorted(range(len(keys)), key=partitions.__getitem__)
        yield_at = self.yield_threshold(len(tps))
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
            self.enlist(tp)
            indexes = iter(by_partition[run_start:run_end])
            run_start = run_end
            pending = next(indexes, -1)
            while pending >= 0:
                i, pending = pending, -1
                key, value = keys[i], values[i]
                opened = self.append(tp, timestamp_ms, key, value, None, None, info)
                if opened is None:
                    opened = await self.append_new_batch(
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
                    self.wakeup()
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


def _no_schedule(now_ms: int, delay_ms: int) -> None:
    return None


def _no_enlist(tp: TopicPartition) -> None:
    pass


def _no_wakeup() -> None:
    return None
