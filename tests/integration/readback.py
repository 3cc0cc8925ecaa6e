"""Reading topics back with an independent client (confluent-kafka / librdkafka), not ours."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as librdkafka read it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


def partition_count(bootstrap: str, topic: str) -> int:
    """Partitions of ``topic`` as librdkafka's admin client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10)
    return len(md.topics[topic].partitions)


def consume_all(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0
) -> list[ConsumedRecord]:
    """Read every partition of ``topic`` from the beginning until ``expected`` records came.

    Returns what was read (more than ``expected`` if the topic holds more); stops at the
    timeout with whatever arrived, so a test can report what is missing.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"readback-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = partition_count(bootstrap, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records: list[ConsumedRecord] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=10000, timeout=0.5)
            for msg in batch:
                err = msg.error()
                partition, offset, topic_name = msg.partition(), msg.offset(), msg.topic()
                assert partition is not None, msg
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(partition)
                        continue
                    raise RuntimeError(f"read-back error: {err}")
                assert offset is not None, msg
                assert topic_name is not None, msg
                at_eof.discard(partition)
                # librdkafka hands headers over as (str, bytes | None) pairs
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                records.append(
                    ConsumedRecord(
                        topic_name,
                        partition,
                        offset,
                        msg.key(),
                        msg.value(),
                        tuple(headers),
                        msg.timestamp()[1],
                    )
                )
            if len(records) >= expected and len(at_eof) == partitions:
                break
        return records
    finally:
        consumer.close()
