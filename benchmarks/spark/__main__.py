"""``python -m benchmarks.spark``: Spark's Kafka sink vs the ``aiokprod`` data source.

One local broker (``aiokprod.testing``), one SparkSession on ``local[2]`` holding both sinks;
each workload writes a DataFrame of ``spark.range(n, numPartitions=8)`` with a binary
``value`` of the stated size (and for the keyed workloads a ``key`` column:
``benchmarks/spark/workloads.py``) into a fresh 6-partition topic, the sinks interleaved
(the order alternates per repetition), after one warm-up write of each (``--warmup-rows``;
keyed too when a keyed workload runs).
Both sinks run with acks=all, idempotence on, linger 5 ms, batch 16 KiB. Every run's
record count is checked with confluent-kafka (the topic's high watermarks). Results: a
Markdown table on stdout and JSON in ``benchmarks/results/spark-<name>.json``.

Per run it records the rows/s, the CPU seconds per million rows of Spark (its JVM, and its
Python daemon and workers, apart) and of the broker, and the broker's Produce requests and
partition entries (read over JMX): CPU per row stays comparable when other jobs share the
machine. ``--busy`` keeps one core busy meanwhile (``benchmarks/busy.py``).

Every run's topic is created before the workload's first run and the benchmark waits
``TOPIC_SETTLE_S`` before writing: a topic written the moment it exists can answer
NOT_LEADER_OR_FOLLOWER for a while, which measures topic creation, not the sink (and can
stall aiokprod's idempotent retries; see the issue 14 speed report).

``--worker-python`` runs Spark's Python workers with another interpreter, e.g. the
compiled (mypyc) build's venv that ``make test-compiled`` makes
(``--worker-python .venv-mypyc/bin/python``); the workers then start with
``PYTHONSAFEPATH=1``, so that they import the aiokprod installed there and not the source
tree of the current directory. The build the workers actually imported is recorded.

``--label NAME --sink-option KEY=VALUE ...`` adds a third sink, ``format("aiokprod")``
with those options too (``{topic}`` in a value becomes the run's topic), interleaved with
the others: e.g. ``--label aiokprod-eos --sink-option deliveryGuarantee=exactly-once
--sink-option 'transactionalIdPrefix=bench-{topic}'``.

``--arrow-batch-rows`` sets ``spark.sql.execution.arrow.maxRecordsPerBatch`` (default 10000)
for the session: it changes the Arrow paths (``aiokprod`` and ``arrow-floor``), not Spark's
own sink, which reads rows in the JVM.

``--streaming-rate`` adds the sustained streaming measurement: a rate source of 100-byte
values at that many rows/s, trigger 1 s, into each sink in turn (``--streaming-seconds``
each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.busy import DESCRIPTION as BUSY
from benchmarks.busy import one_core_busy
from benchmarks.spark.broker import BrokerCounters, cpu_snapshot, enable_broker_jmx
from benchmarks.spark.jars import SPARK_KAFKA_VERSION, ensure_jars
from benchmarks.spark.tables import summarize, summarize_streams
from benchmarks.spark.workloads import DEFAULT, WORKLOADS, Workload

COMMON = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5", "batch.size": "16384"}
SINKS = ("kafka", "aiokprod")
BASELINE = "arrow-floor"
#: The other baseline: Spark computes the rows and its ``noop`` format drops them.
NOOP = "spark-noop"
BASELINES = (BASELINE, NOOP)
STREAM_VALUE_BYTES = 100
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


def _count_batches(batches: Any) -> Any:
    """The ``arrow-floor`` baseline: receive the Arrow batches in Python, count, send nothing."""
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})


@dataclasses.dataclass(frozen=True)
class Sink:
    """A sink the benchmark writes with: a format and its options beyond ``COMMON``."""

    name: str
    format: str
    options: tuple[tuple[str, str], ...] = ()

    def writer(self, writer: Any, bootstrap: str, topic: str) -> Any:
        writer = writer.format(self.format).option("kafka.bootstrap.servers", bootstrap)
        writer = writer.option("topic", topic)
        for name, value in COMMON.items():
            writer = writer.option(f"kafka.{name}", value)
        for name, value in self.options:
            writer = writer.option(name, value.replace("{topic}", topic))
        return writer


def write(
    spark: Any,
    sink: Sink | None,
    bootstrap: str,
    topic: str,
    workload: Workload,
    rows: int,
    baseline: str = BASELINE,
) -> float:
    """One batch write of ``rows`` rows of ``workload``; its seconds (None: ``baseline``)."""
    df = workload.dataframe(spark, rows)
    run: Callable[[], Any]
    if sink is not None:
        run = sink.writer(df.write, bootstrap, topic).mode("append").save
    elif baseline == NOOP:  # computing the rows, and nothing else
        run = df.write.format("noop").mode("overwrite").save
    else:  # arrow-floor: what any Python sink pays before producing anything
        run = df.mapInArrow(_count_batches, "rows long").collect
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def streaming(
    spark: Any, sink: Sink, bootstrap: str, topic: str, rate: int, seconds: float
) -> dict[str, Any]:
    """A rate source at ``rate`` rows/s into ``sink`` for ``seconds``, trigger 1 s."""
    import tempfile

    df = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    df = df.selectExpr(
        f"cast(lpad(cast(value AS string), {STREAM_VALUE_BYTES}, 'x') AS binary) AS value"
    )
    with tempfile.TemporaryDirectory(prefix="aiokprod-spark-bench-") as checkpoint:
        writer = sink.writer(df.writeStream, bootstrap, topic)
        query = (
            writer.option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second")
            .start()
        )
        time.sleep(seconds)
        progress = list(query.recentProgress)
        query.stop()
    # skip the first batch (Python worker start-up, the sink's first connection)
    steady = [p for p in progress if p["numInputRows"]][1:]
    rows = sum(p["numInputRows"] for p in steady)
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in steady)
    written = high_watermarks(bootstrap, topic)
    return {
        "sink": sink.name,
        "rate": rate,
        "seconds": seconds,
        "batches": len(steady),
        "rows": rows,
        # rows over the time the micro-batches ran: the rate the sink could sustain
        "rows_per_s_processed": round(rows / (busy_ms / 1000)) if busy_ms else 0,
        "max_batch_ms": max(
            (p["durationMs"].get("triggerExecution", 0) for p in steady), default=0
        ),
        "written": written,
        "written_per_s_wall": round(written / seconds),
        "load1": os.getloadavg()[0],
    }


def _worker_build(probe: Any) -> str:
    """Which aiokprod the Python workers import: ``compiled (N modules)`` or ``pure``."""
    import aiokprod.compiled

    del probe
    modules = aiokprod.compiled.compiled_modules()
    return f"compiled ({len(modules)} modules)" if modules else "pure"


def _sink_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions per sink (default 3)")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT),
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default {','.join(DEFAULT)})",
    )
    parser.add_argument("--busy", action="store_true", help=f"{BUSY} while measuring")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the row counts")
    parser.add_argument("--streaming-rate", type=int, default=0, help="rows/s; 0: skip")
    parser.add_argument("--streaming-seconds", type=float, default=30.0)
    parser.add_argument(
        "--streaming-sinks",
        default="",
        help="comma-separated sinks to stream into (default: every sink but arrow-floor)",
    )
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
        help="also run arrow-floor (Spark hands the Arrow batches to Python, nothing is sent) "
        "and spark-noop (Spark computes the rows and drops them: the cost of the rows alone)",
    )
    parser.add_argument(
        "--worker-python",
        default="",
        help="the Python of Spark's workers (default: this one), e.g. .venv-mypyc/bin/python",
    )
    parser.add_argument(
        "--label", default="", help="name of an extra aiokprod sink with --sink-option's"
    )
    parser.add_argument(
        "--sink-option",
        type=_sink_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the --label sink (repeat for more)",
    )
    return parser


def _sinks(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Sink]:
    if args.sink_option and not args.label:
        parser.error("--sink-option needs --label (the name of the sink they make)")
    sinks = [Sink(name, name) for name in SINKS]
    if args.label:
        if args.label in (*SINKS, BASELINE):
            parser.error(f"--label {args.label!r} is taken")
        sinks.append(Sink(args.label, "aiokprod", tuple(args.sink_option)))
    return sinks


@dataclasses.dataclass
class _Session:
    """The running SparkSession and broker, and how to measure what they spend."""

    spark: Any
    kafka: Any
    counters: BrokerCounters
    spark_pid: int
    broker_pid: int | None
    build: str
    scale: float = 1.0

    def measure(
        self, workload: str, rep: int, name: str, sink: Sink | None, topic: str
    ) -> dict[str, Any]:
        """One write of the workload, and what it cost."""
        rows = int(WORKLOADS[workload].rows * self.scale)
        bootstrap = self.kafka.bootstrap_servers
        load_before = os.getloadavg()[0]
        requests_before = self.counters.snapshot()
        cpu_before = cpu_snapshot(self.spark_pid, self.broker_pid)
        seconds = write(self.spark, sink, bootstrap, topic, WORKLOADS[workload], rows, name)
        cpu_after = cpu_snapshot(self.spark_pid, self.broker_pid)
        requests_after = self.counters.snapshot()
        count = rows if sink is None else high_watermarks(bootstrap, topic)
        if count < rows:
            raise SystemExit(f"{name}: {count} of {rows} records in {topic}")
        return {
            "workload": workload,
            "sink": name,
            "build": self.build if sink is not None and sink.format == "aiokprod" else "",
            "rep": rep,
            "rows": rows,
            "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds),
            "counted": count,
            "load1_before": load_before,
            "load1_after": os.getloadavg()[0],
            # CPU seconds per million rows: comparable on a busy machine
            "cpu_s_per_m_spark": round((cpu_after["spark"] - cpu_before["spark"]) * 1e6 / rows, 2),
            "cpu_s_per_m_jvm": round((cpu_after["jvm"] - cpu_before["jvm"]) * 1e6 / rows, 2),
            "cpu_s_per_m_python": round(
                (cpu_after["python"] - cpu_before["python"]) * 1e6 / rows, 2
            ),
            "cpu_s_per_m_broker": round(
                (cpu_after["broker"] - cpu_before["broker"]) * 1e6 / rows, 2
            ),
            "produce_requests": requests_after["requests"] - requests_before["requests"],
            "partition_entries": requests_after["entries"] - requests_before["entries"],
        }


def _start_spark(args: argparse.Namespace, jars: str) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if args.arrow_batch_rows:
        builder = builder.config(
            "spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch_rows)
        )
    return (
        builder.master("local[2]")
        .appName("aiokprod-spark-bench")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


def _batch_runs(session: _Session, args: argparse.Namespace, sinks: list[Sink]) -> list[Any]:
    """The warm-up, then every workload with the sinks interleaved."""
    kafka = session.kafka
    by_name: dict[str, Sink | None] = {sink.name: sink for sink in sinks}
    if args.baseline:
        by_name.update(dict.fromkeys(BASELINES))
    names = list(by_name)
    workloads = args.workloads.split(",")
    # warm-up: JIT, Python workers, producer pools; keyed rows too if a workload has keys
    keys = dict.fromkeys(["", *(WORKLOADS[w].key for w in workloads)])
    for sink in sinks:
        for key in keys:
            topic = f"warmup-{sink.name}-{uuid.uuid4().hex[:6]}"
            kafka.create_topic(topic, 6)
            time.sleep(TOPIC_SETTLE_S)
            warmup = Workload(args.warmup_rows, 100, key)
            write(session.spark, sink, kafka.bootstrap_servers, topic, warmup, args.warmup_rows)
    runs: list[dict[str, Any]] = []
    for workload in workloads:
        topics = {
            (rep, name): f"bench-{workload}-{name}-{rep}-{uuid.uuid4().hex[:6]}"
            for rep in range(args.reps)
            for name in names
        }
        for (_, name), topic in topics.items():
            if name not in BASELINES:
                kafka.create_topic(topic, 6)
        time.sleep(TOPIC_SETTLE_S)
        for rep in range(args.reps):
            for name in names if rep % 2 == 0 else names[::-1]:
                run = session.measure(workload, rep, name, by_name[name], topics[rep, name])
                runs.append(run)
                print(json.dumps(run), flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    sinks = _sinks(parser, args)
    for workload in args.workloads.split(","):
        if workload not in WORKLOADS:
            parser.error(f"--workloads: no workload {workload!r} (have {', '.join(WORKLOADS)})")
    by_name = {sink.name: sink for sink in sinks}
    stream_names = [n for n in args.streaming_sinks.split(",") if n] or list(by_name)
    for name in stream_names:
        if name not in by_name:
            parser.error(f"--streaming-sinks: no sink {name!r} (have {', '.join(by_name)})")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.worker_python:
        os.environ["PYSPARK_PYTHON"] = os.path.abspath(args.worker_python)
        # The workers run `python -m pyspark.daemon` in this directory; without this, the
        # source tree here would shadow the aiokprod installed in that interpreter's venv.
        os.environ["PYTHONSAFEPATH"] = "1"
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable

    import aiokprod.spark
    from aiokprod.testing import LocalKafka

    jars = ",".join(str(p) for p in ensure_jars())
    jmx_port = enable_broker_jmx()
    streams: list[dict[str, Any]] = []
    with LocalKafka(heap_max="1g") as kafka:
        spark = _start_spark(args, jars)
        try:
            spark.sparkContext.setLogLevel("ERROR")
            aiokprod.spark.register(spark)
            jvm = spark.sparkContext._jvm
            assert jvm is not None  # set while a SparkContext runs
            build = spark.sparkContext.parallelize([0], 1).map(_worker_build).collect()[0]
            print(f"Python workers: {os.environ['PYSPARK_PYTHON']}, aiokprod {build}", flush=True)
            session = _Session(
                spark,
                kafka,
                BrokerCounters(jvm, jmx_port),
                int(jvm.java.lang.ProcessHandle.current().pid()),
                kafka.node(next(iter(kafka.nodes))).pid,
                build,
                args.scale,
            )
            try:
                with one_core_busy(args.busy):
                    runs = _batch_runs(session, args, sinks)
                for name in stream_names if args.streaming_rate else ():
                    topic = f"bench-stream-{name}-{uuid.uuid4().hex[:6]}"
                    kafka.create_topic(topic, 6)
                    time.sleep(TOPIC_SETTLE_S)
                    stream = streaming(
                        spark,
                        by_name[name],
                        kafka.bootstrap_servers,
                        topic,
                        args.streaming_rate,
                        args.streaming_seconds,
                    )
                    streams.append(stream)
                    print(json.dumps({"streaming": stream}), flush=True)
            finally:
                session.counters.close()
        finally:
            spark.stop()
    report = summarize(runs)
    if streams:
        report += "\n\n" + summarize_streams(streams)
    print(report)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-{args.name}.json"
    out.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks.spark " + " ".join(argv or sys.argv[1:]),
                "spark_kafka_sink": SPARK_KAFKA_VERSION,
                "settings": COMMON,
                "sinks": [dataclasses.asdict(sink) for sink in sinks],
                "worker_python": args.worker_python or "(the driver's)",  # no local path
                "worker_build": build,
                "arrow_batch_rows": args.arrow_batch_rows or 10_000,
                "busy": BUSY if args.busy else "",
                "runs": runs,
                "streaming": streams,
                "table": report,
            },
            indent=2,
        )
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
