"""Transaction APIs a producer sends: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn.

Only the client versions of AddPartitionsToTxn (v0-v3) are declared: v4 and up are
broker-to-broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import ArrayOf, Bool, Int16, Int32, Int64, String, Struct, kfield


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
