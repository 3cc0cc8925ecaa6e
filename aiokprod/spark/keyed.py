"""Keyed rows of an Arrow batch: hashed, split by partition and encoded per column.

The producer hashes one key at a time (:func:`aiokprod.internals.partitioner.murmur2`, a
Python loop over the key's bytes, with a cache of recent keys). A Spark batch holds
thousands of keys in one Arrow buffer, so the writer does the Java client's partitioning
for the whole column at once, with numpy:

1. :func:`murmur2` hashes every key straight from the Arrow offsets and data buffers: the
   same 32-bit MurmurHash2 (seed ``0x9747b28c``) as the Java client's ``Utils.murmur2``,
   step by step over all keys at once (numpy's ``uint32`` arithmetic wraps like Java's
   ``int``), bit for bit what the per-record function returns
   (``tests/unit/spark/test_keyed.py``);
2. :func:`partitions` is ``toPositive(murmur2(key)) % partitions``, the Java client's
   ``BuiltInPartitioner.partitionForKey``;
3. :func:`split_by_partition` orders the rows by partition (a stable sort: each
   partition's rows keep their order, as every Kafka client keeps them) with one ``take``
   of the key and value columns: one keyed :class:`~aiokprod.spark.encoder.ArrowValues`
   column whose planned batches end where a partition's rows end, which the producer's
   append path encodes straight from the buffers, a batch of each partition in turn.

The producer asks for the split (:meth:`ArrowValues.split_by_murmur2
<aiokprod.spark.encoder.ArrowValues.split_by_murmur2>`) only when its partitioner hashes
keys with murmur2 (the built-in one, keys not ignored); otherwise it takes the keys one by
one and its partitioner decides.
"""

from __future__ import annotations

from array import array
from typing import Any, Final

import numpy as np
import pyarrow as pa

from aiokprod.spark.encoder import ArrowValues, lengths_of

__all__ = ["murmur2", "partitions", "split_by_partition"]

_M: Final = np.uint32(0x5BD1E995)
_SEED: Final = np.uint32(0x9747B28C)


def murmur2(keys: pa.Array) -> Any:
    """Kafka's murmur2 of every value of a binary array (no nulls), as numpy ``int32``.

    Bit for bit :func:`aiokprod.internals.partitioner.murmur2` (the Java client's
    ``Utils.murmur2``) of each value.
    """
    starts, lengths, data = lengths_of(keys)
    if (lengths < 0).any():
        raise ValueError("murmur2 of a null key")
    buf = np.frombuffer(data, np.uint8)
    h = _SEED ^ lengths.astype(np.uint32)
    blocks = lengths >> 2
    most = int(blocks.max(initial=0))
    if most:
        # The data as little-endian uint32 words starting at every byte (a view, no copy);
        # a key's block j is the word at its start + 4j.
        words = np.ndarray((len(buf) - 3,), "<u4", buf, 0, (1,))
        last = len(words) - 1
        for j in range(most):
            has = blocks > j
            every = bool(has.all())
            at = starts + 4 * j
            k = words[at if every else np.minimum(at, last)].astype(np.uint32)
            k *= _M
            k ^= k >> np.uint32(24)
            k *= _M
            mixed = (h * _M) ^ k
            h = mixed if every else np.where(has, mixed, h)
    tail = lengths & 3
    if tail.any():
        at = starts + 4 * blocks
        top = len(buf) - 1
        for shift in (2, 1, 0):
            has = tail > shift
            byte = buf[np.minimum(at + shift, top)].astype(np.uint32)
            h ^= np.where(has, byte << np.uint32(8 * shift), np.uint32(0))
        h = np.where(tail > 0, h * _M, h)
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h.astype(np.uint32).view(np.int32)


def partitions(keys: pa.Array, num_partitions: int) -> Any:
    """Each key's partition as the Java client picks it: ``toPositive(murmur2) % n``."""
    hashes = murmur2(keys).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return (hashes % np.uint32(num_partitions)).astype(np.int64)


def split_by_partition(
    values: pa.Array, keys: pa.Array, num_partitions: int
) -> tuple[array[int], ArrowValues, list[tuple[int, int, int]]]:
    """The rows ordered by partition: their input positions, the column, the partitions.

    ``values`` and ``keys`` are binary (or large_binary) arrays of the same length, the
    keys without nulls. The rows of each partition keep their order; the column holds the
    rows of one partition after another, ``(partition, start, stop)`` for each partition
    that has rows (ascending), and breaks its planned batches there.
    """
    of_row = partitions(keys, num_partitions)
    counts = np.bincount(of_row, minlength=num_partitions)
    present = np.flatnonzero(counts).tolist()
    if len(present) == 1:
        n = len(keys)
        return array("i", range(n)), ArrowValues(values, keys), [(present[0], 0, n)]
    # A stable sort on small ints (numpy's radix sort for 16-bit ones)
    small = of_row.astype(np.int16) if num_partitions <= 1 << 15 else of_row
    order = np.argsort(small, kind="stable")
    indices = pa.array(order)
    runs: list[tuple[int, int, int]] = []
    at = 0
    for p in present:
        count = int(counts[p])
        runs.append((p, at, at + count))
        at += count
    column = ArrowValues(values.take(indices), keys.take(indices), [s for _, s, _ in runs[1:]])
    return array("i", order.astype(np.int32).tobytes()), column, runs
