"""One task's rows into its producer: Arrow record batches through ``send_many``.

- binary and string columns are read straight from the Arrow arrays (``string`` is viewed
  as ``binary``, no decoding) and handed to :meth:`Producer.send_many` — one call per
  (topic, partition) group of a batch, no ``Row`` and no future per record; unkeyed values
  as an :class:`~aiokprod.spark.encoder.ArrowValues` column, which the producer's append
  path encodes batch by batch straight from the Arrow buffers; keyed ones as a keyed
  column, which the producer splits by partition (hashed per column with numpy,
  :mod:`aiokprod.spark.keyed`, as the Java client would) and encodes the same way (with
  a null key: one ``to_pylist()`` per column, hashed per key);
- rows with headers (``send_many`` takes one header set per call) go through
  :meth:`Producer.send` one by one, counted by delivery callbacks;
- the first failure stops the partition: the rows after it are *not sent*.

What became of the rows is counted in a :class:`~aiokprod.spark.results.Tally`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiokprod.errors import InvalidArgumentError
from aiokprod.spark.results import Tally

if TYPE_CHECKING:
    import pyarrow as pa

    from aiokprod.producer import Producer

__all__ = ["close_producer", "flush_producer", "send_all", "send_batch"]


async def send_all(
    producer: Producer,
    fixed_topic: str | None,
    batches: AsyncIterator[pa.RecordBatch],
    tally: Tally,
) -> None:
    """Send the rows of every batch; after the first failure, count the rest as not sent."""
    async for batch in batches:
        rows = batch.num_rows
        tally.rows += rows
        if tally.stopped:  # stop at the first failure, as Spark's sink does
            tally.not_sent += rows
            continue
        if rows:
            await send_batch(producer, fixed_topic, batch, tally)
            tally.collect()


async def close_producer(producer: Producer, tally: Tally, timeout: float | None) -> None:
    """Close (delivering or failing what was accepted); a failure to close is counted."""
    try:
        await producer.close(timeout)
    except Exception as exc:
        tally.fail(0, exc)


async def flush_producer(producer: Producer, tally: Tally, timeout: float | None) -> None:
    """Wait until everything sent is acknowledged or failed; not in time is counted."""
    try:
        await producer.flush(timeout)
    except Exception as exc:
        tally.fail(0, exc)


async def send_batch(
    producer: Producer, fixed_topic: str | None, batch: pa.RecordBatch, tally: Tally
) -> None:
    """The rows of one Arrow batch: ``send_many`` per (topic, partition) group of rows.

    ``fixed_topic`` is the sink's ``topic`` option: it wins over a ``topic`` column.
    """
    import pyarrow.compute as pc

    at = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    values = _binary(batch.column(at["value"]))
    keys = _binary(batch.column(at["key"])) if "key" in at else None
    topics = None if fixed_topic is not None or "topic" not in at else batch.column(at["topic"])
    partitions = batch.column(at["partition"]) if "partition" in at else None
    headers = batch.column(at["headers"]) if "headers" in at else None
    rows = batch.num_rows
    if topics is not None and topics.null_count:
        error = InvalidArgumentError("the topic column is null in a row and no topic is set")
        tally.fail(rows, error)
        return
    if (
        headers is not None
        and headers.null_count < rows
        and pc.max(pc.list_value_length(headers)).as_py()
    ):
        await _send_rows(producer, fixed_topic, values, keys, topics, partitions, headers, tally)
        return
    if partitions is not None and partitions.null_count == rows:
        partitions = None
    if partitions is None and (topics is None or len(pc.unique(topics)) == 1):
        topic: Any = fixed_topic if topics is None else topics[0].as_py()
        groups: list[tuple[str, int | None, Any]] = [(topic, None, None)]
    else:
        groups = _groups(fixed_topic, topics, partitions, rows)
    for topic, partition, indices in groups:
        part_values = values if indices is None else values.take(indices)
        part_keys = keys if keys is None or indices is None else keys.take(indices)
        count = len(part_values)
        try:
            column, column_keys = _columns(part_values, part_keys)
            bulk = await producer.send_many(topic, column, keys=column_keys, partition=partition)
        except Exception as exc:  # nothing of this call is accounted for: failed
            tally.fail(count, exc)
            tally.not_sent += rows - count - tally.accounted_in_batch
            tally.accounted_in_batch = 0
            return
        tally.accounted_in_batch += count
        tally.pending.append(bulk)
    tally.accounted_in_batch = 0


def _columns(values: Any, keys: Any) -> tuple[Any, Any]:
    """``send_many``'s values and keys for binary Arrow arrays (keys: None if unkeyed).

    An :class:`~aiokprod.spark.encoder.ArrowValues` column, keyed or not, which the
    producer encodes straight from the Arrow buffers (and splits by the murmur2 partition
    of its keys); lists where that cannot be (``binary_view``, a null key).
    """
    from aiokprod.spark.encoder import ArrowValues

    if ArrowValues.takes(values.type):
        if keys is None:
            return ArrowValues(values), None
        if ArrowValues.takes(keys.type) and not keys.null_count:
            column = ArrowValues(values, keys)
            return column, column.keys
    return values.to_pylist(), None if keys is None else keys.to_pylist()


def _binary(array: Any) -> Any:
    """A string or binary Arrow array as binary (a view: no copy, no UTF-8 decoding)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_string(kind):
        return array.view(pa.binary())
    if pa.types.is_large_string(kind):
        return array.view(pa.large_binary())
    return array


def _groups(
    fixed_topic: str | None, topics: Any, partitions: Any, rows: int
) -> list[tuple[str, int | None, Any]]:
    """Row indices per (topic, partition) of a batch, in first-seen order."""
    import pyarrow as pa

    topic_list: list[Any] = [fixed_topic] * rows if topics is None else topics.to_pylist()
    part_list: list[Any] = [None] * rows if partitions is None else partitions.to_pylist()
    found: dict[tuple[str, int | None], list[int]] = {}
    for i, group in enumerate(zip(topic_list, part_list, strict=True)):
        found.setdefault(group, []).append(i)
    return [(t, p, pa.array(ix, pa.int32())) for (t, p), ix in found.items()]


async def _send_rows(
    producer: Producer,
    fixed_topic: str | None,
    values: Any,
    keys: Any,
    topics: Any,
    partitions: Any,
    headers: Any,
    tally: Tally,
) -> None:
    """The per-record path (rows with headers): ``send()`` per row, callbacks count."""
    rows = len(values)
    value_list = values.to_pylist()
    key_list = [None] * rows if keys is None else keys.to_pylist()
    topic_list: list[Any] = [fixed_topic] * rows if topics is None else topics.to_pylist()
    part_list: list[Any] = [None] * rows if partitions is None else partitions.to_pylist()
    header_list = headers.to_pylist()
    send = producer.send
    on_done = tally.on_done
    for i in range(rows):
        if tally.stopped:
            tally.not_sent += rows - i
            return
        pairs = header_list[i]
        record_headers = [(h["key"], _header_value(h["value"])) for h in pairs] if pairs else None
        try:
            delivery = await send(
                topic_list[i], value_list[i], key_list[i], part_list[i], None, record_headers
            )
        except Exception as exc:  # rejected by send(): this row failed
            tally.fail(1, exc)
            continue
        tally.pending_rows += 1
        delivery.add_done_callback(on_done)


def _header_value(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
