"""The ``aiokprod`` PySpark data source (Python Data Source API, pyspark 4.x).

Imported by :func:`aiokprod.spark.register` only: it needs pyspark and pyarrow.

Where each piece runs: :class:`AiokprodDataSource` and its ``writer()`` /
``streamWriter()`` run on the driver, which parses and validates the options and the
schema (a mistake fails there, before any task); the writer is pickled to the executors,
where ``write()`` runs once per task with the partition's Arrow batches. ``commit()`` and
``abort()`` run on the driver (for streaming, in a fresh process per micro-batch that calls
``streamWriter()`` again); writing exactly once, planning opens a run and they close it and
end the tasks' transactions (:mod:`aiokprod.spark.committer`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from aiokprod.errors import ConfigError
from aiokprod.spark.columns import check_schema
from aiokprod.spark.committer import Committer
from aiokprod.spark.eos_records import RunToken
from aiokprod.spark.exactly_once import (
    ExactlyOnceConfig,
    MicroBatch,
    TaskAction,
    TaskResult,
    transaction_options,
)
from aiokprod.spark.options import parse_sink_options, unseal
from aiokprod.spark.partition_writer import PartitionWriter
from aiokprod.spark.results import PartitionResult, SparkWriteError

__all__ = ["FORMAT", "AiokprodDataSource", "PartitionCommitMessage"]

FORMAT = "aiokprod"
#: The module of the function that runs a PySpark planner worker's job and reports its error.
_WORKER_RUNNER = "pyspark.sql.worker.utils"


@dataclasses.dataclass(frozen=True)
class PartitionCommitMessage(WriterCommitMessage):
    """What a task that succeeded sends to the driver's ``commit()``.

    Its counts, and, writing exactly once, its prepared transaction and micro-batch.
    """

    result: PartitionResult
    micro_batch: MicroBatch | None = None

    def task_result(self) -> TaskResult:
        """The driver's view of the task (:func:`~aiokprod.spark.exactly_once.plan_commit`)."""
        r = self.result
        if r.skipped:
            action = TaskAction.SKIP
        elif r.transaction is not None:
            action = TaskAction.WRITE
        else:
            action = TaskAction.NOTHING
        return TaskResult(r.partition, action, r.transaction, r.topic, r.run)


class AiokprodDataSource(DataSource):
    """``format("aiokprod")``: Spark's Kafka sink interface, an aiokprod producer per task."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``aiokprod``."""
        return FORMAT

    def _sink(
        self, schema: Any, overwrite: bool, streaming: bool, plan: bool | None
    ) -> tuple[PartitionWriter, Committer | None]:
        """The writer and, exactly-once, the committer.

        ``plan``: open a run for the tasks (None: if Spark calls to plan a micro-batch).
        """
        if overwrite:
            raise ConfigError(
                "format('aiokprod') appends to Kafka topics: use mode('append') "
                "(Kafka topics cannot be overwritten)"
            )
        sink = parse_sink_options(self.options)
        check_schema(schema, sink.topic)
        prefix = sink.transactional_id_prefix
        if prefix is None:
            writer = PartitionWriter(
                sink.bootstrap_servers, sink.producer_options, sink.topic, keep_producer=True
            )
            return writer, None
        options = transaction_options(sink.producer_options, streaming)
        committer = Committer(sink.bootstrap_servers, driver_options(options), prefix, streaming)
        if plan is None:  # streaming: only Spark's planning call opens a run
            plan = _planning_call()
        run = committer.open_run() if plan else None
        eos = ExactlyOnceConfig(prefix, streaming, run)
        writer = PartitionWriter(sink.bootstrap_servers, options, sink.topic, exactly_once=eos)
        return writer, committer

    def _checked_sink(
        self, schema: Any, overwrite: bool, streaming: bool, plan: bool | None
    ) -> tuple[PartitionWriter, Committer | None]:
        try:
            return self._sink(schema, overwrite, streaming, plan)
        except ConfigError:
            said_first()
            raise

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        """The batch writer (driver side: options and columns are checked here).

        Writing exactly once, it opens the job's run (docs/spark.md, "How it works"): what an
        earlier run left is ended first - a commit its driver decided and did not finish is
        completed, every other open transaction of the prefix aborted.
        """
        writer, committer = self._checked_sink(schema, overwrite, streaming=False, plan=True)
        return _BatchWriter(writer, committer)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """The Structured Streaming writer.

        Spark calls it on the driver for every micro-batch, to plan it and again, in another
        process, before committing or aborting it. Writing exactly once, the planning call
        opens the micro-batch's run (as :meth:`writer` does a job's); the other calls open
        nothing: the commit or abort learns the run from the tasks.
        """
        writer, committer = self._checked_sink(schema, False, streaming=True, plan=None)
        return _StreamWriter(writer, committer)


def said_first() -> None:
    """Let Spark show a mistake in the options or columns as its sentence, first.

    Spark reports an error of ``writer()``/``streamWriter()`` as the Python worker formats
    it, after "Failed to initialize Python data source writer:": a traceback of our frames,
    with the sentence that says what to fix at its end. PySpark leaves the traceback out when
    ``SPARK_HIDE_TRACEBACK`` is set; the worker that called us reports this one error and exits
    (``pyspark.sql.worker.utils.worker_run``), so it is set there, for that report only.
    Outside such a worker (a test calling ``writer()`` itself) nothing changes.
    """
    if _WORKER_RUNNER in sys.modules:
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def _planning_call() -> bool:
    """Whether Spark calls ``streamWriter()`` to plan a micro-batch (not to commit one).

    PySpark plans in ``pyspark/sql/worker/write_into_data_source.py`` and commits or aborts
    in ``python_streaming_sink_runner.py``; the caller's module tells them apart
    (tests/unit/spark/test_planning_call.py pins it for the pyspark the tests run).

    Raises:
        ConfigError: called from neither (a PySpark that plans elsewhere).
    """
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/").rsplit("/", 1)[-1]
        if name == "write_into_data_source.py":
            return True
        if name == "python_streaming_sink_runner.py":
            return False
        frame = frame.f_back  # type: ignore[assignment]
    raise ConfigError(
        "deliveryGuarantee=exactly-once: streamWriter() was called neither to plan a "
        "micro-batch nor to commit one (this PySpark version calls it from elsewhere: "
        "exactly-once streaming needs PySpark 4.1 to 4.3)"
    )


def driver_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The producer options the driver's admin client connects with (credentials unsealed)."""
    return {k: unseal(v) for k, v in options.items() if k != "transactional_id"}


def _write_task(writer: PartitionWriter, batches: Iterator[Any]) -> PartitionCommitMessage:
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    micro_batch = None
    eos = writer.exactly_once
    if eos is not None and eos.streaming and context is not None:
        micro_batch = _micro_batch(context)
    result = writer.write(index, batches, attempt, micro_batch)
    if not result.ok:
        # Fails the task attempt: Spark retries it (spark.task.maxFailures) or fails the job
        # with this message. At-least-once: a retry sends the whole partition again.
        # Exactly-once: the attempt's transaction is aborted (or fenced by the retry).
        raise SparkWriteError([result])
    return PartitionCommitMessage(result, micro_batch)


def _micro_batch(context: Any) -> MicroBatch | None:
    """The task's micro-batch, from the local properties Spark's MicroBatchExecution sets."""
    batch = context.getLocalProperty("streaming.sql.batchId")
    query = context.getLocalProperty("sql.streaming.queryId")
    if batch is None or query is None:
        return None
    return MicroBatch(str(query), int(batch))


def _results(messages: list[WriterCommitMessage | None]) -> list[TaskResult | None]:
    return [m.task_result() if isinstance(m, PartitionCommitMessage) else None for m in messages]


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, writer: PartitionWriter, committer: Committer | None) -> None:
        self._writer = writer
        self._committer = committer

    @property
    def _run(self) -> RunToken | None:
        eos = self._writer.exactly_once
        return None if eos is None else eos.run

    def __repr__(self) -> str:
        return f"<aiokprod batch writer {self._writer!r}>"

    def write(self, iterator: Iterator[Any]) -> PartitionCommitMessage:
        return _write_task(self._writer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: exactly-once commits every task's transaction.

        At-least-once has nothing to do: the records are in Kafka already.
        """
        if self._committer is not None:
            self._committer.commit(self._run, None, _results(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task (or the commit) failed: exactly-once aborts every transaction.

        Unless the commit was decided: it is completed then. At-least-once: Kafka has no
        rollback, the succeeded partitions' records stay.
        """
        if self._committer is not None:
            self._committer.abort(self._run, None, _results(messages))


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, writer: PartitionWriter, committer: Committer | None) -> None:
        self._writer = writer
        self._committer = committer

    def __repr__(self) -> str:
        return f"<aiokprod stream writer {self._writer!r}>"

    def write(self, iterator: Iterator[Any]) -> PartitionCommitMessage:
        return _write_task(self._writer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly-once: commit every task's transaction of the micro-batch.

        At-least-once: the micro-batch's records are in Kafka already.
        """
        if self._committer is not None:
            results = _results(messages)
            self._committer.commit(None, batchId, results, _query_id(messages, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly-once: abort the micro-batch's transactions (complete a decided commit).

        At-least-once: the records already delivered stay.
        """
        if self._committer is not None:
            self._committer.abort(None, batchId, _results(messages))


def _query_id(messages: list[WriterCommitMessage | None], batch_id: int) -> str:
    """The streaming query's id, from the tasks' messages ("" when no task knew it)."""
    for m in messages:
        if isinstance(m, PartitionCommitMessage) and m.micro_batch is not None:
            if m.micro_batch.batch_id != batch_id:
                raise ConfigError(
                    f"commit(): a task wrote micro-batch {m.micro_batch.batch_id}, Spark "
                    f"commits micro-batch {batch_id}"
                )
            return m.micro_batch.query_id
    return ""
