"""BulkDelivery: the result of ``Producer.send_many()``, one object for many records.

The bulk path exists to take per-record Python objects off the hot path: instead of one
:class:`~aiokprod.internals.batch.DeliveryFuture` per record it keeps one *segment* per batch
the records went into (the batch's shared result, the partition, the first index, the count)
and the serialized sizes in compact arrays. Record metadata is built only when asked for.
"""

from __future__ import annotations

from array import array
from collections.abc import Generator, Iterable
from typing import Any, Final

from aiokprod.errors import InvalidArgumentError
from aiokprod.internals.batch import SPLIT_OFFSET, BatchResult
from aiokprod.protocol.encoded import EncodableKeys, EncodableValues
from aiokprod.types import UNKNOWN_OFFSET, RecordMetadata, TopicPartition

#: The key size of an unkeyed record (-1), repeated by ``*`` for a run of them.
_NO_KEY: Final = array("i", (-1,))


def bulk_columns(
    keys: Iterable[Any] | None, values: Iterable[Any]
) -> tuple[list[Any] | EncodableKeys | None, Iterable[Any]]:
    """Check ``send_many``'s columns; keyed ones become lists of the same length.

    A keyed column (``values`` an :class:`EncodableValues` and ``keys`` its own
    :attr:`~EncodableValues.keys`) stays as it is.
    """
    for name, column in (("values", values), ("keys", keys)):
        if column is None and name == "keys":
            continue
        if isinstance(column, str | bytes | bytearray) or not isinstance(column, Iterable):
            raise InvalidArgumentError(
                f"{name} must be an iterable of record {name}, got {type(column).__name__}"
            )
    if keys is None:
        return None, values
    if isinstance(values, EncodableValues) and keys is values.keys:
        return values.keys, values
    key_list, value_list = list(keys), list(values)
    if len(key_list) != len(value_list):
        raise InvalidArgumentError(
            f"send_many: {len(key_list)} keys for {len(value_list)} values (nothing queued)"
        )
    return key_list, value_list


def pairs(keys: Iterable[Any] | None, values: Iterable[Any]) -> Iterable[tuple[Any, Any]]:
    """``(key, value)`` pairs of ``send_many``'s columns (None keys when unkeyed)."""
    if keys is None:
        return ((None, value) for value in values)
    return zip(keys, values, strict=True)


class _Segment:
    __slots__ = ("count", "result", "start", "tp")

    def __init__(self, result: BatchResult, tp: TopicPartition, start: int) -> None:
        self.result = result
        self.tp = tp
        self.start = start
        self.count = 0


class BulkDelivery:
    """What became of the records of one ``send_many()`` call, in the order they were given.

    ``await bulk`` waits for every record and returns their :class:`RecordMetadata` in order;
    it raises the first error if any record failed (the others are still delivered, as with
    ``asyncio.gather``). :meth:`wait` waits without raising; :meth:`exception` and
    :meth:`errors` report failures; :meth:`metadata` builds the metadata list.
    """

    __slots__ = ("_key_sizes", "_order", "_segments", "_timestamps", "_value_sizes")

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._key_sizes = array("i")
        self._value_sizes = array("i")
        self._timestamps = array("q")
        #: When records were appended out of input order (keyed, grouped by partition):
        #: the input position of each record, in append order.
        self._order: array[int] | None = None

    def _add(
        self,
        result: BatchResult,
        tp: TopicPartition,
        index: int,
        key_size: int,
        value_size: int,
        timestamp_ms: int,
    ) -> None:
        segments = self._segments
        last = segments[-1] if segments else None
        if last is None or last.result is not result or last.start + last.count != index:
            last = _Segment(result, tp, index)
            segments.append(last)
        last.count += 1
        self._key_sizes.append(key_size)
        self._value_sizes.append(value_size)
        self._timestamps.append(timestamp_ms)

    def _add_run(
        self, result: BatchResult, tp: TopicPartition, start: int, count: int, timestamp_ms: int
    ) -> None:
        """``count`` records appended from index ``start`` of one batch (sizes already in)."""
        segments = self._segments
        last = segments[-1] if segments else None
        if last is None or last.result is not result or last.start + last.count != start:
            last = _Segment(result, tp, start)
            segments.append(last)
        last.count += count
        self._timestamps += array("q", (timestamp_ms,)) * count

    def _extend_last(self, count: int, timestamp_ms: int, keyed: bool = False) -> None:
        """``count`` more records right after the last one added, in its batch.

        Their value sizes were appended to ``_value_sizes`` already, and when ``keyed`` their
        key sizes to ``_key_sizes``; otherwise they are unkeyed.
        """
        self._segments[-1].count += count
        if not keyed:
            # array * count repeats in C: extend(repeat(...)) converted each of them (~45 ns)
            self._key_sizes += _NO_KEY * count
        self._timestamps += array("q", (timestamp_ms,)) * count

    def __len__(self) -> int:
        return len(self._value_sizes)

    def done(self) -> bool:
        """Whether every record was acknowledged or failed."""
        return all(s.result.done for s in self._segments)

    async def wait(self) -> None:
        """Wait until every record was acknowledged or failed (never raises their errors)."""
        for segment in self._segments:
            await segment.result.wait()

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        yield from self.wait().__await__()
        error = self.exception()
        if error is not None:
            raise error
        return self.metadata()

    def exception(self) -> BaseException | None:
        """The first error among the records, or None if all were acknowledged.

        Raises:
            asyncio.InvalidStateError: some record is not done yet.
        """
        if self._order is not None:
            errors = self.errors()
            return errors[0][1] if errors else None
        for _, error in self._iter_errors(first_only=True):
            return error
        return None

    def errors(self) -> list[tuple[int, BaseException]]:
        """``(position, error)`` for every failed record, ``position`` counting from 0."""
        found = list(self._iter_errors(first_only=False))
        order = self._order
        if order is None:
            return found
        return sorted((order[i], error) for i, error in found)

    def _iter_errors(self, first_only: bool) -> Generator[tuple[int, BaseException], None, None]:
        import asyncio

        position = 0
        for segment in self._segments:
            result = segment.result
            if not result.done:
                raise asyncio.InvalidStateError("some records are not acknowledged yet")
            if result.error is not None or result.record_errors:
                for i in range(segment.count):
                    error = result.error
                    if result.record_errors:
                        error = result.record_errors.get(segment.start + i, error)
                    if error is not None:
                        yield position + i, error
                        if first_only:
                            return
            position += segment.count

    def metadata(self) -> list[RecordMetadata]:
        """Every record's metadata, in order (failed records raise their error).

        Raises:
            asyncio.InvalidStateError: some record is not done yet.
            KafkaError: the first failed record's error.
        """
        error = self.exception()
        if error is not None:
            raise error
        out: list[RecordMetadata] = []
        position = 0
        for segment in self._segments:
            result = segment.result
            base = result.base_offset
            append_time = result.log_append_time_ms
            topic, partition = segment.tp
            split = base == SPLIT_OFFSET  # the batch was split: each record's piece knows
            for i in range(segment.count):
                j = position + i
                if split:
                    offset, append_time = result.position(segment.start + i)
                else:
                    offset = base + segment.start + i if base >= 0 else UNKNOWN_OFFSET
                timestamp = append_time if append_time >= 0 else self._timestamps[j]
                out.append(
                    RecordMetadata(
                        topic,
                        partition,
                        offset,
                        timestamp,
                        self._key_sizes[j],
                        self._value_sizes[j],
                    )
                )
            position += segment.count
        order = self._order
        if order is None:
            return out
        in_input_order: list[RecordMetadata] = [out[0]] * len(out)
        for appended, original in enumerate(order):
            in_input_order[original] = out[appended]
        return in_input_order
