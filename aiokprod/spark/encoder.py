"""An Arrow binary column encoded as v2 records in bulk, straight from its buffers.

:class:`ArrowValues` is the Spark writer's value column for ``Producer.send_many`` (with
its keys, :class:`ArrowKeys`, when the rows are keyed): an
:class:`~aiokprod.protocol.encoded.EncodableValues`, so the producer's one append path
(:mod:`aiokprod.internals.appender`) opens each batch with the batch's first record the
one-record way and copies the rest of the batch from a plan this module computes with
numpy and ``pyarrow.compute``, without a Python object per record:

1. the value lengths come from the Arrow offsets buffer (-1 where the validity bitmap says
   null), the key lengths likewise;
2. each record's size is known up to the length of its offset delta's varint, so the
   batch boundaries follow from prefix sums of those sizes (:mod:`.planner`), by the rule
   :meth:`~aiokprod.protocol.records.RecordBatchBuilder.try_append` applies (a record
   fits if the batch stays within ``batch_size``; the first one always fits); a keyed
   column split by partition (:mod:`.keyed`) is one column whose batches end where the
   next partition's records begin;
3. with the offset deltas known, the framing of every record - length, attributes,
   timestamp delta 0, offset delta, key length (or a null key), value length - is taken
   from a table of varints and joined with the keys and values in one
   ``binary_join_element_wise``: its data buffer holds the planned batches' records back
   to back, byte for byte what the builder would write
   (``tests/unit/spark/test_encoder.py``, ``test_keyed.py``).

Plans cover :data:`WINDOW_RECORDS` records at most and end after a batch that filled up, so
that a batch opened somewhere else than planned (a partition's half-full batch) costs one
window's encoding (of that partition's records only, in a split keyed column), never the
rest of the column.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiokprod.protocol.encoded import EncodableKeys, EncodableValues, EncodedBatches
from aiokprod.protocol.primitives import encode_varlong
from aiokprod.spark.planner import Planner, varint_len

__all__ = ["WINDOW_RECORDS", "ArrowKeys", "ArrowValues", "lengths_of"]

#: The most records one plan encodes (a Spark batch's 10,000 rows in one plan).
WINDOW_RECORDS: Final = 16_384
#: Varints of 0 .. 16,383 (one or two bytes) as a binary array: the framing of values up to
#: 8,191 bytes and batches up to 8,192 records is taken from it (larger ones are encoded).
_TABLE_SIZE: Final = 1 << 14
#: Attributes (0) and timestamp delta (0); a null key (varint -1); no headers (count 0).
_ATTRIBUTES: Final = b"\x00"
_ATTRIBUTES_AND_TIMESTAMP: Final = b"\x00\x00"
_NULL_KEY: Final = b"\x01"
_NO_HEADERS: Final = b"\x00"

_table_cache: dict[bool, pa.Array] = {}


def _varints(zigzagged: Any, large: bool) -> pa.Array:
    """Each (non-negative) value as its varint, a binary array (large_binary if ``large``)."""
    z = np.asarray(zigzagged, dtype=np.uint64)
    lengths = varint_len(z)
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
            for unkeyed records; ``send_many(topic, column, keys=column.keys)`` sends them
            keyed.
        breaks: where the records of another partition begin (ascending indexes): no
            planned batch holds records on both sides of one (a column split by partition).
    """

    @staticmethod
    def takes(kind: pa.DataType) -> bool:
        """Whether an array of this type can be a column (binary or large_binary)."""
        return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))

    def __init__(
        self, array: pa.Array, keys: pa.Array | None = None, breaks: list[int] | None = None
    ) -> None:
        kind = array.type
        if not self.takes(kind):
            raise TypeError(f"ArrowValues takes binary or large_binary, got {kind}")
        self._array = array
        self._large = pa.types.is_large_binary(kind)
        self._n = len(array)
        self._starts, self._lengths, self._data = lengths_of(array)
        #: The values with nulls as empty bytes: the framing says which are null.
        self._filled = array.fill_null(b"") if array.null_count else array
        self._breaks = breaks or []
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
    ) -> tuple[array[int], EncodableValues, list[tuple[int, int, int]]] | None:
        """The rows split by the Java partition of their keys (:mod:`aiokprod.spark.keyed`)."""
        if not isinstance(self.keys, ArrowKeys):
            return None
        from aiokprod.spark.keyed import split_by_partition

        return split_by_partition(self._array, self.keys.array, num_partitions)

    def first_larger_than(self, size: int) -> int:
        """The first record whose key and value take more than ``size`` bytes, or -1."""
        sizes = np.maximum(self._lengths, 0)
        if isinstance(self.keys, ArrowKeys):
            sizes = sizes + self.keys.lengths
        larger = np.flatnonzero(sizes > size)
        return int(larger[0]) if larger.size else -1

    def encode_batches(
        self,
        start: int,
        size_limit: int,
        max_value_size: int,
        stop: int = -1,
        opens: dict[int, tuple[int, int, int]] | None = None,
    ) -> EncodedBatches:
        """Plan batches from record ``start`` (see the module docstring)."""
        end = self._n if stop < 0 else stop
        stop = min(end, start + WINDOW_RECORDS)
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
        base = 4 + varint_len(zigzag) + np.maximum(lengths, 0)
        if key_lengths is not None:
            key_lengths = key_lengths[: stop - start]
            key_zigzag = key_lengths * 2
            base += varint_len(key_zigzag) - 1 + key_lengths
        breaks = [b - start for b in self._breaks if start < b < stop]
        continuing: dict[int, tuple[int, int, int]] = {}  # relative index -> open batch
        stamps: dict[int, bytes] = {}  # relative index -> attributes and timestamp delta
        opened: dict[int, tuple[int, int, int]] = {}  # relative index -> opens' entry
        for index, (count, used, timestamp_delta) in (opens or {}).items():
            if start <= index < stop:
                stamp = _ATTRIBUTES + encode_varlong(timestamp_delta)
                continuing[index - start] = (count, used, len(stamp) - 2)
                stamps[index - start] = stamp
                opened[index - start] = (count, used, timestamp_delta)
        planner = Planner(base, size_limit, breaks, continuing)
        window_cut = stop < end and stop - start == WINDOW_RECORDS
        firsts, next_sizes = planner.plan(window_cut)
        m = firsts[-1]
        bounds = np.asarray(firsts, np.int64)
        counts = bounds[1:] - bounds[:-1]
        deltas = np.arange(m, dtype=np.int64) - np.repeat(bounds[:-1], counts)
        stamp_parts: list[bytes] = [_ATTRIBUTES_AND_TIMESTAMP]
        stamp_of: Any = None  # per record: which of stamp_parts (None: the first for all)
        for k in planner.continued:
            a, b = firsts[k], firsts[k + 1]
            count, _, extra = continuing[a]
            deltas[a:b] += count
            base[a:b] += extra
            if extra or stamps[a] != _ATTRIBUTES_AND_TIMESTAMP:
                if stamp_of is None:
                    stamp_of = np.zeros(m, np.int64)
                stamp_of[a:b] = len(stamp_parts)
                stamp_parts.append(stamps[a])
        delta_zigzag = deltas * 2
        body = base[:m] + varint_len(delta_zigzag)
        large = self._large
        kind = self._filled.type
        stamp_column: Any = pa.scalar(_ATTRIBUTES_AND_TIMESTAMP, kind)
        if stamp_of is not None:
            stamp_column = pa.array(stamp_parts, kind).take(pa.array(stamp_of))
        if key_lengths is None:
            key_parts: list[Any] = [pa.scalar(_NULL_KEY, kind)]
        else:
            key_parts = [
                _framing(key_zigzag[:m], large),
                self._key_array.slice(start, m),
            ]
        records = pc.binary_join_element_wise(
            _framing(body * 2, large),
            stamp_column,
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
        first_sizes = planner.sizes(1, firsts[:-1])
        for k in planner.continued:
            first_sizes[k] = 0  # every record of the batch is appended from the plan
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
            continued={k: opened[firsts[k]] for k in planner.continued},
        )
