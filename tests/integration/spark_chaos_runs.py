"""The chaos scenarios: runs of one fault against the sinks, counted (spark_chaos.py).

A run writes rows with known ids through each sink of a group at once (a job or query each),
holds one task of each at a gate once the rows before it are in the topic, injects the fault
(``Fault``: kill Python workers, an executor, a broker or the driver, wait for a speculative
copy, or nothing but a row too large), releases the gates, lets Spark recover, and counts
what a ``read_committed`` consumer reads. The settings of the short (``make test``) and long
(``make test-spark-chaos``) runs and the checks are here too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from spark_chaos import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    MIN_WRITTEN,
    RESULTS,
    SPARK_KAFKA,
    WAIT_S,
    ChaosError,
    Gate,
    Gates,
    Held,
    Job,
    Outcome,
    Stream,
    Target,
    committed_batches,
    count,
    start_stream,
    wait_until,
    wait_written,
    write_batch,
)
from spark_chaos_procs import descendants, executor_jvm, jvm_pid, kill, python_workers
from txn_readback import read_committed

from aiokprod.admin import Admin
from aiokprod.spark.eos_records import parse_transactional_id
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

#: ``AIOKPROD_SPARK_CHAOS=long``: ``make test-spark-chaos``.
LONG = os.environ.get("AIOKPROD_SPARK_CHAOS", "") == "long"
#: Runs of each scenario.
RUNS = 3 if LONG else 1
#: Every sink, and the groups written at once (one job or query each) under the same fault:
#: ``local[2,4]`` has two task slots, one per held task.
SINKS = (EXACTLY_ONCE, SPARK_KAFKA, AT_LEAST_ONCE) if LONG else (EXACTLY_ONCE, SPARK_KAFKA)
GROUPS = [SINKS[:2], SINKS[2:]] if LONG else [SINKS]

#: A fault: does its damage while the gates hold their tasks (one per sink written at once),
#: returns what it did (for the table).
Fault = Callable[[Gates, Sequence["Run"]], str]

# --- faults ---------------------------------------------------------------------------------


def kill_python_workers(spark: Any) -> Fault:
    """SIGKILL every Python worker that runs tasks of ``spark`` (a local driver)."""
    root = jvm_pid(spark)

    def fault(gates: Gates, runs: Sequence[Run]) -> str:
        workers = python_workers(root)
        lost = [r.held.pid for r in runs if r.held is not None and r.held.pid not in workers]
        if lost:
            raise ChaosError(f"the held tasks' workers {lost} are not among {workers}")
        return f"killed {len(kill(workers))} Python workers"

    return fault


def kill_executor(gates: Gates, runs: Sequence[Run]) -> str:
    """SIGKILL the executor JVM that runs the held task, and every process below it."""
    (run,) = runs
    assert run.held is not None
    executor = executor_jvm(run.held.pid)
    if executor is None:
        raise ChaosError(f"the held task's worker {run.held.pid} runs under no executor JVM")
    below = descendants(executor)
    kill([executor])
    kill(below)
    copies = [a for _, p, a in gates.attempts() if p == run.held.partition and a > 0]
    also = ", a speculative copy already running" if copies else ""
    return f"killed executor JVM {executor} and its {len(below)} Python processes{also}"


def transaction_coordinator(cluster: LocalKafka, transactional_id: str) -> int:
    """The node that coordinates ``transactional_id``: the leader of its partition of
    ``__transaction_state`` (Kafka's rule: ``abs(id.hashCode()) % partitions``)."""
    code = 0
    units = transactional_id.encode("utf-16-be")  # Java's String.hashCode: over UTF-16 units
    for i in range(0, len(units), 2):
        code = (31 * code + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    code = code - (1 << 32) if code >= 1 << 31 else code
    state = cluster.metadata(["__transaction_state"]).topics["__transaction_state"]
    partition = (0 if code == -(1 << 31) else abs(code)) % len(state.partitions)
    return next(p.leader for p in state.partitions if p.partition == partition)


def open_transaction_of(cluster: LocalKafka, prefix: str, partition: int) -> str:
    """The transactional id of the held task's open transaction (it is mid-write)."""

    async def find() -> list[str]:
        async with Admin(cluster.bootstrap_servers) as admin:
            listed = await admin.list_transactions(states=["Ongoing"])
        return [
            t.transactional_id
            for t in listed
            if (name := parse_transactional_id(prefix, t.transactional_id)) is not None
            and name.partition == partition
        ]

    found = asyncio.run(find())
    if len(found) != 1:
        raise ChaosError(f"partition {partition} of {prefix} has open transactions {found}")
    return found[0]


def kill_leader(cluster: LocalKafka, killed: list[int]) -> Fault:
    """SIGKILL the node that coordinates the exactly-once task's transaction (else leads the
    first topic's partition 0); it must also lead a partition of every topic written."""

    def fault(gates: Gates, runs: Sequence[Run]) -> str:
        eos = [r for r in runs if r.sink == EXACTLY_ONCE and r.held is not None]
        what = []
        if eos:
            txn = open_transaction_of(cluster, eos[0].prefix, eos[0].held.partition)  # type: ignore[union-attr]
            victim = transaction_coordinator(cluster, txn)
            what.append(f"coordinator of {txn}")
        else:
            topic = cluster.metadata([runs[0].topic]).topics[runs[0].topic]
            victim = next(p.leader for p in topic.partitions if p.partition == 0)
        for run in runs:
            info = cluster.metadata([run.topic]).topics[run.topic]
            led = [p.partition for p in info.partitions if p.leader == victim]
            if not led:
                raise ChaosError(f"node {victim} leads no partition of {run.topic}")
            what.append(f"leader of {run.sink}'s partitions {led}")
        cluster.kill_node(victim)
        killed.append(victim)
        return f"killed node {victim}: " + ", ".join(what)

    return fault


def speculative_copy_started(gates: Gates, runs: Sequence[Run]) -> str:
    """No damage: wait until Spark started a speculative copy of the held task."""
    (run,) = runs
    assert run.held is not None
    partition = run.held.partition
    wait_until(
        lambda: any(p == partition and a > 0 for _, p, a in gates.attempts()),
        WAIT_S,
        f"a speculative copy of partition {partition}",
    )
    return "a speculative copy started while the original was held"


def restart_killed(cluster: LocalKafka, killed: list[int]) -> None:
    """Start the nodes :func:`kill_leader` killed; wait until every replica is in sync again
    (the next kill must not leave a partition below ``min.insync.replicas``)."""
    while killed:
        cluster.start_node(killed.pop())

    def in_sync() -> bool:
        topics = cluster.metadata().topics.values()
        return all(len(p.isr) == len(p.replicas) for t in topics for p in t.partitions)

    wait_until(in_sync, WAIT_S, "every replica back in sync")


def no_fault(gates: Gates, runs: Sequence[Run]) -> str:
    return "none: the held row fails the task"


# --- runs: one job or query per sink, at once, one fault for all -----------------------------


@dataclasses.dataclass
class Run:
    """One sink's job or query in a run: where it writes, its gate, the task held there."""

    sink: str
    topic: str
    prefix: str
    gate: Gate
    held: Held | None = None
    written: int = 0


def _outcome(
    run: Run,
    scenario: str,
    job: str,
    target: Target,
    expected: range,
    failed: bool,
    started: float,
    note: str,
) -> Outcome:
    values = read_committed(target.bootstrap, run.topic, target.topic_partitions, idle_s=1.0)
    read, duplicates, missing, extra = count(values, expected)
    return Outcome(
        scenario,
        job,
        run.sink,
        len(expected),
        read,
        duplicates,
        missing,
        extra,
        1,
        run.written,
        failed,
        round(time.monotonic() - started, 1),
        note,
    )


def _fault_mid_write(
    target: Target,
    gates: Gates,
    runs: Sequence[Run],
    task_rows: Callable[[Held, Gate], Iterable[int]],
    alive: Callable[[], bool],
    fault: Fault,
) -> str:
    """Wait until every gate holds its task and the task's rows are in the topic; the fault."""
    for run in runs:
        run.held = gates.wait_held(run.gate, WAIT_S, alive)
        run.written = wait_written(
            target.bootstrap,
            run.topic,
            target.topic_partitions,
            task_rows(run.held, run.gate),
            MIN_WRITTEN,
            WAIT_S,
        )
    return fault(gates, runs)


def batch_run(
    spark: Any,
    target: Target,
    sinks: Sequence[str],
    scenario: str,
    fault: Fault,
    *,
    rows: int = 4000,
    tasks: int = 2,
    nth: int = 400,
    too_large: bool = False,
    release_when: Callable[[Gates], bool] | None = None,
) -> list[Outcome]:
    """``spark.range(rows, tasks)`` written through each of ``sinks`` (a job each, at once);
    each job's task 1 held ``nth`` rows in, then the fault."""
    from pyspark.sql.functions import col

    started = time.monotonic()
    gates = target.gates()
    per_task = rows // tasks
    runs = [
        Run(
            sink,
            target.new_topic(target.topic_partitions),
            target.prefix(),
            Gate(f"j{i}", per_task + nth, too_large),
        )
        for i, sink in enumerate(sinks)
    ]
    jobs = []
    for run in runs:
        df = spark.range(rows, numPartitions=tasks).select(
            gates.column(col("id"), run.gate).alias("value")
        )
        jobs.append(
            Job(
                spark,
                lambda df=df, run=run: write_batch(
                    df, run.sink, target.bootstrap, run.topic, run.prefix
                ),
            )
        )
    try:
        note = _fault_mid_write(
            target,
            gates,
            runs,
            lambda held, gate: range(per_task * held.partition, gate.value),
            lambda: all(j.alive() for j in jobs),
            fault,
        )
        if release_when is not None:
            wait_until(
                lambda: release_when(gates) or not any(j.alive() for j in jobs),
                WAIT_S,
                "the release",
            )
    finally:
        for run in runs:
            gates.release(run.gate)
    outcomes = []
    for run, job in zip(runs, jobs, strict=True):
        error = job.join(WAIT_S * 2)
        failed = error is not None
        expected = range(0) if failed and run.sink == EXACTLY_ONCE else range(rows)
        why = f"; the job failed: {str(error).splitlines()[0][:200]}" if failed else ""
        outcomes.append(
            _outcome(run, scenario, "batch", target, expected, failed, started, note + why)
        )
    return outcomes


# --- streaming, the driver in this process -------------------------------------------------


def stream_run(
    spark: Any,
    target: Target,
    sinks: Sequence[str],
    scenario: str,
    fault: Fault,
    stream: Stream | None = None,
    *,
    batch: int = 1,
    nth: int = 120,
) -> list[Outcome]:
    """A query of ``stream`` through each of ``sinks`` (at once); each query's micro-batch
    ``batch`` task 1 held ``nth`` rows in, then the fault; the queries run until Spark
    committed their last micro-batch with rows."""
    stream = stream or Stream()
    started = time.monotonic()
    gates = target.gates()
    runs = [
        Run(
            sink,
            target.new_topic(target.topic_partitions),
            target.prefix(),
            Gate(f"q{i}", stream.row(batch, 1, nth)),
        )
        for i, sink in enumerate(sinks)
    ]
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    queries = []
    try:
        for run in runs:
            checkpoint = target.workdir / f"checkpoint-{uuid.uuid4().hex[:8]}"
            query = start_stream(
                stream.frame(spark, gates, run.gate),
                run.sink,
                target.bootstrap,
                run.topic,
                run.prefix,
                checkpoint,
            )
            queries.append((query, checkpoint))
        try:
            note = _fault_mid_write(
                target,
                gates,
                runs,
                lambda held, gate: stream.task_rows(gate.value),
                lambda: all(q.isActive for q, _ in queries),
                fault,
            )
        finally:
            for run in runs:
                gates.release(run.gate)
        wait_until(
            lambda: all(
                stream.last_batch in committed_batches(c) or not q.isActive for q, c in queries
            ),
            WAIT_S * 2,
            "the last micro-batches",
        )
    finally:
        for query, _ in queries:
            query.stop()
    for query, _ in queries:
        if query.exception() is not None:
            raise ChaosError(f"a query failed: {query.exception()}")
    return [
        _outcome(run, scenario, "stream", target, range(stream.total), False, started, note)
        for run in runs
    ]


# --- checks -------------------------------------------------------------------------------------


def check(outcome: Outcome, *, duplicates: bool) -> None:
    """Exactly-once: each row once (none if the job failed). The others: nothing lost, and
    with ``duplicates`` every row the fault caught in the topic written again."""
    RESULTS.append(outcome)
    print(outcome)
    if outcome.sink == EXACTLY_ONCE:
        assert outcome.exact, outcome
    else:
        assert outcome.missing == 0, outcome
        assert outcome.extra == 0, outcome
        if duplicates:
            assert outcome.duplicates >= outcome.written_before_fault > 0, outcome


def run_groups(run: Callable[[Sequence[str]], list[Outcome]], *, duplicates: bool) -> None:
    """``run`` for every group of sinks, :data:`RUNS` times; every outcome checked."""
    for _ in range(RUNS):
        for group in GROUPS:
            for outcome in run(group):
                check(outcome, duplicates=duplicates)


def spark_kafka_jars() -> str:
    """Spark's own Kafka sink (Maven Central, cached): a failure fails CI, skips elsewhere."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.spark.jars import ensure_jars

    try:
        return ",".join(str(p) for p in ensure_jars())
    except Exception as exc:  # noqa: BLE001 - reported as the skip or failure below
        message = f"could not fetch Spark's Kafka sink: {exc}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
