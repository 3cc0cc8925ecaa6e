"""Exactly-once consume-transform-produce: read a topic, write a transformed copy.

The input side is confluent-kafka's Consumer (``isolation.level=read_committed``); the output
side is an aiokprod transactional producer. Each transaction holds a batch of output records
*and* the input offsets after them (``send_offsets_to_transaction``), so they commit together
or not at all. Kill the process at any point and start it again: the new producer fences the
old one (same ``transactional_id``), the open transaction is aborted, the consumer resumes
from the last committed offsets, and every input record ends up in the output exactly once
(for readers with ``isolation.level=read_committed``).

    python examples/exactly_once.py INPUT OUTPUT [--crash-after N]

or with the project's local Kafka (an empty input: it stops once the input is idle)::

    python -m aiokprod.testing exec --topic orders-in:3 --topic orders-out:3 -- \
        python examples/exactly_once.py orders-in orders-out

``--crash-after N`` kills the process (``os._exit``) in the middle of transaction N+1, after
its records were sent and before the commit: the demo of a crash. The broker is taken from
``KAFKA_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from aiokprod import ConsumerGroupMetadata, Producer
from aiokprod import TopicPartition as Tp

GROUP = "exactly-once-demo"
BATCH = 50
IDLE_POLLS_BEFORE_EXIT = 5


def _committed_offsets(consumer: Consumer, partitions: list[TopicPartition]) -> list[Any]:
    """The group's committed offsets; a cluster that just started may not have its group
    coordinator ready yet (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS): ask again."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return list(consumer.committed(partitions, timeout=30))
        except KafkaException as exc:
            if time.monotonic() > deadline or not exc.args[0].retriable():
                raise
            time.sleep(0.5)


def transform(value: bytes) -> bytes:
    """The "processing" step."""
    return b"processed:" + value


def open_consumer(bootstrap: str, topic: str) -> Consumer:
    """A consumer of every partition of ``topic``, from the group's committed offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    metadata = consumer.list_topics(topic, timeout=30)
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    # assign() (no group membership): one instance owns every partition. The offsets this
    # program commits through its transactions are where it resumes after a crash.
    committed = _committed_offsets(consumer, partitions)
    consumer.assign(committed)
    return consumer


async def run(bootstrap: str, source: str, sink: str, crash_after: int | None) -> int:
    """Process until the input has been idle for a while; returns the records processed."""
    consumer = open_consumer(bootstrap, source)
    group = ConsumerGroupMetadata(GROUP)
    processed = 0
    transactions = 0
    idle = 0
    try:
        async with Producer(bootstrap, transactional_id=f"{GROUP}-{source}") as producer:
            while idle < IDLE_POLLS_BEFORE_EXIT:
                messages = await asyncio.to_thread(consumer.consume, BATCH, 1.0)
                messages = [m for m in messages if m.error() is None]
                if not messages:
                    idle += 1
                    continue
                idle = 0
                async with producer.transaction():
                    offsets: dict[Tp, int] = {}
                    for msg in messages:
                        value = msg.value() or b""
                        await producer.send(sink, transform(value), key=msg.key())
                        offsets[Tp(source, msg.partition() or 0)] = (msg.offset() or 0) + 1
                    if crash_after is not None and transactions == crash_after:
                        await producer.flush()  # the records reach the broker, uncommitted
                        os._exit(3)  # a crash: no close, no abort
                    await producer.send_offsets_to_transaction(offsets, group)
                processed += len(messages)
                transactions += 1
    finally:
        consumer.close()
    return processed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--crash-after", type=int, default=None)
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    count = asyncio.run(run(bootstrap, args.input, args.output, args.crash_after))
    print(f"processed {count} record(s)")


if __name__ == "__main__":
    main()
