"""PySpark batch job: a DataFrame written to Kafka with format("aiokprod").

The DataFrame has the columns of Spark's own Kafka sink (``value``, and optionally ``key``,
``topic``, ``partition``, ``headers``); the options are Spark's too (``kafka.*``). Run it
(``pip install 'aiokprod[spark]'``, Java 17+) against any broker::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/spark_batch.py clicks 100000

or with the project's local Kafka::

    python -m aiokprod.testing exec --topic clicks:6 -- python examples/spark_batch.py clicks

On a cluster, submit it with spark-submit; aiokprod must be installed on the executors.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame, SparkSession


def clicks(spark: SparkSession, rows: int, partitions: int = 8) -> DataFrame:
    """A DataFrame shaped like Spark's Kafka sink input: key, value and headers."""
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "concat('user-', cast(id % 1000 as string)) AS key",  # string: sent as UTF-8
        "cast(to_json(named_struct('click', id, 'page', id % 17)) AS binary) AS value",
    )


def run(spark: SparkSession, bootstrap_servers: str, topic: str, rows: int) -> None:
    # format("aiokprod") is found by Spark where aiokprod is installed (no register needed)
    (
        clicks(spark, rows)
        .write.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("kafka.linger.ms", "20")  # any Java producer option, as kafka.<name>
        .mode("append")  # Python data sources need an explicit append
        .save()
    )  # a partition that fails fails its task (and the job, once Spark gives up)
    print(f"wrote {rows} records to {topic!r}")


def main() -> int:
    topic = sys.argv[1] if len(sys.argv) > 1 else "clicks"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors use this Python
    master = os.environ.get("SPARK_MASTER", "local[2]")
    builder = SparkSession.builder.master(master).appName("aiokprod-spark-batch")
    builder = builder.config("spark.ui.enabled", "false")
    if master.startswith("local"):
        # All on this machine: Spark's driver on loopback (unset, it takes the machine's
        # outward address when the host name resolves to 127.0.0.1)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    spark = builder.getOrCreate()
    try:
        run(spark, bootstrap, topic, rows)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
