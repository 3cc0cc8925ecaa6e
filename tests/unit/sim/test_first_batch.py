"""A leader that refuses a new producer's first requests, then takes the next ones.

A broker with no state for a producer id on a partition appends a batch with any first
sequence (KIP-360). A partition written the moment its leader comes up sees exactly this: the
first requests are refused NOT_LEADER_OR_FOLLOWER (the leader is still loading), a request a
moment later is taken. Had the producer a later batch out by then, that batch would be
appended first, and the refused one could never be written in its place (it failed with
OutOfOrderSequenceNumberError: the integration test of brokers down at start saw it under
load). The producer sends one batch per partition until the first is acknowledged
(``IdempotenceState.can_drain``). Here the refusals end at every millisecond across the first
requests, so that some run ends them between two pipelined requests; before the gate, runs
ending at 20-28 ms failed 5-16 records each (seeds 0-2).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from aiokprod import DeliveryFuture
from aiokprod.testing.sim.faults import FaultSchedule, FaultWindow
from aiokprod.testing.sim.world import SimWorld, Topology

RECORDS = 100


def run(seed: int, kind: str, refusing_ms: int) -> tuple[list[DeliveryFuture], SimWorld]:
    faults = FaultSchedule(windows=[FaultWindow(kind, 1.0, 0, refusing_ms)])
    world = SimWorld(random.Random(seed), Topology(1, {"t": 2}), faults)
    futures: list[DeliveryFuture] = []

    async def body() -> None:
        producer = world.producer(
            random.Random(seed),
            linger_ms=0,
            max_in_flight_requests_per_connection=5,
            retry_backoff_ms=10,
            retry_backoff_max_ms=50,
        )
        await producer.start()
        for i in range(RECORDS):
            futures.append(await producer.send("t", b"%03d" % i, key=b"k%d" % (i % 3)))
            await asyncio.sleep(0.0005)
        await producer.flush()
        await producer.close()

    world.run(body())
    return futures, world


@pytest.mark.parametrize("kind", ["not_leader", "not_enough_replicas"])
@pytest.mark.parametrize("seed", range(3))
def test_records_refused_before_the_leader_is_ready_land_once_in_order(
    kind: str, seed: int
) -> None:
    refusing_runs = 0
    for refusing_ms in range(2, 50):  # the first Produce goes out about 30 ms in
        futures, world = run(seed, kind, refusing_ms)
        where = f"refusals until {refusing_ms} ms"
        refusing_runs += any("injected" in line for line in world.trace_lines)
        assert [f.exception() for f in futures] == [None] * RECORDS, where
        offsets: dict[int, list[int]] = {0: [], 1: []}
        for future in futures:  # in send order
            offsets[future.result().partition].append(future.result().offset)
        for partition, acked in offsets.items():
            log = world.cluster.partitions["t", partition].log.records()
            assert [r.offset for r in log] == acked, f"{where}: partition {partition}"
            values = [r.value or b"" for r in log]
            assert values == sorted(set(values)), f"{where}: twice or out of send order"
    assert refusing_runs >= 10, "the windows refused too little to prove anything"
