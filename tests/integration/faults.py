"""Tools for the fault tests: a paced keyed stream, and an exact audit of what arrived."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka.admin import AdminClient
from readback import consume_all

from aiokprod import DeliveryFuture, Producer

RESULTS: list[dict[str, object]] = []


@dataclass
class Stream:
    """``records`` keyed records over ``keys`` keys; value ``"<key>:<seq>"``.

    The stream sends ``chunk`` records, then sleeps ``pause_s`` while ``slow`` is set, so that
    faults injected meanwhile land mid-stream; clear ``slow`` to send the rest at full speed.
    """

    records: int = 100_000
    keys: int = 500
    chunk: int = 500
    pause_s: float = 0.05
    slow: asyncio.Event = field(default_factory=asyncio.Event)
    futures: list[DeliveryFuture] = field(default_factory=list)
    sent: int = 0

    def __post_init__(self) -> None:
        self.slow.set()

    async def run(self, producer: Producer, topic: str) -> None:
        """Send everything; ``send()`` errors propagate (none are expected)."""
        per_key = [0] * self.keys
        for i in range(self.records):
            k = i % self.keys
            seq = per_key[k]
            per_key[k] = seq + 1
            self.futures.append(
                await producer.send(topic, f"{k}:{seq}".encode(), key=f"k{k}".encode())
            )
            self.sent = i + 1
            if self.sent % self.chunk == 0 and self.slow.is_set():
                await asyncio.sleep(self.pause_s)

    def acknowledged(self) -> int:
        """How many futures completed so far."""
        return sum(1 for f in self.futures if f.done())

    async def wait_acknowledged(self, count: int, timeout_s: float = 120) -> None:
        """Wait until ``count`` records were sent and acknowledged (or fail)."""
        deadline = time.monotonic() + timeout_s
        while self.sent < count or self.acknowledged() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.acknowledged()} of {count} acknowledged")
            await asyncio.sleep(0.05)


@dataclass
class Audit:
    """What the independent reader found, compared with what was sent."""

    scenario: str
    records: int
    lost: int
    duplicated: int
    reordered: int
    failed_futures: int
    pending_futures: int
    seconds: float
    retried: int = 0

    def row(self) -> dict[str, object]:
        """The audit as a table row."""
        return dict(self.__dict__)

    @property
    def clean(self) -> bool:
        """Nothing lost, doubled, reordered, failed or left pending."""
        return not (
            self.lost
            or self.duplicated
            or self.reordered
            or self.failed_futures
            or self.pending_futures
        )


def audit(
    scenario: str,
    bootstrap: str,
    topic: str,
    stream: Stream,
    seconds: float,
    metrics: dict[str, int | float] | None = None,
) -> Audit:
    """Read the topic back with librdkafka and count losses, duplicates and reorderings.

    Order is checked per key: in offset order within the key's partition, the sequence
    numbers of a key must be exactly 0, 1, 2, ...
    """
    consumed = consume_all(bootstrap, topic, stream.records, timeout_s=90)
    seen: dict[tuple[int, int], int] = defaultdict(int)
    by_key: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for r in consumed:
        assert r.value is not None
        k, seq = map(int, r.value.decode().split(":"))
        seen[(k, seq)] += 1
        by_key[k].append((r.partition, r.offset, seq))
    expected = set()
    per_key_total: dict[int, int] = defaultdict(int)
    for i in range(stream.records):
        per_key_total[i % stream.keys] += 1
    for k, total in per_key_total.items():
        expected.update((k, s) for s in range(total))
    lost = len(expected - set(seen))
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    reordered = 0
    for k, rows in by_key.items():
        partitions = {p for p, _, _ in rows}
        if len(partitions) != 1:
            reordered += 1  # a key must stay on one partition
            print(f"key {k} on partitions {sorted(partitions)}")
            continue
        seqs = [seq for _, _, seq in sorted(rows)]
        inversions = [(a, b) for a, b in itertools.pairwise(seqs) if b <= a]
        if inversions:
            print(f"key {k} partition {partitions} out of order: {inversions[:5]}")
        reordered += len(inversions)
    errors = Counter(
        f"{type(e).__name__}: {str(e)[:120]}"
        for f in stream.futures
        if f.done() and (e := f.exception()) is not None
    )
    for text, count in errors.most_common(5):
        print(f"[{scenario}] {count} future(s) failed with {text}")
    failed = sum(errors.values())
    pending = sum(1 for f in stream.futures if not f.done())
    retried = int(metrics["records_retried"]) if metrics else 0
    result = Audit(
        scenario,
        stream.records,
        lost,
        duplicated,
        reordered,
        failed,
        pending,
        round(seconds, 1),
        retried,
    )
    RESULTS.append(result.row())
    print(
        f"\n[{scenario}] records={result.records} lost={lost} duplicated={duplicated} "
        f"reordered={reordered} failed_futures={failed} pending={pending} "
        f"retried={retried} time={result.seconds}s"
    )
    return result


def busiest_leader(bootstrap: str, topic: str) -> int:
    """The broker leading the most partitions of ``topic``."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    counts: dict[int, int] = defaultdict(int)
    for p in md.topics[topic].partitions.values():
        counts[p.leader] += 1
    return max(counts, key=lambda node: counts[node])


def wait_full_isr(bootstrap: str, topic: str, replicas: int, timeout_s: float = 60) -> None:
    """Block until every partition of ``topic`` has ``replicas`` in-sync replicas."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=5)
            parts = md.topics[topic].partitions.values()
            if parts and all(len(p.isrs) >= replicas and p.leader >= 0 for p in parts):
                return
        except Exception:  # a broker may be restarting
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{topic}: ISR not full after {timeout_s} s")


# --- helpers for the hostile-fault regressions (issue 11) ------------------------------------


async def async_wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = 120
) -> None:
    """Poll ``condition`` until it is true, without blocking the event loop."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class PartitionState:
    """One partition as librdkafka's admin client sees it."""

    leader: int
    replicas: tuple[int, ...]
    isrs: tuple[int, ...]


def partition_state(bootstrap: str, topic: str, partition: int = 0) -> PartitionState | None:
    """Leader, replicas and ISR of one partition (None if no broker answered)."""
    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        p = md.topics[topic].partitions[partition]
    except Exception:  # a broker may be restarting
        return None
    return PartitionState(p.leader, tuple(p.replicas), tuple(p.isrs))


def elect_preferred_leader(bootstrap: str, topic: str, partition: int = 0) -> None:
    """Run a preferred-leader election for one partition (KIP-460, via librdkafka's admin).

    ``ELECTION_NOT_NEEDED`` (the preferred replica leads already) counts as success.
    (confluent-kafka 2.16's ``elect_leaders`` rejects its own timeout keywords, so the
    client-wide ``socket.timeout.ms`` bounds the call.)
    """
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 60_000})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, partition)])
    results = future.result(timeout=90)
    for error in results.values():
        if error is None:
            continue
        kafka_error = error.args[0] if error.args else error
        code = getattr(kafka_error, "code", lambda: None)()
        if code != ConfluentKafkaError.ELECTION_NOT_NEEDED:
            raise RuntimeError(f"preferred-leader election for {topic}-{partition}: {error}")


def lead_from_preferred_replica(
    bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 120
) -> int:
    """Elect the preferred replica (retrying while it catches up) until it leads; its id."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        state = partition_state(bootstrap, topic, partition)
        if state is not None and state.replicas:
            preferred = state.replicas[0]
            if state.leader == preferred:
                return preferred
            try:
                elect_preferred_leader(bootstrap, topic, partition)
            except Exception as exc:  # not in the ISR yet, a broker restarting...
                last = exc
        time.sleep(0.5)
    raise TimeoutError(f"{topic}-{partition}: preferred replica not leader ({last})")
