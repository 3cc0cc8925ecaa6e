"""The admin client's transaction operations, over :class:`RoundTrips` (docs/admin.md).

EndTxn for a prepared transaction, InitProducerId to fence a transactional id (KIP-618),
ListTransactions to every broker and DescribeTransactions to each id's coordinator
(KIP-664). Each operation has one deadline (``max_block_ms`` from its start) for all of
its requests; retriable answers are retried inside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from aiokprod.errors import KafkaError
from aiokprod.internals.round_trips import RoundTrips, check_code
from aiokprod.internals.txn_requests import send_end_txn
from aiokprod.net.connection import BrokerConnection
from aiokprod.protocol.messages.coordinator import KEY_TYPE_TRANSACTION
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiokprod.protocol.messages.txn_admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from aiokprod.protocol.schema import Struct
from aiokprod.types import (
    PreparedTransaction,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

T = TypeVar("T")

#: The transaction states a coordinator reports (TransactionState.java in Apache Kafka).
TRANSACTION_STATES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)
#: DescribeTransactions' answer for an id the coordinator does not know.
TRANSACTIONAL_ID_NOT_FOUND = 105
#: Requests of one operation in flight at once (fence_producers, describe_transactions).
MAX_CONCURRENT_REQUESTS = 16


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Run ``calls`` with at most ``limit`` at a time; the results in order.

    The first failure cancels the others and is raised as it is (no exception group).
    """
    if not calls:
        return []
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def complete_transaction(
    requests: RoundTrips, prepared: PreparedTransaction, *, commit: bool
) -> None:
    """EndTxn for ``prepared`` at the version its protocol needs (<= v4 for 1, >= v5 for 2).

    Raises:
        ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError,
        InvalidProducerIdMappingError: the transaction is no longer open (see docs/admin.md).
        UnsupportedVersionError: protocol 2 and a coordinator without EndTxn v5.
        KafkaTimeoutError: not done within ``max_block_ms``.
    """
    await send_end_txn(requests, prepared, commit=commit)


async def fence_producers(
    requests: RoundTrips, transactional_ids: Sequence[str], transaction_timeout_ms: int
) -> None:
    """InitProducerId for each id (concurrently): aborts its open transaction, bumps its epoch."""
    deadline_ms = requests.deadline_ms()

    def fence(transactional_id: str) -> Callable[[], Awaitable[None]]:
        def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
            request = InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
            )
            return request, None

        def handle(response: Struct) -> None:
            if not isinstance(response, InitProducerIdResponse):  # pragma: no cover
                raise KafkaError("InitProducerId answered with another message")
            check_code(response.error_code)

        def call() -> Awaitable[None]:
            return requests.to_coordinator(
                "InitProducerId",
                KEY_TYPE_TRANSACTION,
                transactional_id,
                make,
                handle,
                deadline_ms=deadline_ms,
            )

        return call

    await gather_bounded([fence(t) for t in transactional_ids], MAX_CONCURRENT_REQUESTS)


async def broker_ids(requests: RoundTrips, deadline_ms: int) -> list[int]:
    """Every broker of the cluster (Metadata for no topic); the pool learns their addresses."""

    def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
        return MetadataRequest(topics=[], allow_auto_topic_creation=False), None

    def handle(response: Struct) -> dict[int, tuple[str, int]]:
        if not isinstance(response, MetadataResponse):  # pragma: no cover
            raise KafkaError("Metadata answered with another message")
        return {b.node_id: (b.host, b.port) for b in response.brokers}

    brokers = await requests.to_node("Metadata", None, make, handle, deadline_ms=deadline_ms)
    requests.pool.update_nodes(brokers)
    return sorted(brokers)


async def list_transactions(
    requests: RoundTrips, states: Sequence[str], producer_ids: Sequence[int]
) -> list[TransactionListing]:
    """ListTransactions to every broker, merged (each answers for the ids it coordinates)."""
    deadline_ms = requests.deadline_ms()
    nodes = await broker_ids(requests, deadline_ms)

    def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
        request = ListTransactionsRequest(
            state_filters=list(states), producer_id_filters=list(producer_ids)
        )
        return request, None

    def handle(response: Struct) -> list[TransactionListing]:
        if not isinstance(response, ListTransactionsResponse):  # pragma: no cover
            raise KafkaError("ListTransactions answered with another message")
        check_code(response.error_code)
        return [
            TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
            for t in response.transaction_states
        ]

    def ask(node: int) -> Callable[[], Awaitable[list[TransactionListing]]]:
        def call() -> Awaitable[list[TransactionListing]]:
            return requests.to_node("ListTransactions", node, make, handle, deadline_ms=deadline_ms)

        return call

    answers = await gather_bounded([ask(n) for n in nodes], MAX_CONCURRENT_REQUESTS)
    merged = {(t.transactional_id, t.producer_id): t for answer in answers for t in answer}
    return sorted(merged.values(), key=lambda t: (t.transactional_id, t.producer_id))


async def describe_transactions(
    requests: RoundTrips, transactional_ids: Sequence[str]
) -> dict[str, TransactionDescription]:
    """DescribeTransactions for each id at its coordinator; unknown ids are left out."""
    deadline_ms = requests.deadline_ms()

    def describe(transactional_id: str) -> Callable[[], Awaitable[TransactionDescription | None]]:
        def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
            return DescribeTransactionsRequest(transactional_ids=[transactional_id]), None

        def handle(response: Struct) -> TransactionDescription | None:
            if not isinstance(response, DescribeTransactionsResponse):  # pragma: no cover
                raise KafkaError("DescribeTransactions answered with another message")
            for state in response.transaction_states:
                if state.transactional_id != transactional_id:
                    continue
                if state.error_code == TRANSACTIONAL_ID_NOT_FOUND:
                    return None
                check_code(state.error_code)
                return TransactionDescription(
                    transactional_id=transactional_id,
                    state=state.transaction_state,
                    producer_id=state.producer_id,
                    producer_epoch=state.producer_epoch,
                    timeout_ms=state.transaction_timeout_ms,
                    start_time_ms=state.transaction_start_time_ms,
                    topic_partitions=frozenset(
                        TopicPartition(topic.topic, p)
                        for topic in state.topics
                        for p in topic.partitions
                    ),
                )
            raise KafkaError(
                f"DescribeTransactions: the coordinator did not answer for {transactional_id!r}"
            )

        def call() -> Awaitable[TransactionDescription | None]:
            return requests.to_coordinator(
                "DescribeTransactions",
                KEY_TYPE_TRANSACTION,
                transactional_id,
                make,
                handle,
                deadline_ms=deadline_ms,
            )

        return call

    ids = list(dict.fromkeys(transactional_ids))
    found = await gather_bounded([describe(t) for t in ids], MAX_CONCURRENT_REQUESTS)
    return {d.transactional_id: d for d in found if d is not None}
