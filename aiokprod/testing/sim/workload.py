"""Workloads drawn from a seed, executed against a real Producer, every outcome recorded.

A workload is a list of operations (keyed and unkeyed ``send``, ``send_many``,
``send_and_wait`` — some of them cancelled —, ``flush``, pauses, and a final ``close``) with
producer options and a topology. Every record carries a unique value, so the checks in
:mod:`.invariants` can find it in the simulated logs.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokprod.errors import KafkaError
from aiokprod.types import Header, RecordMetadata

MIB = 1024 * 1024


#: Calls with bad arguments (``bad_send``; ``Op.count`` picks one): each must raise a typed
#: KafkaError at the call site, queue nothing, and leave the producer working.
BAD_CALLS = (
    "send timestamp_ms=2**63",
    "send timestamp_ms=2**64",
    "send timestamp_ms=-5",
    "send_many timestamp_ms=2**63",
    "send_many values=5 (not iterable)",
    "send_many keys shorter than values",
)


@dataclass(frozen=True, slots=True)
class Op:
    """One step of a workload."""

    kind: str  # send | send_many | send_and_wait | flush | sleep | bad_send
    topic: str = ""
    count: int = 1
    keyed: bool = False
    headers: bool = False
    #: sleep: how long; send_and_wait: cancel after this many ms (-1: never); flush: timeout.
    ms: int = -1


@dataclass(slots=True)
class Workload:
    """Producer options, topics and operations of one run."""

    nodes: int
    topics: dict[str, int]
    options: dict[str, Any]
    ops: list[Op]
    close_timeout_s: float | None
    #: Sends started right before close() (they may race with it).
    racing_sends: int
    #: Topics whose brokers refuse batches larger than this (``max.message.bytes``).
    max_message_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def idempotent(self) -> bool:
        """Whether the producer runs with idempotence."""
        return bool(self.options.get("enable_idempotence", True))

    @property
    def acks(self) -> int:
        """-1 (all) or 1."""
        return int(self.options.get("acks", -1))

    def horizon_ms(self) -> int:
        """Roughly how long the operations take without faults."""
        return sum(op.ms for op in self.ops if op.kind == "sleep") + 200

    def describe(self) -> str:
        """A short summary for --verbose."""
        kinds: dict[str, int] = {}
        for op in self.ops:
            kinds[op.kind] = kinds.get(op.kind, 0) + 1
        return (
            f"  nodes={self.nodes} topics={self.topics}\n  options={self.options}\n"
            f"  ops={kinds} close_timeout={self.close_timeout_s} racing={self.racing_sends}"
            f"\n  max_message_bytes={self.max_message_bytes}"
        )


def draw_workload(rng: random.Random) -> Workload:
    """A workload: 1-3 brokers, 1-3 topics of 1-4 partitions, 10-40 operations."""
    nodes = rng.randint(1, 3)
    topics = {f"t{i}": rng.randint(1, 4) for i in range(rng.randint(1, 3))}
    mode = rng.random()
    options: dict[str, Any] = {}
    if mode < 0.1:
        options.update(acks=1, enable_idempotence=False)
    elif mode < 0.2:
        options.update(acks="all", enable_idempotence=False)
    batch_size = rng.choice((128, 512, 16384))
    request_timeout = rng.choice((200, 500, 1500))
    linger = rng.choice((0, 1, 5, 20))
    options.update(
        linger_ms=linger,
        batch_size=batch_size,
        max_in_flight_requests_per_connection=rng.randint(1, 5),
        request_timeout_ms=request_timeout,
        delivery_timeout_ms=request_timeout + linger + rng.choice((500, 2000, 5000)),
        retry_backoff_ms=rng.choice((10, 50, 100)),
        retry_backoff_max_ms=rng.choice((100, 500, 1000)),
        reconnect_backoff_ms=rng.choice((10, 50)),
        reconnect_backoff_max_ms=rng.choice((100, 1000)),
        socket_connection_setup_timeout_ms=rng.choice((300, 1000, 3000)),
        max_block_ms=rng.choice((500, 2000, 5000)),
        metadata_max_age_ms=rng.choice((500, 5000, 300_000)),
        buffer_memory=rng.choice((32 * MIB, 32 * MIB, 4 * batch_size, 16 * batch_size)),
    )
    names = sorted(topics)
    ops: list[Op] = []
    for _ in range(rng.randint(10, 40)):
        roll = rng.random()
        topic = rng.choice(names)
        keyed = rng.random() < 0.5
        headers = rng.random() < 0.2
        if roll < 0.35:
            ops.append(Op("send", topic, 1, keyed, headers))
        elif roll < 0.45:
            ops.append(Op("send_many", topic, rng.randint(2, 25), keyed, headers))
        elif roll < 0.6:
            cancel = rng.choice((-1, -1, 0, 1, 10, 200))
            ops.append(Op("send_and_wait", topic, 1, keyed, headers, cancel))
        elif roll < 0.65:
            ops.append(Op("flush", ms=rng.choice((-1, -1, 100, 1000))))
        elif roll < 0.68:
            ops.append(Op("bad_send", topic, rng.randrange(len(BAD_CALLS)), keyed))
        else:
            ops.append(Op("sleep", ms=rng.choice((0, 1, 5, 20, 100, 500))))
    close_timeout = rng.choice((None, None, None, 0.0, 0.5, 3.0))
    racing = rng.choice((0, 0, 0, 1, 3))
    # Drawn last, so the draws above are what they were before topics had limits. A record
    # here takes at most ~110 bytes alone in a batch: every limit lets a lone record pass,
    # and batches of several records are refused and split (issue 13).
    limits = {name: rng.choice((200, 400, 1000)) for name in names if rng.random() < 0.25}
    # Drawn after the limits, for the same reason: adaptive partitioning on or off, with or
    # without the availability timeout (issue 13); the default (on, no timeout) most often.
    options["partitioner_adaptive_partitioning"] = rng.random() < 0.75
    options["partitioner_availability_timeout_ms"] = rng.choice((0, 0, 20, 200))
    # Drawn last as well: the partitioner's working set. Topics here have 1-4 partitions, so
    # the default (8) is the Java rule; a set of 2 exercises the set on 3-4 partitions, with
    # leaders moving under it.
    options["partitioner_working_set_size"] = rng.choice((8, 0, 2, 2))
    options["partitioner_working_set_ms"] = rng.choice((1, 20, 100))
    # Drawn last too: in a third of the runs a topic unused for 5 s (the least allowed)
    # leaves the producer's view and state, and is new again at its next send, perhaps in
    # the middle of faults (issue 30: released sequences, the epoch bump after a release).
    options["metadata_max_idle_ms"] = rng.choice((300_000, 300_000, 5000))
    return Workload(nodes, topics, options, ops, close_timeout, racing, limits)


@dataclass(slots=True)
class Sent:
    """One record handed to the producer, and what became of it."""

    value: bytes
    key: bytes | None
    headers: tuple[Header, ...]
    topic: str
    how: str  # send | send_many | send_and_wait | racing | healed
    call_id: int
    index: int  # position within its call
    call_tick: int
    ret_tick: int = -1  # -1: the call did not return (raised, or was cancelled)
    started_ms: int = 0
    returned_ms: int = -1
    resolved_ms: int = -1
    #: "acked" | "failed" | "rejected" (the call raised: not queued) | "unknown" (the call
    #: raised or was cancelled, and the record may have been queued) | "pending"
    outcome: str = "pending"
    metadata: RecordMetadata | None = None
    error: BaseException | None = None
    #: Whether the delivery finished (the future's or the bulk's ``done``), once queued.
    done: Callable[[], bool] | None = None


@dataclass(slots=True)
class Recorder:
    """Every record and every unexpected event of one run."""

    now_ms: Callable[[], int]
    records: list[Sent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tick: int = 0
    calls: int = 0
    #: (flush call tick, records whose call returned before it) of every completed flush.
    flushes: list[tuple[int, int]] = field(default_factory=list)

    def next_tick(self) -> int:
        """A logical clock: orders call starts and returns."""
        self.tick += 1
        return self.tick

    def new_records(self, op: Op, how: str, seed: int) -> list[Sent]:
        """The records of one call (unique values; keys from a small set)."""
        self.calls += 1
        call_tick = self.next_tick()
        out = []
        for i in range(op.count):
            n = len(self.records)
            key = b"k%d" % ((n * 7919 + seed) % 9) if op.keyed else None
            headers: tuple[Header, ...] = (("h", b"%d" % n),) if op.headers else ()
            sent = Sent(b"%d:%d" % (seed, n), key, headers, op.topic, how, self.calls, i, call_tick)
            sent.started_ms = self.now_ms()
            self.records.append(sent)
            out.append(sent)
        return out

    def returned(self, records: list[Sent]) -> None:
        """The call that queued ``records`` returned."""
        tick = self.next_tick()
        now = self.now_ms()
        for sent in records:
            sent.ret_tick = tick
            sent.returned_ms = now

    def resolved(self, sent: Sent, metadata: RecordMetadata | None, error: Any) -> None:
        """A record's delivery finished."""
        if sent.resolved_ms >= 0:
            self.problems.append(f"record {sent.value!r} resolved twice")
            return
        sent.resolved_ms = self.now_ms()
        if error is None:
            sent.outcome = "acked"
            sent.metadata = metadata
        else:
            sent.outcome = "failed"
            sent.error = error
            self.check_error(f"delivery of {sent.value!r}", error)

    def rejected(
        self, records: list[Sent], exc: BaseException, *, expected: bool, maybe_queued: bool
    ) -> None:
        """The call raised; ``maybe_queued``: some of ``records`` may have been queued."""
        for sent in records:
            sent.outcome = "unknown" if maybe_queued else "rejected"
            sent.error = exc
            sent.resolved_ms = self.now_ms()
        if not isinstance(exc, asyncio.CancelledError):
            self.check_error(f"{records[0].how} of {len(records)} record(s)", exc, expected)

    def check_error(self, what: str, exc: BaseException, expected: bool = True) -> None:
        """Errors must be typed KafkaErrors, and never a crash of the producer."""
        name = type(exc).__name__
        if name == "ProducerCrashedError":
            self.problems.append(f"{what}: the producer crashed: {exc}")
        elif not isinstance(exc, KafkaError):
            self.problems.append(f"{what}: untyped error {exc!r}")
        elif not expected:
            self.problems.append(f"{what}: unexpected {exc!r}")
