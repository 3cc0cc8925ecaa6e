"""``python -m benchmarks.spark``: Spark's Kafka sink vs the ``aiokprod`` data source.

One local broker (``aiokprod.testing``), one SparkSession on ``local[2]`` holding both sinks;
each workload writes a DataFrame of ``spark.range(n, numPartitions=8)`` with a binary
``value`` of the stated size into a fresh 6-partition topic, the sinks interleaved (the
order alternates per repetition), after one warm-up write of each (``--warmup-rows``).
Both sinks run with acks=all, idempotence on, linger 5 ms, batch 16 KiB. Every run's
record count is checked with confluent-kafka (the topic's high watermarks). Results: a
Markdown table on stdout and JSON in ``benchmarks/results/spark-<name>.json``.

Every run's topic is created before the workload's first run and the benchmark waits
``TOPIC_SETTLE_S`` before writing: a topic written the moment it exists can answer
NOT_LEADER_OR_FOLLOWER for a while, which measures topic creation, not the sink (and can
stall aiokprod's idempotent retries; see the issue 14 speed report).

``--arrow-batch-rows`` sets ``spark.sql.execution.arrow.maxRecordsPerBatch`` (default 10000)
for the session: it changes the Arrow paths (``aiokprod`` and ``arrow-floor``), not Spark's
own sink, which reads rows in the JVM.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.spark.jars import SPARK_KAFKA_VERSION, ensure_jars

WORKLOADS = {"100B": (1_000_000, 100), "1KiB": (500_000, 1024)}
COMMON = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5", "batch.size": "16384"}
SINKS = ("kafka", "aiokprod")
BASELINE = "arrow-floor"
RESULTS = Path(__file__).resolve().parents[1] / "results"
TOPIC_SETTLE_S = 3.0


def high_watermarks(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` as librdkafka sees them (sum of high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4()}"})
    try:
        md = consumer.list_topics(topic, timeout=10)
        total = 0
        for p in md.topics[topic].partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high
        return total
    finally:
        consumer.close()


def _tree_cpu_seconds(root: int) -> float:
    """User+system CPU seconds of ``root`` and every live descendant (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p > 1:
            if p == root:
                total += seconds
                break
            p = parents.get(p, 0)
    return total


def cpu_snapshot(spark_pid: int, broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of Spark (JVM, Python daemon and workers) and of the broker."""
    return {
        "spark": _tree_cpu_seconds(spark_pid),
        "broker": _tree_cpu_seconds(broker_pid) if broker_pid else 0.0,
    }


def _count_batches(batches: Any) -> Any:
    """The ``arrow-floor`` baseline: receive the Arrow batches in Python, count, send nothing."""
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})


def write(spark: Any, sink: str, bootstrap: str, topic: str, rows: int, size: int) -> float:
    df = spark.range(rows, numPartitions=8).selectExpr(
        f"cast(lpad(cast(id AS string), {size}, 'x') AS binary) AS value"
    )
    if sink == "arrow-floor":  # what any Python sink pays before producing anything
        started = time.perf_counter()
        df.mapInArrow(_count_batches, "rows long").collect()
        return time.perf_counter() - started
    writer = df.write.format(sink).option("kafka.bootstrap.servers", bootstrap)
    writer = writer.option("topic", topic)
    for name, value in COMMON.items():
        writer = writer.option(f"kafka.{name}", value)
    started = time.perf_counter()
    writer.mode("append").save()
    return time.perf_counter() - started


def streaming(spark: Any, bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    """A rate source at ``rate`` rows/s into format("aiokprod"), trigger 1 s."""
    import tempfile

    df = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    df = df.selectExpr("cast(lpad(cast(value AS string), 100, 'x') AS binary) AS value")
    with tempfile.TemporaryDirectory(prefix="aiokprod-spark-bench-") as checkpoint:
        writer = df.writeStream.format("aiokprod").option("kafka.bootstrap.servers", bootstrap)
        for name, value in COMMON.items():
            writer = writer.option(f"kafka.{name}", value)
        query = (
            writer.option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second")
            .start()
        )
        time.sleep(seconds)
        progress = list(query.recentProgress)
        query.stop()
    # skip the first batch (Python worker start-up)
    steady = [p for p in progress if p["numInputRows"]][1:]
    rows = sum(p["numInputRows"] for p in steady)
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in steady)
    return {
        "rate": rate,
        "seconds": seconds,
        "batches": len(steady),
        "rows": rows,
        "rows_per_s_processed": rows / (busy_ms / 1000) if busy_ms else 0.0,
        "max_batch_ms": max(
            (p["durationMs"].get("triggerExecution", 0) for p in steady), default=0
        ),
        "written": (written := high_watermarks(bootstrap, topic)),
        "written_per_s_wall": written / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark", description=__doc__)
    parser.add_argument("--reps", type=int, default=3, help="repetitions per sink (default 3)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="100B,1KiB")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the row counts")
    parser.add_argument("--streaming-rate", type=int, default=0, help="rows/s; 0: skip")
    parser.add_argument("--streaming-seconds", type=float, default=30.0)
    parser.add_argument("--name", default="latest", help="results/spark-<name>.json")
    parser.add_argument(
        "--warmup-rows",
        type=int,
        default=500_000,
        help="rows of 100 B each sink writes once before the measured runs (JIT, workers)",
    )
    parser.add_argument(
        "--arrow-batch-rows",
        type=int,
        default=0,
        help="spark.sql.execution.arrow.maxRecordsPerBatch (0: Spark's default, 10000)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also run arrow-floor: Spark hands the Arrow batches to Python, nothing is sent",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import aiokprod.spark
    from aiokprod.testing import LocalKafka

    jars = ",".join(str(p) for p in ensure_jars())
    runs: list[dict[str, Any]] = []
    with LocalKafka(heap_max="1g") as kafka:
        bootstrap = kafka.bootstrap_servers
        builder = SparkSession.builder
        if args.arrow_batch_rows:
            builder = builder.config(
                "spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch_rows)
            )
        spark = (
            builder.master("local[2]")
            .appName("aiokprod-spark-bench")
            .config("spark.jars", jars)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        aiokprod.spark.register(spark)
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # set while a SparkContext runs
        spark_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        broker_pid = kafka.node(next(iter(kafka.nodes))).pid
        try:
            for sink in SINKS:  # warm-up: JIT, Python workers, producer pools
                topic = f"warmup-{sink}-{uuid.uuid4().hex[:6]}"
                kafka.create_topic(topic, 6)
                time.sleep(TOPIC_SETTLE_S)
                write(spark, sink, bootstrap, topic, args.warmup_rows, 100)
            for workload in args.workloads.split(","):
                rows, size = WORKLOADS[workload]
                rows = int(rows * args.scale)
                sinks = (*SINKS, BASELINE) if args.baseline else SINKS
                topics = {
                    (rep, sink): f"bench-{workload}-{sink}-{rep}-{uuid.uuid4().hex[:6]}"
                    for rep in range(args.reps)
                    for sink in sinks
                }
                for (_, sink), topic in topics.items():
                    if sink != BASELINE:
                        kafka.create_topic(topic, 6)
                time.sleep(TOPIC_SETTLE_S)
                for rep in range(args.reps):
                    order = sinks if rep % 2 == 0 else sinks[::-1]
                    for sink in order:
                        topic = topics[rep, sink]
                        load_before = os.getloadavg()[0]
                        cpu_before = cpu_snapshot(spark_pid, broker_pid)
                        seconds = write(spark, sink, bootstrap, topic, rows, size)
                        cpu_after = cpu_snapshot(spark_pid, broker_pid)
                        count = rows if sink == BASELINE else high_watermarks(bootstrap, topic)
                        run = {
                            "workload": workload,
                            "sink": sink,
                            "rep": rep,
                            "rows": rows,
                            "seconds": round(seconds, 3),
                            "rows_per_s": round(rows / seconds),
                            "counted": count,
                            "load1_before": load_before,
                            "load1_after": os.getloadavg()[0],
                            # CPU seconds per million rows: comparable on a busy machine
                            "cpu_s_per_m_spark": round(
                                (cpu_after["spark"] - cpu_before["spark"]) * 1e6 / rows, 2
                            ),
                            "cpu_s_per_m_broker": round(
                                (cpu_after["broker"] - cpu_before["broker"]) * 1e6 / rows, 2
                            ),
                        }
                        runs.append(run)
                        print(json.dumps(run), flush=True)
                        if count < rows:
                            raise SystemExit(f"{sink}: {count} of {rows} records in {topic}")
            stream = None
            if args.streaming_rate:
                topic = f"bench-stream-{uuid.uuid4().hex[:6]}"
                kafka.create_topic(topic, 6)
                stream = streaming(
                    spark, bootstrap, topic, args.streaming_rate, args.streaming_seconds
                )
                print(json.dumps({"streaming": stream}), flush=True)
        finally:
            spark.stop()
    report = summarize(runs)
    print(report)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-{args.name}.json"
    out.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks.spark " + " ".join(argv or sys.argv[1:]),
                "spark_kafka_sink": SPARK_KAFKA_VERSION,
                "settings": COMMON,
                "arrow_batch_rows": args.arrow_batch_rows or 10_000,
                "runs": runs,
                "streaming": stream,
                "table": report,
            },
            indent=2,
        )
    )
    print(f"results: {out}")
    return 0


def summarize(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | sink | runs | min rec/s | median rec/s | max rec/s | median ratio "
        "| CPU s/1M rows: Spark+Python (median) | broker (median) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workload in dict.fromkeys(r["workload"] for r in runs):
        medians: dict[str, float] = {}
        for sink in (*SINKS, BASELINE):
            rates = [
                r["rows_per_s"] for r in runs if r["workload"] == workload and r["sink"] == sink
            ]
            if rates:
                medians[sink] = statistics.median(rates)
        for sink in (*SINKS, BASELINE):
            rates = [
                r["rows_per_s"] for r in runs if r["workload"] == workload and r["sink"] == sink
            ]
            if not rates:
                continue
            ratio = medians[sink] / medians["kafka"] if "kafka" in medians else float("nan")
            mine = [r for r in runs if r["workload"] == workload and r["sink"] == sink]
            cpu_spark = statistics.median(r["cpu_s_per_m_spark"] for r in mine)
            cpu_broker = statistics.median(r["cpu_s_per_m_broker"] for r in mine)
            lines.append(
                f"| {workload} | {sink} | {len(rates)} | {min(rates):,} | "
                f"{statistics.median(rates):,.0f} | {max(rates):,} | {ratio:.2f}x | "
                f"{cpu_spark:.1f} | {cpu_broker:.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
