"""Record batches, magic v2: their layout, and the builder the producer appends to.

Layout of a batch (all integers big-endian)::

    offset  size  field
         0     8  base offset            (0 from a producer; the broker assigns)
         8     4  length                 (bytes after this field)
        12     4  partition leader epoch (-1 from a producer)
        16     1  magic                  (2)
        17     4  CRC-32C                (of bytes 21 .. end)
        21     2  attributes             (bits 0-2 codec, 3 timestamp type, 4 transactional)
        23     4  last offset delta      (record count - 1)
        27     8  base timestamp         (the first record's)
        35     8  max timestamp
        43     8  producer id            (-1 unless idempotent)
        51     2  producer epoch
        53     4  base sequence
        57     4  record count
        61     .  records                (compressed as one stream when a codec is set)

and of one record: varint length, int8 attributes (0), varlong timestamp delta, varint
offset delta, varint key length + key (-1: null), varint value length + value (-1: null),
varint header count, then per header varint key length + UTF-8 key, varint value length +
value (-1: null).

The builder encodes each record straight into one growing ``bytearray`` and always knows its
size, so the accumulator can tell when a batch is full. Closing it yields a
:class:`ClosedBatch`: the final bytes with the header written. The producer fields (id, epoch,
base sequence) are stamped when a batch is sent, and again if an epoch bump renumbers it, so
stamping rewrites them and the CRC in place.

Reading a batch back (the tests, the simulator's broker) is
:mod:`aiokprod.protocol.record_reader`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from crc32c import crc32c

from aiokprod.protocol.primitives import (
    VARINT_CACHE_SIZE,
    encode_varint,
    encode_varlong,
    varint_cache,
)

MAGIC: Final = 2
BATCH_HEADER_SIZE: Final = 61
#: Upper bound of a record's framing bytes besides key, value and headers (Java's constant).
MAX_RECORD_OVERHEAD: Final = 21
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_PRODUCER_FIELDS: Final = struct.Struct(">qhi")
_UINT32: Final = struct.Struct(">I")
_CRC_START: Final = 21
_PRODUCER_OFFSET: Final = 43

_VARINT: Final = varint_cache()
_NULL: Final = encode_varint(-1)
_NO_HEADERS: Final = _VARINT[0]
_ZERO_BYTE: Final = b"\x00"
#: What :meth:`RecordBatchBuilder.append_values` returns when it has no value left over
#: (every value it took from the iterator was appended).
NO_LEFTOVER: Final[object] = object()

Header = tuple[str, bytes | None]
Compressor = Callable[[bytes | bytearray | memoryview], bytes]
Decompressor = Callable[[bytes | memoryview], bytes]


def _varint(n: int) -> bytes:
    return _VARINT[n] if 0 <= n < VARINT_CACHE_SIZE else encode_varint(n)


def encode_headers(headers: Sequence[Header]) -> bytes:
    """The header-count varint followed by every header, as one record carries them."""
    parts = [_varint(len(headers))]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        parts.append(_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(_varint(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


#: The most bytes a record's framing takes besides key, value and headers: length,
#: attributes, timestamp and offset deltas (``MAX_RECORD_OVERHEAD``) and the key and value
#: length varints. The header count (at least one byte) comes on top.
RECORD_FRAMING_BOUND: Final = MAX_RECORD_OVERHEAD + 10


def record_size_upper_bound(key_size: int, value_size: int, headers_size: int) -> int:
    """The most bytes a record with these parts can take (before compression).

    ``headers_size`` is the encoded headers' length (``encode_headers``), 0 when there are
    none (the header count itself is added here). Framing: length, attributes, timestamp
    and offset deltas (``MAX_RECORD_OVERHEAD``), two length varints, the header count.
    """
    return RECORD_FRAMING_BOUND + key_size + value_size + max(headers_size, 1)


class RecordBatchBuilder:
    """Builds one v2 record batch, record by record.

    Args:
        compression: the codec id written in the attributes (0: none).
        compressor: compresses the records section at close; required when compression != 0.
        transactional: sets the transactional attribute bit.
    """

    __slots__ = (
        "_buf",
        "_compression",
        "_compressor",
        "_transactional",
        "appended_bytes",
        "base_timestamp",
        "full",
        "max_timestamp",
        "record_count",
    )

    def __init__(
        self,
        *,
        compression: int = 0,
        compressor: Compressor | None = None,
        transactional: bool = False,
    ) -> None:
        if compression and compressor is None:
            raise ValueError("a compressed batch needs a compressor")
        self._buf = bytearray(BATCH_HEADER_SIZE)
        self._compression = compression
        self._compressor = compressor
        self._transactional = transactional
        self.record_count = 0
        #: Bytes the last successful :meth:`try_append` added.
        self.appended_bytes = 0
        self.base_timestamp = -1
        self.max_timestamp = -1
        #: Set once the batch reached ``size_limit`` or refused a record for it.
        self.full = False

    @property
    def size_in_bytes(self) -> int:
        """Header plus records appended so far (uncompressed)."""
        return len(self._buf)

    def try_append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: bytes | None = None,
        size_limit: int = 2**31 - 1,
    ) -> int:
        """Append one record unless it would push a non-empty batch past ``size_limit``.

        Args:
            timestamp_ms: the record's create time.
            key: the serialized key, or None.
            value: the serialized value, or None (a tombstone).
            headers: the output of :func:`encode_headers`, or None for no headers.
            size_limit: the batch's byte budget; the first record is always accepted so a
                record larger than the budget gets a batch of its own.

        Returns:
            The record's offset delta (its index in the batch), or -1 if it did not fit.
        """
        count = self.record_count
        ts_delta = timestamp_ms - self.base_timestamp if count else 0
        tsd = _VARINT[ts_delta] if 0 <= ts_delta < VARINT_CACHE_SIZE else encode_varlong(ts_delta)
        od = _VARINT[count] if count < VARINT_CACHE_SIZE else encode_varint(count)
        if key is None:
            kl = _NULL
            key = b""
        else:
            n = len(key)
            kl = _VARINT[n] if n < VARINT_CACHE_SIZE else encode_varint(n)
        if value is None:
            vl = _NULL
            value = b""
        else:
            n = len(value)
            vl = _VARINT[n] if n < VARINT_CACHE_SIZE else encode_varint(n)
        # The record after its length prefix, joined once: its length is the prefix (one
        # len() instead of one per part).
        record = b"".join(
            (_ZERO_BYTE, tsd, od, kl, key, vl, value, _NO_HEADERS if headers is None else headers)
        )
        body = len(record)
        prefix = _VARINT[body] if body < VARINT_CACHE_SIZE else encode_varint(body)
        added = len(prefix) + body
        buf = self._buf
        if count and len(buf) + added > size_limit:
            self.full = True
            return -1
        buf += prefix
        buf += record
        self.appended_bytes = added
        if len(buf) >= size_limit:
            self.full = True
        if count:
            if timestamp_ms > self.max_timestamp:
                self.max_timestamp = timestamp_ms
        else:
            self.base_timestamp = timestamp_ms
            self.max_timestamp = timestamp_ms
        self.record_count = count + 1
        return count

    def append_values(
        self,
        timestamp_ms: int,
        values: Iterator[object],
        size_limit: int,
        max_value_size: int,
        value_sizes: array[int],
    ) -> object:
        """Append unkeyed, header-less records from ``values`` until the batch is full.

        The bulk path's inner loop: one call per batch instead of one per record, with
        everything in local variables. Every record gets ``timestamp_ms``.

        Args:
            timestamp_ms: the create time of every record appended.
            values: an iterator of values; consumed up to the first one not appended.
            size_limit: the batch's byte budget (as for :meth:`try_append`).
            max_value_size: a larger value is not appended but handed back.
            value_sizes: receives each appended value's length (-1 for None).

        Returns:
            The value taken from ``values`` but not appended (it did not fit, is not
            ``bytes``/None, or is too large), or :data:`NO_LEFTOVER` when no value was
            handed back: ``values`` ran out, or the batch filled up exactly (``full`` is then
            set and the rest of ``values`` is untouched).
        """
        buf = self._buf
        count = self.record_count
        ts_delta = timestamp_ms - self.base_timestamp if count else 0
        tsd = _VARINT[ts_delta] if 0 <= ts_delta < VARINT_CACHE_SIZE else encode_varlong(ts_delta)
        # attributes + timestamp delta, and the null key + (later) header count: constant here
        head = _ZERO_BYTE + tsd
        fixed = len(head) + 2  # + null key length (1 byte) + header count (1 byte)
        cache = _VARINT
        cache_size = VARINT_CACHE_SIZE
        null = _NULL
        tail = _NO_HEADERS
        used = len(buf)
        record_sizes = value_sizes.append
        appended = 0
        leftover: object = NO_LEFTOVER
        for value in values:
            if value is None:
                n = -1
                vl = null
                value = b""
            elif type(value) is bytes:
                n = len(value)
                if n > max_value_size:
                    leftover = value
                    break
                vl = cache[n] if n < cache_size else encode_varint(n)
            else:
                leftover = value
                break
            od = cache[count] if count < cache_size else encode_varint(count)
            body = fixed + len(od) + len(vl) + (n if n > 0 else 0)
            prefix = cache[body] if body < cache_size else encode_varint(body)
            total = len(prefix) + body
            if count and used + total > size_limit:
                leftover = value if n >= 0 else None
                self.full = True
                break
            buf += b"".join((prefix, head, od, null, vl, value, tail))
            used += total
            record_sizes(n)
            count += 1
            appended += 1
            if used >= size_limit:
                self.full = True
                break
        if appended:
            if not self.record_count:
                self.base_timestamp = timestamp_ms
                self.max_timestamp = timestamp_ms
            elif timestamp_ms > self.max_timestamp:
                self.max_timestamp = timestamp_ms
            self.record_count = count
        return leftover

    def append_keyed(
        self,
        timestamp_ms: int,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        indexes: Iterator[int],
        size_limit: int,
        key_sizes: array[int],
        value_sizes: array[int],
        positions: array[int],
    ) -> int:
        """Append keyed, header-less records ``keys[i], values[i]`` for ``i`` in ``indexes``.

        ``key_sizes``, ``value_sizes`` and ``positions`` (the ``i``) receive one entry per
        record appended.

        The keyed bulk path's inner loop (see :meth:`append_values`); keys must be ``bytes``
        and values ``bytes`` or None, as the caller has checked.

        Returns:
            The index taken from ``indexes`` but not appended because it did not fit, or -1
            when none was handed back (``indexes`` ran out, or the batch filled up exactly).
        """
        buf = self._buf
        count = self.record_count
        ts_delta = timestamp_ms - self.base_timestamp if count else 0
        tsd = _VARINT[ts_delta] if 0 <= ts_delta < VARINT_CACHE_SIZE else encode_varlong(ts_delta)
        head = _ZERO_BYTE + tsd
        fixed = len(head) + 1  # + header count
        cache = _VARINT
        cache_size = VARINT_CACHE_SIZE
        null = _NULL
        tail = _NO_HEADERS
        empty = b""
        used = len(buf)
        start = count
        leftover = -1
        for i in indexes:
            key = keys[i]
            value = values[i]
            k = len(key)
            kl = cache[k] if k < cache_size else encode_varint(k)
            if value is None:
                n = -1
                vl = null
                value = empty
            else:
                n = len(value)
                vl = cache[n] if n < cache_size else encode_varint(n)
            od = cache[count] if count < cache_size else encode_varint(count)
            body = fixed + len(od) + len(kl) + k + len(vl) + (n if n > 0 else 0)
            prefix = cache[body] if body < cache_size else encode_varint(body)
            total = len(prefix) + body
            if count and used + total > size_limit:
                leftover = i
                self.full = True
                break
            buf += b"".join((prefix, head, od, kl, key, vl, value, tail))
            used += total
            key_sizes.append(k)
            value_sizes.append(n)
            positions.append(i)
            count += 1
            if used >= size_limit:
                self.full = True
                break
        if count > start:
            if not start:
                self.base_timestamp = timestamp_ms
                self.max_timestamp = timestamp_ms
            elif timestamp_ms > self.max_timestamp:
                self.max_timestamp = timestamp_ms
            self.record_count = count
        return leftover

    def append_encoded(
        self,
        timestamp_ms: int,
        records: bytes | bytearray | memoryview,
        count: int,
        expect_count: int,
        expect_size: int,
        size_limit: int,
        next_size: int,
        timestamp_delta: int = 0,
    ) -> bool:
        """Append ``count`` records encoded ahead for this batch (see :mod:`.encoded`).

        The records must be unkeyed or keyed, header-less or not, exactly as
        :meth:`try_append` would encode them here: offset deltas from ``expect_count`` on
        and timestamp ``timestamp_ms``, encoded as ``timestamp_delta`` from the batch's base
        timestamp. That holds only if the batch is in the state they were encoded for, so
        nothing is appended (False) unless it holds ``expect_count`` records in
        ``expect_size`` bytes, based at ``timestamp_ms - timestamp_delta``, is not full, and
        takes them within ``size_limit``.

        Args:
            timestamp_ms: the create time of every record (and the batch's base timestamp).
            records: the encoded records, back to back.
            count: how many records ``records`` holds (0: none, but ``next_size`` still
                tells whether the batch is full).
            expect_count: the records the batch must hold already.
            expect_size: the bytes the batch must hold already (its header included).
            size_limit: the batch's byte budget, as for :meth:`try_append`.
            next_size: what the record after these would take in this batch, -1 if none
                follows: the batch is full if it would not fit (or ``size_limit`` is
                reached), as :meth:`try_append` would find.
            timestamp_delta: the timestamp delta the records were encoded with (0 for a
                batch they begin or that began at ``timestamp_ms``).

        Returns:
            Whether the records were appended.
        """
        buf = self._buf
        used = len(buf) + len(records)
        if (
            count < 0
            or self.full
            or self.record_count != expect_count
            or len(buf) != expect_size
            or self.base_timestamp != timestamp_ms - timestamp_delta
            or used > size_limit
        ):
            return False
        buf += records
        self.record_count += count
        if count and timestamp_ms > self.max_timestamp:
            self.max_timestamp = timestamp_ms
        if used >= size_limit or (next_size >= 0 and used + next_size > size_limit):
            self.full = True
        return True

    def close(self) -> ClosedBatch:
        """Finish the batch: compress the records section and write the header.

        Raises:
            ValueError: the batch has no records (Kafka rejects empty batches).
        """
        count = self.record_count
        if not count:
            raise ValueError("cannot close an empty record batch")
        buf = self._buf
        if self._compression:
            compressor = self._compressor
            if compressor is None:  # pragma: no cover - checked in __init__
                raise ValueError("a compressed batch needs a compressor")
            compressed = compressor(memoryview(buf)[BATCH_HEADER_SIZE:])
            out = bytearray(BATCH_HEADER_SIZE)
            out += compressed
        else:
            out = buf
        attributes = self._compression | (TRANSACTIONAL_FLAG if self._transactional else 0)
        _HEADER.pack_into(
            out,
            0,
            0,  # base offset
            len(out) - 12,
            -1,  # partition leader epoch
            MAGIC,
            0,  # CRC, computed by stamp()
            attributes,
            count - 1,
            self.base_timestamp,
            self.max_timestamp,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            count,
        )
        batch = ClosedBatch(out, count, len(buf))
        batch.stamp(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
        return batch


class ClosedBatch:
    """A finished record batch: wire bytes whose producer fields can be re-stamped.

    Attributes:
        data: the whole batch as sent in a Produce request.
        record_count: records in the batch.
        uncompressed_size: the size before compression (equal to ``len(data)`` without it).
    """

    __slots__ = ("data", "record_count", "uncompressed_size")

    def __init__(self, data: bytearray, record_count: int, uncompressed_size: int) -> None:
        self.data = data
        self.record_count = record_count
        self.uncompressed_size = uncompressed_size

    @property
    def size_in_bytes(self) -> int:
        """Bytes on the wire."""
        return len(self.data)

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Write the idempotence fields and recompute the CRC-32C."""
        data = self.data
        _PRODUCER_FIELDS.pack_into(
            data, _PRODUCER_OFFSET, producer_id, producer_epoch, base_sequence
        )
        _UINT32.pack_into(data, 17, crc32c(memoryview(data)[_CRC_START:]))
