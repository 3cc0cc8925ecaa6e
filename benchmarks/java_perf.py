"""Apache Kafka's own producer perf tool (``org.apache.kafka.tools.ProducerPerformance``).

It runs from the same jars as the broker, with the JVM flags ``kafka-producer-perf-test.sh``
uses (:func:`aiokprod.testing.java.java_tool_command`), as the reference for what the broker
can take from one client process. Its records have null keys and values picked from the same
pool as the Python clients (``--payload-file``). It times itself from its first send until
``close()`` returns (every record acknowledged).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aiokprod.testing import KafkaDistribution
from aiokprod.testing.java import java_tool_command

MAIN_CLASS = "org.apache.kafka.tools.ProducerPerformance"

_FINAL = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


def properties(settings: dict[str, Any]) -> list[str]:
    """The common settings as Java producer properties."""
    return [
        f"acks={settings['acks']}",
        f"linger.ms={settings['linger_ms']}",
        f"batch.size={settings['batch_size']}",
        f"compression.type={settings['compression']}",
        f"enable.idempotence={str(settings['idempotence']).lower()}",
        f"max.in.flight.requests.per.connection={settings['max_in_flight']}",
    ]


def command(
    dist: KafkaDistribution,
    bootstrap: str,
    topic: str,
    records: int,
    payload_file: Path,
    settings: dict[str, Any],
) -> list[str]:
    """The full ``java ...`` command line of one run."""
    args = [
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--payload-file",
        str(payload_file),
        "--throughput",
        "-1",
        "--bootstrap-server",
        bootstrap,
        "--command-property",
        *properties(settings),
    ]
    return java_tool_command(dist, MAIN_CLASS, args)


def parse(stdout: str) -> dict[str, Any]:
    """The tool's final summary line as a runner result (empty figures if it is missing)."""
    matches = list(_FINAL.finditer(stdout))
    if not matches:
        return {"sent": 0, "elapsed_s": 0.0, "errors": 0, "first_error": "no summary line"}
    final = matches[-1]
    sent = int(final["records"])
    rate = float(final["rate"])
    return {
        "sent": sent,
        "elapsed_s": sent / rate if rate else 0.0,
        "errors": 0,
        "first_error": "",
        "tool_records_per_s": rate,
        "tool_latency_ms": {
            "avg": float(final["avg"]),
            "max": float(final["max"]),
            "p50": int(final["p50"]),
            "p95": int(final["p95"]),
            "p99": int(final["p99"]),
            "p999": int(final["p999"]),
        },
    }
