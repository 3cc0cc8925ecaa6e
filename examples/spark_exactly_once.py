"""PySpark to Kafka exactly once: a batch job written atomically, then a stream.

``deliveryGuarantee=exactly-once`` makes every Spark task write its partition in a Kafka
transaction that the driver commits once every task succeeded: consumers reading with
``isolation.level=read_committed`` see each row once - none of a failed job, all of a
committed micro-batch, also across task retries and a restart from the checkpoint
(docs/spark.md, "Exactly-once"). Run it (``pip install 'aiokprod[spark]'``, Java 17+) with
the project's local Kafka; it takes about a minute (a local Kafka and Spark start first)::

    python -m aiokprod.testing exec --topic orders:6 -- \
        python examples/spark_exactly_once.py orders 5

``orders`` is the topic, ``5`` the seconds the stream runs. Locally Spark stays on 127.0.0.1;
the stream's checkpoint is a temporary folder removed at the end (``CHECKPOINT=/path`` keeps
one, for a restart).

The stream uses the ``rate-micro-batch`` source: a micro-batch replayed under the same batch
id gives every Spark partition the same rows, which exactly-once needs (a replayable source,
deterministic expressions).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

#: Unique to this sink, stable across restarts: transactional ids are "<prefix>-<partition>".
PREFIX = "example-orders"


def write_atomically(df: DataFrame, bootstrap_servers: str, topic: str) -> None:
    """Write ``df`` as one atomic unit: if the job fails, read_committed readers see none of it."""
    (
        df.write.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", f"{PREFIX}-batch")
        .mode("append")
        .save()
    )


def start_stream(
    spark: SparkSession, bootstrap_servers: str, topic: str, checkpoint: str
) -> StreamingQuery:
    """Stream 1,000 rows a micro-batch into ``topic``, each micro-batch exactly once."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1000)
        .option("numPartitions", 4)
        .load()
        .selectExpr(
            "cast(value % 100 AS string) AS key",
            "to_json(named_struct('order', value)) AS value",
        )
        .writeStream.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", f"{PREFIX}-stream")
        .option("checkpointLocation", checkpoint)  # required: where progress is kept
        .trigger(processingTime="1 second")
        .start()
    )


def main() -> int:
    topic = sys.argv[1] if len(sys.argv) > 1 else "orders"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 15.0
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors use this Python
    master = os.environ.get("SPARK_MASTER", "local[2]")
    builder = SparkSession.builder.master(master).appName("aiokprod-spark-exactly-once")
    builder = builder.config("spark.ui.enabled", "false")
    if master.startswith("local"):
        # All on this machine: Spark's driver on loopback (unset, it takes the machine's
        # outward address when the host name resolves to 127.0.0.1)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    spark = builder.getOrCreate()
    # $CHECKPOINT keeps the query's progress for a restart; else a folder removed at the end
    with contextlib.ExitStack() as cleanup:
        checkpoint = os.environ.get("CHECKPOINT") or cleanup.enter_context(
            tempfile.TemporaryDirectory(prefix="aiokprod-ckpt-")
        )
        try:
            batch = spark.range(10_000, numPartitions=4).selectExpr(
                "cast(id AS string) AS key", "concat('batch-', cast(id AS string)) AS value"
            )
            write_atomically(batch, bootstrap, topic)
            print(f"committed 10000 rows to {topic!r} in one atomic batch write")
            query = start_stream(spark, bootstrap, topic, checkpoint)
            query.awaitTermination(int(seconds))
            query.stop()
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            print(f"streamed {rows} rows to {topic!r} exactly once")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
