"""Transaction APIs a producer sends: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit.

Only the client versions of AddPartitionsToTxn (v0-v3) are declared: v4 and up are
broker-to-broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Bool,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
    Struct,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnTopic(Struct):
    """A topic's partitions to add to the transaction."""

    name: str = kfield(String)
    partitions: list[int] = kfield(ArrayOf(Int32))


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnRequest(Struct):
    """AddPartitionsToTxn request (client versions 0-3)."""

    transactional_id: str = kfield(String)
    producer_id: int = kfield(Int64)
    producer_epoch: int = kfield(Int16)
    topics: list[AddPartitionsToTxnTopic] = kfield(ArrayOf(AddPartitionsToTxnTopic))


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnPartitionResult(Struct):
    """One partition's result."""

    partition_index: int = kfield(Int32)
    partition_error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnTopicResult(Struct):
    """One topic's partition results."""

    name: str = kfield(String)
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = kfield(
        ArrayOf(AddPartitionsToTxnPartitionResult)
    )


@dataclass(kw_only=True, slots=True)
class AddPartitionsToTxnResponse(Struct):
    """AddPartitionsToTxn response (client versions 0-3)."""

    throttle_time_ms: int = kfield(Int32)
    results_by_topic: list[AddPartitionsToTxnTopicResult] = kfield(
        ArrayOf(AddPartitionsToTxnTopicResult)
    )


@dataclass(kw_only=True, slots=True)
class AddOffsetsToTxnRequest(Struct):
    """AddOffsetsToTxn request: include a consumer group's offsets in the transaction."""

    transactional_id: str = kfield(String)
    producer_id: int = kfield(Int64)
    producer_epoch: int = kfield(Int16)
    group_id: str = kfield(String)


@dataclass(kw_only=True, slots=True)
class AddOffsetsToTxnResponse(Struct):
    """AddOffsetsToTxn response."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class EndTxnRequest(Struct):
    """EndTxn request: commit (True) or abort (False)."""

    transactional_id: str = kfield(String)
    producer_id: int = kfield(Int64)
    producer_epoch: int = kfield(Int16)
    committed: bool = kfield(Bool)


@dataclass(kw_only=True, slots=True)
class EndTxnResponse(Struct):
    """EndTxn response; v5 (transaction protocol 2) returns the bumped producer epoch."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)
    producer_id: int = kfield(Int64, versions="5+", default=-1)
    producer_epoch: int = kfield(Int16, versions="5+", default=-1)


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitPartition(Struct):
    """One partition's offset to commit with the transaction."""

    partition_index: int = kfield(Int32)
    committed_offset: int = kfield(Int64)
    committed_leader_epoch: int = kfield(Int32, versions="2+", default=-1)
    committed_metadata: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitTopic(Struct):
    """One topic's offsets."""

    name: str = kfield(String)
    partitions: list[TxnOffsetCommitPartition] = kfield(ArrayOf(TxnOffsetCommitPartition))


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitRequest(Struct):
    """TxnOffsetCommit request (key 28), sent to the group coordinator.

    v3 adds the consumer's generation, member id and group instance id (KIP-447); v4 may
    answer TRANSACTION_ABORTABLE; v5 is required with transaction protocol 2 (KIP-890),
    where it also adds the offsets partition to the transaction (no AddOffsetsToTxn).
    """

    transactional_id: str = kfield(String)
    group_id: str = kfield(String)
    producer_id: int = kfield(Int64)
    producer_epoch: int = kfield(Int16)
    generation_id: int = kfield(Int32, versions="3+", default=-1)
    member_id: str = kfield(String, versions="3+", default="")
    group_instance_id: str | None = kfield(NullableString, versions="3+", default=None)
    topics: list[TxnOffsetCommitTopic] = kfield(ArrayOf(TxnOffsetCommitTopic))


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitPartitionResult(Struct):
    """One partition's result."""

    partition_index: int = kfield(Int32)
    error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitTopicResult(Struct):
    """One topic's results."""

    name: str = kfield(String)
    partitions: list[TxnOffsetCommitPartitionResult] = kfield(
        ArrayOf(TxnOffsetCommitPartitionResult)
    )


@dataclass(kw_only=True, slots=True)
class TxnOffsetCommitResponse(Struct):
    """TxnOffsetCommit response."""

    throttle_time_ms: int = kfield(Int32)
    topics: list[TxnOffsetCommitTopicResult] = kfield(ArrayOf(TxnOffsetCommitTopicResult))
