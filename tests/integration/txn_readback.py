"""Reading transactional output back with librdkafka (isolation.level=read_committed)."""

from __future__ import annotations

import time
import uuid

from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def read_committed(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    idle_s: float = 3.0,
    isolation: str = "read_committed",
) -> list[bytes]:
    """Every committed value of ``topic`` (librdkafka, isolation.level=read_committed).

    Reads until each partition reached its end (the last stable offset) and nothing new came
    for ``idle_s``. ``isolation="read_uncommitted"`` reads aborted transactions' records too.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rc-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        last = time.monotonic()
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(eof) == partitions and time.monotonic() - last > idle_s:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition() or 0)
                    continue
                raise RuntimeError(str(err))
            last = time.monotonic()
            eof.discard(msg.partition() or 0)
            value = msg.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def stable_offset(bootstrap: str, topic: str) -> int:
    """Partition 0's last stable offset, as a read_committed librdkafka consumer sees it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lso-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                offset = msg.offset()
                assert offset is not None
                return offset
        raise AssertionError("no end of partition within 30 s")
    finally:
        consumer.close()


async def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """A group's committed offsets and metadata, as aiokafka's admin client reads them.

    Not librdkafka: confluent-kafka 2.16's ``Consumer.committed()`` returns garbage for a
    metadata string of one or two characters committed by another client (it reads past
    the string; aiokafka and Kafka's own clients read it right).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in got.items()}
