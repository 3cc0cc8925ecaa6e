"""The at-least-once writer's kept producer, against a real broker, read back by librdkafka.

``PartitionWriter(keep_producer=True)`` (what the data source and ``write_dataframe`` use)
writes the tasks a Python worker runs with one producer: kept after a task that delivered
every row, dropped after one that did not, replaced when the options differ.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from readback import consume_all

from aiokprod.errors import ProducerClosedError
from aiokprod.producer import Producer
from aiokprod.spark import kept_producer
from aiokprod.spark.partition_writer import PartitionWriter
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyarrow") is None and not in_ci():
    pytest.skip("pyarrow is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

import pyarrow as pa


@pytest.fixture(autouse=True)
def nothing_kept() -> Iterator[None]:
    kept_producer.drop_kept()
    yield
    kept_producer.drop_kept()


def kept() -> Producer | None:
    return kept_producer._slot.producer


def closed(producer: Producer) -> bool:
    try:
        asyncio.run(producer.flush(0))
    except ProducerClosedError:
        return True
    return False


def values(prefix: str, n: int) -> pa.RecordBatch:
    rows = [f"{prefix}-{i}".encode() for i in range(n)]
    keys = [f"k{i % 7}".encode() for i in range(n)]
    return pa.RecordBatch.from_arrays([pa.array(rows), pa.array(keys)], ["value", "key"])


def test_tasks_share_the_kept_producer_and_every_row_arrives(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    writer = PartitionWriter(kafka.bootstrap_servers, {"linger_ms": 1}, topic, keep_producer=True)
    first = writer.write(0, [values("a", 500), values("b", 500)])
    producer = kept()
    assert producer is not None
    assert first.ok
    assert first.delivered == 1000
    second = writer.write(1, [values("c", 300)])
    assert second.ok
    assert second.delivered == 300
    assert kept() is producer  # the second task did not start one
    assert producer._config.client_id.startswith("aiokprod-spark-worker-")
    records = consume_all(kafka.bootstrap_servers, topic, expected=1300, timeout_s=30)
    got = sorted(r.value for r in records)
    want = sorted(
        f"{p}-{i}".encode() for p, n in (("a", 500), ("b", 500), ("c", 300)) for i in range(n)
    )
    assert got == want
    # each key on one partition, in the order written, across both tasks
    by_key: dict[bytes, list[Any]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(r.key, []).append(r)
    for rows in by_key.values():
        assert len({r.partition for r in rows}) == 1
        order = [r.value.split(b"-")[0] for r in rows]
        assert order == sorted(order)


def test_a_failed_task_drops_the_producer_and_the_next_starts_another(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic(partitions=1)
    writer = PartitionWriter(kafka.bootstrap_servers, {}, topic, keep_producer=True)
    assert writer.write(0, [values("a", 10)]).ok
    producer = kept()
    assert producer is not None
    too_large = pa.RecordBatch.from_arrays([pa.array([b"y" * 2_000_000])], ["value"])
    failed = writer.write(1, [values("b", 10), too_large, values("c", 10)])
    assert (failed.rows, failed.delivered, failed.failed, failed.not_sent) == (21, 10, 1, 10)
    assert failed.error is not None
    assert failed.error.startswith("RecordTooLargeError")
    assert kept() is None
    assert closed(producer)
    after = writer.write(2, [values("d", 10)])
    assert after.ok
    assert kept() is not None
    assert kept() is not producer
    assert len(consume_all(kafka.bootstrap_servers, topic, expected=30, timeout_s=30)) == 30


def test_other_options_replace_the_kept_producer(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=1)
    one = PartitionWriter(kafka.bootstrap_servers, {"linger_ms": 1}, topic, keep_producer=True)
    assert one.write(0, [values("a", 5)]).ok
    first = kept()
    assert first is not None
    two = PartitionWriter(kafka.bootstrap_servers, {"linger_ms": 2}, topic, keep_producer=True)
    assert two.write(0, [values("b", 5)]).ok
    assert kept() is not first
    assert closed(first)
    assert len(consume_all(kafka.bootstrap_servers, topic, expected=10, timeout_s=30)) == 10


def test_a_broker_that_cannot_be_reached_fails_the_task_and_keeps_nothing() -> None:
    writer = PartitionWriter(
        "127.0.0.1:1", {"max_block_ms": 500, "reconnect_backoff_ms": 50}, "t", keep_producer=True
    )
    result = writer.write(0, [values("a", 10)])
    assert (result.rows, result.delivered) == (10, 0)
    assert not result.ok
    assert result.error is not None
    assert kept() is None
