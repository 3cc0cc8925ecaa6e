"""ListTransactions (key 66) and DescribeTransactions (key 65): transactions seen from outside.

KIP-664 (Kafka 3.0), written from the protocol guide. Both are flexible from v0.
ListTransactions goes to every broker (each answers for the transactional ids it
coordinates); v1 adds a minimum-duration filter (KIP-994, Kafka 3.8) and v2 a
transactional-id regular expression (KIP-1152, Kafka 4.1). DescribeTransactions goes to
each id's transaction coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
    Struct,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class ListTransactionsRequest(Struct):
    """ListTransactions request: empty filters match everything."""

    state_filters: list[str] = kfield(ArrayOf(String))
    producer_id_filters: list[int] = kfield(ArrayOf(Int64))
    duration_filter: int = kfield(Int64, versions="1+", default=-1)
    transactional_id_pattern: str | None = kfield(NullableString, versions="2+", default=None)


@dataclass(kw_only=True, slots=True)
class ListedTransaction(Struct):
    """One transaction of the broker's answer."""

    transactional_id: str = kfield(String)
    producer_id: int = kfield(Int64)
    transaction_state: str = kfield(String)


@dataclass(kw_only=True, slots=True)
class ListTransactionsResponse(Struct):
    """ListTransactions response; ``unknown_state_filters`` are filters the broker ignored."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)
    unknown_state_filters: list[str] = kfield(ArrayOf(String))
    transaction_states: list[ListedTransaction] = kfield(ArrayOf(ListedTransaction))


@dataclass(kw_only=True, slots=True)
class DescribeTransactionsRequest(Struct):
    """DescribeTransactions request."""

    transactional_ids: list[str] = kfield(ArrayOf(String))


@dataclass(kw_only=True, slots=True)
class DescribedTransactionTopic(Struct):
    """A topic's partitions in the open transaction."""

    topic: str = kfield(String)
    partitions: list[int] = kfield(ArrayOf(Int32))


@dataclass(kw_only=True, slots=True)
class DescribedTransaction(Struct):
    """One transactional id's state, or its error."""

    error_code: int = kfield(Int16)
    transactional_id: str = kfield(String)
    transaction_state: str = kfield(String)
    transaction_timeout_ms: int = kfield(Int32)
    transaction_start_time_ms: int = kfield(Int64, default=-1)
    producer_id: int = kfield(Int64, default=-1)
    producer_epoch: int = kfield(Int16, default=-1)
    topics: list[DescribedTransactionTopic] = kfield(ArrayOf(DescribedTransactionTopic))


@dataclass(kw_only=True, slots=True)
class DescribeTransactionsResponse(Struct):
    """DescribeTransactions response."""

    throttle_time_ms: int = kfield(Int32)
    transaction_states: list[DescribedTransaction] = kfield(ArrayOf(DescribedTransaction))
