"""A minimal, blocking Kafka Metadata client over a plain socket.

The runner needs to know when brokers are registered and when a new topic has a leader for
every partition. Asking the broker directly is far quicker than starting a JVM for
``TopicCommand --describe``, and deliberately independent of aiokprod's own protocol code
(the test harness must not depend on the code it tests).

Only Metadata v5 is spoken: non-flexible (no tagged fields), supported by every Kafka from
1.0 to 4.x, and it has ``allow_auto_topic_creation``, so polling for a deleted topic does not
create it again.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokprod.testing.errors import LocalKafkaError

_METADATA_API_KEY = 3
_METADATA_VERSION = 5
_CLIENT_ID = b"aiokprod-testing"
_MAX_RESPONSE = 64 * 1024 * 1024
_correlation_ids = itertools.count(1)

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5


@dataclass(frozen=True)
class BrokerInfo:
    """One broker of a Metadata response."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a Metadata response (``leader`` is -1 while there is none)."""

    error_code: int
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a Metadata response."""

    error_code: int
    name: str
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]

    def fully_led(self, partitions: int | None = None) -> bool:
        """Whether the topic exists and each partition has a leader and no error.

        Args:
            partitions: also require exactly this many partitions.
        """
        if self.error_code != 0 or not self.partitions:
            return False
        if partitions is not None and len(self.partitions) != partitions:
            return False
        return all(p.error_code == 0 and p.leader >= 0 for p in self.partitions)


@dataclass(frozen=True)
class ClusterMetadata:
    """A decoded Metadata v5 response."""

    brokers: tuple[BrokerInfo, ...]
    cluster_id: str | None
    controller_id: int
    topics: dict[str, TopicInfo] = field(default_factory=dict)

    @property
    def broker_ids(self) -> set[int]:
        """The ids of every broker in the response."""
        return {b.node_id for b in self.brokers}


def encode_metadata_request(
    correlation_id: int, topics: Sequence[str] | None, allow_auto_create: bool = False
) -> bytes:
    """A size-prefixed Metadata v5 request (``topics=None`` asks for every topic)."""
    body = bytearray()
    body += struct.pack(
        ">hhih", _METADATA_API_KEY, _METADATA_VERSION, correlation_id, len(_CLIENT_ID)
    )
    body += _CLIENT_ID
    if topics is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(topics))
        for name in topics:
            raw = name.encode("utf-8")
            body += struct.pack(">h", len(raw)) + raw
    body += struct.pack(">?", allow_auto_create)
    return struct.pack(">i", len(body)) + bytes(body)


class _Reader:
    """Sequential big-endian reads that fail with ``LocalKafkaError``, not ``struct.error``."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, size: int) -> bytes:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            raise LocalKafkaError("truncated Metadata response from the local broker")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise LocalKafkaError("null string where the Metadata schema forbids it")
        return value

    def nullable_string(self) -> str | None:
        size = self.int16()
        return None if size < 0 else self._take(size).decode("utf-8")

    def count(self) -> int:
        return max(self.int32(), 0)

    def int32_array(self) -> tuple[int, ...]:
        return tuple(self.int32() for _ in range(self.count()))


def decode_metadata_response(payload: bytes, correlation_id: int) -> ClusterMetadata:
    """Decode a Metadata v5 response (without its size prefix).

    Raises:
        LocalKafkaError: the bytes are not the answer to ``correlation_id``.
    """
    reader = _Reader(payload)
    got = reader.int32()
    if got != correlation_id:
        raise LocalKafkaError(
            f"Metadata response for correlation id {got}, expected {correlation_id}"
        )
    reader.int32()  # throttle time
    brokers = tuple(
        BrokerInfo(reader.int32(), reader.string(), reader.int32(), reader.nullable_string())
        for _ in range(reader.count())
    )
    cluster_id = reader.nullable_string()
    controller_id = reader.int32()
    topics: dict[str, TopicInfo] = {}
    for _ in range(reader.count()):
        error_code = reader.int16()
        name = reader.string()
        is_internal = reader.int8() != 0
        partitions = tuple(
            PartitionInfo(
                error_code=reader.int16(),
                partition=reader.int32(),
                leader=reader.int32(),
                replicas=reader.int32_array(),
                isr=reader.int32_array(),
                offline_replicas=reader.int32_array(),
            )
            for _ in range(reader.count())
        )
        topics[name] = TopicInfo(error_code, name, is_internal, partitions)
    return ClusterMetadata(brokers, cluster_id, controller_id, topics)


def fetch_metadata(
    host: str, port: int, topics: Sequence[str] | None = None, timeout: float = 5.0
) -> ClusterMetadata:
    """Ask one broker for metadata, never creating topics.

    Args:
        host: broker address.
        port: its client port.
        topics: topic names, or None for every topic.
        timeout: socket timeout in seconds for connect and each read.

    Raises:
        LocalKafkaError: the broker cannot be reached or answers nonsense.
    """
    correlation_id = next(_correlation_ids) & 0x7FFFFFFF
    request = encode_metadata_request(correlation_id, topics)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request)
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if not 0 < size <= _MAX_RESPONSE:
                raise LocalKafkaError(f"implausible Metadata response size {size}")
            payload = _recv_exactly(sock, size)
    except OSError as exc:
        raise LocalKafkaError(f"Metadata request to {host}:{port} failed: {exc}") from exc
    return decode_metadata_response(payload, correlation_id)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise LocalKafkaError("the broker closed the connection mid-response")
        chunks += chunk
    return bytes(chunks)
