"""The ``aiokprod`` PySpark data source (Python Data Source API, pyspark 4.x).

Imported by :func:`aiokprod.spark.register` only: it needs pyspark and pyarrow.

Where each piece runs: :class:`AiokprodDataSource` and its ``writer()`` /
``streamWriter()`` run on the driver, which parses and validates the options and the
schema (a mistake fails there, before any task); the writer is pickled to the executors,
where ``write()`` runs once per task with the partition's Arrow batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from aiokprod.errors import ConfigError
from aiokprod.spark.arrow import PartitionWriter
from aiokprod.spark.columns import check_schema
from aiokprod.spark.options import parse_sink_options
from aiokprod.spark.results import PartitionResult, SparkWriteError

__all__ = ["FORMAT", "AiokprodDataSource", "PartitionCommitMessage"]

FORMAT = "aiokprod"


@dataclasses.dataclass(frozen=True)
class PartitionCommitMessage(WriterCommitMessage):
    """What a task that succeeded sends to the driver's ``commit()``: its counts."""

    result: PartitionResult


class AiokprodDataSource(DataSource):
    """``format("aiokprod")``: Spark's Kafka sink interface, an aiokprod producer per task."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``aiokprod``."""
        return FORMAT

    def _partition_writer(self, schema: Any, overwrite: bool) -> PartitionWriter:
        if overwrite:
            raise ConfigError(
                "format('aiokprod') appends to Kafka topics: use mode('append') "
                "(Kafka topics cannot be overwritten)"
            )
        sink = parse_sink_options(self.options)
        check_schema(schema, sink.topic)
        return PartitionWriter(sink.bootstrap_servers, sink.producer_options, sink.topic)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        """The batch writer (driver side: options and columns are checked here)."""
        return _BatchWriter(self._partition_writer(schema, overwrite))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """The Structured Streaming writer."""
        return _StreamWriter(self._partition_writer(schema, False))


def _write_task(writer: PartitionWriter, batches: Iterator[Any]) -> PartitionCommitMessage:
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    result = writer.write(index, batches, attempt)
    if not result.ok:
        # Fails the task attempt: Spark retries it (spark.task.maxFailures) or fails the job
        # with this message; a retry sends the whole partition again (at-least-once).
        raise SparkWriteError([result])
    return PartitionCommitMessage(result)


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, writer: PartitionWriter) -> None:
        self._writer = writer

    def __repr__(self) -> str:
        return f"<aiokprod batch writer {self._writer!r}>"

    def write(self, iterator: Iterator[Any]) -> PartitionCommitMessage:
        return _write_task(self._writer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: the records are in Kafka already; nothing to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Some task failed: Kafka has no rollback; the succeeded partitions' records stay."""


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, writer: PartitionWriter) -> None:
        self._writer = writer

    def __repr__(self) -> str:
        return f"<aiokprod stream writer {self._writer!r}>"

    def write(self, iterator: Iterator[Any]) -> PartitionCommitMessage:
        return _write_task(self._writer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch's records are in Kafka already; nothing to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A task of the micro-batch failed; the records already delivered stay."""
