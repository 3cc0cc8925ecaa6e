"""A simulated cluster that answers the admin client's requests, for virtual-time tests.

:class:`CoordinatorModel` hooks into a :class:`~aiokprod.testing.sim.world.SimWorld`'s
cluster: the simulated network (with its faults) carries the bytes, and this model answers
FindCoordinator, EndTxn, InitProducerId, ListTransactions, DescribeTransactions, OffsetFetch
and OffsetCommit after Kafka's coordinator rules (TransactionCoordinator.scala's EndTxn table
for transaction protocols 1 and 2, kept to what the tests need). Scripted error codes are
answered first, so a test can make the coordinator move, load, or be busy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from aiokprod.admin import Admin
from aiokprod.clock import LoopClock
from aiokprod.protocol.messages.api_versions import ApiVersionRange, ApiVersionsResponse
from aiokprod.protocol.messages.coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.offsets import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from aiokprod.protocol.messages.transactions import EndTxnRequest, EndTxnResponse
from aiokprod.protocol.messages.txn_admin import (
    DescribedTransaction,
    DescribedTransactionTopic,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from aiokprod.protocol.schema import Struct
from aiokprod.testing.sim.cluster import BROKER_API_VERSIONS, SimBroker
from aiokprod.testing.sim.faults import FaultSchedule
from aiokprod.testing.sim.world import SimWorld, Topology

NONE = 0
NOT_COORDINATOR = 16
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
UNSTABLE_OFFSET_COMMIT = 88
TRANSACTIONAL_ID_NOT_FOUND = 105

ADMIN_APIS = {8: (2, 9), 9: (1, 9), 65: (0, 0), 66: (0, 1)}


@dataclass
class Txn:
    """One transactional id's state at its coordinator."""

    producer_id: int
    epoch: int
    state: str = "Ongoing"
    partitions: set[tuple[str, int]] = field(default_factory=set)
    #: Commits and aborts applied (a retry must not apply twice).
    ends: list[str] = field(default_factory=list)
    #: CONCURRENT_TRANSACTIONS answers left before an InitProducerId's abort is done.
    fencing: int = 0


class CoordinatorModel:
    """Answers the admin APIs for ``world``'s cluster (see the module docstring).

    Args:
        world: the simulated world to hook into.
        coordinator: the node that coordinates every key.
        end_txn_max: the highest EndTxn version the brokers advertise.
    """

    def __init__(self, world: SimWorld, *, coordinator: int = 1, end_txn_max: int = 5) -> None:
        self.world = world
        self.coordinator = coordinator
        self.versions = dict(BROKER_API_VERSIONS)
        self.versions.update(ADMIN_APIS)
        self.versions[26] = (0, end_txn_max)
        self.txns: dict[str, Txn] = {}
        #: Error codes answered (in order) before the next request of an API key is handled.
        self.script: dict[int, list[int]] = {}
        #: (api key, version, node) of every request handled.
        self.seen: list[tuple[int, int, int]] = []
        #: group -> (topic, partition) -> (offset, metadata); and pending transactional ones.
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self.pending: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self._next_pid = 5000
        cluster = world.cluster
        self._handle = cluster.handle
        cluster.handle = self.handle  # type: ignore[method-assign]

    def admin(self, seed: int, **options: Any) -> Admin:
        """An Admin wired to the world (transport, virtual clock, seeded randomness)."""
        return Admin(
            self.world.cluster.bootstrap(),
            transport=self.world.transport(),
            clock=LoopClock(self.world.loop),
            rng=random.Random(seed),
            **options,
        )

    def add(self, transactional_id: str, epoch: int = 3, **kwargs: Any) -> Txn:
        """An open transaction of ``transactional_id``."""
        txn = Txn(self._pid(), epoch, **kwargs)
        self.txns[transactional_id] = txn
        return txn

    def _pid(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def count(self, api_key: int) -> int:
        """Requests of ``api_key`` handled."""
        return sum(1 for key, _, _ in self.seen if key == api_key)

    # --- dispatch -----------------------------------------------------------------------------

    def handle(self, broker: SimBroker, api_key: int, version: int, request: Struct) -> Any:
        if api_key == 18:
            return ApiVersionsResponse(
                error_code=0,
                api_keys=[
                    ApiVersionRange(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(self.versions.items())
                ],
            )
        if api_key == 3:
            return self._handle(broker, api_key, version, request)
        self.seen.append((api_key, version, broker.node_id))
        scripted = self.script.get(api_key)
        error = scripted.pop(0) if scripted else NONE
        if isinstance(request, FindCoordinatorRequest):
            return self._find_coordinator(request, error)
        if api_key != 66 and broker.node_id != self.coordinator and error == NONE:
            error = NOT_COORDINATOR
        if isinstance(request, EndTxnRequest):
            return EndTxnResponse(error_code=error or self._end_txn(request, version))
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request, error)
        if isinstance(request, ListTransactionsRequest):
            return self._list(broker, request, error)
        if isinstance(request, DescribeTransactionsRequest):
            return self._describe(request, error)
        if isinstance(request, OffsetFetchRequest):
            return self._offset_fetch(request, error)
        if isinstance(request, OffsetCommitRequest):
            return self._offset_commit(request, error)
        return self._handle(broker, api_key, version, request)

    def _find_coordinator(self, request: FindCoordinatorRequest, error: int) -> Struct:
        broker = self.world.cluster.brokers[self.coordinator]
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(
                    key=key,
                    node_id=broker.node_id,
                    host=broker.host,
                    port=broker.port,
                    error_code=error,
                )
                for key in request.coordinator_keys
            ]
        )

    # --- transactions (TransactionCoordinator's rules, simplified) -----------------------------

    def _end_txn(self, request: EndTxnRequest, version: int) -> int:
        txn = self.txns.get(request.transactional_id)
        if txn is None or txn.producer_id != request.producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        result = "CompleteCommit" if request.committed else "CompleteAbort"
        epoch = request.producer_epoch
        if version >= 5:  # protocol 2: every end bumps the epoch; a retry is at epoch - 1
            if txn.state == "Ongoing":
                if epoch != txn.epoch:
                    return PRODUCER_FENCED
                txn.state, txn.epoch = result, txn.epoch + 1
                txn.ends.append(result)
                return NONE
            if epoch == txn.epoch - 1:
                return NONE if txn.state == result else INVALID_TXN_STATE
            return PRODUCER_FENCED if epoch != txn.epoch else INVALID_TXN_STATE
        if epoch != txn.epoch:  # protocol 1: the same epoch, a retry too
            return PRODUCER_FENCED
        if txn.state == "Ongoing":
            txn.state = result
            txn.ends.append(result)
            return NONE
        return NONE if txn.state == result else INVALID_TXN_STATE

    def _init_producer_id(self, request: InitProducerIdRequest, error: int) -> Struct:
        tid = request.transactional_id or ""
        txn = self.txns.get(tid)
        if error == NONE and txn is not None and txn.state == "Ongoing":
            if txn.fencing == 0:
                txn.fencing = 2  # the abort markers take a while
            txn.fencing -= 1
            if txn.fencing:
                return InitProducerIdResponse(error_code=CONCURRENT_TRANSACTIONS)
            txn.state, txn.epoch = "CompleteAbort", txn.epoch + 1
            txn.ends.append("CompleteAbort")
        if error:
            return InitProducerIdResponse(error_code=error)
        if txn is None:
            txn = self.txns[tid] = Txn(self._pid(), -1, state="Empty")
        txn.epoch += 1
        return InitProducerIdResponse(producer_id=txn.producer_id, producer_epoch=txn.epoch)

    def owner(self, transactional_id: str) -> int:
        """The node a ListTransactions answer lists ``transactional_id`` from."""
        return sum(transactional_id.encode()) % len(self.world.cluster.brokers)

    def _list(self, broker: SimBroker, request: ListTransactionsRequest, error: int) -> Struct:
        listed = [
            ListedTransaction(
                transactional_id=tid, producer_id=txn.producer_id, transaction_state=txn.state
            )
            for tid, txn in sorted(self.txns.items())
            if self.owner(tid) == broker.node_id
            and (not request.state_filters or txn.state in request.state_filters)
            and (not request.producer_id_filters or txn.producer_id in request.producer_id_filters)
        ]
        return ListTransactionsResponse(
            error_code=error, transaction_states=[] if error else listed
        )

    def _describe(self, request: DescribeTransactionsRequest, error: int) -> Struct:
        states = []
        for tid in request.transactional_ids:
            txn = self.txns.get(tid)
            if error or txn is None:
                states.append(
                    DescribedTransaction(
                        error_code=error or TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid
                    )
                )
                continue
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(txn.partitions):
                topics.setdefault(topic, []).append(partition)
            states.append(
                DescribedTransaction(
                    transactional_id=tid,
                    transaction_state=txn.state,
                    transaction_timeout_ms=60_000,
                    transaction_start_time_ms=1_000,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.epoch,
                    topics=[
                        DescribedTransactionTopic(topic=t, partitions=p) for t, p in topics.items()
                    ],
                )
            )
        return DescribeTransactionsResponse(transaction_states=states)

    # --- group offsets -------------------------------------------------------------------------

    def _offset_fetch(self, request: OffsetFetchRequest, error: int) -> Struct:
        groups = []
        for group in request.groups:
            committed = self.offsets.get(group.group_id, {})
            pending = self.pending.get(group.group_id, {})
            if group.topics is None:
                wanted = sorted(committed)
            else:
                wanted = [(t.name, p) for t in group.topics for p in t.partition_indexes]
            topics: dict[str, list[OffsetFetchResponsePartition]] = {}
            for tp in wanted:
                offset, metadata = committed.get(tp, (-1, ""))
                code = NONE
                if request.require_stable and tp in pending:
                    offset, metadata, code = -1, "", UNSTABLE_OFFSET_COMMIT
                topics.setdefault(tp[0], []).append(
                    OffsetFetchResponsePartition(
                        partition_index=tp[1],
                        committed_offset=offset,
                        metadata=metadata,
                        error_code=code,
                    )
                )
            groups.append(
                OffsetFetchResponseGroup(
                    group_id=group.group_id,
                    error_code=error,
                    topics=[
                        OffsetFetchResponseTopic(name=t, partitions=p) for t, p in topics.items()
                    ],
                )
            )
        return OffsetFetchResponse(groups=groups)

    def _offset_commit(self, request: OffsetCommitRequest, error: int) -> Struct:
        stored = self.offsets.setdefault(request.group_id, {})
        topics = []
        for topic in request.topics:
            parts = []
            for part in topic.partitions:
                if not error:
                    stored[topic.name, part.partition_index] = (
                        part.committed_offset,
                        part.committed_metadata or "",
                    )
                parts.append(
                    OffsetCommitResponsePartition(
                        partition_index=part.partition_index, error_code=error
                    )
                )
            topics.append(OffsetCommitResponseTopic(name=topic.name, partitions=parts))
        return OffsetCommitResponse(topics=topics)


def world(seed: int, faults: FaultSchedule | None = None, nodes: int = 3) -> SimWorld:
    """A simulated cluster of ``nodes`` brokers with one topic."""
    return SimWorld(random.Random(seed), Topology(nodes, {"t": 3}), faults)
