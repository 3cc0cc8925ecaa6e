"""The producer at scale: the simulator's cluster in process, 6 to 100,000 partitions (issue 30).

No broker: the real Producer runs against :class:`aiokprod.testing.sim.scale.ScaleWorld` (the
simulated brokers, on virtual time, no faults) of 1, 10 or 100 brokers. Per layout:

- *warm-up*: one record to every topic, the first sends spread over one virtual second (each
  waits for its topic's metadata): how many Metadata requests that took;
- *refreshes*: 10 virtual seconds idle with ``metadata_max_age_ms=1000``: the producer's CPU
  per refresh (its callbacks' CPU time over the phase, divided by the refreshes);
- *records*: 20,000 keyed 100 B records with a callback each, to a 6-partition topic the
  layout always has, led by broker 0 (the others are known and refreshed, not written):
  CPU per record;
- *leader change* (2 brokers or more): one partition of that topic moves; how many topics the
  refreshes that follow ask for;
- *memory*: RSS growth from before the producer to after the refreshes (the simulated
  cluster's cached answers dropped first), and what ``tracemalloc`` finds held by the
  producer's code (a separate run: tracing slows everything down).

The longest synchronous step is measured in real time around every loop callback
(:class:`~aiokprod.testing.sim.scale.LoopTimer`; virtual time stands still during one), wall
clock and CPU, over the whole run. Callbacks of the simulated brokers are left out.

    .venv/bin/python -m benchmarks.scale                       # every layout
    .venv/bin/python -m benchmarks.scale --layouts 6,1k --json out.json
    .venv/bin/python -m benchmarks.scale --churn 10000         # topics used once, idled out
    .venv/bin/python -m benchmarks.scale --backlog             # a slow broker, 8,000 partitions
    .venv/bin/python -m benchmarks.scale --telemetry           # KIP-714 pushes every second, 10k

The machine's load changes the wall-clock columns (a busy machine preempts a callback);
compare rows of one run, and prefer the CPU columns.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokprod import Producer
from aiokprod.testing.sim.scale import CALLER, LoopTimer, ScaleWorld, rss_bytes

HOT = "hot"
HOT_PARTITIONS = 6
RECORDS = 20_000
VALUE = b"v" * 100
KEYS = [b"key-%05d" % i for i in range(1000)]


@dataclass(frozen=True)
class Layout:
    """Brokers and the topics beside the hot one."""

    name: str
    brokers: int
    topics: int
    partitions: int

    def topic_map(self) -> dict[str, int]:
        """Every topic of the layout (the hot one first)."""
        out = {HOT: HOT_PARTITIONS}
        width = len(str(self.topics))
        for i in range(self.topics):
            out[f"t{i:0{width}d}"] = self.partitions
        return out

    def placement(self) -> dict[str, list[int]]:
        """The hot topic is led by broker 0 in every layout (1 as its second replica)."""
        return {HOT: [0, 1] if self.brokers > 1 else [0]}

    @property
    def known_partitions(self) -> int:
        """Partitions the producer knows once warmed up."""
        return HOT_PARTITIONS + self.topics * self.partitions


LAYOUTS = {
    "6": Layout("6", 1, 0, 0),
    "1k": Layout("1k", 10, 1, 1000),
    "10k": Layout("10k", 10, 1, 10_000),
    "100k": Layout("100k", 100, 1000, 100),
    "10k-topics": Layout("10k-topics", 100, 10_000, 10),
}


@dataclass
class Row:
    """One layout's measurements."""

    layout: str
    brokers: int
    topics: int
    known_partitions: int
    stall_wall_ms: float = 0.0
    stall_cpu_ms: float = 0.0
    slowest: str = ""
    warmup_metadata_requests: int = 0
    refreshes: int = 0
    cpu_per_refresh_ms: float = 0.0
    refresh_stall_cpu_ms: float = 0.0
    cpu_per_record_us: float = 0.0
    #: Refreshes (every second) that fell in the records phase; and the CPU per record of
    #: the same phase run again without periodic refreshes (at 10,000 topics the refreshes
    #: are half of the first figure; their cost is the CPU per refresh column).
    records_refreshes: int = 0
    cpu_per_record_no_refresh_us: float = 0.0
    records_stall_cpu_ms: float = 0.0
    leader_change_topics_asked: list[int] = field(default_factory=list)
    #: Per phase: the longest step (CPU, wall), what it was, the producer's CPU in all.
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    rss_growth_mb: float = 0.0
    traced_mb: float = 0.0


async def _fresh_step(timer: LoopTimer) -> None:
    """End the caller's current step (the harness's own work) and count from zero."""
    await asyncio.sleep(0)
    timer.reset()


@dataclass
class Worst:
    """The longest producer step over a run's phases."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    slowest: str = ""


async def _spread(calls: Sequence[Callable[[], Coroutine[Any, Any, Any]]], over_s: float) -> None:
    """Start ``calls`` evenly over ``over_s`` virtual seconds; wait for all of them."""
    tasks = []
    step = over_s / max(len(calls), 1)
    for call in calls:
        tasks.append(asyncio.get_running_loop().create_task(call(), name=f"{CALLER}-send"))
        if step:
            await asyncio.sleep(step)
    await asyncio.gather(*tasks)


def _refreshes(asked: list[int]) -> int:
    """Metadata requests that asked for topics (not a new connection's cluster-id check)."""
    return sum(1 for n in asked if n)


def _options(**extra: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"metadata_max_age_ms": 1000, "linger_ms": 5}
    options.update(extra)
    return options


#: Over how many virtual seconds the warm-up's first sends start (0: in one loop turn).
WARM_UP_S = 1.0


async def _warm_up(world: ScaleWorld, producer: Producer, layout: Layout) -> None:
    """One record to every topic but the hot one (the producer is started)."""
    names = [t for t in layout.topic_map() if t != HOT]
    calls = [functools.partial(producer.send, t, VALUE) for t in names]
    await _spread(calls, WARM_UP_S if names else 0.0)
    await producer.flush()


async def _send_records(producer: Producer, layout: Layout) -> None:
    """RECORDS keyed records to the hot topic, a callback each, then flush."""
    done = 0

    def on_delivery(_: object) -> None:
        nonlocal done
        done += 1

    for i in range(RECORDS):
        (await producer.send(HOT, VALUE, key=KEYS[i % len(KEYS)])).add_done_callback(on_delivery)
    await producer.flush()
    if done != RECORDS:
        raise SystemExit(f"{layout.name}: {done} of {RECORDS} records acknowledged")


def measure(layout: Layout) -> Row:
    """Every phase but memory tracing, for one layout."""
    row = Row(layout.name, layout.brokers, layout.topics + 1, layout.known_partitions)
    world = ScaleWorld(layout.brokers, layout.topic_map(), placement=layout.placement())
    cluster = world.cluster
    timer = LoopTimer()
    worst = Worst()

    def keep_worst(phase: str) -> None:
        side = timer.producer
        row.phases[phase] = {
            "stall_cpu_ms": round(side.max_cpu_s * 1000, 3),
            "stall_wall_ms": round(side.max_wall_s * 1000, 3),
            "slowest": side.slowest_cpu,
            "cpu_ms": round(side.cpu_s * 1000, 3),
            "caller_step_cpu_ms": round(timer.caller.max_cpu_s * 1000, 3),
            "caller_cpu_ms": round(timer.caller.cpu_s * 1000, 3),
            "gc_passes": timer.gc.passes,
            "gc_max_ms": round(timer.gc.max_wall_s * 1000, 3),
        }
        if phase == "start":
            return
        worst.wall_s = max(worst.wall_s, side.max_wall_s)
        if side.max_cpu_s > worst.cpu_s:
            worst.cpu_s, worst.slowest = side.max_cpu_s, side.slowest_cpu

    async def main() -> None:
        rss_before = rss_bytes()
        producer = world.producer(**_options())
        with timer.phase():
            await _fresh_step(timer)
            await producer.start()
            await producer.send_and_wait(HOT, VALUE)
        keep_worst("start")
        with timer.phase():
            await _fresh_step(timer)
            asked = len(cluster.metadata_requests)
            await _warm_up(world, producer, layout)
            row.warmup_metadata_requests = _refreshes(cluster.metadata_requests[asked:])
        keep_worst("warm-up")
        with timer.phase():
            await _fresh_step(timer)
            asked = len(cluster.metadata_requests)
            await asyncio.sleep(10.0)
            row.refreshes = _refreshes(cluster.metadata_requests[asked:])
        keep_worst("refreshes")
        row.cpu_per_refresh_ms = (
            (timer.producer.cpu_s + timer.caller.cpu_s) * 1000 / max(row.refreshes, 1)
        )
        row.refresh_stall_cpu_ms = timer.producer.max_cpu_s * 1000
        cluster._metadata_cache.clear()
        world.network.encoded_metadata.clear()
        row.rss_growth_mb = (rss_bytes() - rss_before) / 2**20
        asked = len(cluster.metadata_requests)
        with timer.phase():
            await _fresh_step(timer)
            await _send_records(producer, layout)
        keep_worst("records")
        # The caller's steps are its send() calls (the loop around them is a few lines).
        row.cpu_per_record_us = (timer.producer.cpu_s + timer.caller.cpu_s) * 1e6 / RECORDS
        row.records_refreshes = _refreshes(cluster.metadata_requests[asked:])
        row.records_stall_cpu_ms = timer.producer.max_cpu_s * 1000
        # Again without the periodic refresh (the harness sets the schedule's interval
        # directly: the same producer, its view warm).
        producer._metadata.max_age_ms = 3_600_000
        with timer.phase():
            await _fresh_step(timer)
            await _send_records(producer, layout)
        keep_worst("records, no refresh")
        row.cpu_per_record_no_refresh_us = (
            (timer.producer.cpu_s + timer.caller.cpu_s) * 1e6 / RECORDS
        )
        producer._metadata.max_age_ms = 1000
        if layout.brokers > 1:
            asked = len(cluster.metadata_requests)
            cluster.elect((HOT, 0), 1)
            with timer.phase():
                await _fresh_step(timer)
                for _ in range(200):
                    await producer.send(HOT, VALUE, partition=0)
                    await asyncio.sleep(0.001)
                await producer.flush()
            keep_worst("leader change")
            row.leader_change_topics_asked = [n for n in cluster.metadata_requests[asked:] if n]
        await producer.close()

    with timer:
        world.run(main())
    world.close()
    row.stall_wall_ms = worst.wall_s * 1000
    row.stall_cpu_ms = worst.cpu_s * 1000
    row.slowest = worst.slowest
    return row


def traced_memory(layout: Layout) -> float:
    """MiB held by the producer's code after warm-up and refreshes (tracemalloc)."""
    world = ScaleWorld(layout.brokers, layout.topic_map(), placement=layout.placement())
    held = 0

    async def main() -> None:
        nonlocal held
        producer = world.producer(**_options())
        tracemalloc.start(FRAMES)
        await producer.start()
        await producer.send_and_wait(HOT, VALUE)
        await _warm_up(world, producer, layout)
        await asyncio.sleep(3.0)
        held = producer_bytes(_snapshot())
        tracemalloc.stop()
        await producer.close()

    world.run(main())
    world.close()
    return held / 2**20


#: Allocations with one of these in their traceback are the simulated brokers' (their logs
#: decode the records with the protocol layer's reader).
_BROKER_FILES = ("/testing/sim/cluster.py", "/testing/sim/log.py", "/protocol/record_reader.py")


def producer_bytes(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes allocated by aiokprod's client code and still held.

    An allocation counts when the innermost frame of ``aiokprod`` in its traceback is not
    the test harness's (``aiokprod/testing``), and no frame is the simulated brokers'. Take
    the snapshot after ``gc.collect()`` (:func:`_snapshot`): finished batches may wait in
    reference cycles; tracing keeps :data:`FRAMES` frames.
    """
    total = 0
    for trace in snapshot.traces:
        names = [frame.filename.replace(os.sep, "/") for frame in trace.traceback]
        if any(name.endswith(_BROKER_FILES) for name in names):
            continue
        ours = next((name for name in reversed(names) if "/aiokprod/" in name), None)
        if ours is not None and "/aiokprod/testing/" not in ours:
            total += trace.size
    return total


FRAMES = 12


def _snapshot() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot()


def churn(topics: int) -> dict[str, Any]:
    """``topics`` topics used once each, then idle: the producer's memory before and after."""
    names = {f"c{i:05d}": 1 for i in range(topics)}
    names[HOT] = HOT_PARTITIONS
    world = ScaleWorld(10, names)
    out: dict[str, Any] = {"topics": topics}

    async def main() -> None:
        producer = world.producer(**_options(metadata_max_idle_ms=5000))
        tracemalloc.start(FRAMES)
        await producer.start()
        await producer.send_and_wait(HOT, VALUE)
        out["baseline_kb"] = producer_bytes(_snapshot()) / 1024
        asked = len(world.cluster.metadata_requests)
        calls = [functools.partial(producer.send, t, VALUE) for t in names if t != HOT]
        await _spread(calls, 1.0)
        await producer.flush()
        out["metadata_requests"] = _refreshes(world.cluster.metadata_requests[asked:])
        out["used_kb"] = producer_bytes(_snapshot()) / 1024
        for _ in range(12):  # the hot topic stays in use; the others idle out
            await producer.send_and_wait(HOT, VALUE)
            await asyncio.sleep(1.0)
        out["idle_kb"] = producer_bytes(_snapshot()) / 1024
        tracemalloc.stop()
        out["topics_in_view"] = len(producer._metadata.snapshot.topics)
        await producer.close()

    world.run(main())
    world.close()
    return out


def backlog(seconds: float = 12.0, rate: int = 2000, partitions: int = 8000) -> dict[str, Any]:
    """Keyed records at ``rate``/s to a fresh topic on a broker slow at first appends."""
    world = ScaleWorld(1, {HOT: partitions}, first_append_ms=2.0)
    timer = LoopTimer()
    out: dict[str, Any] = {"partitions": partitions, "rate": rate, "seconds": seconds}

    async def main() -> None:
        producer = world.producer(**_options(metadata_max_age_ms=300_000))
        await producer.start()
        await producer.partitions_for(HOT)
        done = 0

        def on_delivery(_: object) -> None:
            nonlocal done
            done += 1

        count = int(seconds * rate)
        with timer.phase():
            await _fresh_step(timer)
            for i in range(count):
                key = b"k%07d" % i
                (await producer.send(HOT, VALUE, key=key)).add_done_callback(on_delivery)
                await asyncio.sleep(1 / rate)
            await producer.flush()
        out["records"] = count
        out["acknowledged"] = done
        out["cpu_per_record_us"] = (timer.producer.cpu_s + timer.caller.cpu_s) * 1e6 / count
        out["stall_cpu_ms"] = timer.producer.max_cpu_s * 1000
        out["stall_wall_ms"] = timer.producer.max_wall_s * 1000
        out["slowest"] = timer.producer.slowest_cpu
        out["caller_step_cpu_ms"] = timer.caller.max_cpu_s * 1000
        out["gc_max_ms"] = timer.gc.max_wall_s * 1000
        out["requests"] = int(producer.metrics()["request-total"])
        out["virtual_s"] = world.now_ms() / 1000
        await producer.close()

    with timer:
        world.run(main())
    world.close()
    return out


def table(rows: list[Row]) -> str:
    """The Markdown table of docs/benchmarks.md's scale section."""
    lines = [
        "| layout | brokers | topics | partitions known | longest step, CPU / wall ms | "
        "CPU per refresh ms | CPU per record µs (without refreshes) | "
        "Metadata requests to warm up | "
        "RSS growth MiB | held by the producer MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.layout} | {r.brokers} | {r.topics:,} | {r.known_partitions:,} | "
            f"{r.stall_cpu_ms:,.1f} / {r.stall_wall_ms:,.1f} | {r.cpu_per_refresh_ms:,.2f} | "
            f"{r.cpu_per_record_us:,.1f} ({r.cpu_per_record_no_refresh_us:,.1f}) | "
            f"{r.warmup_metadata_requests:,} | "
            f"{r.rss_growth_mb:,.1f} | {r.traced_mb:,.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--churn", type=int, default=0, help="topics used once, then idle")
    parser.add_argument("--backlog", action="store_true", help="the slow-broker backlog run")
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="client telemetry pushed every second, against none (default layout 10k)",
    )
    parser.add_argument(
        "--warm-up-at-once",
        action="store_true",
        help="start the warm-up's first sends in one loop turn, not over a second (before "
        "issue 30 each new topic's refresh asked for every topic: hours at 10,000 topics)",
    )
    args = parser.parse_args()
    global WARM_UP_S
    if args.warm_up_at_once:
        WARM_UP_S = 0.0
    began = time.perf_counter()
    result: dict[str, Any] = {"load_before": os.getloadavg()}
    if args.churn:
        result["churn"] = churn(args.churn)
        print(json.dumps(result["churn"], indent=2))
    elif args.backlog:
        result["backlog"] = backlog()
        print(json.dumps(result["backlog"], indent=2))
    elif args.telemetry:
        from benchmarks.scale_telemetry import many_topics, telemetry_cost

        names = args.layouts.split(",") if args.layouts != ",".join(LAYOUTS) else ["10k"]
        result["telemetry"] = [telemetry_cost(LAYOUTS[name]) for name in names]
        result["telemetry_many_topics"] = many_topics()
        print(json.dumps(result["telemetry"], indent=2))
        print(json.dumps(result["telemetry_many_topics"], indent=2))
    else:
        rows = []
        for name in args.layouts.split(","):
            layout = LAYOUTS[name]
            row = measure(layout)
            if not args.no_memory:
                row.traced_mb = traced_memory(layout)
            rows.append(row)
            print(
                f"{name}: stall {row.stall_cpu_ms:.1f} ms CPU ({row.slowest}), "
                f"{row.cpu_per_refresh_ms:.2f} ms/refresh, {row.cpu_per_record_us:.1f} µs/record, "
                f"leader change asked {row.leader_change_topics_asked}",
                file=sys.stderr,
            )
            for phase, figures in row.phases.items():
                print(f"    {phase}: {figures}", file=sys.stderr)
        result["rows"] = [asdict(r) for r in rows]
        print(table(rows))
    result["load_after"] = os.getloadavg()
    result["seconds"] = time.perf_counter() - began
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
