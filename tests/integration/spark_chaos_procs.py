"""Spark processes the chaos harness starts and kills: streaming drivers in their own process
groups (and the scenario that kills them), and a standalone Spark cluster of one master and
two workers on two loopback hosts.

Run as a script (``python spark_chaos_procs.py '<spec as JSON>'``), this file *is* the
driver: a SparkSession on ``local[2,4]`` that streams a :class:`~spark_chaos.Stream` through
one sink until Spark has committed its last micro-batch (or it is killed).

Why a standalone cluster and not ``local-cluster[2,1,1024]``: ``local-cluster`` runs from a
pip-installed pyspark (executors in their own JVMs, checked), but all its workers share one
host name, and Spark never starts a speculative copy on a host where the task already ran
an attempt (``TaskSetManager.dequeueTaskFromList``: ``speculative && hasAttemptOnHost``; in
``local[...]`` the speculation check does not even run, ``TaskSchedulerImpl.start`` skips it
when ``isLocal``). Two workers bound to 127.0.0.2 and 127.0.0.3 are two hosts to Spark.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spark_chaos import (
    EXACTLY_ONCE,
    MIN_WRITTEN,
    SPARK_CONF,
    WAIT_S,
    ChaosError,
    Gate,
    Outcome,
    Stream,
    Target,
    count,
    wait_written,
)
from txn_readback import read_committed

from aiokprod.testing import reaper
from aiokprod.testing.java import find_java

# --- processes (Linux /proc) ----------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent PID, start time in clock ticks), or None if ``pid`` is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19])


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """``pid``'s children, from ``/proc/<pid>/task/*/children`` (or a scan of ``/proc``)."""
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.update(int(c) for c in (task / "children").read_text().split())
    except FileNotFoundError:  # no such process, or a kernel without CONFIG_PROC_CHILDREN
        if Path(f"/proc/{pid}").exists():
            found = {int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()}
            found = {c for c in found if (_stat(c) or (0, 0))[0] == pid}
    except OSError:
        pass  # the process ended meanwhile
    return sorted(found)


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children(child))
    return sorted(found)


def ancestors(pid: int) -> list[int]:
    found = []
    stat = _stat(pid)
    while stat is not None and stat[0] > 1:
        found.append(stat[0])
        stat = _stat(stat[0])
    return found


def python_workers(root: int) -> list[int]:
    """The Python workers that run tasks below ``root`` (a driver or executor JVM): children
    of ``pyspark.daemon`` started for ``pyspark.worker`` (not the driver's planner workers)."""
    below = descendants(root)
    daemons = {p for p in below if cmdline(p).split()[-2:] == ["pyspark.daemon", "pyspark.worker"]}
    daemons = {d for d in daemons if (_stat(d) or (0, 0))[0] not in daemons}  # not a fork
    return sorted(c for d in daemons for c in children(d))


def executor_jvm(pid: int) -> int | None:
    """The executor JVM (``CoarseGrainedExecutorBackend``) that ``pid`` runs under, if any."""
    for parent in [pid, *ancestors(pid)]:
        if "CoarseGrainedExecutorBackend" in cmdline(parent):
            return parent
    return None


def kill(pids: Iterable[int]) -> list[int]:
    """SIGKILL each of ``pids`` that still runs with the start time it had when listed."""
    listed = [(p, _stat(p)) for p in pids]
    killed = []
    for pid, stat in listed:
        if stat is None or _stat(pid) != stat:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def jvm_pid(spark: Any) -> int:
    """The PID of ``spark``'s driver JVM (started by this process)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


# --- a driver we can kill -------------------------------------------------------------------


class Driver:
    """``python spark_chaos_procs.py spec`` in a new session (its own process group)."""

    def __init__(self, spec: Mapping[str, Any], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, __file__, json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        reaper.track(self.process)
        reaper.add_cleanup(self, self.kill)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver's process group (Python and its JVM), then what ran below it
        in other groups (pyspark's daemon makes its own): the whole machine of a local driver
        gone at once."""
        below = descendants(self.process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        kill(below)
        self.process.wait(30)
        reaper.untrack(self.process)
        reaper.remove_cleanup(self)

    def commit_runners(self) -> list[int]:
        """The Python processes that run the sinks' streaming ``commit()`` on this driver
        (forks of ``pyspark.daemon`` for ``python_streaming_sink_runner``)."""
        below = descendants(self.process.pid)
        daemons = {
            p
            for p in below
            if cmdline(p).split()[-1:] == ["pyspark.sql.worker.python_streaming_sink_runner"]
        }
        return [p for p in daemons if (_stat(p) or (0, 0))[0] in daemons]

    def kill_inside_commit(
        self, bootstrap: str, prefix: str, checkpoint: Path, timeout_s: float, committed: int
    ) -> str | None:
        """Once the query committed a micro-batch, step the driver's commit runners (run
        2 ms, SIGSTOP, look, SIGCONT) until a new exactly-once commit decision of ``prefix``
        is stored and not done - the driver is between its decision and the end of its
        EndTxn calls - with ``committed`` of its transactions committed (at least; any after
        three commits missed), and SIGKILL the driver there; what it left. None if no commit
        was caught in time. (A decision an earlier driver left not done is the restarted
        driver's to complete: not a new one.)"""
        from spark_chaos import committed_batches, wait_until

        from aiokprod.admin import Admin

        before = committed_batches(checkpoint)
        wait_until(
            lambda: committed_batches(checkpoint) != before or not self.alive(),
            timeout_s,
            "a micro-batch",
        )

        async def run() -> str | None:
            async with Admin(bootstrap) as admin:
                return await _step_commit(self, admin, prefix, committed, timeout_s)

        return asyncio.run(run())

    def wait(self, timeout_s: float) -> int:
        """Wait for the driver to end by itself; its exit code."""
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ChaosError(f"the driver did not finish within {timeout_s:.0f} s") from None
        reaper.untrack(self.process)
        reaper.remove_cleanup(self)
        return code

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in text if not line.startswith("\tat "))[-4000:]


async def _step_commit(
    driver: Driver, admin: Any, prefix: str, committed: int, timeout_s: float
) -> str | None:
    from aiokprod.spark.decision_store import DecisionStore

    store = DecisionStore(admin, prefix)

    async def newest() -> Any:
        stored = await store.latest()
        if stored is None or stored.decision is None:
            return None
        return stored.sequence, stored.decision

    def signal_all(pids: list[int], sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    old = await newest()
    missed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and driver.alive():
        runners = driver.commit_runners()  # a commit may run in a new fork
        signal_all(runners, signal.SIGSTOP)
        try:
            found = await newest()
            if found is None or (old is not None and found[0] <= old[0]) or found[1].done:
                continue
            ids = [t.transactional_id for t in found[1].transactions.values()]
            for _ in range(10):  # EndTxn calls sent before the pause land meanwhile
                views = await admin.describe_transactions(ids)
                done = sum(v.state != "Ongoing" for v in views.values())
                if done >= committed:
                    driver.kill()
                    return (
                        f"micro-batch {found[1].batch_id} with {done} of {len(ids)} decided "
                        "transactions committed"
                    )
                await asyncio.sleep(0.05)
            missed.add(found[0])
            if len(missed) >= 3:  # the window is narrow on a busy machine: take any
                committed = 0
        finally:
            signal_all(runners, signal.SIGCONT)
            await asyncio.sleep(0.002)
    return None


def _drive(spec: dict[str, Any]) -> int:
    """The driver program: stream each query until its last micro-batch is committed."""
    from spark_chaos import Gate, Gates, Stream, committed_batches, start_stream
    from spark_session import local_spark

    stream = Stream(**spec["stream"])
    gates = Gates(Path(spec["gates_dir"]))
    with local_spark("aiokprod-chaos-driver", **spec["conf"]) as spark:
        queries = []
        for q in spec["queries"]:
            frame = stream.frame(spark, gates, *(Gate(**g) for g in q["gates"]))
            checkpoint = Path(q["checkpoint"])
            started = start_stream(
                frame, q["sink"], q["bootstrap"], q["topic"], q["prefix"], checkpoint
            )
            queries.append((started, checkpoint))
        print(f"{time.strftime('%X')} {len(queries)} queries started", flush=True)
        deadline = time.monotonic() + spec["deadline_s"]
        while time.monotonic() < deadline:
            for query, checkpoint in queries:
                if query.exception() is not None:
                    print(f"a query failed: {query.exception()}", flush=True)
                    return 2
                if query.isActive and stream.last_batch in committed_batches(checkpoint):
                    query.stop()
            if not any(query.isActive for query, _ in queries):
                print(f"{time.strftime('%X')} every query is done", flush=True)
                return 0
            time.sleep(0.2)
        print("deadline passed", flush=True)
        return 3


# --- the driver killed, the query restarted --------------------------------------------


def driver_kill_run(
    target: Target,
    sinks: Sequence[str],
    scenario: str,
    kill_batches: Sequence[int],
    stream: Stream | None = None,
    *,
    commit_kills: int = 0,
    timed_kills: Sequence[float] = (),
    nth: int = 120,
    conf: dict[str, str] | None = None,
) -> list[Outcome]:
    """A query of ``stream`` per sink in one driver process (``local[N,4]``, N = queries),
    SIGKILLed (process group and all) while micro-batch *b* of ``kill_batches`` is written
    (each query's task 1 held ``nth`` rows in, its rows in the topic), then ``commit_kills``
    times inside the exactly-once query's commit (decision stored, not done), then after
    each of ``timed_kills`` seconds of running; restarted from the checkpoints (same
    prefixes) each time. The last run ends when Spark committed every last micro-batch."""
    stream = stream or Stream()
    started = time.monotonic()
    gates = target.gates()
    run = uuid.uuid4().hex[:8]
    queries = []
    kill_gates: list[list[Gate]] = [[] for _ in kill_batches]
    for i, sink in enumerate(sinks):
        at = [Gate(f"q{i}-kill-{b}", stream.row(b, 1, nth)) for b in kill_batches]
        for round_gates, gate in zip(kill_gates, at, strict=True):
            round_gates.append(gate)
        queries.append(
            {
                "sink": sink,
                "bootstrap": target.bootstrap,
                "topic": target.new_topic(target.topic_partitions),
                "prefix": target.prefix(),
                "checkpoint": str(target.workdir / f"checkpoint-{run}-{i}"),
                "gates": [dataclasses.asdict(g) for g in at],
            }
        )
    spec = {
        "conf": {"master": f"local[{max(2, len(sinks))},4]", **SPARK_CONF, **(conf or {})},
        "queries": queries,
        "gates_dir": str(gates.directory),
        "stream": dataclasses.asdict(stream),
        "deadline_s": WAIT_S * 3,
    }
    log = target.workdir / f"driver-{run}.log"
    written = [0] * len(sinks)
    kills = 0
    for round_gates in kill_gates:
        driver = Driver(spec, log)
        try:
            for i, gate in enumerate(round_gates):
                gates.wait_held(gate, WAIT_S, driver.alive)
                written[i] += wait_written(
                    target.bootstrap,
                    queries[i]["topic"],
                    target.topic_partitions,
                    stream.task_rows(gate.value),
                    MIN_WRITTEN,
                    WAIT_S,
                )
        except ChaosError as exc:
            raise ChaosError(f"{exc}\n--- driver log ---\n{driver.tail()}") from None
        finally:
            driver.kill()
        kills += 1
    eos = [q for q in queries if q["sink"] == EXACTLY_ONCE]
    caught = []
    for i in range(commit_kills):
        driver = Driver(spec, log)
        checkpoint = Path(eos[0]["checkpoint"])
        # alternately right after the decision, and after some of its EndTxn calls
        left = driver.kill_inside_commit(
            target.bootstrap, eos[0]["prefix"], checkpoint, WAIT_S, committed=i % 2
        )
        if left is None:
            driver.kill()
            raise ChaosError(f"no commit was caught in the middle\n{driver.tail()}")
        caught.append(left)
        kills += 1
    for seconds in timed_kills:
        driver = Driver(spec, log)
        time.sleep(seconds)
        if driver.alive():
            driver.kill()
            kills += 1
    driver = Driver(spec, log)
    code = driver.wait(WAIT_S * 3)
    if code != 0:
        raise ChaosError(f"the last driver exited with {code}\n--- driver log ---\n{driver.tail()}")
    outcomes = []
    for i, sink in enumerate(sinks):
        values = read_committed(
            target.bootstrap, queries[i]["topic"], target.topic_partitions, idle_s=1.0
        )
        read, duplicates, missing, extra = count(values, range(stream.total))
        outcomes.append(
            Outcome(
                scenario,
                "stream",
                sink,
                stream.total,
                read,
                duplicates,
                missing,
                extra,
                kills,
                written[i],
                False,
                round(time.monotonic() - started, 1),
                f"driver SIGKILLed {kills} times ({len(kill_gates)} mid-write, {commit_kills} "
                f"inside the commit, {kills - len(kill_gates) - commit_kills} timed), "
                f"{len(sinks)} queries in it" + "".join(f"; killed in {c}" for c in caught),
            )
        )
    return outcomes


# --- a standalone cluster -----------------------------------------------------------------


def spark_home() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return str(_find_spark_home())


class StandaloneCluster:
    """A Spark master on 127.0.0.1 and one single-core worker on each of ``hosts``."""

    def __init__(self, hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3")) -> None:
        self.hosts = hosts
        self.url = ""
        self._dir = Path(tempfile.mkdtemp(prefix="aiokprod-spark-standalone-"))
        self._master: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def _launch(self, name: str, host: str, main: str, *args: str) -> subprocess.Popen[bytes]:
        home = spark_home()
        env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP=host, SPARK_SCALA_VERSION="2.13")
        command = [
            *reaper.parent_death_prefix(),
            find_java(),
            "-Xmx256m",
            "-Dspark.master.rest.enabled=false",
            "-cp",
            f"{home}/conf:{home}/jars/*",
            main,
            *args,
        ]
        with (self._dir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._dir,
                start_new_session=True,
            )
        reaper.track(process)
        return process

    def _log(self, name: str) -> str:
        path = self._dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait_log(self, name: str, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = re.search(pattern, self._log(name))
            if found is not None:
                return found
            time.sleep(0.2)
        raise ChaosError(f"Spark {name} not ready in {timeout_s:.0f} s:\n{self._log(name)[-3000:]}")

    def start(self, timeout_s: float = 120.0) -> StandaloneCluster:
        self._master = self._launch(
            "master",
            "127.0.0.1",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--webui-port",
            "0",
        )
        found = self._wait_log("master", r"Starting Spark master at (spark://\S+)", timeout_s)
        self.url = found.group(1)
        self._wait_log("master", r"elected leader", timeout_s)
        for host in self.hosts:
            work = self._dir / f"work-{host}"
            self.workers[host] = self._launch(
                f"worker-{host}",
                host,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                host,
                "--port",
                "0",
                "--webui-port",
                "0",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work),
                self.url,
            )
        for host in self.hosts:
            self._wait_log("master", rf"Registering worker {re.escape(host)}:", timeout_s)
        return self

    def stop(self) -> None:
        """SIGKILL the workers, the master and every executor below the workers (they hold
        nothing to keep: a graceful stop only costs time)."""
        below = [p for w in self.workers.values() for p in descendants(w.pid)]
        for process in [*self.workers.values(), *([self._master] if self._master else [])]:
            process.kill()
            process.wait()
            reaper.untrack(process)
        kill(below)
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_drive(json.loads(sys.argv[1])))
