"""The columnar write path: Arrow record batches of one Spark partition into one producer.

A :class:`PartitionWriter` is built on the driver (options validated, credentials sealed),
pickled to the executors, and called once per task with the partition's Arrow batches. It
runs ``asyncio.run()`` around an aiokprod :class:`~aiokprod.Producer`:

- binary and string columns are read straight from the Arrow arrays (``string`` is viewed
  as ``binary``, no decoding) and handed to :meth:`Producer.send_many` — one call per
  (topic, partition) group of a batch, no ``Row`` and no future per record; unkeyed values
  as an :class:`~aiokprod.spark.encoder.ArrowValues` column, which the producer's append
  path encodes batch by batch straight from the Arrow buffers, keyed ones (hashed per key)
  with one ``to_pylist()`` per column;
- rows with headers (``send_many`` takes one header set per call) go through
  :meth:`Producer.send` one by one, counted by delivery callbacks;
- the first failure stops the partition: the rows after it are *not sent*.

The result is a :class:`~aiokprod.spark.results.PartitionResult`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.errors import InvalidArgumentError
from aiokprod.producer import Producer
from aiokprod.spark.exactly_once import ExactlyOnceTask, MicroBatch
from aiokprod.spark.heap import freeze_after_first_task
from aiokprod.spark.options import unseal
from aiokprod.spark.results import PartitionResult

if TYPE_CHECKING:
    import pyarrow as pa

    from aiokprod import DeliveryFuture
    from aiokprod.internals.bulk import BulkDelivery  # what send_many returns

__all__ = ["PartitionWriter", "first_rows"]


@dataclasses.dataclass(frozen=True)
class PartitionWriter:
    """Writes one Spark partition's Arrow batches to Kafka (pickled to the executors).

    Attributes:
        bootstrap_servers: where to connect.
        options: typed producer options; credentials as sealed strings.
        topic: the topic of every row; None to read the ``topic`` column.
        close_timeout: seconds the producer waits, when closing, for unacknowledged
            records; None waits (bounded by ``delivery_timeout_ms``).
        client_id_prefix: without a ``client_id`` option, partition N uses
            ``<prefix>-N``.
        exactly_once: write in a transaction prepared for the driver to commit
            (``deliveryGuarantee=exactly-once``); None for at-least-once.
    """

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    topic: str | None
    close_timeout: float | None = None
    client_id_prefix: str = "aiokprod-spark"
    exactly_once: ExactlyOnceTask | None = None

    def __repr__(self) -> str:  # options may hold credentials: never show them
        return f"<aiokprod.spark partition writer topic={self.topic!r}>"

    def write(
        self,
        index: int,
        batches: Iterable[pa.RecordBatch],
        attempt: int = 0,
        micro_batch: MicroBatch | None = None,
    ) -> PartitionResult:
        """Send every row of ``batches``; wait for the acknowledgements; return the counts.

        With :attr:`exactly_once`, the rows go into a transaction that is prepared, not
        committed (the driver commits it); ``micro_batch`` names the streaming micro-batch
        whose marker the task checks and writes.

        A fresh event loop per call: nothing is shared with, or left to, the next task that
        this (possibly reused) Python worker runs.
        """
        result = asyncio.run(self._write(index, attempt, iter(batches), micro_batch))
        freeze_after_first_task()  # the worker's later per-task collections (spark/heap.py)
        return result

    def producer_options(self, index: int) -> dict[str, Any]:
        """The options of partition ``index``'s producer, credentials unsealed."""
        # Unsealed only here, on the executor: the config wraps them in Secrets again.
        options = {k: unseal(v) for k, v in self.options.items()}
        options.setdefault("client_id", f"{self.client_id_prefix}-{index}")
        return options

    async def _write(
        self,
        index: int,
        attempt: int,
        batches: Iterator[pa.RecordBatch],
        micro_batch: MicroBatch | None,
    ) -> PartitionResult:
        tally = _Tally()
        if self.exactly_once is not None:
            from aiokprod.spark.txn_task import write_transaction

            return await write_transaction(
                self, index, attempt, _read_ahead(batches), tally, micro_batch
            )
        producer = Producer(self.bootstrap_servers, **self.producer_options(index))
        started = False
        try:
            try:
                await producer.start()
                started = True
            except Exception as exc:
                tally.fail(0, exc)
            await self.send_all(producer, _read_ahead(batches), tally)
        finally:
            if started:
                await self.close_producer(producer, tally)
            tally.collect(final=True)
        return tally.result(index, attempt)

    async def send_all(
        self, producer: Producer, batches: AsyncIterator[pa.RecordBatch], tally: _Tally
    ) -> None:
        """Send the rows of every batch; after the first failure, count the rest as not sent."""
        async for batch in batches:
            rows = batch.num_rows
            tally.rows += rows
            if tally.stopped:  # stop at the first failure, as Spark's sink does
                tally.not_sent += rows
                continue
            if rows:
                await self._send_batch(producer, batch, tally)
                tally.collect()

    async def close_producer(self, producer: Producer, tally: _Tally) -> None:
        """Close (delivering or failing what was accepted); a failure to close is counted."""
        try:
            await producer.close(self.close_timeout)
        except Exception as exc:
            tally.fail(0, exc)

    async def _send_batch(self, producer: Producer, batch: pa.RecordBatch, tally: _Tally) -> None:
        import pyarrow.compute as pc

        from aiokprod.spark.encoder import ArrowValues

        at = {name.lower(): i for i, name in enumerate(batch.schema.names)}
        values = _binary(batch.column(at["value"]))
        keys = _binary(batch.column(at["key"])) if "key" in at else None
        topics = None if self.topic is not None or "topic" not in at else batch.column(at["topic"])
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
            await _send_rows(producer, self.topic, values, keys, topics, partitions, headers, tally)
            return
        if partitions is not None and partitions.null_count == rows:
            partitions = None
        if partitions is None and (topics is None or len(pc.unique(topics)) == 1):
            topic: Any = self.topic if topics is None else topics[0].as_py()
            groups: list[tuple[str, int | None, Any]] = [(topic, None, None)]
        else:
            groups = _groups(self.topic, topics, partitions, rows)
        for topic, partition, indices in groups:
            part_values = values if indices is None else values.take(indices)
            part_keys = keys if keys is None or indices is None else keys.take(indices)
            count = len(part_values)
            try:
                bulk = await producer.send_many(
                    topic,
                    # unkeyed: encoded straight from the Arrow buffers (spark/encoder.py)
                    ArrowValues(part_values)
                    if part_keys is None and ArrowValues.takes(part_values.type)
                    else part_values.to_pylist(),
                    keys=None if part_keys is None else part_keys.to_pylist(),
                    partition=partition,
                )
            except Exception as exc:  # nothing of this call is accounted for: failed
                tally.fail(count, exc)
                tally.not_sent += rows - count - tally.accounted_in_batch
                tally.accounted_in_batch = 0
                return
            tally.accounted_in_batch += count
            tally.pending.append(bulk)
        tally.accounted_in_batch = 0


async def _read_ahead(batches: Iterator[pa.RecordBatch]) -> AsyncIterator[pa.RecordBatch]:
    """The batches, the next one read in a thread while the loop sends the current one.

    Spark hands the batches over a socket; waiting for the next one on the event loop would
    stop the producer's sender for that time. Reading in a worker thread (the read releases
    the GIL) keeps the sender running while Spark computes and ships the next batch.
    """
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(1, "aiokprod-spark-read") as reader:
        upcoming = loop.run_in_executor(reader, next, batches, None)
        while True:
            batch = await upcoming
            if batch is None:
                return
            upcoming = loop.run_in_executor(reader, next, batches, None)
            yield batch


async def first_rows(
    batches: AsyncIterator[pa.RecordBatch],
) -> tuple[pa.RecordBatch | None, AsyncIterator[pa.RecordBatch]]:
    """The first batch with rows (None: the partition is empty) and every batch after it.

    Empty batches before it are dropped (they hold no rows to count).
    """
    async for batch in batches:
        if batch.num_rows:
            return batch, _chain(batch, batches)
    return None, batches


async def _chain(
    first: pa.RecordBatch, rest: AsyncIterator[pa.RecordBatch]
) -> AsyncIterator[pa.RecordBatch]:
    yield first
    async for batch in rest:
        yield batch


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
    tally: _Tally,
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


class _Tally:
    """Counts of one partition: bulk deliveries still pending, callbacks, the first error."""

    __slots__ = (
        "accounted_in_batch",
        "delivered",
        "failed_records",
        "first_error",
        "not_sent",
        "pending",
        "pending_rows",
        "rows",
    )

    def __init__(self) -> None:
        self.rows = 0
        self.delivered = 0
        self.failed_records = 0
        self.not_sent = 0
        self.first_error: str | None = None
        self.pending: collections.deque[BulkDelivery] = collections.deque()
        self.pending_rows = 0  # per-record sends not yet called back
        self.accounted_in_batch = 0

    @property
    def stopped(self) -> bool:
        return self.first_error is not None

    def fail(self, records: int, error: BaseException) -> None:
        self.failed_records += records
        if self.first_error is None:
            self.first_error = f"{type(error).__name__}: {error}"

    def on_done(self, delivery: DeliveryFuture) -> None:
        self.pending_rows -= 1
        error = delivery.exception()
        if error is None:
            self.delivered += 1
        else:
            self.fail(1, error)

    def result(self, index: int, attempt: int, **extra: Any) -> PartitionResult:
        """The partition's counts."""
        return PartitionResult(
            index,
            self.rows,
            self.delivered,
            self.rows - self.delivered - self.not_sent,
            self.not_sent,
            self.first_error,
            attempt,
            **extra,
        )

    def collect(self, final: bool = False) -> None:
        """Count the bulk deliveries that completed (all of them when ``final``)."""
        pending = self.pending
        while pending and (final or pending[0].done()):
            bulk = pending.popleft()
            if not bulk.done():  # the producer closed without an answer for these
                self.fail(len(bulk), TimeoutError("not acknowledged when the producer closed"))
                continue
            errors = bulk.errors()
            self.delivered += len(bulk) - len(errors)
            if errors:
                self.fail(len(errors), errors[0][1])
        if final and self.pending_rows and self.first_error is None:
            self.first_error = "TimeoutError: not acknowledged when the producer closed"
