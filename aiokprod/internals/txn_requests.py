"""The coordinator round trips of a transactional producer.

FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and
EndTxn, each retried (with backoff, finding the coordinator again when it moved) until it
succeeds, fails for good, or ``max_block_ms`` passes. Outcomes are reported to the
:class:`~aiokprod.internals.transactions.TransactionManager`; this module decides nothing about
states itself.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from aiokprod.backoff import backoff_ms
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    ClusterChangedError,
    ConcurrentTransactionsError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_for_code,
)
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.transactions import (
    END_TXN_MAX_VERSION_TV1,
    TXN_OFFSET_COMMIT_MAX_VERSION_TV1,
    TransactionManager,
    coordinator_error,
    is_fatal,
)
from aiokprod.logs import get_logger
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.pool import ConnectionPool, Spawn
from aiokprod.protocol.api import END_TXN, PRODUCE, TXN_OFFSET_COMMIT
from aiokprod.protocol.messages.coordinator import (
    KEY_TYPE_GROUP,
    KEY_TYPE_TRANSACTION,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.transactions import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitTopic,
)
from aiokprod.protocol.schema import Struct
from aiokprod.types import ConsumerGroupMetadata, TopicPartition

log = get_logger("aiokprod.transactions")

#: The feature that turns on transaction protocol 2 (KIP-890) when finalized at >= 2.
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: Java retries CONCURRENT_TRANSACTIONS after 20 ms, not the usual backoff: it clears fast.
CONCURRENT_TRANSACTIONS_BACKOFF_MS = 20
#: Errors after which the coordinator is looked up again.
_COORDINATOR_MOVED = (15, 16)  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


class _Retry(Exception):
    """Internal: try the round trip again (after ``wait_ms``; re-find the coordinator)."""

    def __init__(self, error: KafkaError, *, refind: bool = False, wait_ms: int | None = None):
        super().__init__(str(error))
        self.error = error
        self.refind = refind
        self.wait_ms = wait_ms


def _check_code(code: int, message: str | None = None) -> None:
    """Raise :class:`_Retry` for retriable codes, the error itself otherwise."""
    if code == 0:
        return
    error = error_for_code(code, message)
    if isinstance(error, ConcurrentTransactionsError):
        raise _Retry(error, wait_ms=CONCURRENT_TRANSACTIONS_BACKOFF_MS)
    if code in _COORDINATOR_MOVED:
        raise _Retry(error, refind=True)
    if error.retriable:
        raise _Retry(error)
    raise coordinator_error(error)


class TransactionCoordinator:
    """Runs a transactional producer's coordinator requests.

    Args:
        txn: the transaction state.
        idempotence: producer id, epoch and sequences.
        pool: broker connections.
        config: the producer's options.
        spawn: starts background coroutines in the producer's task group.
        wakeup: wakes the sender (partitions were added, the epoch changed).
        clock: the producer's clock.
        rng: randomness for backoff jitter.
        force_tv1: use transaction protocol 1 even where the cluster offers 2 (tests).
    """

    def __init__(
        self,
        txn: TransactionManager,
        idempotence: IdempotenceState,
        pool: ConnectionPool,
        config: ProducerConfig,
        spawn: Spawn,
        wakeup: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        *,
        force_tv1: bool = False,
    ) -> None:
        self._txn = txn
        self._idem = idempotence
        self._pool = pool
        self._config = config
        self._spawn = spawn
        self._wakeup = wakeup
        self._clock = clock
        self._rng = rng or random.Random()
        self._force_tv1 = force_tv1
        self._coordinators: dict[tuple[int, str], int] = {}
        self._adding = False
        #: Counts cluster replacements (issue 29); a round trip that began on an older
        #: cluster fails with ``_cluster_error`` instead of going on on the new one.
        self._generation = 0
        self._cluster_error: ClusterChangedError | None = None

    def cluster_changed(self, error: ClusterChangedError) -> None:
        """The cluster was replaced: coordinators are found afresh; round trips under way fail.

        A request of the old cluster's transaction (EndTxn, AddPartitionsToTxn, an epoch
        bump) would name a producer id the new cluster never issued: it fails with
        ``error`` instead, and the transaction is re-initialised (``init_producer_id``).
        """
        self._coordinators.clear()
        self._generation += 1
        self._cluster_error = error

    def _check_generation(self, generation: int) -> None:
        if generation != self._generation and self._cluster_error is not None:
            raise copy.copy(self._cluster_error)

    # --- plumbing -----------------------------------------------------------------------------

    async def _connection(self, key_type: int, key: str, timeout_s: float) -> BrokerConnection:
        node = self._coordinators.get((key_type, key))
        if node is None:
            node = await self._find_coordinator(key_type, key, timeout_s)
            self._coordinators[(key_type, key)] = node
        return await self._pool.connection(node, timeout_s)

    async def _find_coordinator(self, key_type: int, key: str, timeout_s: float) -> int:
        node = self._pool.least_loaded_node(self._clock.monotonic_ms())
        if node is None:
            raise _Retry(KafkaConnectionError("no broker to ask for the coordinator"))
        conn = await self._pool.connection(node, timeout_s)
        request = FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])
        response = await conn.request(request, timeout_s)
        if not isinstance(response, FindCoordinatorResponse):  # pragma: no cover
            raise KafkaError("FindCoordinator answered with another message")
        self._check_cluster(conn)
        if response.coordinators:
            found = response.coordinators[0]
            code, message = found.error_code, found.error_message
            node_id, host, port = found.node_id, found.host, found.port
        else:
            code, message = response.error_code, response.error_message
            node_id, host, port = response.node_id, response.host, response.port
        if code:
            error = error_for_code(code, message)
            if error.retriable:
                raise _Retry(error)
            raise error
        self._pool.learn_node(node_id, host, port)
        return node_id

    async def _round_trip(
        self,
        what: str,
        key_type: int,
        key: str,
        make: Callable[[BrokerConnection], tuple[Struct, int | None]],
        handle: Callable[[Struct], None],
        *,
        any_cluster: bool = False,
    ) -> None:
        """Send ``make(conn)`` to the coordinator until ``handle`` accepts the answer.

        Only a broker of the cluster the producer writes to is asked. With ``any_cluster``
        false the round trip belongs to the cluster it began on: if that one is replaced
        meanwhile, it fails with :class:`ClusterChangedError`.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms``.
            ClusterChangedError: the cluster was replaced (not with ``any_cluster``).
            KafkaError: the answer's error when it is not retriable.
        """
        cfg = self._config
        timeout_s = cfg.request_timeout_ms / 1000
        deadline_ms = self._clock.monotonic_ms() + cfg.max_block_ms
        attempts = 0
        generation = self._generation
        while True:
            if not any_cluster:
                self._check_generation(generation)
            try:
                conn = await self._connection(key_type, key, timeout_s)
                request, version = make(conn)
                response = await conn.request(request, timeout_s, version=version)
                self._check_cluster(conn)
                if not any_cluster:
                    self._check_generation(generation)
                handle(response)
                return
            except _Retry as retry:
                error: KafkaError = retry.error
                if retry.refind:
                    self._coordinators.pop((key_type, key), None)
                wait = retry.wait_ms
            except KafkaError as exc:
                if not exc.retriable and not isinstance(exc, KafkaConnectionError):
                    raise
                error = exc
                self._coordinators.pop((key_type, key), None)
                wait = None
            attempts += 1
            if wait is None:
                wait = backoff_ms(
                    attempts, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms, self._rng
                )
            if self._clock.monotonic_ms() + wait > deadline_ms:
                timeout = KafkaTimeoutError(
                    f"{what} did not complete within max_block_ms={cfg.max_block_ms}: {error}"
                )
                timeout.__cause__ = error
                raise timeout
            log.debug("transactional request retry", request=what, error=str(error), wait_ms=wait)
            await asyncio.sleep(wait / 1000)

    def _check_cluster(self, conn: BrokerConnection) -> None:
        """Retry elsewhere when ``conn`` leads to another cluster than the producer's."""
        if not self._pool.belongs_to_cluster(conn):
            raise _Retry(
                KafkaConnectionError(
                    f"node {conn.node_id} belongs to cluster {conn.cluster_id!r}, not "
                    f"{self._pool.cluster_id!r}"
                ),
                refind=True,
            )

    def _txn_key(self) -> tuple[int, str]:
        return KEY_TYPE_TRANSACTION, self._txn.transactional_id

    # --- InitProducerId -----------------------------------------------------------------------

    async def init_producer_id(self, *, bump: bool = False) -> None:
        """InitProducerId with the transactional id; with ``bump`` keep the id (KIP-360).

        Without ``bump`` it runs on whatever cluster the producer writes to when it is
        answered: at start, and again after the cluster was replaced (issue 29).
        """
        txn, idem = self._txn, self._idem
        key_type, key = self._txn_key()

        def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
            if not bump:
                self._detect_protocol(conn)
            request = InitProducerIdRequest(
                transactional_id=txn.transactional_id,
                transaction_timeout_ms=txn.transaction_timeout_ms,
                producer_id=idem.producer_id if bump else -1,
                producer_epoch=idem.producer_epoch if bump else -1,
            )
            return request, None

        def handle(response: Struct) -> None:
            if not isinstance(response, InitProducerIdResponse):  # pragma: no cover
                raise KafkaError("InitProducerId answered with another message")
            _check_code(response.error_code)
            idem.set_producer_id(response.producer_id, response.producer_epoch)
            txn.epoch_bump_required = False
            if not bump:
                txn.reinit_done()
            log.info(
                "transactional producer id",
                transactional_id=txn.transactional_id,
                producer_id=response.producer_id,
                epoch=response.producer_epoch,
                protocol=2 if txn.tv2 else 1,
            )

        await self._guarded(
            "InitProducerId",
            self._round_trip("InitProducerId", key_type, key, make, handle, any_cluster=not bump),
        )
        self._wakeup()

    def _detect_protocol(self, conn: BrokerConnection) -> None:
        """Transaction protocol 2 if the cluster finalized it and the broker speaks Produce v12."""
        protocol = conn.protocol
        level = protocol.finalized_features.get(TRANSACTION_VERSION_FEATURE, 0)
        produce = (protocol.broker_versions or {}).get(PRODUCE.key, (0, 0))
        self._txn.tv2 = not self._force_tv1 and level >= 2 and produce[1] >= 12

    async def _guarded(self, what: str, call: Coroutine[Any, Any, None]) -> None:
        """Await a round trip; a fatal error makes the producer fatal."""
        try:
            await call
        except KafkaError as exc:
            if is_fatal(exc):
                self._txn.fail_fatal(exc)
            raise

    # --- AddPartitionsToTxn -------------------------------------------------------------------

    def maybe_add_partitions(self) -> None:
        """Start AddPartitionsToTxn for waiting partitions (protocol 1), once at a time."""
        if self._adding or not self._txn.has_pending:
            return
        self._adding = True
        self._spawn(self._add_partitions)

    async def _add_partitions(self) -> None:
        txn, idem = self._txn, self._idem
        key_type, key = self._txn_key()
        try:
            while txn.has_pending:
                tps = txn.take_pending()

                def make(
                    conn: BrokerConnection, tps: list[TopicPartition] = tps
                ) -> tuple[Struct, int | None]:
                    topics: dict[str, list[int]] = {}
                    for tp in tps:
                        topics.setdefault(tp.topic, []).append(tp.partition)
                    request = AddPartitionsToTxnRequest(
                        transactional_id=txn.transactional_id,
                        producer_id=idem.producer_id,
                        producer_epoch=idem.producer_epoch,
                        topics=[
                            AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in topics.items()
                        ],
                    )
                    return request, None

                def handle(response: Struct, tps: list[TopicPartition] = tps) -> None:
                    if not isinstance(response, AddPartitionsToTxnResponse):  # pragma: no cover
                        raise KafkaError("AddPartitionsToTxn answered with another message")
                    worst = 0
                    for topic in response.results_by_topic:
                        for part in topic.results_by_partition:
                            code = part.partition_error_code
                            if code and code != 55:  # OPERATION_NOT_ATTEMPTED: another failed
                                worst = code
                    _check_code(worst)
                    txn.partitions_added(tps)

                try:
                    await self._guarded(
                        "AddPartitionsToTxn",
                        self._round_trip("AddPartitionsToTxn", key_type, key, make, handle),
                    )
                except KafkaError as exc:
                    txn.on_error(exc)
                    return
        finally:
            self._adding = False
            self._wakeup()

    # --- offsets ------------------------------------------------------------------------------

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata
    ) -> None:
        """Put the group's offsets into the transaction (AddOffsetsToTxn unless protocol 2)."""
        txn, idem = self._txn, self._idem
        key_type, key = self._txn_key()
        if not txn.tv2:

            def make_add(conn: BrokerConnection) -> tuple[Struct, int | None]:
                request = AddOffsetsToTxnRequest(
                    transactional_id=txn.transactional_id,
                    producer_id=idem.producer_id,
                    producer_epoch=idem.producer_epoch,
                    group_id=group.group_id,
                )
                return request, None

            def handle_add(response: Struct) -> None:
                if not isinstance(response, AddOffsetsToTxnResponse):  # pragma: no cover
                    raise KafkaError("AddOffsetsToTxn answered with another message")
                _check_code(response.error_code)
                txn.offsets_added()

            await self._abortable(
                "AddOffsetsToTxn",
                self._round_trip("AddOffsetsToTxn", key_type, key, make_add, handle_add),
            )
        topics: dict[str, list[TxnOffsetCommitPartition]] = {}
        for tp, offset in sorted(offsets.items()):
            topics.setdefault(tp.topic, []).append(
                TxnOffsetCommitPartition(
                    partition_index=tp.partition, committed_offset=offset, committed_metadata=""
                )
            )

        def make_commit(conn: BrokerConnection) -> tuple[Struct, int | None]:
            version = None
            if not txn.tv2:
                version = min(
                    conn.protocol.version_for(TXN_OFFSET_COMMIT), TXN_OFFSET_COMMIT_MAX_VERSION_TV1
                )
            request = TxnOffsetCommitRequest(
                transactional_id=txn.transactional_id,
                group_id=group.group_id,
                producer_id=idem.producer_id,
                producer_epoch=idem.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[TxnOffsetCommitTopic(name=t, partitions=p) for t, p in topics.items()],
            )
            return request, version

        def handle_commit(response: Struct) -> None:
            if not isinstance(response, TxnOffsetCommitResponse):  # pragma: no cover
                raise KafkaError("TxnOffsetCommit answered with another message")
            for topic in response.topics:
                for part in topic.partitions:
                    _check_code(part.error_code)
            txn.offsets_added()

        await self._abortable(
            "TxnOffsetCommit",
            self._round_trip(
                "TxnOffsetCommit", KEY_TYPE_GROUP, group.group_id, make_commit, handle_commit
            ),
        )

    async def _abortable(self, what: str, call: Coroutine[Any, Any, None]) -> None:
        """A round trip whose failure makes the transaction abortable (or fatal)."""
        try:
            await self._guarded(what, call)
        except KafkaError as exc:
            self._txn.on_error(exc)
            raise

    # --- EndTxn -------------------------------------------------------------------------------

    async def end_txn(self, *, commit: bool) -> None:
        """EndTxn; under protocol 2 the answer carries the next epoch (or a new id)."""
        txn, idem = self._txn, self._idem
        key_type, key = self._txn_key()

        def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
            version = None
            if not txn.tv2:
                version = min(conn.protocol.version_for(END_TXN), END_TXN_MAX_VERSION_TV1)
            request = EndTxnRequest(
                transactional_id=txn.transactional_id,
                producer_id=idem.producer_id,
                producer_epoch=idem.producer_epoch,
                committed=commit,
            )
            return request, version

        def handle(response: Struct) -> None:
            if not isinstance(response, EndTxnResponse):  # pragma: no cover
                raise KafkaError("EndTxn answered with another message")
            _check_code(response.error_code)
            if txn.tv2 and response.producer_id >= 0 and response.producer_epoch >= 0:
                idem.set_producer_id(response.producer_id, response.producer_epoch)

        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        await self._guarded(what, self._round_trip(what, key_type, key, make, handle))
        self._wakeup()
