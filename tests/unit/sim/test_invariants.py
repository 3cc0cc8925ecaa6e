"""The invariant checker flags what it must (duplicates, reordering, false failures...)."""

from __future__ import annotations

import random

from aiokprod.errors import DeliveryTimeoutError, KafkaConnectionError
from aiokprod.protocol.record_reader import RecordBatch, read_record_batch
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.testing.sim.cluster import SimCluster
from aiokprod.testing.sim.invariants import check_run
from aiokprod.testing.sim.workload import Op, Recorder, Workload
from aiokprod.types import RecordMetadata

OPTIONS = {"delivery_timeout_ms": 1000, "max_block_ms": 500}


def batch(seq: int, *values: bytes) -> RecordBatch:
    builder = RecordBatchBuilder()
    for v in values:
        builder.try_append(1_000, None, v)
    closed = builder.close()
    closed.stamp(7, 0, seq)
    return read_record_batch(closed.data)


def setup(count: int) -> tuple[SimCluster, Recorder, Workload]:
    now = [0]
    cluster = SimCluster(1, {"t": 1}, now_ms=lambda: now[0], rng=random.Random(0))
    recorder = Recorder(lambda: now[0])
    for _ in range(count):
        records = recorder.new_records(Op("send", "t"), "send", seed=1)
        recorder.returned(records)
    workload = Workload(1, {"t": 1}, dict(OPTIONS), [], None, 0)
    return cluster, recorder, workload


def check(cluster: SimCluster, recorder: Recorder, workload: Workload) -> list[str]:
    return check_run(
        workload,
        cluster,
        recorder,
        slack_ms=500,
        buffer_total=100,
        buffer_available=100,
        buffer_waiters=0,
        faulty=True,
    )


def ack(recorder: Recorder, i: int, offset: int) -> None:
    recorder.resolved(recorder.records[i], RecordMetadata("t", 0, offset, 0, -1, 3), None)


def test_a_clean_run_has_no_problem() -> None:
    cluster, recorder, workload = setup(2)
    cluster.partitions["t", 0].log.append(batch(0, b"1:0", b"1:1"))
    ack(recorder, 0, 0)
    ack(recorder, 1, 1)
    assert check(cluster, recorder, workload) == []


def test_a_duplicate_and_a_wrong_offset_are_flagged() -> None:
    cluster, recorder, workload = setup(1)
    log = cluster.partitions["t", 0].log
    log.append(batch(0, b"1:0"))
    log.append(batch(1, b"1:0"))  # the same record again, as a next batch
    ack(recorder, 0, 1)
    problems = check(cluster, recorder, workload)
    assert any("duplicated" in p for p in problems)


def test_reordering_is_flagged() -> None:
    cluster, recorder, workload = setup(2)
    cluster.partitions["t", 0].log.append(batch(0, b"1:1", b"1:0"))
    ack(recorder, 0, 1)
    ack(recorder, 1, 0)
    assert any("reordered" in p for p in check(cluster, recorder, workload))


def test_a_failed_record_may_be_in_the_log_once_but_not_with_a_transport_verdict() -> None:
    cluster, recorder, workload = setup(2)
    cluster.partitions["t", 0].log.append(batch(0, b"1:0", b"1:1"))
    recorder.resolved(recorder.records[0], None, DeliveryTimeoutError("timed out"))
    recorder.resolved(recorder.records[1], None, KafkaConnectionError("disconnected"))
    problems = check(cluster, recorder, workload)
    assert not any("1:0" in p for p in problems)  # a timed-out record written once: allowed
    assert any("1:1" in p and "not a verdict" in p for p in problems)


def test_unresolved_records_and_unreturned_memory_are_flagged() -> None:
    cluster, recorder, workload = setup(1)
    problems = check_run(
        workload,
        cluster,
        recorder,
        slack_ms=500,
        buffer_total=100,
        buffer_available=40,
        buffer_waiters=0,
        faulty=True,
    )
    assert any("never resolved" in p for p in problems)
    assert any("buffer_memory not returned" in p for p in problems)
