"""Exactly-once from the hostile side on a standalone Spark cluster: executor loss and
speculative copies (spark_chaos_procs.py says why not ``local-cluster``).

A master and two single-core workers on 127.0.0.2 and 127.0.0.3 (two hosts to Spark), the
executors in their own JVMs. As in test_spark_chaos.py, each scenario runs against our sink
writing exactly once and Spark's own ``format("kafka")`` (and, in the long run, ours
at-least-once), read back with librdkafka in ``read_committed``. Only in the long run
(``make test-spark-chaos``): ``make test`` runs issue 27's four faults of test_spark_chaos.py.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

from spark_chaos import SPARK_CONF, ChaosError, Target
from spark_chaos_procs import StandaloneCluster
from spark_chaos_runs import (
    RUNS,
    SINKS,
    batch_run,
    check,
    kill_executor,
    spark_kafka_jars,
    speculative_copy_started,
)
from spark_session import local_spark

# A standalone cluster's start alone takes 30-60 s here: make test-spark-chaos only (the
# conftest deselects these elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.chaos_long, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    try:
        started = StandaloneCluster().start()
    except ChaosError as exc:
        message = f"could not start a standalone Spark cluster: {exc}"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield started
    finally:
        started.stop()


#: Speculation on, aggressive, but only for tasks that ran 10 s: the held task of the speculation
#: test waits for its copy; the executor test kills its held task's executor sooner.
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "10s",
}


@pytest.fixture(scope="module")
def spark(cluster: StandaloneCluster) -> Iterator[Any]:
    """A driver here, one single-core executor on each worker."""
    settings = {
        "master": cluster.url,
        "spark.jars": spark_kafka_jars(),
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        **SPARK_CONF,
        **SPECULATION,
    }
    with local_spark("aiokprod-chaos-cluster", **settings) as session:
        # both executors registered: a task can go to the other host
        session.sparkContext.parallelize(range(100), 4).count()
        yield session


@pytest.fixture
def target(kafka: LocalKafka, new_topic, tmp_path: Path) -> Target:
    return Target(kafka.bootstrap_servers, lambda n: new_topic(partitions=n), tmp_path)


def each_sink(run: Callable[[str], Any], *, duplicates: bool) -> None:
    for _ in range(RUNS):
        for sink in SINKS:
            for outcome in run(sink):
                check(outcome, duplicates=duplicates)


# --- 5. executor loss ---------------------------------------------------------------------------


def test_executor_killed_mid_write(spark, target) -> None:
    """kill -9 of the executor JVM (and its Python workers) that runs a task mid-write: Spark
    reruns the task on the other executor."""
    each_sink(
        lambda sink: batch_run(spark, target, [sink], "executor JVM SIGKILLed", kill_executor),
        duplicates=True,
    )


# --- 6. speculative copies ----------------------------------------------------------------------


@pytest.mark.parametrize("original", ["held", "released"])
def test_a_speculative_copy_of_a_slow_task(spark, target, original: str) -> None:
    """Task 1 is held mid-write until Spark's speculation starts a copy on the other host.
    ``held``: the copy writes the partition and wins, Spark kills the original. ``released``:
    the original goes on as soon as the copy started, and the two race (the design's late
    copy: the job may fail, with nothing visible). The same transactional id: each attempt's
    InitProducerId fences the other's transaction."""
    scenario = "speculative copy of a slow task"
    if original == "released":
        scenario += ", the original resumed"
    each_sink(
        lambda sink: batch_run(
            spark,
            target,
            [sink],
            scenario,
            speculative_copy_started,
            release_when=(lambda gates: False) if original == "held" else None,
        ),
        duplicates=True,
    )
