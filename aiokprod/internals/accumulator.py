"""RecordAccumulator: per-partition queues of batches, and the ready/drain/expire decisions.

This is the Java client's RecordAccumulator re-thought for one event loop. Appending never
awaits, so it needs no lock: on one loop nothing else runs in the middle of an append. The
only path that waits is reserving ``buffer_memory`` for a new batch, and that wait happens
in the producer before it calls :meth:`RecordAccumulator.append_new_batch`.

Everything here is synchronous and takes the time as an argument; the sender calls
:meth:`ready`, :meth:`drain` and :meth:`expire` on each pass and sleeps for the delay
``ready`` returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from aiokprod.errors import KafkaError
from aiokprod.internals.adaptive import AdaptivePartitioning
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.metadata import NO_LEADER, ClusterSnapshot, TopicInfo
from aiokprod.internals.partitioner import StickyPartitionState
from aiokprod.internals.split import split_batch, split_limit
from aiokprod.protocol.records import (
    BATCH_HEADER_SIZE,
    RECORD_FRAMING_BOUND,
    Compressor,
    RecordBatchBuilder,
)
from aiokprod.types import TopicPartition

#: A batch may be sent once it is older than this (linger), or, after a failure, once its
#: retry backoff has passed.
FOREVER_MS: Final = 2**62

DrainFilter = Callable[[ProducerBatch], bool]

#: The most batches one Produce request carries (besides ``max_request_size``). Writing
#: a request and handling its answer cost per batch; with thousands of partitions queued
#: (a slow broker, a fresh topic) a request of 1 MiB held thousands of small batches and
#: its build and its answer each held the event loop for tens of milliseconds (issue 30).
#: Full batches (16 KiB) fill ``max_request_size`` long before this.
MAX_BATCHES_PER_REQUEST: Final = 128
#: The most batches one sender pass takes, over all nodes (100 brokers could otherwise take
#: 12,800 in one pass); the pass after it takes the rest at once.
MAX_BATCHES_PER_PASS: Final = 256

#: What an append did, as the Java client's ``RecordAppendResult``: the batch, the record's
#: index in it (0: the batch is new), and the bytes the append added (a new batch's header
#: included). Whether the batch is now full is ``batch.is_full``. A plain tuple: this is
#: built once per record.
AppendResult = tuple[ProducerBatch, int, int]


_BATCH_OF_ONE_FRAMING: Final = BATCH_HEADER_SIZE + RECORD_FRAMING_BOUND


def batch_of_one_size(key_size: int, value_size: int, headers_size: int) -> int:
    """The most bytes a record can take in a batch of its own (sizes: -1 for null).

    The one size bound: a record above ``max_request_size`` or ``buffer_memory`` by this
    measure is refused, and a new batch reserves at least this much of ``buffer_memory``.
    ``headers_size`` is the encoded headers' length, 0 for none. Equal to
    ``BATCH_HEADER_SIZE + record_size_upper_bound(...)``, written flat: it runs per record.
    """
    return (
        _BATCH_OF_ONE_FRAMING
        + (key_size if key_size > 0 else 0)
        + (value_size if value_size > 0 else 0)
        + (headers_size or 1)
    )


class ReadyResult:
    """What :meth:`RecordAccumulator.ready` found.

    A plain class, not a dataclass: the compiled build runs a dataclass's generated
    ``__init__`` interpreted, and one is made per sender pass.
    """

    __slots__ = ("next_ready_check_delay_ms", "ready_nodes", "unknown_leader_topics")

    def __init__(self) -> None:
        self.ready_nodes: set[int] = set()
        #: Milliseconds until some not-yet-ready partition may become ready.
        self.next_ready_check_delay_ms: int = FOREVER_MS
        #: Topics with queued batches for a partition whose leader is unknown.
        self.unknown_leader_topics: set[str] = set()


class RecordAccumulator:
    """Queues of open and closed batches per partition, bounded by a :class:`ByteBudget`.

    Args:
        batch_size: close a batch when the next record would exceed this many bytes.
        linger_ms: how long a batch may wait for more records before it is sendable.
        delivery_timeout_ms: a batch still queued this long after creation is expired.
        budget: the ``buffer_memory`` accounting.
        compression: codec id for new batches.
        compressor: compresses a batch's records at close (when ``compression`` != 0).
        keep_handles: keep per-record handles on batches (interceptors need them).
        transactional: batches carry the transactional attribute (a transactional producer).
        adaptive: adaptive partitioning's state, fed by :meth:`ready` and :meth:`drain`
            (``partitioner_adaptive_partitioning``; None when off).
    """

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        delivery_timeout_ms: int,
        budget: ByteBudget,
        compression: int = 0,
        compressor: Compressor | None = None,
        keep_handles: bool = False,
        transactional: bool = False,
        adaptive: AdaptivePartitioning | None = None,
    ) -> None:
        self.batch_size = max(batch_size, 1)
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.budget = budget
        self._compression = compression
        self._compressor = compressor
        self._keep_handles = keep_handles
        self._transactional = transactional
        #: Only partitions with at least one queued batch have an entry, least recently
        #: drained first: a drained partition that still has batches moves to the end, so
        #: draining from the front serves every partition in turn, and a pass stops once
        #: its requests are full instead of looking at every queue (issue 30).
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        #: Every batch not yet completed, queued or in flight (for flush and abort).
        self._incomplete: set[ProducerBatch] = set()
        #: Per topic, how many of its batches are incomplete (a topic with some is in use).
        self._incomplete_topics: dict[str, int] = {}
        #: No queued batch expires before this (a lower bound; see :meth:`expire`).
        self._next_expiry_ms = FOREVER_MS
        #: False when the last :meth:`drain` stopped at MAX_BATCHES_PER_PASS.
        self.drained_all = True
        self._flushes_in_progress = 0
        self._closing = False
        #: Partitions whose leader must not get another request while one is in flight.
        self.muted: set[TopicPartition] = set()
        #: Per topic, the byte size split batches are cut to (see :meth:`split`).
        self._split_bytes: dict[str, int] = {}
        self._batches_created = 0
        #: Called with (topic, now) for every new batch: the topic is in use.
        self.on_new_batch: Callable[[str, int], None] = _ignore
        self.adaptive = adaptive
        if adaptive is not None:
            adaptive.queue_sizes = self.queue_sizes

    # --- appending --------------------------------------------------------------------------

    def try_append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: bytes | None,
        sticky: StickyPartitionState | None = None,
        info: TopicInfo | None = None,
    ) -> AppendResult | None:
        """Append to the partition's open batch; None if a new batch is needed.

        With ``sticky`` (an unkeyed record on the uniform sticky partitioner; ``info`` is its
        topic) the appended bytes are counted towards switching partitions (KIP-794), as the
        Java accumulator feeds ``appendedBytes`` to its built-in partitioner.

        Returns:
            What happened (:data:`AppendResult`), or None when the partition has no open
            batch or the record does not fit (the open batch is then marked full).
        """
        dq = self._queues.get(tp)
        if dq:
            last = dq[-1]
            builder = last.builder
            if builder is not None and not last.is_full:
                index = builder.try_append(timestamp_ms, key, value, headers, self.batch_size)
                if index >= 0:
                    if builder.full:
                        last.is_full = True
                    size = builder.appended_bytes
                    if sticky is not None and info is not None:
                        sticky.produced_bytes += size
                        if sticky.produced_bytes >= sticky.batch_size:
                            sticky.maybe_switch(last.is_full, info.num_partitions, info.available)
                    return last, index, size
                last.is_full = True
        return None

    def open_batch(self, tp: TopicPartition) -> ProducerBatch | None:
        """The partition's open batch, the one :meth:`try_append` appends to (None: none)."""
        dq = self._queues.get(tp)
        if dq:
            last = dq[-1]
            if last.builder is not None and not last.is_full:
                return last
        return None

    def new_batch_size(self, key: bytes | None, value: bytes | None, headers: bytes | None) -> int:
        """Bytes to reserve for a new batch that starts with this record."""
        size = batch_of_one_size(
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            len(headers) if headers else 0,
        )
        return max(self.batch_size, size)

    def append_new_batch(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: bytes | None,
        now_ms: int,
        reserved_bytes: int,
    ) -> AppendResult:
        """Start a batch for ``tp`` with ``reserved_bytes`` of the budget, and append to it.

        The caller reserved the bytes; they are returned to the budget when the batch
        completes (or here at once if another append created a batch in the meantime).
        A new batch's appended bytes include its header, as the Java client counts them.
        """
        appended = self.try_append(tp, timestamp_ms, key, value, headers)
        if appended is not None:
            self.budget.release(reserved_bytes)
            return appended
        builder = self._new_builder()
        batch = ProducerBatch(tp, builder, now_ms, reserved_bytes, self._keep_handles)
        self._batches_created += 1
        batch.order = (self._batches_created,)
        index = builder.try_append(timestamp_ms, key, value, headers, self.batch_size)
        if builder.full:
            batch.is_full = True
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
            self._note_head(batch)
        dq.append(batch)
        self._track(batch)
        self.on_new_batch(tp.topic, now_ms)
        return batch, index, builder.size_in_bytes

    def _track(self, batch: ProducerBatch) -> None:
        self._incomplete.add(batch)
        topic = batch.tp.topic
        self._incomplete_topics[topic] = self._incomplete_topics.get(topic, 0) + 1

    def _untrack(self, batch: ProducerBatch) -> None:
        self._incomplete.discard(batch)
        topic = batch.tp.topic
        left = self._incomplete_topics.get(topic, 0) - 1
        if left > 0:
            self._incomplete_topics[topic] = left
        else:
            self._incomplete_topics.pop(topic, None)

    def _note_head(self, batch: ProducerBatch) -> None:
        """``batch`` is at the head of its queue now: it may expire first."""
        expiry = batch.created_ms + self.delivery_timeout_ms
        if expiry < self._next_expiry_ms:
            self._next_expiry_ms = expiry

    def _new_builder(self) -> RecordBatchBuilder:
        return RecordBatchBuilder(
            compression=self._compression,
            compressor=self._compressor,
            transactional=self._transactional,
        )

    def expedite(self, tp: TopicPartition) -> None:
        """Let the partition's newest batch go without waiting out ``linger_ms``."""
        dq = self._queues.get(tp)
        if dq:
            dq[-1].expedite = True

    # --- sending decisions ------------------------------------------------------------------

    def sendable_now(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s queue is ready without waiting out ``linger_ms``.

        As in :meth:`ready`: an older batch is queued (the one that just filled), the buffer
        has waiters, or a flush or close is in progress.
        """
        dq = self._queues.get(tp)
        return (
            (dq is not None and len(dq) > 1)
            or self.budget.has_waiters
            or self._flushes_in_progress > 0
            or self._closing
        )

    def ready(self, cluster: ClusterSnapshot, now_ms: int) -> ReadyResult:
        """Which leaders have a sendable partition, and when to look again.

        A partition is sendable when its first batch is full (or more are queued), has
        lingered ``linger_ms``, the buffer has waiters, or a flush/close is in progress; and
        it is not backing off after a failure, nor muted. The look stops once every broker
        is ready: with thousands of partitions queued, the first few settle it (issue 30).
        """
        result = ReadyResult()
        ready_nodes = result.ready_nodes
        exhausted = self.budget.has_waiters
        drain_all = exhausted or self._flushes_in_progress > 0 or self._closing
        linger = self.linger_ms
        next_delay = FOREVER_MS
        topics = cluster.topics
        known = cluster.brokers
        brokers = len(known)
        muted = self.muted
        for tp, dq in self._queues.items():
            info = topics.get(tp.topic)
            partition = tp.partition
            if info is None or partition >= info.num_partitions:
                result.unknown_leader_topics.add(tp.topic)
                continue
            leader = info.leaders[partition]
            if leader == NO_LEADER or leader not in known:
                # A leader missing from the brokers list: a partial answer (other topics)
                # named the brokers without it, and this topic kept its old leader. Nothing
                # can connect there; only a refresh of the topic tells where it went (as in
                # the Java client, where such a leader is null).
                result.unknown_leader_topics.add(tp.topic)
                continue
            if leader in ready_nodes or tp in muted:
                continue
            first = dq[0]
            if first.attempts:
                wait_left = first.retry_at_ms - now_ms
                if wait_left > 0:
                    next_delay = min(next_delay, wait_left)
                    continue
            elif not (drain_all or first.is_full or first.expedite or len(dq) > 1):
                wait_left = first.created_ms + linger - now_ms
                if wait_left > 0:
                    next_delay = min(next_delay, wait_left)
                    continue
            ready_nodes.add(leader)
            if len(ready_nodes) >= brokers:
                # Every broker has something to send: the rest can only add to them. Their
                # deadlines do not matter until a request goes out or an answer comes back,
                # and each of those runs another pass.
                break
        result.next_ready_check_delay_ms = next_delay
        if self.adaptive is not None:
            self.adaptive.on_ready(cluster, ready_nodes, now_ms)
        return result

    def drain(
        self,
        cluster: ClusterSnapshot,
        nodes: set[int],
        max_request_bytes: int,
        now_ms: int,
        can_drain: DrainFilter | None = None,
    ) -> dict[int, list[ProducerBatch]]:
        """Take up to ``max_request_bytes`` of batches per node, one batch per partition.

        Partitions are served least recently drained first, and a drained partition with
        more batches goes to the back, so no partition starves when requests fill up; the
        walk stops once every node's request is full (``max_request_bytes``, or
        :data:`MAX_BATCHES_PER_REQUEST`), or after :data:`MAX_BATCHES_PER_PASS` batches in
        all (:attr:`drained_all` is then False: the caller drains again soon). ``can_drain``
        lets idempotence hold back batches that must wait (no producer id yet, or an earlier
        sequence still in flight).
        """
        if self.adaptive is not None:
            self.adaptive.on_drain(nodes, now_ms)
        drained: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        taking = set(nodes)
        topics = cluster.topics
        muted = self.muted
        touched: list[TopicPartition] = []
        self.drained_all = True
        for tp, dq in self._queues.items():
            if len(touched) >= MAX_BATCHES_PER_PASS:
                self.drained_all = False
                break
            info = topics.get(tp.topic)
            partition = tp.partition
            if info is None or partition >= info.num_partitions:
                continue
            leader = info.leaders[partition]
            if leader not in taking or tp in muted:
                continue
            first = dq[0]
            if first.attempts and first.retry_at_ms > now_ms:
                continue
            if can_drain is not None and not can_drain(first):
                continue
            batches = drained.get(leader)
            size = sizes.get(leader, 0)
            # The open batch's size is its uncompressed size: an upper bound of what it
            # will take once closed, so the check never closes a batch it cannot take.
            if batches is not None and (
                size + first.size_in_bytes > max_request_bytes
                or len(batches) >= MAX_BATCHES_PER_REQUEST
            ):
                # This node's request is full; this partition goes first next time.
                taking.discard(leader)
                if not taking:
                    break
                continue
            closed = first.close()
            dq.popleft()
            first.drained_ms = now_ms
            sizes[leader] = size + closed.size_in_bytes
            if batches is None:
                drained[leader] = [first]
            else:
                batches.append(first)
            touched.append(tp)
        queues = self._queues
        for tp in touched:
            dq = queues.pop(tp)
            if dq:
                queues[tp] = dq  # to the back: the others go first next time
                self._note_head(dq[0])
        return drained

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery_timeout_ms``.

        Batches in flight are not touched here: their request is still out, and whether it
        was written is unknown until its response or request timeout. The queues are looked
        at only when the oldest head may have expired (not on every pass).
        """
        if now_ms < self._next_expiry_ms:
            return []
        limit = self.delivery_timeout_ms
        expired: list[ProducerBatch] = []
        empty: list[TopicPartition] = []
        oldest = FOREVER_MS
        for tp, dq in self._queues.items():
            while dq and now_ms - dq[0].created_ms >= limit:
                expired.append(dq.popleft())
            if dq:
                oldest = min(oldest, dq[0].created_ms + limit)
            else:
                empty.append(tp)
        for tp in empty:
            del self._queues[tp]
        self._next_expiry_ms = oldest
        return expired

    def next_expiry_delay_ms(self, now_ms: int) -> int:
        """Milliseconds until the oldest queued batch may reach its delivery timeout."""
        if not self._queues:
            return FOREVER_MS
        return max(0, self._next_expiry_ms - now_ms)

    def reenqueue(self, batch: ProducerBatch, now_ms: int, backoff_ms: int) -> None:
        """Put a failed batch back at the front of its queue, to retry after ``backoff_ms``.

        Several batches of a partition can come back (one failed request, or several);
        they are kept in sequence order with idempotence, in creation order without it, so
        the broker sees them in order again and the head stays the oldest.
        """
        batch.attempts += 1
        batch.retry_at_ms = now_ms + backoff_ms
        batch.in_flight = False
        dq = self._queues.get(batch.tp)
        if dq is None:
            dq = self._queues[batch.tp] = deque()
        dq.insert(_retry_position(dq, batch), batch)
        self._note_head(dq[0])

    # --- splitting (MESSAGE_TOO_LARGE) ------------------------------------------------------

    def split(self, batch: ProducerBatch, now_ms: int) -> list[ProducerBatch]:
        """Cut a batch the broker refused as too large into smaller ones (not queued yet).

        See :func:`aiokprod.internals.split.split_batch`. The cut is at most ``batch_size``
        bytes and half the refused batch; the topic remembers its smallest cut, so later
        refused batches go straight to it. With idempotence the caller stamps the pieces
        (``IdempotenceState.on_split``) before :meth:`put_back_split`.
        """
        topic = batch.tp.topic
        limit = split_limit(batch, self.batch_size, self._split_bytes.get(topic))
        self._split_bytes[topic] = limit
        return split_batch(batch, self._new_builder, limit, now_ms)

    def put_back_split(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        """Queue ``pieces`` where ``batch`` would go back for a retry, and forget ``batch``.

        Its ``buffer_memory`` reservation now belongs to the pieces (see :meth:`split`).
        """
        batch.in_flight = False
        dq = self._queues.get(batch.tp)
        if dq is None:
            dq = self._queues[batch.tp] = deque()
        index = _retry_position(dq, batch)
        for offset, piece in enumerate(pieces):
            dq.insert(index + offset, piece)
            self._track(piece)
        self._untrack(batch)
        if dq:
            self._note_head(dq[0])
        batch.reserved_bytes = 0

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch completed: forget it and return its bytes to the budget."""
        if batch in self._incomplete:
            self._untrack(batch)
            self.budget.release(batch.reserved_bytes)

    # --- lifecycle --------------------------------------------------------------------------

    def begin_flush(self) -> None:
        """Make every queued batch sendable now (until :meth:`end_flush`)."""
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        """Undo one :meth:`begin_flush`."""
        self._flushes_in_progress = max(0, self._flushes_in_progress - 1)

    def begin_close(self) -> None:
        """From now on every queued batch is sendable at once."""
        self._closing = True

    def incomplete_batches(self) -> list[ProducerBatch]:
        """Every batch not yet completed (queued or in flight)."""
        return list(self._incomplete)

    def has_incomplete(self) -> bool:
        """Whether any batch is queued or in flight."""
        return bool(self._incomplete)

    def has_incomplete_for(self, topic: str) -> bool:
        """Whether a batch of ``topic`` is queued or in flight (the topic is in use)."""
        return topic in self._incomplete_topics

    def release_topics(self, topics: list[str]) -> None:
        """Forget what is kept per topic (they idled out; nothing of them is queued)."""
        for topic in topics:
            self._split_bytes.pop(topic, None)
        # A dict keeps its size when emptied: new ones, sized for what is left.
        self._split_bytes = dict(self._split_bytes)
        self._incomplete_topics = dict(self._incomplete_topics)
        self._incomplete = set(self._incomplete)

    def has_undrained(self) -> bool:
        """Whether any batch is still queued."""
        return bool(self._queues)

    def queued_partitions(self) -> int:
        """How many partitions have a batch queued (not in flight)."""
        return len(self._queues)

    def queued_batches(self) -> int:
        """How many batches are queued (not in flight)."""
        return sum(len(dq) for dq in self._queues.values())

    def queue_sizes(self, topic: str) -> dict[int, int]:
        """Batches queued per partition of ``topic`` (partitions with none are left out)."""
        return {tp.partition: len(dq) for tp, dq in self._queues.items() if tp.topic == topic}

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The partition's queued batches, oldest first."""
        dq = self._queues.get(tp)
        return list(dq) if dq else []

    def abort_undrained(self, error: KafkaError) -> list[ProducerBatch]:
        """Fail every queued batch with ``error`` and return them (force close)."""
        aborted: list[ProducerBatch] = []
        for dq in self._queues.values():
            aborted.extend(dq)
        self._queues.clear()
        for batch in aborted:
            batch.fail(error, aborted=True)
            self.deallocate(batch)
        return aborted


def _ignore(topic: str, now_ms: int) -> None:
    return None


def _retry_position(dq: deque[ProducerBatch], batch: ProducerBatch) -> int:
    """Where a batch that comes back for a retry goes in its partition's queue.

    Several batches of a partition can come back (one failed request, or several); they are
    kept in sequence order with idempotence, in creation order without it, so the broker sees
    them in order again and the head stays the oldest.
    """
    if batch.has_sequence:
        for index, queued in enumerate(dq):
            if not queued.has_sequence or queued.base_sequence > batch.base_sequence:
                return index
        return len(dq)
    # Batches of one failed request come back one by one: keep them in creation order (the
    # head is the oldest, which expiry and the partition's order rely on; ``order`` breaks
    # ties within a millisecond and places split pieces). A fresh batch (never sent; split
    # pieces count as sent) comes after every one that comes back.
    key = (batch.created_ms, batch.order)
    for index, queued in enumerate(dq):
        fresh = not queued.attempts and queued.drained_ms < 0
        if fresh or (queued.created_ms, queued.order) > key:
            return index
    return len(dq)
