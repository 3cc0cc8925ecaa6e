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

This module holds only the two shapes the append path talks to; it imports nothing beyond
the standard library.
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
    ``firsts[0]`` on.
    """

    __slots__ = (
        "_by_first",
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
    ) -> None:
        if not len(firsts) == len(positions) == len(first_sizes) + 1 == len(next_sizes) + 1:
            raise ValueError("planned batches: firsts/positions need one entry more than sizes")
        self.data = data
        self.firsts = firsts
        self.positions = positions
        self.first_sizes = first_sizes
        self.next_sizes = next_sizes
        self._value_sizes = value_sizes
        self._owner = owner  # keeps the buffer behind ``data`` alive
        self._by_first = {first: k for k, first in enumerate(firsts[:-1])}

    def batch_at(self, index: int) -> int:
        """The planned batch that starts at record ``index``, or -1."""
        return self._by_first.get(index, -1)

    def rest(self, k: int) -> memoryview:
        """Planned batch ``k`` without its first record: what a bulk append copies."""
        return self.data[self.positions[k] + self.first_sizes[k] : self.positions[k + 1]]

    def value_sizes(self, start: int, stop: int) -> array[int]:
        """The value sizes of records ``start`` to ``stop - 1``."""
        base = self.firsts[0]
        return self._value_sizes[start - base : stop - base]


class EncodableValues:
    """A column of record values (``bytes`` or None) that can plan fresh batches of them.

    Iterating gives the values as ``bytes``/None, so anything that takes an iterable of
    values (the per-record path) takes a column too; the bulk path asks :meth:`value` for
    each batch's first record and :meth:`encode_batches` for the rest.
    """

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

    def encode_batches(self, start: int, size_limit: int, max_value_size: int) -> EncodedBatches:
        """Plan fresh batches of up to ``size_limit`` bytes from record ``start`` on.

        Unkeyed records without headers, offset deltas from 0 in each batch, timestamp
        delta 0. The plan ends before any value larger than ``max_value_size`` (its record
        is the next batch's first, and the append path refuses it), and, unless it reaches
        the last record, after a batch that filled up.
        """
        raise NotImplementedError
