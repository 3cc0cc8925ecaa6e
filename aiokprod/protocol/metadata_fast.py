"""A Metadata response decoded in steps, into what a producer keeps of it (issue 30).

A cluster of 100,000 partitions answers Metadata with megabytes; the declarative codec
(``protocol.schema``) turns that into a dataclass per partition and per replica list in
one go, which held the event loop for over a second. :class:`MetadataDecoder` reads the
same bytes in steps of a bounded number of partitions, so a caller can give the loop back
between steps, and keeps per partition only what a producer uses: the index, the leader
and the leader epoch (replica, ISR and offline lists are checked for framing and skipped).
Everything else is read as the declarative codec reads it and checked the same way:
truncated or malformed input raises :class:`~aiokprod.errors.ProtocolError`, and the
tests hold the two decoders to the same result over every version.

A request for such an answer is a :class:`~aiokprod.protocol.messages.metadata.
MetadataRequestInSteps`: the connection then hands up its body undecoded, as
:class:`MetadataResponseBody` (``api.METADATA_IN_STEPS``), and the caller decodes it.
"""

from __future__ import annotations

import struct
from typing import Final

from aiokprod.errors import ProtocolError
from aiokprod.protocol.messages.metadata import MetadataBroker, MetadataResponse
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.schema import Struct

FIRST_FLEXIBLE: Final = 9
_PARTITION: Final = struct.Struct(">hiii")  # error code, index, leader, leader epoch
_PARTITION_V4: Final = struct.Struct(">hii")  # before leader epochs (v7)
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_ZERO_ID: Final = bytes(16)


class MetadataResponseBody(Struct):
    """A Metadata response body, not decoded yet (see :class:`MetadataDecoder`)."""

    __slots__ = ("data", "version")

    def __init__(self, data: bytes, version: int) -> None:
        self.data = data
        self.version = version

    def __repr__(self) -> str:
        return f"MetadataResponseBody({len(self.data)} bytes, v{self.version})"


def keep_metadata_body(reader: Reader, version: int) -> MetadataResponseBody:
    """The body decoder of ``METADATA_IN_STEPS``: every byte left, as it is."""
    return MetadataResponseBody(reader.read_raw(reader.remaining), version)


class TopicPartitions:
    """One topic of a Metadata response, as a producer keeps it.

    ``indexes``, ``leaders`` and ``epochs`` are parallel, in the order of the response.
    """

    __slots__ = ("epochs", "error_code", "indexes", "is_internal", "leaders", "name", "topic_id")

    def __init__(
        self,
        error_code: int,
        name: str | None,
        topic_id: bytes = _ZERO_ID,
        is_internal: bool = False,
        indexes: list[int] | None = None,
        leaders: list[int] | None = None,
        epochs: list[int] | None = None,
    ) -> None:
        self.error_code = error_code
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.indexes: list[int] = [] if indexes is None else indexes
        self.leaders: list[int] = [] if leaders is None else leaders
        self.epochs: list[int] = [] if epochs is None else epochs

    def __repr__(self) -> str:
        return f"TopicPartitions({self.name!r}, error={self.error_code}, {len(self.indexes)} p)"


def topics_of(response: MetadataResponse) -> list[TopicPartitions]:
    """The topics of a response decoded by the declarative codec, in the same form."""
    return [
        TopicPartitions(
            t.error_code,
            t.name,
            t.topic_id.bytes,
            t.is_internal,
            [p.partition_index for p in t.partitions],
            [p.leader_id for p in t.partitions],
            [p.leader_epoch for p in t.partitions],
        )
        for t in response.topics
    ]


class MetadataDecoder:
    """Decodes one Metadata response body (``version`` 4 to 13) in steps.

    The header (throttle time, brokers, cluster id, controller) is read at construction;
    :meth:`step` then reads topics until about ``max_partitions`` partitions were read and
    returns the topics it finished (a topic larger than one step is returned by the step
    that reads its end). Once :attr:`done`, the trailing fields are read and every byte
    was consumed.

    Raises:
        ProtocolError: from the constructor or :meth:`step`: the bytes are not a valid
            Metadata response of that version.
    """

    def __init__(self, data: bytes | bytearray | memoryview, version: int) -> None:
        if not 4 <= version <= 13:
            raise ProtocolError(f"Metadata v{version} is not decoded here")
        self._data = bytes(data)
        self._pos = 0
        self._end = len(self._data)
        self.version = version
        self._flexible = version >= FIRST_FLEXIBLE
        #: Partitions read so far (all topics).
        self.partitions_read = 0
        self.done = False
        self.throttle_time_ms = self._int32() if version >= 3 else 0
        self.brokers = [self._broker() for _ in range(self._array_length(min_item_size=10))]
        self.cluster_id = self._string(nullable=True)
        self.controller_id = self._int32()
        self.cluster_authorized_operations = -(2**31)
        self.error_code = 0
        self._topics_left = self._array_length(min_item_size=5)
        self._topic: TopicPartitions | None = None
        self._partitions_left = 0
        if self._topics_left == 0:
            self._finish()

    # --- steps ------------------------------------------------------------------------------

    def step(self, max_partitions: int) -> list[TopicPartitions]:
        """Read on for about ``max_partitions`` partitions; the topics finished meanwhile."""
        finished: list[TopicPartitions] = []
        budget = max(max_partitions, 1)
        while not self.done and budget > 0:
            topic = self._topic
            if topic is None:
                topic = self._topic = self._topic_header()
            take = min(budget, self._partitions_left)
            if take:
                try:
                    if self._flexible:
                        self._partitions_flexible(topic, take)
                    else:
                        self._partitions_classic(topic, take)
                except (struct.error, IndexError):
                    raise self._fail("truncated partition") from None
                self._partitions_left -= take
                self.partitions_read += take
                budget -= take
            budget -= 1  # a topic costs something too, partitions or not
            if self._partitions_left == 0:
                self._topic_trailer()
                finished.append(topic)
                self._topic = None
                self._topics_left -= 1
                if self._topics_left == 0:
                    self._finish()
        return finished

    def _partitions_flexible(self, topic: TopicPartitions, count: int) -> None:
        # The hot loop of a large answer: per partition one unpack and three compact
        # arrays skipped by their lengths (one byte each below 128 items); anything else
        # (a longer length, a null array, tagged fields) takes the careful path.
        data = self._data
        pos = self._pos
        unpack = _PARTITION.unpack_from
        add_index, add_leader, add_epoch = (
            topic.indexes.append,
            topic.leaders.append,
            topic.epochs.append,
        )
        for _ in range(count):
            _, index, leader, epoch = unpack(data, pos)
            pos += 14
            n = data[pos]
            pos = pos + 4 * n - 3 if 0 < n < 0x80 else self._skip_array(pos)
            n = data[pos]
            pos = pos + 4 * n - 3 if 0 < n < 0x80 else self._skip_array(pos)
            n = data[pos]
            pos = pos + 4 * n - 3 if 0 < n < 0x80 else self._skip_array(pos)
            if data[pos]:
                self._pos = pos
                self._skip_tagged_fields()
                pos = self._pos
            else:
                pos += 1
            add_index(index)
            add_leader(leader)
            add_epoch(epoch)
        if pos > self._end:
            raise self._fail("truncated partition")
        self._pos = pos

    def _skip_array(self, pos: int) -> int:
        """Skip a compact int32 array at ``pos`` whose length is not one small byte."""
        self._pos = pos
        n = self._uvarint()
        if n == 0:
            raise self._fail("null array in a non-nullable field")
        return self._pos + 4 * (n - 1)

    def _partitions_classic(self, topic: TopicPartitions, count: int) -> None:
        data, pos, end = self._data, self._pos, self._end
        with_epoch = self.version >= 7
        arrays = 3 if self.version >= 5 else 2
        unpack_length = _INT32.unpack_from
        for _ in range(count):
            if with_epoch:
                _, index, leader, epoch = _PARTITION.unpack_from(data, pos)
                pos += 14
            else:
                _, index, leader = _PARTITION_V4.unpack_from(data, pos)
                epoch = -1
                pos += 10
            for _ in range(arrays):
                n = unpack_length(data, pos)[0]
                if n < 0:
                    self._pos = pos
                    raise self._fail(f"array length {n} in a non-nullable field")
                pos += 4 + 4 * n
                if pos > end:
                    self._pos = pos
                    raise self._fail("truncated partition")
            topic.indexes.append(index)
            topic.leaders.append(leader)
            topic.epochs.append(epoch)
        self._pos = pos

    def _topic_header(self) -> TopicPartitions:
        error_code = self._int16()
        name = self._string(nullable=True)
        topic_id = self._raw(16) if self.version >= 10 else _ZERO_ID
        is_internal = self._byte() != 0
        self._partitions_left = self._array_length(min_item_size=14)
        return TopicPartitions(error_code, name, topic_id, is_internal)

    def _topic_trailer(self) -> None:
        if self.version >= 8:
            self._int32()  # topic_authorized_operations
        if self._flexible:
            self._skip_tagged_fields()

    def _finish(self) -> None:
        if 8 <= self.version <= 10:
            self.cluster_authorized_operations = self._int32()
        if self.version >= 13:
            self.error_code = self._int16()
        if self._flexible:
            self._skip_tagged_fields()
        if self._pos != self._end:
            raise self._fail(f"{self._end - self._pos} unexpected trailing bytes")
        self.done = True

    def decode_all(self) -> list[TopicPartitions]:
        """Every topic left, in one go (for small answers and tests)."""
        topics: list[TopicPartitions] = []
        while not self.done:
            topics.extend(self.step(1 << 30))
        return topics

    # --- primitives -------------------------------------------------------------------------

    def _fail(self, reason: str) -> ProtocolError:
        return ProtocolError(
            f"malformed Metadata response v{self.version} at byte {self._pos}: {reason}"
        )

    def _need(self, n: int) -> int:
        pos = self._pos
        if n < 0 or pos + n > self._end:
            raise self._fail(f"needs {n} more bytes, {self._end - pos} left")
        self._pos = pos + n
        return pos

    def _byte(self) -> int:
        return self._data[self._need(1)]

    def _int16(self) -> int:
        return int(_INT16.unpack_from(self._data, self._need(2))[0])

    def _int32(self) -> int:
        return int(_INT32.unpack_from(self._data, self._need(4))[0])

    def _raw(self, n: int) -> bytes:
        pos = self._need(n)
        return self._data[pos : pos + n]

    def _uvarint(self) -> int:
        data, pos, end = self._data, self._pos, self._end
        result = 0
        for i in range(5):
            if pos + i >= end:
                raise self._fail("varint runs past the end of the data")
            b = data[pos + i]
            result |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                self._pos = pos + i + 1
                if result > 0xFFFFFFFF:
                    raise self._fail("varint does not fit 32 bits")
                return result
        raise self._fail("varint longer than 5 bytes")

    def _length(self, nullable: bool, kind: str, string: bool) -> int | None:
        if self._flexible:
            n = self._uvarint() - 1
        elif string:
            n = self._int16()
        else:
            n = self._int32()
        if n < 0:
            if n != -1:
                raise self._fail(f"negative {kind} length {n}")
            if not nullable:
                raise self._fail(f"null {kind} in a non-nullable field")
            return None
        return n

    def _string(self, *, nullable: bool) -> str | None:
        n = self._length(nullable, "string", True)
        if n is None:
            return None
        pos = self._need(n)
        try:
            return str(self._data[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(f"string is not UTF-8 ({exc.reason})") from None

    def _array_length(self, *, min_item_size: int) -> int:
        n = self._length(False, "array", False)
        if n is None:  # pragma: no cover - _length raises for a null non-nullable array
            raise self._fail("null array")
        if n * min_item_size > self._end - self._pos:
            raise self._fail(f"array of {n} items cannot fit in {self._end - self._pos} bytes")
        return n

    def _broker(self) -> MetadataBroker:
        node_id = self._int32()
        host = self._string(nullable=False)
        port = self._int32()
        rack = self._string(nullable=True)
        if self._flexible:
            self._skip_tagged_fields()
        return MetadataBroker(node_id=node_id, host=host or "", port=port, rack=rack)

    def _skip_tagged_fields(self) -> None:
        count = self._uvarint()
        if count > (self._end - self._pos) // 2:
            raise self._fail(f"{count} tagged fields cannot fit in {self._end - self._pos} bytes")
        last = -1
        for _ in range(count):
            tag = self._uvarint()
            if tag <= last:
                raise self._fail(f"tagged field {tag} out of order or repeated after {last}")
            last = tag
            self._need(self._uvarint())
