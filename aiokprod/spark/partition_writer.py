"""The task side of the sink: one Spark partition's Arrow batches into one producer.

A :class:`PartitionWriter` is built on the driver (options validated, credentials sealed),
pickled to the executors, and called once per task with the partition's Arrow batches. It
runs ``asyncio.run()`` around an aiokprod :class:`~aiokprod.Producer`: at-least-once it
sends the rows (:mod:`aiokprod.spark.send_arrow`) and closes; exactly-once it writes them in
a transaction the driver commits (:mod:`aiokprod.spark.transactional_write`).

The result is a :class:`~aiokprod.spark.results.PartitionResult`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.producer import Producer
from aiokprod.spark.batches import read_ahead
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch
from aiokprod.spark.heap import freeze_after_first_task
from aiokprod.spark.options import unseal
from aiokprod.spark.results import PartitionResult, Tally
from aiokprod.spark.send_arrow import close_producer, send_all
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
            ``<prefix>-N``.
        exactly_once: write in a transaction prepared for the driver to commit
            (``deliveryGuarantee=exactly-once``); None for at-least-once.
    """

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    topic: str | None
    close_timeout: float | None = None
    client_id_prefix: str = "aiokprod-spark"
    exactly_once: ExactlyOnceConfig | None = None

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
