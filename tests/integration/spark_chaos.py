"""A chaos harness for the Spark sinks: a fault that lands while a task writes, then a count.

Each run writes rows with known ids through one sink, injects a fault in the middle of a
write, lets Spark recover (a retried task, a restarted query), and counts what a librdkafka
consumer in ``read_committed`` (``txn_readback.py``) sees: rows expected, read, duplicated,
missing. ``test_spark_chaos.py`` and ``test_spark_chaos_cluster.py`` are the scenarios
(``make test`` runs them short, ``make test-spark-chaos`` long, with the table of
docs/spark.md, "Chaos-tested").

- **Gates** make the fault land at a known point, not by a lucky race: a Python UDF over the
  row id that, at the row named, holds its task until the harness releases it. A gate fires
  once - the first task attempt to reach its row - and never again (a file per gate, shared by
  every process of the host and kept across a driver's restart), so the retry, the replay or
  the speculative copy passes. Spark hands a task's rows to the sink as it computes them, so
  the held task has written rows before the gate (the harness waits until it sees them in the
  topic, ``read_uncommitted``) and has not finished.
- **Processes** (spark_chaos_procs.py): the Python workers, executor JVMs and drivers of the
  Spark we started, found below our own PIDs in ``/proc`` (Linux) and killed by PID.
- **Sinks**: ours exactly-once and at-least-once, and Spark's own ``format("kafka")``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from txn_readback import read_committed

# --- the sinks ------------------------------------------------------------------------------

EXACTLY_ONCE = "aiokprod exactly-once"
AT_LEAST_ONCE = "aiokprod at-least-once"
SPARK_KAFKA = "Spark format(kafka)"

#: Spark settings of every chaos session. ``spark.buffer.size`` is the buffer between the JVM
#: and its Python workers: at 64 KiB (the default) a task held at a gate keeps the rows it
#: computed before the gate in its UDF worker's buffer, and the sink never sees them. Small
#: Arrow batches let the sink write early in a task.
SPARK_CONF = {
    "spark.buffer.size": "4096",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "50",
}


def sink_options(sink: str, bootstrap: str, topic: str, prefix: str) -> tuple[str, dict[str, str]]:
    """The format and options of ``sink`` writing to ``topic``."""
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    if sink == SPARK_KAFKA:
        return "kafka", options
    if sink == EXACTLY_ONCE:
        options.update(deliveryGuarantee="exactly-once", transactionalIdPrefix=prefix)
    elif sink != AT_LEAST_ONCE:
        raise ValueError(f"unknown sink {sink!r}")
    return "aiokprod", options


def write_batch(df: Any, sink: str, bootstrap: str, topic: str, prefix: str) -> None:
    """``df.write`` through ``sink`` (blocks until the job ends)."""
    fmt, options = sink_options(sink, bootstrap, topic, prefix)
    writer = df.write.format(fmt)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def start_stream(
    df: Any, sink: str, bootstrap: str, topic: str, prefix: str, checkpoint: Path
) -> Any:
    """``df.writeStream`` through ``sink``, a micro-batch every 200 ms; the started query."""
    fmt, options = sink_options(sink, bootstrap, topic, prefix)
    writer = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint))
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer.trigger(processingTime="200 milliseconds").start()


def new_prefix() -> str:
    return f"chaos-{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass(frozen=True)
class Stream:
    """A ``rate-micro-batch`` stream of ``total`` rows, ``per_batch`` a micro-batch, ``tasks``
    Spark partitions each (row *v* is in micro-batch ``v // per_batch``, partition
    ``v % tasks``): a replay gives every task the same rows. Later micro-batches are empty."""

    total: int = 1800
    per_batch: int = 600
    tasks: int = 3

    @property
    def last_batch(self) -> int:
        return (self.total - 1) // self.per_batch

    def row(self, batch: int, task: int, nth: int) -> int:
        """The ``nth`` row of ``task`` in micro-batch ``batch``."""
        return batch * self.per_batch + task + self.tasks * nth

    def task_rows(self, value: int) -> range:
        """The rows of the task that computes row ``value``, up to ``value``."""
        start = value - value % self.per_batch + value % self.tasks
        return range(start, value, self.tasks)

    def frame(self, spark: Any, gates: Gates, *at: Gate) -> Any:
        from pyspark.sql.functions import col

        rows = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", self.per_batch)
            .option("numPartitions", self.tasks)
            .load()
            .where(col("value") < self.total)
        )
        return rows.select(gates.column(col("value"), *at).alias("value"))


def committed_batches(checkpoint: Path) -> set[int]:
    """The micro-batches Spark logged as committed in ``checkpoint``."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return set()
    return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}


#: Rows of a held task that must be in the topic before the fault (so it lands mid-write).
MIN_WRITTEN = 50
#: Seconds to wait for a gate, for rows to appear, for a job to end (a busy machine).
WAIT_S = 180.0


@dataclasses.dataclass
class Target:
    """Where runs write: a broker and a way to make topics."""

    bootstrap: str
    new_topic: Callable[[int], str]
    workdir: Path
    topic_partitions: int = 3
    prefix: Callable[[], str] = new_prefix

    def gates(self) -> Gates:
        return Gates(self.workdir / f"gates-{uuid.uuid4().hex[:8]}")


# --- gates ------------------------------------------------------------------------------------

#: Bytes of a row's value (``<id>:....``).
ROW_BYTES = 128


def row_id(value: bytes) -> int:
    """The row id a value written through :meth:`Gates.column` carries."""
    return int(value.split(b":", 1)[0])


@dataclasses.dataclass(frozen=True)
class Gate:
    """Hold the task that computes row ``value`` (once), until released or ``hold_s`` passes.

    Attributes:
        name: unique in its directory.
        value: the row id (``spark.range``'s ``id``, ``rate-micro-batch``'s ``value``).
        too_large: after the hold, make the row 2 MB (more than ``max.request.size``): the
            sink refuses it and fails the task from inside the writer.
        hold_s: the longest hold (a gate nobody releases lets its task go on by itself).
    """

    name: str
    value: int
    too_large: bool = False
    hold_s: float = 180.0


@dataclasses.dataclass(frozen=True)
class Held:
    """A task a gate holds: its UDF's Python worker and Spark's names for it."""

    pid: int
    partition: int
    attempt: int
    batch: str | None


class Gates:
    """The gates of one run: files in ``directory`` (shared by every process on this host)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def column(self, column: Any, *gates: Gate) -> Any:
        """``column`` (a long) as the string ``<id>:...`` of :data:`ROW_BYTES`, through a
        Python UDF that holds at ``gates`` and records every task attempt it runs in."""
        from pyspark.sql.functions import udf

        table = {g.value: (g.name, g.too_large, g.hold_s) for g in gates}
        where = str(self.directory)
        padding = "." * (ROW_BYTES - 12)
        seen: set[tuple[int, int, int]] = set()

        # Pickled by value to the workers: it imports what it needs and names no module-level
        # function of this file (the workers cannot import it).
        def gate(i: int) -> str:
            import json
            import time

            from pyspark import TaskContext

            context = TaskContext.get()
            if context is not None:
                task = (context.stageId(), context.partitionId(), context.attemptNumber())
                if task not in seen:
                    seen.add(task)
                    open(os.path.join(where, "attempt-{}-{}-{}".format(*task)), "a").close()
            hit = table.get(i)
            if hit is None:
                return f"{i}:{padding}"
            name, too_large, hold_s = hit
            tmp = os.path.join(where, f".{name}.{os.getpid()}")
            with open(tmp, "w") as f:
                json.dump(
                    {
                        "pid": os.getpid(),
                        "partition": -1 if context is None else context.partitionId(),
                        "attempt": -1 if context is None else context.attemptNumber(),
                        "batch": None
                        if context is None
                        else context.getLocalProperty("streaming.sql.batchId"),
                    },
                    f,
                )
            try:
                os.link(tmp, os.path.join(where, name + ".held"))  # atomic: once per gate
            except FileExistsError:
                return f"{i}:{padding}"  # fired before: a retry, replay or copy passes
            finally:
                os.unlink(tmp)
            release = os.path.join(where, name + ".release")
            deadline = time.monotonic() + hold_s
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)
            return "x" * 2_000_000 if too_large else f"{i}:{padding}"

        return udf(gate, "string", useArrow=False)(column)

    def held(self, gate: Gate) -> Held | None:
        """The task ``gate`` holds (or held), if it fired."""
        path = self.directory / f"{gate.name}.held"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return Held(data["pid"], data["partition"], data["attempt"], data["batch"])

    def wait_held(self, gate: Gate, timeout_s: float, alive: Callable[[], bool]) -> Held:
        """Wait until ``gate`` holds a task (``alive``: whether the job still runs)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            held = self.held(gate)
            if held is not None:
                return held
            if not alive():
                raise ChaosError(f"gate {gate.name} (row {gate.value}): the job ended first")
            time.sleep(0.1)
        raise ChaosError(f"gate {gate.name} (row {gate.value}) held nothing in {timeout_s:.0f} s")

    def release(self, gate: Gate) -> None:
        (self.directory / f"{gate.name}.release").touch()

    def attempts(self) -> set[tuple[int, int, int]]:
        """Every (stage, partition, attempt) that computed a row through a gate column."""
        found = set()
        for path in self.directory.glob("attempt-*"):
            stage, partition, attempt = path.name.split("-")[1:]
            found.add((int(stage), int(partition), int(attempt)))
        return found


class ChaosError(AssertionError):
    """The chaos did not happen as planned: the run tests nothing (a failure, never a pass)."""


# --- jobs ---------------------------------------------------------------------------------------


class Job:
    """A blocking Spark call (``save()``) in a thread of this process."""

    def __init__(self, spark: Any, work: Callable[[], None]) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            # A Python data source is looked up in the JVM thread's active session, which a
            # new (pinned) thread does not have.
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - the job's outcome, read by join()
                self.error = exc

        self._thread = threading.Thread(target=run, name="chaos-job", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> BaseException | None:
        """Wait for the job; its error (None if it succeeded)."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise ChaosError(f"the job did not end within {timeout_s:.0f} s")
        return self.error


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ChaosError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


# --- reading back -------------------------------------------------------------------------------


def read_now(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of ``topic`` up to its end now (no idle wait: for polling)."""
    return read_committed(bootstrap, topic, partitions, idle_s=0.0, isolation=isolation)


def wait_written(
    bootstrap: str,
    topic: str,
    partitions: int,
    rows: Iterable[int],
    at_least: int,
    timeout_s: float,
) -> int:
    """Wait until ``at_least`` of ``rows`` are in the topic (``read_uncommitted``: open
    transactions too); how many are."""
    wanted = set(rows)
    deadline = time.monotonic() + timeout_s
    found = 0
    while time.monotonic() < deadline:
        values = read_now(bootstrap, topic, partitions, "read_uncommitted")
        found = len(wanted.intersection(row_id(v) for v in values))
        if found >= at_least:
            return found
        time.sleep(0.3)
    raise ChaosError(f"only {found} of the held task's rows reached the topic in {timeout_s:.0f} s")


# --- the count ------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """One run of a scenario against one sink, as a ``read_committed`` consumer saw it.

    ``expected`` is the rows the job should have made visible: all of them when it
    succeeded; when it failed, none for exactly-once (``job_failed``).
    """

    scenario: str
    job: str  # "batch" or "stream"
    sink: str
    expected: int
    read: int
    duplicates: int
    missing: int
    extra: int
    faults: int
    written_before_fault: int
    job_failed: bool
    seconds: float
    note: str = ""

    @property
    def exact(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.extra == 0


def count(values: Iterable[bytes], expected: Iterable[int]) -> tuple[int, int, int, int]:
    """(read, duplicates, missing, extra) of ``values`` against the ``expected`` row ids."""
    seen = Counter(row_id(v) for v in values)
    want = set(expected)
    read = sum(seen.values())
    duplicates = sum(n - 1 for n in seen.values())
    missing = len(want - seen.keys())
    extra = sum(n for v, n in seen.items() if v not in want)
    return read, duplicates, missing, extra


#: Every outcome of this test session (conftest.py prints the table and can save it).
RESULTS: list[Outcome] = []


def table(outcomes: Iterable[Outcome]) -> list[str]:
    """The chaos table (Markdown): one line per scenario, job and sink, the runs summed."""
    rows: dict[tuple[str, str, str], list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault((o.scenario, o.job, o.sink), []).append(o)
    lines = [
        "| scenario | job | sink | runs | faults | rows expected | read (read_committed) "
        "| duplicates | missing | jobs failed |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (scenario, job, sink), runs in rows.items():
        lines.append(
            f"| {scenario} | {job} | {sink} | {len(runs)} | {sum(r.faults for r in runs)} | "
            f"{sum(r.expected for r in runs):,} | {sum(r.read for r in runs):,} | "
            f"{sum(r.duplicates for r in runs):,} | {sum(r.missing for r in runs):,} | "
            f"{sum(r.job_failed for r in runs)} |"
        )
    return lines


def save(outcomes: Iterable[Outcome], path: Path, **context: Any) -> None:
    """The runs as JSON (``context``: how they were made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"context": context, "runs": [dataclasses.asdict(o) for o in outcomes]}
    path.write_text(json.dumps(data, indent=1) + "\n")
