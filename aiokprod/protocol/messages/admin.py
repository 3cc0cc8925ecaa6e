"""CreateTopics (key 19) and DeleteTopics (key 20), for the local-Kafka test tooling."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ZERO_UUID,
    ArrayOf,
    Bool,
    Int8,
    Int16,
    Int32,
    NullableString,
    String,
    Struct,
    Uuid,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class CreatableReplicaAssignment(Struct):
    """A manual replica assignment for one partition."""

    partition_index: int = kfield(Int32)
    broker_ids: list[int] = kfield(ArrayOf(Int32))


@dataclass(kw_only=True, slots=True)
class CreatableTopicConfig(Struct):
    """A topic config entry."""

    name: str = kfield(String)
    value: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class CreatableTopic(Struct):
    """A topic to create (-1 partitions / replication factor: broker defaults)."""

    name: str = kfield(String)
    num_partitions: int = kfield(Int32, default=-1)
    replication_factor: int = kfield(Int16, default=-1)
    assignments: list[CreatableReplicaAssignment] = kfield(ArrayOf(CreatableReplicaAssignment))
    configs: list[CreatableTopicConfig] = kfield(ArrayOf(CreatableTopicConfig))


@dataclass(kw_only=True, slots=True)
class CreateTopicsRequest(Struct):
    """CreateTopics request (v2+ on Kafka 4.x)."""

    topics: list[CreatableTopic] = kfield(ArrayOf(CreatableTopic))
    timeout_ms: int = kfield(Int32, default=30000)
    validate_only: bool = kfield(Bool, versions="1+")


@dataclass(kw_only=True, slots=True)
class CreatableTopicConfigResult(Struct):
    """A config of a created topic, as the broker reports it (v5+)."""

    name: str = kfield(String)
    value: str | None = kfield(NullableString)
    read_only: bool = kfield(Bool)
    config_source: int = kfield(Int8, default=-1)
    is_sensitive: bool = kfield(Bool)


@dataclass(kw_only=True, slots=True)
class CreatableTopicResult(Struct):
    """One topic's creation result."""

    name: str = kfield(String)
    topic_id: uuid.UUID = kfield(Uuid, versions="7+", default=ZERO_UUID)
    error_code: int = kfield(Int16)
    error_message: str | None = kfield(NullableString, versions="1+")
    topic_config_error_code: int = kfield(Int16, versions="5+", tag=0)
    num_partitions: int = kfield(Int32, versions="5+", default=-1)
    replication_factor: int = kfield(Int16, versions="5+", default=-1)
    configs: list[CreatableTopicConfigResult] | None = kfield(
        ArrayOf(CreatableTopicConfigResult, nullable=True), versions="5+"
    )


@dataclass(kw_only=True, slots=True)
class CreateTopicsResponse(Struct):
    """CreateTopics response."""

    throttle_time_ms: int = kfield(Int32, versions="2+")
    topics: list[CreatableTopicResult] = kfield(ArrayOf(CreatableTopicResult))


@dataclass(kw_only=True, slots=True)
class DeleteTopicState(Struct):
    """A topic to delete, by name (v6+ form)."""

    name: str | None = kfield(NullableString)
    topic_id: uuid.UUID = kfield(Uuid, default=ZERO_UUID)


@dataclass(kw_only=True, slots=True)
class DeleteTopicsRequest(Struct):
    """DeleteTopics request (v1+ on Kafka 4.x)."""

    topics: list[DeleteTopicState] = kfield(ArrayOf(DeleteTopicState), versions="6+")
    topic_names: list[str] = kfield(ArrayOf(String), versions="0-5")
    timeout_ms: int = kfield(Int32, default=30000)


@dataclass(kw_only=True, slots=True)
class DeletableTopicResult(Struct):
    """One topic's deletion result."""

    name: str | None = kfield(NullableString)
    topic_id: uuid.UUID = kfield(Uuid, versions="6+", default=ZERO_UUID)
    error_code: int = kfield(Int16)
    error_message: str | None = kfield(NullableString, versions="5+")


@dataclass(kw_only=True, slots=True)
class DeleteTopicsResponse(Struct):
    """DeleteTopics response."""

    throttle_time_ms: int = kfield(Int32, versions="1+")
    responses: list[DeletableTopicResult] = kfield(ArrayOf(DeletableTopicResult))
