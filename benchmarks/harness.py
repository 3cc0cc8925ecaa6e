"""The orchestrator: one local Kafka, a fresh topic per run, each client in its own process.

For each repetition, for each workload, for each client (the client order rotates from one
repetition to the next, so no client always runs first or last):

1. create a fresh topic (confluent-kafka's AdminClient, then wait until the broker shows a
   leader for every partition);
2. run the client's runner (or the Java perf tool) as a subprocess, killed if it runs over its
   time limit; ``os.wait4`` gives its CPU time (user+sys, all threads) and peak RSS;
3. read the topic's high watermarks on the broker and compare them with what was sent: a
   run that did not deliver every record (or delivered more) is FAILED, never counted;
   for compressed workloads the bytes on disk per record show that compression happened;
4. delete the topic.

Results go to ``benchmarks/results/<name>.json`` after every run (so an interrupted run keeps
what it measured) and, at the end, to the markdown report, the chart and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokprod.testing import LocalKafka, LocalKafkaError
from benchmarks import java_perf, payload
from benchmarks.busy import one_core_busy
from benchmarks.settings import (
    CLIENTS,
    COMMON,
    WORKLOADS,
    Client,
    Workload,
    applies,
    quick,
    run_settings,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
RUNNER_MODULES = {
    "aiokprod": "benchmarks.runners.aiokprod_runner",
    "aiokafka": "benchmarks.runners.aiokafka_runner",
    "confluent": "benchmarks.runners.confluent_runner",
    "confluent-aio": "benchmarks.runners.confluent_aio_runner",
    "kafka-python": "benchmarks.runners.kafka_python_runner",
}
BROKER_CONFIG = {
    "auto.create.topics.enable": "false",
    # Deleted topics' files go after 1 s instead of 60 s (file.delete.delay.ms of every
    # topic), so that the harness can wait for that work to end before the next run.
    "log.segment.delete.delay.ms": "1000",
}
WARMUP_RECORDS = 300_000
"""Unrecorded records sent before the first measured run, so the broker's JIT is warm."""


# --- the broker side: topics, watermarks, bytes on disk ------------------------------------


class ConfluentTopicAdmin:
    """A ``TopicAdmin`` for LocalKafka that uses confluent-kafka's AdminClient.

    LocalKafka's default runs Kafka's TopicCommand in a new JVM per topic (seconds each);
    the suite creates and deletes a few hundred topics.
    """

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def client(self, bootstrap: str) -> Any:
        """The AdminClient for ``bootstrap`` (one per cluster, kept)."""
        from confluent_kafka.admin import AdminClient

        if bootstrap not in self._clients:
            self._clients[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
        return self._clients[bootstrap]

    def create(
        self,
        bootstrap: str,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
        *,
        timeout: float,
    ) -> None:
        """Create a topic; raise ``LocalKafkaError`` if the cluster refuses."""
        # confluent-kafka's documented names; its admin module re-exports them without `as`
        # or __all__, so its type information does not export them (the types are intact).
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        topic = NewTopic(name, partitions, replication_factor, config=dict(config))
        futures = self.client(bootstrap).create_topics(
            [topic], operation_timeout=timeout, request_timeout=timeout
        )
        try:
            futures[name].result(timeout)
        except Exception as exc:
            raise LocalKafkaError(f"creating topic {name!r} failed: {exc}") from exc

    def delete(self, bootstrap: str, name: str, *, timeout: float) -> None:
        """Delete a topic; raise ``LocalKafkaError`` if the cluster refuses."""
        futures = self.client(bootstrap).delete_topics(
            [name], operation_timeout=timeout, request_timeout=timeout
        )
        try:
            futures[name].result(timeout)
        except Exception as exc:
            raise LocalKafkaError(f"deleting topic {name!r} failed: {exc}") from exc

    def close(self) -> None:
        """Drop the AdminClients (before the broker stops: they would log reconnect errors)."""
        self._clients.clear()

    def high_watermarks(
        self, bootstrap: str, topic: str, partitions: int, attempts: int = 5
    ) -> list[int]:
        """The log end offset of every partition (ListOffsets, latest)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # as NewTopic

        # OffsetSpec.latest() has no annotations in confluent-kafka (it returns an OffsetSpec)
        request = {
            TopicPartition(topic, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
            for p in range(partitions)
        }
        for attempt in range(1, attempts + 1):
            try:
                futures = self.client(bootstrap).list_offsets(request, request_timeout=30)
                offsets = [0] * partitions
                for tp, future in futures.items():
                    offsets[tp.partition] = future.result(30).offset
                return offsets
            except Exception:
                # e.g. NOT_LEADER_FOR_PARTITION from a stale metadata view: ask again
                if attempt == attempts:
                    raise
                time.sleep(attempt * 0.5)
        raise AssertionError("unreachable")


def log_bytes(kafka: LocalKafka, topic: str) -> int:
    """Bytes of the topic's log segments on the (single) broker's disk."""
    data = kafka.node(1).node_dir / "data"
    total = 0
    for directory in data.glob(f"{topic}-*"):
        for segment in directory.glob("*.log"):
            with contextlib.suppress(OSError):
                total += segment.stat().st_size
    return total


# --- machine load ----------------------------------------------------------------------------


def _cpu_times() -> list[int]:
    with open("/proc/stat", encoding="ascii") as handle:
        fields = handle.readline().split()[1:]
    return [int(x) for x in fields]


def _cpu_share(before: list[int], after: list[int]) -> dict[str, float]:
    """Busy and steal percentages of the whole machine between two /proc/stat readings."""
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta) or 1
    idle = delta[3] + (delta[4] if len(delta) > 4 else 0)
    steal = delta[7] if len(delta) > 7 else 0
    return {"busy_pct": 100 * (total - idle) / total, "steal_pct": 100 * steal / total}


def _broker_cpu(kafka: LocalKafka) -> float:
    import psutil

    process = kafka.node(1).process
    if process is None:
        return 0.0
    try:
        times = psutil.Process(process.pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


# --- one subprocess -------------------------------------------------------------------------


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool
    user_s: float
    sys_s: float
    peak_rss_mib: float
    ru_maxrss_mib: float
    wall_s: float
    stdout: str
    stderr: str


RSS_POLL_S = 0.02


def _vm_hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_process(
    command: list[str], timeout: float, workdir: Path, env: dict[str, str] | None = None
) -> ProcessOutcome:
    """Run ``command``; kill it (by its PID, it alone) if it runs over ``timeout`` seconds.

    ``os.wait4`` reaps it and returns its own resource usage: user and system CPU of all its
    threads, and its peak resident set size.
    """
    out_path = workdir / "stdout.txt"
    err_path = workdir / "stderr.txt"
    began = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=ROOT, env=env
        )
    reaped: dict[str, Any] = {}

    def reap() -> None:
        reaped["status"] = os.wait4(process.pid, 0)

    waiter = threading.Thread(target=reap, name=f"wait4-{process.pid}", daemon=True)
    waiter.start()
    # ru_maxrss of a child includes the RSS its parent (this process) had at fork time, so
    # the peak is read from /proc/PID/status (VmHWM: the high-water mark since exec) while
    # the process runs; runners also report their own at the end.
    hwm = 0
    deadline = began + timeout
    try:
        while waiter.is_alive() and time.monotonic() < deadline:
            hwm = max(hwm, _vm_hwm_kib(process.pid))
            waiter.join(min(RSS_POLL_S, max(deadline - time.monotonic(), 0.0)))
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM): the runner must not outlive the harness
        if waiter.is_alive():
            os.kill(process.pid, signal.SIGKILL)
            waiter.join()
        raise
    timed_out = waiter.is_alive()
    if timed_out:
        os.kill(process.pid, signal.SIGKILL)
        waiter.join()
    wall = time.monotonic() - began
    _pid, status, usage = reaped["status"]
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return ProcessOutcome(
        exit_code=process.returncode,
        timed_out=timed_out,
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        peak_rss_mib=hwm / 1024,
        ru_maxrss_mib=usage.ru_maxrss / 1024,
        wall_s=wall,
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
        stderr=err_path.read_text(encoding="utf-8", errors="replace"),
    )


def time_limit(records: int, workload: Workload) -> float:
    """Seconds a run may take before it is killed (generous: a stuck client, not a slow one)."""
    if workload.kind == "latency":
        return 60 + (records + workload.warmup) * 0.02
    return 60 + records / 2_500


# --- one run -----------------------------------------------------------------------------------


@dataclass
class Session:
    kafka: LocalKafka
    admin: ConfluentTopicAdmin
    payload_dir: Path
    work_dir: Path
    quick: bool


def records_for(client: Client, workload: Workload) -> int:
    return workload.records[client.speed]


def execute(session: Session, workload: Workload, client: Client, rep: int) -> dict[str, Any]:
    """One measured run; returns its record (status ``ok`` or ``FAILED``)."""
    kafka = session.kafka
    records = records_for(client, workload)
    expected = records + (workload.warmup if workload.kind == "latency" else 0)
    topic = f"bench-{workload.name}-{client.id}-r{rep}-{uuid.uuid4().hex[:6]}"
    settings = run_settings(client, workload)
    run: dict[str, Any] = {
        "workload": workload.name,
        "client": client.id,
        "family": client.family,
        "rep": rep,
        "topic": topic,
        "partitions": workload.partitions,
        "records": records,
        "expected": expected,
        "value_size": workload.value_size,
        "key_size": 10 if workload.keys else 0,
        "settings": settings,
        "status": "FAILED",
        "failures": [],
    }
    began = time.monotonic()
    kafka.create_topic(topic, partitions=workload.partitions)
    workdir = Path(tempfile.mkdtemp(prefix=f"{client.id}-", dir=session.work_dir))
    try:
        _wait_writable(session, topic, workload.partitions)
        run["topic_setup_s"] = time.monotonic() - began
        if client.family == "java":
            payload_file = session.payload_dir / f"values-{workload.value_size}.txt"
            if not payload_file.exists():
                payload.write_payload_file(payload_file, workload.value_size)
            command = java_perf.command(
                kafka.tools_distribution,
                kafka.bootstrap_servers,
                topic,
                records,
                payload_file,
                {**COMMON, **settings},
            )
            env: dict[str, str] | None = None
        else:
            spec = {
                "client": client.id,
                "kind": workload.kind,
                "mode": client.mode,
                "bootstrap": kafka.bootstrap_servers,
                "topic": topic,
                "records": records,
                "warmup": workload.warmup if workload.kind == "latency" else 0,
                "value_size": workload.value_size,
                "keys": workload.keys,
                "settings": settings,
                "event_loop": client.event_loop,
            }
            result_path = workdir / "result.json"
            python, env = _interpreter(client, workdir)
            command = [
                python,
                "-m",
                RUNNER_MODULES[client.family],
                "--spec",
                json.dumps(spec),
                "--result",
                str(result_path),
            ]
        run["aiokprod_source_digest"] = source_digest()
        load_before = os.getloadavg()
        cpu_before = _cpu_times()
        broker_before = _broker_cpu(kafka)
        outcome = run_process(command, time_limit(records, workload), workdir, env)
        run["broker_cpu_s"] = _broker_cpu(kafka) - broker_before
        run["machine"] = _cpu_share(cpu_before, _cpu_times())
        run["loadavg_before"] = load_before
        run["loadavg_after"] = os.getloadavg()
        run.update(
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            process_cpu_s=outcome.user_s + outcome.sys_s,
            user_s=outcome.user_s,
            sys_s=outcome.sys_s,
            peak_rss_mib=outcome.peak_rss_mib,
            ru_maxrss_mib=outcome.ru_maxrss_mib,
            process_wall_s=outcome.wall_s,
        )
        own_cpu = run["process_cpu_s"] + run["broker_cpu_s"]
        busy = run["machine"]["busy_pct"] / 100 * (os.cpu_count() or 1) * outcome.wall_s
        run["other_cores"] = max(busy - own_cpu, 0.0) / outcome.wall_s if outcome.wall_s else 0
        if client.family == "java":
            result = java_perf.parse(outcome.stdout)
            result["library"] = (
                f"Apache Kafka {kafka.tools_distribution.version} ProducerPerformance"
            )
            result["window_cpu_s"] = None  # whole process only (JVM start and JIT included)
        else:
            try:
                result = json.loads((workdir / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                result = {"sent": 0, "elapsed_s": 0.0, "errors": 0, "first_error": ""}
        run.update(result)
        compiled = "mypyc" in str(result.get("library", "mypyc" if client.compiled else ""))
        if client.interpreter and compiled != client.compiled:
            build = "the compiled" if client.compiled else "a pure-Python"
            run["failures"].append(f"{client.interpreter} did not run {build} build")
        if result.get("peak_rss_self_mib"):
            run["peak_rss_mib"] = max(run["peak_rss_mib"], result["peak_rss_self_mib"])
        _verify(session, workload, run, outcome, topic)
        if run["status"] != "ok":
            run["stderr_tail"] = outcome.stderr[-3000:]
            run["stdout_tail"] = outcome.stdout[-1500:]
    finally:
        try:
            kafka.delete_topic(topic)
            _wait_files_gone(kafka, topic)
        except LocalKafkaError as exc:
            run.setdefault("notes", []).append(f"topic not deleted: {exc}")
    return run


def _wait_files_gone(kafka: LocalKafka, topic: str, timeout: float = 60.0) -> None:
    """Wait until the broker has removed the deleted topic's partition folders.

    The broker renames them ``<topic>-<p>.<id>-delete`` and removes them
    ``file.delete.delay.ms`` later, in the background: for a 1,000-partition topic that is
    seconds of broker work, which must not fall into the next client's run.
    """
    data = kafka.node(1).node_dir / "data"
    deadline = time.monotonic() + timeout
    while any(data.glob(f"{topic}-*")):
        if time.monotonic() > deadline:
            raise LocalKafkaError(f"the files of deleted topic {topic!r} are still there")
        time.sleep(0.1)


def _wait_writable(session: Session, topic: str, partitions: int, timeout: float = 120.0) -> None:
    """Wait until the broker answers ListOffsets for every partition of the new topic.

    Metadata shows a leader for every partition as soon as the controller has assigned
    them, but the broker may still be opening the partitions' logs (seconds for 1,000 of
    them on two cores) and answers NOT_LEADER_OR_FOLLOWER to Produce meanwhile: a client
    started then would measure the broker's start-up, and its retry policy.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            offsets = session.admin.high_watermarks(
                session.kafka.bootstrap_servers, topic, partitions, attempts=1
            )
        except Exception as exc:
            if time.monotonic() > deadline:
                message = f"topic {topic!r} not writable in {timeout:.0f} s: {exc}"
                raise LocalKafkaError(message) from exc
            time.sleep(0.2)
            continue
        if any(offsets):
            raise LocalKafkaError(f"fresh topic {topic!r} is not empty: {sum(offsets)} records")
        return


def _verify(
    session: Session, workload: Workload, run: dict[str, Any], outcome: ProcessOutcome, topic: str
) -> None:
    kafka = session.kafka
    failures: list[str] = run["failures"]
    try:
        offsets = session.admin.high_watermarks(kafka.bootstrap_servers, topic, workload.partitions)
        run["delivered"] = sum(offsets)
        run["partitions_used"] = sum(1 for o in offsets if o)
    except Exception as exc:  # noqa: BLE001 - recorded as the run's failure, the suite goes on
        run["delivered"] = None
        failures.append(f"could not read the high watermarks: {exc}")
    run["log_bytes"] = log_bytes(kafka, topic)
    if run.get("delivered"):
        run["disk_bytes_per_record"] = run["log_bytes"] / run["delivered"]
    if outcome.timed_out:
        failures.append(f"killed after {outcome.wall_s:.0f} s (time limit)")
    elif outcome.exit_code != 0:
        failures.append(f"exit code {outcome.exit_code}")
    if run.get("crash"):
        failures.append("the runner raised: " + run["crash"].strip().splitlines()[-1])
    if run.get("errors"):
        failures.append(f"{run['errors']} record(s) failed in the client: {run['first_error']}")
    if run.get("delivered") is not None and run["delivered"] != run["expected"]:
        failures.append(f"delivered {run['delivered']:,} of {run['expected']:,} records")
    if run.get("sent") != run["expected"] and not failures:
        failures.append(f"the client reports {run.get('sent')} sent of {run['expected']}")
    if not run.get("elapsed_s"):
        failures.append("no timing")
    if workload.compression != "none" and run.get("disk_bytes_per_record"):
        raw = workload.value_size + run["key_size"]
        if run["disk_bytes_per_record"] >= raw:
            failures.append(
                f"not compressed on the broker: {run['disk_bytes_per_record']:.1f} bytes per "
                f"record on disk for {raw}-byte records"
            )
    if failures:
        return
    run["status"] = "ok"
    elapsed = run["elapsed_s"]
    counted = run["records"]
    run["records_per_s"] = counted / elapsed
    run["mb_per_s"] = counted * (workload.value_size + run["key_size"]) / elapsed / 1e6
    cpu = run.get("window_cpu_s")
    if cpu is None:
        cpu = run["process_cpu_s"]
        run["cpu_basis"] = "process"
    else:
        run["cpu_basis"] = "window"
    run["cpu_s_per_million"] = cpu / counted * 1e6


# --- capabilities ------------------------------------------------------------------------------


def _interpreter(client: Client, workdir: Path) -> tuple[str, dict[str, str] | None]:
    """The Python that runs the client's runner, and its environment (None: ours).

    Another interpreter (the mypyc build's venv) must import aiokprod from its own
    site-packages, not from the source tree the runner starts in: the source tree is kept
    off its path (PYTHONSAFEPATH) and only the benchmarks package is put on it.
    """
    if not client.interpreter:
        return sys.executable, None
    path_dir = workdir / "pythonpath"
    path_dir.mkdir(exist_ok=True)
    (path_dir / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(path_dir)}
    return str(_interpreter_path(client)), env


def _interpreter_path(client: Client) -> Path:
    """The client's interpreter: relative to the project root, ``$NAME`` from the environment."""
    return ROOT / os.path.expandvars(client.interpreter)


def aiokprod_builds(clients: list[Client]) -> dict[str, str]:
    """Interpreter -> the aiokprod build it runs (``aiokprod --version``), for the aiokprod rows.

    ``-P``: another venv's Python must not import the source tree (pure Python) from here.
    """
    builds: dict[str, str] = {}
    for client in clients:
        python = ROOT / client.interpreter if client.interpreter else Path(sys.executable)
        name = os.path.relpath(python, ROOT)
        if client.family != "aiokprod" or name in builds or not python.exists():
            continue
        done = subprocess.run(
            [str(python), "-P", "-m", "aiokprod", "--version"],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        builds[name] = done.stdout.strip() or f"unknown ({done.stderr.strip()[-200:]})"
    return builds


def unavailable(client: Client, workload: Workload) -> str | None:
    """Why this row cannot run on this machine (None: it can)."""
    if client.interpreter and "$" in os.path.expandvars(client.interpreter):
        return f"{client.interpreter}: the variable is not set"
    if client.interpreter and not _interpreter_path(client).exists():
        return f"{client.interpreter} is missing (make test-compiled builds it)"
    if client.mode == "send_many":
        from aiokprod import Producer

        if not hasattr(Producer, "send_many"):
            return "aiokprod's Producer has no send_many yet"
    codec = workload.compression
    if codec == "none":
        return None
    family = client.family
    if family == "aiokprod":
        from aiokprod import ConfigError, Producer

        try:
            Producer("127.0.0.1:9", compression_type=codec)
        except ConfigError as exc:
            return f"aiokprod does not support {codec} yet ({exc})"
        except Exception as exc:  # noqa: BLE001 - any failure means "skip this codec", said why
            return f"aiokprod: {codec} unavailable ({exc!r})"
        return None
    if family == "aiokafka":
        import aiokafka.codec

        ok = aiokafka.codec.has_lz4() if codec == "lz4" else aiokafka.codec.has_zstd()
        return None if ok else f"aiokafka: no {codec} library (cramjam)"
    if family == "kafka-python":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import kafka.codec

        ok = kafka.codec.has_lz4() if codec == "lz4" else kafka.codec.has_zstd()
        return None if ok else f"kafka-python: no {codec} library (lz4 / zstandard)"
    if family in ("confluent", "confluent-aio"):
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as ConfluentProducer

        try:
            # no bootstrap: nothing to connect to; librdkafka checks the codec is built in
            ConfluentProducer({"compression.type": codec, "log_level": 0})
        except KafkaException as exc:
            return f"librdkafka without {codec}: {exc}"
        return None
    return None


# --- environment ----------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in (
            Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace").splitlines()
        ):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "not installed"


def source_digest() -> str:
    """A digest of aiokprod's source files: shows whether the code changed during a session."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((ROOT / "aiokprod").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_state() -> dict[str, str]:
    """The commit and whether aiokprod/ differs from it (read-only git commands)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    dirty = git("status", "--porcelain", "--", "aiokprod")
    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "aiokprod_modified_files": str(len(dirty.splitlines())) if dirty else "0",
    }


def environment(kafka: LocalKafka) -> dict[str, Any]:
    import confluent_kafka
    import psutil

    from aiokprod.testing.java import find_java

    java = find_java()
    java_version = subprocess.run(
        [java, "-version"], capture_output=True, text=True, check=False
    ).stderr.splitlines()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "event_loop": "asyncio (default; no uvloop)",
        "java": java_version[0] if java_version else "unknown",
        "kafka": kafka.distribution.version,
        "broker": "single node, KRaft, 127.0.0.1, heap 1 GiB, "
        + ", ".join(f"{k}={v}" for k, v in BROKER_CONFIG.items()),
        "libraries": {
            "aiokprod": _version("aiokprod"),
            "aiokafka": _version("aiokafka"),
            "confluent-kafka": _version("confluent-kafka"),
            "librdkafka": confluent_kafka.libversion()[0],
            "kafka-python": _version("kafka-python"),
            "cramjam": _version("cramjam"),
            "lz4": _version("lz4"),
            "zstandard": _version("zstandard"),
        },
        "loadavg_at_start": os.getloadavg(),
        "git": git_state(),
        "aiokprod_source_digest": source_digest(),
    }


# --- the session --------------------------------------------------------------------------------


def _select(names: str | None, items: tuple[Any, ...], what: str, attr: str) -> list[Any]:
    if not names:
        return list(items)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {getattr(i, attr) for i in items} | {getattr(i, "family", "") for i in items}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [i for i in items if getattr(i, attr) in wanted or getattr(i, "family", "") in wanted]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="aiokprod against its peers on one local Apache Kafka (see docs/benchmarks.md)",
    )
    parser.add_argument("--quick", action="store_true", help="a tenth of the records, 1 repetition")
    parser.add_argument("--repetitions", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument(
        "--clients",
        help="comma-separated client ids or families, e.g. aiokprod,aiokafka "
        f"(all: {', '.join(c.id for c in CLIENTS)})",
    )
    parser.add_argument(
        "--workloads",
        help=f"comma-separated workloads (all: {', '.join(w.name for w in WORKLOADS)})",
    )
    parser.add_argument(
        "--name",
        help="results name: benchmarks/results/NAME.{json,md} (default: latest for a full "
        "run, quick or partial otherwise)",
    )
    parser.add_argument(
        "--docs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update docs/benchmarks.md and docs/benchmarks.png (default: only for a full run)",
    )
    parser.add_argument(
        "--busy",
        action="store_true",
        help="keep one core busy meanwhile (a nice 19 loop; benchmarks/busy.py): how a "
        "machine with other work on it looks; the results say so",
    )
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    return parser.parse_args(argv)


def plan(
    workloads: list[Workload], clients: list[Client], repetitions: int
) -> tuple[list[tuple[int, Workload, Client]], list[dict[str, str]]]:
    """Runs in order (client order rotated per repetition), and the rows that are skipped."""
    runs = []
    skipped = []
    for workload in workloads:
        for client in clients:
            if not applies(client, workload):
                continue
            reason = unavailable(client, workload)
            if reason:
                skipped.append({"workload": workload.name, "client": client.id, "reason": reason})
    skip_keys = {(s["workload"], s["client"]) for s in skipped}
    for rep in range(repetitions):
        shift = rep % len(clients) if clients else 0
        order = clients[shift:] + clients[:shift]
        for workload in workloads:
            for client in order:
                if applies(client, workload) and (workload.name, client.id) not in skip_keys:
                    runs.append((rep + 1, workload, client))
    return runs, skipped


def _progress(index: int, total: int, run: dict[str, Any]) -> str:
    head = f"[{index}/{total}] {run['workload']} · {run['client']} · rep {run['rep']}: "
    if run["status"] != "ok":
        return head + "FAILED: " + "; ".join(run["failures"])
    text = f"{run['records_per_s']:,.0f} rec/s, {run['mb_per_s']:.1f} MB/s"
    latency = run.get("latency_us") or {}
    if latency:
        text += f", p50 {latency['p50']:.0f} µs, p99 {latency['p99']:.0f} µs"
    return head + (
        f"{text}, CPU {run['process_cpu_s']:.1f} s, RSS {run['peak_rss_mib']:.0f} MiB, "
        f"delivered {run['delivered']:,}/{run['expected']:,} ({run['process_wall_s']:.1f} s)"
    )


def _warm_up(session: Session, quick_mode: bool) -> None:
    """Unrecorded confluent-kafka run so that the broker's JIT is warm for the first client."""
    records = WARMUP_RECORDS // (10 if quick_mode else 1)
    workload = Workload(
        "warmup", "warm-up", records={"fast": records, "medium": records, "slow": records}
    )
    client = next(c for c in CLIENTS if c.id == "confluent")
    started = time.monotonic()
    run = execute(session, workload, client, 0)
    print(
        f"broker warm-up: {records:,} records, {run['status']} "
        f"({time.monotonic() - started:.1f} s)",
        flush=True,
    )


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    from benchmarks import report

    args = parse_args(argv)
    # SIGTERM (and SIGINT, which a background job may have ignored) unwind the session, so
    # the broker is stopped and the running client killed.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    workloads = _select(args.workloads, WORKLOADS, "workloads", "name")
    clients = _select(args.clients, CLIENTS, "clients", "id")
    if args.quick:
        workloads = [quick(w) for w in workloads]
    repetitions = args.repetitions or (1 if args.quick else 3)
    full = not (args.quick or args.clients or args.workloads or args.repetitions)
    name = args.name or ("latest" if full else "quick" if args.quick else "partial")
    update_docs = args.docs if args.docs is not None else full
    runs, skipped = plan(workloads, clients, repetitions)
    for item in skipped:
        print(f"skipped: {item['workload']} · {item['client']}: {item['reason']}")
    if args.list:
        for rep, workload, client in runs:
            print(f"rep {rep}: {workload.name} · {client.id} · {records_for(client, workload):,}")
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / f"{name}.json"
    document: dict[str, Any] = {
        "schema": 1,
        "name": name,
        "command": " ".join(
            ["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]
        ),
        "quick": args.quick,
        "full": full,
        "repetitions": repetitions,
        "busy": args.busy,
        "common_settings": COMMON,
        "workloads": [asdict(w) for w in workloads],
        "clients": [asdict(c) for c in clients],
        "skipped": skipped,
        "runs": [],
    }
    print(f"{len(runs)} runs; results in {out_json}", flush=True)
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="aiokprod-bench-") as scratch,
        LocalKafka(heap_min="1g", heap_max="1g", broker_config=BROKER_CONFIG) as kafka,
        one_core_busy(args.busy),
    ):
        admin = ConfluentTopicAdmin()
        kafka.topic_admin = admin
        session = Session(kafka, admin, Path(scratch), Path(scratch), args.quick)
        document["environment"] = environment(kafka)
        document["environment"]["aiokprod_builds"] = aiokprod_builds(clients)
        for python, build in document["environment"]["aiokprod_builds"].items():
            print(f"{python}: {build}", flush=True)
        print(
            f"Kafka {kafka.distribution.version} at {kafka.bootstrap_servers} "
            f"(started in {kafka.startup_seconds:.1f} s); load {os.getloadavg()}",
            flush=True,
        )
        _warm_up(session, args.quick)
        for index, (rep, workload, client) in enumerate(runs, 1):
            try:
                run = execute(session, workload, client, rep)
            except LocalKafkaError as exc:
                run = {
                    "workload": workload.name,
                    "client": client.id,
                    "family": client.family,
                    "rep": rep,
                    "status": "FAILED",
                    "failures": [f"harness: {exc}"],
                }
            document["runs"].append(run)
            print(_progress(index, len(runs), run), flush=True)
            _save(out_json, document)
        admin.close()
    document["environment"]["loadavg_at_end"] = os.getloadavg()
    document["environment"]["duration_s"] = round(time.monotonic() - began, 1)
    _save(out_json, document)
    written = report.render(out_json, update_docs=update_docs)
    for path in written:
        print(f"wrote {path}")
    failed = [r for r in document["runs"] if r["status"] != "ok"]
    print(
        f"{len(document['runs'])} runs, {len(failed)} failed, in {time.monotonic() - began:.0f} s"
    )
    return 1 if failed else 0


def _save(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)
