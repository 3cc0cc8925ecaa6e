"""The cluster behind the bootstrap address is replaced (issue 29): the state machines' part.

The new cluster never issued the producer's id and holds none of its state: the idempotence
state gives the id up and numbers every pending batch afresh under the next one; an open
transaction becomes abortable and its abort re-initialises. The connection and metadata
side is in tests/unit/net/test_pool_cluster.py; whole runs in tests/unit/sim.
"""

from __future__ import annotations

import pytest

from aiokprod.errors import (
    AbortableTransactionError,
    ClusterChangedError,
    KafkaConnectionError,
    ProducerFencedError,
)
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.sequences import Verdict
from aiokprod.internals.transactions import TransactionManager, TxnState
from aiokprod.types import TopicPartition

from ._helpers import new_batch

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def stamp_of(batch: ProducerBatch) -> tuple[int, int, int]:
    return (batch.producer_id, batch.producer_epoch, batch.base_sequence)


def send(state: IdempotenceState, batch: ProducerBatch) -> ProducerBatch:
    assert state.can_drain(batch)
    state.assign_sequence(batch)
    batch.in_flight = True
    return batch


def complete(state: IdempotenceState, batch: ProducerBatch) -> None:
    batch.in_flight = False
    batch.complete(0, -1)
    state.on_success(batch)


def back_to_queue(state: IdempotenceState, batch: ProducerBatch) -> None:
    """Its connection to the old cluster closed: a retriable error, the batch keeps its stamp."""
    batch.in_flight = False
    assert state.on_error(batch, KafkaConnectionError("closed")) is Verdict.RETRY


def test_nothing_drains_until_the_new_cluster_gave_an_id() -> None:
    state = IdempotenceState()
    state.set_producer_id(0, 0)
    complete(state, send(state, new_batch(TP)))
    state.reset_for_new_cluster()
    assert state.producer_id_required
    assert not state.has_producer_id
    assert not state.can_drain(new_batch(TP))
    assert not state.can_drain(new_batch(OTHER))


def test_pending_batches_are_renumbered_from_zero_under_the_new_id_in_their_order() -> None:
    state = IdempotenceState()
    state.set_producer_id(0, 0)
    complete(state, send(state, new_batch(TP)))  # the old cluster has our state on TP
    b1, b2, b3 = (send(state, new_batch(TP)) for _ in range(3))  # pipelined: seq 1, 2, 3
    o1 = send(state, new_batch(OTHER))
    for batch in (b1, b2, b3, o1):
        back_to_queue(state, batch)
    state.reset_for_new_cluster()
    # The new cluster hands out ids from 0 again: the same number, another producer's id
    # space. Nothing of the old numbering may survive.
    state.set_producer_id(0, 0)
    assert [stamp_of(b) for b in (b1, b2, b3)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert stamp_of(o1) == (0, 0, 0)
    assert all(b.sequence_reset for b in (b1, b2, b3, o1))
    # A fresh batch continues the new numbering.
    fresh = new_batch(TP)
    state.assign_sequence(fresh)
    assert stamp_of(fresh) == (0, 0, 3)


def test_the_new_cluster_gets_one_batch_at_a_time_until_it_acknowledged_one() -> None:
    # Without state for the id a broker takes any first sequence (KIP-360): the gate of a
    # new producer id is back, though the new id has the same number as the old one.
    state = IdempotenceState()
    state.set_producer_id(0, 0)
    complete(state, send(state, new_batch(TP)))
    b1, b2 = send(state, new_batch(TP)), send(state, new_batch(TP))  # pipelined on the old one
    back_to_queue(state, b1)
    back_to_queue(state, b2)
    state.reset_for_new_cluster()
    state.set_producer_id(0, 0)
    assert state.can_drain(b1)
    send(state, b1)
    assert not state.can_drain(b2)  # the lowest first, and alone
    assert not state.can_drain(new_batch(TP))
    complete(state, b1)
    assert state.can_drain(b2)


def test_expired_batches_are_not_carried_over() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 3)
    complete(state, send(state, new_batch(TP)))
    expired, kept = send(state, new_batch(TP)), send(state, new_batch(TP))
    expired.in_flight = False
    expired.fail(TimeoutError("delivery timeout"))
    state.on_expired(expired, outstanding=False)
    back_to_queue(state, kept)
    assert state.is_unresolved(TP)
    state.reset_for_new_cluster()
    state.set_producer_id(0, 0)
    assert not state.is_unresolved(TP)  # the old log's questions do not matter any more
    assert stamp_of(kept) == (0, 0, 0)
    assert state.unacked(TP) == [kept]


def test_a_bump_asked_for_on_the_old_cluster_is_dropped() -> None:
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    state.epoch_bump_required = True
    state.reset_for_new_cluster()
    assert not state.epoch_bump_required
    assert state.producer_id_required


# --- transactions ------------------------------------------------------------------------------


def txn_in(start: TxnState) -> TransactionManager:
    txn = TransactionManager("tx", 60_000)
    txn.state = start
    return txn


def needs_reinit(txn: TransactionManager) -> bool:
    return txn.reinit_required


def txn_state(txn: TransactionManager) -> TxnState:
    """Read through a call (mypy would narrow ``txn.state`` across calls)."""
    return txn.state


@pytest.mark.parametrize(
    "before", [TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR]
)
def test_an_open_transaction_becomes_abortable_with_the_cluster_error(before: TxnState) -> None:
    txn = txn_in(before)
    error = ClusterChangedError("old", "new")
    txn.on_cluster_changed(error)
    assert txn_state(txn) is TxnState.ABORTABLE_ERROR
    assert txn.reinit_required
    with pytest.raises(AbortableTransactionError) as raised:
        txn.check_send()
    assert raised.value.__cause__ is error
    txn.begin_abort()  # allowed: the abort re-initialises on the new cluster
    assert txn_state(txn) is TxnState.ABORTING


def test_between_transactions_only_the_next_begin_re_initialises() -> None:
    txn = txn_in(TxnState.READY)
    txn.on_cluster_changed(ClusterChangedError("old", "new"))
    assert txn_state(txn) is TxnState.READY
    assert needs_reinit(txn)
    txn.reinit_done()
    assert not needs_reinit(txn)
    txn.begin()
    assert txn_state(txn) is TxnState.IN_TRANSACTION


def test_a_fatal_producer_stays_fatal() -> None:
    txn = txn_in(TxnState.FATAL_ERROR)
    txn.last_error = ProducerFencedError("fenced")
    txn.on_cluster_changed(ClusterChangedError("old", "new"))
    assert txn_state(txn) is TxnState.FATAL_ERROR
    assert not txn.reinit_required


def test_the_error_names_both_clusters_and_survives_copies() -> None:
    import copy
    import pickle

    error = ClusterChangedError("old-id", "new-id")
    assert "'old-id'" in str(error)
    assert "'new-id'" in str(error)
    for clone in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert (clone.old_cluster_id, clone.new_cluster_id) == ("old-id", "new-id")
        assert str(clone) == str(error)
    assert not error.retriable
