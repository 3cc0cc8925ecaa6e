"""Produce (key 0): record batches for partitions, and where each landed.

Kafka 4.x accepts Produce v3 and up (v0-v2 were removed by KIP-896, although brokers still
advertise 0 as the minimum). v9 is the first flexible version; v10 adds the KIP-951 leader
hints; v13 replaces topic names with topic ids and is not used by this client.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Int16,
    Int32,
    Int64,
    NullableRecords,
    NullableString,
    String,
    Struct,
    StructType,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class ProducePartitionData(Struct):
    """One partition's records: exactly one v2 record batch."""

    index: int = kfield(Int32)
    records: bytes | bytearray | memoryview | None = kfield(NullableRecords)


@dataclass(kw_only=True, slots=True)
class ProduceTopicData(Struct):
    """One topic's partitions."""

    name: str = kfield(String)
    partition_data: list[ProducePartitionData] = kfield(ArrayOf(ProducePartitionData))


@dataclass(kw_only=True, slots=True)
class ProduceRequest(Struct):
    """Produce request. ``acks`` is -1 (all), 0 or 1; ``timeout_ms`` bounds replication."""

    transactional_id: str | None = kfield(NullableString, versions="3+")
    acks: int = kfield(Int16)
    timeout_ms: int = kfield(Int32)
    topic_data: list[ProduceTopicData] = kfield(ArrayOf(ProduceTopicData))


@dataclass(kw_only=True, slots=True)
class BatchIndexAndErrorMessage(Struct):
    """A record of the batch that the broker rejected (INVALID_RECORD)."""

    batch_index: int = kfield(Int32)
    batch_index_error_message: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class LeaderIdAndEpoch(Struct):
    """KIP-951 hint: the partition's current leader as the answering broker knows it."""

    leader_id: int = kfield(Int32, default=-1)
    leader_epoch: int = kfield(Int32, default=-1)


@dataclass(kw_only=True, slots=True)
class ProducePartitionResponse(Struct):
    """Where one partition's batch landed, or why it did not."""

    index: int = kfield(Int32)
    error_code: int = kfield(Int16)
    base_offset: int = kfield(Int64)
    log_append_time_ms: int = kfield(Int64, versions="2+", default=-1)
    log_start_offset: int = kfield(Int64, versions="5+", default=-1)
    record_errors: list[BatchIndexAndErrorMessage] = kfield(
        ArrayOf(BatchIndexAndErrorMessage), versions="8+"
    )
    error_message: str | None = kfield(NullableString, versions="8+")
    current_leader: LeaderIdAndEpoch | None = kfield(
        StructType(LeaderIdAndEpoch), versions="10+", tag=0
    )


@dataclass(kw_only=True, slots=True)
class ProduceTopicResponse(Struct):
    """One topic's partition results."""

    name: str = kfield(String)
    partition_responses: list[ProducePartitionResponse] = kfield(ArrayOf(ProducePartitionResponse))


@dataclass(kw_only=True, slots=True)
class NodeEndpoint(Struct):
    """KIP-951: where to reach a leader named in a ``current_leader`` hint."""

    node_id: int = kfield(Int32)
    host: str = kfield(String)
    port: int = kfield(Int32)
    rack: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class ProduceResponse(Struct):
    """Produce response (none at all is sent for acks=0)."""

    responses: list[ProduceTopicResponse] = kfield(ArrayOf(ProduceTopicResponse))
    throttle_time_ms: int = kfield(Int32, versions="1+")
    node_endpoints: list[NodeEndpoint] = kfield(ArrayOf(NodeEndpoint), versions="10+", tag=0)
