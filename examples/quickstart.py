"""Quickstart: produce 100,000 records with aiokprod, then count them with another client.

Run it against any broker::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/quickstart.py

or let the project start a local Apache Kafka for it (this is ``make demo``)::

    python -m aiokprod.testing exec --topic quickstart:6 -- python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from aiokprod import Producer

TOPIC = os.environ.get("QUICKSTART_TOPIC", "quickstart")
RECORDS = int(os.environ.get("QUICKSTART_RECORDS", "100000"))


async def produce(bootstrap: str) -> dict[int, int]:
    """Send RECORDS keyed records; returns how many each partition acknowledged."""
    async with Producer(bootstrap) as producer:  # acks=all, idempotence on, linger 5 ms
        started = time.perf_counter()
        deliveries = []
        for i in range(RECORDS):
            key = f"user-{i % 1000}".encode()
            value = f'{{"order": {i}, "amount": {i % 97}}}'.encode()
            deliveries.append(await producer.send(TOPIC, value, key=key))
        queued = time.perf_counter()
        await producer.flush()
        done = time.perf_counter()

        per_partition: dict[int, int] = {}
        failed = 0
        for delivery in deliveries:
            if delivery.exception() is not None:
                failed += 1
                continue
            metadata = delivery.result()
            per_partition[metadata.partition] = per_partition.get(metadata.partition, 0) + 1
        seconds = done - started
        print(f"sent {RECORDS:,} records to {TOPIC!r} in {seconds:.2f} s")
        print(f"  queued at {RECORDS / (queued - started):,.0f} records/s")
        print(f"  acknowledged at {RECORDS / seconds:,.0f} records/s (acks=all, idempotent)")
        print(f"  delivered {RECORDS - failed:,}, failed {failed:,}")
        for partition in sorted(per_partition):
            print(f"    partition {partition}: {per_partition[partition]:,}")
        return per_partition


def count_with_another_client(bootstrap: str) -> int | None:
    """Count the topic's records with confluent-kafka's watermarks (if it is installed)."""
    try:
        from confluent_kafka import Consumer, TopicPartition
    except ImportError:
        return None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "aiokprod-quickstart"})
    try:
        topic = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC]
        total = 0
        for partition in topic.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def main() -> int:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    per_partition = asyncio.run(produce(bootstrap))
    delivered = sum(per_partition.values())
    counted = count_with_another_client(bootstrap)
    if counted is None:
        print("install confluent-kafka to count the records with an independent client")
        return 0 if delivered == RECORDS else 1
    print(f"read back with librdkafka: {counted:,} records in {TOPIC!r}")
    return 0 if delivered == RECORDS and counted >= delivered else 1


if __name__ == "__main__":
    sys.exit(main())
