"""Profile one client runner on one workload with py-spy (or pyinstrument), keep the numbers.

::

    .venv/bin/python -m benchmarks.profiling                      # aiokprod, unkeyed
    .venv/bin/python -m benchmarks.profiling --workload keyed --records 1000000

Starts its own local Kafka and a fresh topic, runs the runner exactly as the suite does, but
under ``py-spy record --function --format raw`` (sampling from outside the process: the
runner's timing is barely disturbed), and writes to ``benchmarks/results/``:

* ``profile-<client>-<workload>.txt``: the top functions by self time and by total time,
  over the samples of the measured part (imports and the building of the record lists are
  left out), plus the run's own figures;
* ``profile-<client>-<workload>.collapsed``: every stack with its sample count (the
  "collapsed" format that flamegraph.pl, speedscope and inferno read).

``--profiler pyinstrument`` runs it under pyinstrument instead (in-process; its text report
is written as is).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from aiokprod.testing import LocalKafka
from benchmarks.harness import (
    BROKER_CONFIG,
    RESULTS,
    ROOT,
    RUNNER_MODULES,
    ConfluentTopicAdmin,
    Session,
    _wait_writable,
    source_digest,
)
from benchmarks.settings import CLIENTS, WORKLOADS, run_settings

EXCLUDE = ("_find_and_load", "payload.py", "lists (benchmarks/runners/common.py")
"""Frames whose stacks are not part of the measured send path (imports, record lists)."""
SCAFFOLDING = ("_run", "run", "main", "<module>", "BaseEventLoop.", "Runner.", "Handle._run")
"""Frames left out of the total-time table: the interpreter's, asyncio's and the runner's
own outer frames, which are in every sample and say nothing."""


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    stacks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        stacks.append((stack.split(";"), int(count)))
    return stacks


def _name(frame: str) -> str:
    """``function (file:first line)``, as ``py-spy --function`` names it."""
    return frame if frame.strip() else "(no Python frame: native code or the interpreter)"


def top_functions(
    stacks: list[tuple[list[str], int]], top: int
) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int, int]:
    """(self by function, total by function, samples kept, samples excluded)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    kept = excluded = 0
    for frames, count in stacks:
        if any(marker in frame for frame in frames for marker in EXCLUDE):
            excluded += count
            continue
        kept += count
        own[_name(frames[-1])] += count
        for frame in {_name(f) for f in frames if not f.startswith(SCAFFOLDING)}:
            total[frame] += count
    return own.most_common(top), total.most_common(top), kept, excluded


def table(rows: list[tuple[str, int]], kept: int) -> list[str]:
    lines = [f"{'%':>6} {'samples':>8}  function (file:first line)"]
    for name, count in rows:
        lines.append(f"{100 * count / kept:6.1f} {count:8d}  {name}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiling", description=__doc__)
    parser.add_argument("--client", default="aiokprod", choices=sorted(RUNNER_MODULES))
    parser.add_argument("--workload", default="unkeyed", choices=[w.name for w in WORKLOADS])
    parser.add_argument("--records", type=int, default=None, help="default: the suite's count")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--profiler", choices=("py-spy", "pyinstrument"), default="py-spy")
    args = parser.parse_args()

    workload = next(w for w in WORKLOADS if w.name == args.workload)
    client = next(c for c in CLIENTS if c.id == args.client)
    records = args.records or workload.records[client.speed]
    stem = RESULTS / f"profile-{client.id}-{workload.name}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="aiokprod-profile-") as scratch,
        LocalKafka(heap_min="1g", heap_max="1g", broker_config=BROKER_CONFIG) as kafka,
    ):
        admin = ConfluentTopicAdmin()
        kafka.topic_admin = admin
        topic = f"profile-{workload.name}-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, partitions=workload.partitions)
        _wait_writable(
            Session(kafka, admin, Path(scratch), Path(scratch), False), topic, workload.partitions
        )
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
            "settings": run_settings(client, workload),
        }
        result_path = Path(scratch) / "result.json"
        runner = [
            "-m",
            RUNNER_MODULES[client.family],
            "--spec",
            json.dumps(spec),
            "--result",
            str(result_path),
        ]
        raw = Path(scratch) / "profile.out"
        if args.profiler == "py-spy":
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            command = [
                py_spy,
                "record",
                "--function",
                "--format",
                "raw",
                "--rate",
                str(args.rate),
                "--output",
                str(raw),
                "--",
                sys.executable,
                *runner,
            ]
        else:
            command = [
                sys.executable,
                "-m",
                "pyinstrument",
                "--renderer",
                "text",
                "--outfile",
                str(raw),
                "--show-all",
                *runner,
            ]
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
        )
        offsets = admin.high_watermarks(kafka.bootstrap_servers, topic, workload.partitions)
        admin.close()
        if done.returncode != 0 or not raw.exists():
            print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
            return 1
        result = json.loads(result_path.read_text(encoding="utf-8"))
        delivered = sum(offsets)
        rate = records / result["elapsed_s"] if result["elapsed_s"] else 0
        header = [
            f"# {client.label} on '{workload.title}' under {args.profiler}",
            f"# {records:,} records, {rate:,.0f} records/s while profiled "
            f"(window CPU {result['window_cpu_s']:.2f} s), delivered {delivered:,}/{records:,}",
            f"# {result['library']} (source digest {source_digest()}); "
            f"Kafka {kafka.distribution.version}; load {os.getloadavg()[0]:.2f}; command: "
            f"python -m benchmarks.profiling --client {client.id} --workload {workload.name} "
            f"--records {records} --profiler {args.profiler}",
        ]
        if args.profiler == "pyinstrument":
            out = stem.with_suffix(".txt")
            out.write_text(
                "\n".join(header) + "\n\n" + raw.read_text(encoding="utf-8"), encoding="utf-8"
            )
            print(out.read_text(encoding="utf-8"))
            return 0
        text = raw.read_text(encoding="utf-8")
        stem.with_suffix(".collapsed").write_text(text, encoding="utf-8")
        own, total, kept, excluded = top_functions(parse_collapsed(text), args.top)
        lines = [
            *header,
            f"# py-spy --rate {args.rate} --function (CPU samples only: idle waits are not "
            f"sampled); {kept:,} samples kept, {excluded:,} left out (imports, building the "
            f"record lists)",
            "",
            f"## top {args.top} by self time",
            *table(own, kept),
            "",
            f"## top {args.top} by total time (the function or anything it called; outer "
            f"interpreter, event-loop and runner frames left out)",
            *table(total, kept),
        ]
        out = stem.with_suffix(".txt")
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines))
        print(f"\nwrote {out} and {stem.with_suffix('.collapsed')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
