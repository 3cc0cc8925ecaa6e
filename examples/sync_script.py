"""The sync facade in a plain script: no async code, the same producer underneath.

``SyncProducer`` runs an aiokprod ``Producer`` on an event loop in a background thread.
``send()`` blocks until the record is accepted and returns a ``concurrent.futures.Future``;
``send_and_wait()``, ``flush()`` and ``close()`` block. Errors are the producer's own typed
exceptions, raised in your thread. Run it against any broker::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/sync_script.py audit

or with the project's local Kafka::

    python -m aiokprod.testing exec --topic audit:3 -- python examples/sync_script.py audit
"""

from __future__ import annotations

import concurrent.futures
import os
import sys

from aiokprod import KafkaError, RecordMetadata, SerializationError
from aiokprod.sync import SyncProducer


def export_rows(producer: SyncProducer, topic: str, rows: list[dict[str, str]]) -> int:
    """An ordinary function (a Django view, a cron job...) that sends rows and checks them."""
    futures: list[concurrent.futures.Future[RecordMetadata]] = []
    for row in rows:
        value = ",".join(f"{k}={v}" for k, v in row.items())
        futures.append(producer.send(topic, value, key=row["user"]))
    producer.flush(timeout=60)  # blocks until every record above is acknowledged or failed
    delivered = 0
    for future in futures:
        try:
            future.result()  # re-raises the record's error, typed, in this thread
            delivered += 1
        except KafkaError as exc:
            print(f"not delivered: {exc!r}", file=sys.stderr)
    return delivered


def main() -> int:
    topic = sys.argv[1] if len(sys.argv) > 1 else "audit"
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    rows = [{"user": f"u-{i % 7}", "action": "export", "n": str(i)} for i in range(1000)]

    # max_block_ms bounds how long send() waits for a topic's metadata (and buffer space)
    with SyncProducer(bootstrap, client_id="sync-script", max_block_ms=10_000) as producer:
        metadata = producer.send_and_wait(topic, b"export started", key=b"system")
        print(f"marker at {metadata.topic}-{metadata.partition}@{metadata.offset}")
        delivered = export_rows(producer, topic, rows)
        print(f"{delivered} of {len(rows)} rows delivered")
        try:
            producer.send(topic, 42)  # an int is not bytes or str: rejected at once
        except SerializationError as exc:
            print(f"typed error, raised in this thread: {exc}")
        # leaving the block closes the producer: its thread is gone afterwards
    return 0 if delivered == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
