"""Exactly-once writes from Spark: the protocol's decisions, without I/O (docs/spark.md).

Every function here is synchronous and pure: names, the markers and the commit decision as
they are stored in Kafka, and what the driver and a task do given what they read. The round
trips are in :mod:`aiokprod.spark.committer` (driver) and :mod:`aiokprod.spark.arrow` (tasks).

The protocol, for a sink with ``transactionalIdPrefix`` *P*:

- **A task** (Spark partition *p*) writes its rows in one Kafka transaction under the
  transactional id ``P-p`` (the same for every attempt, retry or speculative copy, and every
  micro-batch: a new attempt's InitProducerId fences the older one and aborts its open
  transaction). It does not commit: it *prepares* (every record acknowledged, the
  transaction left open, KIP-939's idea without its broker support) and hands the producer id
  and epoch to the driver in its commit message. A streaming task also writes a **marker**
  into the same transaction: a transactional offset commit, group ``P-p.marker``, offset = the
  micro-batch id, metadata = the query id. The marker becomes visible exactly when the rows do.
- **The driver** (``commit()``) first stores its **decision** - the run (query id or batch job
  id), the micro-batch and the producer id and epoch of every partition it is about to commit -
  as the offset metadata of group ``P.commit``, then ends every task's transaction with EndTxn
  (commit), then marks the decision done. A decision once stored is only rolled forward:
  ``abort()`` and the next run complete a decided commit instead of aborting it.
- **Replays**: a micro-batch that Spark runs again (the driver died before its commit log was
  written) skips every partition whose marker says it committed that batch of that query; the
  others are written again, their old transaction aborted by the new InitProducerId.
- **Recovery** (the driver, before a batch job's tasks or a micro-batch's): a decision not
  marked done is completed - the partitions whose transaction is still open with the recorded
  producer id and epoch are committed; a batch job's driver then aborts every other open
  transaction of the prefix (fencing its id), so that none pins consumers' last stable offset.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from aiokprod.errors import ConfigError
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "CommitPlan",
    "Decision",
    "DecisionTooLargeError",
    "ExactlyOnceTask",
    "MicroBatch",
    "RecoveryPlan",
    "TaskAction",
    "TaskResult",
    "TransactionView",
    "batch_committed",
    "check_prefix",
    "decide_task",
    "decision_group",
    "latest_decision",
    "marker",
    "marker_group",
    "next_sequence",
    "partition_of",
    "plan_commit",
    "plan_recovery",
    "transactional_id",
]

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
#: The values of the ``deliveryGuarantee`` option.
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)

#: The format tag that starts every marker and decision this module writes.
FORMAT = "aiokprod-spark/1"
#: The broker's default ``offset.metadata.max.bytes``: the room one offset's metadata has.
MAX_METADATA_BYTES = 4096
#: Room kept for the decision's fixed fields (format tag, run id, batch id, state, counts).
_DECISION_OVERHEAD = 512
#: Longest prefix: a transactional id and a group id are strings of at most 32,767 bytes,
#: and the prefix appears in decisions, whose metadata must stay within 4,096 bytes.
MAX_PREFIX_CHARS = 249

#: Transaction states (DescribeTransactions) in which a transaction will commit or has.
_COMMITTED_STATES = frozenset({"PrepareCommit", "CompleteCommit"})


class DecisionTooLargeError(ConfigError):
    """A commit decision does not fit the offset metadata that stores it."""


def check_prefix(prefix: str) -> str:
    """``transactionalIdPrefix`` checked: a non-empty string of printable characters.

    Raises:
        ConfigError: naming the option.
    """
    if not isinstance(prefix, str) or not prefix.strip():
        raise ConfigError(
            "option transactionalIdPrefix: required with deliveryGuarantee=exactly-once "
            "(a name unique to this sink and stable across restarts of the query or job)"
        )
    if len(prefix) > MAX_PREFIX_CHARS or not prefix.isprintable() or prefix != prefix.strip():
        raise ConfigError(
            f"option transactionalIdPrefix: {prefix!r} must be at most {MAX_PREFIX_CHARS} "
            "printable characters without leading or trailing spaces"
        )
    return prefix


@dataclasses.dataclass(frozen=True, slots=True)
class ExactlyOnceTask:
    """What a task needs to write exactly once (part of the writer pickled to the executors).

    Attributes:
        prefix: the sink's ``transactionalIdPrefix``.
        streaming: a micro-batch (write and check the marker) or a batch job.
    """

    prefix: str
    streaming: bool


@dataclasses.dataclass(frozen=True, slots=True)
class MicroBatch:
    """The streaming micro-batch a task belongs to (Spark's task-local properties)."""

    query_id: str
    batch_id: int


# --- names --------------------------------------------------------------------------------


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of Spark partition ``partition``: ``<prefix>-<partition>``."""
    return f"{prefix}-{partition}"


def marker_group(prefix: str, partition: int) -> str:
    """The consumer group that holds partition ``partition``'s marker."""
    return f"{prefix}-{partition}.marker"


def decision_group(prefix: str) -> str:
    """The consumer group that holds the driver's commit decisions."""
    return f"{prefix}.commit"


def partition_of(prefix: str, txn_id: str) -> int | None:
    """The Spark partition whose transactional id ``txn_id`` is, or None if not this sink's.

    ``<prefix>-<digits>`` only: the ids of a prefix that merely starts with ``prefix``
    (``<prefix>-3-1`` of prefix ``<prefix>-3``) are not this sink's.
    """
    if not txn_id.startswith(prefix + "-"):
        return None
    rest = txn_id[len(prefix) + 1 :]
    if not rest.isdigit() or not rest.isascii() or (len(rest) > 1 and rest[0] == "0"):
        return None
    return int(rest)


# --- markers (streaming) ------------------------------------------------------------------


def marker(query_id: str, batch_id: int) -> OffsetAndMetadata:
    """The marker a streaming task commits inside its transaction."""
    return OffsetAndMetadata(batch_id, f"{FORMAT} query={query_id}")


def batch_committed(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], query_id: str, batch_id: int
) -> bool:
    """Whether a partition's marker group says micro-batch ``batch_id`` of ``query_id`` committed.

    Any entry of the group counts (the marker's topic is the topic of the partition's first row,
    which may differ between micro-batches). A marker of another query - a new checkpoint
    reusing the prefix restarts batch ids at 0 - never counts.
    """
    expected = marker(query_id, batch_id)
    return any(value == expected for value in offsets.values())


class TaskAction(enum.Enum):
    """What a task does with its partition."""

    #: Nothing to write: the partition has no rows (no transaction is opened).
    NOTHING = "nothing"
    #: Write the rows in a transaction and prepare it.
    WRITE = "write"
    #: A replayed micro-batch whose rows this partition committed already: write nothing.
    SKIP = "skip"


def decide_task(
    rows: int,
    marker_offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
    query_id: str | None,
    batch_id: int | None,
) -> TaskAction:
    """What a task does, from its row count and (streaming) the marker group it read.

    ``marker_offsets`` must be read *after* the task's InitProducerId (which completes or
    aborts the id's previous transaction) and with RequireStable, so that a marker still being
    committed is not missed.
    """
    if rows == 0:
        return TaskAction.NOTHING
    replay_committed = (
        query_id is not None
        and batch_id is not None
        and marker_offsets is not None
        and batch_committed(marker_offsets, query_id, batch_id)
    )
    return TaskAction.SKIP if replay_committed else TaskAction.WRITE


# --- the driver's decision ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """The driver's commit decision for one batch job or micro-batch.

    Attributes:
        run_id: the streaming query's id, or a batch job's id (made by its driver).
        batch_id: the micro-batch, or None for a batch job.
        transactions: every transaction the driver commits, by Spark partition.
        done: every transaction was committed (or found lost); nothing is left to complete.
    """

    run_id: str
    batch_id: int | None
    transactions: Mapping[int, PreparedTransaction]
    done: bool = False

    def finished(self) -> Decision:
        """The same decision, marked done."""
        return dataclasses.replace(self, done=True)

    def encode(self, prefix: str) -> str:
        """The decision as offset metadata.

        Raises:
            DecisionTooLargeError: more transactions than fit in the metadata.
        """
        protocols = {t.protocol for t in self.transactions.values()} or {2}
        header = (
            f"{FORMAT} run={self.run_id} batch={'-' if self.batch_id is None else self.batch_id} "
            f"state={'done' if self.done else 'commit'} tv={max(protocols)} "
            f"n={len(self.transactions)} txns="
        )
        body = _encode_transactions(self.transactions)
        text = header + body
        if len(text.encode()) > MAX_METADATA_BYTES:
            raise DecisionTooLargeError(
                f"the commit decision of {len(self.transactions)} Spark partitions takes "
                f"{len(text.encode())} bytes, more than the {MAX_METADATA_BYTES} bytes of offset "
                "metadata that store it: write from fewer Spark partitions (coalesce or "
                "repartition before the sink)"
            )
        return text

    @classmethod
    def parse(cls, text: str, prefix: str) -> Decision | None:
        """A decision from offset metadata; None if it is not one this module wrote."""
        match = _DECISION.fullmatch(text)
        if match is None:
            return None
        run_id, batch, state, tv, count, body = match.groups()
        try:
            txns = _decode_transactions(body, prefix, int(tv))
        except ValueError:
            return None
        if len(txns) != int(count):
            return None
        return cls(run_id, None if batch == "-" else int(batch), txns, state == "done")


_DECISION = re.compile(
    re.escape(FORMAT)
    + r" run=(\S+) batch=(-|\d+) state=(commit|done) tv=([12]) n=(\d+) txns=([A-Za-z0-9_-]*)"
)


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value // 2 if value % 2 == 0 else -(value + 1) // 2


def _encode_transactions(txns: Mapping[int, PreparedTransaction]) -> str:
    """(partition, producer id, epoch) triples as deltas in varints, base64url without padding.

    Producer ids of one run come from the same blocks (deltas of a few bytes); a decision of
    200 partitions takes about 1 KB of the 4 KB of metadata.
    """
    out = bytearray()
    last_partition = -1
    last_pid = 0
    for partition in sorted(txns):
        txn = txns[partition]
        _varint(out, partition - last_partition - 1)
        _varint(out, _zigzag(txn.producer_id - last_pid))
        _varint(out, txn.producer_epoch)
        last_partition, last_pid = partition, txn.producer_id
    return base64.urlsafe_b64encode(bytes(out)).decode().rstrip("=")


def _decode_transactions(body: str, prefix: str, protocol: int) -> dict[int, PreparedTransaction]:
    data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    txns: dict[int, PreparedTransaction] = {}
    at = 0
    last_partition, last_pid = -1, 0
    while at < len(data):
        gap, at = _read_varint(data, at)
        delta, at = _read_varint(data, at)
        epoch, at = _read_varint(data, at)
        partition = last_partition + gap + 1
        pid = last_pid + _unzigzag(delta)
        txns[partition] = PreparedTransaction(
            transactional_id(prefix, partition), pid, epoch, protocol
        )
        last_partition, last_pid = partition, pid
    return txns


def latest_decision(
    prefix: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> tuple[int, Decision] | None:
    """The newest decision in the decision group's offsets: (its sequence, the decision).

    Decisions are stored with a sequence as the offset (milliseconds, strictly increasing per
    prefix), on the topic the sink wrote to; the highest sequence is the newest decision.
    """
    best: tuple[int, Decision] | None = None
    for value in offsets.values():
        decision = Decision.parse(value.metadata, prefix)
        if decision is not None and (best is None or value.offset > best[0]):
            best = (value.offset, decision)
    return best


def next_sequence(now_ms: int, latest: int | None) -> int:
    """The sequence of a new decision: now, or one past the newest if the clock is behind."""
    return now_ms if latest is None or now_ms > latest else latest + 1


# --- commit -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TaskResult:
    """What the driver learns from one task's commit message."""

    partition: int
    action: TaskAction
    transaction: PreparedTransaction | None = None
    #: The topic the partition's first row went to (where the decision is stored).
    topic: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CommitPlan:
    """What the driver's ``commit()`` does."""

    #: Transactions to commit, by Spark partition.
    transactions: Mapping[int, PreparedTransaction]
    #: Partitions of a replayed micro-batch that committed earlier (their marker says so).
    skipped: tuple[int, ...]
    #: A topic the sink wrote to: the decision is stored against its partition 0.
    topic: str | None
    #: The topic of each written partition's first row: its marker is on its partition 0.
    marker_topics: Mapping[int, str] = dataclasses.field(default_factory=dict)


def plan_commit(results: Sequence[TaskResult | None]) -> CommitPlan:
    """The commit of every task's transaction.

    Raises:
        ConfigError: a task's message is missing (Spark calls ``commit()`` only when every
            task succeeded) or two tasks report the same partition.
    """
    txns: dict[int, PreparedTransaction] = {}
    skipped: list[int] = []
    topics: dict[int, str] = {}
    seen: set[int] = set()
    for result in results:
        if result is None:
            raise ConfigError("commit(): a task's commit message is missing")
        if result.partition in seen:
            raise ConfigError(f"commit(): Spark partition {result.partition} reported twice")
        seen.add(result.partition)
        if result.action is TaskAction.SKIP:
            skipped.append(result.partition)
        elif result.action is TaskAction.WRITE:
            if result.transaction is None:
                raise ConfigError(f"commit(): partition {result.partition} has no transaction")
            txns[result.partition] = result.transaction
            if result.topic is not None:
                topics[result.partition] = result.topic
    first = min(topics.values()) if topics else None
    return CommitPlan(txns, tuple(sorted(skipped)), first, topics)


# --- recovery -----------------------------------------------------------------------------


class TransactionView(Protocol):
    """What recovery reads of a transaction (DescribeTransactions)."""

    @property
    def state(self) -> str:
        """The coordinator's state name (``"Ongoing"``, ``"CompleteCommit"``, ...)."""
        ...

    @property
    def producer_id(self) -> int:
        """The id's producer id now."""
        ...

    @property
    def producer_epoch(self) -> int:
        """The id's epoch now."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What recovery does with a decision left not done and the prefix's open transactions."""

    #: Decided transactions still open with the recorded producer id and epoch: commit them.
    complete: tuple[PreparedTransaction, ...] = ()
    #: Decided partitions whose transaction committed already.
    committed: tuple[int, ...] = ()
    #: Decided partitions whose transaction is gone without committing (aborted by its
    #: timeout or fenced): their rows are not in Kafka.
    lost: tuple[int, ...] = ()
    #: Transactional ids of the prefix with an open transaction nobody will commit: fence them.
    fence: tuple[str, ...] = ()


def plan_recovery(
    prefix: str,
    decision: Decision | None,
    views: Mapping[str, TransactionView],
    open_ids: Iterable[str] = (),
) -> RecoveryPlan:
    """Complete a decision left not done, and abort the other open transactions listed.

    Args:
        prefix: the sink's ``transactionalIdPrefix``.
        decision: the newest decision if it is not done, else None.
        views: the current state of the decided transactions' ids (DescribeTransactions);
            an id missing here is unknown to the coordinator (expired).
        open_ids: transactional ids with an open transaction (ListTransactions: Ongoing) to
            abort unless the decision commits them; empty where aborting would be wrong (a
            micro-batch's commit runs after its tasks prepared).
    """
    complete: list[PreparedTransaction] = []
    committed: list[int] = []
    lost: list[int] = []
    keep: set[str] = set()
    if decision is not None and not decision.done:
        for partition, txn in sorted(decision.transactions.items()):
            view = views.get(txn.transactional_id)
            if view is None:
                lost.append(partition)
            elif view.state == "Ongoing" and _same_transaction(txn, view):
                complete.append(txn)
                keep.add(txn.transactional_id)
            elif view.state in _COMMITTED_STATES and _committed_as(txn, view):
                committed.append(partition)
            else:
                lost.append(partition)
    fence = sorted(
        {i for i in open_ids if partition_of(prefix, i) is not None and i not in keep},
        key=lambda i: partition_of(prefix, i) or 0,
    )
    return RecoveryPlan(tuple(complete), tuple(committed), tuple(lost), tuple(fence))


def _same_transaction(txn: PreparedTransaction, view: TransactionView) -> bool:
    return view.producer_id == txn.producer_id and view.producer_epoch == txn.producer_epoch


def _committed_as(txn: PreparedTransaction, view: TransactionView) -> bool:
    """Whether the committed transaction ``view`` shows is the decided ``txn``.

    Under transaction protocol 2 the commit bumps the epoch (a new producer id at the epoch's
    end); under protocol 1 it stays. Nothing else runs under the id while a decision is not
    done, so an epoch at most one past the decided one is that transaction.
    """
    if view.producer_id != txn.producer_id:
        return txn.protocol == 2 and txn.producer_epoch >= 32766  # epoch overflow: a new id
    return txn.producer_epoch <= view.producer_epoch <= txn.producer_epoch + 1
