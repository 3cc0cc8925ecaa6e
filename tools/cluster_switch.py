"""The cluster behind the bootstrap address is replaced: what the producer does (issue 29).

``python tools/cluster_switch.py [--before-s 5] [--after-s 20] [--rate 1000] [--json]``

Two fresh single-node Apache Kafka clusters, A and B, each with the topic; a
:class:`~aiokprod.testing.TcpForwarder` is the producer's only bootstrap address and leads to
A. An aiokprod producer (default options: idempotent, acks=all) sends keyed records at
``--rate`` per second, plus a ``send_and_wait`` every 200 ms. After ``--before-s`` seconds A is
killed and the forwarder switched to B: the whole cluster replaced behind one address (new
cluster id, a new broker port). ``--other-after-s`` seconds after the switch, another
service's idempotent producer (confluent-kafka / librdkafka) starts on B and sends
``--other-records`` records. After ``--after-s`` seconds the producer is flushed and closed,
A is started again (to read its log), and both clusters are read back with librdkafka.

Printed: the time from the switch to the first acknowledgement from B ("recovery"), the
records acknowledged, failed and left pending, duplicates within each cluster, records in
both clusters (sent to A with an unknown outcome, written again to B), records acknowledged
but in neither ("lost"), what the other producer saw, and the producer's WARNING lines about
the cluster change. Bounded: two broker starts, ``before + after`` seconds of traffic, one
restart and the read-back (about a minute with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka import Producer as RdKafkaProducer

from aiokprod import Producer
from aiokprod.testing import LocalKafka
from aiokprod.testing.forwarder import TcpForwarder

TOPIC = "switched"
KEYS = 100


@dataclass
class Outcome:
    """The figures of one run."""

    sent: int = 0
    acked: int = 0
    failed: int = 0
    pending: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    recovery_s: float | None = None
    in_a: int = 0
    in_b: int = 0
    duplicated_in_a: int = 0
    duplicated_in_b: int = 0
    in_both: int = 0
    lost: int = 0
    other_sent: int = 0
    other_delivered: int = 0
    other_errors: dict[str, int] = field(default_factory=dict)
    other_in_b: int = 0
    warnings: list[str] = field(default_factory=list)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name} {record.getMessage()}")


def _start_both() -> tuple[LocalKafka, LocalKafka]:
    clusters = [LocalKafka(), LocalKafka()]
    errors: list[BaseException] = []

    def start(kafka: LocalKafka) -> None:
        try:
            kafka.start()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(k,)) for k in clusters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for kafka in clusters:
            kafka.stop()
        raise errors[0]
    return clusters[0], clusters[1]


def _other_producer(bootstrap: str, count: int, out: Outcome) -> None:
    """Another service's idempotent producer (librdkafka) on the new cluster."""
    producer = RdKafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: Counter[str] = Counter()

    def report(err: Any, msg: Any) -> None:
        if err is None:
            out.other_delivered += 1
        else:
            try:
                errors[str(err.name())] += 1
            except SystemError:  # librdkafka after a fatal error
                errors["error after the fatal one"] += 1

    try:
        for i in range(count):
            value, key = f"other:{i}".encode(), f"o{i % KEYS}".encode()
            producer.produce(TOPIC, value, key=key, on_delivery=report)
            out.other_sent += 1
            producer.poll(0)
        producer.flush(30)
    except Exception as exc:  # noqa: BLE001 - a fatal error stops it: counted
        errors[f"raised {type(exc).__name__}: {str(exc)[:120]}"] += 1
    out.other_errors = dict(errors)


def _read_all(bootstrap: str, partitions: int, timeout_s: float = 60.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"readback-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(at_eof) < partitions:
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition() or 0)
                        continue
                    raise RuntimeError(f"read-back error: {err}")
                at_eof.discard(msg.partition() or 0)
                values.append(msg.value() or b"")
    finally:
        consumer.close()
    return values


async def run(args: argparse.Namespace) -> Outcome:
    """Start both clusters, run the traffic and the switch, read both back, count."""
    out = Outcome()
    handler = _Warnings()
    logging.getLogger("aiokprod").addHandler(handler)
    a, b = await asyncio.to_thread(_start_both)
    try:
        for kafka in (a, b):
            await asyncio.to_thread(kafka.create_topic, TOPIC, args.partitions)
        await _traffic(args, a, b, out)
        # A again, with its data, to read what reached it.
        node_id = next(iter(a.nodes))
        await asyncio.to_thread(a.start_node, node_id)
        values_a = await asyncio.to_thread(_read_all, a.bootstrap_servers, args.partitions)
        values_b = await asyncio.to_thread(_read_all, b.bootstrap_servers, args.partitions)
    finally:
        logging.getLogger("aiokprod").removeHandler(handler)
        a.stop()
        b.stop()
    _count(out, values_a, values_b)
    out.warnings = handler.lines
    return out


async def _traffic(args: argparse.Namespace, a: LocalKafka, b: LocalKafka, out: Outcome) -> None:
    acked_at: dict[int, float] = {}
    failed: dict[int, str] = {}
    futures: list[asyncio.Future[Any]] = []
    switch_at = [0.0]
    first_after = [0]
    async with TcpForwarder(a.bootstrap_servers) as forwarder:
        producer = Producer(forwarder.bootstrap_servers)
        await producer.start()

        def track(n: int, future: Any) -> None:
            def done(f: Any) -> None:
                error = f.exception()
                if error is None:
                    acked_at[n] = time.monotonic()
                else:
                    failed[n] = type(error).__name__

            future.add_done_callback(done)
            futures.append(future)

        async def send_and_wait(n: int) -> None:
            try:
                await producer.send_and_wait(TOPIC, str(n).encode(), key=f"k{n % KEYS}".encode())
            except Exception as exc:  # noqa: BLE001 - counted
                failed[n] = type(exc).__name__
            else:
                acked_at[n] = time.monotonic()

        waits: list[asyncio.Task[None]] = []
        start = time.monotonic()
        end = start + args.before_s + args.after_s
        other: asyncio.Task[None] | None = None
        n = 0
        tick_s = 0.005
        next_wait = start
        while (now := time.monotonic()) < end:
            if not switch_at[0] and now >= start + args.before_s:
                node_id = next(iter(a.nodes))
                a.kill_node(node_id)  # the old cluster is gone ...
                forwarder.switch_to(b.bootstrap_servers)  # ... and the address leads to B
                switch_at[0] = time.monotonic()
                first_after[0] = n
            if (
                other is None
                and switch_at[0]
                and now >= switch_at[0] + args.other_after_s
                and args.other_records
            ):
                other = asyncio.create_task(
                    asyncio.to_thread(_other_producer, b.bootstrap_servers, args.other_records, out)
                )
            due = int((now - start) * args.rate) - n
            for _ in range(max(due, 0)):
                future = await producer.send(TOPIC, str(n).encode(), key=f"k{n % KEYS}".encode())
                track(n, future)
                n += 1
            if now >= next_wait:
                waits.append(asyncio.create_task(send_and_wait(n)))
                n += 1
                next_wait += 0.2
            await asyncio.sleep(tick_s)
        out.sent = n
        try:
            await producer.flush(30)
        except Exception as exc:  # noqa: BLE001 - pending records are counted below
            print(f"flush: {exc!r}", file=sys.stderr)
        out.pending = sum(1 for f in futures if not f.done()) + sum(
            1 for w in waits if not w.done()
        )
        await producer.close(10)
        await asyncio.gather(*waits, return_exceptions=True)
        if other is not None:
            await other
    out.acked = len(acked_at)
    out.failed = len(failed)
    out.errors = dict(Counter(failed.values()))
    # The first acknowledgement of a record sent after the switch: only B can give it.
    after = [t for m, t in acked_at.items() if m >= first_after[0]]
    out.recovery_s = round(min(after) - switch_at[0], 2) if after else None
    _acked.clear()
    _acked.update(acked_at)


_acked: dict[int, float] = {}


def _count(out: Outcome, values_a: list[bytes], values_b: list[bytes]) -> None:
    ours_a = Counter(int(v) for v in values_a if not v.startswith(b"other:"))
    ours_b = Counter(int(v) for v in values_b if not v.startswith(b"other:"))
    out.other_in_b = sum(1 for v in values_b if v.startswith(b"other:"))
    out.in_a = sum(ours_a.values())
    out.in_b = sum(ours_b.values())
    out.duplicated_in_a = sum(c - 1 for c in ours_a.values() if c > 1)
    out.duplicated_in_b = sum(c - 1 for c in ours_b.values() if c > 1)
    out.in_both = len(ours_a.keys() & ours_b.keys())
    out.lost = sum(1 for n in _acked if n not in ours_a and n not in ours_b)


def main() -> int:
    """Parse the options, run once, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-s", type=float, default=5.0, help="traffic before the switch")
    parser.add_argument("--after-s", type=float, default=20.0, help="traffic after the switch")
    parser.add_argument("--rate", type=int, default=1000, help="records per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--other-after-s", type=float, default=5.0)
    parser.add_argument("--other-records", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.before_s + args.after_s > 300:
        parser.error("keep it bounded: before + after at most 300 s")
    out = asyncio.run(run(args))
    if args.json:
        print(json.dumps(asdict(out)))
        return 0
    for key, value in asdict(out).items():
        if key != "warnings":
            print(f"{key:>16}: {value}")
    print("producer warnings:")
    for line in out.warnings:
        print(f"  {line[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
