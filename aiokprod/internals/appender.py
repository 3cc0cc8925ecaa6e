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
await :meth:`append_new_batch`. ``send_many()``'s column paths
(:mod:`aiokprod.internals.bulk_append`) open each run of records with those same two calls,
then let the batch builder's inner loops add the rest of the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from aiokprod.clock import Clock
from aiokprod.errors import KafkaError, RecordTooLargeError
from aiokprod.internals.accumulator import RecordAccumulator, batch_of_one_size
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import PartitionChooser, StickyPartitionState
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

    def yield_threshold(self, num_partitions: int) -> int:
        """Partitions with a queued batch before a new batch gives the sender its turn.

        A batch per partition of the topic (a Produce request takes one per partition), but
        no more than a request can hold (``max_request_size // batch_size``) nor
        :data:`MAX_BATCHES_BEFORE_YIELD`: with a thousand partitions a tight send loop still
        lets the sender (and the loop's other tasks) run every few milliseconds.
        """
        per_request = max(self._max_request_size // max(self._acc.batch_size, 1), 1)
        return max(min(num_partitions, per_request, MAX_BATCHES_BEFORE_YIELD), 1)

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


def _no_schedule(now_ms: int, delay_ms: int) -> None:
    return None


def _no_enlist(tp: TopicPartition) -> None:
    pass


def _no_wakeup() -> None:
    return None
