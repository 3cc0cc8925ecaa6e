"""The coordinator round trips of a transactional producer.

FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and
EndTxn, each retried (with backoff, finding the coordinator again when it moved) until it
succeeds, fails for good, or ``max_block_ms`` passes (the loop is
:class:`~aiokprod.internals.round_trips.RoundTrips`, shared with the admin client).
Outcomes are reported to the :class:`~aiokprod.internals.transactions.TransactionManager`;
this module decides nothing about states itself.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import BrokerError, ClusterChangedError, KafkaError, UnsupportedVersionError
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.round_trips import MakeRequest, RoundTrips, check_code
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
from aiokprod.protocol.messages.coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
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
from aiokprod.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTransaction,
    TopicPartition,
)

log = get_logger("aiokprod.transactions")

T = TypeVar("T")

#: The feature that turns on transaction protocol 2 (KIP-890) when finalized at >= 2.
TRANSACTION_VERSION_FEATURE = "transaction.version"


#: EndTxn v5 is the first version the coordinator handles with transaction protocol 2.
END_TXN_MIN_VERSION_TV2 = 5


def end_txn_version(conn: BrokerConnection, protocol: int, transactional_id: str) -> int:
    """The EndTxn version for a transaction of ``protocol``: <= v4 for 1, >= v5 for 2.

    The coordinator decides from the version which protocol's rules the request follows.

    Raises:
        UnsupportedVersionError: protocol 2 and a broker without EndTxn v5.
    """
    version = conn.protocol.version_for(END_TXN)
    if protocol == 1:
        return min(version, END_TXN_MAX_VERSION_TV1)
    if version < END_TXN_MIN_VERSION_TV2:
        raise UnsupportedVersionError(
            f"transaction {transactional_id!r} was written with transaction protocol 2, "
            f"which needs EndTxn v{END_TXN_MIN_VERSION_TV2}; the coordinator (node "
            f"{conn.node_id}) speaks up to v{version}"
        )
    return version


def _check_code(code: int, message: str | None = None) -> None:
    """Raise ``Retry`` for retriable codes; an older epoch means fenced (coordinator_error)."""
    check_code(code, message, translate=coordinator_error)


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
        self._spawn = spawn
        self._wakeup = wakeup
        self._force_tv1 = force_tv1
        self._requests = RoundTrips(pool, config, clock, rng or random.Random())
        self._adding = False
        #: send_offsets calls under way, and an event set whenever none is (commit and
        #: prepare wait for them, as the Java client's commit waits for pending requests).
        self._offsets_calls = 0
        self._offsets_idle = asyncio.Event()
        self._offsets_idle.set()
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
        self._requests.forget_coordinators()
        self._generation += 1
        self._cluster_error = error

    def _check_generation(self, generation: int) -> None:
        if generation != self._generation and self._cluster_error is not None:
            raise copy.copy(self._cluster_error)

    # --- plumbing -----------------------------------------------------------------------------

    async def _round_trip(
        self,
        what: str,
        key_type: int,
        key: str,
        make: MakeRequest,
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
        generation = self._generation

        def checked_make(conn: BrokerConnection) -> tuple[Struct, int | None]:
            if not any_cluster:
                self._check_generation(generation)
            return make(conn)

        def checked_handle(response: Struct) -> None:
            if not any_cluster:
                self._check_generation(generation)
            handle(response)

        await self._requests.to_coordinator(what, key_type, key, checked_make, checked_handle)

    @property
    def coordinator_node(self) -> int | None:
        """The transaction coordinator's node id, once found."""
        return self._requests.coordinator_node(*self._txn_key())

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
        await self._guarded_result(what, call)

    async def _guarded_result(self, what: str, call: Coroutine[Any, Any, T]) -> T:
        """:meth:`_guarded` for a round trip with a result."""
        try:
            return await call
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
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata
    ) -> None:
        """Put the group's offsets into the transaction (AddOffsetsToTxn unless protocol 2)."""
        self._offsets_calls += 1
        self._offsets_idle.clear()
        try:
            await self._send_offsets(offsets, group)
        finally:
            self._offsets_calls -= 1
            if not self._offsets_calls:
                self._offsets_idle.set()

    async def wait_offsets(self) -> None:
        """Wait until no ``send_offsets`` is under way (before EndTxn or a prepare)."""
        await self._offsets_idle.wait()

    async def _send_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata
    ) -> None:
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
                    partition_index=tp.partition,
                    committed_offset=offset.offset,
                    committed_metadata=offset.metadata,
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
        ids = PreparedTransaction(
            txn.transactional_id, idem.producer_id, idem.producer_epoch, 2 if txn.tv2 else 1
        )
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        response = await self._guarded_result(
            what, send_end_txn(self._requests, ids, commit=commit, translate=coordinator_error)
        )
        if txn.tv2 and response.producer_id >= 0 and response.producer_epoch >= 0:
            idem.set_producer_id(response.producer_id, response.producer_epoch)
        self._wakeup()


async def send_end_txn(
    requests: RoundTrips,
    ids: PreparedTransaction,
    *,
    commit: bool,
    translate: Callable[[BrokerError], KafkaError] | None = None,
) -> EndTxnResponse:
    """EndTxn for the transaction ``ids`` names, at the version its protocol needs.

    Shared by the producer's commit and abort and by ``Admin.complete_transaction``.

    Raises:
        KafkaError: the coordinator's error (``translate`` d), UnsupportedVersionError, or
            KafkaTimeoutError after ``max_block_ms``.
    """

    def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
        version = end_txn_version(conn, ids.protocol, ids.transactional_id)
        request = EndTxnRequest(
            transactional_id=ids.transactional_id,
            producer_id=ids.producer_id,
            producer_epoch=ids.producer_epoch,
            committed=commit,
        )
        return request, version

    def handle(response: Struct) -> EndTxnResponse:
        if not isinstance(response, EndTxnResponse):  # pragma: no cover
            raise KafkaError("EndTxn answered with another message")
        check_code(response.error_code, translate=translate)
        return response

    what = "EndTxn(commit)" if commit else "EndTxn(abort)"
    return await requests.to_coordinator(
        what, KEY_TYPE_TRANSACTION, ids.transactional_id, make, handle
    )
