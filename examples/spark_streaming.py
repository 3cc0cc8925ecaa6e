"""PySpark Structured Streaming: a stream written to Kafka with writeStream.format("aiokprod").

The rate source stands in for any streaming DataFrame. Each micro-batch's tasks run an
aiokprod producer per partition; a restart from the checkpoint re-runs the micro-batch that
was not committed (at-least-once, as with Spark's own Kafka sink). Run it::

    python -m aiokprod.testing exec --topic ticks:6 -- python examples/spark_streaming.py ticks 20
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery


def start(
    spark: SparkSession, bootstrap_servers: str, topic: str, checkpoint: str
) -> StreamingQuery:
    """Start streaming the rate source into ``topic`` (1,000 rows/s, a micro-batch a second)."""
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1000)
        .load()
        .selectExpr(
            "cast(value % 100 AS string) AS key",
            "to_json(named_struct('n', value, 'at', timestamp)) AS value",
        )
        .writeStream.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)  # required: where progress is kept
        .trigger(processingTime="1 second")
        .start()
    )


def main() -> int:
    topic = sys.argv[1] if len(sys.argv) > 1 else "ticks"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors use this Python
    master = os.environ.get("SPARK_MASTER", "local[2]")
    builder = SparkSession.builder.master(master).appName("aiokprod-spark-streaming")
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
            query = start(spark, bootstrap, topic, checkpoint)
            query.awaitTermination(int(seconds))
            query.stop()
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            print(f"streamed {rows} rows to {topic!r}")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
