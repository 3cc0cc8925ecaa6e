"""Keyed records land where the Java client would put them: checked against Kafka's own jar."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from aiokprod.internals.partitioner import PartitionChooser, murmur2
from aiokprod.testing import LocalKafkaError, kafka_classpath
from aiokprod.testing.pytest_plugin import in_ci

# Runs the Java client's own key partitioning (BuiltInPartitioner.partitionForKey, the code
# KafkaProducer uses for keyed records) for each hex-encoded key on stdin.
JAVA_SOURCE = """
import java.io.*;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class JavaPartitions {
    public static void main(String[] args) throws IOException {
        int[] counts = java.util.Arrays.stream(args).mapToInt(Integer::parseInt).toArray();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            out.append(Utils.murmur2(key));
            for (int n : counts) {
                out.append(' ').append(BuiltInPartitioner.partitionForKey(key, n));
            }
            out.append('\\n');
        }
        System.out.print(out);
    }
}
"""
PARTITION_COUNTS = (1, 2, 3, 6, 7, 12, 100, 1000)


def sample_keys() -> list[bytes]:
    rng = random.Random(20261121)
    keys = [f"key-{i}".encode() for i in range(1000)]
    keys += [f"user:{rng.randrange(10**9)}".encode() for _ in range(200)]
    keys += [rng.randbytes(rng.randrange(0, 70)) for _ in range(300)]
    keys += ["ключ-ü-🙂".encode(), b"\x00", b"\xff" * 7, b""]
    return keys


def run_java(tmp_path: Path, keys: list[bytes]) -> list[list[int]]:
    try:
        classpath = kafka_classpath()
    except LocalKafkaError as exc:
        if in_ci():
            pytest.fail(f"Kafka jars unavailable: {exc}")
        pytest.skip(f"Kafka jars unavailable: {exc}")
    source = tmp_path / "JavaPartitions.java"
    source.write_text(JAVA_SOURCE)
    done = subprocess.run(
        ["java", "-cp", classpath, str(source), *map(str, PARTITION_COUNTS)],
        input="\n".join(k.hex() for k in keys) + "\n",
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [list(map(int, line.split())) for line in done.stdout.splitlines()]
    assert len(rows) == len(keys)
    return rows


def test_keyed_partitions_match_the_java_client(tmp_path: Path) -> None:
    keys = sample_keys()
    java_rows = run_java(tmp_path, keys)
    chooser = PartitionChooser("builtin", batch_size=16384)
    mismatches: list[tuple[bytes, object, int, int]] = []
    for key, row in zip(keys, java_rows, strict=True):
        java_hash, java_partitions = row[0], row[1:]
        if murmur2(key) != java_hash:
            mismatches.append((key, "hash", murmur2(key), java_hash))
        for n, expected in zip(PARTITION_COUNTS, java_partitions, strict=True):
            ours, sticky = chooser.choose("t", key, n, list(range(n)))
            assert sticky is None
            if ours != expected:
                mismatches.append((key, n, ours, expected))
    assert mismatches == []
    # The comparison is not vacuous: Java spread the keys over most partitions.
    assert len({row[1 + PARTITION_COUNTS.index(1000)] for row in java_rows}) > 600


def test_the_spark_writers_column_partitions_match_the_java_client(tmp_path: Path) -> None:
    """``aiokprod/spark/keyed.py`` hashes a whole Arrow key column at once, with numpy."""
    pa = pytest.importorskip("pyarrow")
    from aiokprod.spark import keyed

    keys = sample_keys()
    keys += [f"k{i % 10_000}".encode() for i in range(0, 30_000, 7)]  # the benchmark's keys
    keys += [(i % 100_000).to_bytes(8, "big") for i in range(0, 300_000, 101)]
    java_rows = run_java(tmp_path, keys)
    column = pa.array(keys, pa.binary())
    assert keyed.murmur2(column).tolist() == [row[0] for row in java_rows]
    for at, count in enumerate(PARTITION_COUNTS, start=1):
        assert keyed.partitions(column, count).tolist() == [row[at] for row in java_rows]
    # a string column as Spark hands it over, viewed as binary (its UTF-8 bytes)
    six = {k: row[PARTITION_COUNTS.index(6) + 1] for k, row in zip(keys, java_rows, strict=True)}
    texts = [k.decode() for k in keys if k.isascii()] + ["ключ-ü-🙂"]
    as_binary = pa.array(texts, pa.string()).view(pa.binary())
    assert keyed.partitions(as_binary, 6).tolist() == [six[t.encode()] for t in texts]
