"""One partition's sequences: the arithmetic at the Int32 wrap, and error_verdict's cases.

The verdicts in their context (draining, gaps, epoch bumps, a broker model) are tested
through IdempotenceState in test_idempotence.py.
"""

from __future__ import annotations

from aiokprod.errors import (
    DuplicateSequenceNumberError,
    KafkaConnectionError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    UnknownProducerIdError,
)
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.sequences import (
    INT32_MAX,
    PartitionSequences,
    Verdict,
    error_verdict,
    increment_sequence,
    seq_after,
)
from aiokprod.types import TopicPartition

from ._helpers import new_batch

TP = TopicPartition("t", 0)
PID = 4000


def stamped(state: PartitionSequences, sequence: int, records: int = 1) -> ProducerBatch:
    batch = new_batch(TP, records)
    batch.stamp(state.producer_id, state.producer_epoch, sequence)
    state.in_flight.append(batch)
    return batch


def test_increment_sequence_wraps_past_int32_max() -> None:
    assert increment_sequence(0, 1) == 1
    assert increment_sequence(10, 5) == 15
    assert increment_sequence(INT32_MAX - 1, 1) == INT32_MAX
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1  # MAX-1, MAX, 0 -> next is 1
    assert increment_sequence(INT32_MAX - 4, 5) == 0


def test_seq_after_allows_for_the_wrap() -> None:
    assert seq_after(5, 4)
    assert not seq_after(4, 5)
    assert not seq_after(7, 7)
    assert seq_after(0, INT32_MAX)  # 0 follows Int32 max
    assert seq_after(3, INT32_MAX - 2)
    assert not seq_after(INT32_MAX, 0)


def test_duplicate_sequence_is_a_success_even_without_partition_state() -> None:
    batch = new_batch(TP)
    assert error_verdict(None, batch, DuplicateSequenceNumberError()) == (
        Verdict.DUPLICATE,
        False,
    )


def test_without_partition_state_only_retriable_errors_retry() -> None:
    batch = new_batch(TP)
    assert error_verdict(None, batch, KafkaConnectionError("gone")) == (Verdict.RETRY, False)
    assert error_verdict(None, batch, RecordTooLargeError()) == (Verdict.FAIL, False)


def test_unknown_producer_id_asks_for_a_bump_unless_already_renumbered() -> None:
    state = PartitionSequences(PID, 0, next_sequence=1, broker_has_state=True)
    batch = stamped(state, 0)
    assert error_verdict(state, batch, UnknownProducerIdError()) == (Verdict.RETRY, True)
    assert not state.broker_has_state  # one batch at a time again
    batch.sequence_reset = True
    assert error_verdict(state, batch, UnknownProducerIdError()) == (Verdict.RETRY, False)


def test_out_of_order_for_the_next_expected_batch_is_a_real_gap() -> None:
    state = PartitionSequences(PID, 0, next_sequence=6, last_acked_sequence=4)
    batch = stamped(state, 5)
    assert error_verdict(state, batch, OutOfOrderSequenceNumberError()) == (Verdict.RETRY, True)


def test_out_of_order_behind_an_earlier_batch_retries_without_a_bump() -> None:
    state = PartitionSequences(PID, 0, next_sequence=7, last_acked_sequence=4)
    stamped(state, 5)
    later = stamped(state, 6)
    assert error_verdict(state, later, OutOfOrderSequenceNumberError()) == (Verdict.RETRY, False)


def test_out_of_order_for_an_overtaken_batch_fails_it() -> None:
    state = PartitionSequences(PID, 0, next_sequence=3, last_acked_sequence=2)
    batch = stamped(state, 1)
    assert error_verdict(state, batch, OutOfOrderSequenceNumberError()) == (Verdict.FAIL, False)


def test_out_of_order_behind_a_gap_marks_the_batch_not_appended() -> None:
    state = PartitionSequences(PID, 0, next_sequence=7, last_acked_sequence=4, gap=True)
    batch = stamped(state, 6)
    assert error_verdict(state, batch, OutOfOrderSequenceNumberError()) == (Verdict.RETRY, False)
    assert batch.not_appended
