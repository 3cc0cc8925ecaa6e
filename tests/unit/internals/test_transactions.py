"""The transaction state machine (internals/transactions.py): states, errors, partitions."""

from __future__ import annotations

import pytest

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    AbortableTransactionError,
    ConfigError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
)
from aiokprod.internals.transactions import (
    TransactionManager,
    TxnState,
    coordinator_error,
    is_fatal,
)
from aiokprod.types import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def state(txn: TransactionManager) -> TxnState:
    """The state, read through a call (mypy would narrow ``txn.state`` across calls)."""
    return txn.state


def started(txn: TransactionManager) -> bool:
    return txn.transaction_started


def ready(tv2: bool = False) -> TransactionManager:
    txn = TransactionManager("tx", 60_000)
    txn.tv2 = tv2
    txn.start_init()
    txn.init_done()
    return txn


def test_lifecycle_commit_and_abort() -> None:
    txn = ready()
    assert state(txn) is TxnState.READY
    txn.begin()
    txn.check_send()
    txn.begin_commit()
    assert state(txn) is TxnState.COMMITTING
    txn.end_done()
    assert state(txn) is TxnState.READY
    txn.begin()
    txn.begin_abort()
    txn.end_done()
    assert state(txn) is TxnState.READY


@pytest.mark.parametrize(
    "call",
    ["check_send", "begin_commit", "begin_abort", "check_offsets"],
)
def test_calls_outside_a_transaction_are_illegal(call: str) -> None:
    txn = ready()
    with pytest.raises(IllegalStateError):
        getattr(txn, call)()
    assert state(txn) is TxnState.READY


def test_begin_twice_and_commit_twice_are_illegal() -> None:
    txn = ready()
    txn.begin()
    with pytest.raises(IllegalStateError, match="already open"):
        txn.begin()
    txn.begin_commit()
    with pytest.raises(IllegalStateError):
        txn.begin_commit()


def test_before_init_nothing_is_allowed() -> None:
    txn = TransactionManager("tx", 60_000)
    with pytest.raises(IllegalStateError):
        txn.begin()
    txn.start_init()
    with pytest.raises(IllegalStateError):
        txn.start_init()


def test_batch_error_makes_the_transaction_abortable() -> None:
    txn = ready()
    txn.begin()
    txn.on_batch_error(NotEnoughReplicasError("x"))
    assert state(txn) is TxnState.ABORTABLE_ERROR
    for call in (txn.check_send, txn.begin_commit, txn.begin, txn.check_offsets):
        with pytest.raises(AbortableTransactionError) as caught:
            call()
        assert isinstance(caught.value.__cause__, NotEnoughReplicasError)
    txn.begin_abort()
    txn.end_done()
    assert state(txn) is TxnState.READY
    assert txn.epoch_bump_required  # sequences may have a gap: next epoch before going on
    txn.begin()


def test_error_during_commit_is_abortable() -> None:
    txn = ready()
    txn.begin()
    txn.begin_commit()
    txn.commit_failed(KafkaTimeoutError("EndTxn timed out"))
    assert state(txn) is TxnState.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError):
        txn.check_committing()
    txn.begin_abort()
    txn.end_done()
    assert state(txn) is TxnState.READY


def test_fenced_is_fatal_for_every_later_call() -> None:
    txn = ready()
    txn.begin()
    fenced = ProducerFencedError("newer epoch")
    txn.on_batch_error(fenced)
    assert txn.is_fatal
    for call in (txn.check_send, txn.begin_commit, txn.begin_abort, txn.begin, txn.check_offsets):
        with pytest.raises(ProducerFencedError) as caught:
            call()
        assert caught.value is fenced
    # Nothing moves it out of the fatal state.
    txn.on_batch_error(NotEnoughReplicasError("x"))
    txn.end_done()
    assert state(txn) is TxnState.FATAL_ERROR


def test_old_epoch_on_produce_is_abortable_but_on_a_coordinator_request_fenced() -> None:
    txn = ready()
    txn.begin()
    txn.on_batch_error(InvalidProducerEpochError())
    assert state(txn) is TxnState.ABORTABLE_ERROR  # KIP-588
    mapped = coordinator_error(InvalidProducerEpochError())
    assert isinstance(mapped, ProducerFencedError)
    assert is_fatal(mapped)
    assert is_fatal(TransactionalIdAuthorizationFailedError())
    assert not is_fatal(NotEnoughReplicasError())


def test_aborted_records_do_not_poison_the_next_transaction() -> None:
    txn = ready()
    txn.begin()
    txn.begin_abort()
    txn.on_batch_error(TransactionAbortedError("aborted"))
    txn.end_done()
    assert state(txn) is TxnState.READY
    assert not txn.epoch_bump_required


def test_failed_abort_can_be_retried() -> None:
    txn = ready()
    txn.begin()
    txn.begin_abort()
    txn.abort_failed(KafkaTimeoutError("EndTxn timed out"))
    assert state(txn) is TxnState.ABORTABLE_ERROR
    txn.begin_abort()
    txn.end_done()
    assert state(txn) is TxnState.READY


def test_protocol1_partitions_wait_for_add_partitions() -> None:
    txn = ready(tv2=False)
    txn.begin()
    assert not txn.transaction_started
    assert txn.add_partition(TP0)
    assert not txn.add_partition(TP0)  # once per transaction
    assert txn.add_partition(TP1)
    assert not txn.is_added(TP0)
    taken = txn.take_pending()
    assert taken == [TP0, TP1]
    assert not txn.has_pending
    assert started(txn)
    txn.partitions_retry([TP1])  # CONCURRENT_TRANSACTIONS, say
    txn.partitions_added([TP0])
    assert txn.is_added(TP0)
    assert not txn.is_added(TP1)
    assert txn.take_pending() == [TP1]
    txn.partitions_added([TP1])
    assert txn.is_added(TP1)
    txn.begin_commit()
    txn.end_done()
    txn.begin()
    assert not txn.is_added(TP0)  # a new transaction adds its partitions again
    assert not txn.transaction_started


def test_protocol2_partitions_are_added_by_produce() -> None:
    txn = ready(tv2=True)
    txn.begin()
    assert not txn.add_partition(TP0)  # no AddPartitionsToTxn
    assert txn.is_added(TP0)
    assert not txn.transaction_started  # until a Produce request is written
    txn.on_sent([TP0])
    assert started(txn)


def test_offsets_start_a_transaction() -> None:
    txn = ready(tv2=True)
    txn.begin()
    txn.offsets_added()
    assert started(txn)
    txn.begin_commit()
    txn.end_done()
    txn.begin()
    assert not txn.transaction_started


def test_config_transactional_needs_idempotence() -> None:
    with pytest.raises(ConfigError, match="idempotence"):
        ProducerConfig.from_options("h:1", transactional_id="tx", enable_idempotence=False)
    with pytest.raises(ConfigError, match="idempotence"):
        ProducerConfig.from_options("h:1", transactional_id="tx", acks=1)
    cfg = ProducerConfig.from_options("h:1", transactional_id="tx")
    assert cfg.enable_idempotence
    assert cfg.transaction_timeout_ms == 60_000
