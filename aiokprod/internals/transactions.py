r"""Transaction state: what a transactional producer may do now, and what an error means.

A synchronous state machine after the Java client's ``TransactionManager`` (the transactional
half; :mod:`aiokprod.internals.idempotence` is the idempotent half). It does no I/O: the
coordinator round trips are in :mod:`aiokprod.internals.txn_requests`, which reports their
outcomes here.

States::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING -> READY
                                                 |    \\-> ABORTABLE_ERROR -> ABORTING -> READY
                                                 |\\-> ABORTING -> READY
                                                 \\-> PREPARING -> PREPARED -> COMMITTING | ABORTING
                                                        \\-> ABORTABLE_ERROR
    any -> FATAL_ERROR (fenced, unauthorized, unsupported): every later call raises; close.

PREPARED is a transaction whose records are all acknowledged and that is left open for
another client to complete (``prepare_transaction``; after KIP-939's ``prepareTransaction``,
without its broker support): nothing more may join it, and closing the producer leaves it
open instead of aborting it.

Partitions join a transaction before records are sent to them. With transaction protocol 2
(KIP-890; ``transaction.version`` >= 2 finalized on the cluster) the Produce request itself
adds them (Produce v12+), so every partition counts as added. With protocol 1 the client sends
AddPartitionsToTxn first and batches of a partition wait until it is in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from aiokprod.errors import (
    AbortableTransactionError,
    BrokerError,
    BrokerUnsupportedVersionError,
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from aiokprod.types import TopicPartition

#: Errors after which the producer can do nothing but close (Java: ``isFatalException``).
_FATAL: tuple[type[BaseException], ...] = (
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    BrokerUnsupportedVersionError,
    UnsupportedVersionError,
    InvalidProducerIdMappingError,
)

#: Produce API version that still means transaction protocol 1 (Java:
#: ``ProduceRequest.LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2``); EndTxn and TxnOffsetCommit
#: likewise stop at v4 under protocol 1.
PRODUCE_MAX_VERSION_TV1 = 11
END_TXN_MAX_VERSION_TV1 = 4
TXN_OFFSET_COMMIT_MAX_VERSION_TV1 = 4


_PREPARED_HINT = (
    "the transaction is prepared: nothing more may join it; it is completed by "
    "commit_transaction(), abort_transaction() or another client (Admin.complete_transaction)"
)


class TxnState(enum.Enum):
    """Where a transactional producer is."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"
    PREPARING = "preparing"
    PREPARED = "prepared"


def is_fatal(error: BaseException) -> bool:
    """Whether ``error`` ends the producer (fencing, authorization, unsupported versions)."""
    return isinstance(error, _FATAL)


def coordinator_error(error: BrokerError) -> KafkaError:
    """The error a coordinator answer means for the producer (Java's handlers).

    An older epoch on a coordinator request means another producer with the same
    transactional id took over: the producer is fenced.
    """
    if isinstance(error, InvalidProducerEpochError):
        fenced = ProducerFencedError(
            "another producer with the same transactional_id has a newer epoch"
        )
        fenced.__cause__ = error
        return fenced
    return error


class TransactionManager:
    """The state of a transactional producer.

    Args:
        transactional_id: the producer's transactional id.
        transaction_timeout_ms: sent with InitProducerId.
    """

    def __init__(self, transactional_id: str, transaction_timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        #: Transaction protocol 2 (KIP-890), decided from the cluster's finalized features.
        self.tv2 = False
        #: The error behind ABORTABLE_ERROR or FATAL_ERROR.
        self.last_error: KafkaError | None = None
        #: Partitions the coordinator knows are in the current transaction.
        self._added: set[TopicPartition] = set()
        #: Partitions with records in this transaction, not yet sent in AddPartitionsToTxn.
        self._pending: set[TopicPartition] = set()
        #: Partitions in an AddPartitionsToTxn request now.
        self._adding: set[TopicPartition] = set()
        #: Set when the transaction failed in a way that needs a new epoch before the next one
        #: (protocol 1: InitProducerId with the current id and epoch, KIP-360).
        self.epoch_bump_required = False
        #: The group offsets are in the current transaction.
        self._offsets_added = False
        #: A Produce request of the current transaction was written.
        self._sent = False
        #: Set when the cluster was replaced (issue 29): the coordinator of the new cluster
        #: knows neither the transaction nor the producer id, so the next abort (or begin)
        #: runs InitProducerId afresh with the transactional id instead of EndTxn.
        self.reinit_required = False
        #: What a commit started from (IN_TRANSACTION or PREPARED): a commit cancelled
        #: before its EndTxn goes back there.
        self._commit_from = TxnState.IN_TRANSACTION
        #: The commit's EndTxn was (or may have been) sent: a cancelled commit then has an
        #: unknown outcome and only commit_transaction() may finish it (the coordinator
        #: answers a repeated EndTxn(commit) with success, KIP-890 for protocol 2).
        self.end_txn_sent = False

    # --- checks for the public calls ---------------------------------------------------------

    def _raise_if_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR and self.last_error is not None:
            raise self.last_error

    def _raise_if_error(self) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.ABORTABLE_ERROR:
            error = AbortableTransactionError(
                f"the transaction hit an error and must be aborted: {self.last_error}"
            )
            error.__cause__ = self.last_error
            raise error

    def _illegal(self, call: str, wanted: str) -> IllegalStateError:
        return IllegalStateError(
            f"{call}: the transactional producer is in state '{self.state.value}' ({wanted})"
        )

    def start_init(self) -> None:
        """``start()`` runs InitProducerId."""
        if self.state is not TxnState.UNINITIALIZED:
            raise self._illegal("init", "it was initialized already")
        self.state = TxnState.INITIALIZING

    def init_done(self) -> None:
        """InitProducerId succeeded: transactions may begin."""
        if self.state is TxnState.INITIALIZING:
            self.state = TxnState.READY

    def begin(self) -> None:
        """``begin_transaction()``."""
        self._raise_if_error()
        if self.state is not TxnState.READY:
            raise self._illegal(
                "begin_transaction()",
                _PREPARED_HINT
                if self.state is TxnState.PREPARED
                else "a transaction is already open"
                if self.state is TxnState.IN_TRANSACTION
                else "it is not ready",
            )
        self._added.clear()
        self._pending.clear()
        self._adding.clear()
        self._offsets_added = False
        self._sent = False
        self.end_txn_sent = False
        self.state = TxnState.IN_TRANSACTION

    def check_send(self) -> None:
        """``send()`` on a transactional producer: only inside a transaction."""
        self._raise_if_error()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._illegal(
                "send()",
                _PREPARED_HINT
                if self.state is TxnState.PREPARED
                else "records are sent only between begin_transaction() and its end",
            )

    def check_offsets(self) -> None:
        """``send_offsets_to_transaction()``: only inside a transaction."""
        self._raise_if_error()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._illegal(
                "send_offsets_to_transaction()",
                _PREPARED_HINT if self.state is TxnState.PREPARED else "no transaction is open",
            )

    def begin_commit(self) -> None:
        """``commit_transaction()``: an open transaction with no error, or a prepared one.

        Also a commit cancelled after its EndTxn was sent: this call finishes it (the
        records are all acknowledged; only the EndTxn is sent again).
        """
        self._raise_if_error()
        if self.state is TxnState.COMMITTING and self.end_txn_sent:
            return
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.PREPARED):
            raise self._illegal("commit_transaction()", "no transaction is open")
        self._commit_from = self.state
        self.state = TxnState.COMMITTING

    def sending_end_txn(self) -> None:
        """The commit's EndTxn is about to be sent: from here a cancelled commit is unknown."""
        self.end_txn_sent = True

    def commit_cancelled(self) -> None:
        """``commit_transaction()`` was cancelled while it waited.

        Before its EndTxn the transaction is as before the call (open or prepared, with any
        error that arrived meanwhile kept); after it, the commit's outcome is unknown and
        the state stays COMMITTING until ``commit_transaction()`` is called again.
        """
        if self.state is TxnState.COMMITTING and not self.end_txn_sent:
            self.state = self._commit_from

    def begin_abort(self) -> None:
        """``abort_transaction()``: an open or prepared transaction, or one that hit an error."""
        self._raise_if_fatal()
        if self.state is TxnState.COMMITTING and self.end_txn_sent:
            raise self._illegal(
                "abort_transaction()",
                "a cancelled commit_transaction() sent its EndTxn, so the transaction may be "
                "committed already: call commit_transaction() again to finish the commit",
            )
        if self.state not in (
            TxnState.IN_TRANSACTION,
            TxnState.ABORTABLE_ERROR,
            TxnState.PREPARED,
        ):
            raise self._illegal("abort_transaction()", "no transaction is open")
        self.state = TxnState.ABORTING

    def begin_prepare(self) -> None:
        """``prepare_transaction()``: an open transaction with no error.

        Raises:
            IllegalStateError: no transaction is open, or it is empty (no record and no
                offsets: the coordinator has no transaction that another client could
                complete); the state is unchanged.
        """
        self._raise_if_error()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._illegal(
                "prepare_transaction()",
                "the transaction is prepared already"
                if self.state is TxnState.PREPARED
                else "no transaction is open",
            )
        if not (self._added or self._pending or self._adding or self._offsets_added or self._sent):
            raise IllegalStateError(
                "prepare_transaction(): the transaction is empty (no record sent and no "
                "offsets): the coordinator has nothing another client could complete; end "
                "it with commit_transaction() or abort_transaction()"
            )
        self.state = TxnState.PREPARING

    def check_preparing(self) -> None:
        """After the records of a prepare were acknowledged: raise if one of them failed."""
        self._raise_if_error()
        if self.state is not TxnState.PREPARING:  # pragma: no cover - defensive
            raise self._illegal("prepare_transaction()", "the prepare was interrupted")

    def prepare_done(self) -> None:
        """Every record is acknowledged: the transaction waits for its completer."""
        if self.state is TxnState.PREPARING:
            self.state = TxnState.PREPARED

    def prepare_cancelled(self) -> None:
        """The prepare was cancelled while waiting: the transaction is open as before."""
        if self.state is TxnState.PREPARING:
            self.state = TxnState.IN_TRANSACTION

    def prepare_failed(self, error: KafkaError) -> None:
        """The prepare could not finish: the transaction must be aborted (or fatal)."""
        self.on_error(error)

    @property
    def is_prepared(self) -> bool:
        """Whether the transaction is prepared (close() leaves it open)."""
        return self.state is TxnState.PREPARED

    def end_done(self) -> None:
        """EndTxn succeeded (or there was nothing to end): the next transaction may begin."""
        if self.state in (TxnState.COMMITTING, TxnState.ABORTING):
            self.state = TxnState.READY
            self.end_txn_sent = False
            self._added.clear()
            self._pending.clear()
            self._adding.clear()
            self._offsets_added = False

    def check_committing(self) -> None:
        """After the records of a commit were sent: raise if one of them failed."""
        self._raise_if_error()
        if self.state is not TxnState.COMMITTING:  # pragma: no cover - defensive
            raise self._illegal("commit_transaction()", "the commit was interrupted")

    def commit_failed(self, error: KafkaError) -> None:
        """The commit could not be completed: the transaction must be aborted (or fatal)."""
        self.on_error(error)
        if self.state is not TxnState.COMMITTING:
            self.end_txn_sent = False

    def abort_failed(self, error: KafkaError) -> None:
        """The abort's round trip failed: abort may be called again (unless fatal)."""
        if is_fatal(error):
            self.fail_fatal(error)
        elif self.state is TxnState.ABORTING:
            self.last_error = error
            self.state = TxnState.ABORTABLE_ERROR

    @property
    def transaction_started(self) -> bool:
        """Whether the coordinator knows of the current transaction (else EndTxn is skipped)."""
        if self.tv2:
            return self._sent or self._offsets_added
        return bool(self._added) or bool(self._adding) or self._offsets_added

    def offsets_added(self) -> None:
        """AddOffsetsToTxn (or TxnOffsetCommit v5) put the offsets into the transaction."""
        self._offsets_added = True

    # --- partitions ---------------------------------------------------------------------------

    def add_partition(self, tp: TopicPartition) -> bool:
        """A record for ``tp`` is in the transaction; True if an AddPartitionsToTxn is needed."""
        if tp in self._added or tp in self._pending or tp in self._adding:
            return False
        if self.tv2:
            self._added.add(tp)  # Produce v12+ adds it on the broker
            return False
        self._pending.add(tp)
        return True

    def on_sent(self, tps: Iterable[TopicPartition]) -> None:
        """Batches of ``tps`` were written: the coordinator will know of the transaction."""
        self._sent = True

    def is_added(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent now."""
        return tp in self._added

    def take_pending(self) -> list[TopicPartition]:
        """The partitions to put in the next AddPartitionsToTxn request."""
        batch = sorted(self._pending)
        self._adding.update(batch)
        self._pending.clear()
        return batch

    def partitions_added(self, tps: list[TopicPartition]) -> None:
        """AddPartitionsToTxn succeeded for ``tps``."""
        for tp in tps:
            self._adding.discard(tp)
            self._added.add(tp)

    def partitions_retry(self, tps: list[TopicPartition]) -> None:
        """AddPartitionsToTxn must be tried again for ``tps`` (a retriable error)."""
        for tp in tps:
            self._adding.discard(tp)
            self._pending.add(tp)

    @property
    def has_pending(self) -> bool:
        """Whether partitions wait for AddPartitionsToTxn."""
        return bool(self._pending)

    # --- errors -------------------------------------------------------------------------------

    def on_error(self, error: BaseException) -> None:
        """A batch or a transactional request failed for good.

        Fatal errors end the producer; anything else makes the transaction abortable (Java:
        ``transitionToAbortableError``). A record failed by an abort changes nothing.
        """
        if isinstance(error, TransactionAbortedError):
            return
        if self.state is TxnState.FATAL_ERROR:
            return
        kafka_error = error if isinstance(error, KafkaError) else KafkaError(repr(error))
        if is_fatal(error):
            self.last_error = kafka_error
            self.state = TxnState.FATAL_ERROR
            return
        self.epoch_bump_required = True
        if self.state in (
            TxnState.IN_TRANSACTION,
            TxnState.COMMITTING,
            TxnState.PREPARING,
            TxnState.ABORTABLE_ERROR,
        ):
            self.last_error = kafka_error
            self.state = TxnState.ABORTABLE_ERROR

    def on_batch_error(self, error: BaseException) -> None:
        """A batch of the transaction failed (Java: ``handleFailedBatch``).

        INVALID_PRODUCER_EPOCH on Produce is abortable, not fatal (KIP-588): the abort's
        coordinator round trip tells whether another producer fenced this one.
        """
        self.on_error(error)

    def on_cluster_changed(self, error: KafkaError) -> None:
        """The cluster behind the bootstrap address was replaced (``error`` says by which).

        An open transaction cannot complete on a cluster that does not know it: it becomes
        abortable with ``error``, and ``abort_transaction()`` re-initialises on the new
        cluster (docs/transactions.md). Between transactions, the next ``begin_transaction()``
        does. A fatal producer stays fatal.
        """
        if self.state is TxnState.FATAL_ERROR:
            return
        self.reinit_required = True
        self.epoch_bump_required = False
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR):
            self.last_error = error
            self.state = TxnState.ABORTABLE_ERROR

    def reinit_done(self) -> None:
        """InitProducerId succeeded on the new cluster."""
        self.reinit_required = False
        self.epoch_bump_required = False

    def fail_fatal(self, error: KafkaError) -> None:
        """Enter FATAL_ERROR with ``error``."""
        self.last_error = error
        self.state = TxnState.FATAL_ERROR

    @property
    def is_fatal(self) -> bool:
        """Whether the producer hit a fatal error."""
        return self.state is TxnState.FATAL_ERROR
