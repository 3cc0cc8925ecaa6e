"""Exactly-once writes from Spark: the protocol's decisions, without I/O (docs/spark.md).

Every function here is synchronous and pure: what the driver and a task do given what they
read. The names and records they store in Kafka (transactional ids, groups, markers, the
commit decision) are in :mod:`aiokprod.spark.eos_records`; the round trips in
:mod:`aiokprod.spark.committer` (driver) and :mod:`aiokprod.spark.transactional_write` (tasks).

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

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from aiokprod.errors import ConfigError
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition
from eos_legacy.eos_records import Decision, batch_committed, partition_of

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "CommitPlan",
    "ExactlyOnceConfig",
    "MicroBatch",
    "RecoveryPlan",
    "TaskAction",
    "TaskResult",
    "TransactionView",
    "check_prefix",
    "decide_task",
    "plan_commit",
    "plan_recovery",
]

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
#: The values of the ``deliveryGuarantee`` option.
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)

#: Longest prefix: a transactional id and a group id are strings of at most 32,767 bytes,
#: and the prefix appears in decisions, whose metadata must stay within 4,096 bytes.
MAX_PREFIX_CHARS = 249

#: Transaction states (DescribeTransactions) in which a transaction will commit or has.
_COMMITTED_STATES = frozenset({"PrepareCommit", "CompleteCommit"})


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
class ExactlyOnceConfig:
    """The sink's exactly-once settings, as a task needs them (pickled inside the writer).

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
