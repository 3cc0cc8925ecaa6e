"""``aiokprod produce`` and ``aiokprod perf`` as subprocesses against the local broker."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from readback import consume_all

from aiokprod.testing import LocalKafka

pytestmark = pytest.mark.timeout(120)


def aiokprod_command() -> list[str]:
    """The installed console script, or ``python -m aiokprod`` when it is not on PATH."""
    script = Path(sys.executable).with_name("aiokprod")
    if script.exists():
        return [str(script)]
    found = shutil.which("aiokprod")
    return [found] if found else [sys.executable, "-m", "aiokprod"]


def run(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [*aiokprod_command(), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return completed


def test_produce_lines_from_stdin_with_keys_and_headers(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    lines = [f"user-{i % 4}:event {i}" for i in range(500)] + ["user-9:value:with:colons", "k:"]
    result = run(
        "produce",
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "-H",
        "empty=",
        "-X",
        "linger.ms=20",
        "-X",
        "enable_idempotence=true",
        stdin=("\r\n".join(lines) + "\n").encode(),
    )
    assert result.returncode == 0, result.stderr
    assert re.search(rf"produced 502 record\(s\) to '{topic}', 0 failed", result.stdout)

    records = consume_all(kafka.bootstrap_servers, topic, expected=502, timeout_s=30)
    assert len(records) == 502
    got = sorted((r.key, r.value) for r in records)
    expected = sorted(
        (line.split(":", 1)[0].encode(), line.split(":", 1)[1].encode()) for line in lines
    )
    assert got == expected
    assert all(r.headers == (("source", b"cli"), ("empty", b"")) for r in records)
    # same key, same partition
    partitions: dict[bytes | None, set[int]] = {}
    for r in records:
        partitions.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in partitions.values())


def test_produce_from_a_file_and_errors(kafka: LocalKafka, new_topic, tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    data = tmp_path / "lines.txt"
    data.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    env = {"KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}  # no --bootstrap-servers
    result = run("produce", "--topic", topic, "--file", str(data), "--quiet", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    records = consume_all(kafka.bootstrap_servers, topic, expected=1000, timeout_s=30)
    assert [r.value for r in records] == [b"line %d" % i for i in range(1000)]
    assert all(r.key is None for r in records)

    # a line without the separator stops the run; what came before it was delivered
    bad = run("produce", "-t", topic, "-K", "=", stdin=b"a=1\nno separator\nb=2\n", env=env)
    assert bad.returncode == 1
    assert "line 2 has no key separator '='" in bad.stderr
    assert "produced 1 record(s)" in bad.stdout
    assert "1 not sent (line 2: no key separator '='; the run stopped there)" in bad.stdout

    # a topic that does not exist (auto-creation off): a clear error, exit code 1
    missing = run(
        "produce",
        "-t",
        f"missing-{topic}",
        "-X",
        "allow_auto_create_topics=false",
        "-X",
        "max_block_ms=1000",
        stdin=b"x\n",
        env=env,
    )
    assert missing.returncode == 1
    assert "MetadataTimeoutError" in missing.stderr
    # the summary agrees with the exit code (issue 39: it said "0 failed" only)
    assert missing.stdout.startswith(
        f"produced 0 record(s) to 'missing-{topic}', 0 failed, 1 not sent (line 1: "
        "MetadataTimeoutError; the run stopped there)"
    )

    # bad options are usage errors (exit code 2) naming the option
    unknown = run("produce", "-t", topic, "-X", "lingerms=5", stdin=b"", env=env)
    assert unknown.returncode == 2
    assert "did you mean linger_ms" in unknown.stderr
    wrong = run("produce", "-t", topic, "-X", "batch_size=-4", stdin=b"", env=env)
    assert wrong.returncode == 2
    assert "batch_size" in wrong.stderr


def test_perf_reports_throughput_and_latency(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=6)
    result = run(
        "perf",
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--num-records",
        "50000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--progress-interval",
        "0",
        "-X",
        "linger_ms=5",
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    summary = re.fullmatch(
        r"50000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, "
        r"[\d.]+ ms 99.9th\.\n",
        result.stdout,
    )
    assert summary, result.stdout
    assert result.stderr == ""  # no progress with an interval of 0
    assert len(consume_all(kafka.bootstrap_servers, topic, expected=50000, timeout_s=60)) == 50000


def test_perf_progress_is_one_line_per_interval_off_a_terminal(
    kafka: LocalKafka, new_topic
) -> None:
    # Capped at 20,000/s, 10,000 records take at least 0.5 s: progress every 0.1 s has lines
    # to show however fast the machine is (uncapped, a fast run could end before the first
    # interval and show none: CI saw it).
    topic = new_topic(partitions=2)
    result = run(
        "perf",
        "-b",
        kafka.bootstrap_servers,
        "-t",
        topic,
        "-n",
        "10000",
        "-s",
        "100",
        "--throughput",
        "20000",
        "--progress-interval",
        "0.1",
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) >= 2, result.stderr
    line = (
        r"[\d,]+/10,000 acked \([\d,]+ sent\), [\d,]+ records/s \([\d.]+ MB/s\), "
        r"[\d.]+ ms avg latency, [\d.]+ ms max"
    )
    assert all(re.fullmatch(line, text) for text in lines), result.stderr
    assert "\r" not in result.stderr  # no redrawn line, no bar, off a terminal
    assert "#" not in result.stderr


def test_perf_throughput_cap_and_json(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=1)
    result = run(
        "perf",
        "-b",
        kafka.bootstrap_servers,
        "-t",
        topic,
        "-n",
        "1500",
        "-s",
        "10",
        "--throughput",
        "1000",
        "--json",
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["records_acked"] == 1500
    assert summary["records_failed"] == 0
    # 1,500 records at 1,000/s cannot finish in much less than 1.5 s
    assert summary["elapsed_s"] >= 1.3
    assert summary["records_per_s"] <= 1150
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p99_ms"] <= summary["latency_max_ms"]
    assert result.stderr == ""
