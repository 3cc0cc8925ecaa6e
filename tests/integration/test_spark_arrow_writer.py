"""The data source's columnar writer without Spark: Arrow batches in, librdkafka reads back.

The same ``PartitionWriter`` a Spark task runs, fed batches built here, so the column
handling and the counts of a failing partition are checked in a second rather than through
a Spark job.
"""

from __future__ import annotations

import importlib.util

import pytest
from readback import consume_all

from aiokprod.spark.partition_writer import PartitionWriter
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyarrow") is None and not in_ci():
    pytest.skip("pyarrow is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

import pyarrow as pa


def batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), list(columns))


def test_value_key_and_partition_columns(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    first = batch(
        value=pa.array(["a", None, "c", "d"], pa.large_string()),  # None: a tombstone
        key=pa.array([b"k1", None, b"k3", b"k1"], pa.binary()),  # None: no key
        partition=pa.array([None, 2, None, None], pa.int32()),
    )
    second = batch(
        value=pa.array(["e", "f"], pa.string()),
        key=pa.array(["k1", "k5"], pa.string()),
        partition=pa.array([None, None], pa.int32()),
    )
    writer = PartitionWriter(kafka.bootstrap_servers, {"linger_ms": 1}, topic)
    result = writer.write(7, [first, second])
    assert (result.partition, result.rows, result.delivered, result.error) == (7, 6, 6, None)
    assert result.ok

    records = consume_all(kafka.bootstrap_servers, topic, expected=6, timeout_s=30)
    got = sorted(((r.key, r.value) for r in records), key=repr)
    assert got == sorted(
        [(b"k1", b"a"), (None, None), (b"k3", b"c"), (b"k1", b"d"), (b"k1", b"e"), (b"k5", b"f")],
        key=repr,
    )
    by_value = {r.value: r for r in records}
    assert by_value[None].partition == 2  # the explicit partition
    k1 = [r for r in records if r.key == b"k1"]
    assert len({r.partition for r in k1}) == 1  # one key, one partition
    assert [r.value for r in sorted(k1, key=lambda r: r.offset)] == [b"a", b"d", b"e"]


def test_a_failing_partition_reports_counts_and_the_first_error(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=1)
    ok = batch(value=pa.array([b"x"] * 100))
    too_large = batch(value=pa.array([b"y" * 2_000_000] + [b"z"] * 9))  # > max_request_size
    writer = PartitionWriter(kafka.bootstrap_servers, {}, topic)
    result = writer.write(0, [ok, too_large, ok])
    assert not result.ok
    # 100 delivered; the refused call's 10 rows failed; the last batch was not sent
    assert (result.rows, result.delivered, result.failed, result.not_sent) == (210, 100, 10, 100)
    assert result.error is not None
    assert result.error.startswith("RecordTooLargeError")
    assert "partition 0 (attempt 0): 100 of 210 rows delivered" in result.summary()
    assert len(consume_all(kafka.bootstrap_servers, topic, expected=100, timeout_s=30)) == 100


def test_a_null_topic_fails_the_partition(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=1)
    rows = batch(value=pa.array([b"1", b"2"]), topic=pa.array([topic, None]))
    result = PartitionWriter(kafka.bootstrap_servers, {}, None).write(0, [rows])
    assert (result.delivered, result.failed) == (0, 2)
    assert result.error == (
        "InvalidArgumentError: the topic column is null in a row and no topic is set"
    )
