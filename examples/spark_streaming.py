"""PySpark Structured Streaming: a stream written to Kafka with writeStream.format("aiokprod").

The rate source stands in for any streaming DataFrame. Each micro-batch's tasks run an
aiokprod producer per partition; a restart from the checkpoint re-runs the micro-batch that
was not committed (at-least-once, as with Spark's own Kafka sink). Run it::

    python -m aiokprod.testing exec --topic ticks:6 -- python examples/spark_streaming.py ticks 20
"""

from __future__ import annotations

import os
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import aiokprod.spark


def start(
    spark: SparkSession, bootstrap_servers: str, topic: str, checkpoint: str
) -> StreamingQuery:
    """Start streaming the rate source into ``topic`` (1,000 rows/s, a micro-batch a second)."""
    aiokprod.spark.register(spark)  # once per session: format("aiokprod")
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
    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName("aiokprod-spark-streaming")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    checkpoint = os.environ.get("CHECKPOINT") or tempfile.mkdtemp(prefix="aiokprod-ckpt-")
    try:
        query = start(spark, bootstrap, topic, checkpoint)
        query.awaitTermination(int(seconds))
        query.stop()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        print(f"streamed {rows} rows to {topic!r} (checkpoint: {checkpoint})")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
