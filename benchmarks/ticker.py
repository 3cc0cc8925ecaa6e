"""How late a 1 ms ticker runs beside a producer on a real broker (issue 30).

One producer on the event loop (the defaults: acks=all, idempotence on, ``linger_ms=5``)
offers keyed 100 B records at a steady rate (2,000/s by default, for 12 s; a callback per
record), while a ticker task sleeps 1 ms over and over and records how late each wake-up
is: what a web handler sharing the loop would wait. Rows (a single local Kafka, started
here unless ``--bootstrap``):

- ``6``: a 6-partition topic, ``metadata_max_age_ms=1000``;
- ``8k-warm``: an 8,000-partition topic, warmed (one record to every partition first),
  ``metadata_max_age_ms`` 300,000 (the default) and 1,000 (a refresh every second);
- ``8k-fresh``: a new 8,000-partition topic (created, writable, never written), default
  refreshes: the broker is slow at each partition's first append, records queue up over
  thousands of partitions.

- ``storm-gssapi``, ``storm-gssapi-inline``, ``storm-scram``, ``storm-plain``: no records,
  50 connections authenticating at once (:mod:`benchmarks.auth_storm`; on a local Kafka with
  GSSAPI listeners and an MIT KDC, which is then started instead).

Per row: the ticker's worst and p99 lateness, records delivered within the window and by
the end (a flush of at most 60 s), and the producer process's CPU. Run it with one build
after the other (``.venv/bin/python`` / ``.venv-mypyc/bin/python``), on the same broker::

    .venv/bin/python -m benchmarks.ticker                        # starts a local Kafka
    .venv/bin/python -m benchmarks.ticker --bootstrap 127.0.0.1:9092 --rows 6,8k-warm-1000 \
        --small tick6 --large tick8k          # topics made once, for runs of other builds

Not a test: it asserts nothing. The machine's load moves every figure: read rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from aiokprod import Producer
from aiokprod.testing.sim.scale import CALLER, LoopTimer

TICK_S = 0.001
VALUE = b"v" * 100


@dataclass
class TickerRow:
    """One run's figures."""

    row: str
    partitions: int
    metadata_max_age_ms: int
    offered: int = 0
    delivered_in_window: int = 0
    delivered: int = 0
    failed: int = 0
    worst_ms: float = 0.0
    p99_ms: float = 0.0
    p50_ms: float = 0.0
    ticks: int = 0
    cpu_s: float = 0.0
    load: float = 0.0
    #: The producer's longest callback (its tasks' steps, its connections' arrivals), in
    #: CPU and wall-clock time, and what it was: what preemption cannot inflate.
    step_cpu_ms: float = 0.0
    step_wall_ms: float = 0.0
    step: str = ""
    #: The offering task's longest step (its send() calls).
    caller_step_cpu_ms: float = 0.0


async def measure(
    timer: LoopTimer,
    bootstrap: str,
    topic: str,
    partitions: int,
    max_age_ms: int,
    *,
    warm: bool,
    row: str,
    seconds: float,
    rate: int,
) -> TickerRow:
    """Offer ``rate`` keyed records a second for ``seconds`` with the ticker running."""
    out = TickerRow(row, partitions, max_age_ms, load=os.getloadavg()[0])
    # The producer's defaults (acks=all, idempotence on) but for the refresh period.
    async with Producer(bootstrap, linger_ms=5, metadata_max_age_ms=max_age_ms) as producer:
        await producer.partitions_for(topic)
        if warm:
            for p in range(partitions):
                await producer.send(topic, VALUE, partition=p)
            await producer.flush()
        lateness: list[float] = []
        stop = False
        delivered = failed = 0

        def on_delivery(future: Any) -> None:
            nonlocal delivered, failed
            if future.exception() is None:
                delivered += 1
            else:
                failed += 1

        async def ticker() -> None:
            while not stop:
                began = time.perf_counter()
                await asyncio.sleep(TICK_S)
                lateness.append(time.perf_counter() - began - TICK_S)

        task = asyncio.create_task(ticker(), name="ticker")
        current = asyncio.current_task()
        if current is not None:
            current.set_name(CALLER)  # its steps are the caller's (LoopTimer)
        await asyncio.sleep(0)
        timer.reset()
        cpu = time.process_time()
        began = time.perf_counter()
        count = int(seconds * rate)
        for i in range(count):
            due = began + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            key = b"key-%08d" % i
            (await producer.send(topic, VALUE, key=key)).add_done_callback(on_delivery)
        left = began + seconds - time.perf_counter()
        if left > 0:
            await asyncio.sleep(left)
        stop = True
        await task
        out.step_cpu_ms = timer.producer.max_cpu_s * 1000
        out.step_wall_ms = timer.producer.max_wall_s * 1000
        out.step = timer.producer.slowest_cpu
        out.caller_step_cpu_ms = timer.caller.max_cpu_s * 1000
        out.delivered_in_window = delivered
        try:
            await producer.flush(60)
        except Exception as exc:  # noqa: BLE001 - reported: what did not arrive is the result
            print(f"{row}: flush: {exc}", file=sys.stderr)
        out.cpu_s = time.process_time() - cpu
        out.offered = count
        out.delivered, out.failed = delivered, failed
    lateness.sort()
    if lateness:
        out.ticks = len(lateness)
        out.worst_ms = lateness[-1] * 1000
        out.p99_ms = lateness[min(len(lateness) - 1, len(lateness) * 99 // 100)] * 1000
        out.p50_ms = statistics.median(lateness) * 1000
    return out


class Topics:
    """Creates, waits for and deletes the benchmark's topics on any broker (admin client)."""

    def __init__(self, bootstrap: str) -> None:
        from benchmarks.harness import ConfluentTopicAdmin

        self.bootstrap = bootstrap
        self.admin = ConfluentTopicAdmin()

    def create(self, name: str, partitions: int) -> str:
        """Create ``name`` and wait until every partition answers ListOffsets (writable)."""
        self.admin.create(self.bootstrap, name, partitions, 1, {}, timeout=300)
        deadline = time.monotonic() + 300
        while True:
            try:
                self.admin.high_watermarks(self.bootstrap, name, partitions, attempts=1)
                return name
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def delete(self, name: str) -> None:
        """Delete ``name``."""
        self.admin.delete(self.bootstrap, name, timeout=300)


ROWS = ("6", "8k-warm-300000", "8k-warm-1000", "8k-fresh")


def run_row(topics: Topics, row: str, small: str, large: str, args: Any) -> TickerRow:
    """One row (see the module docstring), its loop's callbacks timed."""
    with LoopTimer() as timer:
        return _run_row(timer, topics, row, small, large, args)


def _run_row(
    timer: LoopTimer, topics: Topics, row: str, small: str, large: str, args: Any
) -> TickerRow:
    bootstrap = topics.bootstrap
    if row == "6":
        return asyncio.run(
            measure(
                timer,
                bootstrap,
                small,
                6,
                1000,
                warm=False,
                row=row,
                seconds=args.seconds,
                rate=args.rate,
            )
        )
    if row.startswith("8k-warm-"):
        age = int(row.rsplit("-", 1)[1])
        return asyncio.run(
            measure(
                timer,
                bootstrap,
                large,
                8000,
                age,
                warm=True,
                row=row,
                seconds=args.seconds,
                rate=args.rate,
            )
        )
    if row == "8k-fresh":
        fresh = topics.create(f"tickfresh-{uuid.uuid4().hex[:6]}", 8000)
        try:
            return asyncio.run(
                measure(
                    timer,
                    bootstrap,
                    fresh,
                    8000,
                    300_000,
                    warm=False,
                    row=row,
                    seconds=args.seconds,
                    rate=args.rate,
                )
            )
        finally:
            topics.delete(fresh)
    raise SystemExit(f"no row {row!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=None, help="an existing broker (else start one)")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row")
    parser.add_argument("--small", default=None, help="an existing 6-partition topic")
    parser.add_argument("--large", default=None, help="an existing 8,000-partition topic")
    parser.add_argument("--json", default=None)
    parser.add_argument("--connections", type=int, default=50, help="of the storm rows")
    args = parser.parse_args()
    from aiokprod.testing import LocalKafka

    rows = args.rows.split(",")
    storms = [row for row in rows if row.startswith("storm-")]
    if storms:
        run_storms(storms, args.connections, args.repeat)
        rows = [row for row in rows if row not in storms]
        if not rows:
            return
    kafka = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        kafka = LocalKafka(heap_max="1g").start()
        bootstrap = kafka.bootstrap_servers
    results: list[TickerRow] = []
    topics = Topics(bootstrap)
    try:
        small = args.small or topics.create(f"tick6-{uuid.uuid4().hex[:6]}", 6)
        large = args.large or topics.create(f"tick8k-{uuid.uuid4().hex[:6]}", 8000)
        for _ in range(args.repeat):
            for row in rows:
                r = run_row(topics, row, small, large, args)
                results.append(r)
                print(
                    f"{r.row:>16}: worst {r.worst_ms:7.1f} ms, p99 {r.p99_ms:6.1f} ms, "
                    f"p50 {r.p50_ms:5.2f} ms; delivered {r.delivered_in_window:,} in the "
                    f"window, {r.delivered:,} of {r.offered:,} in all ({r.failed} failed); "
                    f"CPU {r.cpu_s:.1f} s; load {r.load:.1f}; longest producer step "
                    f"{r.step_cpu_ms:.1f} ms CPU / {r.step_wall_ms:.1f} ms wall ({r.step}), "
                    f"caller {r.caller_step_cpu_ms:.1f} ms",
                    flush=True,
                )
    finally:
        topics.admin.close()
        if kafka is not None:
            kafka.stop()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in results], out, indent=2)


def run_storms(rows: list[str], connections: int, repeat: int) -> None:
    """The storm rows, on a Kerberos-enabled local Kafka of their own."""
    from benchmarks.auth_storm import describe, run_storm_row, start_kerberos_kafka

    kafka = start_kerberos_kafka()
    try:
        topic = f"storm-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, 6)
        for _ in range(repeat):
            for row in rows:
                print(describe(run_storm_row(kafka, row, topic, connections)), flush=True)
    finally:
        kafka.stop()


if __name__ == "__main__":
    main()
