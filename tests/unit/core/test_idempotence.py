"""IdempotenceState: sequences, retry ordering, epoch bumps (KIP-360) and renumbering."""

from __future__ import annotations

import pytest

from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.idempotence import (
    INT16_MAX,
    INT32_MAX,
    IdempotenceState,
    increment_sequence,
)
from aiokprod.protocol.records import read_record_batch
from aiokprod.types import TopicPartition

from ._helpers import new_batch

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
PID = 4000


def ready_state(epoch: int = 0) -> IdempotenceState:
    state = IdempotenceState()
    state.set_producer_id(PID, epoch)
    return state


def send(state: IdempotenceState, batch: ProducerBatch) -> ProducerBatch:
    """What the sender does for a drained batch: check, then stamp."""
    assert state.can_drain(batch)
    state.assign_sequence(batch)
    return batch


def test_increment_sequence() -> None:
    assert increment_sequence(0, 1) == 1
    assert increment_sequence(10, 5) == 15
    assert increment_sequence(INT32_MAX - 1, 1) == INT32_MAX
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1  # MAX-1, MAX, 0 -> next is 1
    assert increment_sequence(INT32_MAX - 4, 5) == 0


def test_nothing_drains_without_a_producer_id() -> None:
    state = IdempotenceState()
    assert not state.has_producer_id
    assert state.producer_id_required
    assert not state.can_drain(new_batch(TP))
    state.set_producer_id(PID, 3)
    assert state.has_producer_id
    assert not state.producer_id_required
    assert (state.producer_id, state.producer_epoch) == (PID, 3)
    assert state.can_drain(new_batch(TP))


def test_sequences_follow_record_counts_in_drain_order() -> None:
    state = ready_state(epoch=2)
    b1 = send(state, new_batch(TP, records=3))
    b2 = send(state, new_batch(TP, records=2))
    b3 = send(state, new_batch(TP, records=1))
    other = send(state, new_batch(OTHER, records=4))
    assert [b.base_sequence for b in (b1, b2, b3)] == [0, 3, 5]
    assert other.base_sequence == 0  # per partition
    assert (b1.producer_id, b1.producer_epoch) == (PID, 2)
    decoded = read_record_batch(b2.close().data)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (PID, 2, 3)
    assert state.unacked(TP) == [b1, b2, b3]
    assert state.unacked(OTHER) == [other]


def test_sequence_wraps_after_int32_max() -> None:
    state = ready_state()
    send(state, new_batch(TP))  # creates the partition's bookkeeping
    # Jump close to the end of the sequence space (unreachable by sending in a test).
    state._state(TP).next_sequence = INT32_MAX - 1
    near_end = send(state, new_batch(TP, records=3))
    wrapped = send(state, new_batch(TP, records=1))
    assert near_end.base_sequence == INT32_MAX - 1
    assert wrapped.base_sequence == 1


def test_retry_keeps_its_sequence() -> None:
    state = ready_state()
    b1 = send(state, new_batch(TP, records=2))
    b2 = send(state, new_batch(TP, records=2))
    state.assign_sequence(b1)  # drained again after a retriable error
    assert b1.base_sequence == 0
    b3 = send(state, new_batch(TP))
    assert b3.base_sequence == 4  # the retry did not consume sequences
    assert state.unacked(TP) == [b1, b2, b3]


def test_retried_batch_drains_only_when_it_is_the_lowest_unacked() -> None:
    state = ready_state()
    b0, b1, b2 = (send(state, new_batch(TP)) for _ in range(3))
    # b1 and b2 came back (OUT_OF_ORDER after b0 failed once); b0 is still out.
    assert not state.can_drain(b1)
    assert not state.can_drain(b2)
    assert state.can_drain(b0)
    state.on_success(b0)
    assert state.can_drain(b1)
    assert not state.can_drain(b2)
    state.on_success(b1)
    assert state.can_drain(b2)


def test_new_batches_drain_alongside_in_flight_ones_of_the_same_epoch() -> None:
    state = ready_state()
    send(state, new_batch(TP))
    assert state.can_drain(new_batch(TP))


def test_success_advances_last_acked_and_next_expected() -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP, records=3))
    b1 = send(state, new_batch(TP, records=2))
    assert state.is_next_expected(b0)
    assert not state.is_next_expected(b1)
    state.on_success(b0)
    assert state.is_next_expected(b1)
    assert state.unacked(TP) == [b1]
    state.on_success(b1)
    assert state.unacked(TP) == []
    b2 = send(state, new_batch(TP))
    assert b2.base_sequence == 5
    assert state.is_next_expected(b2)


def test_is_next_expected_for_an_unknown_partition() -> None:
    state = ready_state()
    batch = new_batch(TP)
    batch.stamp(PID, 0, 0)
    assert state.is_next_expected(batch)


def test_failure_of_a_sent_batch_requires_an_epoch_bump() -> None:
    state = ready_state(epoch=1)
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    assert not state.epoch_bump_required
    state.on_failure(b0)
    assert state.epoch_bump_required
    assert state.unacked(TP) == [b1]
    # Nothing drains until the bump happened.
    assert not state.can_drain(new_batch(OTHER))
    assert not state.can_drain(b1)
    assert state.bump_epoch() is True
    assert state.producer_epoch == 2
    assert not state.epoch_bump_required
    assert state.can_drain(new_batch(OTHER))


def test_failure_of_the_last_sent_batch_also_requires_a_bump() -> None:
    """Its sequence was consumed: the next batch would leave a gap the broker rejects."""
    state = ready_state()
    only = send(state, new_batch(TP))
    state.on_failure(only)
    assert state.epoch_bump_required


def test_failure_without_sequence_needs_no_bump() -> None:
    state = ready_state()
    send(state, new_batch(TP))
    state.on_failure(new_batch(TP))  # expired before its first drain
    assert not state.epoch_bump_required
    state.on_failure(new_batch(OTHER))  # partition without state
    assert not state.epoch_bump_required


def test_failure_of_an_old_epoch_batch_needs_no_new_bump() -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    state.on_failure(b0)
    assert state.bump_epoch()
    state.on_failure(b1)  # stamped under epoch 0, now 1
    assert not state.epoch_bump_required
    assert state.unacked(TP) == []


def test_after_a_bump_new_batches_wait_for_old_epoch_batches_then_restart_at_zero() -> None:
    state = ready_state()
    old = send(state, new_batch(TP, records=3))
    send(state, new_batch(TP, records=3))
    state.bump_epoch()
    waiting = new_batch(TP)
    assert not state.can_drain(waiting)
    assert not state.can_drain(old)  # an old-epoch retry never drains as is
    for batch in state.unacked(TP):
        state.on_success(batch)
    assert state.can_drain(waiting)
    state.assign_sequence(waiting)
    assert (waiting.producer_epoch, waiting.base_sequence) == (1, 0)
    # A partition without old batches restarts at 0 at once.
    other = send(state, new_batch(OTHER))
    assert (other.producer_epoch, other.base_sequence) == (1, 0)


def test_old_epoch_success_does_not_move_the_new_epoch_ack() -> None:
    state = ready_state()
    old = send(state, new_batch(TP, records=10))
    state.bump_epoch()
    state.on_success(old)
    fresh = send(state, new_batch(TP))
    assert fresh.base_sequence == 0
    assert state.is_next_expected(fresh)


def test_bump_epoch_exhausted_requires_a_new_producer_id() -> None:
    state = ready_state(epoch=INT16_MAX - 1)
    assert state.bump_epoch() is True
    assert state.producer_epoch == INT16_MAX
    state.epoch_bump_required = True
    assert state.bump_epoch() is False
    assert state.producer_epoch == INT16_MAX
    assert state.producer_id_required
    assert not state.epoch_bump_required
    assert not state.has_producer_id
    assert not state.can_drain(new_batch(TP))
    state.set_producer_id(PID + 1, 0)
    assert state.has_producer_id
    batch = send(state, new_batch(TP))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (PID + 1, 0, 0)


def test_set_producer_id_clears_a_pending_bump() -> None:
    state = ready_state()
    state.epoch_bump_required = True
    state.set_producer_id(PID, 7)
    assert not state.epoch_bump_required
    assert state.can_drain(new_batch(TP))


def test_reset_unacked_sequences_renumbers_from_zero_in_order() -> None:
    state = ready_state(epoch=3)
    send(state, new_batch(TP, records=2))  # acknowledged below
    batches = [send(state, new_batch(TP, records=n)) for n in (2, 4, 1)]
    assert [b.base_sequence for b in batches] == [2, 4, 8]
    state.on_success(state.unacked(TP)[0])
    state.on_failure(batches[0])  # lost: bump, then renumber the rest
    assert state.bump_epoch()
    retries = batches[1:]
    state.reset_unacked_sequences(TP, retries)
    assert [(b.producer_epoch, b.base_sequence) for b in retries] == [(4, 0), (4, 4)]
    decoded = read_record_batch(retries[1].close().data)  # header and CRC rewritten
    assert (decoded.producer_epoch, decoded.base_sequence) == (4, 4)
    assert state.unacked(TP) == retries
    assert state.can_drain(retries[0])
    assert not state.can_drain(retries[1])
    state.assign_sequence(retries[0])  # already stamped under the current epoch
    assert retries[0].base_sequence == 0
    fresh = send(state, new_batch(TP))
    assert fresh.base_sequence == 5


def test_reset_waits_while_other_old_epoch_batches_are_unacked() -> None:
    state = ready_state()
    in_flight = send(state, new_batch(TP))
    queued = send(state, new_batch(TP))
    state.on_failure(in_flight)
    state.bump_epoch()
    # Another old-epoch batch is still in flight.
    still_out = new_batch(TP)
    still_out.stamp(PID, 0, 2)
    state._state(TP).unacked.append(still_out)
    state.reset_unacked_sequences(TP, [queued])
    assert (queued.producer_epoch, queued.base_sequence) == (0, 1)  # not renumbered yet
    state.on_success(still_out)
    state.reset_unacked_sequences(TP, [queued])
    assert (queued.producer_epoch, queued.base_sequence) == (1, 0)
    assert state.can_drain(queued)


def test_forget_drops_partition_state() -> None:
    state = ready_state()
    send(state, new_batch(TP))
    state.forget(TP)
    assert state.unacked(TP) == []
    assert send(state, new_batch(TP)).base_sequence == 0
    state.forget(OTHER)  # unknown partition: nothing happens


@pytest.mark.parametrize("records", [1, 7])
def test_on_success_without_state_is_harmless(records: int) -> None:
    state = ready_state()
    batch = new_batch(TP, records=records)
    batch.stamp(PID, 0, 0)
    state.on_success(batch)
    assert state.unacked(TP) == []
    assert send(state, new_batch(TP)).base_sequence == 0
