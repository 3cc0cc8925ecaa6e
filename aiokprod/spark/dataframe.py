"""``write_dataframe``: the data source's writer as a function call with Python options.

::

    from aiokprod.spark import write_dataframe

    delivered = write_dataframe(df, "broker1:9092", topic="events", linger_ms=20)
    # {0: 12500, 1: 12500, ...}: records delivered by each Spark partition

Unlike ``format("aiokprod")`` it takes producer options as Python values (a ``Secret``,
serializers, interceptors, an OAuth token provider), and a failing partition does not fail
its task: every partition reports its counts and the driver raises
:class:`~aiokprod.spark.results.SparkWriteError` with all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError
from aiokprod.spark.columns import check_schema
from aiokprod.spark.committer import Committer
from aiokprod.spark.eos_records import transactional_id
from aiokprod.spark.exactly_once import (
    AT_LEAST_ONCE,
    ExactlyOnceConfig,
    TaskAction,
    TaskResult,
    transaction_options,
)
from aiokprod.spark.options import guarantee_options, seal_secrets
from aiokprod.spark.partition_writer import PartitionWriter
from aiokprod.spark.results import PartitionResult, SparkWriteError
from aiokprod.types import PreparedTransaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["write_dataframe"]

_RESULT_SCHEMA = (
    "partition int, rows long, delivered long, failed long, not_sent long, error string, "
    "attempt int, txn_id string, producer_id long, producer_epoch int, protocol int, "
    "skipped boolean, topic string"
)


def write_dataframe(
    df: DataFrame,
    bootstrap_servers: str | Sequence[str],
    *,
    topic: str | None = None,
    close_timeout: float | None = None,
    delivery_guarantee: str = AT_LEAST_ONCE,
    transactional_id_prefix: str | None = None,
    **options: Any,
) -> dict[int, int]:
    """Write every row of ``df`` to Kafka; one producer per Python worker (at-least-once).

    Args:
        df: a DataFrame with a ``value`` column and optionally ``key``, ``topic``,
            ``partition`` and ``headers`` (the columns of Spark's Kafka sink).
        bootstrap_servers: ``"host:port"``, a comma-separated list, or a list of them.
        topic: the topic of every row. Required when ``df`` has no ``topic`` column; when
            both are present this wins, as with Spark's ``topic`` option.
        close_timeout: seconds each partition waits, at its end, for records not yet
            acknowledged; None waits (bounded by ``delivery_timeout_ms``).
        delivery_guarantee: ``"at-least-once"`` (the default) or ``"exactly-once"``: every
            partition writes in a transaction that the driver commits once all succeeded, so
            read_committed consumers see all rows once or none (docs/spark.md, "Exactly-once");
            a failing partition then fails its task, which Spark retries without duplicates.
        transactional_id_prefix: required with ``"exactly-once"``: unique to this sink and
            the same for every run of the job (docs/spark.md, "How it works").
        **options: producer options, exactly as for :class:`~aiokprod.Producer` (credentials
            included). They are validated here, on the driver, and shipped to the executors
            inside the task closure; they are never logged. Without ``client_id``, partition
            N uses ``aiokprod-spark-N``.

    Returns:
        Records delivered per Spark partition index (every row, when this returns).

    Raises:
        ConfigError: a bad producer option, a missing ``value`` column, a column of the
            wrong type, neither a ``topic`` column nor ``topic=``, or a bad
            ``delivery_guarantee`` / missing ``transactional_id_prefix``.
        SparkWriteError: some rows were not delivered; its message and ``results`` give
            the counts of every partition and the first error. Exactly-once: a failing
            partition fails its task instead, which Spark retries; when Spark gives up, the
            job fails with Spark's exception (holding this error's message) and none of the
            rows is visible to read_committed consumers.
        ExactlyOnceCommitError: exactly-once: the driver could not commit every partition's
            transaction (see its ``committed`` and ``lost``).
        ImportError: PySpark or pyarrow is not installed.
    """
    from aiokprod.spark import require_spark

    require_spark()
    options = dict(options)
    prefix = guarantee_options(delivery_guarantee, transactional_id_prefix, options)
    if prefix is not None:
        options = transaction_options(options, streaming=False)
    transactional = (
        {} if prefix is None else {"transactional_id": transactional_id(prefix, 0, 0, None)}
    )
    # fail on the driver, not later
    ProducerConfig.from_options(bootstrap_servers, **options, **transactional)
    columns = check_schema(df.schema, topic)
    shipped = _shippable(options)
    committer = run = None
    if prefix is not None:
        committer = Committer(bootstrap_servers, options, prefix, streaming=False)
        run = committer.open_run()
    eos = None if prefix is None else ExactlyOnceConfig(prefix, streaming=False, run=run)
    writer = PartitionWriter(
        bootstrap_servers,
        shipped,
        topic,
        close_timeout=close_timeout,
        exactly_once=eos,
        keep_producer=True,
    )
    by_name = {f.name.lower(): f.name for f in df.schema.fields}
    selected = df.select(*(by_name[c] for c in columns))
    try:
        rows = selected.mapInArrow(_MapWriter(writer), _RESULT_SCHEMA).collect()
    except BaseException:
        if committer is not None:  # a task failed for good: close the run, abort its leftovers
            committer.abort(run, None, [None] * _partitions(selected))
        raise
    results = sorted((_result(r) for r in rows), key=lambda r: r.partition)
    task_results = [
        TaskResult(
            r.partition,
            TaskAction.WRITE if r.transaction is not None else TaskAction.NOTHING,
            r.transaction,
            r.topic,
            run,
        )
        for r in results
    ]
    if not all(r.ok for r in results):
        if committer is not None:
            committer.abort(run, None, task_results)
        raise SparkWriteError(results)
    if committer is not None:
        committer.commit(run, None, task_results)
    return {r.partition: r.delivered for r in results}


def _partitions(df: Any) -> int:
    """How many Spark partitions ``df`` has (0 if Spark cannot say any more)."""
    try:
        return int(df.rdd.getNumPartitions())
    except Exception:  # the abort then fences what it lists, not each attempt
        return 0


def _result(r: Any) -> PartitionResult:
    """A result row of the ``mapInArrow`` job as a :class:`PartitionResult`."""
    txn = None
    if r["txn_id"] is not None:
        txn = PreparedTransaction(r["txn_id"], r["producer_id"], r["producer_epoch"], r["protocol"])
    return PartitionResult(
        r["partition"],
        r["rows"],
        r["delivered"],
        r["failed"],
        r["not_sent"],
        r["error"],
        r["attempt"],
        transaction=txn,
        skipped=bool(r["skipped"]),
        topic=r["topic"],
    )


class _MapWriter:
    """The ``mapInArrow`` function: the partition's batches in, one result row out."""

    def __init__(self, writer: PartitionWriter) -> None:
        self.writer = writer

    def __repr__(self) -> str:
        return f"<aiokprod.spark map writer {self.writer!r}>"

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        r = self.writer.write(index, batches, attempt)
        if self.writer.exactly_once is not None and not r.ok:
            # The attempt's transaction is aborted: Spark's retry cannot duplicate anything.
            raise SparkWriteError([r])
        txn = r.transaction
        yield pa.RecordBatch.from_pydict(
            {
                "partition": pa.array([r.partition], pa.int32()),
                "rows": pa.array([r.rows], pa.int64()),
                "delivered": pa.array([r.delivered], pa.int64()),
                "failed": pa.array([r.failed], pa.int64()),
                "not_sent": pa.array([r.not_sent], pa.int64()),
                "error": pa.array([r.error], pa.string()),
                "attempt": pa.array([r.attempt], pa.int32()),
                "txn_id": pa.array([None if txn is None else txn.transactional_id], pa.string()),
                "producer_id": pa.array([None if txn is None else txn.producer_id], pa.int64()),
                "producer_epoch": pa.array(
                    [None if txn is None else txn.producer_epoch], pa.int32()
                ),
                "protocol": pa.array([None if txn is None else txn.protocol], pa.int32()),
                "skipped": pa.array([r.skipped], pa.bool_()),
                "topic": pa.array([r.topic], pa.string()),
            }
        )


def _shippable(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as they travel to the executors (pickled in the task closure).

    A :class:`~aiokprod.config.Secret` refuses to be pickled, so its value travels as a
    sealed string (the producer on the executor wraps it in a Secret again). Any other
    value that cannot be pickled (an ``ssl.SSLContext``, a lambda holding a lock) is a
    ConfigError naming the option, raised here rather than as a Spark serialization failure.
    """
    from pyspark import cloudpickle

    dumps: Callable[[Any], bytes] = cloudpickle.dumps
    shipped = seal_secrets(options)
    for name, value in shipped.items():
        try:
            dumps(value)
        except Exception:
            hint = (
                "; use ssl_cafile, ssl_certfile and ssl_keyfile (files present on every "
                "executor) instead"
                if name == "ssl_context"
                else ""
            )
            raise ConfigError(
                f"producer option {name} ({type(value).__name__}) cannot be sent to the Spark "
                f"executors: it cannot be pickled{hint}"
            ) from None
    return shipped
