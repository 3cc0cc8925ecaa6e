"""deliveryGuarantee=exactly-once on a real broker, read back with librdkafka in read_committed.

One SparkSession on ``local[2,4]`` (a failed task is attempted up to 4 times). Batch jobs: a
retried task, a job that fails for good, the options; streaming: a query stopped and
restarted from its checkpoint. The driver's crash in the middle of a commit is played
without Spark (the committer is the same code), so that it lands exactly there. The chaos
runs (worker and driver SIGKILLs, a killed leader, Spark's own sink side by side) are in
test_spark_chaos.py. Without PySpark these tests are skipped, except under CI=true.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txn_readback import read_committed

from aiokprod import Producer
from aiokprod.admin import Admin
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from spark_session import local_spark

from aiokprod.spark import ExactlyOnceCommitError, write_dataframe
from aiokprod.spark.committer import Committer
from aiokprod.spark.decision_store import DecisionStore
from aiokprod.spark.eos_records import RunToken, transactional_id
from aiokprod.spark.exactly_once import TaskAction, TaskResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    conf = {
        "master": "local[2,4]",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "500",
        "spark.sql.streaming.numRecentProgressUpdates": "10000",
    }
    with local_spark("aiokprod-exactly-once", **conf) as session:
        yield session


def prefix() -> str:
    return f"eos-{uuid.uuid4().hex[:8]}"


def write_eos(df: DataFrame, bootstrap: str, topic: str, txn_prefix: str, **options: str) -> None:
    writer = (
        df.write.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", txn_prefix)
    )
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def open_transactions(bootstrap: str, txn_prefix: str) -> list[str]:
    async def run() -> list[str]:
        async with Admin(bootstrap) as admin:
            listed = await admin.list_transactions(states=["Ongoing"])
        return [t.transactional_id for t in listed if t.transactional_id.startswith(txn_prefix)]

    return asyncio.run(run())


def none_open_within(bootstrap: str, txn_prefix: str, seconds: float = 5.0) -> float:
    """Seconds until no transaction of the prefix is open (fails after ``seconds``).

    A task attempt Spark gave up on can still be writing when the job fails or the query
    stops: it finds its run closed at its next check (every second) and aborts.
    """
    started = time.monotonic()
    while open_transactions(bootstrap, txn_prefix):
        if time.monotonic() - started > seconds:
            raise AssertionError(
                f"still open {seconds} s after the write ended: "
                f"{open_transactions(bootstrap, txn_prefix)}"
            )
        time.sleep(0.2)
    return time.monotonic() - started


def test_a_batch_job_is_written_once(spark: SparkSession, kafka: LocalKafka, new_topic) -> None:
    topic, p = new_topic(partitions=3), prefix()
    df = spark.range(6000, numPartitions=4).selectExpr(
        "cast(id % 97 AS string) AS key", "cast(id AS string) AS value"
    )
    write_eos(df, kafka.bootstrap_servers, topic, p)
    values = read_committed(kafka.bootstrap_servers, topic, partitions=3)
    assert sorted(int(v) for v in values) == list(range(6000))
    assert open_transactions(kafka.bootstrap_servers, p) == []


def test_a_retried_task_writes_its_partition_once(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """Attempt 0 of partition 1 meets a record too large at row 8000, after sending rows
    5000-7999 (a failure inside the writer: Spark hands a task's input to the writer only as
    fast as it computes it, so an upstream failure would come before any write). That
    attempt's transaction is aborted and the retry's committed: read_uncommitted sees both
    attempts' records, read_committed each row once."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("string", useArrow=False)
    def too_large_on_first_attempt(i: int) -> str:
        context = TaskContext.get()
        assert context is not None
        if context.partitionId() == 1 and context.attemptNumber() == 0 and i == 8000:
            return "x" * 2_000_000  # > max.request.size: the record is refused
        return str(i)

    topic, p = new_topic(partitions=2), prefix()
    df = spark.range(10_000, numPartitions=2).select(
        too_large_on_first_attempt("id").alias("value")
    )
    write_eos(df, kafka.bootstrap_servers, topic, p)

    committed = collections.Counter(
        int(v) for v in read_committed(kafka.bootstrap_servers, topic, 2)
    )
    assert set(committed) == set(range(10_000))
    assert max(committed.values()) == 1
    everything = read_committed(kafka.bootstrap_servers, topic, 2, isolation="read_uncommitted")
    # attempt 0's records are in the log (aborted): the failure came after writing
    assert len(everything) > 10_000, "attempt 0 wrote nothing before failing: not tested"


def test_a_failed_job_leaves_nothing_visible(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    from pyspark.sql.functions import udf

    topic, p = new_topic(partitions=2), prefix()
    bootstrap = kafka.bootstrap_servers

    @udf("string", useArrow=False)
    def partition_1_always_fails(i: int) -> str:
        if i == 9000:
            # A gate, not a race: Spark's partition 1 fails only once Spark's partition 0
            # wrote its 5,000 rows (uncommitted, over both topic partitions), so the job's
            # abort has something to hide (else its 4 attempts could all fail first).
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "gate",
                    # else librdkafka's high watermark is the last stable offset
                    "isolation.level": "read_uncommitted",
                }
            )
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    highs = [
                        consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                        for p in (0, 1)
                    ]
                    if sum(highs) >= 5000:
                        break
                    time.sleep(0.1)
            finally:
                consumer.close()
            raise RuntimeError("this partition cannot be written")
        return str(i)

    df = spark.range(10_000, numPartitions=2).select(partition_1_always_fails("id").alias("value"))
    with pytest.raises(PySparkException, match="cannot be written"):
        write_eos(df, kafka.bootstrap_servers, topic, p)
    assert read_committed(kafka.bootstrap_servers, topic, 2) == []
    none_open_within(kafka.bootstrap_servers, p)  # no LSO held back
    assert read_committed(kafka.bootstrap_servers, topic, 2) == []
    written = read_committed(kafka.bootstrap_servers, topic, 2, isolation="read_uncommitted")
    assert len(written) >= 5000, "partition 0 was never written: the job failed too early"


def test_exactly_once_mistakes_fail_on_the_driver(spark: SparkSession) -> None:
    values = spark.range(3).selectExpr(
        "cast(if(id >= 0, raise_error('a task ran'), 'x') AS string) AS value"
    )

    def error_of(**options: str) -> str:
        writer = values.write.format("aiokprod").option("kafka.bootstrap.servers", "127.0.0.1:9")
        writer = writer.option("topic", "t")
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(PySparkException) as failure:
            writer.mode("append").save()
        text = str(failure.value)
        assert "a task ran" not in text
        return text

    assert "deliveryGuarantee: 'twice'" in error_of(deliveryGuarantee="twice")
    assert "transactionalIdPrefix: required" in error_of(deliveryGuarantee="exactly-once")
    assert "only used with deliveryGuarantee=exactly-once" in error_of(transactionalIdPrefix="x")
    assert "transactionalIdPrefix" in error_of(
        **{"kafka.transactional.id": "mine", "deliveryGuarantee": "exactly-once"}
    )
    assert "enable_idempotence" in error_of(
        deliveryGuarantee="exactly-once",
        transactionalIdPrefix="x",
        **{"kafka.enable.idempotence": "false"},
    )
    with pytest.raises(Exception, match=r"transactional_id_prefix|transactionalIdPrefix"):
        write_dataframe(values, "127.0.0.1:9", topic="t", delivery_guarantee="exactly-once")


def test_write_dataframe_exactly_once(spark: SparkSession, kafka: LocalKafka, new_topic) -> None:
    topic, p = new_topic(partitions=2), prefix()
    df = spark.range(4000, numPartitions=4).selectExpr("cast(id AS string) AS value")
    delivered = write_dataframe(
        df,
        kafka.bootstrap_servers,
        topic=topic,
        delivery_guarantee="exactly-once",
        transactional_id_prefix=p,
    )
    assert delivered == {0: 1000, 1: 1000, 2: 1000, 3: 1000}
    assert sorted(int(v) for v in read_committed(kafka.bootstrap_servers, topic, 2)) == list(
        range(4000)
    )
    # A missing topic fails every attempt of every partition: Spark gives up, none is visible.
    with pytest.raises(PySparkException, match="SparkWriteError"):
        write_dataframe(
            df,
            kafka.bootstrap_servers,
            topic=f"missing-{topic}",
            delivery_guarantee="exactly-once",
            transactional_id_prefix=p,
            allow_auto_create_topics=False,
            max_block_ms=1500,
        )
    assert open_transactions(kafka.bootstrap_servers, p) == []


def start_stream(spark: SparkSession, bootstrap: str, topic: str, p: str, checkpoint: Path) -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 400)
        .option("numPartitions", 3)
        .load()
        .selectExpr("cast(value AS string) AS value")
        .writeStream.format("aiokprod")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", p)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def wait_batches(query: Any, at_least: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(query.recentProgress) >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"{len(query.recentProgress)} micro-batches in {timeout_s} s")


def test_a_stream_restarted_from_its_checkpoint_writes_each_row_once(
    spark: SparkSession, kafka: LocalKafka, new_topic, tmp_path: Path
) -> None:
    topic, p = new_topic(partitions=3), prefix()
    checkpoint = tmp_path / "checkpoint"
    query = start_stream(spark, kafka.bootstrap_servers, topic, p, checkpoint)
    wait_batches(query, 3)
    query.stop()  # mid-batch: Spark aborts that micro-batch
    query = start_stream(spark, kafka.bootstrap_servers, topic, p, checkpoint)
    wait_batches(query, 3)
    query.stop()
    values = collections.Counter(int(v) for v in read_committed(kafka.bootstrap_servers, topic, 3))
    assert max(values.values()) == 1
    top = max(values)
    assert set(values) == set(range(top + 1)), "a committed micro-batch is missing rows"
    assert (top + 1) % 400 == 0  # whole micro-batches only
    assert top + 1 >= 2400
    none_open_within(kafka.bootstrap_servers, p)
    assert (
        collections.Counter(int(v) for v in read_committed(kafka.bootstrap_servers, topic, 3))
        == values
    )  # ending it made nothing more visible


def test_the_exactly_once_example(
    spark: SparkSession, kafka: LocalKafka, new_topic, tmp_path
) -> None:
    topic = new_topic(partitions=6)
    spec = importlib.util.spec_from_file_location(
        "spark_exactly_once", EXAMPLES / "spark_exactly_once.py"
    )
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    batch = spark.range(3000, numPartitions=3).selectExpr("cast(id AS string) AS value")
    example.write_atomically(batch, kafka.bootstrap_servers, topic)
    query = example.start_stream(spark, kafka.bootstrap_servers, topic, str(tmp_path / "ckpt"))
    wait_batches(query, 2)
    query.stop()
    values = read_committed(kafka.bootstrap_servers, topic, 6)
    batch_rows = [v for v in values if v.isdigit()]
    assert sorted(int(v) for v in batch_rows) == list(range(3000))
    streamed = [v for v in values if not v.isdigit()]
    assert len(streamed) >= 2000  # two micro-batches of 1,000 rows
    assert len(streamed) == len(set(streamed))


# --- the driver's crash in the middle of a commit (no Spark: the committer itself) --------


async def prepare(
    bootstrap: str,
    topic: str,
    p: str,
    partition: int,
    values: list[bytes],
    run: RunToken,
    streaming: bool = False,
) -> Any:
    scope = None if streaming else run
    producer = Producer(bootstrap, transactional_id=transactional_id(p, partition, 0, scope))
    await producer.start()
    await producer.begin_transaction()
    for v in values:
        await producer.send(topic, v, partition=partition % 2)
    prepared = await producer.prepare_transaction()
    await producer.close()
    return prepared


def written(partition: int, prepared: Any, topic: str, run: RunToken) -> TaskResult:
    return TaskResult(partition, TaskAction.WRITE, prepared, topic, run)


def test_a_commit_interrupted_after_the_decision_is_completed_by_the_next_run(
    kafka: LocalKafka, new_topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver stores its decision, commits partition 0 and dies: partitions 1 and 2 stay
    open. The next job's planning commits them (it does not abort them), and aborts an open
    transaction of the prefix that the decision does not name."""
    topic, p = new_topic(partitions=2), prefix()
    bootstrap = kafka.bootstrap_servers
    committer = Committer(bootstrap, {}, p, streaming=False)
    run = committer.open_run()
    rows = {i: [f"{i}-{n}".encode() for n in range(100)] for i in range(3)}
    prepared = {i: asyncio.run(prepare(bootstrap, topic, p, i, rows[i], run)) for i in range(3)}
    straggler = asyncio.run(prepare(bootstrap, topic, p, 7, [b"loser"], run))
    results: list[TaskResult | None] = [written(i, prepared[i], topic, run) for i in range(3)]

    calls = 0
    first_done: asyncio.Event | None = None
    original = Admin.complete_transaction

    async def die_after_one(self: Admin, txn: Any, *, commit: bool) -> None:
        nonlocal calls, first_done
        calls += 1
        if first_done is None:
            first_done = asyncio.Event()
        if calls == 1:
            await original(self, txn, commit=commit)
            first_done.set()
            return
        await first_done.wait()  # the EndTxn calls run concurrently: let the first one land
        raise SystemExit("the driver died")

    monkeypatch.setattr(Admin, "complete_transaction", die_after_one)
    with pytest.raises(SystemExit):
        committer.commit(run, None, results)
    monkeypatch.undo()

    seen = read_committed(bootstrap, topic, 2, idle_s=1.0)
    assert sorted(seen) == sorted(rows[0])  # only one got its EndTxn: partition 0, the first
    report = committer.recover()
    assert report.committed == (0, 1, 2)
    assert report.lost == ()
    assert report.aborted == (straggler.transactional_id,)
    seen = read_committed(bootstrap, topic, 2, idle_s=1.0)
    assert sorted(seen) == sorted(rows[0] + rows[1] + rows[2])
    assert open_transactions(bootstrap, p) == []

    async def decision() -> Any:
        async with Admin(bootstrap) as admin:
            return await DecisionStore(admin, p).latest()

    found = asyncio.run(decision())
    assert found is not None
    assert found.decision is not None
    assert found.decision.done


def test_a_commit_finds_a_transaction_gone_and_commits_nothing(
    kafka: LocalKafka, new_topic
) -> None:
    topic, p = new_topic(partitions=2), prefix()
    bootstrap = kafka.bootstrap_servers
    committer = Committer(bootstrap, {}, p, streaming=False)
    run = committer.open_run()
    prepared = {
        i: asyncio.run(prepare(bootstrap, topic, p, i, [f"{i}".encode()], run)) for i in range(2)
    }

    async def fence() -> None:
        async with Admin(bootstrap) as admin:
            await admin.fence_producers([prepared[1].transactional_id])

    asyncio.run(fence())  # as the coordinator's timeout would: partition 1 is aborted
    results: list[TaskResult | None] = [written(i, prepared[i], topic, run) for i in range(2)]
    with pytest.raises(ExactlyOnceCommitError, match="nothing was committed") as failure:
        committer.commit(run, None, results)
    assert failure.value.lost == (1,)
    assert read_committed(bootstrap, topic, 2, idle_s=1.0) == []
    assert open_transactions(bootstrap, p) == []


def test_abort_after_a_decided_commit_completes_it(
    kafka: LocalKafka, new_topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark calls abort() when commit() raised. Once the decision is stored, abort() rolls
    the commit forward: aborting the rest would leave the batch half visible for good."""
    from aiokprod.errors import KafkaTimeoutError

    topic, p = new_topic(partitions=2), prefix()
    bootstrap = kafka.bootstrap_servers
    committer = Committer(bootstrap, {}, p, streaming=True)
    run = committer.open_run()
    rows = {i: [f"{i}-{n}".encode() for n in range(50)] for i in range(3)}
    prepared = {
        i: asyncio.run(prepare(bootstrap, topic, p, i, rows[i], run, streaming=True))
        for i in range(3)
    }
    results: list[TaskResult | None] = [written(i, prepared[i], topic, run) for i in range(3)]
    original = Admin.complete_transaction

    async def coordinator_gone_for_partition_2(self: Admin, txn: Any, *, commit: bool) -> None:
        if txn.transactional_id == prepared[2].transactional_id:
            raise KafkaTimeoutError("EndTxn did not complete within max_block_ms")
        await original(self, txn, commit=commit)

    monkeypatch.setattr(Admin, "complete_transaction", coordinator_gone_for_partition_2)
    with pytest.raises(KafkaTimeoutError):
        committer.commit(None, 7, results, "query-1")
    monkeypatch.undo()
    report = committer.abort(None, 7, results)
    assert report.committed == (0, 1, 2)
    seen = read_committed(bootstrap, topic, 2, idle_s=1.0)
    assert sorted(seen) == sorted(rows[0] + rows[1] + rows[2])
    assert open_transactions(bootstrap, p) == []


def test_a_replayed_micro_batch_skips_what_it_committed(kafka: LocalKafka, new_topic) -> None:
    """The task side of a replay, without Spark: micro-batch 3 of a query is written and
    committed; the same batch again writes nothing and says so; batch 4 and another query's
    batch 3 are written."""
    import pyarrow as pa

    from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch
    from aiokprod.spark.partition_writer import PartitionWriter

    topic, p = new_topic(partitions=1), prefix()
    bootstrap = kafka.bootstrap_servers
    committer = Committer(bootstrap, {}, p, streaming=True)

    def run(query: str, batch: int, values: list[str]) -> Any:
        token = committer.open_run()  # the micro-batch's planning
        eos = ExactlyOnceConfig(p, True, token)
        writer = PartitionWriter(bootstrap, {}, topic, exactly_once=eos)
        batches = [pa.RecordBatch.from_pydict({"value": pa.array(values, pa.string())})]
        result = writer.write(0, batches, 0, MicroBatch(query, batch))
        assert result.ok, result.error
        task = TaskResult(
            0,
            TaskAction.SKIP
            if result.skipped
            else (TaskAction.WRITE if result.transaction else TaskAction.NOTHING),
            result.transaction,
            result.topic,
            result.run,
        )
        committer.commit(None, batch, [task], query)
        return result

    first = run("q", 3, ["a", "b"])
    assert first.transaction is not None
    assert not first.skipped
    again = run("q", 3, ["a", "b"])
    assert again.skipped
    assert again.transaction is None
    assert again.delivered == 2  # counted as in Kafka already
    assert not run("q", 4, ["c"]).skipped
    assert not run("other-query", 3, ["d"]).skipped  # a new checkpoint reusing the prefix
    assert not run("q", 5, []).skipped  # empty: no transaction at all
    assert sorted(read_committed(bootstrap, topic, 1, idle_s=1.0)) == [b"a", b"b", b"c", b"d"]


def test_a_task_of_a_closed_run_writes_nothing(kafka: LocalKafka, new_topic) -> None:
    """A straggler: its run was closed (the job failed, the query stopped) before it
    started. It fails without opening a transaction."""
    import pyarrow as pa

    from aiokprod.spark.exactly_once import ExactlyOnceConfig
    from aiokprod.spark.partition_writer import PartitionWriter

    topic, p = new_topic(partitions=1), prefix()
    bootstrap = kafka.bootstrap_servers
    committer = Committer(bootstrap, {}, p, streaming=False)
    stale = committer.open_run()
    committer.abort(stale, None, [])
    writer = PartitionWriter(bootstrap, {}, topic, exactly_once=ExactlyOnceConfig(p, False, stale))
    batches = [pa.RecordBatch.from_pydict({"value": pa.array(["late"], pa.string())})]
    result = writer.write(0, batches, 0)
    assert not result.ok
    assert result.error is not None
    assert "StaleRunError" in result.error
    assert open_transactions(bootstrap, p) == []
    assert read_committed(bootstrap, topic, 1, idle_s=1.0, isolation="read_uncommitted") == []


@pytest.mark.chaos_long
@pytest.mark.timeout(3600)
def test_ten_thousand_partitions_in_one_job(
    spark: SparkSession, kafka: LocalKafka, new_topic
) -> None:
    """A decision of 10,000 transactions (spread over 14 offset slots), few rows each."""
    topic, p = new_topic(partitions=6), prefix()
    df = spark.range(20_000, numPartitions=10_000).selectExpr("cast(id AS string) AS value")
    started = time.monotonic()
    write_eos(df, kafka.bootstrap_servers, topic, p)
    took = time.monotonic() - started
    values = collections.Counter(int(v) for v in read_committed(kafka.bootstrap_servers, topic, 6))
    assert set(values) == set(range(20_000))
    assert max(values.values()) == 1
    assert open_transactions(kafka.bootstrap_servers, p) == []
    print(f"\n10,000 Spark partitions, 20,000 rows: written and committed in {took:.0f} s")
