"""aiokprod.spark: a PySpark DataFrame written to the local broker, read back with librdkafka.

Spark runs in local mode (``local[2]``, a small driver, no UI, bound to 127.0.0.1); the Python
workers are this interpreter. Without PySpark these tests are skipped, except under CI=true,
where they must run (``make test`` installs the ``spark`` extra).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from readback import consume_all

from aiokprod import ConfigError
from aiokprod import spark as spark_module
from aiokprod.spark import SparkWriteError, write_dataframe
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

from pyspark.sql import DataFrame, SparkSession

ROWS = 100_000
SPARK_PARTITIONS = 8


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python has aiokprod
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiokprod-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def rows_frame(spark: SparkSession, rows: int, topic: str) -> DataFrame:
    """key: string, value: binary, headers: array<struct<key,value>>, topic: string column."""
    return spark.range(rows, numPartitions=SPARK_PARTITIONS).selectExpr(
        "concat('k-', cast(id % 5000 as string)) AS key",
        "cast(concat('value-', cast(id as string)) AS binary) AS value",
        "array(named_struct('key', 'row', 'value', cast(cast(id as string) AS binary)),"
        " named_struct('key', 'nothing', 'value', cast(null AS binary))) AS headers",
        f"'{topic}' AS topic",
        "id AS extra_column_ignored",
    )


@pytest.mark.timeout(180)
def test_100k_rows_from_8_partitions_are_read_back(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=6)
    df = rows_frame(spark, ROWS, topic)
    assert df.rdd.getNumPartitions() == SPARK_PARTITIONS

    delivered = write_dataframe(df, kafka.bootstrap_servers, linger_ms=10)

    assert delivered == {p: ROWS // SPARK_PARTITIONS for p in range(SPARK_PARTITIONS)}
    records = consume_all(kafka.bootstrap_servers, topic, expected=ROWS, timeout_s=90)
    assert len(records) == ROWS
    got = sorted((r.key, r.value, r.headers) for r in records)
    expected = sorted(
        (
            f"k-{i % 5000}".encode(),
            f"value-{i}".encode(),
            (("row", str(i).encode()), ("nothing", None)),
        )
        for i in range(ROWS)
    )
    assert got == expected
    # keyed like the Java client: one key, one partition
    partitions: dict[bytes | None, set[int]] = {}
    for r in records:
        partitions.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in partitions.values())


@pytest.mark.timeout(120)
def test_a_missing_topic_fails_with_per_partition_counts(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    missing = f"missing-{new_topic()}"
    df = spark.range(800, numPartitions=SPARK_PARTITIONS).selectExpr("cast(id AS string) AS value")
    with pytest.raises(SparkWriteError) as failure:
        write_dataframe(
            df,
            kafka.bootstrap_servers,
            topic=missing,
            allow_auto_create_topics=False,
            max_block_ms=1500,
        )
    error = failure.value
    message = str(error)
    assert "0 of 800 rows delivered" in message
    assert "8 of 8 Spark partitions failed" in message
    for p in range(SPARK_PARTITIONS):
        assert f"partition {p}: 0/1/99 of 100" in message, message
    assert "MetadataTimeoutError" in message
    assert missing in message
    assert error.delivered == dict.fromkeys(range(SPARK_PARTITIONS), 0)
    assert [(r.rows, r.delivered, r.failed, r.not_sent) for r in error.results] == [
        (100, 0, 1, 99)
    ] * SPARK_PARTITIONS


@pytest.mark.timeout(120)
def test_partition_column_string_values_and_the_example(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=3)
    df = spark.range(300, numPartitions=3).selectExpr(
        "cast(id % 3 AS int) AS partition", "concat('v', cast(id as string)) AS value"
    )
    delivered = write_dataframe(df, kafka.bootstrap_servers, topic=topic, client_id="spark-test")
    assert sum(delivered.values()) == 300
    records = consume_all(kafka.bootstrap_servers, topic, expected=300, timeout_s=30)
    assert len(records) == 300
    assert all(r.partition == int(r.value[1:]) % 3 for r in records)
    assert all(r.key is None for r in records)

    # examples/spark_job.py, on this session
    example_topic = new_topic(partitions=2)
    spec = importlib.util.spec_from_file_location(
        "example_spark_job", Path(__file__).resolve().parents[2] / "examples" / "spark_job.py"
    )
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.run(spark, kafka.bootstrap_servers, example_topic, 2000) == 0
    assert len(consume_all(kafka.bootstrap_servers, example_topic, 2000, timeout_s=30)) == 2000


def test_schema_errors_are_raised_on_the_driver(spark: SparkSession) -> None:
    values = spark.range(3).selectExpr("cast(id as string) AS value")
    with pytest.raises(ConfigError, match="no 'topic' column: pass topic="):
        write_dataframe(values, "127.0.0.1:9")
    with pytest.raises(ConfigError, match="needs a 'value' column"):
        write_dataframe(spark.range(3), "127.0.0.1:9", topic="t")
    with pytest.raises(ConfigError, match="column 'value' must be string or binary, got bigint"):
        write_dataframe(spark.range(3).selectExpr("id AS value"), "127.0.0.1:9", topic="t")
    with pytest.raises(ConfigError, match="column 'partition' must be int, got bigint"):
        write_dataframe(
            values.selectExpr("value", "cast(1 AS bigint) AS partition"), "127.0.0.1:9", topic="t"
        )
    with pytest.raises(ConfigError, match="column 'headers' must be array"):
        write_dataframe(values.selectExpr("value", "'h' AS headers"), "127.0.0.1:9", topic="t")
    with pytest.raises(ConfigError, match="linger_ms"):
        write_dataframe(values, "127.0.0.1:9", topic="t", linger_ms="soon")


def test_options_that_cannot_travel_to_executors(spark: SparkSession) -> None:
    import threading

    from aiokprod import config

    values = spark.range(3).selectExpr("cast(id as string) AS value")

    class Locked:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __call__(self, key: object) -> bytes:
            return b"k"

    with pytest.raises(ConfigError, match=r"key_serializer \(Locked\) cannot be sent"):
        write_dataframe(values, "127.0.0.1:9", topic="t", key_serializer=Locked())
    if hasattr(config, "Secret"):  # credentials travel, without showing in a repr
        shipped = spark_module._shippable({"sasl_plain_password": config.Secret("s3cret")})
        assert "s3cret" not in repr(shipped)
        assert "s3cret" not in str(shipped["sasl_plain_password"])
        assert pickle.loads(pickle.dumps(shipped))["sasl_plain_password"] == "s3cret"
    plain = spark_module._shippable({"sasl_plain_password": "hunter2", "linger_ms": 5})
    assert "hunter2" not in repr(plain)
    assert plain["linger_ms"] == 5
    assert type(spark_module._unseal(plain["sasl_plain_password"])) is str
    assert f"{spark_module._unseal(plain['sasl_plain_password'])}" == "hunter2"
