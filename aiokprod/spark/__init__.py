"""PySpark: write DataFrames to Kafka with aiokprod, batch and Structured Streaming.

::

    (df.write.format("aiokprod")        # Spark finds it: no import, no register()
        .option("kafka.bootstrap.servers", "broker1:9092")
        .option("topic", "events")
        .mode("append")
        .save())

The ``aiokprod`` data source takes the options and columns of Spark's own Kafka sink
(``format("kafka")``); each Spark task runs one aiokprod producer fed with the partition's
Arrow batches. :func:`write_dataframe` is the same writer as a function call that returns
the per-partition counts. Spark finds the source through the top-level module
``pyspark_aiokprod`` (PySpark's lookup of ``pyspark_*`` modules); :func:`register` registers
it with one session where that lookup does not see it. See docs/spark.md.

PySpark and pyarrow are optional dependencies (``pip install 'aiokprod[spark]'``);
importing this package does not import them. aiokprod must be installed on the executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.spark.committer import CommitReport, Committer, ExactlyOnceCommitError
from aiokprod.spark.dataframe import write_dataframe
from aiokprod.spark.exactly_once import check_prefix
from aiokprod.spark.results import PartitionResult, SparkWriteError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FORMAT",
    "CommitReport",
    "ExactlyOnceCommitError",
    "PartitionResult",
    "SparkWriteError",
    "recover_transactions",
    "register",
    "write_dataframe",
]

#: The data source's format name.
FORMAT = "aiokprod"


def register(spark: SparkSession) -> None:
    """Register the ``aiokprod`` data source with ``spark`` (``format("aiokprod")``).

    Not needed where PySpark's own lookup finds ``pyspark_aiokprod`` (installed with
    aiokprod); harmless there. Call it once per session, on the driver. Needs pyspark >= 4.0
    (streaming: >= 4.1) and pyarrow; aiokprod must be importable on the executors.

    Raises:
        ImportError: PySpark or pyarrow is missing, or PySpark has no Python Data Source API.
    """
    require_spark()
    try:
        from aiokprod.spark.source import AiokprodDataSource
    except ImportError as exc:
        raise ImportError(
            "format('aiokprod') needs the Python Data Source API of pyspark >= 4.0: "
            f"pip install 'aiokprod[spark]' ({exc})"
        ) from exc
    spark.dataSource.register(AiokprodDataSource)


def recover_transactions(
    bootstrap_servers: str | Sequence[str], transactional_id_prefix: str, **options: Any
) -> CommitReport:
    """Finish what a crashed exactly-once job or query of this sink left in Kafka.

    Closes the prefix's run (a task still writing for it stops), completes a commit its
    driver had decided and not finished (the partitions whose transaction is still open are
    committed), then aborts every other open transaction of the prefix, so that none holds
    read_committed consumers back until its timeout. Every new batch job or micro-batch with
    the prefix does this by itself before its tasks start; call this when none will run -
    and only while no job or query of this sink runs (it would fail their writes).

    Args:
        bootstrap_servers: where to connect.
        transactional_id_prefix: the sink's ``transactionalIdPrefix``.
        **options: producer options for the connection (security, timeouts).

    Returns:
        What was committed, found lost (logged at ERROR too: those rows of that job are not
        in Kafka) and aborted.
    """
    prefix = check_prefix(transactional_id_prefix)
    committer = Committer(bootstrap_servers, options, prefix, streaming=False)
    return committer.recover()


def require_spark() -> None:
    """Fail with a clear ImportError when PySpark or pyarrow is missing."""
    missing: list[str] = []
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(
            f"aiokprod.spark needs {' and '.join(missing)}: pip install 'aiokprod[spark]'"
        )


def __getattr__(name: str) -> Any:
    if name == "AiokprodDataSource":
        from aiokprod.spark.source import AiokprodDataSource

        return AiokprodDataSource
    raise AttributeError(name)
