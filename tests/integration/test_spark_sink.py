"""format("aiokprod") and write_dataframe: DataFrames written to the local broker, read back
with librdkafka.

One SparkSession for the module, ``local[2,2]``: two cores, and a task may be attempted twice
(the retry test needs one retry; plain ``local[2]`` allows none). Without PySpark these tests
are skipped, except under CI=true, where they must run (``make test`` installs the ``spark``
extra).
"""

from __future__ import annotations

import collections
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from readback import consume_all

from aiokprod import ConfigError
from aiokprod.spark import SparkWriteError, write_dataframe
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from spark_session import local_spark

ROWS = 100_000
SPARK_PARTITIONS = 8
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Arrow batches of 1,000 rows: the retry test needs a partition to ship several.
    with local_spark(
        "aiokprod-tests",
        master="local[2,2]",
        **{"spark.sql.execution.arrow.maxRecordsPerBatch": "1000"},
    ) as session:
        yield session


def to_kafka(df: DataFrame, bootstrap: str, **options: str) -> None:
    writer = df.write.format("aiokprod").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def test_keyed_rows_from_8_partitions_are_read_back(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=6)
    df = spark.range(ROWS, numPartitions=SPARK_PARTITIONS).selectExpr(
        "concat('k-', cast(id % 5000 as string)) AS key",  # string: sent as UTF-8
        "cast(concat('value-', cast(id as string)) AS binary) AS value",
        "id AS extra_column_ignored",
    )
    to_kafka(df, kafka.bootstrap_servers, topic=topic, **{"kafka.linger.ms": "10"})

    records = consume_all(kafka.bootstrap_servers, topic, expected=ROWS, timeout_s=90)
    got = sorted((r.key, r.value) for r in records)
    assert got == sorted((f"k-{i % 5000}".encode(), f"value-{i}".encode()) for i in range(ROWS))
    partitions: dict[bytes | None, set[int]] = {}
    for r in records:  # keyed like the Java client: one key, one partition
        partitions.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in partitions.values())
    assert len({r.partition for r in records}) == 6


def test_unkeyed_values_encoded_from_the_arrow_buffers_are_read_back(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """Unkeyed rows take the columnar encoder (spark/encoder.py): nulls, empty and long
    values, several batches per partition, every record as written."""
    topic = new_topic(partitions=4)
    rows = 30_000
    df = spark.range(rows, numPartitions=3).selectExpr(
        "CASE WHEN id % 7 = 0 THEN null WHEN id % 11 = 0 THEN ''"
        " ELSE lpad(cast(id AS string), cast(id % 300 AS int) + 10, 'x') END AS value"
    )
    to_kafka(df, kafka.bootstrap_servers, topic=topic, **{"kafka.batch.size": "4000"})
    records = consume_all(kafka.bootstrap_servers, topic, expected=rows, timeout_s=60)
    expected = sorted(
        (
            b"\x00"
            if i % 7 == 0
            else b""
            if i % 11 == 0
            else str(i).rjust(i % 300 + 10, "x").encode()
        )
        for i in range(rows)
    )
    got = sorted(b"\x00" if r.value is None else r.value for r in records)
    assert got == expected
    assert all(r.key is None for r in records)
    assert len({r.partition for r in records}) == 4


def test_a_worker_that_ran_the_sink_keeps_its_modules_out_of_later_collections(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """spark/heap.py: after its first task a worker's heap is frozen (gc.freeze), so the
    daemon's gc.collect() after each task no longer walks every module's objects."""

    def heap_state(batches: Iterator[Any]) -> Iterator[Any]:  # local: pickled by value
        import gc
        import os
        import sys

        import pyarrow as pa

        for _ in batches:
            pass
        ran_sink = "aiokprod.producer" in sys.modules
        yield pa.RecordBatch.from_pylist(
            [{"pid": os.getpid(), "ran_sink": ran_sink, "frozen": gc.get_freeze_count()}]
        )

    topic = new_topic(partitions=2)
    df = spark.range(4000, numPartitions=4).selectExpr("cast(id AS string) AS value")
    to_kafka(df, kafka.bootstrap_servers, topic=topic)
    probed = spark.range(4, numPartitions=4).mapInArrow(
        heap_state, "pid long, ran_sink boolean, frozen long"
    )
    workers = {row.pid: (row.ran_sink, row.frozen) for row in probed.collect()}
    ran = [frozen for ran_sink, frozen in workers.values() if ran_sink]
    assert ran  # the probe ran in a worker that ran the sink (one pool of workers)
    assert all(frozen > 10_000 for frozen in ran)


def test_topic_partition_and_headers_columns(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    first, second = new_topic(partitions=3), new_topic(partitions=2)
    df = spark.range(3000, numPartitions=3).selectExpr(
        f"if(id % 2 = 0, '{first}', '{second}') AS topic",
        "cast(id % 2 AS int) AS partition",
        "concat('v', cast(id as string)) AS value",  # string values
        "if(id % 3 = 0, null, cast(id AS string)) AS key",  # some null keys
        "array(named_struct('key', 'row', 'value', cast(cast(id as string) AS binary)),"
        " named_struct('key', 'nothing', 'value', cast(null AS binary))) AS headers",
    )
    to_kafka(df, kafka.bootstrap_servers)
    one = consume_all(kafka.bootstrap_servers, first, expected=1500, timeout_s=30)
    two = consume_all(kafka.bootstrap_servers, second, expected=1500, timeout_s=30)
    assert sorted(int(r.value[1:]) for r in one) == list(range(0, 3000, 2))
    assert sorted(int(r.value[1:]) for r in two) == list(range(1, 3000, 2))
    assert {r.partition for r in one} == {0}
    assert {r.partition for r in two} == {1}
    for r in one + two:
        i = int(r.value[1:])
        assert r.key == (None if i % 3 == 0 else str(i).encode())
        assert r.headers == (("row", str(i).encode()), ("nothing", None))


def test_a_missing_topic_fails_the_job_with_a_clear_message(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    missing = f"missing-{new_topic()}"
    df = spark.range(400, numPartitions=2).selectExpr("cast(id AS string) AS value")
    with pytest.raises(PySparkException) as failure:  # Spark's PythonException
        to_kafka(
            df,
            kafka.bootstrap_servers,
            topic=missing,
            **{"kafka.allow.auto.create.topics": "false", "kafka.max.block.ms": "1500"},
        )
    message = str(failure.value)
    assert "SparkWriteError" in message, message
    assert "0 of 200 rows delivered, 200 failed" in message, message
    assert "MetadataTimeoutError" in message
    assert missing in message


def test_a_worker_keeps_its_producer_for_its_next_tasks(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """spark/kept_producer.py: at-least-once, a Python worker's tasks share one producer,
    which stays (connected) after a job for the worker's next one."""

    def kept_state(batches: Iterator[Any]) -> Iterator[Any]:  # local: pickled by value
        import os
        import sys

        import pyarrow as pa

        for _ in batches:
            pass
        module = sys.modules.get("aiokprod.spark.kept_producer")
        producer = None if module is None else module._slot.producer
        client = None if producer is None else producer._config.client_id
        yield pa.RecordBatch.from_pylist([{"pid": os.getpid(), "client": client}])

    topic = new_topic(partitions=3)
    for job in range(2):
        df = spark.range(job * 4000, (job + 1) * 4000, numPartitions=4).selectExpr(
            "cast(id AS string) AS value", "cast(id % 7 AS string) AS key"
        )
        to_kafka(df, kafka.bootstrap_servers, topic=topic)
    probed = spark.range(4, numPartitions=4).mapInArrow(kept_state, "pid long, client string")
    workers = {row.pid: row.client for row in probed.collect()}
    kept = {pid: client for pid, client in workers.items() if client is not None}
    assert kept  # the probe ran in a worker that ran the sink (one pool of workers)
    assert all(client == f"aiokprod-spark-worker-{pid}" for pid, client in kept.items())
    records = consume_all(kafka.bootstrap_servers, topic, expected=8000, timeout_s=60)
    assert sorted(int(r.value) for r in records) == list(range(8000))


def test_a_retried_task_sends_its_partition_again(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """At-least-once: attempt 0 of partition 1 meets a record too large at row 3000 of its
    partition, after sending the rows before it; the task fails, attempt 1 sends the whole
    partition again. Partition 0 is written once."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("string", useArrow=False)
    def too_large_on_first_attempt(i: int) -> str:
        context = TaskContext.get()
        assert context is not None
        if context.partitionId() == 1 and context.attemptNumber() == 0 and i == 8000:
            return "x" * 2_000_000  # > max.request.size: the record is refused
        return str(i)

    topic = new_topic(partitions=2)
    df = spark.range(10_000, numPartitions=2).select(
        too_large_on_first_attempt("id").alias("value")
    )
    to_kafka(df, kafka.bootstrap_servers, topic=topic)

    records = consume_all(kafka.bootstrap_servers, topic, expected=13_000, timeout_s=90)
    counts = collections.Counter(int(r.value) for r in records)
    assert set(counts) == set(range(10_000))  # nothing lost
    twice = [i for i, n in counts.items() if n != 1]
    # Attempt 0 sent (some of) rows 5000-7999 before failing on row 8000 — how many were
    # acknowledged before the failed task closed its producer depends on timing — and
    # attempt 1 sent the whole partition again. Partition 0 (rows 0-4999) is written once.
    assert twice, "the retried partition sent nothing twice: was attempt 0 retried at all?"
    assert set(twice) <= set(range(5000, 8000))
    assert all(counts[i] == 2 for i in twice)


def test_mistakes_fail_on_the_driver_before_any_task(spark: SparkSession) -> None:
    # Computing any row of this frame fails: the errors below come before any task runs.
    values = spark.range(3).selectExpr(
        "cast(if(id >= 0, raise_error('a task ran'), 'x') AS string) AS value"
    )

    def error_of(df: DataFrame, mode: str = "append", **options: str) -> str:
        writer = df.write.format("aiokprod")
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(PySparkException) as failure:
            writer.mode(mode).save()
        text = str(failure.value)
        assert "a task ran" not in text
        return text

    boot = {"kafka.bootstrap.servers": "127.0.0.1:9"}
    assert "kafka.bootstrap.servers is required" in error_of(values, topic="t")
    assert "no 'topic' column" in error_of(values, **boot)
    assert "expected an integer, got 'soon'" in error_of(
        values, topic="t", **boot, **{"kafka.linger.ms": "soon"}
    )
    assert "column 'value' must be string or binary, got bigint" in error_of(
        spark.range(3).selectExpr("id AS value"), topic="t", **boot
    )
    assert "mode('append')" in error_of(values, "overwrite", topic="t", **boot)
    text = error_of(
        values, topic="t", **boot, **{"kafka.sasl.plain.password": "hunter2"}
    )  # a password without SASL: refused, and not shown
    assert "sasl_plain_password" in text
    assert "hunter2" not in text


def test_write_dataframe_reports_every_partition(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=3)
    df = spark.range(3000, numPartitions=3).selectExpr(
        "cast(id % 3 AS int) AS partition", "concat('v', cast(id as string)) AS value"
    )
    delivered = write_dataframe(df, kafka.bootstrap_servers, topic=topic, client_id="spark-test")
    assert delivered == {0: 1000, 1: 1000, 2: 1000}
    records = consume_all(kafka.bootstrap_servers, topic, expected=3000, timeout_s=30)
    assert sorted(int(r.value[1:]) for r in records) == list(range(3000))
    assert all(r.partition == int(r.value[1:]) % 3 for r in records)

    missing = f"missing-{new_topic()}"
    with pytest.raises(SparkWriteError) as failure:
        write_dataframe(
            df.select("value"),
            kafka.bootstrap_servers,
            topic=missing,
            allow_auto_create_topics=False,
            max_block_ms=1500,
        )
    error = failure.value
    # each partition is one Arrow batch of 1,000 rows, whose send_many call failed
    assert "0 of 3000 rows delivered, 3000 failed, 0 not sent" in str(error)
    assert "3 of 3 Spark partitions failed" in str(error)
    assert f"MetadataTimeoutError: topic {missing!r}" in str(error)
    assert [(r.rows, r.delivered, r.failed, r.not_sent) for r in error.results] == [
        (1000, 0, 1000, 0)
    ] * 3
    assert error.delivered == {0: 0, 1: 0, 2: 0}


def test_write_dataframe_checks_python_options(spark: SparkSession) -> None:
    import threading

    values = spark.range(3).selectExpr("cast(id as string) AS value")

    class Locked:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __call__(self, key: object) -> bytes:
            return b"k"

    with pytest.raises(ConfigError, match=r"key_serializer \(Locked\) cannot be sent"):
        write_dataframe(values, "127.0.0.1:9", topic="t", key_serializer=Locked())
    with pytest.raises(ConfigError, match="linger_ms"):
        write_dataframe(values, "127.0.0.1:9", topic="t", linger_ms="soon")
    with pytest.raises(ConfigError, match="no 'topic' column"):
        write_dataframe(values, "127.0.0.1:9")


def test_the_batch_example(spark: SparkSession, kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    spec = importlib.util.spec_from_file_location("spark_batch", EXAMPLES / "spark_batch.py")
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.run(spark, kafka.bootstrap_servers, topic, 2000)
    assert len(consume_all(kafka.bootstrap_servers, topic, 2000, timeout_s=30)) == 2000
