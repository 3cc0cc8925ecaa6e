"""Transactional throughput: aiokprod vs aiokafka (and Java), committing every N records.

Standalone (not yet a row of the benchmark harness): both producers run one after the other
against the same broker and topic settings, each sending ``--records`` records of
``--value-bytes`` bytes in transactions of ``--per-txn`` records (send all, then commit),
best of ``--rounds``. Bounded: at most records x rounds per library.

    python -m benchmarks.txn_throughput --bootstrap 127.0.0.1:9092 --topic bench-txn

Prints one line per library: records/s and transactions/s. With ``--java-transaction-ms N``,
Apache Kafka's ``ProducerPerformance`` (from the cached jars of ``--kafka-version``) also
runs, committing every N ms (it cannot commit by count; pick N near the other clients' time
per transaction), with the same linger, batch size and idempotence.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
import warnings

from aiokprod import Producer

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from aiokafka import AIOKafkaProducer


async def run_aiokprod(
    bootstrap: str, topic: str, records: int, per_txn: int, value: bytes
) -> float:
    async with Producer(
        bootstrap, transactional_id=f"bench-{uuid.uuid4().hex[:8]}", linger_ms=5
    ) as producer:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        for first in range(0, records, per_txn):
            async with producer.transaction():
                for _ in range(min(per_txn, records - first)):
                    await producer.send(topic, value)
        return time.perf_counter() - start


async def run_aiokafka(
    bootstrap: str, topic: str, records: int, per_txn: int, value: bytes
) -> float:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"bench-{uuid.uuid4().hex[:8]}",
        enable_idempotence=True,
        linger_ms=5,
    )
    await producer.start()
    try:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        for first in range(0, records, per_txn):
            async with producer.transaction():
                for _ in range(min(per_txn, records - first)):
                    await producer.send(topic, value)
        return time.perf_counter() - start
    finally:
        await producer.stop()


def run_java(
    bootstrap: str, topic: str, records: int, value_bytes: int, transaction_ms: int, version: str
) -> str:
    """Apache Kafka's ProducerPerformance with ``--transaction-duration-ms``: its summary line."""
    import subprocess
    import tempfile
    from pathlib import Path

    from aiokprod.testing.distribution import ensure_distribution, ensure_tools_distribution
    from aiokprod.testing.java import java_tool_command

    dist = ensure_tools_distribution(ensure_distribution(version))
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "payload"
        payload.write_text("x" * value_bytes + "\n")
        args = [
            *("--topic", topic, "--num-records", str(records)),
            *("--payload-file", str(payload), "--throughput", "-1"),
            *("--bootstrap-server", bootstrap),
            *("--transaction-duration-ms", str(transaction_ms)),
            *("--transactional-id", f"bench-{uuid.uuid4().hex[:8]}"),
            *("--command-property", "linger.ms=5", "batch.size=16384"),
        ]
        command = java_tool_command(dist, "org.apache.kafka.tools.ProducerPerformance", args)
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else f"failed (exit {done.returncode}): {done.stderr[-500:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--per-txn", type=int, default=1_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--java-transaction-ms", type=int, default=0, help="0: no Java run")
    parser.add_argument("--kafka-version", default="4.4.0", help="the jars Java runs from")
    args = parser.parse_args()
    value = b"x" * args.value_bytes
    runners = {"aiokprod": run_aiokprod, "aiokafka": run_aiokafka}
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, runner in runners.items():
            seconds = asyncio.run(
                runner(args.bootstrap, args.topic, args.records, args.per_txn, value)
            )
            best[name] = min(best.get(name, seconds), seconds)
    for name, seconds in best.items():
        txns = -(-args.records // args.per_txn)
        print(
            f"{name}: {args.records / seconds:,.0f} records/s, {txns / seconds:,.1f} txn/s "
            f"(best of {args.rounds}, {args.records} x {args.value_bytes} B, "
            f"commit every {args.per_txn})"
        )
    if args.java_transaction_ms > 0:
        line = run_java(
            args.bootstrap,
            args.topic,
            args.records,
            args.value_bytes,
            args.java_transaction_ms,
            args.kafka_version,
        )
        print(f"java ProducerPerformance, commit every {args.java_transaction_ms} ms: {line}")


if __name__ == "__main__":
    main()
