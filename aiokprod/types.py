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
