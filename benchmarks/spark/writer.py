"""``python -m benchmarks.spark.writer``: the data source's task without Spark.

Feeds :class:`aiokprod.spark.partition_writer.PartitionWriter` (what one Spark task runs)
Arrow batches built in this process and reports, per million records, the CPU seconds this
process (the producer) and the broker spent, and the producer's Produce request count. With
``--java`` Apache Kafka's own perf tool (``ProducerPerformance``, the Java client Spark's sink
uses) writes the same number of records to the same broker, interleaved, so the broker's CPU
per record can be compared between the two clients. ``--tasks N`` splits the rows into N
tasks (writes) one after another, each with its own producer as before issue 37, or with
``--keep`` with the producer a Spark worker keeps for its tasks
(:mod:`aiokprod.spark.kept_producer`). Settings as ``benchmarks.spark``:
acks=all, idempotence on, linger 5 ms, batch 16 KiB; a fresh 6-partition topic per run,
created before the first run.

This is a measuring tool for the speed work (issue 14), not part of the suite's table.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.spark.append import arrow_batches

SETTINGS = {"acks": "all", "enable_idempotence": True, "linger_ms": 5, "batch_size": 16384}
JAVA_SETTINGS = ["acks=all", "enable.idempotence=true", "linger.ms=5", "batch.size=16384"]
TOPIC_SETTLE_S = 3.0


def _cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _aiokprod(
    bootstrap: str, topic: str, batches: list[Any], tasks: int = 1, keep: bool = False
) -> dict[str, Any]:
    """The batches as ``tasks`` tasks (``PartitionWriter.write`` calls) one after another."""
    from aiokprod.lifecycle import ProducerLifecycle
    from aiokprod.producer import Producer
    from aiokprod.spark import kept_producer
    from aiokprod.spark.partition_writer import PartitionWriter

    seen: dict[int, float] = {}  # request-total per producer, at its last flush
    flush, close = Producer.flush, Producer.close
    kept = kept_producer._slot.producer  # a producer kept from the previous run
    start = {} if kept is None else {id(kept): kept.metrics()["request-total"]}

    async def flush_and_count(self: Producer, timeout: float | None = None) -> None:
        await flush(self, timeout)
        seen[id(self)] = self.metrics()["request-total"]

    # close()'s own signature (ProducerLifecycle.close); installed on Producer only, below
    async def close_and_count(self: ProducerLifecycle, timeout: float | None = None) -> None:
        assert isinstance(self, Producer)
        await self.flush()
        await close(self, timeout)

    each = -(-len(batches) // tasks)
    results = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    Producer.flush = flush_and_count  # type: ignore[method-assign]
    Producer.close = close_and_count  # type: ignore[method-assign]
    try:
        writer = PartitionWriter(bootstrap, SETTINGS, topic, keep_producer=keep)
        for task in range(tasks):
            results.append(writer.write(task, batches[task * each : (task + 1) * each]))
    finally:
        Producer.flush, Producer.close = flush, close  # type: ignore[method-assign]
    after = resource.getrusage(resource.RUSAGE_SELF)
    delivered, rows = sum(r.delivered for r in results), sum(r.rows for r in results)
    return {
        "ok": all(r.ok for r in results),
        "summary": results[0].summary()
        if tasks == 1
        else f"{tasks} tasks{' (kept producer)' if keep else ''}: {delivered} of {rows} delivered",
        "client_user_s": after.ru_utime - before.ru_utime,
        "client_sys_s": after.ru_stime - before.ru_stime,
        "client_faults": after.ru_minflt - before.ru_minflt,
        "requests": sum(v - start.get(k, 0.0) for k, v in seen.items()),
    }


def _java(kafka: Any, topic: str, rows: int, payload: Path) -> dict[str, Any]:
    from aiokprod.testing.java import java_tool_command

    args = ["--topic", topic, "--num-records", str(rows), "--payload-file", str(payload)]
    args += ["--throughput", "-1", "--print-metrics", "--bootstrap-server"]
    args += [kafka.bootstrap_servers, "--producer-props", *JAVA_SETTINGS]
    command = java_tool_command(
        kafka.tools_distribution, "org.apache.kafka.tools.ProducerPerformance", args
    )
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True).stdout
    requests = re.search(r"producer-metrics:request-total:\{[^}]*\}\s*:\s*([\d.]+)", out)
    return {
        "ok": " records sent, " in out,
        "summary": [ln for ln in out.splitlines() if " records sent, " in ln][-1][:100],
        "requests": float(requests.group(1)) if requests else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark.writer", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per Arrow batch")
    parser.add_argument("--warmup-rows", type=int, default=300_000)
    parser.add_argument("--java", action="store_true", help="also run the Java perf tool")
    parser.add_argument(
        "--keys", default="none", choices=("none", "string", "binary"), help="a key column"
    )
    parser.add_argument("--tasks", type=int, default=1, help="tasks the rows are split into")
    parser.add_argument(
        "--keep", action="store_true", help="the tasks use the kept producer (as in Spark)"
    )
    args = parser.parse_args(argv)

    from aiokprod.testing import LocalKafka

    batches = arrow_batches(args.rows, args.size, args.batch_rows, args.keys)
    warmup = arrow_batches(args.warmup_rows, args.size, args.batch_rows, args.keys)
    clients = ("aiokprod", "java") if args.java else ("aiokprod",)
    with tempfile.TemporaryDirectory(prefix="aiokprod-writer-bench-") as tmp:
        payload = Path(tmp) / "payload.txt"
        payload.write_text("\n".join(str(i).rjust(args.size, "x") for i in range(1000)))
        with LocalKafka(heap_max="1g") as kafka:
            broker = kafka.node(next(iter(kafka.nodes))).pid
            if broker is None:
                raise SystemExit("the broker's JVM is not running")
            topics = {
                (c, rep): f"writer-{c}-{rep}-{uuid.uuid4().hex[:6]}"
                for c in clients
                for rep in range(-1, args.reps)
            }
            for topic in topics.values():
                kafka.create_topic(topic, 6)
            time.sleep(TOPIC_SETTLE_S)
            for rep in range(-1, args.reps):  # rep -1: warm-up (broker JIT), not reported
                order = clients if rep % 2 == 0 else clients[::-1]
                for client in order:
                    topic = topics[client, rep]
                    rows = args.warmup_rows if rep < 0 else args.rows
                    broker_before = _cpu(broker)
                    started = time.perf_counter()
                    if client == "java":
                        run = _java(kafka, topic, rows, payload)
                    else:
                        run = _aiokprod(
                            kafka.bootstrap_servers,
                            topic,
                            warmup if rep < 0 else batches,
                            args.tasks,
                            args.keep,
                        )
                    seconds = time.perf_counter() - started
                    user, system = (a - b for a, b in zip(_cpu(broker), broker_before, strict=True))
                    if rep < 0:
                        continue
                    per_m = 1e6 / rows
                    each = rows / max(run["requests"], 1)
                    line = (
                        f"{client:8} rep {rep}: {seconds:6.2f} s wall; broker CPU s/1M user "
                        f"{user * per_m:.2f} sys {system * per_m:.2f}; "
                        f"{run['requests']:,.0f} Produce requests ({each:,.0f} records each)"
                    )
                    if client == "aiokprod":
                        line += (
                            f"; client CPU s/1M user {run['client_user_s'] * per_m:.2f} "
                            f"sys {run['client_sys_s'] * per_m:.2f}, "
                            f"{run['client_faults'] * per_m:,.0f} page faults/1M"
                        )
                    print(f"{line}; load {os.getloadavg()[0]:.1f}; {run['summary']}", flush=True)
            if args.keep:
                from aiokprod.spark.kept_producer import drop_kept

                drop_kept()  # before the broker stops
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
