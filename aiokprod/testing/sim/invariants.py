"""What must hold at the end of every simulated run (docs/simulation.md, "Invariants").

1. Every record resolved (acknowledged, failed, or its call raised) — none left pending.
   A call that raised or was cancelled part-way (``send_many``, ``send_and_wait``) leaves its
   records "unknown": they may be in the log, at most once.
2. None resolved later than ``delivery_timeout_ms`` + slack after its ``send()`` returned
   (``send_and_wait``: after it was called, plus ``max_block_ms``).
3. Every acknowledged record is in the log at the partition and offset it was acknowledged
   with (same key, value and headers); with idempotence exactly once in the whole cluster.
   (acks=1 without idempotence: unless a failover truncated it — Kafka allows that loss.)
4. With idempotence, no record is in the logs twice, and each partition's log keeps the order
   in which the producer accepted the records: a record whose ``send()`` returned before
   another's was called is never after it. A failed or cancelled record may be in the log
   (at most once, in its place): the Java client allows that too.
5. A record whose call raised (it was never accepted) is not in any log.
6. ``buffer_memory`` is fully returned after ``close()``; nobody waits for it.
7. The producer never crashed, raised an untyped error, or sent a malformed request or batch;
   ``close()`` raised nothing; no task died with an unretrieved exception.
8. A run without faults fails no accepted record (when ``close()`` had no timeout).
9. After ``flush()`` returns, every record accepted before it was called is resolved.
10. Recovery: once every fault is over and the producer had time to notice and reconnect
    (2 s + max(request, connection setup timeout) + the longest reconnect and retry backoffs),
    one record per topic is sent and flushed; each must be acknowledged (a producer stuck
    after a fault fails this).
11. A delivery fails only with ``DeliveryTimeoutError``, ``ProducerClosedError`` (``close()``
    gave up) or a broker's non-retriable error; a transport problem is never a verdict.
12. With idempotence, no delivery fails with ``OutOfOrderSequenceNumberError``: no batch is
    overtaken by a later one of its partition (the simulated brokers never lose our state).
13. The producer never writes under a producer id that the cluster receiving the batch did
    not issue to it (a cluster replaced behind the bootstrap address, issue 29: checked by
    the brokers, reported among their violations).

When the cluster was replaced, "in the log" means in the log of any of the run's clusters:
a record is at most once in each (a batch whose outcome on the old cluster was unknown is
written again to the new one), in its place in each one's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokprod.errors import (
    BrokerError,
    DeliveryTimeoutError,
    OutOfOrderSequenceNumberError,
    ProducerClosedError,
)
from aiokprod.testing.sim.cluster import PHANTOM_PREFIX, SimCluster
from aiokprod.testing.sim.log import LogRecord
from aiokprod.testing.sim.workload import Recorder, Sent, Workload

SETTLE_NOTE = "long enough"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a value sits in the simulated logs."""

    topic: str
    partition: int
    record: LogRecord
    cluster: str = ""


def check_run(
    workload: Workload,
    clusters: SimCluster | Sequence[SimCluster],
    recorder: Recorder,
    *,
    slack_ms: int,
    buffer_total: int,
    buffer_available: int,
    buffer_waiters: int,
    faulty: bool,
) -> list[str]:
    """Every invariant violation of the run (empty: the run is clean)."""
    if isinstance(clusters, SimCluster):
        clusters = [clusters]
    problems = list(recorder.problems)
    problems += [f"broker saw: {v}" for c in clusters for v in c.violations]
    places, logs, truncated = _read_logs(clusters)
    opts = workload.options
    delivery_ms = int(opts["delivery_timeout_ms"])
    block_ms = int(opts["max_block_ms"])
    idempotent = workload.idempotent
    for sent in recorder.records:
        where = places.get(sent.value, [])
        name = f"record {sent.value.decode()} ({sent.how} to {sent.topic})"
        if sent.outcome == "pending":
            problems.append(f"{name}: never resolved")
            continue
        late = _lateness(sent, delivery_ms, block_ms, slack_ms)
        if late is not None:
            problems.append(f"{name}: resolved {late} ms after it should have ({sent.outcome})")
        if sent.outcome == "rejected" and where:
            problems.append(f"{name}: its call raised {sent.error!r} but it is in the log")
        if idempotent and len(where) > len({w.cluster for w in where}):
            problems.append(f"{name}: duplicated ({sent.outcome}) at {_spots(where)}")
        if sent.outcome == "failed" and not _allowed_failure(sent.error):
            problems.append(f"{name}: failed with {sent.error!r}, not a verdict a record may get")
        elif idempotent and isinstance(sent.error, OutOfOrderSequenceNumberError):
            problems.append(f"{name}: failed with {sent.error!r}: its batch was overtaken")
        if sent.outcome == "acked":
            problems += _check_acked(name, sent, where, workload, sent.value in truncated)
        clean_run = not faulty and workload.close_timeout_s is None
        if clean_run and sent.how != "racing" and sent.outcome == "failed":
            problems.append(f"{name}: failed without any fault: {sent.error!r}")
        elif sent.how == "healed" and sent.outcome != "acked":
            problems.append(
                f"{name}: sent {SETTLE_NOTE} after the last fault, yet {sent.outcome}: "
                f"{sent.error!r}"
            )
    if idempotent:
        problems += _check_order(logs, {s.value: s for s in recorder.records})
    if buffer_available != buffer_total or buffer_waiters:
        problems.append(
            f"buffer_memory not returned: {buffer_available} of {buffer_total} available, "
            f"{buffer_waiters} waiter(s)"
        )
    return problems


def _read_logs(
    clusters: Sequence[SimCluster],
) -> tuple[
    dict[bytes | None, list[Place]],
    dict[tuple[str, str, int], list[LogRecord]],
    set[bytes | None],
]:
    """Where each value is, every partition's records, and the values lost to truncation."""
    places: dict[bytes | None, list[Place]] = {}
    logs: dict[tuple[str, str, int], list[LogRecord]] = {}
    truncated: set[bytes | None] = set()
    for cluster in clusters:
        name = "" if len(clusters) == 1 else f"{cluster.cluster_id}:"
        for (topic, p), part in sorted(cluster.partitions.items()):
            records = [r for r in part.log.records() if not _phantom(r)]
            logs[name, topic, p] = records
            for record in records:
                places.setdefault(record.value, []).append(Place(topic, p, record, name))
            truncated.update(r.value for r in part.log.truncated)
    return places, logs, truncated


def _spots(where: list[Place]) -> str:
    return ", ".join(f"{w.cluster}{w.topic}-{w.partition}@{w.record.offset}" for w in where)


def _phantom(record: LogRecord) -> bool:
    """A record another producer wrote (``SimCluster.phantom_producer``)."""
    return record.value is not None and record.value.startswith(PHANTOM_PREFIX)


def _allowed_failure(error: BaseException | None) -> bool:
    """The errors a delivery may end with (invariant 11).

    The delivery timeout, ``close()`` giving up, or a broker's non-retriable error. A
    transport problem (a broken or lost response, a disconnect, a request timeout) is never a
    verdict: the record is retried until its delivery timeout, as in the Java client.
    """
    if isinstance(error, (DeliveryTimeoutError, ProducerClosedError)):
        return True
    return isinstance(error, BrokerError) and not error.retriable


def _lateness(sent: Sent, delivery_ms: int, block_ms: int, slack_ms: int) -> int | None:
    if sent.resolved_ms < 0 or sent.outcome in ("rejected", "unknown"):
        return None
    if sent.how == "send_and_wait":
        limit = sent.started_ms + block_ms + delivery_ms + slack_ms
    elif sent.returned_ms >= 0:
        limit = sent.returned_ms + delivery_ms + slack_ms
    else:
        return None
    return sent.resolved_ms - limit if sent.resolved_ms > limit else None


def _check_acked(
    name: str, sent: Sent, where: list[Place], workload: Workload, truncated: bool
) -> list[str]:
    meta = sent.metadata
    if truncated and workload.acks == 1 and not workload.idempotent:
        return []  # acks=1: the acknowledged copy was lost in a failover (Kafka allows it)
    if not where:
        return [f"{name}: acknowledged ({meta}) but not in any log"]
    if meta is None or meta.offset < 0:
        return []
    for place in where:
        if (place.topic, place.partition, place.record.offset) == (
            meta.topic,
            meta.partition,
            meta.offset,
        ):
            record = place.record
            if record.key != sent.key or record.headers != sent.headers:
                return [f"{name}: key or headers differ in the log at {meta.offset}"]
            return []
    return [
        f"{name}: acknowledged at {meta.topic}-{meta.partition}@{meta.offset} but it is at "
        f"{_spots(where)}"
    ]


def _check_order(
    logs: dict[tuple[str, str, int], list[LogRecord]], by_value: dict[bytes, Sent]
) -> list[str]:
    problems = []
    for (cluster, topic, p), records in logs.items():
        topic = f"{cluster}{topic}"
        max_call_tick = 0
        max_call_value = b""
        max_index: dict[int, int] = {}
        for record in records:
            sent = by_value.get(record.value or b"")
            if sent is None:
                problems.append(f"{topic}-{p}@{record.offset}: a record nobody sent")
                continue
            if 0 <= sent.ret_tick < max_call_tick:
                problems.append(
                    f"{topic}-{p}@{record.offset}: {sent.value.decode()} is after "
                    f"{max_call_value.decode()}, which was sent after it returned (reordered)"
                )
                break
            if sent.index < max_index.get(sent.call_id, -1):
                problems.append(
                    f"{topic}-{p}@{record.offset}: {sent.value.decode()} is after a later "
                    f"record of the same send_many (reordered)"
                )
                break
            if sent.call_tick > max_call_tick:
                max_call_tick = sent.call_tick
                max_call_value = sent.value
            max_index[sent.call_id] = max(max_index.get(sent.call_id, -1), sent.index)
    return problems
