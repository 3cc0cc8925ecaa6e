"""OffsetCommit (key 8) and OffsetFetch (key 9): a consumer group's committed offsets.

Written from the protocol guide (kafka.apache.org/protocol, "OffsetCommit API" and
"OffsetFetch API"). Only the versions every supported broker (Kafka 3.6 to 4.4) accepts
and that the admin client needs are declared:

* OffsetCommit v2-v9. v0 and v1 were removed in Kafka 4.0 (KIP-896); v2-v4 carry a
  retention time, v6 the leader epoch, v7 the group instance id (KIP-345), v8 is the first
  flexible version (KIP-482), v9 may carry a KIP-848 member epoch in place of the
  generation. v10 (Kafka 4.1) names topics by id and is not declared.
* OffsetFetch v8-v9: many groups per request (KIP-709, Kafka 3.0), ``require_stable``
  (KIP-447) and, from v9, the member id and epoch of a KIP-848 consumer. v10 (topic ids)
  is not declared.
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

# --- OffsetCommit ---------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequestPartition(Struct):
    """One partition's offset to commit."""

    partition_index: int = kfield(Int32)
    committed_offset: int = kfield(Int64)
    committed_leader_epoch: int = kfield(Int32, versions="6+", default=-1)
    committed_metadata: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequestTopic(Struct):
    """One topic's offsets to commit."""

    name: str = kfield(String)
    partitions: list[OffsetCommitRequestPartition] = kfield(ArrayOf(OffsetCommitRequestPartition))


@dataclass(kw_only=True, slots=True)
class OffsetCommitRequest(Struct):
    """OffsetCommit request, sent to the group coordinator.

    A generation of -1 with an empty member id commits for a group that has no members (a
    "simple" group, as the Java admin client's ``alterConsumerGroupOffsets`` does).
    """

    group_id: str = kfield(String)
    generation_id_or_member_epoch: int = kfield(Int32, default=-1)
    member_id: str = kfield(String)
    group_instance_id: str | None = kfield(NullableString, versions="7+", default=None)
    retention_time_ms: int = kfield(Int64, versions="2-4", default=-1)
    topics: list[OffsetCommitRequestTopic] = kfield(ArrayOf(OffsetCommitRequestTopic))


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponsePartition(Struct):
    """One partition's result."""

    partition_index: int = kfield(Int32)
    error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponseTopic(Struct):
    """One topic's results."""

    name: str = kfield(String)
    partitions: list[OffsetCommitResponsePartition] = kfield(ArrayOf(OffsetCommitResponsePartition))


@dataclass(kw_only=True, slots=True)
class OffsetCommitResponse(Struct):
    """OffsetCommit response."""

    throttle_time_ms: int = kfield(Int32, versions="3+")
    topics: list[OffsetCommitResponseTopic] = kfield(ArrayOf(OffsetCommitResponseTopic))


# --- OffsetFetch ----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequestTopic(Struct):
    """A topic's partitions whose offsets to fetch."""

    name: str = kfield(String)
    partition_indexes: list[int] = kfield(ArrayOf(Int32))


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequestGroup(Struct):
    """One group to fetch offsets for; ``topics=None`` asks for every partition it has."""

    group_id: str = kfield(String)
    member_id: str | None = kfield(NullableString, versions="9+", default=None)
    member_epoch: int = kfield(Int32, versions="9+", default=-1)
    topics: list[OffsetFetchRequestTopic] | None = kfield(
        ArrayOf(OffsetFetchRequestTopic, nullable=True), default=None
    )


@dataclass(kw_only=True, slots=True)
class OffsetFetchRequest(Struct):
    """OffsetFetch request (v8+), sent to the group coordinator.

    With ``require_stable`` (KIP-447) the coordinator does not answer with an offset that a
    transaction has written but not yet committed or aborted: the classic coordinator
    answers UNSTABLE_OFFSET_COMMIT for that partition, and the client asks again.
    """

    groups: list[OffsetFetchRequestGroup] = kfield(ArrayOf(OffsetFetchRequestGroup))
    require_stable: bool = kfield(Bool)


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponsePartition(Struct):
    """One partition's committed offset (-1: none) and error."""

    partition_index: int = kfield(Int32)
    committed_offset: int = kfield(Int64, default=-1)
    committed_leader_epoch: int = kfield(Int32, default=-1)
    metadata: str | None = kfield(NullableString)
    error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponseTopic(Struct):
    """One topic's partitions."""

    name: str = kfield(String)
    partitions: list[OffsetFetchResponsePartition] = kfield(ArrayOf(OffsetFetchResponsePartition))


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponseGroup(Struct):
    """One group's offsets and its group-level error."""

    group_id: str = kfield(String)
    topics: list[OffsetFetchResponseTopic] = kfield(ArrayOf(OffsetFetchResponseTopic))
    error_code: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class OffsetFetchResponse(Struct):
    """OffsetFetch response (v8+)."""

    throttle_time_ms: int = kfield(Int32)
    groups: list[OffsetFetchResponseGroup] = kfield(ArrayOf(OffsetFetchResponseGroup))
