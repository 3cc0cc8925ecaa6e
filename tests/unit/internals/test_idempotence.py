"""IdempotenceState: sequences, drain gates, error verdicts, unresolved sequences, epoch bumps.

The rules are the Java client's ``TransactionManager`` for an idempotent producer (see
/work/shared/reference/simulation-testing.md section 2). The last test drives random
schedules against a small model of the broker's producer-state checks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from dataclasses import field as dataclass_field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aiokprod.errors import (
    BrokerError,
    DuplicateSequenceNumberError,
    KafkaConnectionError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
    error_for_code,
)
from aiokprod.internals.batch import FinalState, ProducerBatch
from aiokprod.internals.idempotence import INT16_MAX, IdempotenceState
from aiokprod.internals.sequences import INT32_MAX, Verdict, increment_sequence
from aiokprod.internals.split import should_split, split_batch
from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.types import TopicPartition

from ._helpers import new_batch

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
PID = 4000

OOOSN = OutOfOrderSequenceNumberError()
UNKNOWN_PID = UnknownProducerIdError()


def ready_state(epoch: int = 0) -> IdempotenceState:
    state = IdempotenceState()
    state.set_producer_id(PID, epoch)
    return state


def send(state: IdempotenceState, batch: ProducerBatch) -> ProducerBatch:
    """What the sender does for a drained batch: check the gate, then stamp."""
    assert state.can_drain(batch)
    state.assign_sequence(batch)
    return batch


def stamp_of(batch: ProducerBatch) -> tuple[int, int, int]:
    return (batch.producer_id, batch.producer_epoch, batch.base_sequence)


def wire_stamp(batch: ProducerBatch) -> tuple[int, int, int]:
    """The (producer id, epoch, base sequence) in the batch's bytes (CRC checked on read)."""
    decoded = read_record_batch(batch.close().data)
    return (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence)


def expire(state: IdempotenceState, batch: ProducerBatch, *, outstanding: bool) -> None:
    """What the sender does when a stamped batch passes its delivery timeout."""
    batch.fail(TimeoutError("delivery timeout"))
    state.on_expired(batch, outstanding=outstanding)


def complete(state: IdempotenceState, batch: ProducerBatch) -> None:
    batch.complete(0, -1)
    state.on_success(batch)


def warm(state: IdempotenceState, *tps: TopicPartition) -> None:
    """Have the broker hold state for the producer on ``tps``: a 1-record batch, acknowledged.

    Until a batch of the producer id is acknowledged on a partition, the producer sends one
    batch there at a time (see test_a_second_new_batch_waits_until_the_first_is_acknowledged);
    tests that pipeline start from here. The warm-up takes one sequence (0 on a partition
    drained for the first time), so the batches after it start one further.
    """
    for tp in tps:
        complete(state, send(state, new_batch(tp)))


def bump(state: IdempotenceState) -> None:
    """The sender's pass: settle unresolved partitions, then bump if asked."""
    state.resolve_sequences()
    assert state.epoch_bump_required
    assert state.bump_epoch()


# --- sequences ------------------------------------------------------------------------------


def test_sequences_are_assigned_at_first_drain_in_drain_order() -> None:
    state = ready_state(epoch=2)
    warm(state, TP)  # sequence 0
    first, second, third = new_batch(TP, 3), new_batch(TP, 2), new_batch(TP, 1)
    assert not first.has_sequence  # nothing is stamped before the drain
    send(state, first)
    assert not second.has_sequence
    send(state, second)
    send(state, third)
    other = send(state, new_batch(OTHER, 4))
    assert [b.base_sequence for b in (first, second, third)] == [1, 4, 6]
    assert other.base_sequence == 0  # sequences are per partition
    assert stamp_of(second) == (PID, 2, 4)
    assert wire_stamp(second) == (PID, 2, 4)  # the bytes carry the stamp, CRC included
    assert state.unacked(TP) == [first, second, third]
    assert state.unacked(OTHER) == [other]


def test_sequence_wraps_after_int32_max() -> None:
    state = ready_state()
    warm(state, TP)  # creates the partition's bookkeeping; the broker has our state
    # Jump close to the end of the sequence space (unreachable by sending in a test).
    state._partitions[TP].next_sequence = INT32_MAX - 1
    near_end = send(state, new_batch(TP, records=3))
    wrapped = send(state, new_batch(TP, records=1))
    assert near_end.base_sequence == INT32_MAX - 1
    assert wrapped.base_sequence == 1
    assert wire_stamp(wrapped) == (PID, 0, 1)


def test_a_retry_keeps_its_stamp_and_consumes_no_sequence() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=2))
    before = bytes(b0.close().data)
    assert state.on_error(b0, error_for_code(6)) is Verdict.RETRY  # NOT_LEADER_OR_FOLLOWER
    send(state, b0)  # drained again
    assert stamp_of(b0) == (PID, 0, 1)
    assert bytes(b0.close().data) == before
    b2 = send(state, new_batch(TP))
    assert b2.base_sequence == 5  # the retry did not consume sequences
    assert state.unacked(TP) == [b0, b1, b2]
    assert not state.epoch_bump_required


def test_success_moves_the_next_expected_sequence() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0: b0 is 1-3, b1 is 4-5
    b0 = send(state, new_batch(TP, records=3))
    b1 = send(state, new_batch(TP, records=2))
    # b1 is not the next expected batch until b0 is acknowledged: no bump for its OOOSN.
    assert state.on_error(b1, OOOSN) is Verdict.RETRY
    assert not state.epoch_bump_required
    complete(state, b0)
    assert state.unacked(TP) == [b1]
    # Now it is: an OOOSN means a real gap.
    assert state.on_error(b1, OOOSN) is Verdict.RETRY
    assert state.epoch_bump_required


# --- drain gates ----------------------------------------------------------------------------


def test_nothing_drains_without_a_producer_id() -> None:
    state = IdempotenceState()
    assert not state.has_producer_id
    assert state.producer_id_required
    assert not state.can_drain(new_batch(TP))
    state.set_producer_id(PID, 3)
    assert state.has_producer_id
    assert not state.producer_id_required
    assert (state.producer_id, state.producer_epoch) == (PID, 3)
    batch = send(state, new_batch(TP))
    assert stamp_of(batch) == (PID, 3, 0)


def test_a_retry_drains_only_when_it_is_the_lowest_in_flight() -> None:
    state = ready_state()
    warm(state, TP)
    b0, b1, b2 = (send(state, new_batch(TP)) for _ in range(3))
    # b1 and b2 came back (OOOSN after b0 failed once); b0 is still out.
    assert not state.can_drain(b1)
    assert not state.can_drain(b2)
    assert state.can_drain(b0)
    complete(state, b0)
    assert state.can_drain(b1)
    assert not state.can_drain(b2)
    complete(state, b1)
    assert state.can_drain(b2)


def test_new_batches_drain_alongside_in_flight_ones_of_the_same_epoch() -> None:
    state = ready_state()
    warm(state, TP)  # once the broker has our state; before, one at a time (see below)
    send(state, new_batch(TP))
    send(state, new_batch(TP))
    assert state.can_drain(new_batch(TP))


def test_new_batches_wait_while_old_epoch_batches_are_in_flight() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    old = send(state, new_batch(TP, records=3))
    old2 = send(state, new_batch(TP, records=3))
    send(state, new_batch(OTHER))
    assert state.on_error(state.unacked(OTHER)[0], OOOSN) is Verdict.RETRY  # OTHER asks
    bump(state)
    assert state.producer_epoch == 1
    # TP did not ask for the bump: its batches keep their old stamps...
    assert [stamp_of(b) for b in (old, old2)] == [(PID, 0, 1), (PID, 0, 4)]
    assert wire_stamp(old2) == (PID, 0, 4)
    # ...a new batch must not overtake them with epoch 1, sequence 0...
    waiting = new_batch(TP)
    assert not state.can_drain(waiting)
    # ...but they may still be retried as they are, lowest first.
    assert state.can_drain(old)
    assert not state.can_drain(old2)
    complete(state, old)
    assert not state.can_drain(waiting)
    complete(state, old2)
    send(state, waiting)
    assert stamp_of(waiting) == (PID, 1, 0)  # the partition restarts at 0 under the new epoch
    assert wire_stamp(waiting) == (PID, 1, 0)
    # The broker kept our state across the bump (same producer id): no gate, it pipelines.
    follower = send(state, new_batch(TP, records=2))
    assert stamp_of(follower) == (PID, 1, 1)


def test_an_old_epoch_success_does_not_move_the_new_epoch_ack() -> None:
    state = ready_state()
    old = send(state, new_batch(TP, records=10))
    send(state, new_batch(OTHER))
    state.on_error(state.unacked(OTHER)[0], OOOSN)
    bump(state)
    complete(state, old)
    fresh = send(state, new_batch(TP))
    assert stamp_of(fresh) == (PID, 1, 0)
    second = send(state, new_batch(TP))
    # second is not the next expected one (last acked -1 under epoch 1): a plain retry...
    assert state.on_error(second, OOOSN) is Verdict.RETRY
    assert not state.epoch_bump_required
    # ...and fresh is: refused while second was sent and nothing is acknowledged under
    # epoch 1, it fails (second may be in the log: see
    # test_out_of_order_for_the_first_batch_while_a_later_one_may_be_written_fails_it).
    assert state.on_error(fresh, OOOSN) is Verdict.FAIL


def test_new_batches_wait_while_the_partition_is_unresolved() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    state.on_error(b0, error_for_code(7))  # REQUEST_TIMED_OUT: back in the queue
    expire(state, b0, outstanding=False)
    assert state.is_unresolved(TP)
    assert not state.can_drain(new_batch(TP))
    assert state.can_drain(new_batch(OTHER))  # only that partition waits
    assert state.can_drain(b1)  # the batch still in flight may be retried
    state.resolve_sequences()  # b1 is still in flight: nothing is decided yet
    assert state.is_unresolved(TP)
    assert not state.epoch_bump_required
    complete(state, b1)  # b1 written: so was b0 (the broker appends in order)
    state.resolve_sequences()
    assert not state.is_unresolved(TP)
    assert not state.epoch_bump_required
    assert send(state, new_batch(TP)).base_sequence == 3


def test_a_second_new_batch_waits_until_the_first_is_acknowledged() -> None:
    # A broker with no state for a producer id appends a batch with any first sequence
    # (KIP-360). Pipelined, the second batch could be appended while the first is refused
    # (NOT_LEADER_OR_FOLLOWER from a leader still loading, MESSAGE_TOO_LARGE), and the first
    # could then never be written in its place. So one batch at a time until the broker
    # acknowledges one of this producer id on the partition.
    state = ready_state()
    first = send(state, new_batch(TP, records=3))
    second = new_batch(TP)
    assert not state.can_drain(second)
    # A lost answer (REQUEST_TIMED_OUT) is no acknowledgement: the retry goes, alone.
    assert state.on_error(first, error_for_code(7)) is Verdict.RETRY
    assert not state.can_drain(second)
    send(state, first)
    assert not state.can_drain(second)
    # The resend is answered DUPLICATE_SEQUENCE_NUMBER: the broker has the batch, so it has
    # our state, and checks every sequence from now on.
    assert state.on_error(first, DuplicateSequenceNumberError()) is Verdict.DUPLICATE
    complete(state, first)
    send(state, second)
    third = send(state, new_batch(TP))  # pipelined: second is still unacknowledged
    assert [stamp_of(b) for b in (second, third)] == [(PID, 0, 3), (PID, 0, 4)]
    assert state.unacked(TP) == [second, third]


def test_the_first_batch_goes_alone_across_its_retries() -> None:
    state = ready_state()
    first = send(state, new_batch(TP, records=2))
    waiting = new_batch(TP)
    for _ in range(3):
        # The leader is still loading: NOT_LEADER_OR_FOLLOWER, not appended, retried as is.
        # A new batch sent meanwhile would be the one a leader ready a moment later takes
        # first (it has no state for us: any first sequence goes).
        assert state.on_error(first, error_for_code(6)) is Verdict.RETRY
        assert not state.can_drain(waiting)
        send(state, first)  # the retry itself goes (the lowest unacknowledged sequence)
        assert stamp_of(first) == (PID, 0, 0)
        assert not state.can_drain(waiting)
    complete(state, first)
    assert stamp_of(send(state, waiting)) == (PID, 0, 2)
    assert state.can_drain(new_batch(TP))


def test_a_first_batch_refused_for_good_does_not_open_the_gate() -> None:
    state = ready_state()
    refused = send(state, new_batch(TP))
    error = error_for_code(10)  # MESSAGE_TOO_LARGE: not appended
    assert state.on_error(refused, error) is Verdict.FAIL
    refused.fail(error)
    state.on_failure(refused, error, may_retry=True)
    bump(state)  # its sequence is a gap: the partition restarts at 0 under epoch 1
    restart = send(state, new_batch(TP))
    assert stamp_of(restart) == (PID, 1, 0)
    # Still nothing of this producer id acknowledged here (a refusal is no proof of state,
    # and neither is a bump): one batch at a time.
    assert not state.can_drain(new_batch(TP))
    complete(state, restart)
    assert state.can_drain(new_batch(TP))


def test_after_an_epoch_bump_a_partition_with_acknowledgements_pipelines_from_zero() -> None:
    # A bump keeps the producer id: the broker keeps its state for it and wants sequence 0
    # of the new epoch first, so no later batch can be appended before an earlier one.
    state = ready_state()
    warm(state, TP)
    lost = send(state, new_batch(TP))  # TP's sequence 1
    first_other = send(state, new_batch(OTHER))  # nothing acknowledged on OTHER
    for batch in (lost, first_other):
        assert state.on_error(batch, error_for_code(7)) is Verdict.RETRY
        expire(state, batch, outstanding=False)  # written or not: unknown
    bump(state)  # both unresolved with a sequence maybe missing: a bump
    assert state.producer_epoch == 1
    b0, b1, b2 = (send(state, new_batch(TP, records=2)) for _ in range(3))
    assert [stamp_of(b) for b in (b0, b1, b2)] == [(PID, 1, 0), (PID, 1, 2), (PID, 1, 4)]
    assert state.unacked(TP) == [b0, b1, b2]
    # OTHER never had an acknowledgement: the broker may have no state for us there.
    o0 = send(state, new_batch(OTHER))
    assert stamp_of(o0) == (PID, 1, 0)
    assert not state.can_drain(new_batch(OTHER))


def test_a_new_producer_id_brings_the_gate_back() -> None:
    # The broker's state is per producer id: for a new one it may have none.
    state = ready_state(epoch=INT16_MAX)
    warm(state, TP, OTHER)
    b1 = send(state, new_batch(TP))
    b2 = send(state, new_batch(TP))  # pipelined: the broker has our state
    assert state.on_error(b1, OOOSN) is Verdict.RETRY  # a real gap at sequence 1
    assert state.on_error(b2, OOOSN) is Verdict.RETRY  # behind it
    state.resolve_sequences()
    assert state.epoch_bump_required
    assert state.bump_epoch() is False  # the epoch is exhausted: a new id instead
    state.set_producer_id(PID + 1, 0)
    # TP is renumbered under the new id; a new batch waits for the first acknowledgement.
    assert [stamp_of(b) for b in (b1, b2)] == [(PID + 1, 0, 0), (PID + 1, 0, 1)]
    waiting = new_batch(TP)
    assert not state.can_drain(waiting)
    complete(state, b1)
    assert stamp_of(send(state, waiting)) == (PID + 1, 0, 2)
    # OTHER, idle, moves to the new id with its next batch: one at a time there too.
    o0 = send(state, new_batch(OTHER))
    assert stamp_of(o0) == (PID + 1, 0, 0)
    o1 = new_batch(OTHER)
    assert not state.can_drain(o1)
    complete(state, o0)
    assert stamp_of(send(state, o1)) == (PID + 1, 0, 1)


def test_unknown_producer_id_brings_the_gate_back() -> None:
    # The broker says it lost our state: without it, it takes any first sequence.
    state = ready_state()
    warm(state, TP)
    refused = send(state, new_batch(TP))
    assert state.on_error(refused, UNKNOWN_PID) is Verdict.RETRY
    bump(state)
    assert stamp_of(refused) == (PID, 1, 0)  # renumbered under the new epoch
    waiting = new_batch(TP)
    assert not state.can_drain(waiting)
    complete(state, refused)
    assert stamp_of(send(state, waiting)) == (PID, 1, 1)
    assert state.can_drain(new_batch(TP))


def test_a_late_acknowledgement_under_the_old_producer_id_does_not_open_the_gate() -> None:
    state = ready_state(epoch=INT16_MAX)
    warm(state, TP)
    late = send(state, new_batch(TP))
    renumbered = send(state, new_batch(TP))
    expire(state, late, outstanding=True)  # its request is still out
    assert state.on_error(renumbered, UNKNOWN_PID) is Verdict.RETRY
    assert state.bump_epoch() is False  # the epoch is exhausted: a new id instead
    state.set_producer_id(PID + 1, 0)
    assert stamp_of(renumbered) == (PID + 1, 0, 0)
    assert stamp_of(late) == (PID, INT16_MAX, 1)  # expired: never resent, not renumbered
    # `late` is written after all: that proves the broker has state for the old id, not
    # for the new one.
    state.on_late_outcome(late, appended=True)
    assert not state.can_drain(new_batch(TP))
    complete(state, renumbered)
    assert state.can_drain(new_batch(TP))


def test_one_partitions_gate_does_not_hold_back_another() -> None:
    state = ready_state()
    tp_first = send(state, new_batch(TP))
    assert not state.can_drain(new_batch(TP))
    # OTHER's first batch goes; once it is acknowledged, OTHER pipelines while TP waits.
    o0 = send(state, new_batch(OTHER))
    assert not state.can_drain(new_batch(OTHER))
    complete(state, o0)
    o1 = send(state, new_batch(OTHER))
    o2 = send(state, new_batch(OTHER))
    assert [stamp_of(b) for b in (o1, o2)] == [(PID, 0, 1), (PID, 0, 2)]
    assert not state.can_drain(new_batch(TP))
    complete(state, tp_first)
    assert stamp_of(send(state, new_batch(TP))) == (PID, 0, 1)


# --- on_error -------------------------------------------------------------------------------


def test_duplicate_sequence_number_is_a_success() -> None:
    state = ready_state()
    batch = send(state, new_batch(TP))
    assert state.on_error(batch, DuplicateSequenceNumberError()) is Verdict.DUPLICATE
    assert state.on_error(batch, error_for_code(46)) is Verdict.DUPLICATE
    assert not state.epoch_bump_required


def test_out_of_order_for_a_batch_that_is_not_next_is_retried_without_a_bump() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=2))
    b2 = send(state, new_batch(TP))
    assert state.on_error(b2, error_for_code(45)) is Verdict.RETRY
    assert state.on_error(b1, OOOSN) is Verdict.RETRY
    assert not state.epoch_bump_required
    state.bump_epoch()  # a bump for some other reason: nothing of TP is rewritten
    assert [stamp_of(b) for b in (b0, b1, b2)] == [(PID, 0, 1), (PID, 0, 3), (PID, 0, 5)]


def test_out_of_order_for_the_next_batch_bumps_and_rewrites_the_partition() -> None:
    state = ready_state(epoch=3)
    acked = send(state, new_batch(TP, records=2))
    complete(state, acked)  # the broker has our state: the rest may pipeline
    gap = send(state, new_batch(TP, records=2))
    after = send(state, new_batch(TP, records=4))
    last = send(state, new_batch(TP, records=1))
    other = send(state, new_batch(OTHER, records=2))
    assert [b.base_sequence for b in (gap, after, last)] == [2, 4, 8]
    assert state.on_error(gap, OOOSN) is Verdict.RETRY
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert state.producer_epoch == 4
    assert not state.epoch_bump_required
    # Renumbered from 0 under the new epoch, in order, marked, and the bytes rewritten.
    assert [stamp_of(b) for b in (gap, after, last)] == [(PID, 4, 0), (PID, 4, 2), (PID, 4, 6)]
    assert [wire_stamp(b) for b in (gap, after, last)] == [(PID, 4, 0), (PID, 4, 2), (PID, 4, 6)]
    assert all(b.sequence_reset for b in (gap, after, last))
    assert state.unacked(TP) == [gap, after, last]
    assert not acked.sequence_reset
    # The other partition did not ask: untouched.
    assert stamp_of(other) == (PID, 3, 0)
    assert not other.sequence_reset
    # The rewritten batches drain lowest first; new batches continue after them (at once:
    # the broker keeps our state across a bump of the epoch).
    assert state.can_drain(gap)
    assert not state.can_drain(after)
    fresh = send(state, new_batch(TP))
    assert stamp_of(fresh) == (PID, 4, 7)
    # Their own OOOSN answers (sent before the bump) need no second bump.
    assert state.on_error(after, OOOSN) is Verdict.RETRY
    assert state.on_error(gap, OOOSN) is Verdict.RETRY
    assert not state.epoch_bump_required


def test_out_of_order_for_the_first_batch_while_a_later_one_may_be_written_fails_it() -> None:
    # Simulator seed 22719: b0's answer was lost; the leader moved to a broker with no state
    # for this producer, which took b1 (sequence 1) as its first batch; b0's retry is then
    # refused. Renumbering both under a new epoch would write b1 twice and put b0 after it.
    # A new producer sends one batch at a time until its first acknowledgement, so this
    # needs a pipeline with nothing acknowledged in its epoch: the first batches after a
    # bump (the broker kept our state, sequences restart at 0), then a broker that lost
    # that state (an unclean leader election, the producer id expired there).
    state = ready_state(epoch=0)
    warm(state, TP)
    send(state, new_batch(OTHER))
    assert state.on_error(state.unacked(OTHER)[0], OOOSN) is Verdict.RETRY  # OTHER asks
    bump(state)
    b0 = send(state, new_batch(TP, records=1))
    b1 = send(state, new_batch(TP, records=1))
    assert [stamp_of(b) for b in (b0, b1)] == [(PID, 1, 0), (PID, 1, 1)]
    assert state.on_error(b0, OOOSN) is Verdict.FAIL
    b0.fail(OOOSN)
    state.on_failure(b0, OOOSN, may_retry=True)
    # No bump yet: b1 is resent under its own stamp to learn whether it was written.
    state.resolve_sequences()
    assert not state.epoch_bump_required
    assert state.can_drain(b1)
    assert not state.can_drain(new_batch(TP))
    assert state.on_error(b1, DuplicateSequenceNumberError()) is Verdict.DUPLICATE
    complete(state, b1)
    assert stamp_of(b1) == (PID, 1, 1)  # never renumbered
    # Settled: the partition moves to a new epoch for what comes next.
    bump(state)
    assert stamp_of(send(state, new_batch(TP))) == (PID, 2, 0)


def test_out_of_order_for_the_first_batch_alone_is_retried_under_a_new_epoch() -> None:
    state = ready_state(epoch=0)
    b0 = send(state, new_batch(TP, records=1))
    assert state.on_error(b0, OOOSN) is Verdict.RETRY
    bump(state)
    assert stamp_of(b0) == (PID, 1, 0)


def test_unknown_producer_id_bumps_unless_the_batch_was_already_renumbered() -> None:
    state = ready_state()
    warm(state, TP)  # the broker had our state (UNKNOWN_PRODUCER_ID: it lost it since)
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=3))
    assert state.on_error(b0, UNKNOWN_PID) is Verdict.RETRY
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert [stamp_of(b) for b in (b0, b1)] == [(PID, 1, 0), (PID, 1, 2)]
    assert b0.sequence_reset
    assert b1.sequence_reset
    # b1's answer to its pre-bump attempt is UNKNOWN_PRODUCER_ID too: retried, no new bump.
    assert state.on_error(b1, error_for_code(59)) is Verdict.RETRY
    assert not state.epoch_bump_required
    assert stamp_of(b1) == (PID, 1, 2)


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        (6, Verdict.RETRY),  # NOT_LEADER_OR_FOLLOWER
        (7, Verdict.RETRY),  # REQUEST_TIMED_OUT
        (13, Verdict.RETRY),  # NETWORK_EXCEPTION
        (19, Verdict.RETRY),  # NOT_ENOUGH_REPLICAS
        (20, Verdict.RETRY),  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (10, Verdict.FAIL),  # MESSAGE_TOO_LARGE
        (29, Verdict.FAIL),  # TOPIC_AUTHORIZATION_FAILED
        (47, Verdict.FAIL),  # INVALID_PRODUCER_EPOCH
        (87, Verdict.FAIL),  # INVALID_RECORD
        (-1, Verdict.FAIL),  # UNKNOWN_SERVER_ERROR
        (9999, Verdict.FAIL),  # a code this client does not know
    ],
)
def test_other_errors_retry_iff_retriable(code: int, verdict: Verdict) -> None:
    state = ready_state()
    batch = send(state, new_batch(TP))
    error = error_for_code(code)
    assert isinstance(error, BrokerError)
    assert error.retriable is (verdict is Verdict.RETRY)
    assert state.on_error(batch, error) is verdict
    assert not state.epoch_bump_required
    assert stamp_of(batch) == (PID, 0, 0)
    # The same verdict without idempotence bookkeeping for the partition.
    unstamped = new_batch(OTHER)
    assert state.on_error(unstamped, error) is verdict


def test_a_connection_error_is_retried() -> None:
    state = ready_state()
    batch = send(state, new_batch(TP))
    assert state.on_error(batch, KafkaConnectionError("reset")) is Verdict.RETRY
    assert not state.epoch_bump_required


def test_out_of_order_while_unresolved_bumps_only_right_after_the_unknown_batch() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=2))
    b2 = send(state, new_batch(TP, records=2))
    state.on_error(b0, error_for_code(7))
    expire(state, b0, outstanding=False)  # sequences 1-2: written or not?
    # b2 (sequence 5) is not right after b0: b1 may still fix things. Retry, no bump.
    assert state.on_error(b2, OOOSN) is Verdict.RETRY
    assert not state.epoch_bump_required
    # b1 (sequence 3) is right after b0, and the broker says it is out of order: b0 was
    # not written, there is a real gap.
    assert state.on_error(b1, OOOSN) is Verdict.RETRY
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert [stamp_of(b) for b in (b1, b2)] == [(PID, 1, 0), (PID, 1, 2)]
    assert state.unacked(TP) == [b1, b2]
    assert not state.is_unresolved(TP)
    assert state.can_drain(b1)


# --- on_failure -----------------------------------------------------------------------------


def test_a_definite_failure_settles_the_gap_then_renumbers_only_refused_batches() -> None:
    state = ready_state(epoch=1)
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=3))
    b2 = send(state, new_batch(TP, records=1))
    error = error_for_code(10)  # MESSAGE_TOO_LARGE: not appended
    assert state.on_error(b0, error) is Verdict.FAIL
    b0.fail(error)
    state.on_failure(b0, error, may_retry=True)
    assert state.unacked(TP) == [b1, b2]
    # Not yet: b1 and b2 may have been appended all the same (by a broker that lost our
    # state since: it accepts any sequence); their own answers decide. Nothing new goes out
    # meanwhile.
    state.resolve_sequences()
    assert not state.epoch_bump_required
    assert not state.can_drain(new_batch(TP))
    assert state.can_drain(b1)  # the head is resent under its own stamp
    refused = error_for_code(45)  # OUT_OF_ORDER_SEQUENCE_NUMBER: behind the gap
    assert state.on_error(b1, refused) is Verdict.RETRY
    assert state.on_error(b2, refused) is Verdict.RETRY
    assert b1.not_appended
    assert not state.can_drain(b1)  # refused: it waits to be renumbered
    state.resolve_sequences()
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert [stamp_of(b) for b in (b1, b2)] == [(PID, 2, 0), (PID, 2, 3)]
    assert [wire_stamp(b) for b in (b1, b2)] == [(PID, 2, 0), (PID, 2, 3)]
    assert b1.sequence_reset
    assert b2.sequence_reset
    assert not b1.not_appended
    assert state.can_drain(b1)
    assert stamp_of(b0) == (PID, 1, 1)  # the failed batch is left alone


def test_a_definite_failure_of_the_last_batch_also_bumps() -> None:
    state = ready_state()
    only = send(state, new_batch(TP))
    error = error_for_code(87)
    only.fail(error)
    state.on_failure(only, error, may_retry=True)
    state.resolve_sequences()  # nothing else is unacknowledged: settled at once
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert send(state, new_batch(TP)).base_sequence == 0  # no gap at sequence 1


def test_a_failure_with_no_retries_left_does_not_bump() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    error = error_for_code(10)
    b0.fail(error)
    state.on_failure(b0, error, may_retry=False)
    assert not state.epoch_bump_required
    assert state.unacked(TP) == [b1]
    assert stamp_of(b1) == (PID, 0, 2)


@pytest.mark.parametrize("error", [OOOSN, UNKNOWN_PID], ids=["oosn", "unknown-pid"])
def test_a_sequence_failure_bumps_even_without_retries_left(error: BrokerError) -> None:
    state = ready_state()
    complete(state, send(state, new_batch(TP)))  # the broker has state for us
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    b0.fail(error)
    state.on_failure(b0, error, may_retry=False)
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert stamp_of(b1) == (PID, 1, 0)


def test_failures_of_unstamped_batches_change_nothing() -> None:
    state = ready_state()
    sent = send(state, new_batch(TP))
    error = error_for_code(10)
    state.on_failure(new_batch(TP), error, may_retry=True)  # never drained
    state.on_failure(new_batch(OTHER), error, may_retry=True)  # partition without state
    state.on_expired(new_batch(TP), outstanding=False)
    assert not state.epoch_bump_required
    assert not state.is_unresolved(TP)
    assert state.unacked(TP) == [sent]


# --- expiry and unresolved sequences --------------------------------------------------------


@pytest.mark.parametrize("outstanding", [False, True])
def test_an_expired_stamped_batch_makes_the_partition_unresolved(outstanding: bool) -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP))
    expire(state, b0, outstanding=outstanding)
    assert state.is_unresolved(TP)
    assert not state.is_unresolved(OTHER)
    assert state.unacked(TP) == ([b0] if outstanding else [])
    assert not state.can_drain(new_batch(TP))
    assert not state.epoch_bump_required


def test_resolved_without_bump_when_the_last_ack_reaches_the_next_sequence() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=3))
    state.on_error(b0, error_for_code(13))
    expire(state, b0, outstanding=False)
    complete(state, b1)  # acked up to sequence 5 == next sequence 6 - 1
    state.resolve_sequences()
    assert not state.is_unresolved(TP)
    assert not state.epoch_bump_required
    fresh = send(state, new_batch(TP))
    assert stamp_of(fresh) == (PID, 0, 6)


def test_resolved_with_a_bump_when_a_sequence_is_missing() -> None:
    state = ready_state()
    acked = send(state, new_batch(TP, records=2))
    complete(state, acked)  # the broker has our state: the next may pipeline
    lost = send(state, new_batch(TP, records=2))
    state.on_error(lost, error_for_code(13))
    expire(state, lost, outstanding=False)
    waiting = new_batch(TP)
    assert not state.can_drain(waiting)
    state.resolve_sequences()
    assert not state.is_unresolved(TP)
    assert state.epoch_bump_required
    assert state.bump_epoch()
    send(state, waiting)
    assert stamp_of(waiting) == (PID, 1, 0)


def test_an_outstanding_expired_batch_keeps_the_partition_unresolved_until_answered() -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP, records=2))
    expire(state, b0, outstanding=True)
    for _ in range(3):
        state.resolve_sequences()
        assert state.is_unresolved(TP)
        assert not state.epoch_bump_required
        assert not state.can_drain(new_batch(TP))
    # A bump requested meanwhile by another partition changes nothing for TP's numbering.
    send(state, new_batch(OTHER))
    state.on_error(state.unacked(OTHER)[0], OOOSN)
    assert state.bump_epoch()
    assert stamp_of(b0) == (PID, 0, 0)
    state.on_late_outcome(b0, appended=True)  # it was written after all
    state.resolve_sequences()
    assert not state.is_unresolved(TP)
    assert not state.epoch_bump_required
    assert state.unacked(TP) == []


def test_a_late_success_updates_the_last_acked_sequence() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0 = send(state, new_batch(TP, records=2))
    b1 = send(state, new_batch(TP, records=2))
    expire(state, b0, outstanding=True)
    expire(state, b1, outstanding=True)
    state.on_late_outcome(b0, appended=True)
    state.on_late_outcome(b1, appended=True)
    state.resolve_sequences()
    assert not state.epoch_bump_required
    assert send(state, new_batch(TP)).base_sequence == 5


def test_a_late_failure_leads_to_a_bump() -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP))
    expire(state, b0, outstanding=True)
    state.on_late_outcome(b0, appended=False)
    assert state.unacked(TP) == []
    state.resolve_sequences()
    assert state.epoch_bump_required
    assert state.bump_epoch()
    assert stamp_of(send(state, new_batch(TP))) == (PID, 1, 0)


def test_a_bump_does_not_renumber_expired_batches() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    expired = send(state, new_batch(TP, records=2))
    waiting = send(state, new_batch(TP, records=2))
    expire(state, expired, outstanding=True)
    state.on_error(waiting, UNKNOWN_PID)
    assert state.bump_epoch()
    assert stamp_of(expired) == (PID, 0, 1)  # never resent: it keeps its stamp
    assert stamp_of(waiting) == (PID, 1, 0)
    assert state.unacked(TP) == [waiting]
    assert not state.is_unresolved(TP)


def test_an_abandoned_batch_leaves_the_bookkeeping() -> None:
    state = ready_state()
    warm(state, TP)
    b0 = send(state, new_batch(TP))
    b1 = send(state, new_batch(TP))
    state.on_abandoned(b0)
    assert state.unacked(TP) == [b1]
    state.on_abandoned(new_batch(OTHER))  # unknown partition: nothing happens
    assert not state.epoch_bump_required


# --- epochs and producer ids ----------------------------------------------------------------


def test_epoch_exhaustion_requires_a_new_producer_id() -> None:
    state = ready_state(epoch=INT16_MAX - 1)
    send(state, new_batch(OTHER))
    state.on_error(state.unacked(OTHER)[0], OOOSN)
    assert state.bump_epoch() is True
    assert state.producer_epoch == INT16_MAX
    complete(state, state.unacked(OTHER)[0])
    b0 = send(state, new_batch(TP))
    state.on_error(b0, OOOSN)
    assert state.epoch_bump_required
    assert state.bump_epoch() is False
    assert state.producer_epoch == INT16_MAX
    assert state.producer_id_required
    assert not state.epoch_bump_required
    assert not state.has_producer_id
    assert not state.can_drain(new_batch(OTHER))
    assert not state.can_drain(b0)
    state.set_producer_id(PID + 1, 0)
    assert state.has_producer_id
    fresh = send(state, new_batch(OTHER))
    assert stamp_of(fresh) == (PID + 1, 0, 0)
    assert wire_stamp(fresh) == (PID + 1, 0, 0)


def test_set_producer_id_settles_pending_bump_requests_under_the_new_id() -> None:
    state = ready_state()
    b0 = send(state, new_batch(TP))
    state.on_error(b0, UNKNOWN_PID)
    assert state.epoch_bump_required
    state.set_producer_id(PID + 1, 7)
    assert not state.epoch_bump_required
    assert state.producer_epoch == 7
    # TP asked for renumbering: it happens under the new id, not never.
    assert stamp_of(b0) == (PID + 1, 7, 0)
    assert b0.sequence_reset
    # Once done, the request is gone: a later bump asked by OTHER leaves TP alone.
    send(state, new_batch(OTHER))
    state.on_error(state.unacked(OTHER)[0], OOOSN)
    assert state.bump_epoch()
    assert stamp_of(b0) == (PID + 1, 7, 0)
    assert stamp_of(state.unacked(OTHER)[0]) == (PID + 1, 8, 0)


def test_other_partitions_restart_at_zero_after_their_old_batches_finish() -> None:
    state = ready_state()
    idle = send(state, new_batch(OTHER, records=3))
    complete(state, idle)  # OTHER has nothing in flight at the bump
    warm(state, TP)  # sequence 0
    busy = [send(state, new_batch(TP, records=2)) for _ in range(2)]
    third = TopicPartition("t", 2)
    state.on_error(send(state, new_batch(third)), UNKNOWN_PID)
    bump(state)
    assert [stamp_of(b) for b in busy] == [(PID, 0, 1), (PID, 0, 3)]
    # OTHER restarts at 0 at once; TP only once both old batches are done.
    assert stamp_of(send(state, new_batch(OTHER))) == (PID, 1, 0)
    assert not state.can_drain(new_batch(TP))
    error = error_for_code(10)
    busy[0].fail(error)
    state.on_failure(busy[0], error, may_retry=False)
    assert not state.can_drain(new_batch(TP))
    complete(state, busy[1])
    assert stamp_of(send(state, new_batch(TP))) == (PID, 1, 0)


# --- a known hazard ---------------------------------------------------------------------------


def test_a_failure_does_not_renumber_an_earlier_batch_that_may_have_been_written() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    earlier = send(state, new_batch(TP))
    failed = send(state, new_batch(TP))
    # The leader appended `earlier` but answered REQUEST_TIMED_OUT: retried as it is.
    assert state.on_error(earlier, error_for_code(7)) is Verdict.RETRY
    # `failed` is rejected for good (MESSAGE_TOO_LARGE), with retries left.
    error = error_for_code(10)
    assert state.on_error(failed, error) is Verdict.FAIL
    failed.fail(error)
    state.on_failure(failed, error, may_retry=True)
    state.resolve_sequences()
    if state.epoch_bump_required:
        state.bump_epoch()
    # `earlier` may be in the log under (PID, 0, 1): only that stamp lets the broker
    # recognise its retry; (PID, 1, 0) would be appended a second time.
    assert stamp_of(earlier) == (PID, 0, 1)


def test_a_failure_does_not_renumber_a_later_batch_whose_outcome_is_unknown() -> None:
    state = ready_state()
    # A new producer sends one batch at a time until the broker has its state; pipelined
    # after that, `later` is appended out of order only by a broker that lost the state
    # since (an unclean leader election, the producer id expired there).
    warm(state, TP)  # sequence 0
    failed = send(state, new_batch(TP))
    later = send(state, new_batch(TP))
    error = error_for_code(10)  # MESSAGE_TOO_LARGE
    assert state.on_error(failed, error) is Verdict.FAIL
    failed.fail(error)
    state.on_failure(failed, error, may_retry=True)
    # The broker has no state for us any more: `later` (sequence 2) was appended, but the
    # answer was REQUEST_TIMED_OUT. It is retried, and must keep its stamp.
    assert state.on_error(later, error_for_code(7)) is Verdict.RETRY
    state.resolve_sequences()
    if state.epoch_bump_required:
        state.bump_epoch()
    assert stamp_of(later) == (PID, 0, 2)


def test_a_batch_between_two_expired_batches_does_not_stall_the_partition() -> None:
    state = ready_state()
    warm(state, TP)  # sequence 0
    b0, b1, b2, b3 = (send(state, new_batch(TP)) for _ in range(4))
    expire(state, b1, outstanding=True)
    expire(state, b3, outstanding=True)
    # The leader refuses the whole pipeline (NOT_LEADER_OR_FOLLOWER): nothing is appended.
    assert state.on_error(b0, error_for_code(6)) is Verdict.RETRY
    state.on_late_outcome(b1, appended=False)
    assert state.on_error(b2, error_for_code(6)) is Verdict.RETRY
    state.on_late_outcome(b3, appended=False)
    send(state, b0)
    complete(state, b0)  # b0 written at sequence 1; b1 (sequence 2) is missing for good
    # b2 (sequence 3) is now refused, every time it is resent: a gap the client knows of.
    for _ in range(3):
        send(state, b2)
        assert state.on_error(b2, OOOSN) is Verdict.RETRY
        state.resolve_sequences()
        if state.epoch_bump_required:
            break
    assert state.epoch_bump_required


# --- random schedules against a model broker ------------------------------------------------

MAX_IN_FLIGHT = 5  # per partition, as the producer allows with idempotence
RETRIES = 3


@dataclass
class ProducerEntry:
    """The broker's state for one producer id on one partition (ProducerStateEntry)."""

    epoch: int
    last_sequence: int
    #: (first sequence, last sequence, base offset) of the last 5 appended batches.
    batches: deque[tuple[int, int, int]] = dataclass_field(default_factory=lambda: deque(maxlen=5))


@dataclass
class ModelPartition:
    """One partition's log and producer state, with the broker's append checks."""

    log: list[bytes] = dataclass_field(default_factory=list)
    producers: dict[int, ProducerEntry] = dataclass_field(default_factory=dict)

    def produce(self, stamp: tuple[int, int, int], records: tuple[bytes, ...]) -> int:
        """Append a batch as the broker does; the error code (0 also for a duplicate)."""
        pid, epoch, first = stamp
        last = increment_sequence(first, len(records) - 1)
        entry = self.producers.get(pid)
        if entry is not None:
            if epoch == entry.epoch and any((f, la) == (first, last) for f, la, _ in entry.batches):
                return 0  # a duplicate: success with the original offset, nothing appended
            if epoch < entry.epoch:
                return 47  # INVALID_PRODUCER_EPOCH
            expected = 0 if epoch != entry.epoch else increment_sequence(entry.last_sequence, 1)
            if first != expected:
                return 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        # (No state for this producer id: any sequence is accepted.)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch, last)
        if epoch != entry.epoch:
            entry.batches.clear()
        entry.epoch, entry.last_sequence = epoch, last
        entry.batches.append((first, last, len(self.log)))
        self.log.extend(records)
        return 0


@dataclass
class Request:
    batch: ProducerBatch
    stamp: tuple[int, int, int]
    records: tuple[bytes, ...]


class Simulation:
    """The sender's use of IdempotenceState (sender.py), against model partitions."""

    def __init__(self, first_epoch: int) -> None:
        self.state = IdempotenceState()
        self.first_epoch = first_epoch
        self.next_pid = PID
        self.tps = (TP, OTHER)
        self.queues: dict[TopicPartition, list[ProducerBatch]] = {tp: [] for tp in self.tps}
        self.requests: dict[TopicPartition, list[Request]] = {tp: [] for tp in self.tps}
        self.brokers = {tp: ModelPartition() for tp in self.tps}
        self.records: dict[int, tuple[bytes, ...]] = {}  # by id(batch)
        self.first_drains: dict[TopicPartition, list[bytes]] = {tp: [] for tp in self.tps}
        self.batches: list[ProducerBatch] = []
        self.counter = 0
        self.retries = RETRIES

    # --- the producer side --------------------------------------------------------------

    def new(self, tp: TopicPartition, count: int) -> None:
        builder = RecordBatchBuilder()
        values = []
        for _ in range(count):
            value = b"%d" % self.counter
            self.counter += 1
            builder.try_append(1000, None, value)
            values.append(value)
        batch = ProducerBatch(tp, builder, 0, reserved_bytes=0)
        self.records[id(batch)] = tuple(values)
        self.queues[tp].append(batch)
        self.batches.append(batch)

    def tick(self) -> None:
        """The start of Sender.run_once."""
        state = self.state
        state.resolve_sequences()
        if state.producer_id_required:
            state.set_producer_id(self.next_pid, self.first_epoch)
            self.next_pid += 1
        elif state.epoch_bump_required:
            state.bump_epoch()

    def drain(self, tp: TopicPartition) -> None:
        self.tick()
        queue = self.queues[tp]
        if not queue or len(self.requests[tp]) >= MAX_IN_FLIGHT:
            return
        head = queue[0]
        if not self.state.can_drain(head):
            return
        queue.pop(0)
        if not head.has_sequence:
            self.first_drains[tp].extend(self.records[id(head)])
        self.state.assign_sequence(head)
        stamp = stamp_of(head)
        assert wire_stamp(head) == stamp
        self.requests[tp].append(Request(head, stamp, self.records[id(head)]))

    def reenqueue(self, batch: ProducerBatch) -> None:
        """RecordAccumulator.reenqueue: stamped retries in sequence order, at the front."""
        batch.attempts += 1
        queue = self.queues[batch.tp]
        index = len(queue)
        for i, queued in enumerate(queue):
            if not queued.has_sequence or queued.base_sequence > batch.base_sequence:
                index = i
                break
        queue.insert(index, batch)

    def respond(self, tp: TopicPartition, kind: str) -> None:
        """The oldest request of ``tp`` is answered (requests to a leader are in order)."""
        if not self.requests[tp]:
            return
        request = self.requests[tp].pop(0)
        batch = request.batch
        broker = self.brokers[tp]
        error: BrokerError | None
        if kind == "split":
            # MESSAGE_TOO_LARGE for a batch of several records: the sender splits it. Also
            # where the broker has no state for the producer: it would take a later batch
            # with any sequence, before the pieces, had the producer one in flight there.
            if batch.final_state is None and should_split(batch, error_for_code(10), 0, 1):
                self.split(batch)
                return
            else:  # one record, or sent before (maybe appended then), or expired: refused
                kind = "too_large"
        if kind == "normal":
            code = broker.produce(request.stamp, request.records)
            assert code != 47, "a batch went out under an epoch older than the broker's"
            error = error_for_code(code) if code else None
        elif kind == "lost":  # appended (if valid), but the answer is an error
            broker.produce(request.stamp, request.records)
            error = error_for_code(7)  # REQUEST_TIMED_OUT
        elif kind == "not_leader":  # not appended, retriable
            # Each request on its own: the next one may be appended (a leader still loading
            # refuses the first requests of a pipeline and takes the next). Without state
            # for the producer it takes any first sequence: a producer that had pipelined
            # would get the later batch written before this one.
            error = error_for_code(6)
        else:  # rejected for good, not appended
            assert kind == "too_large"
            error = error_for_code(10)
        state = self.state
        if batch.final_state is not None:  # expired while its request was out
            state.on_late_outcome(
                batch, appended=error is None or isinstance(error, DuplicateSequenceNumberError)
            )
            return
        if error is None:
            complete(state, batch)
            return
        verdict = state.on_error(batch, error)
        if verdict is Verdict.DUPLICATE:
            complete(state, batch)
        elif verdict is Verdict.FAIL:
            batch.fail(error)
            state.on_failure(batch, error, may_retry=batch.attempts < self.retries)
        elif batch.attempts >= self.retries:
            batch.fail(error)
            state.on_expired(batch, outstanding=False)
        else:
            self.reenqueue(batch)

    def split(self, batch: ProducerBatch) -> None:
        """What the sender does on MESSAGE_TOO_LARGE (internals/split.py), into halves."""
        records = self.records[id(batch)]
        limit = max(batch.close().uncompressed_size // 2, 1)
        pieces = split_batch(batch, RecordBatchBuilder, limit, 0)
        start = 0
        for piece in pieces:
            self.records[id(piece)] = records[start : start + piece.record_count]
            start += piece.record_count
            self.batches.append(piece)
        self.state.on_split(batch, pieces)
        queue = self.queues[batch.tp]
        index = len(queue)
        for i, queued in enumerate(queue):
            if not queued.has_sequence or queued.base_sequence > batch.base_sequence:
                index = i
                break
        queue[index:index] = pieces
        batch.mark_split(pieces)

    def expire(self, tp: TopicPartition, pick: int) -> None:
        """A batch of ``tp`` (queued or in flight) passes its delivery timeout."""
        candidates = [(b, False) for b in self.queues[tp]]
        candidates += [(r.batch, True) for r in self.requests[tp] if r.batch.final_state is None]
        if not candidates:
            return
        batch, outstanding = candidates[pick % len(candidates)]
        if not outstanding:
            self.queues[tp].remove(batch)
        batch.fail(TimeoutError("delivery timeout"))
        self.state.on_expired(batch, outstanding=outstanding)

    # --- checks -----------------------------------------------------------------------

    def check(self) -> None:
        for tp in self.tps:
            log = self.brokers[tp].log
            assert len(log) == len(set(log)), f"a record was appended twice: {log}"
            written = set(log)
            assert [r for r in self.first_drains[tp] if r in written] == log, (
                "the log's order is not the order of first drains"
            )
        for batch in self.batches:
            result = batch.result
            if result.done:  # every acknowledged record is in the log (a split: per piece)
                records = self.records[id(batch)]
                acked = {r for i, r in enumerate(records) if result.record_error(i) is None}
                assert acked <= set(self.brokers[batch.tp].log)

    def check_not_stuck(self) -> None:
        """With nothing in flight and the state quiet, a partition's head batch may drain."""
        self.tick()
        state = self.state
        if state.epoch_bump_required or state.producer_id_required:
            return
        for tp in self.tps:
            if self.queues[tp] and not self.requests[tp] and not state.is_unresolved(tp):
                assert state.can_drain(self.queues[tp][0]), f"{tp} is stuck"

    def finish(self) -> None:
        """Answer everything normally, retries unbounded: every open batch must succeed."""
        self.retries = 2**31
        open_batches = [b for b in self.batches if b.final_state is None]
        for _ in range(300):
            if all(b.final_state is not None for b in self.batches) and not any(
                self.requests.values()
            ):
                break
            for tp in self.tps:
                self.drain(tp)
                self.respond(tp, "normal")
                self.check()
        else:
            raise AssertionError(f"stuck: queued {self.queues}, in flight {self.requests}")
        failed = [
            b
            for b in open_batches
            if b.final_state is not FinalState.SUCCEEDED
            and not (
                b.final_state is FinalState.SPLIT
                and b.result.done
                and b.result.error is None
                and not b.result.record_errors
            )
        ]
        assert not failed, f"batches failed with nothing but normal answers: {failed}"


#: Partition 0 gets most operations, so that long histories build up on it.
PARTITION = st.sampled_from([0, 0, 0, 1])
OPS = st.one_of(
    st.tuples(st.just("new"), PARTITION, st.integers(1, 3)),
    st.tuples(st.just("drain"), PARTITION, st.just(0)),
    st.tuples(
        st.just("respond"),
        PARTITION,
        st.sampled_from(["normal", "normal", "lost", "not_leader", "too_large", "split"]),
    ),
    st.tuples(st.just("expire"), PARTITION, st.integers(0, 10)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # the new epoch's first batch fails for good too: the next is renumbered again
    first_epoch=0,
    ops=[
        *[("new", 0, 1)] * 4,
        ("drain", 0, 0),
        ("respond", 0, "normal"),  # the broker has our state: the others pipeline
        *[("drain", 0, 0)] * 3,
        ("respond", 0, "too_large"),  # a gap at sequence 1: 2 and 3 are refused behind it
        ("respond", 0, "normal"),
        ("respond", 0, "normal"),
        ("drain", 0, 0),  # the epoch is bumped, 2 and 3 renumbered 0 and 1; 0 goes out
        ("respond", 0, "too_large"),  # ... and fails for good: 1 was stuck behind it
    ],
)
@example(  # a new producer's first batch refused while the next ones were pipelined
    first_epoch=0,
    ops=[
        *[("new", 0, 1)] * 6,
        *[("drain", 0, 0)] * 3,
        # The leader is still loading; it takes the next requests (any first sequence):
        # the first could then never be written in its place (it failed OUT_OF_ORDER).
        ("respond", 0, "not_leader"),
    ],
)
@example(  # the same for a batch split after the new epoch, before any acknowledgement
    first_epoch=0,
    ops=[
        ("new", 0, 1),
        ("drain", 0, 0),
        ("new", 0, 2),
        ("respond", 0, "too_large"),  # nothing ever appended: the broker has no state
        *[("new", 0, 1)] * 3,
        *[("drain", 0, 0)] * 2,
        # Split: had the next batch been pipelined, it would go in before the pieces.
        ("respond", 0, "split"),
    ],
)
@given(
    # INT16_MAX - 1 drives epoch exhaustion (a new producer id settles the bump).
    first_epoch=st.sampled_from([0, INT16_MAX - 1]),
    ops=st.lists(OPS, min_size=10, max_size=80),
)
def test_random_schedules_never_duplicate_reorder_or_stall(
    first_epoch: int, ops: list[tuple[str, int, object]]
) -> None:
    sim = Simulation(first_epoch)
    for op, index, arg in ops:
        tp = sim.tps[index]
        if op == "new":
            assert isinstance(arg, int)
            sim.new(tp, arg)
        elif op == "drain":
            sim.drain(tp)
        elif op == "respond":
            assert isinstance(arg, str)
            sim.respond(tp, arg)
        else:
            assert isinstance(arg, int)
            sim.expire(tp, arg)
        sim.check()
        sim.check_not_stuck()
    sim.finish()


def test_a_gap_settled_by_a_new_producer_id_does_not_stall() -> None:
    state = ready_state(epoch=INT16_MAX)
    b0 = send(state, new_batch(TP))
    complete(state, b0)  # the broker has our state: the next may pipeline
    b1 = send(state, new_batch(TP))
    b2 = send(state, new_batch(TP))
    error = error_for_code(10)  # b1: MESSAGE_TOO_LARGE, a gap at sequence 1
    assert state.on_error(b1, error) is Verdict.FAIL
    b1.fail(error)
    state.on_failure(b1, error, may_retry=True)
    assert state.on_error(b2, OOOSN) is Verdict.RETRY  # refused behind the gap
    state.resolve_sequences()
    assert state.epoch_bump_required
    assert state.bump_epoch() is False  # the epoch is exhausted
    state.set_producer_id(PID + 1, 0)
    for _ in range(3):  # b2 keeps being refused under its old stamp
        if stamp_of(b2)[0] == PID + 1:
            break
        state.on_error(b2, OOOSN)
        state.resolve_sequences()
        if state.epoch_bump_required:
            state.bump_epoch()
    assert stamp_of(b2)[0] == PID + 1


def test_out_of_order_for_a_batch_overtaken_by_an_acknowledged_later_one_fails_it() -> None:
    # The leader moves, by an unclean election, to a replica with no state for this producer:
    # b0 and b1 are refused NOT_LEADER_OR_FOLLOWER by the old leader, b2 is accepted a moment
    # later by the new one (without state it takes any first sequence). b0's and b1's resends
    # are refused from then on: retrying them would go on until the delivery timeout (the
    # partition blocked behind them) and could never put them in order. They fail; what
    # comes after b2 goes on. (A new producer cannot get here at start: it sends one batch
    # at a time until the broker has its state, so the pipeline follows an acknowledgement.)
    state = ready_state(epoch=0)
    warm(state, TP)  # sequence 0
    b0, b1, b2 = (send(state, new_batch(TP, records=2)) for _ in range(3))
    not_leader = error_for_code(6)
    assert state.on_error(b0, not_leader) is Verdict.RETRY
    assert state.on_error(b1, not_leader) is Verdict.RETRY
    complete(state, b2)
    assert state.can_drain(b0)
    assert state.on_error(b0, OOOSN) is Verdict.FAIL
    b0.fail(OOOSN)
    state.on_failure(b0, OOOSN, may_retry=True)
    assert state.can_drain(b1)
    assert not state.can_drain(new_batch(TP))  # gap mode: nothing new until it settles
    assert state.on_error(b1, OOOSN) is Verdict.FAIL
    b1.fail(OOOSN)
    state.on_failure(b1, OOOSN, may_retry=True)
    bump(state)
    assert stamp_of(send(state, new_batch(TP))) == (PID, 1, 0)


def test_out_of_order_for_a_batch_after_the_last_acknowledged_one_is_still_retried() -> None:
    # The usual case: an earlier batch is missing (its retry is coming); this one waits.
    state = ready_state(epoch=0)
    b0 = send(state, new_batch(TP, records=2))
    complete(state, b0)  # the broker has our state: the next may pipeline
    b1 = send(state, new_batch(TP, records=2))
    b2 = send(state, new_batch(TP, records=2))
    assert state.on_error(b1, error_for_code(6)) is Verdict.RETRY
    assert state.on_error(b2, OOOSN) is Verdict.RETRY


# --- idle topics' state released (issue 30) ------------------------------------------------

IDLE = TopicPartition("idle", 0)


def test_an_idle_topics_settled_partitions_are_released() -> None:
    state = ready_state()
    for tp in (TP, OTHER, IDLE):
        complete(state, send(state, new_batch(tp)))
    outstanding = send(state, new_batch(OTHER))  # still in flight: kept for now
    state.release_topics(["t"])
    assert state.partitions_held == 2  # IDLE, and t-1 until its batch has an outcome
    assert state.unacked(OTHER) == [outstanding]
    complete(state, outstanding)
    state.resolve_sequences()  # every sender pass
    assert state.partitions_held == 1


def test_a_partition_written_after_a_release_waits_for_an_epoch_bump() -> None:
    """The broker still has t-0 at sequence 1: sequence 0 under the same epoch would fail."""
    state = ready_state()
    complete(state, send(state, new_batch(TP)))
    state.release_topics(["t"])
    again = new_batch(TP)
    assert not state.can_drain(again)
    assert state.epoch_bump_required
    assert state.bump_epoch()
    send(state, again)
    assert stamp_of(again) == (PID, 1, 0)  # sequence 0, under a new epoch: accepted
    fresh = new_batch(TopicPartition("never", 0))
    assert state.can_drain(fresh)  # one bump settles it for every partition


def test_a_release_of_partitions_under_an_old_epoch_needs_no_bump() -> None:
    state = ready_state()
    complete(state, send(state, new_batch(TP)))
    state.epoch_bump_required = True
    assert state.bump_epoch()  # TP's state is now of the old epoch
    state.release_topics(["t"])
    assert state.partitions_held == 0
    assert state.can_drain(new_batch(TP))
    assert not state.epoch_bump_required


def test_a_released_partition_in_use_again_is_not_released_behind_its_back() -> None:
    state = ready_state()
    first = send(state, new_batch(TP))
    state.release_topics(["t"])  # t-0 has a batch in flight: pending
    second = new_batch(TP)
    complete(state, first)
    send(state, second)  # used again before the pending release ran
    state.resolve_sequences()
    assert state.unacked(TP) == [second]
    assert stamp_of(second) == (PID, 0, 1)
