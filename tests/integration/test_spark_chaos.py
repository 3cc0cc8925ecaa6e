"""Exactly-once from the hostile side: faults in the middle of Spark writes, on ``local[2,4]``.

Every scenario runs against our sink writing exactly once and Spark's own
``format("kafka")`` at once, under the same fault (and, in the long run, against our sink
at-least-once), each read back with librdkafka in ``read_committed``. Exactly-once must show
every row once; Spark's sink must show the duplicates a retried or replayed write makes (the
proof that the test can fail), except where it legitimately has none (a killed leader: its
producer is idempotent and no task is retried). The faults land mid-write by construction
(spark_chaos.py: gates); the table of the runs is printed at the end of the session.

``make test`` runs each scenario once (Python workers killed in a batch job only, a shorter
stream for the driver kill, the leader killed in a batch job; not the standalone cluster's
scenarios); ``make test-spark-chaos``
(``AIOKPROD_SPARK_CHAOS=long``) three times, with our at-least-once sink, the stream variants,
more driver kills (inside the exactly-once commit too), and saves the table.
Executor loss and speculative copies are in test_spark_chaos_cluster.py.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

from pyspark.sql import SparkSession
from spark_chaos import SPARK_CONF, Outcome, Stream, Target
from spark_chaos_procs import driver_kill_run
from spark_chaos_runs import (
    LONG,
    SINKS,
    batch_run,
    check,
    kill_leader,
    kill_python_workers,
    no_fault,
    restart_killed,
    run_groups,
    spark_kafka_jars,
    stream_run,
)
from spark_session import local_spark

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600 if LONG else 600)]


@pytest.fixture(scope="module")
def jars() -> str:
    return spark_kafka_jars()


@pytest.fixture(scope="module")
def spark(jars: str) -> Iterator[SparkSession]:
    conf = {"master": "local[2,4]", "spark.jars": jars, **SPARK_CONF}
    with local_spark("aiokprod-chaos", **conf) as session:
        yield session


@pytest.fixture
def target(kafka: LocalKafka, new_topic, tmp_path: Path) -> Target:
    return Target(kafka.bootstrap_servers, lambda n: new_topic(partitions=n), tmp_path)


# --- 1. Python workers killed ---------------------------------------------------------------


def test_python_workers_killed_mid_write_in_a_batch_job(spark, target) -> None:
    """SIGKILL of the Python workers while a task writes: Spark retries the task."""
    fault = kill_python_workers(spark)
    scenario = "Python workers SIGKILLed"
    run_groups(lambda sinks: batch_run(spark, target, sinks, scenario, fault), duplicates=True)


@pytest.mark.chaos_long  # make test-spark-chaos only (make test: the batch job)
def test_python_workers_killed_mid_write_in_a_stream(spark, target) -> None:
    """The same in a micro-batch: the task is retried, the query goes on."""
    fault = kill_python_workers(spark)
    scenario = "Python workers SIGKILLed"
    run_groups(lambda sinks: stream_run(spark, target, sinks, scenario, fault), duplicates=True)


# --- 2. a task fails from inside the writer, part of its rows written -------------------------


def test_a_task_fails_after_writing_part_of_its_rows(spark, target) -> None:
    """The held row becomes 2 MB: the sink refuses it (max.request.size) and fails the task
    with the rows before it already in the topic; Spark retries the task."""
    scenario = "task fails after writing part of its rows"
    run_groups(
        lambda sinks: batch_run(spark, target, sinks, scenario, no_fault, too_large=True),
        duplicates=True,
    )


# --- 3. the driver killed, the query restarted ----------------------------------------------


def test_driver_killed_and_the_query_restarted(jars, target) -> None:
    """SIGKILL of the driver's process group while a micro-batch is written (the long run:
    twice, then twice inside the exactly-once commit - its decision stored, not done - and
    twice at a random time), and a restart from the checkpoints (same prefixes) after each:
    one query per sink in the same driver."""
    stream = Stream(total=7200 if LONG else 1800)
    rng = random.Random(27)
    for _ in range(2 if LONG else 1):  # 6 kills a run in the long run
        # the long run adds kills after a random time: any phase
        timed = [rng.uniform(20, 45) for _ in range(2)] if LONG else []
        outcomes = driver_kill_run(
            target,
            SINKS,
            "driver SIGKILLed, query restarted",
            [1, 3] if LONG else [1],
            stream,
            commit_kills=2 if LONG else 0,
            timed_kills=timed,
            conf={"spark.jars": jars},
        )
        for outcome in outcomes:
            check(outcome, duplicates=True)


# --- 4. a partition leader killed (3 nodes) -----------------------------------------------------


@pytest.mark.parametrize("job", ["batch", "stream"] if LONG else ["batch"])
def test_partition_leader_killed_mid_write(
    spark, kafka_cluster: LocalKafka, new_cluster_topic, tmp_path: Path, job: str
) -> None:
    """kill -9 of the node that coordinates the exactly-once task's transaction and leads a
    partition of every topic written (RF 3, min.insync.replicas 2), while the tasks write.
    Spark's sink has no duplicates to show here: its Java producer is idempotent, and the
    task is not retried."""
    target = Target(
        kafka_cluster.bootstrap_servers, lambda n: new_cluster_topic(partitions=n), tmp_path
    )
    killed: list[int] = []
    fault = kill_leader(kafka_cluster, killed)
    scenario = "partition leader and coordinator SIGKILLed"
    run = batch_run if job == "batch" else stream_run

    def one(sinks: Sequence[str]) -> list[Outcome]:
        try:
            return run(spark, target, sinks, scenario, fault)
        finally:
            restart_killed(kafka_cluster, killed)

    run_groups(one, duplicates=False)
