"""``send_and_wait`` latency of two clients, in alternating pairs, on an idle or a busy machine.

The suite's latency rows (``python -m benchmarks --workloads latency-linger0``) take each
client once per repetition; on a 2-core machine whose speed drifts from minute to minute, the
ratio of two clients is steadier taken pair by pair, as here: A, B, A, B, ... each a fresh
process timing ``--calls`` sends after 300 untimed ones, and the ratio per pair. ``--busy``
keeps one core busy meanwhile with a ``nice -n 19`` loop, which yields to every other process:
how a machine with other work on it looks to the clients (an idle machine makes every thread
wake-up slow, which hides the cost of the client's own code; librdkafka's hand-offs between
threads gain most from a busy one)::

    .venv/bin/python -m aiokprod.testing run --topic bench:6:1     # prints BOOTSTRAP
    .venv/bin/python -m benchmarks.latency_pairs $BOOTSTRAP -n 8 \\
        --a "aiokprod .venv-mypyc/bin/python" --b "confluent .venv/bin/python" [--busy]

A client is ``aiokprod``, ``aiokprod-uvloop`` or ``confluent``, then the Python that runs it.
Every client sends 100-byte values without keys to the topic ``bench``, acks=1, no
idempotence, ``--linger-ms`` (default 0); aiokprod with ``send_and_wait``, confluent-kafka with
``produce`` then ``flush`` (the suite's rows, the same calls).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import statistics
import subprocess
import time
from pathlib import Path

WARM_UP_CALLS = 300
_RESULT = re.compile(r"p50 ([\d.]+) p99 ([\d.]+) cpu ([\d.]+)")


def _report(latencies_ns: list[int], cpu_s: float) -> None:
    ordered = sorted(latencies_ns)
    n = len(ordered)
    p50, p99 = ordered[n // 2] / 1000, ordered[min(n - 1, int(n * 0.99))] / 1000
    print(f"p50 {p50:.1f} p99 {p99:.1f} cpu {cpu_s / n * 1e6:.1f}")


async def _aiokprod(bootstrap: str, calls: int, linger_ms: int) -> None:
    from aiokprod import Producer

    value = b"x" * 100
    async with Producer(bootstrap, linger_ms=linger_ms, acks=1, enable_idempotence=False) as p:
        await p.partitions_for("bench")
        send_and_wait = p.send_and_wait
        for _ in range(WARM_UP_CALLS):
            await send_and_wait("bench", value)
        latencies: list[int] = []
        clock = time.perf_counter_ns
        cpu = time.process_time()
        for _ in range(calls):
            began = clock()
            await send_and_wait("bench", value)
            latencies.append(clock() - began)
        cpu = time.process_time() - cpu
    _report(latencies, cpu)


def _confluent(bootstrap: str, calls: int, linger_ms: int) -> None:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": linger_ms}
    producer = Producer({**conf, "enable.idempotence": False})
    producer.list_topics("bench", timeout=30)
    value = b"x" * 100
    for _ in range(WARM_UP_CALLS):
        producer.produce("bench", value)
        producer.flush(120)
    latencies: list[int] = []
    clock = time.perf_counter_ns
    cpu = time.process_time()
    for _ in range(calls):
        began = clock()
        producer.produce("bench", value)
        producer.flush(120)
        latencies.append(clock() - began)
    _report(latencies, time.process_time() - cpu)


def worker(client: str, bootstrap: str, calls: int, linger_ms: int) -> None:
    """Time ``calls`` sends of one client in this process and print the result line."""
    if client == "confluent":
        _confluent(bootstrap, calls, linger_ms)
    elif client == "aiokprod":
        asyncio.run(_aiokprod(bootstrap, calls, linger_ms))
    elif client == "aiokprod-uvloop":
        import uvloop

        uvloop.run(_aiokprod(bootstrap, calls, linger_ms))
    else:
        raise SystemExit(f"unknown client {client!r}")


def _run(spec: str, bootstrap: str, calls: int, linger_ms: int) -> tuple[float, float, float]:
    client, python = shlex.split(spec)
    argv = [python, "-P", str(Path(__file__).resolve()), "--worker", client, bootstrap]
    argv += ["--calls", str(calls), "--linger-ms", str(linger_ms)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    found = _RESULT.search(done.stdout)
    if found is None:
        raise SystemExit(f"{spec}: no result in {done.stdout!r} {done.stderr[-500:]!r}")
    p50, p99, cpu = (float(x) for x in found.groups())
    return p50, p99, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("-n", type=int, default=8, help="pairs (default 8)")
    parser.add_argument("--a", help='client A: "aiokprod PYTHON" (or aiokprod-uvloop, confluent)')
    parser.add_argument("--b", help="client B, the same way")
    parser.add_argument("--calls", type=int, default=10_000, help="timed sends per process")
    parser.add_argument("--linger-ms", type=int, default=0)
    parser.add_argument("--busy", action="store_true", help="keep one core busy (nice 19)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.bootstrap, args.calls, args.linger_ms)
        return
    if not args.a or not args.b:
        parser.error("--a and --b are needed")
    # Here, not at the top: the workers run this file by its path, where the package
    # benchmarks is not importable (and need nothing of it).
    from benchmarks.busy import one_core_busy

    pairs: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = []
    with one_core_busy(args.busy):
        for _ in range(args.n):
            a = _run(args.a, args.bootstrap, args.calls, args.linger_ms)
            b = _run(args.b, args.bootstrap, args.calls, args.linger_ms)
            pairs.append((a, b))
            print(
                f"A p50 {a[0]:.0f} p99 {a[1]:.0f} cpu {a[2]:.1f} | "
                f"B p50 {b[0]:.0f} p99 {b[1]:.0f} cpu {b[2]:.1f} | "
                f"A/B p50 {a[0] / b[0]:.2f} p99 {a[1] / b[1]:.2f}",
                flush=True,
            )
    for i, name in enumerate(("p50 µs", "p99 µs", "CPU µs per call")):
        ratios = sorted(a[i] / b[i] for a, b in pairs)
        print(
            f"{name}: A {statistics.median(a[i] for a, _ in pairs):.1f}, "
            f"B {statistics.median(b[i] for _, b in pairs):.1f}; A/B per pair: median "
            f"{statistics.median(ratios):.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f}"
        )


if __name__ == "__main__":
    main()
