"""The transactional half of :class:`~aiokprod.producer.Producer` (docs/transactions.md).

A mixin, so the producer module stays readable: ``begin_transaction``,
``commit_transaction``, ``abort_transaction``, ``transaction()``,
``send_offsets_to_transaction`` and ``prepare_transaction``. The state machine is
:class:`~aiokprod.internals.transactions.TransactionManager`; the coordinator round trips are
:class:`~aiokprod.internals.txn_requests.TransactionCoordinator`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import anyio

from aiokprod.errors import (
    ClusterChangedError,
    IllegalStateError,
    InvalidArgumentError,
    KafkaError,
    TransactionAbortedError,
)
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.group_offsets import check_offsets
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.runtime import ProducerRuntime
from aiokprod.internals.transactions import TransactionManager, TxnState
from aiokprod.internals.txn_requests import TransactionCoordinator
from aiokprod.logs import get_logger
from aiokprod.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTransaction,
    TopicPartition,
)

log = get_logger("aiokprod.producer")


class TransactionalMixin:
    """Transactions for a producer created with ``transactional_id``."""

    _txn: TransactionManager | None
    _rt: ProducerRuntime
    _acc: RecordAccumulator
    _idempotence: IdempotenceState | None

    def _require_txn(self, call: str) -> tuple[TransactionManager, TransactionCoordinator]:
        txn, coordinator = self._txn, self._rt.coordinator
        if txn is None:
            raise IllegalStateError(
                f"{call} needs a transactional producer: create it with transactional_id=..."
            )
        if coordinator is None or self._rt.sender is None:
            raise IllegalStateError(f"{call}: the producer is not started")
        return txn, coordinator

    async def _init_transactions(self) -> None:
        """``start()``: find the coordinator and run InitProducerId (fencing older instances)."""
        txn, coordinator = self._require_txn("start()")
        txn.start_init()
        await coordinator.init_producer_id()
        txn.init_done()

    async def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on commit or abort together.

        Raises:
            IllegalStateError: not a transactional producer, or a transaction is open.
            AbortableTransactionError: the last transaction failed and was not aborted.
            ProducerFencedError: another producer with the same id took over (fatal).
        """
        txn, coordinator = self._require_txn("begin_transaction()")
        if txn.reinit_required and txn.state is TxnState.READY:
            # The cluster was replaced between transactions: start afresh on the new one.
            await coordinator.init_producer_id()
        txn.begin()

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it (a prepared one too).

        Raises:
            AbortableTransactionError: a record or request failed; call
                :meth:`abort_transaction` (the cause is the ``__cause__``).
            IllegalStateError: no transaction is open.
            ProducerFencedError: fenced by a newer producer (fatal: close the producer).
            KafkaTimeoutError: the coordinator did not answer within ``max_block_ms`` (the
                transaction must then be aborted).

        Cancellation:
            A commit cancelled while it waits for its records leaves the transaction as it
            was (open, or prepared): commit or abort it. Cancelled after its EndTxn was
            sent, the outcome is unknown: only ``commit_transaction()`` may be called, and
            it finishes the commit (``abort_transaction()`` raises IllegalStateError);
            ``close()`` leaves it to the coordinator.
        """
        txn, coordinator = self._require_txn("commit_transaction()")
        txn.begin_commit()
        try:
            if not txn.end_txn_sent:
                await self._wait_transaction_records(flush=True)
                await coordinator.wait_offsets()
                txn.check_committing()
            if txn.transaction_started:
                txn.sending_end_txn()
                await coordinator.end_txn(commit=True)
        except KafkaError as exc:
            txn.commit_failed(exc)
            raise
        except BaseException:
            txn.commit_cancelled()
            raise
        txn.end_done()
        log.debug("transaction committed", transactional_id=txn.transactional_id)

    async def prepare_transaction(self) -> PreparedTransaction:
        """Send every record of the transaction and leave it open for another client to end.

        The first phase of a two-phase commit, modelled on the Java client's
        ``prepareTransaction`` (KIP-939): it sends every queued record (no linger), waits
        until all are acknowledged and any ``send_offsets_to_transaction`` is done (what
        :meth:`commit_transaction` does before its EndTxn), and returns the ids with which
        any client can end the transaction:
        :meth:`aiokprod.admin.Admin.complete_transaction` (EndTxn with this producer id and
        epoch; Kafka's coordinator asks for nothing else).

        The transaction is then *prepared*: ``send()``, ``send_many()``,
        ``send_offsets_to_transaction()`` and ``begin_transaction()`` raise
        :class:`IllegalStateError`; :meth:`commit_transaction` and :meth:`abort_transaction`
        still end it from here; :meth:`close` leaves it open (it does not abort it, as it
        does an unprepared transaction). Inside ``async with producer.transaction():`` the
        exit leaves a prepared transaction alone too.

        KIP-939's broker side (``transaction.two.phase.commit.enable``, transactions that
        never time out) is not usable in any Kafka release up to 4.4, so this is not 2PC
        proper: the coordinator still aborts the transaction ``transaction_timeout_ms``
        after it began, and a newer producer with the same ``transactional_id`` (or
        ``Admin.fence_producers``) aborts it at once. The caller must complete it well
        within ``transaction_timeout_ms`` (at most the broker's
        ``transaction.max.timeout.ms``, 15 minutes by default), and must not start another
        producer with the same id before it is complete. Until then, read_committed readers
        of its partitions stop at its first record (the last stable offset).

        Returns:
            A picklable :class:`~aiokprod.types.PreparedTransaction`: transactional id,
            producer id, epoch and transaction protocol.

        Raises:
            IllegalStateError: no transaction is open, it is prepared already, or it is
                empty (nothing sent and no offsets: the coordinator has nothing to complete;
                the transaction stays open).
            AbortableTransactionError: a record or request of the transaction failed (the
                cause is the ``__cause__``); call :meth:`abort_transaction`.
            ProducerFencedError: fenced by a newer producer (fatal).

        Cancellation:
            A prepare cancelled while it waits leaves the transaction open, as before the
            call: prepare it again, commit it or abort it.
        """
        txn, coordinator = self._require_txn("prepare_transaction()")
        idem = self._idempotence
        if idem is None:  # pragma: no cover - a transactional producer is idempotent
            raise IllegalStateError("prepare_transaction(): the producer is not idempotent")
        txn.begin_prepare()
        try:
            await self._wait_transaction_records(flush=True)
            await coordinator.wait_offsets()
            txn.check_preparing()
        except KafkaError as exc:
            txn.prepare_failed(exc)
            raise
        except BaseException:
            # Cancelled while waiting: nothing was decided, the transaction stays open (and
            # can be prepared again, committed or aborted).
            txn.prepare_cancelled()
            raise
        txn.prepare_done()
        prepared = PreparedTransaction(
            transactional_id=txn.transactional_id,
            producer_id=idem.producer_id,
            producer_epoch=idem.producer_epoch,
            protocol=2 if txn.tv2 else 1,
        )
        log.debug(
            "transaction prepared",
            transactional_id=prepared.transactional_id,
            producer_id=prepared.producer_id,
            epoch=prepared.producer_epoch,
            protocol=prepared.protocol,
        )
        return prepared

    async def abort_transaction(self) -> None:
        """Abort the open transaction: its records are never visible to read_committed readers.

        Records not yet sent fail with :class:`TransactionAbortedError`; records in flight
        are awaited first. A prepared transaction (:meth:`prepare_transaction`) may be
        aborted too. After the cluster behind ``bootstrap_servers`` was replaced (the
        records failed with :class:`ClusterChangedError`), the abort starts afresh on the
        new cluster instead: InitProducerId with the transactional id, so the next
        transaction can begin (docs/transactions.md, "When the cluster is replaced").

        Raises:
            IllegalStateError: no transaction is open.
            ProducerFencedError: fenced (fatal).
            KafkaTimeoutError: the coordinator did not answer; calling it again retries.
        """
        txn, coordinator = self._require_txn("abort_transaction()")
        txn.begin_abort()
        sender = self._rt.sender
        assert sender is not None
        stamped = sender.abort_queued(TransactionAbortedError("the transaction was aborted"))
        try:
            await self._wait_transaction_records(flush=False)
            try:
                if txn.transaction_started and not txn.reinit_required:
                    await coordinator.end_txn(commit=False)
                idem = self._idempotence
                bump = txn.epoch_bump_required or stamped
                if idem is not None and idem.epoch_bump_required:
                    bump = True
                if bump and not txn.tv2 and not txn.reinit_required:
                    # Sequences have a gap: a new epoch from the coordinator (KIP-360).
                    await coordinator.init_producer_id(bump=True)
            except ClusterChangedError:
                if not txn.reinit_required:  # pragma: no cover - set with the error
                    raise
            if txn.reinit_required:
                # The transaction is gone with the old cluster (its coordinator aborts it
                # after transaction_timeout_ms, if it still runs): a new producer id and
                # epoch for the transactional id from the new cluster's coordinator.
                await coordinator.init_producer_id()
        except KafkaError as exc:
            txn.abort_failed(exc)
            raise
        txn.end_done()
        log.debug("transaction aborted", transactional_id=txn.transactional_id)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():`` commits on exit, aborts on an exception.

        The exception is re-raised after the abort. A commit that fails with an abortable
        error is aborted too, and its error raised. A transaction prepared inside the block
        (:meth:`prepare_transaction`) is left to whoever completes it.
        """
        await self.begin_transaction()
        try:
            yield
        except BaseException:
            await self._abort_after_error()
            raise
        txn = self._txn
        if txn is not None and txn.is_prepared:
            return
        try:
            await self.commit_transaction()
        except KafkaError:
            await self._abort_after_error()
            raise

    async def _abort_after_error(self) -> None:
        txn = self._txn
        if txn is None or txn.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.abort_transaction()
            except KafkaError as exc:
                log.warning("aborting the transaction failed", error=str(exc))

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit a consumer group's offsets as part of the transaction (consume-transform-produce).

        Args:
            offsets: ``TopicPartition`` -> the next offset to consume (last processed + 1),
                as an ``int`` or as an :class:`~aiokprod.types.OffsetAndMetadata` that
                carries a metadata string too (stored with the offset, returned by
                ``Admin.list_consumer_group_offsets`` and every consumer's ``committed()``).
            group: the consumer's group id, or its :class:`ConsumerGroupMetadata` (KIP-447:
                lets the broker fence a consumer of an older generation).

        Raises:
            InvalidArgumentError: bad offsets or group.
            IllegalStateError: no transaction is open, or it is prepared.
            AbortableTransactionError / ProducerFencedError: as :meth:`commit_transaction`.
        """
        txn, coordinator = self._require_txn("send_offsets_to_transaction()")
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)
        if not isinstance(group, ConsumerGroupMetadata) or not group.group_id:
            raise InvalidArgumentError(
                f"group must be a group id or a ConsumerGroupMetadata, got {group!r}"
            )
        checked = check_offsets(offsets)
        txn.check_offsets()
        await coordinator.send_offsets(checked, group)

    async def _wait_transaction_records(self, *, flush: bool) -> None:
        """Wait until every batch is acknowledged or failed (sending lingering ones now)."""
        acc = self._acc
        batches = acc.incomplete_batches()
        if flush:
            acc.begin_flush()
        sender = self._rt.sender
        if sender is not None:
            sender.wakeup()
        try:
            for batch in batches:
                await batch.result.wait()
        finally:
            if flush:
                acc.end_flush()

    async def _abort_open_transaction(self) -> None:
        """``close()``: abort a transaction left open, as the Java client does.

        A prepared transaction stays open: another client completes it.
        """
        txn = self._txn
        if txn is not None and txn.is_prepared:
            idem = self._idempotence
            log.info(
                "closing with a prepared transaction: left open for another client to "
                "complete (the coordinator aborts it after transaction_timeout_ms)",
                transactional_id=txn.transactional_id,
                producer_id=None if idem is None else idem.producer_id,
                epoch=None if idem is None else idem.producer_epoch,
            )
            return
        if txn is not None and txn.state is TxnState.COMMITTING and txn.end_txn_sent:
            log.warning(
                "closing after a cancelled commit_transaction() sent its EndTxn: the "
                "coordinator completes the commit (or aborts the transaction after "
                "transaction_timeout_ms if the EndTxn never arrived)",
                transactional_id=txn.transactional_id,
            )
            return
        if txn is None or txn.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            return
        log.info("aborting the open transaction on close", transactional_id=txn.transactional_id)
        await self._abort_after_error()
