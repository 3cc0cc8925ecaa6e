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


# --- prepare_transaction: PREPARING -> PREPARED ----------------------------------------------


def prepared(tv2: bool = True) -> TransactionManager:
    """A transaction with one partition, prepared."""
    txn = ready(tv2)
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_prepare()
    assert state(txn) is TxnState.PREPARING
    txn.check_preparing()
    txn.prepare_done()
    assert state(txn) is TxnState.PREPARED
    assert txn.is_prepared
    return txn


@pytest.mark.parametrize("tv2", [True, False], ids=["protocol2", "protocol1"])
def test_prepared_refuses_everything_that_would_join_the_transaction(tv2: bool) -> None:
    txn = prepared(tv2)
    for call in (txn.check_send, txn.check_offsets, txn.begin, txn.begin_prepare):
        with pytest.raises(IllegalStateError, match="prepared"):
            call()
        assert state(txn) is TxnState.PREPARED
    # A partition cannot sneak in either: send() checks the state before enlisting one.
    with pytest.raises(IllegalStateError, match="prepared"):
        txn.check_send()


def test_prepared_can_still_be_committed_or_aborted_locally() -> None:
    txn = prepared()
    txn.begin_commit()
    assert state(txn) is TxnState.COMMITTING
    txn.end_done()
    assert state(txn) is TxnState.READY
    assert not txn.is_prepared
    txn = prepared()
    txn.begin_abort()
    assert state(txn) is TxnState.ABORTING
    txn.end_done()
    assert state(txn) is TxnState.READY
    txn.begin()  # the next transaction may begin
    assert state(txn) is TxnState.IN_TRANSACTION


@pytest.mark.parametrize("tv2", [True, False], ids=["protocol2", "protocol1"])
def test_prepare_of_an_empty_transaction_is_refused_and_changes_nothing(tv2: bool) -> None:
    txn = ready(tv2)
    txn.begin()
    with pytest.raises(IllegalStateError, match="empty"):
        txn.begin_prepare()
    assert state(txn) is TxnState.IN_TRANSACTION
    txn.offsets_added()  # offsets alone are something to complete
    txn.begin_prepare()
    assert state(txn) is TxnState.PREPARING


@pytest.mark.parametrize("tv2", [True, False], ids=["protocol2", "protocol1"])
def test_prepare_counts_records_queued_but_not_yet_sent(tv2: bool) -> None:
    # Under protocol 2 a partition counts as added when its first record is queued, before
    # any Produce request; under protocol 1 it waits for AddPartitionsToTxn.
    txn = ready(tv2)
    txn.begin()
    txn.add_partition(TP1)
    txn.begin_prepare()
    assert state(txn) is TxnState.PREPARING


def test_prepare_outside_a_transaction_or_twice_is_illegal() -> None:
    txn = ready()
    with pytest.raises(IllegalStateError, match="no transaction is open"):
        txn.begin_prepare()
    txn = prepared()
    with pytest.raises(IllegalStateError, match="prepared already"):
        txn.begin_prepare()


def test_a_record_failing_while_preparing_makes_it_abortable() -> None:
    txn = ready()
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_prepare()
    txn.on_batch_error(NotEnoughReplicasError())
    assert state(txn) is TxnState.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError) as caught:
        txn.check_preparing()
    assert isinstance(caught.value.__cause__, NotEnoughReplicasError)
    txn.prepare_done()  # no effect outside PREPARING
    assert state(txn) is TxnState.ABORTABLE_ERROR
    txn.begin_abort()
    txn.end_done()
    assert state(txn) is TxnState.READY


def test_a_failed_prepare_request_is_abortable_and_fencing_fatal() -> None:
    txn = ready()
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_prepare()
    txn.prepare_failed(KafkaTimeoutError("no answer"))
    assert state(txn) is TxnState.ABORTABLE_ERROR
    txn = ready()
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_prepare()
    txn.prepare_failed(ProducerFencedError())
    assert state(txn) is TxnState.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        txn.begin_abort()


def test_fenced_while_prepared_is_fatal() -> None:
    txn = prepared()
    txn.fail_fatal(ProducerFencedError())
    assert not txn.is_prepared
    for call in (txn.begin_commit, txn.begin_abort, txn.check_send):
        with pytest.raises(ProducerFencedError):
            call()


def test_a_cancelled_prepare_leaves_the_transaction_open() -> None:
    txn = ready()
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_prepare()
    txn.prepare_cancelled()
    assert state(txn) is TxnState.IN_TRANSACTION
    txn.check_send()  # records may join again
    txn.begin_prepare()
    txn.on_batch_error(NotEnoughReplicasError())
    txn.prepare_cancelled()  # an error that arrived meanwhile is kept
    assert state(txn) is TxnState.ABORTABLE_ERROR


@pytest.mark.parametrize("prepare_first", [False, True])
def test_a_commit_cancelled_before_its_end_txn_goes_back(prepare_first: bool) -> None:
    txn = prepared() if prepare_first else ready()
    if not prepare_first:
        txn.begin()
        txn.add_partition(TP0)
    before = state(txn)
    txn.begin_commit()
    txn.commit_cancelled()
    assert state(txn) is before
    txn.begin_abort()  # and it may be aborted (or committed) from there
    txn.end_done()
    assert state(txn) is TxnState.READY


def test_a_commit_cancelled_after_its_end_txn_is_finished_by_commit_only() -> None:
    txn = ready()
    txn.begin()
    txn.add_partition(TP0)
    txn.begin_commit()
    txn.sending_end_txn()
    txn.commit_cancelled()
    assert state(txn) is TxnState.COMMITTING
    with pytest.raises(IllegalStateError, match="call commit_transaction\\(\\) again"):
        txn.begin_abort()
    with pytest.raises(IllegalStateError):
        txn.begin()
    txn.begin_commit()  # resumes: only the EndTxn is sent again
    assert state(txn) is TxnState.COMMITTING
    txn.end_done()
    assert state(txn) is TxnState.READY
    assert not txn.end_txn_sent
    txn.begin()
    txn.begin_commit()
    txn.commit_cancelled()  # a new transaction's commit starts from scratch
    assert state(txn) is TxnState.IN_TRANSACTION
