"""Time two commands in turn and compare them pair by pair (before/after a change).

Runs A and B alternately (A B A B ...) ``-n`` times after one unrecorded warm-up run each,
and reports each command's CPU (user + system, from ``os.wait4``: the whole process,
start-up included) and wall seconds, and the ratio A/B taken per pair: pairing keeps the
ratio meaningful when the machine's speed drifts during the run. Medians are what to quote;
min and max show how noisy the machine was::

    B=127.0.0.1:9092; S=benchmarks/send_patterns.py
    .venv/bin/python -m benchmarks.ab -n 7 \\
        --a ".venv-mypyc/bin/python $S $B callback 400000" \\
        --b "/path/to/baseline/venv/bin/python $S $B callback 400000"

Each command runs without a shell (split like a shell splits words), its output discarded;
a command that exits non-zero stops the run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` to its end; (CPU seconds, wall seconds)."""
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - began
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{shlex.join(argv)} exited with {code}:\n{stderr[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def spread(values: list[float]) -> str:
    return f"{min(values):8.3f} {statistics.median(values):8.3f} {max(values):8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", required=True, help="the command measured (after)")
    parser.add_argument("--b", required=True, help="the baseline command (before)")
    parser.add_argument("-n", type=int, default=7, help="pairs (default 7)")
    args = parser.parse_args()
    a, b = shlex.split(args.a), shlex.split(args.b)
    run_once(a)
    run_once(b)
    cpu_a: list[float] = []
    cpu_b: list[float] = []
    wall_a: list[float] = []
    wall_b: list[float] = []
    for _ in range(args.n):
        for argv, cpu, wall in ((a, cpu_a, wall_a), (b, cpu_b, wall_b)):
            c, w = run_once(argv)
            cpu.append(c)
            wall.append(w)
    print(f"{'':12} {'min':>8} {'median':>8} {'max':>8}   ({args.n} pairs)")
    print(f"{'A cpu s':12} {spread(cpu_a)}")
    print(f"{'B cpu s':12} {spread(cpu_b)}")
    print(f"{'A/B cpu':12} {spread([x / y for x, y in zip(cpu_a, cpu_b, strict=True)])}")
    print(f"{'A/B wall':12} {spread([x / y for x, y in zip(wall_a, wall_b, strict=True)])}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
