"""``python -m benchmarks.spark.writer``: the data source's task without Spark.

Feeds :class:`aiokprod.spark.partition_writer.PartitionWriter` (what one Spark task runs)
Arrow batches built in this process and reports, per million records, the CPU seconds this
process (the producer) and the broker spent, and the producer's Produce request count. With
``--java`` Apache Kafka's own perf tool (``ProducerPerformance``, the Java client Spark's sink
uses) writes the same number of records to the same broker, interleaved, so the broker's CPU
per record can be compared between the two clients. Settings as ``benchmarks.spark``:
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


def _aiokprod(bootstrap: str, topic: str, batches: list[Any]) -> dict[str, Any]:
    from aiokprod.lifecycle import ProducerLifecycle
    from aiokprod.producer import Producer
    from aiokprod.spark.partition_writer import PartitionWriter

    seen: dict[str, float] = {}
    close = Producer.close

    # close()'s own signature (ProducerLifecycle.close); installed on Producer only, below
    async def close_and_count(self: ProducerLifecycle, timeout: float | None = None) -> None:
        assert isinstance(self, Producer)
        await self.flush()
        seen.update(self.metrics())
        await close(self, timeout)

    before = resource.getrusage(resource.RUSAGE_SELF)
    Producer.close = close_and_count  # type: ignore[method-assign]
    try:
        result = PartitionWriter(bootstrap, SETTINGS, topic).write(0, batches)
    finally:
        Producer.close = close  # type: ignore[method-assign]
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "ok": result.ok,
        "summary": result.summary(),
        "client_user_s": after.ru_utime - before.ru_utime,
        "client_sys_s": after.ru_stime - before.ru_stime,
        "client_faults": after.ru_minflt - before.ru_minflt,
        "requests": seen.get("request-total", 0.0),
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
                            kafka.bootstrap_servers, topic, warmup if rep < 0 else batches
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
