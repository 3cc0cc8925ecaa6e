"""examples/exactly_once.py: crash midway, restart, and every input record is output once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer as ConfluentProducer
from txn_readback import read_committed

from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import NewTopic

pytestmark = pytest.mark.timeout(300)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "exactly_once.py"
RECORDS = 400


def run_example(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
        check=False,
    )


def test_exactly_once_after_a_crash(kafka: LocalKafka, new_topic: NewTopic) -> None:
    source, sink = new_topic(partitions=2), new_topic(partitions=3)
    producer = ConfluentProducer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(source, value=f"in-{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0

    crashed = run_example(kafka.bootstrap_servers, source, sink, "--crash-after", "2")
    assert crashed.returncode == 3, crashed.stderr
    # The crashed run left output records of its open transaction in the log, uncommitted,
    # and two committed transactions.
    partial = read_committed(kafka.bootstrap_servers, sink, partitions=3)
    assert 0 < len(partial) < RECORDS

    finished = run_example(kafka.bootstrap_servers, source, sink)
    assert finished.returncode == 0, finished.stderr

    values = read_committed(kafka.bootstrap_servers, sink, partitions=3)
    counts = Counter(values)
    expected = {f"processed:in-{i}".encode() for i in range(RECORDS)}
    assert set(counts) == expected, f"missing {len(expected - set(counts))}"
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
