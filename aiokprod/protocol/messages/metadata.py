"""Metadata (key 3): brokers, topics, partitions and their leaders."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ZERO_UUID,
    ArrayOf,
    Bool,
    Int16,
    Int32,
    NullableString,
    String,
    Struct,
    Uuid,
    kfield,
)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(kw_only=True, slots=True)
class MetadataRequestTopic(Struct):
    """A topic asked for, by name (the id stays zero when asking by name)."""

    topic_id: uuid.UUID = kfield(Uuid, versions="10+")
    name: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class MetadataRequest(Struct):
    """Metadata request; ``topics=None`` asks for every topic, ``[]`` for none."""

    topics: list[MetadataRequestTopic] | None = kfield(ArrayOf(MetadataRequestTopic, nullable=True))
    allow_auto_topic_creation: bool = kfield(Bool, versions="4+", default=True)
    include_cluster_authorized_operations: bool = kfield(Bool, versions="8-10")
    include_topic_authorized_operations: bool = kfield(Bool, versions="8+")


class MetadataRequestInSteps(MetadataRequest):
    """A :class:`MetadataRequest` whose answer is handed up undecoded.

    The same request on the wire; its answer comes back as a
    :class:`~aiokprod.protocol.metadata_fast.MetadataResponseBody`, for a caller that
    decodes it in steps (:class:`~aiokprod.protocol.metadata_fast.MetadataDecoder`): the
    producer's view of a large cluster (issue 30).
    """

    __slots__ = ()


@dataclass(kw_only=True, slots=True)
class MetadataBroker(Struct):
    """A broker of the cluster and where to reach it."""

    node_id: int = kfield(Int32)
    host: str = kfield(String)
    port: int = kfield(Int32)
    rack: str | None = kfield(NullableString, versions="1+")


@dataclass(kw_only=True, slots=True)
class MetadataPartition(Struct):
    """A partition, its leader (-1: none) and its replicas."""

    error_code: int = kfield(Int16)
    partition_index: int = kfield(Int32)
    leader_id: int = kfield(Int32)
    leader_epoch: int = kfield(Int32, versions="7+", default=-1)
    replica_nodes: list[int] = kfield(ArrayOf(Int32))
    isr_nodes: list[int] = kfield(ArrayOf(Int32))
    offline_replicas: list[int] = kfield(ArrayOf(Int32), versions="5+")


@dataclass(kw_only=True, slots=True)
class MetadataTopic(Struct):
    """A topic: its error (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...) and partitions."""

    error_code: int = kfield(Int16)
    name: str | None = kfield(NullableString)
    topic_id: uuid.UUID = kfield(Uuid, versions="10+", default=ZERO_UUID)
    is_internal: bool = kfield(Bool, versions="1+")
    partitions: list[MetadataPartition] = kfield(ArrayOf(MetadataPartition))
    topic_authorized_operations: int = kfield(
        Int32, versions="8+", default=AUTHORIZED_OPERATIONS_OMITTED
    )


@dataclass(kw_only=True, slots=True)
class MetadataResponse(Struct):
    """Metadata response."""

    throttle_time_ms: int = kfield(Int32, versions="3+")
    brokers: list[MetadataBroker] = kfield(ArrayOf(MetadataBroker))
    cluster_id: str | None = kfield(NullableString, versions="2+")
    controller_id: int = kfield(Int32, versions="1+", default=-1)
    topics: list[MetadataTopic] = kfield(ArrayOf(MetadataTopic))
    cluster_authorized_operations: int = kfield(
        Int32, versions="8-10", default=AUTHORIZED_OPERATIONS_OMITTED
    )
    error_code: int = kfield(Int16, versions="13+")
