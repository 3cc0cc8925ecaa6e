"""An Arrow binary column encoded as v2 records in bulk, straight from its buffers.

:class:`ArrowValues` is the Spark writer's value column for ``Producer.send_many`` (with
its keys, :class:`ArrowKeys`, when the rows are keyed): an
:class:`~aiokprod.protocol.encoded.EncodableValues`, so the producer's one append path
(:mod:`aiokprod.internals.appender`) opens each batch with the batch's first record the
one-record way and copies the rest of the batch from a plan this module computes with
numpy and ``pyarrow.compute``, without a Python object per record:

1. the value lengths come from the Arrow offsets buffer (-1 where the validity bitmap says
   null), the key lengths likewise;
2. each record's size is known up to the length of its offset delta's varint (1 byte for
   deltas below 64, 2 below 8,192, ...), so the batch boundaries follow from prefix sums
   of those sizes, one bisection per batch, by the rule
   :meth:`~aiokprod.protocol.records.RecordBatchBuilder.try_append` applies (a record
   fits if the batch stays within ``batch_size``; the first one always fits);
3. with the offset deltas known, the framing of every record - length, attributes,
   timestamp delta 0, offset delta, key length (or a null key), value length - is taken
   from a table of varints and joined with the keys and values in one
   ``binary_join_element_wise``: its data buffer holds the planned batches' records back
   to back, byte for byte what the builder would write
   (``tests/unit/spark/test_encoder.py``, ``test_keyed.py``).

Plans cover :data:`WINDOW_RECORDS` records at most and end after a batch that filled up, so
that a batch opened somewhere else than planned (a partition's half-full batch) costs one
window's encoding, never the rest of the column.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiokprod.protocol.encoded import EncodableKeys, EncodableValues, EncodedBatches
from aiokprod.protocol.records import BATCH_HEADER_SIZE

__all__ = ["WINDOW_RECORDS", "ArrowKeys", "ArrowValues", "lengths_of"]

#: The most records one plan encodes.
WINDOW_RECORDS: Final = 8192
#: Varints of 0 .. 16,383 (one or two bytes) as a binary array: the framing of values up to
#: 8,191 bytes and batches up to 8,192 records is taken from it (larger ones are encoded).
_TABLE_SIZE: Final = 1 << 14
#: Offset delta d takes a varint of zigzag(d) = 2d: one byte below 64, two below 8,192, ...
_DELTA_CLASSES: Final = ((1, 64), (64, 1 << 13), (1 << 13, 1 << 20), (1 << 20, 1 << 27))
#: Attributes (0) and timestamp delta (0); a null key (varint -1); no headers (count 0).
#: The least a record takes besides its key and value: length, attributes, timestamp delta,
#: offset delta, key length, value length, header count (one byte each).
_MIN_FRAMING: Final = 7
_ATTRIBUTES_AND_TIMESTAMP: Final = b"\x00\x00"
_NULL_KEY: Final = b"\x01"
_NO_HEADERS: Final = b"\x00"

_table_cache: dict[bool, pa.Array] = {}


def _varint_len(zigzagged: Any) -> Any:
    """Bytes of the varint of each (non-negative) value."""
    z = np.asarray(zigzagged)
    return (
        1
        + (z >= 1 << 7).astype(np.int64)
        + (z >= 1 << 14)
        + (z >= 1 << 21)
        + (z >= 1 << 28)
        + (z >= 1 << 35)
    )


def _varints(zigzagged: Any, large: bool) -> pa.Array:
    """Each (non-negative) value as its varint, a binary array (large_binary if ``large``)."""
    z = np.asarray(zigzagged, dtype=np.uint64)
    lengths = _varint_len(z)
    width = int(lengths.max(initial=1))
    table = np.empty((len(z), width), np.uint8)
    for k in range(width):
        more = (lengths > k + 1).astype(np.uint64) << np.uint64(7)
        table[:, k] = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)) | more
    data = table[np.arange(width) < lengths[:, None]]
    offsets = np.zeros(len(z) + 1, np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    kind = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(kind, len(z), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _framing(values: Any, large: bool) -> pa.Array:
    """Varints of ``values``: from the table when all are small, else encoded."""
    if len(values) and int(values.max()) < _TABLE_SIZE:
        table = _table_cache.get(large)
        if table is None:
            table = _table_cache[large] = _varints(np.arange(_TABLE_SIZE), large)
        return table.take(pa.array(values, pa.int64()))
    return _varints(values, large)


def lengths_of(array: pa.Array) -> tuple[Any, Any, memoryview]:
    """Starts and lengths (-1: null) of a binary array's values, and its data buffer."""
    n = len(array)
    _, offsets_buffer, data_buffer = array.buffers()
    if n and offsets_buffer is not None:
        dtype = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        offsets = np.frombuffer(offsets_buffer, dtype)[array.offset : array.offset + n + 1]
    else:
        offsets = np.zeros(n + 1, np.int64)
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    if array.null_count:
        lengths[~array.is_valid().to_numpy(zero_copy_only=False)] = -1
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    return offsets[:-1], lengths, data


class ArrowKeys(EncodableKeys):
    """The keys of a keyed :class:`ArrowValues` column (``column.keys``)."""

    def __init__(self, array: pa.Array) -> None:
        if not ArrowValues.takes(array.type):
            raise TypeError(f"ArrowKeys takes binary or large_binary, got {array.type}")
        if array.null_count:
            raise ValueError("a null key: such records are not keyed (send them as a list)")
        self.array = array
        self.starts, self.lengths, self._data = lengths_of(array)

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.array.to_pylist())

    def key(self, index: int) -> bytes:
        """Key ``index`` as bytes (a copy out of the data buffer)."""
        start = int(self.starts[index])
        return bytes(self._data[start : start + int(self.lengths[index])])


class ArrowValues(EncodableValues):
    """A binary (or large_binary) Arrow array as the values of records.

    Args:
        array: the values; view ``string`` columns as ``binary`` first (no copy).
        keys: the records' keys, one per value (binary or large_binary, no nulls), or None
            for unkeyed records; ``send_many(topic, column, keys=column.keys,
            partition=p)`` sends them keyed.
    """

    @staticmethod
    def takes(kind: pa.DataType) -> bool:
        """Whether an array of this type can be a column (binary or large_binary)."""
        return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))

    def __init__(self, array: pa.Array, keys: pa.Array | None = None) -> None:
        kind = array.type
        if not self.takes(kind):
            raise TypeError(f"ArrowValues takes binary or large_binary, got {kind}")
        self._array = array
        self._large = pa.types.is_large_binary(kind)
        self._n = len(array)
        self._starts, self._lengths, self._data = lengths_of(array)
        #: The values with nulls as empty bytes: the framing says which are null.
        self._filled = array.fill_null(b"") if array.null_count else array
        self._record_sums: Any = None
        if keys is not None:
            if len(keys) != self._n:
                raise ValueError(f"{len(keys)} keys for {self._n} values")
            self.keys = ArrowKeys(keys)
            # one offset width for the join (keys as wide as the values)
            self._key_array = keys if keys.type == kind else keys.cast(kind)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[bytes | None]:
        return iter(self._array.to_pylist())

    def value(self, index: int) -> bytes | None:
        """Value ``index`` as bytes (a copy out of the data buffer), None if null."""
        size = int(self._lengths[index])
        if size < 0:
            return None
        start = int(self._starts[index])
        return bytes(self._data[start : start + size])

    def split_by_murmur2(
        self, num_partitions: int
    ) -> tuple[array[int], list[tuple[int, EncodableValues]]] | None:
        """The rows split by the Java partition of their keys (:mod:`aiokprod.spark.keyed`)."""
        if not isinstance(self.keys, ArrowKeys):
            return None
        from aiokprod.spark.keyed import split_by_partition

        order, columns = split_by_partition(self._array, self.keys.array, num_partitions)
        return order, list(columns)

    def _sums(self) -> tuple[Any, Any]:
        """Bytes of key and value of each record, and the prefix sums of the least it takes."""
        sums: tuple[Any, Any] | None = self._record_sums
        if sums is None:
            sizes = np.maximum(self._lengths, 0)
            if isinstance(self.keys, ArrowKeys):
                sizes = sizes + self.keys.lengths
            sums = self._record_sums = (sizes, np.cumsum(sizes + _MIN_FRAMING))
        return sums

    def first_larger_than(self, size: int) -> int:
        """The first record whose key and value take more than ``size`` bytes, or -1."""
        larger = np.flatnonzero(self._sums()[0] > size)
        return int(larger[0]) if larger.size else -1

    def records_from(
        self, index: int, room: int, max_value_size: int
    ) -> tuple[list[bytes], list[bytes | None]]:
        """See :meth:`EncodableValues.records_from` (a slice of each array, as lists)."""
        keys = self.keys
        if not isinstance(keys, ArrowKeys):
            raise ValueError("an unkeyed column")
        sizes, least = self._sums()
        before = int(least[index - 1]) if index else 0
        # the records whose least size, summed before them, is within the room
        stop = int(np.searchsorted(least, before + room, "right")) + 1
        stop = min(stop, self._n)
        too_large = np.flatnonzero(sizes[index:stop] > max_value_size)
        if too_large.size:
            stop = index + int(too_large[0])
        return (
            keys.array.slice(index, stop - index).to_pylist(),
            self._array.slice(index, stop - index).to_pylist(),
        )

    def encode_batches(self, start: int, size_limit: int, max_value_size: int) -> EncodedBatches:
        """Plan fresh batches from record ``start`` (see the module docstring)."""
        stop = min(self._n, start + WINDOW_RECORDS)
        lengths = self._lengths[start:stop]
        keys = self.keys
        key_lengths = keys.lengths[start:stop] if isinstance(keys, ArrowKeys) else None
        record_bytes = np.maximum(lengths, 0)
        if key_lengths is not None:
            record_bytes = record_bytes + key_lengths
        too_large = np.flatnonzero(record_bytes[1:] > max_value_size)
        if too_large.size:  # the plan ends before it; the append path refuses it
            stop = start + 1 + int(too_large[0])
            lengths = lengths[: stop - start]
        zigzag = np.where(lengths < 0, 1, lengths * 2)
        # attributes, timestamp delta (0), key (null: 1 byte), value length, value, headers
        base = 4 + _varint_len(zigzag) + np.maximum(lengths, 0)
        if key_lengths is not None:
            key_lengths = key_lengths[: stop - start]
            key_zigzag = key_lengths * 2
            base += _varint_len(key_zigzag) - 1 + key_lengths
        planner = _Planner(base, size_limit)
        window_cut = stop < self._n and stop - start == WINDOW_RECORDS
        firsts, next_sizes = planner.plan(window_cut)
        m = firsts[-1]
        bounds = np.asarray(firsts, np.int64)
        counts = bounds[1:] - bounds[:-1]
        deltas = np.arange(m, dtype=np.int64) - np.repeat(bounds[:-1], counts)
        delta_zigzag = deltas * 2
        body = base[:m] + _varint_len(delta_zigzag)
        large = self._large
        kind = self._filled.type
        if key_lengths is None:
            key_parts: list[Any] = [pa.scalar(_NULL_KEY, kind)]
        else:
            key_parts = [
                _framing(key_zigzag[:m], large),
                self._key_array.slice(start, m),
            ]
        records = pc.binary_join_element_wise(
            _framing(body * 2, large),
            pa.scalar(_ATTRIBUTES_AND_TIMESTAMP, kind),
            _framing(delta_zigzag, large),
            *key_parts,
            _framing(zigzag[:m], large),
            self._filled.slice(start, m),
            pa.scalar(_NO_HEADERS, kind),
            pa.scalar(b"", kind),
        )
        _, offsets_buffer, data_buffer = records.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int64 if large else np.int32)
        positions = offsets[records.offset : records.offset + m + 1][firsts].tolist()
        first_sizes = [planner.size(1, f) for f in firsts[:-1]]
        return EncodedBatches(
            memoryview(data_buffer),
            [start + f for f in firsts],
            positions,
            first_sizes,
            next_sizes,
            array("i", lengths[:m].astype(np.int32).tobytes()),
            owner=records,
            key_sizes=None
            if key_lengths is None
            else array("i", key_lengths[:m].astype(np.int32).tobytes()),
        )


class _Planner:
    """Batch boundaries of records whose sizes depend on their offset delta's class."""

    def __init__(self, base: Any, size_limit: int) -> None:
        self._base = base
        self._limit = size_limit
        self._m = len(base)
        #: Per delta class (the offset delta varint's length): prefix sums of record sizes.
        self._sums: dict[int, list[int]] = {}

    def sums(self, width: int) -> list[int]:
        """Prefix sums of the record sizes when the offset delta takes ``width`` bytes."""
        sums = self._sums.get(width)
        if sums is None:
            body = self._base + width
            sizes = _varint_len(body * 2) + body
            sums = self._sums[width] = [0, *np.cumsum(sizes).tolist()]
        return sums

    def size(self, width: int, index: int) -> int:
        sums = self.sums(width)
        return sums[index + 1] - sums[index]

    def plan(self, window_cut: bool) -> tuple[list[int], list[int]]:
        """``firsts`` (with the end as the last entry) and each batch's ``next_size``."""
        m = self._m
        limit = self._limit
        firsts: list[int] = []
        next_sizes: list[int] = []
        s = 0
        while s < m:
            used = BATCH_HEADER_SIZE + self.size(1, s)  # the first record always fits
            end = s + 1
            if used < limit:
                for width, (low, high) in enumerate(_DELTA_CLASSES, start=1):
                    lo = s + low
                    if end != lo or lo >= m:
                        break
                    hi = min(s + high, m)
                    sums = self.sums(width)
                    # the most records from lo on that keep the batch within the limit
                    end = bisect_right(sums, limit - used + sums[lo], lo, hi + 1) - 1
                    used += sums[end] - sums[lo]
                    if end < hi:
                        break
            if end < m:
                delta = end - s
                width = next(w for w, (_, high) in enumerate(_DELTA_CLASSES, 1) if delta < high)
                next_sizes.append(self.size(width, end))
            else:
                next_sizes.append(-1)
            firsts.append(s)
            s = end
        if window_cut and len(firsts) > 1 and next_sizes[-1] < 0:
            # The window cut the last batch short: the next plan starts at its first record.
            s = firsts.pop()
            next_sizes.pop()
        firsts.append(s)
        return firsts, next_sizes
