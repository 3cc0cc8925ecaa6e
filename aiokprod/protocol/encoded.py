"""Values that encode themselves as v2 records in bulk, and the batches they planned.

The bulk path normally takes values one by one as ``bytes``
(:meth:`~aiokprod.protocol.records.RecordBatchBuilder.append_values`). A column that holds
many values in one buffer (an Arrow array: :mod:`aiokprod.spark.encoder`) can do better:
it encodes a run of its records at once, laid out as the records of consecutive *fresh*
batches (each starting at offset delta 0 with the call's timestamp), and the producer's
append path copies each planned batch into the batch it actually opened, after checking
that the batch is in the state the plan assumed
(:meth:`~aiokprod.protocol.records.RecordBatchBuilder.append_encoded`). Everything else -
the partition choice, ``buffer_memory``, the size limits, the sticky accounting, the
wakeups - stays with the append path (:mod:`aiokprod.internals.appender`), which opens
every batch with the run's first record the one-record way.

A column may also carry keys (:class:`EncodableKeys`, ``send_many(..., keys=column.keys)``):
its records are then keyed, and the append path takes it in bulk when the call names the
partition, or when the partitioner hashes keys with murmur2 and the column splits itself
by the murmur2 partition of its keys (:meth:`EncodableValues.split_by_murmur2`: the Spark
writer's columns hash their keys in bulk, :mod:`aiokprod.spark.keyed`); otherwise the keys
and values are taken one by one.

This module holds only the shapes the append path talks to; it imports nothing beyond the
standard library.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class EncodedBatches:
    """Records ``firsts[0]`` to ``firsts[-1]`` of a column, encoded as fresh batches.

    Planned batch ``k`` holds records ``firsts[k]`` to ``firsts[k + 1] - 1``; its bytes (the
    records section, no batch header) are ``data[positions[k]:positions[k + 1]]``, the
    first record taking ``first_sizes[k]`` of them. ``next_sizes[k]`` is the size the record
    after the batch would take in it (it did not fit), -1 when the plan ends there without
    the batch being full. ``value_sizes`` holds each record's value size (-1: null), from
    ``firsts[0]`` on, and ``key_sizes`` each key's size when the records are keyed.

    The batches in ``continued`` (``k -> (records, bytes, timestamp_delta)``) are not
    fresh: they continue a batch that was open when the plan was made
    (``encode_batches``'s ``opens``), their first record included (``first_sizes[k]`` is
    0), and may hold no record at all (the next did not fit).
    """

    __slots__ = (
        "_by_first",
        "_continued",
        "_continued_at",
        "_key_sizes",
        "_owner",
        "_value_sizes",
        "data",
        "first_sizes",
        "firsts",
        "next_sizes",
        "positions",
    )

    def __init__(
        self,
        data: memoryview,
        firsts: list[int],
        positions: list[int],
        first_sizes: list[int],
        next_sizes: list[int],
        value_sizes: array[int],
        owner: object = None,
        key_sizes: array[int] | None = None,
        continued: dict[int, tuple[int, int, int]] | None = None,
    ) -> None:
        if not len(firsts) == len(positions) == len(first_sizes) + 1 == len(next_sizes) + 1:
            raise ValueError("planned batches: firsts/positions need one entry more than sizes")
        self.data = data
        self.firsts = firsts
        self.positions = positions
        self.first_sizes = first_sizes
        self.next_sizes = next_sizes
        self._value_sizes = value_sizes
        self._key_sizes = key_sizes
        self._owner = owner  # keeps the buffer behind ``data`` alive
        self._continued = continued = continued or {}
        self._continued_at = {firsts[k]: k for k in continued}
        self._by_first = {first: k for k, first in enumerate(firsts[:-1]) if k not in continued}

    def batch_at(self, index: int) -> int:
        """The planned fresh batch that starts at record ``index``, or -1."""
        return self._by_first.get(index, -1)

    def continuation_at(self, index: int) -> int:
        """The planned batch that continues an open batch from record ``index``, or -1."""
        return self._continued_at.get(index, -1)

    def opened(self, k: int) -> tuple[int, int, int] | None:
        """The open batch planned batch ``k`` continues (records, bytes, timestamp delta)."""
        return self._continued.get(k)

    def rest(self, k: int) -> memoryview:
        """Planned batch ``k`` without its first record: what a bulk append copies."""
        return self.data[self.positions[k] + self.first_sizes[k] : self.positions[k + 1]]

    def value_sizes(self, start: int, stop: int) -> array[int]:
        """The value sizes of records ``start`` to ``stop - 1``."""
        base = self.firsts[0]
        return self._value_sizes[start - base : stop - base]

    def key_sizes(self, start: int, stop: int) -> array[int]:
        """The key sizes of records ``start`` to ``stop - 1`` (keyed records only)."""
        if self._key_sizes is None:
            raise ValueError("the planned records are not keyed")
        base = self.firsts[0]
        return self._key_sizes[start - base : stop - base]


class EncodableKeys:
    """The keys of an :class:`EncodableValues` column whose records are keyed.

    Never None (a null key is not hashed like the others: such a column is not keyed).
    Iterating gives the keys as ``bytes``, so the per-record path takes them like a list.
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[bytes]:
        raise NotImplementedError

    def key(self, index: int) -> bytes:
        """Key ``index`` as bytes."""
        raise NotImplementedError


class EncodableValues:
    """A column of record values (``bytes`` or None) that can plan fresh batches of them.

    Iterating gives the values as ``bytes``/None, so anything that takes an iterable of
    values (the per-record path) takes a column too; the bulk path asks :meth:`value` for
    each batch's first record and :meth:`encode_batches` for the rest.

    A keyed column has :attr:`keys`, one per value, which its plans encode with the values
    (``send_many(topic, column, keys=column.keys)``); :meth:`split_by_murmur2` orders it
    by partition.
    """

    #: The keys of the column's records (None: unkeyed records).
    keys: EncodableKeys | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[bytes | None]:
        raise NotImplementedError

    def value(self, index: int) -> bytes | None:
        """Value ``index`` as bytes (None: a null value)."""
        raise NotImplementedError

    def values_from(self, index: int) -> Iterator[bytes | None]:
        """The values from ``index`` on."""
        return (self.value(i) for i in range(index, len(self)))

    def split_by_murmur2(
        self, num_partitions: int
    ) -> tuple[array[int], EncodableValues, list[tuple[int, int, int]]] | None:
        """A keyed column ordered by the partition the Java client gives each key.

        That is ``toPositive(murmur2(key)) % num_partitions``, bit for bit
        (:func:`aiokprod.internals.partitioner.murmur2`), computed in bulk. Returns the input
        position of each record in the new order; a keyed column of the records in that
        order, whose plans never put records of two partitions in one batch; and
        ``(partition, start, stop)`` for each partition that has records (ascending), its
        records in input order. None when the column cannot (the keys are then hashed one
        by one).
        """
        return None

    def first_larger_than(self, size: int) -> int:
        """The first record whose key and value take more than ``size`` bytes, or -1."""
        keys = self.keys
        for i in range(len(self)):
            value = self.value(i)
            total = (0 if keys is None else len(keys.key(i))) + (0 if value is None else len(value))
            if total > size:
                return i
        return -1

    def encode_batches(
        self,
        start: int,
        size_limit: int,
        max_value_size: int,
        stop: int = -1,
        opens: dict[int, tuple[int, int, int]] | None = None,
    ) -> EncodedBatches:
        """Plan batches of up to ``size_limit`` bytes from record ``start`` on.

        Records without headers (keyed when the column has :attr:`keys`), up to record
        ``stop`` (-1: the last), in fresh batches: offset deltas from 0, timestamp delta 0.
        Except that the records from an index of ``opens`` (``start``, or where a
        partition's records begin) continue an open batch, ``(records, bytes,
        timestamp_delta)``: their offset deltas go on from ``records``, their timestamp
        delta is the one given, and they fill what ``bytes`` left of ``size_limit``.
        The plan ends before any record whose value (and key) take more than
        ``max_value_size`` bytes (its record is the next batch's first, and the append
        path refuses it), and, unless it reaches ``stop``, after a batch that filled up.
        """
        raise NotImplementedError
