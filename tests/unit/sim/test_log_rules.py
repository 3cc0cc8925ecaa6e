"""The simulated broker's producer-state rules are Kafka's (the simulator must be honest)."""

from __future__ import annotations

from aiokprod.protocol.record_reader import RecordBatch, read_record_batch
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.testing.sim.log import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    NUM_BATCHES_TO_RETAIN,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PartitionLog,
)


def batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> RecordBatch:
    builder = RecordBatchBuilder()
    for v in values:
        builder.try_append(1_000, None, v)
    closed = builder.close()
    closed.stamp(pid, epoch, seq)
    return read_record_batch(closed.data)


def test_a_duplicate_returns_the_original_offset_and_appends_nothing() -> None:
    log = PartitionLog()
    assert log.append(batch(7, 0, 0, [b"a", b"b"])).base_offset == 0
    assert log.append(batch(7, 0, 2, [b"c"])).base_offset == 2
    again = log.append(batch(7, 0, 0, [b"a", b"b"]))
    assert (again.error_code, again.base_offset, again.duplicate) == (NONE, 0, True)
    assert [r.value for r in log.records()] == [b"a", b"b", b"c"]


def test_only_the_last_five_batches_are_deduplicated() -> None:
    log = PartitionLog()
    for i in range(NUM_BATCHES_TO_RETAIN + 1):
        assert log.append(batch(7, 0, i, [b"x%d" % i])).error_code == NONE
    oldest = log.append(batch(7, 0, 0, [b"x0"]))
    assert oldest.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    newest_dup = log.append(batch(7, 0, 1, [b"x1"]))
    assert newest_dup.duplicate
    assert newest_dup.base_offset == 1


def test_a_partial_overlap_is_not_a_duplicate() -> None:
    log = PartitionLog()
    log.append(batch(7, 0, 0, [b"a", b"b"]))
    assert log.append(batch(7, 0, 1, [b"b"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_lower_epoch_is_rejected() -> None:
    log = PartitionLog()
    log.append(batch(7, 3, 0, [b"a"]))
    assert log.append(batch(7, 2, 1, [b"b"])).error_code == INVALID_PRODUCER_EPOCH


def test_a_gap_is_out_of_order() -> None:
    log = PartitionLog()
    log.append(batch(7, 0, 0, [b"a"]))
    assert log.append(batch(7, 0, 2, [b"c"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert len(log.records()) == 1


def test_a_new_epoch_must_start_at_sequence_zero() -> None:
    log = PartitionLog()
    log.append(batch(7, 0, 0, [b"a"]))
    assert log.append(batch(7, 1, 1, [b"b"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(batch(7, 1, 0, [b"b"])).error_code == NONE
    # the old epoch's batches are forgotten: a retry under epoch 0 is now fenced
    assert log.append(batch(7, 0, 0, [b"a"])).error_code == INVALID_PRODUCER_EPOCH


def test_without_state_any_sequence_is_accepted() -> None:
    log = PartitionLog()
    assert log.append(batch(9, 0, 42, [b"a"])).error_code == NONE
    log.expire_producer(9)
    assert log.append(batch(9, 0, 7, [b"b"])).error_code == NONE


def test_a_truncation_rebuilds_the_state_from_the_remaining_batches() -> None:
    log = PartitionLog()
    log.append(batch(7, 0, 0, [b"a"]), replicated=True)
    log.append(batch(7, 0, 1, [b"b"]), replicated=False)
    assert log.truncate_unreplicated() == 1
    assert [r.value for r in log.records()] == [b"a"]
    assert log.next_offset == 1
    # the lost batch's successor is now out of order; a resend of the lost one is accepted
    assert log.append(batch(7, 0, 2, [b"c"])).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    resent = log.append(batch(7, 0, 1, [b"b"]))
    assert (resent.error_code, resent.base_offset, resent.duplicate) == (NONE, 1, False)
