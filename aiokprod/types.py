"""Small public value types shared by every layer (this module imports nothing of ours)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol, runtime_checkable

#: The offset reported when it is not known (acks=0: the broker sends no answer).
UNKNOWN_OFFSET: Final = -1

Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership, for ``send_offsets_to_transaction`` (KIP-447).

    Take it from the consumer that read the input (confluent-kafka:
    ``consumer.consumer_group_metadata()`` is opaque, so pass the group id and, if you have
    them, the generation and member id). With only ``group_id`` the broker cannot fence a
    zombie consumer of an older generation.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A consumer group's committed position in a partition, with its metadata string.

    ``send_offsets_to_transaction`` takes it where a plain ``int`` offset would do, to carry
    metadata (the broker keeps up to ``offset.metadata.max.bytes``, 4096 by default);
    :class:`aiokprod.admin.Admin` returns it from ``list_consumer_group_offsets``.

    Attributes:
        offset: the next offset to consume (last processed + 1).
        metadata: free text stored with the offset ("" for none).
    """

    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """What another client needs to complete a prepared transaction (``prepare_transaction``).

    Picklable, so that it can travel to another process (a Spark driver, say), which commits
    or aborts the transaction with :meth:`aiokprod.admin.Admin.complete_transaction`.

    Attributes:
        transactional_id: the producer's transactional id.
        producer_id: the producer id the transaction was written with.
        producer_epoch: its epoch.
        protocol: the transaction protocol it was written with: 1, or 2 (KIP-890). EndTxn
            must follow it (v4 or lower for 1, v5 or higher for 2).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    protocol: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transaction a broker coordinates, as ``Admin.list_transactions`` reports it.

    Attributes:
        transactional_id: the transactional id.
        producer_id: its current producer id.
        state: the coordinator's state name: ``"Ongoing"``, ``"PrepareCommit"``,
            ``"PrepareAbort"``, ``"CompleteCommit"``, ``"CompleteAbort"``, ``"Empty"``,
            ``"Dead"`` or ``"PrepareEpochFence"``.
    """

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (``Admin.describe_transactions``).

    Attributes:
        transactional_id: the transactional id.
        state: the coordinator's state name (as :class:`TransactionListing`).
        producer_id: the current producer id.
        producer_epoch: the current epoch.
        timeout_ms: the transaction timeout the producer registered.
        start_time_ms: when the open transaction started (wall clock ms), -1 if none is open.
        topic_partitions: the partitions in the open transaction.
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    topic_partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed, as the broker acknowledged it.

    Attributes:
        topic: the topic.
        partition: the partition.
        offset: the record's offset in the partition; ``-1`` (``UNKNOWN_OFFSET``) with
            acks=0, where the broker sends no acknowledgement.
        timestamp_ms: the record's timestamp: its create time, or the broker's append time
            when the topic uses LogAppendTime.
        serialized_key_size: bytes of the serialized key, -1 for a null key.
        serialized_value_size: bytes of the serialized value, -1 for a null value.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def has_offset(self) -> bool:
        """False when the offset is unknown (acks=0)."""
        return self.offset != UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class SerializationContext:
    """What a serializer that takes a second argument is told (as confluent-kafka's).

    Schema Registry serializers need the topic (subject naming) and sometimes the headers.

    Attributes:
        topic: the record's topic.
        field: ``"key"`` or ``"value"``: which part is being serialized.
        headers: the record's headers as given to ``send()``, or None.
    """

    topic: str
    field: str
    headers: Sequence[Header] | None = None


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record as the caller handed it to ``send()``, before serialization.

    Interceptors receive and return these; on the fast path without interceptors none is built.
    """

    topic: str
    value: object = None
    key: object = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] | None = None


@runtime_checkable
class ProducerInterceptor(Protocol):
    """Hooks around every record, like the Java client's ``ProducerInterceptor``.

    ``on_send`` runs inside ``send()`` before serialization and may return a changed record;
    ``on_acknowledgement`` runs when the record is acknowledged or fails. Both run on the
    event loop and must be quick; an exception they raise is logged and otherwise ignored,
    as in the Java client.
    """

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Called for every record before it is serialized and partitioned."""
        ...

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        """Called once per record with its metadata, or the exception it failed with."""
        ...
