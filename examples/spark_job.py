"""PySpark: write a DataFrame to Kafka with one aiokprod producer per Spark partition.

The DataFrame has the columns of Spark's own Kafka sink (``value``, and optionally ``key``,
``topic``, ``partition``, ``headers``). ``write_dataframe`` returns the records each Spark
partition delivered, or raises ``SparkWriteError`` with every partition's counts. Run it
(``pip install 'aiokprod[spark]'``, Java 17+) against any broker::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/spark_job.py clicks 100000

or with the project's local Kafka::

    python -m aiokprod.testing exec --topic clicks:6 -- python examples/spark_job.py clicks

On a cluster, submit it with spark-submit; aiokprod must be installed on the executors.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame, SparkSession

from aiokprod.spark import SparkWriteError, write_dataframe


def clicks(spark: SparkSession, rows: int, partitions: int = 8) -> DataFrame:
    """A DataFrame shaped like Spark's Kafka sink input: key, value and headers."""
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "concat('user-', cast(id % 1000 as string)) AS key",  # string: sent as UTF-8
        "cast(to_json(named_struct('click', id, 'page', id % 17)) AS binary) AS value",
        "array(named_struct('key', 'source', 'value', cast('spark_job' AS binary))) AS headers",
    )


def run(spark: SparkSession, bootstrap_servers: str, topic: str, rows: int) -> int:
    df = clicks(spark, rows)
    try:
        # any producer option passes through (credentials too); it is never logged
        delivered = write_dataframe(df, bootstrap_servers, topic=topic, linger_ms=20)
    except SparkWriteError as exc:
        print(exc, file=sys.stderr)  # per-partition delivered/failed/not sent, first error
        return 1
    print(f"delivered {sum(delivered.values())} records to {topic!r}")
    for partition, count in sorted(delivered.items()):
        print(f"  Spark partition {partition}: {count}")
    return 0


def main() -> int:
    topic = sys.argv[1] if len(sys.argv) > 1 else "clicks"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors use this Python
    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName("aiokprod-spark-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    try:
        return run(spark, bootstrap, topic, rows)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
