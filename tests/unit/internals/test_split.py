"""Splitting a batch the broker refused as too large (issue 13, part 2).

The decision (``should_split``), the cut (``split_limit``, ``RecordAccumulator.split``), the
queue (``put_back_split``), the original batch's handles following their pieces
(``BatchResult.follow``), and with idempotence the pieces taking over the refused batch's
sequences, checked against the broker's own producer-state rules (the simulator's
``PartitionLog``, Kafka 4.3's rules). Everything is synchronous; time is passed in.
"""

from __future__ import annotations

from array import array

import pytest

from aiokprod.errors import (
    DeliveryTimeoutError,
    InvalidRecordError,
    NotEnoughReplicasError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    error_for_code,
)
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.batch import SPLIT_OFFSET, DeliveryFuture, FinalState, ProducerBatch
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.sequences import INT32_MAX, Verdict
from aiokprod.internals.split import should_split, split_limit, split_refused
from aiokprod.internals.stats import ProducerStats
from aiokprod.protocol.compression import DECOMPRESSORS, codec_for_name
from aiokprod.protocol.record_reader import Record, read_record_batch
from aiokprod.protocol.records import encode_headers
from aiokprod.testing.sim.log import NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, PartitionLog
from aiokprod.types import UNKNOWN_OFFSET, TopicPartition

from ._helpers import snapshot

TP = TopicPartition("t", 0)
PID = 7000
TOO_LARGE = error_for_code(10)  # MESSAGE_TOO_LARGE, as the sender gets it from a response


def make_acc(
    batch_size: int = 2000, compression: str = "none", buffer_memory: int = 1_000_000
) -> RecordAccumulator:
    codec = codec_for_name(compression)
    return RecordAccumulator(
        batch_size=batch_size,
        linger_ms=5,
        delivery_timeout_ms=120_000,
        budget=ByteBudget(buffer_memory),
        compression=codec.id,
        compressor=codec.compressor() if codec.id else None,
    )


def fill(
    acc: RecordAccumulator, count: int, size: int = 100, now_ms: int = 0, first: int = 0
) -> list[tuple[ProducerBatch, int]]:
    """Append ``count`` records (value ``size`` bytes, some with headers and keys)."""
    where = []
    for i in range(first, first + count):
        value = (b"%05d" % i) * (size // 5)
        key = None if i % 3 else b"k%d" % i
        headers = encode_headers([("h", b"%d" % i)]) if i % 4 == 0 else None
        appended = acc.try_append(TP, 1_000 + i, key, value, headers)
        if appended is None:
            need = acc.new_batch_size(key, value, headers)
            assert acc.budget.try_reserve(need)
            appended = acc.append_new_batch(TP, 1_000 + i, key, value, headers, now_ms, need)
        where.append((appended[0], appended[1]))
    return where


def take_head(acc: RecordAccumulator, now_ms: int = 100) -> ProducerBatch:
    """Drain the partition's head batch as the sender does (closing it)."""
    drained = acc.drain(snapshot({"t": [1]}), {1}, 10_000_000, now_ms)
    (batch,) = drained[1]
    return batch


def values_of(batch: ProducerBatch) -> list[bytes | None]:
    return [r.value for r in read_record_batch(batch.close().data, DECOMPRESSORS).records]


def handle(batch: ProducerBatch, index: int) -> DeliveryFuture:
    return DeliveryFuture(batch.result, index, TP, 1_000 + index, -1, 10)


# --- the decision ----------------------------------------------------------------------------


def test_only_message_too_large_for_several_records_in_time_splits() -> None:
    acc = make_acc()
    fill(acc, 3)
    batch = take_head(acc)
    assert batch.record_count == 3
    assert should_split(batch, TOO_LARGE, 1_000, 120_000)
    assert should_split(batch, RecordTooLargeError("from the broker"), 1_000, 120_000)
    # Other refusals are not a matter of size.
    assert not should_split(batch, error_for_code(18), 1_000, 120_000)  # RECORD_LIST_TOO_LARGE
    assert not should_split(batch, InvalidRecordError(), 1_000, 120_000)
    assert not should_split(batch, NotEnoughReplicasError(), 1_000, 120_000)
    assert not should_split(batch, DeliveryTimeoutError("late"), 1_000, 120_000)
    # Past the delivery timeout, or when stopping by force, the records fail instead.
    assert not should_split(batch, TOO_LARGE, 120_000, 120_000)
    assert not should_split(batch, TOO_LARGE, 1_000, 120_000, forced=True)


def test_a_lone_record_is_not_split() -> None:
    acc = make_acc()
    fill(acc, 1)
    batch = take_head(acc)
    assert not should_split(batch, TOO_LARGE, 1_000, 120_000)


def test_the_cut_halves_is_bounded_by_batch_size_and_remembers_the_smallest() -> None:
    acc = make_acc(batch_size=16384)
    fill(acc, 30, size=500)  # one batch of about 15.8 KB
    batch = take_head(acc)
    size = batch.close().uncompressed_size
    assert split_limit(batch, 16384, None) == size // 2
    assert split_limit(batch, 4000, None) == 4000
    assert split_limit(batch, 16384, 900) == 900


# --- the cut ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_pieces_keep_every_record_in_order_with_keys_headers_timestamps(compression: str) -> None:
    acc = make_acc(batch_size=16384, compression=compression)
    fill(acc, 30, size=500)
    batch = take_head(acc)
    original = read_record_batch(batch.close().data, DECOMPRESSORS).records
    pieces = acc.split(batch, now_ms=200)
    assert len(pieces) >= 2
    limit = split_limit(batch, 16384, None)
    got: list[Record] = []
    for piece in pieces:
        closed = piece.close()
        assert closed.uncompressed_size <= limit or closed.record_count == 1
        decoded = read_record_batch(closed.data, DECOMPRESSORS)
        assert decoded.compression == codec_for_name(compression).id
        got.extend(decoded.records)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp) for r in original
    ]
    # Offsets inside each piece start at 0 again.
    assert read_record_batch(pieces[1].close().data, DECOMPRESSORS).records[0].offset == 0


def test_pieces_are_sealed_keep_the_clock_and_share_the_reservation() -> None:
    acc = make_acc(batch_size=2000)
    fill(acc, 15, size=100, now_ms=10)
    batch = take_head(acc, now_ms=50)
    reserved = batch.reserved_bytes
    pieces = acc.split(batch, now_ms=300)
    assert [p.record_count for p in pieces]
    assert sum(p.record_count for p in pieces) == 15
    assert sum(p.reserved_bytes for p in pieces) == reserved
    for piece in pieces:
        assert piece.is_full
        assert piece.created_ms == 10  # the delivery timeout still counts from the send
        assert piece.attempts == 0  # a split is not a retry
        assert piece.retry_at_ms == 300


def test_repeated_refusals_go_down_to_one_record() -> None:
    acc = make_acc(batch_size=16384)
    fill(acc, 8, size=500)
    queue = [take_head(acc)]
    rounds = 0
    singles: list[ProducerBatch] = []
    while queue:  # the broker refuses everything: every batch of several records splits
        batch = queue.pop(0)
        if batch.record_count == 1:
            singles.append(batch)
            continue
        queue.extend(acc.split(batch, now_ms=0))
        rounds += 1
        assert rounds < 20
    assert [values_of(b)[0] for b in singles] == [(b"%05d" % i) * 100 for i in range(8)]


# --- the queue -------------------------------------------------------------------------------


def test_pieces_go_to_the_head_in_order_and_the_budget_comes_back() -> None:
    acc = make_acc(batch_size=2000, buffer_memory=100_000)
    total = acc.budget.available
    fill(acc, 15, size=100)
    batch = take_head(acc)
    fill(acc, 3, size=100, first=100)  # a fresh batch queued behind
    pieces = acc.split(batch, now_ms=0)
    acc.put_back_split(batch, pieces)
    batch.mark_split(pieces)
    queued = acc.queued(TP)
    assert queued[: len(pieces)] == pieces
    assert queued[-1].attempts == 0
    assert queued[-1] not in pieces
    assert batch not in acc.incomplete_batches()
    assert set(pieces) <= set(acc.incomplete_batches())
    assert batch.final_state is FinalState.SPLIT
    for piece in pieces:
        assert piece.complete(0, -1)
        acc.deallocate(piece)
    acc.deallocate(queued[-1])
    assert acc.budget.available == total


def test_a_retried_batch_of_a_later_request_queues_after_the_pieces() -> None:
    # Without idempotence: creation order among batches that were sent before.
    acc = make_acc(batch_size=1000)
    fill(acc, 20, size=100)
    first = take_head(acc)
    second = take_head(acc)
    pieces = acc.split(first, now_ms=0)
    acc.put_back_split(first, pieces)
    acc.reenqueue(second, now_ms=0, backoff_ms=0)
    queued = acc.queued(TP)
    assert queued[: len(pieces) + 1] == [*pieces, second]
    assert all(b.attempts == 0 and b.drained_ms < 0 for b in queued[len(pieces) + 1 :])


# --- handles follow the pieces ---------------------------------------------------------------


def split_in_accumulator(count: int, size: int = 100) -> tuple[ProducerBatch, list[ProducerBatch]]:
    """One batch of ``count`` records, drained and split (into halves)."""
    acc = make_acc(batch_size=100_000)
    fill(acc, count, size=size)
    batch = take_head(acc)
    pieces = split_refused(batch, acc, None, now_ms=0)
    return batch, pieces


def test_handles_complete_with_their_piece_offsets_once_every_piece_is_done() -> None:
    batch, pieces = split_in_accumulator(9)
    assert len(pieces) >= 2
    futures = [handle(batch, i) for i in range(9)]
    seen: list[int] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result().offset))
    bases = [500 + 100 * k for k in range(len(pieces))]
    for piece, base in zip(pieces[:-1], bases, strict=False):
        piece.complete(base, -1)
        assert not futures[0].done()
        assert not seen
    pieces[-1].complete(bases[-1], 77)  # this topic uses LogAppendTime (say)
    assert all(f.done() for f in futures)
    assert len(seen) == 1
    expected = []
    for piece, base in zip(pieces, bases, strict=True):
        expected += [base + i for i in range(piece.record_count)]
    assert [f.result().offset for f in futures] == expected
    assert futures[-1].result().timestamp_ms == 77
    assert futures[0].result().timestamp_ms == 1_000  # create time of its record
    assert batch.result.base_offset == SPLIT_OFFSET


def test_a_piece_that_fails_fails_only_its_records() -> None:
    batch, pieces = split_in_accumulator(9)
    futures = [handle(batch, i) for i in range(9)]
    pieces[0].fail(RecordTooLargeError("still too large"))
    for k, piece in enumerate(pieces[1:]):
        piece.complete(1000 * (k + 1), -1)
    first = pieces[0].record_count
    for i, future in enumerate(futures):
        if i < first:
            assert isinstance(future.exception(), RecordTooLargeError)
            with pytest.raises(RecordTooLargeError):
                future.result()
        else:
            assert future.exception() is None
            assert future.result().offset >= 1000


def test_all_pieces_failing_fails_the_batch_and_duplicates_give_unknown_offsets() -> None:
    batch, pieces = split_in_accumulator(9)
    for piece in pieces:
        piece.fail(DeliveryTimeoutError("late"))
    assert isinstance(batch.result.error, DeliveryTimeoutError)
    assert isinstance(handle(batch, 8).exception(), DeliveryTimeoutError)

    again, pieces = split_in_accumulator(9)
    for piece in pieces:
        piece.complete(-1, -1)  # DUPLICATE_SEQUENCE_NUMBER: written, offset unknown
    assert handle(again, 4).result().offset == UNKNOWN_OFFSET


def test_a_piece_split_again_resolves_through_both_levels() -> None:
    acc = make_acc(batch_size=100_000)
    fill(acc, 30)
    batch = take_head(acc)
    pieces = split_refused(batch, acc, None, now_ms=0)
    inner = split_refused(pieces[0], acc, None, now_ms=0)
    assert len(inner) >= 2
    for k, piece in enumerate([*inner, *pieces[1:]]):
        piece.complete(10_000 * (k + 1), -1)
    offsets = [handle(batch, i).result().offset for i in range(30)]
    expected = []
    for k, piece in enumerate([*inner, *pieces[1:]]):
        expected += [10_000 * (k + 1) + i for i in range(piece.record_count)]
    assert offsets == expected


def test_send_many_segments_follow_the_pieces() -> None:
    batch, pieces = split_in_accumulator(9)
    bulk = BulkDelivery()
    bulk._add_run(batch.result, TP, 0, 9, 5_000)
    bulk._key_sizes.extend(array("i", [-1] * 9))
    bulk._value_sizes.extend(array("i", [100] * 9))
    assert not bulk.done()
    pieces[0].fail(RecordTooLargeError("still too large"))
    for k, piece in enumerate(pieces[1:]):
        piece.complete(1000 * (k + 1), -1)
    assert bulk.done()
    first = pieces[0].record_count
    assert [p for p, _ in bulk.errors()] == list(range(first))
    ok_batch, ok_pieces = split_in_accumulator(9)
    ok_bulk = BulkDelivery()
    ok_bulk._add_run(ok_batch.result, TP, 0, 9, 5_000)
    ok_bulk._key_sizes.extend(array("i", [-1] * 9))
    ok_bulk._value_sizes.extend(array("i", [100] * 9))
    for k, piece in enumerate(ok_pieces):
        piece.complete(1000 * (k + 1), -1)
    expected = []
    for k, piece in enumerate(ok_pieces):
        expected += [1000 * (k + 1) + i for i in range(piece.record_count)]
    assert [m.offset for m in ok_bulk.metadata()] == expected


# --- idempotence: the pieces take over the sequences -----------------------------------------


def idempotent_setup(
    count: int, batches: int = 1
) -> tuple[RecordAccumulator, IdempotenceState, list[ProducerBatch]]:
    """``batches`` batches of ``count`` records each, stamped and in flight.

    After a 1-record batch acknowledged at sequence 0: the broker has the producer's state,
    so the batches may pipeline (before the first acknowledgement the producer sends one at
    a time, see ``IdempotenceState.can_drain``); the first of them starts at sequence 1.
    """
    acc = make_acc(batch_size=100_000)
    idem = IdempotenceState()
    idem.set_producer_id(PID, 0)
    fill(acc, 1, first=900)
    warm = take_head(acc)
    idem.assign_sequence(warm)
    warm.complete(0, -1)
    idem.on_success(warm)
    acc.deallocate(warm)
    sent = []
    for k in range(batches):
        fill(acc, count, first=k * count)
        assert idem.can_drain(acc.queued(TP)[0])
        batch = take_head(acc)
        idem.assign_sequence(batch)
        batch.in_flight = True
        sent.append(batch)
    return acc, idem, sent


def test_pieces_take_over_the_sequence_range_in_order() -> None:
    acc, idem, (first, second) = idempotent_setup(9, batches=2)
    assert (first.base_sequence, second.base_sequence) == (1, 10)
    first.in_flight = False
    pieces = split_refused(first, acc, idem, now_ms=0)
    seqs = [(p.base_sequence, p.record_count) for p in pieces]
    expected, start = [], 1
    for piece in pieces:
        expected.append((start, piece.record_count))
        start += piece.record_count
    assert seqs == expected
    assert start == 10  # exactly the refused batch's range: the second follows as it was
    for piece in pieces:
        decoded = read_record_batch(piece.close().data)
        assert (decoded.producer_id, decoded.producer_epoch) == (PID, 0)
        assert decoded.base_sequence == piece.base_sequence
    assert idem.unacked(TP) == [*pieces, second]
    # Only the lowest sequence may go: the first piece, then the next once it is acked.
    assert idem.can_drain(pieces[0])
    assert not idem.can_drain(pieces[1])


def test_a_later_batch_refused_out_of_order_is_retried_not_failed() -> None:
    acc, idem, (first, second) = idempotent_setup(9, batches=2)
    first.in_flight = False
    split_refused(first, acc, idem, now_ms=0)
    second.in_flight = False
    assert idem.on_error(second, OutOfOrderSequenceNumberError()) is Verdict.RETRY
    assert not idem.epoch_bump_required


def test_a_split_at_the_sequence_wrap_wraps_the_pieces_too() -> None:
    acc, idem, (batch,) = idempotent_setup(9)
    batch.stamp(PID, 0, INT32_MAX - 3)
    batch.in_flight = False
    pieces = split_refused(batch, acc, idem, now_ms=0)
    starts = [p.base_sequence for p in pieces]
    assert starts[0] == INT32_MAX - 3
    assert all(0 <= s <= INT32_MAX for s in starts)
    assert any(s < INT32_MAX - 3 for s in starts[1:])  # the range crossed the wrap


def test_with_the_brokers_rules_every_record_lands_once_in_order() -> None:
    """Two batches in flight; the broker refuses the first as too large.

    The log (the simulator's copy of Kafka 4.3's producer-state rules) has earlier records
    of this producer, so it answers the second batch OUT_OF_ORDER_SEQUENCE_NUMBER; the
    pieces then fill the first batch's sequences and the second goes after them.
    """
    log = PartitionLog()
    acc = make_acc(batch_size=1000)
    idem = IdempotenceState()
    idem.set_producer_id(PID, 0)
    # An earlier batch of this producer, acknowledged: the broker has its state.
    fill(acc, 1, size=100, first=900)
    warm = take_head(acc)
    idem.assign_sequence(warm)
    assert log.append(read_record_batch(warm.close().data)).error_code == NONE
    idem.on_success(warm)
    fill(acc, 18, size=100)
    batches = []
    for _ in range(2):
        assert idem.can_drain(acc.queued(TP)[0])
        batch = take_head(acc)
        idem.assign_sequence(batch)
        batches.append(batch)
    first, second = batches
    # The broker: the first is too large (nothing appended), the second is out of order.
    answer = log.append(read_record_batch(second.close().data))
    assert answer.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    fresh = len(acc.queued(TP))  # batches not sent yet (no sequence)
    pieces = split_refused(first, acc, idem, now_ms=0)
    assert idem.on_error(second, OutOfOrderSequenceNumberError()) is Verdict.RETRY
    acc.reenqueue(second, now_ms=0, backoff_ms=0)
    sent = 0
    while acc.queued(TP):
        head = acc.queued(TP)[0]
        assert idem.can_drain(head)
        batch = take_head(acc)
        idem.assign_sequence(batch)  # a fresh batch gets the next sequences
        result = log.append(read_record_batch(batch.close().data))
        assert result.error_code == NONE
        assert not result.duplicate
        idem.on_success(batch)
        batch.complete(result.base_offset, -1)
        sent += 1
    assert sent == len(pieces) + 1 + fresh
    values = [r.value for r in log.records()]
    assert values == [(b"%05d" % i) * 20 for i in (900, *range(18))]
    futures = [handle(first, i) for i in range(first.record_count)]
    assert [f.result().offset for f in futures] == list(range(1, 1 + first.record_count))


def test_splits_are_counted_in_the_java_metric() -> None:
    stats = ProducerStats()
    assert stats.producer_metrics(0)["batch-split-total"] == 0
    batch, _ = split_in_accumulator(9)
    stats.on_split(batch, 10)
    stats.on_split(batch, 20)
    metrics = stats.producer_metrics(30)
    assert metrics["batch-split-total"] == 2
    assert metrics["batch-split-rate"] > 0


def test_a_piece_refused_again_goes_back_before_its_siblings_without_sequences() -> None:
    # All created in the same millisecond: only the creation order tells them apart.
    acc = make_acc(batch_size=100_000)
    fill(acc, 12)
    batch = take_head(acc)
    fill(acc, 2, first=100)
    later = take_head(acc)
    pieces = split_refused(batch, acc, None, now_ms=0)
    acc.reenqueue(later, now_ms=0, backoff_ms=0)  # a later request comes back meanwhile
    head = take_head(acc)
    assert head is pieces[0]
    inner = split_refused(head, acc, None, now_ms=0)
    assert acc.queued(TP) == [*inner, *pieces[1:], later]


def test_a_piece_in_flight_is_not_renumbered_when_its_sibling_expires() -> None:
    """Found by the random schedules of test_idempotence.py (with splits).

    The pieces share their creation time: one may expire in the queue while the piece before
    it is in flight. A later batch refused OUT_OF_ORDER_SEQUENCE_NUMBER then does not prove
    the gap yet (the broker may still append the piece in flight): no epoch bump, which
    would renumber that piece under its outstanding request, until it is acknowledged.
    """
    acc, idem, (first, later) = idempotent_setup(6, batches=2)
    first.in_flight = False
    pieces = split_refused(first, acc, idem, now_ms=0)
    head, sibling = pieces[0], pieces[1]
    assert take_head(acc) is head
    head.in_flight = True  # its request is out
    assert acc.queued(TP)[0] is sibling
    expired = acc.expire(now_ms=200_000)
    assert expired == pieces[1:]  # the head is in flight: the sender scans it separately
    for piece in expired:
        piece.fail(DeliveryTimeoutError("late"))
        idem.on_expired(piece, outstanding=False)
    later.in_flight = False
    assert idem.on_error(later, OutOfOrderSequenceNumberError()) is Verdict.RETRY
    assert not idem.epoch_bump_required
    head.in_flight = False
    idem.on_success(head)
    assert idem.on_error(later, OutOfOrderSequenceNumberError()) is Verdict.RETRY
    assert idem.epoch_bump_required  # now the gap is proven: the expired pieces
