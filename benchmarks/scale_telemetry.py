"""What client telemetry (KIP-714) costs at scale: the scale benchmark with pushes every second.

``python -m benchmarks.scale --telemetry`` (default layout ``10k``: 10 brokers, one topic of
10,000 partitions beside the 6-partition hot topic). The same layout runs twice on the
simulated cluster (:mod:`benchmarks.scale`'s harness, virtual time, same seed): once with
brokers that receive client telemetry (a subscription to every producer metric, pushed every
second) and once with brokers that do not (the producer sends no telemetry request). Each
run: start, the warm-up, 10 virtual seconds idle, then 20,000 keyed records with a callback
each. Reported:

- *pushes* in the idle phase, and the producer's CPU over that phase with and without them:
  the difference divided by the pushes is the CPU per push as the loop sees it (the request,
  the answer, the task's wakeups);
- *build*: one push's payload (the metric groups read, renamed, encoded, zstd-compressed)
  timed directly, 200 times, on the warmed-up producer;
- the *longest step* of the producer's callbacks in each phase, CPU time, and what it was;
- *CPU per record* with and without pushes (the send path does no telemetry work).

Periodic metadata refreshes are off (``metadata_max_age_ms`` 5 minutes) so that the idle
phase holds the pushes alone. :func:`many_topics` times one push's build, step by step, for a
producer that wrote to 100, 1,000 and 10,000 topics (its size grows with the topics: nine
metrics each).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import statistics
import time
import uuid
from typing import Any

from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.telemetry import Subscription
from aiokprod.internals.telemetry_metrics import PREFIX, TelemetryMetrics, TopicRows
from aiokprod.testing.sim.scale import LoopTimer, ScaleWorld
from aiokprod.testing.sim.telemetry import SimTelemetry
from benchmarks.scale import (
    HOT,
    RECORDS,
    VALUE,
    Layout,
    _fresh_step,
    _options,
    _send_records,
    _warm_up,
)

IDLE_S = 10.0
BUILDS = 200
PHASES = ("warm-up", "idle", "records")


def _run(layout: Layout, *, pushes: bool) -> dict[str, Any]:
    world = ScaleWorld(layout.brokers, layout.topic_map(), placement=layout.placement())
    telemetry = SimTelemetry(world.now_ms, interval_ms=1000) if pushes else None
    world.cluster.telemetry = telemetry
    timer = LoopTimer()
    out: dict[str, Any] = {"pushes": pushes}

    def phase(name: str) -> None:
        side = timer.producer
        out[name] = {
            "cpu_ms": round(side.cpu_s * 1000, 3),
            "longest_step_cpu_ms": round(side.max_cpu_s * 1000, 3),
            "longest_step": side.slowest_cpu,
            "caller_cpu_ms": round(timer.caller.cpu_s * 1000, 3),
        }

    async def main() -> None:
        producer = world.producer(**_options(metadata_max_age_ms=300_000))
        with timer.phase():
            await _fresh_step(timer)
            await producer.start()
            await producer.send_and_wait(HOT, VALUE)
            await _warm_up(world, producer, layout)
        phase("warm-up")
        before = len(telemetry.pushes) if telemetry else 0
        with timer.phase():
            await _fresh_step(timer)
            await asyncio.sleep(IDLE_S)
        phase("idle")
        out["idle"]["pushes"] = (len(telemetry.pushes) if telemetry else 0) - before
        if telemetry is not None:
            out["push_bytes"] = telemetry.pushes[-1].size
            out["build_cpu_ms"], out["push_points"] = _time_builds(producer)
        with timer.phase():
            await _fresh_step(timer)
            await _send_records(producer, layout)
        phase("records")
        records = out["records"]
        records["cpu_per_record_us"] = round(
            (timer.producer.cpu_s + timer.caller.cpu_s) * 1e6 / RECORDS, 3
        )
        await producer.close()

    with timer:
        world.run(main())
    world.close()
    return out


def _time_builds(producer: Any) -> tuple[float, int]:
    """CPU ms of one push's payload (built BUILDS times on this producer's live metrics), and
    the data points it holds."""
    rt = producer._rt
    sender = rt.telemetry
    sub = sender.state.subscription
    builder = sender._builder
    began = time.process_time()
    for _ in range(BUILDS):
        payload = builder.payload(rt.metric_groups(), sub, time.time_ns())
    return round((time.process_time() - began) * 1000 / BUILDS, 3), payload.points


def telemetry_cost(layout: Layout, rounds: int = 3) -> dict[str, Any]:
    """``rounds`` pairs of runs of ``layout`` and the differences (see the module docstring).

    A first run without pushes is thrown away: what a process does once (imports, caches)
    would otherwise land in whichever run comes first.
    """
    _run(layout, pushes=False)
    pairs = []
    for _ in range(rounds):
        on = _run(layout, pushes=True)
        off = _run(layout, pushes=False)
        pushes = max(on["idle"]["pushes"], 1)
        cpu_per_push = (on["idle"]["cpu_ms"] - off["idle"]["cpu_ms"]) / pushes
        pairs.append({"on": on, "off": off, "cpu_per_push_ms": round(cpu_per_push, 3)})

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    return {
        "layout": layout.name,
        "known_partitions": layout.known_partitions,
        "rounds": pairs,
        "cpu_per_push_ms": median([p["cpu_per_push_ms"] for p in pairs]),
        "build_cpu_ms": median([p["on"]["build_cpu_ms"] for p in pairs]),
        "idle_longest_step_cpu_ms": median([p["on"]["idle"]["longest_step_cpu_ms"] for p in pairs]),
        "longest_step_cpu_ms": {
            side: median([max(p[side][ph]["longest_step_cpu_ms"] for ph in PHASES) for p in pairs])
            for side in ("on", "off")
        },
        "cpu_per_record_us": {
            side: median([p[side]["records"]["cpu_per_record_us"] for p in pairs])
            for side in ("on", "off")
        },
    }


def _row(stats: ProducerStats, topic: str) -> dict[str, float] | None:
    return stats.topic_row(topic, 2000)


def many_topics(counts: tuple[int, ...] = (100, 1000, 10_000)) -> list[dict[str, Any]]:
    """One push's build at ``counts`` topics written (9 metrics each), step by step.

    The registry is filled directly (the simulated cluster with 10,000 topics takes an hour
    to warm up); the build runs as the telemetry task runs it, the loop's turn between
    steps, timed per step in CPU time with the collector off (its passes are the process's,
    not the build's).
    """
    sub = Subscription(uuid.UUID(int=1), 1, (4,), 1000, 1 << 20, True, (PREFIX,))
    out = []
    for count in counts:
        stats = ProducerStats()
        for t in range(count):
            group = stats._topic_group(f"topic-{t:05d}")
            group.byte.record(100 + t, 1000)
            group.record_send.record(3 + t, 1000)
            group.compression_rate.record(1.0, 1000)
        builder = TelemetryMetrics([("client_id", "bench")], "0", 0)
        rounds = []
        gc.disable()
        try:
            for _ in range(3):
                groups = (
                    stats.producer_metrics(2000),
                    TopicRows(stats.topic_names(), functools.partial(_row, stats)),
                    stats.node_metrics(2000),
                )
                steps = builder.build(groups, sub, time.time_ns())
                times = []
                while True:
                    began = time.process_time()
                    try:
                        next(steps)
                    except StopIteration as done:
                        payload = done.value
                        times.append(time.process_time() - began)
                        break
                    times.append(time.process_time() - began)
                builder.commit(payload)
                rounds.append((sum(times), max(times), len(times)))
        finally:
            gc.enable()
        out.append(
            {
                "topics": count,
                "points": payload.points,
                "bytes": len(payload.data),
                "cpu_ms": round(statistics.median(r[0] for r in rounds) * 1000, 2),
                "longest_step_cpu_ms": round(statistics.median(r[1] for r in rounds) * 1000, 2),
                "steps": rounds[-1][2],
            }
        )
    return out
