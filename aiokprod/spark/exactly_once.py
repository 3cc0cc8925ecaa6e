"""Exactly-once writes from Spark: the protocol's decisions, without I/O (docs/spark.md).

Every function here is synchronous and pure: what the driver and a task do given what they
read. The names and records they store in Kafka are in :mod:`aiokprod.spark.eos_records`;
the round trips in :mod:`aiokprod.spark.committer` (driver) and
:mod:`aiokprod.spark.transactional_write` (tasks). The protocol, for a sink with
``transactionalIdPrefix`` *P* (docs/design.md, "Exactly-once from Spark", argues it):

- **A run** is a batch job, or one micro-batch. The driver's planning opens it by bumping the
  *run register* (InitProducerId on ``P-run``): the register's producer id and epoch are the
  run's token, shipped to the tasks with the writer. Opening a run closes the one before and
  ends what it left: a decision it left undone is completed, every other open transaction of
  the prefix is aborted.
- **A task attempt** writes its Spark partition in one transaction under an id of its own,
  and only while the register holds its token: it checks before its InitProducerId, right
  after it (so that a driver that closed the run before is seen), while it writes, and once
  every record is acknowledged. It does not commit: it *prepares* (the transaction stays
  open) and hands the producer id and epoch to the driver. A streaming task also writes a
  **marker** (the micro-batch id) into its transaction, and skips a replayed micro-batch whose
  marker says it committed.
- **The driver's commit** first closes the run (bumps the register: no task of the run writes
  any more), then checks that every transaction is open and has a margin of its timeout left
  (otherwise it aborts them all: nothing of the write is visible), stores its **decision**,
  ends every transaction with EndTxn (commit), marks the decision done, and aborts every other
  open transaction of the prefix (speculative losers, stragglers). A stored decision is only
  ever rolled forward.
- **The driver's abort** closes the run the same way and aborts what is open.

A transaction opened by a straggler after its run was closed is therefore aborted by its
own task at its next check, or by the driver that closed the run: none outlives its run by
more than a check interval, unless its process dies with it open (then the coordinator's
transaction timeout, or the next run's planning, ends it).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokprod.errors import ConfigError
from aiokprod.spark.eos_records import Decision, RunToken, batch_committed, parse_transactional_id
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

__all__ = [
    "AT_LEAST_ONCE",
    "BATCH_TRANSACTION_TIMEOUT_MS",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "STREAMING_TRANSACTION_TIMEOUT_MS",
    "CommitPlan",
    "ExactlyOnceConfig",
    "MicroBatch",
    "RecoveryPlan",
    "TaskAction",
    "TaskResult",
    "TransactionView",
    "check_open",
    "check_prefix",
    "commit_margin_ms",
    "decide_task",
    "plan_commit",
    "plan_recovery",
    "transaction_options",
]

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
#: The values of the ``deliveryGuarantee`` option.
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)

#: Longest prefix: a transactional id and a group id are strings of at most 32,767 bytes.
MAX_PREFIX_CHARS = 249

#: ``transaction_timeout_ms`` of a micro-batch's transactions unless
#: ``kafka.transaction.timeout.ms`` is set: a micro-batch (every task, then the commit) must
#: finish within it, less the commit margin; it bounds how long a driver that dies for good
#: mid-micro-batch holds read_committed consumers back.
STREAMING_TRANSACTION_TIMEOUT_MS = 300_000
#: The same for a batch job, from its first task's first row to its commit: the broker's
#: default ``transaction.max.timeout.ms`` (15 min), the most it accepts.
BATCH_TRANSACTION_TIMEOUT_MS = 900_000


def transaction_options(options: Mapping[str, Any], streaming: bool) -> dict[str, Any]:
    """``options`` with the default ``transaction_timeout_ms`` of a micro-batch or batch job.

    ``kafka.transaction.timeout.ms`` (``transaction_timeout_ms``) wins when it is set.
    """
    default = STREAMING_TRANSACTION_TIMEOUT_MS if streaming else BATCH_TRANSACTION_TIMEOUT_MS
    return {"transaction_timeout_ms": default, **options}


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


def commit_margin_ms(transaction_timeout_ms: int) -> int:
    """How much of its timeout every transaction must have left when the driver decides.

    A tenth of the timeout, at least 5 s and at most 60 s: the decision's EndTxn calls take
    milliseconds, so only a driver that stalls longer than this between deciding and
    completing (a long GC pause, a frozen process) can see a decided transaction time out.
    """
    return min(60_000, max(5_000, transaction_timeout_ms // 10))


@dataclasses.dataclass(frozen=True, slots=True)
class ExactlyOnceConfig:
    """The sink's exactly-once settings, as a task needs them (pickled inside the writer).

    Attributes:
        prefix: the sink's ``transactionalIdPrefix``.
        streaming: a micro-batch (write and check the marker) or a batch job.
        run: the run token the driver's planning opened; a task writes only while the run
            register holds it. None: planning has not opened a run (the task fails).
        check_interval_ms: how often, while it writes, a task checks that its run is open.
    """

    prefix: str
    streaming: bool
    run: RunToken | None = None
    check_interval_ms: int = 1_000


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

    ``marker_offsets`` must be read *after* the task's InitProducerId and run check, with
    RequireStable, so that a marker still being committed is not missed.
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
    #: The run token the task wrote under.
    run: RunToken | None = None


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
    #: The run every task wrote under (None: no task wrote or skipped).
    run: RunToken | None = None


def plan_commit(results: Sequence[TaskResult | None], run: RunToken | None = None) -> CommitPlan:
    """The commit of every task's transaction.

    Args:
        results: one per Spark partition.
        run: the run the driver planned, where it knows it (a batch job); a streaming
            commit learns it from the tasks.

    Raises:
        ConfigError: a task's message is missing (Spark calls ``commit()`` only when every
            task succeeded), two tasks report the same partition, a written partition has
            no transaction, or the tasks wrote under different runs.
    """
    txns: dict[int, PreparedTransaction] = {}
    skipped: list[int] = []
    topics: dict[int, str] = {}
    seen: set[int] = set()
    runs = {run} if run is not None else set()
    for result in results:
        if result is None:
            raise ConfigError("commit(): a task's commit message is missing")
        if result.partition in seen:
            raise ConfigError(f"commit(): Spark partition {result.partition} reported twice")
        seen.add(result.partition)
        if result.action is TaskAction.NOTHING:
            continue
        if result.run is not None:
            runs.add(result.run)
        if result.action is TaskAction.SKIP:
            skipped.append(result.partition)
        else:
            if result.transaction is None:
                raise ConfigError(f"commit(): partition {result.partition} has no transaction")
            txns[result.partition] = result.transaction
            if result.topic is not None:
                topics[result.partition] = result.topic
    if len(runs) > 1:
        raise ConfigError(f"commit(): the tasks wrote under different runs {sorted(runs)}")
    first = min(topics.values()) if topics else None
    only = next(iter(runs)) if runs else None
    return CommitPlan(txns, tuple(sorted(skipped)), first, topics, only)


class TransactionView(Protocol):
    """What the driver reads of a transaction (DescribeTransactions)."""

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

    @property
    def timeout_ms(self) -> int:
        """The transaction's timeout."""
        ...

    @property
    def start_time_ms(self) -> int:
        """When the open transaction started (the broker's clock), -1 if none is open."""
        ...


def check_open(
    txns: Mapping[int, PreparedTransaction],
    views: Mapping[str, TransactionView],
    now_ms: int,
    margin_ms: int | None = None,
) -> list[tuple[int, str]]:
    """The decided partitions whose transaction cannot safely be committed, and why.

    Safe: still open under the prepared producer id and epoch, with at least ``margin_ms``
    (None: :func:`commit_margin_ms` of the transaction's own timeout) of its timeout left at
    ``now_ms`` (the driver's clock against the broker's start time).
    """
    gone: list[tuple[int, str]] = []
    for partition, txn in sorted(txns.items()):
        view = views.get(txn.transactional_id)
        if view is None:
            gone.append((partition, "unknown to the coordinator"))
        elif view.state != "Ongoing":
            gone.append((partition, view.state))
        elif (view.producer_id, view.producer_epoch) != (txn.producer_id, txn.producer_epoch):
            gone.append((partition, "fenced"))
        else:
            left = view.start_time_ms + view.timeout_ms - now_ms
            margin = commit_margin_ms(view.timeout_ms) if margin_ms is None else margin_ms
            if view.start_time_ms >= 0 and left < margin:
                gone.append((partition, f"{max(left, 0)} ms of its timeout left"))
    return gone


# --- recovery -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What to do with a decision left not done and the prefix's open transactions."""

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
            abort unless the decision commits them.
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
        {i for i in open_ids if parse_transactional_id(prefix, i) is not None and i not in keep}
    )
    return RecoveryPlan(tuple(complete), tuple(committed), tuple(lost), tuple(fence))


def _same_transaction(txn: PreparedTransaction, view: TransactionView) -> bool:
    return view.producer_id == txn.producer_id and view.producer_epoch == txn.producer_epoch


def _committed_as(txn: PreparedTransaction, view: TransactionView) -> bool:
    """Whether the committed transaction ``view`` shows is the decided ``txn``.

    Under transaction protocol 2 the commit bumps the epoch (a new producer id at the epoch's
    end); under protocol 1 it stays. The id belongs to one task attempt of one run, and the
    run was closed before the decision, so nothing else runs under it: an epoch at most one
    past the decided one is that transaction.
    """
    if view.producer_id != txn.producer_id:
        return txn.protocol == 2 and txn.producer_epoch >= 32766  # epoch overflow: a new id
    return txn.producer_epoch <= view.producer_epoch <= txn.producer_epoch + 1
