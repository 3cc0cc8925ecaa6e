"""The task side of the sink: one Spark partition's Arrow batches into one producer.

A :class:`PartitionWriter` is built on the driver (options validated, credentials sealed),
pickled to the executors, and called once per task with the partition's Arrow batches. It
runs an aiokprod :class:`~aiokprod.Producer`: at-least-once it sends the rows
(:mod:`aiokprod.spark.send_arrow`) and flushes, with the producer the Python worker keeps
for its tasks (:mod:`aiokprod.spark.kept_producer`) when :attr:`PartitionWriter.keep_producer`
is set, else with a producer of its own that it closes; exactly-once it writes them in a
transaction the driver commits (:mod:`aiokprod.spark.transactional_write`).

The result is a :class:`~aiokprod.spark.results.PartitionResult`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.producer import Producer
from aiokprod.spark.batches import read_ahead
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch
from aiokprod.spark.heap import freeze_after_first_task
from aiokprod.spark.kept_producer import KeptSlot, run_kept
from aiokprod.spark.options import unseal
from aiokprod.spark.results import PartitionResult, Tally
from aiokprod.spark.send_arrow import close_producer, flush_producer, send_all
from aiokprod.spark.transactional_write import write_transaction

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PartitionWriter"]


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
            ``<prefix>-N`` (a kept producer: ``<prefix>-worker-<process id>``).
        exactly_once: write in a transaction prepared for the driver to commit
            (``deliveryGuarantee=exactly-once``); None for at-least-once.
        keep_producer: at-least-once, use the producer this Python worker keeps for its
            tasks (:mod:`aiokprod.spark.kept_producer`), flushed at the end of each task,
            instead of starting and closing one per task. The data source and
            ``write_dataframe`` set it.
    """

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    topic: str | None
    close_timeout: float | None = None
    client_id_prefix: str = "aiokprod-spark"
    exactly_once: ExactlyOnceConfig | None = None
    keep_producer: bool = False

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

        Without :attr:`keep_producer` (and exactly-once), a fresh event loop and producer
        per call. With it, the worker's kept ones; either way every record of the call is
        acknowledged or failed when it returns: nothing is left to the next task.
        """
        rows = iter(batches)
        kept = None
        if self.keep_producer and self.exactly_once is None:
            kept = run_kept(
                self._kept_key(), lambda slot: self._write_kept(slot, index, attempt, rows)
            )
        if kept is not None:
            result = kept[0]
        else:
            result = asyncio.run(self._write(index, attempt, rows, micro_batch))
        freeze_after_first_task()  # the worker's later per-task collections (spark/heap.py)
        return result

    def producer_options(self, index: int) -> dict[str, Any]:
        """The options of partition ``index``'s producer, credentials unsealed."""
        # Unsealed only here, on the executor: the config wraps them in Secrets again.
        options = {k: unseal(v) for k, v in self.options.items()}
        options.setdefault("client_id", f"{self.client_id_prefix}-{index}")
        return options

    def _kept_key(self) -> object:
        """What a kept producer is made from: one made from other options is not reused."""
        servers = self.bootstrap_servers
        return (servers if isinstance(servers, str) else tuple(servers), dict(self.options))

    async def _write_kept(
        self, slot: KeptSlot, index: int, attempt: int, batches: Iterator[pa.RecordBatch]
    ) -> PartitionResult:
        """At-least-once with the kept producer (started here if there is none yet)."""
        tally = Tally()
        producer = slot.producer
        if producer is None:
            options = self.producer_options(index)
            if "client_id" not in self.options:
                options["client_id"] = f"{self.client_id_prefix}-worker-{os.getpid()}"
            producer = Producer(self.bootstrap_servers, **options)
            try:
                await producer.start()
                slot.producer = producer
            except Exception as exc:
                tally.fail(0, exc)
        waited = False
        try:
            await send_all(producer, self.topic, read_ahead(batches), tally)
            if slot.producer is not None:
                waited = True  # from here a close does not wait again: the flush did
                await flush_producer(producer, tally, self.close_timeout)
                tally.collect()
        finally:
            done = not (tally.stopped or tally.pending or tally.pending_rows)
            if slot.producer is not None and not done:
                slot.producer = None  # a failed task's producer is not kept
                await close_producer(producer, tally, 0 if waited else self.close_timeout)
            tally.collect(final=True)
        return tally.result(index, attempt)

    async def _write(
        self,
        index: int,
        attempt: int,
        batches: Iterator[pa.RecordBatch],
        micro_batch: MicroBatch | None,
    ) -> PartitionResult:
        tally = Tally()
        if self.exactly_once is not None:
            return await write_transaction(
                self.exactly_once,
                self.bootstrap_servers,
                self.producer_options(index),
                self.topic,
                self.close_timeout,
                index,
                attempt,
                read_ahead(batches),
                tally,
                micro_batch,
            )
        producer = Producer(self.bootstrap_servers, **self.producer_options(index))
        started = False
        try:
            try:
                await producer.start()
                started = True
            except Exception as exc:
                tally.fail(0, exc)
            await send_all(producer, self.topic, read_ahead(batches), tally)
        finally:
            if started:
                await close_producer(producer, tally, self.close_timeout)
            tally.collect(final=True)
        return tally.result(index, attempt)
