"""ProducerBatch, its shared completion (BatchResult), and the per-record DeliveryFuture.

As in the Java client (ProducerBatch, ProduceRequestResult, FutureRecordMetadata), a batch has
one completion object shared by all its records; each record's handle only stores its index
and sizes and computes ``base_offset + index`` when asked. No asyncio future exists per record,
and one per batch is created only if someone awaits before the batch completes.

A batch the broker refuses as too large (MESSAGE_TOO_LARGE) is split into smaller batches
(:meth:`ProducerBatch.mark_split`); its result then *follows* theirs: it completes once every
piece has, and each record's offset, append time and error come from its piece. The handles
given out for the original batch stay valid and need not know.
"""

from __future__ import annotations

import asyncio
import enum
from bisect import bisect_right
from collections.abc import Callable, Generator
from typing import Any, Final, TypeVar

from aiokprod.errors import KafkaError
from aiokprod.logs import get_logger
from aiokprod.protocol.records import ClosedBatch, RecordBatchBuilder
from aiokprod.types import UNKNOWN_OFFSET, RecordMetadata, TopicPartition

_T = TypeVar("_T")

#: ``BatchResult.base_offset`` of a batch that was split (at least one of its pieces was
#: acknowledged): each record's offset comes from its piece (:meth:`BatchResult.position`).
SPLIT_OFFSET: Final = -2

log = get_logger("aiokprod.batch")


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FinalState(enum.Enum):
    """How a batch ended; a batch ends once."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"
    #: Refused as too large and split: its pieces carry its records on (its result follows).
    SPLIT = "split"


class _Split:
    """The pieces a split batch's result follows: each piece's first index and result."""

    __slots__ = ("count", "remaining", "results", "starts")

    def __init__(self, starts: list[int], results: list[BatchResult], count: int) -> None:
        self.starts = starts
        self.results = results
        self.count = count
        self.remaining = len(results)

    def locate(self, index: int) -> tuple[BatchResult, int]:
        """The piece holding record ``index`` of the original batch, and its index there."""
        k = bisect_right(self.starts, index) - 1
        return self.results[k], index - self.starts[k]


def _piece_done(parent: BatchResult) -> None:
    parent._on_piece_done()


class BatchResult:
    """The outcome shared by every record of one batch.

    Attributes:
        done: whether the batch completed (either way).
        base_offset: the first record's offset, or -1 (acks=0, or failed).
        log_append_time_ms: the broker's append time, -1 unless the topic uses LogAppendTime.
        error: the exception every record fails with, or None on success.
        record_errors: per-record exceptions (by index) when the broker rejected only some
            records of the batch (INVALID_RECORD), or when some pieces of a split batch
            failed; those records fail with their own error.
    """

    __slots__ = (
        "_callbacks",
        "_split",
        "base_offset",
        "done",
        "error",
        "log_append_time_ms",
        "record_errors",
    )

    def __init__(self) -> None:
        self.done = False
        self.base_offset = UNKNOWN_OFFSET
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self.record_errors: dict[int, BaseException] | None = None
        # Flat pairs: [callback, argument, callback, argument, ...]. No closure or tuple per
        # record: a per-record callback costs two list slots, and no object the garbage
        # collector must track (with a million records pending, that is most of its cost).
        self._callbacks: list[Any] | None = None
        self._split: _Split | None = None

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        """Record success and wake everyone waiting; a second completion is ignored."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self._finish()

    def fail(
        self, error: BaseException, record_errors: dict[int, BaseException] | None = None
    ) -> None:
        """Record failure and wake everyone waiting; a second completion is ignored."""
        if self.done:
            return
        self.error = error
        self.record_errors = record_errors
        self._finish()

    def follow(self, pieces: list[tuple[int, BatchResult]], count: int) -> None:
        """Complete once every piece has: ``(first index, result)`` of each, in order.

        ``count`` is the number of records. A record's outcome is its piece's for its index
        there (:meth:`position`, :meth:`record_error`); pieces may be split again.
        """
        if self.done or not pieces:
            return
        self._split = _Split([start for start, _ in pieces], [r for _, r in pieces], count)
        for _, piece in pieces:
            piece.add_callback(_piece_done, self)

    def _on_piece_done(self) -> None:
        split = self._split
        if split is None or self.done:  # pragma: no cover - only pieces call this
            return
        split.remaining -= 1
        if split.remaining:
            return
        # Every piece is done: note the records that failed (only failures cost a loop).
        errors: dict[int, BaseException] = {}
        ends = [*split.starts[1:], split.count]
        for start, end, piece in zip(split.starts, ends, split.results, strict=True):
            if piece.error is None and not piece.record_errors:
                continue
            for j in range(end - start):
                error = piece.record_error(j)
                if error is not None:
                    errors[start + j] = error
        if len(errors) < split.count:
            self.base_offset = SPLIT_OFFSET
        else:
            self.error = errors[0]
        self.record_errors = errors or None
        self._finish()

    def record_error(self, index: int) -> BaseException | None:
        """The error record ``index`` failed with, None if it was acknowledged (once done)."""
        record_errors = self.record_errors
        if record_errors:
            own = record_errors.get(index)
            if own is not None:
                return own
        return self.error

    def position(self, index: int) -> tuple[int, int]:
        """``(offset, log append time)`` of acknowledged record ``index`` (-1: unknown)."""
        base = self.base_offset
        if base >= 0:
            return base + index, self.log_append_time_ms
        split = self._split
        if base == SPLIT_OFFSET and split is not None:
            piece, local = split.locate(index)
            return piece.position(local)
        return UNKNOWN_OFFSET, self.log_append_time_ms

    def _finish(self) -> None:
        self.done = True
        callbacks = self._callbacks
        if callbacks:
            self._callbacks = None
            for i in range(0, len(callbacks), 2):
                try:
                    callbacks[i](callbacks[i + 1])
                except Exception:  # a user's callback must not break the sender
                    log.exception("delivery callback raised")

    async def wait(self) -> None:
        """Wait until the batch completes (returns at once if it has).

        Each waiter gets a future of its own, resolved by a completion callback: cancelling
        one waiter cancels nothing shared with the others (no shield needed).
        """
        if self.done:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.add_callback(_resolve, waiter)
        await waiter

    def add_callback(self, callback: Callable[[_T], object], arg: _T) -> None:
        """Run ``callback(arg)`` when the batch completes (at once if it has)."""
        if self.done:
            try:
                callback(arg)
            except Exception:  # same treatment as callbacks run at completion
                log.exception("delivery callback raised")
            return
        callbacks = self._callbacks
        if callbacks is None:
            self._callbacks = [callback, arg]
        else:
            callbacks.append(callback)
            callbacks.append(arg)


# RecordMetadata is a frozen dataclass: its generated __init__ sets each field through
# object.__setattr__, interpreted (about 1 us). The fields' own slot descriptors set them
# directly; record_metadata() makes what RecordMetadata(...) makes, for half of that
# (tests/unit/internals/test_batch.py compares the two, field by field).
_new_metadata: Final = object.__new__
_set_topic: Final = RecordMetadata.__dict__["topic"].__set__
_set_partition: Final = RecordMetadata.__dict__["partition"].__set__
_set_offset: Final = RecordMetadata.__dict__["offset"].__set__
_set_timestamp: Final = RecordMetadata.__dict__["timestamp_ms"].__set__
_set_key_size: Final = RecordMetadata.__dict__["serialized_key_size"].__set__
_set_value_size: Final = RecordMetadata.__dict__["serialized_value_size"].__set__


def record_metadata(
    topic: str, partition: int, offset: int, timestamp_ms: int, key_size: int, value_size: int
) -> RecordMetadata:
    """``RecordMetadata(topic, partition, offset, timestamp_ms, key_size, value_size)``."""
    metadata: RecordMetadata = _new_metadata(RecordMetadata)
    _set_topic(metadata, topic)
    _set_partition(metadata, partition)
    _set_offset(metadata, offset)
    _set_timestamp(metadata, timestamp_ms)
    _set_key_size(metadata, key_size)
    _set_value_size(metadata, value_size)
    return metadata


class DeliveryFuture:
    """The result of one ``send()``: await it for the :class:`RecordMetadata`.

    Awaiting never cancels the delivery: once ``send()`` has returned, the record is in the
    producer's hands and will be acknowledged or fail on its own (``cancel()`` returns False,
    like the Java client's). Several tasks may await the same handle.
    """

    __slots__ = (
        "_index",
        "_key_size",
        "_metadata",
        "_result",
        "_timestamp_ms",
        "_value_size",
        "tp",
    )

    def __init__(
        self,
        result: BatchResult,
        index: int,
        tp: TopicPartition,
        timestamp_ms: int,
        key_size: int,
        value_size: int,
    ) -> None:
        self._result = result
        self._index = index
        self.tp = tp
        self._timestamp_ms = timestamp_ms
        self._key_size = key_size
        self._value_size = value_size
        self._metadata: RecordMetadata | None = None

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        result = self._result
        if not result.done:
            # BatchResult.wait(), inlined: a future of this waiter's own, no coroutine.
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            result.add_callback(_resolve, waiter)
            yield from waiter
        return self.result()

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._result.done

    def cancel(self) -> bool:
        """Cannot un-send a record: always False (the delivery goes on)."""
        return False

    def cancelled(self) -> bool:
        """Always False; see :meth:`cancel`."""
        return False

    def exception(self) -> BaseException | None:
        """The error the record failed with, or None if it was acknowledged.

        Raises:
            asyncio.InvalidStateError: the record is not done yet.
        """
        result = self._result
        if not result.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if result.record_errors:
            own = result.record_errors.get(self._index)
            if own is not None:
                return own
        return result.error

    def result(self) -> RecordMetadata:
        """The record's metadata.

        Raises:
            asyncio.InvalidStateError: the record is not done yet.
            KafkaError: the error the record failed with.
        """
        metadata = self._metadata
        if metadata is not None:
            return metadata
        error = self.exception()
        if error is not None:
            raise error
        result = self._result
        base = result.base_offset
        append_ms = result.log_append_time_ms
        if base >= 0:
            offset = base + self._index
        elif base == UNKNOWN_OFFSET:
            offset = UNKNOWN_OFFSET
        else:  # split: the record's piece knows (SPLIT_OFFSET)
            offset, append_ms = result.position(self._index)
        timestamp = append_ms if append_ms >= 0 else self._timestamp_ms
        metadata = self._metadata = record_metadata(
            self.tp.topic,
            self.tp.partition,
            offset,
            timestamp,
            self._key_size,
            self._value_size,
        )
        return metadata

    def add_done_callback(self, callback: Callable[[DeliveryFuture], None]) -> None:
        """Call ``callback(self)`` once the record is acknowledged or failed.

        The callback runs on the event loop right when the broker's answer is processed (or
        at once if the record is done); it must be quick and must not block.
        """
        self._result.add_callback(callback, self)

    def __repr__(self) -> str:
        state = "pending"
        if self._result.done:
            state = "failed" if self.exception() is not None else "done"
        return f"<DeliveryFuture {self.tp.topic}-{self.tp.partition}#{self._index} {state}>"


class ProducerBatch:
    """Records for one partition, sent together in one Produce request.

    A batch is open (``builder`` set) until it is drained; then ``closed`` holds its bytes.
    Idempotence fields are assigned at the first drain and kept across retries; only an
    epoch bump for a partition whose batches provably were not appended renumbers them
    (``sequence_reset`` is then set).
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "closed",
        "compressing",
        "created_ms",
        "drained_ms",
        "expedite",
        "final_state",
        "handles",
        "in_flight",
        "is_full",
        "not_appended",
        "order",
        "producer_epoch",
        "producer_id",
        "reserved_bytes",
        "result",
        "retry_at_ms",
        "sequence_reset",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        builder: RecordBatchBuilder,
        now_ms: int,
        reserved_bytes: int,
        keep_handles: bool = False,
    ) -> None:
        self.tp = tp
        self.builder: RecordBatchBuilder | None = builder
        self.closed: ClosedBatch | None = None
        self.result = BatchResult()
        self.created_ms = now_ms
        self.drained_ms = -1
        self.retry_at_ms = 0
        self.attempts = 0
        self.reserved_bytes = reserved_bytes
        self.is_full = False
        #: Send without waiting out linger_ms (a send_and_wait() record is in it).
        self.expedite = False
        self.in_flight = False
        #: Its records are being compressed in a worker thread; not drainable until done.
        self.compressing = False
        self.final_state: FinalState | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        #: Renumbered under a new epoch after a sequence gap (Java: "reopened").
        self.sequence_reset = False
        #: Refused with OUT_OF_ORDER_SEQUENCE_NUMBER behind a gap: certainly not appended.
        self.not_appended = False
        #: Per-record handles, kept only when interceptors need them at completion.
        self.handles: list[DeliveryFuture] | None = [] if keep_handles else None
        #: Where its records come in the partition's order, for retries without sequences:
        #: ``(n,)`` for the accumulator's n-th batch; a split batch's pieces extend it with
        #: their index, so they sort between it and the next batch.
        self.order: tuple[int, ...] = ()

    @property
    def record_count(self) -> int:
        """Records in the batch."""
        if self.closed is not None:
            return self.closed.record_count
        return self.builder.record_count if self.builder is not None else 0

    @property
    def size_in_bytes(self) -> int:
        """Bytes the batch takes now (open: uncompressed estimate; closed: on the wire)."""
        if self.closed is not None:
            return self.closed.size_in_bytes
        return self.builder.size_in_bytes if self.builder is not None else 0

    @property
    def has_sequence(self) -> bool:
        """Whether an idempotent sequence was assigned (at its first drain)."""
        return self.base_sequence >= 0

    def close(self) -> ClosedBatch:
        """Finish the records section (compressing it) once; later calls return the same."""
        closed = self.closed
        if closed is None:
            builder = self.builder
            if builder is None:  # pragma: no cover - a batch is created with a builder
                raise KafkaError("batch has neither a builder nor closed bytes")
            closed = self.closed = builder.close()
            self.builder = None
        return closed

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotence fields (and the CRC) of the closed batch."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.close().stamp(producer_id, producer_epoch, base_sequence)

    def complete(self, base_offset: int, log_append_time_ms: int) -> bool:
        """Mark success; False if the batch had already ended."""
        if self.final_state is not None:
            return False
        self.final_state = FinalState.SUCCEEDED
        self.result.succeed(base_offset, log_append_time_ms)
        return True

    def fail(
        self,
        error: BaseException,
        record_errors: dict[int, BaseException] | None = None,
        *,
        aborted: bool = False,
    ) -> bool:
        """Mark failure; False if the batch had already ended."""
        if self.final_state is not None:
            return False
        self.final_state = FinalState.ABORTED if aborted else FinalState.FAILED
        self.result.fail(error, record_errors)
        return True

    def mark_split(self, pieces: list[ProducerBatch]) -> None:
        """This batch was split into ``pieces`` (its records, in order): it ends here.

        Its result follows the pieces' (see :meth:`BatchResult.follow`), so the handles given
        out for its records complete when their piece does, with the piece's offsets.
        """
        self.final_state = FinalState.SPLIT
        starts: list[tuple[int, BatchResult]] = []
        start = 0
        for piece in pieces:
            starts.append((start, piece.result))
            start += piece.record_count
        self.result.follow(starts, start)

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={self.record_count} "
            f"attempts={self.attempts} seq={self.base_sequence} state={self.final_state}>"
        )
