"""A plain asyncio script: send keyed records with headers, count acknowledgements, flush.

Shows the three ways to learn what happened to a record: await its delivery future, attach a
callback (cheap, no task per record), or ``send_and_wait``. Run it against any broker::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/asyncio_script.py orders 10000

or with the project's local Kafka::

    python -m aiokprod.testing exec --topic orders:3 -- python examples/asyncio_script.py orders
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter

from aiokprod import DeliveryFuture, KafkaError, Producer


async def main(bootstrap_servers: str, topic: str, count: int) -> int:
    per_partition: Counter[int] = Counter()
    failures: list[BaseException] = []

    def on_delivery(delivery: DeliveryFuture) -> None:
        # runs on the event loop when the broker answers: keep it quick
        error = delivery.exception()
        if error is not None:
            failures.append(error)
        else:
            per_partition[delivery.result().partition] += 1

    started = time.perf_counter()
    async with Producer(bootstrap_servers, linger_ms=10) as producer:
        # one record, waited for right away (its batch does not sit out linger_ms)
        first = await producer.send_and_wait(topic, b'{"hello": "world"}', key=b"greeting")
        print(f"first record at {first.topic}-{first.partition}@{first.offset}")

        for i in range(count):
            try:
                delivery = await producer.send(
                    topic,
                    f'{{"order": {i}}}'.encode(),
                    key=f"customer-{i % 100}".encode(),  # same key, same partition
                    headers=[("source", b"asyncio_script")],
                )
            except KafkaError as exc:  # not accepted: bad input, or no metadata/buffer in time
                print(f"record {i} was not sent: {exc!r}", file=sys.stderr)
                return 1
            delivery.add_done_callback(on_delivery)

        await producer.flush()  # everything sent so far is acknowledged or failed now
    elapsed = time.perf_counter() - started

    delivered = sum(per_partition.values())
    print(f"{delivered} of {count} records delivered in {elapsed:.2f} s, {len(failures)} failed")
    for partition, n in sorted(per_partition.items()):
        print(f"  partition {partition}: {n}")
    if failures:
        print(f"first failure: {failures[0]!r}", file=sys.stderr)
    return 0 if delivered == count else 1


if __name__ == "__main__":
    topic = sys.argv[1] if len(sys.argv) > 1 else "orders"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    sys.exit(asyncio.run(main(bootstrap, topic, count)))
