"""The driver's side of exactly-once writes: open a run, commit, abort, recover (docs/spark.md).

The decisions are :mod:`aiokprod.spark.exactly_once`'s; the register and decision records
:mod:`aiokprod.spark.decision_store`'s. The synchronous entry points (Spark's ``writer()``,
``streamWriter()``, ``commit()``, ``abort()``) run one ``asyncio.run`` with an
:class:`~aiokprod.admin.Admin` each; the ``*_with`` coroutines take any admin (the model
checker, :mod:`aiokprod.testing.eos_model`, drives them with its own).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from aiokprod.errors import (
    ConfigError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)
from aiokprod.logs import get_logger
from aiokprod.spark.decision_store import AdminCalls, DecisionStore, StoredDecision, bounded
from aiokprod.spark.eos_records import (
    Decision,
    RunToken,
    batch_committed,
    marker_group,
    next_sequence,
    query_tag,
)
from aiokprod.spark.exactly_once import (
    CommitPlan,
    TaskResult,
    check_open,
    plan_commit,
    plan_recovery,
)
from aiokprod.spark.fencing import fence_attempts, fence_open
from aiokprod.spark.misuse import IN_USE_WAIT_MS, check_not_in_use, layout_problem
from aiokprod.types import PreparedTransaction, TopicPartition

if TYPE_CHECKING:
    from aiokprod.admin import Admin

__all__ = ["CommitReport", "Committer", "ExactlyOnceCommitError"]

log = get_logger("aiokprod.spark")

#: Errors that mean a transaction is no longer open under the producer id and epoch we hold.
_GONE = (
    ProducerFencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    InvalidProducerIdMappingError,
)

T = TypeVar("T")


class ExactlyOnceCommitError(KafkaError):
    """The driver could not commit every transaction of a batch job or micro-batch.

    Attributes:
        committed: Spark partitions whose rows are committed.
        lost: Spark partitions whose transaction was gone (aborted by the coordinator's
            transaction timeout, or fenced) before it could be committed.
    """

    def __init__(self, message: str, committed: Sequence[int] = (), lost: Sequence[int] = ()):
        super().__init__(message)
        self.committed = tuple(committed)
        self.lost = tuple(lost)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ExactlyOnceCommitError, (str(self), self.committed, self.lost))


@dataclasses.dataclass(frozen=True, slots=True)
class CommitReport:
    """What a commit, an abort or a recovery did."""

    committed: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    aborted: tuple[str, ...] = ()


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True)
class Committer:
    """Opens, commits, aborts and recovers the runs of one sink (one ``transactionalIdPrefix``).

    Attributes:
        bootstrap_servers: where to connect.
        options: producer options (connection, security, timeouts) for the admin client.
        prefix: the sink's ``transactionalIdPrefix``.
        streaming: micro-batches (markers tell replays what committed) or batch jobs.
        clock: the driver's clock, in milliseconds.
        margin_ms: overrides :func:`~aiokprod.spark.exactly_once.commit_margin_ms` of each
            transaction's own timeout.
        in_use_wait_ms: how long planning watches a run that another driver left open for
            transactions it begins, before taking the prefix over (0: never watch).
        fence_attempts: an abort fences the ids of this many attempts of every partition
            (Spark's ``spark.task.maxFailures``, 4 by default, bounds a task's attempts).
    """

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    prefix: str
    streaming: bool
    clock: Callable[[], int] = _wall_ms
    margin_ms: int | None = None
    in_use_wait_ms: int = IN_USE_WAIT_MS
    fence_attempts: int = 4

    def __repr__(self) -> str:  # options may hold credentials
        return f"<aiokprod.spark committer prefix={self.prefix!r} streaming={self.streaming}>"

    # --- the synchronous entry points (Spark's driver) ------------------------------------

    def open_run(self) -> RunToken:
        """Open a run (planning): close the one before and end what it left; its token.

        Raises:
            ExactlyOnceCommitError: a batch job's decision left undone by an earlier driver
                had lost partitions (reported once; the decision is then marked done).
        """
        return self._run(lambda admin: self.open_run_with(admin))

    def commit(
        self,
        run: RunToken | None,
        batch_id: int | None,
        results: Sequence[TaskResult | None],
        query_id: str | None = None,
    ) -> CommitReport:
        """Commit every task's transaction, atomically as far as Kafka allows.

        Raises:
            ExactlyOnceCommitError: nothing was committed (a transaction was gone or too
                close to its timeout, or another run took the prefix over), or a
                transaction was gone after the decision (the rest committed; ``lost`` names
                the partitions).
        """
        return self._run(lambda a: self.commit_with(a, run, batch_id, results, query_id))

    def abort(
        self, run: RunToken | None, batch_id: int | None, results: Sequence[TaskResult | None]
    ) -> CommitReport:
        """Close the run and abort its transactions - or complete a decided commit."""
        return self._run(lambda a: self.abort_with(a, run, batch_id, results))

    def recover(self) -> CommitReport:
        """Complete a decision left undone and abort every other open transaction."""
        return self._run(lambda a: self.recover_with(a))

    def _run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        async def main() -> T:
            from aiokprod.admin import Admin

            async with Admin(self.bootstrap_servers, **self.options) as admin:
                return await work(admin)

        return asyncio.run(main())

    # --- planning and recovery ------------------------------------------------------------------

    async def open_run_with(self, admin: AdminCalls | Admin) -> RunToken:
        """:meth:`open_run` with ``admin``."""
        store = DecisionStore(admin, self.prefix)
        await check_not_in_use(admin, store, self.prefix, self.in_use_wait_ms)
        run = await store.open_run()
        report = await self._recover_decision(admin, store)
        await fence_open(admin, self.prefix, run_tag=None)
        if report.lost and not self.streaming:
            raise ExactlyOnceCommitError(
                self._earlier_loss(report.lost), report.committed, report.lost
            )
        return run

    async def recover_with(self, admin: AdminCalls | Admin) -> CommitReport:
        """:meth:`recover` with ``admin``."""
        store = DecisionStore(admin, self.prefix)
        await store.open_run()  # whatever run was open is over
        report = await self._recover_decision(admin, store)
        aborted = await fence_open(admin, self.prefix, run_tag=None)
        return dataclasses.replace(report, aborted=aborted)

    async def _recover_decision(
        self, admin: AdminCalls | Admin, store: DecisionStore
    ) -> CommitReport:
        """Complete the newest decision if an earlier driver left it undone."""
        stored = await store.latest()
        if stored is None or (stored.decision is not None and stored.decision.done):
            return CommitReport()
        decision = self._readable(stored)
        ids = [t.transactional_id for t in decision.transactions.values()]
        views = await admin.describe_transactions(ids)
        plan = plan_recovery(self.prefix, decision, views)
        if plan.complete:
            log.warning(
                "completing the commit a driver had decided and not finished",
                prefix=self.prefix,
                partitions=sorted(decision.transactions),
            )
            await bounded(lambda t: admin.complete_transaction(t, commit=True), plan.complete)
        if plan.lost:
            log.error(
                "a decided commit lost partitions: their transactions were aborted before the "
                "commit completed",
                prefix=self.prefix,
                batch_id=decision.batch_id,
                partitions=list(plan.lost),
            )
        await store.store_header(stored.where, stored.sequence, decision.finished(plan.lost))
        done = sorted(p for p, t in decision.transactions.items() if t in plan.complete) + list(
            plan.committed
        )
        return CommitReport(committed=tuple(sorted(done)), lost=plan.lost)

    def _readable(self, stored: StoredDecision) -> Decision:
        if stored.decision is None:
            raise ExactlyOnceCommitError(
                f"transactionalIdPrefix {self.prefix!r}: the newest commit decision (stored as "
                f"{stored.sequence}) cannot be read whole (a chunk group "
                f"{self.prefix}.commit.{stored.sequence}.<k> is missing or changed): its "
                "transactions cannot be completed; they are aborted by their timeout"
            )
        return stored.decision

    # --- commit -------------------------------------------------------------------------------

    async def commit_with(
        self,
        admin: AdminCalls | Admin,
        run: RunToken | None,
        batch_id: int | None,
        results: Sequence[TaskResult | None],
        query_id: str | None = None,
    ) -> CommitReport:
        """:meth:`commit` with ``admin``."""
        plan = plan_commit(results, run)
        store = DecisionStore(admin, self.prefix)
        if not plan.transactions:
            ours = await store.close_run(plan.run)
            aborted = await self._leftovers(admin, ours, plan.run)
            return CommitReport(skipped=plan.skipped, aborted=aborted)
        if plan.run is None:  # pragma: no cover - a written partition always names its run
            raise ExactlyOnceCommitError("commit(): the tasks did not say which run they wrote")
        stored = await store.latest()
        if stored is not None and stored.decision is not None and stored.decision.run == plan.run:
            return await self._again(admin, store, stored)  # Spark commits the same run again
        query = "" if query_id is None else query_tag(query_id)
        if stored is not None and stored.decision is not None and self.streaming:
            problem = layout_problem(stored.decision, query, batch_id, len(results))
            if problem is not None:
                await self._abort_all(admin, plan.transactions.values())
                raise ConfigError(problem)
        if not await store.close_run(plan.run):
            await self._abort_all(admin, plan.transactions.values())
            raise ExactlyOnceCommitError(self._taken_over(batch_id))
        await self._check(admin, plan, batch_id)
        decision = Decision(
            plan.run, batch_id, plan.transactions, query=query, partitions=len(results)
        )
        if plan.topic is None:  # pragma: no cover - a written partition names its topic
            raise ExactlyOnceCommitError("commit(): no topic to store the decision against")
        where = TopicPartition(plan.topic, 0)
        sequence = next_sequence(self.clock(), None if stored is None else stored.sequence)
        await store.store(where, sequence, decision)
        committed, lost = await self._complete(admin, query_id, batch_id, plan)
        await store.store_header(where, sequence, decision.finished(lost))
        aborted = await fence_open(admin, self.prefix, run_tag=None)
        if lost:
            raise ExactlyOnceCommitError(
                self._lost_message(batch_id, committed, lost), committed, lost
            )
        return CommitReport(tuple(committed), plan.skipped, (), aborted)

    async def _again(
        self, admin: AdminCalls | Admin, store: DecisionStore, stored: StoredDecision
    ) -> CommitReport:
        """``commit()`` or ``abort()`` for a run that has a decision: complete it, report it."""
        decision = self._readable(stored)
        if not decision.done:
            report = await self._recover_decision(admin, store)
            lost = report.lost
        else:
            lost = decision.lost_partitions
            if decision.lost and not lost:  # pragma: no cover - the header lists up to 64
                lost = (-1,)
        committed = tuple(p for p in sorted(decision.transactions) if p not in lost)
        if lost:
            raise ExactlyOnceCommitError(
                self._lost_message(decision.batch_id, committed, lost), committed, lost
            )
        return CommitReport(committed=committed)

    async def _check(
        self, admin: AdminCalls | Admin, plan: CommitPlan, batch_id: int | None
    ) -> None:
        """Before deciding: every transaction open with its margin left, or nothing commits."""
        ids = [t.transactional_id for t in plan.transactions.values()]
        views = await admin.describe_transactions(ids)
        gone = check_open(plan.transactions, views, self.clock(), self.margin_ms)
        if not gone:
            return
        await self._abort_all(admin, plan.transactions.values())
        await fence_open(admin, self.prefix, run_tag=None)
        shown = ", ".join(f"{p} ({why})" for p, why in gone[:20])
        raise ExactlyOnceCommitError(
            f"{self._what(batch_id)}: the transactions of Spark partitions {shown} are no longer "
            "open, or too close to their timeout (kafka.transaction.timeout.ms) to be "
            "committed safely: nothing was committed and every transaction was aborted"
            + (", the micro-batch runs again when the query restarts" if self.streaming else ""),
            lost=[p for p, _ in gone],
        )

    async def _complete(
        self,
        admin: AdminCalls | Admin,
        query_id: str | None,
        batch_id: int | None,
        plan: CommitPlan,
    ) -> tuple[list[int], list[int]]:
        """EndTxn(commit) for each; a transaction found gone is checked against its marker."""

        async def one(item: tuple[int, PreparedTransaction]) -> bool:
            partition, txn = item
            try:
                await admin.complete_transaction(txn, commit=True)
                return True
            except _GONE as exc:
                if await self._marker_says_committed(admin, query_id, batch_id, plan, partition):
                    return True
                log.error(
                    "a decided transaction could not be committed",
                    transactional_id=txn.transactional_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return False

        ordered = sorted(plan.transactions.items())
        done = await bounded(one, ordered)
        committed = [p for (p, _), ok in zip(ordered, done, strict=True) if ok]
        lost = [p for (p, _), ok in zip(ordered, done, strict=True) if not ok]
        return committed, lost

    async def _marker_says_committed(
        self,
        admin: AdminCalls | Admin,
        query_id: str | None,
        batch_id: int | None,
        plan: CommitPlan,
        partition: int,
    ) -> bool:
        """Streaming: whether the partition's marker says its transaction committed."""
        topic = plan.marker_topics.get(partition)
        if not self.streaming or batch_id is None or query_id is None or topic is None:
            return False
        offsets = await admin.list_consumer_group_offsets(
            marker_group(self.prefix, query_id, partition),
            [TopicPartition(topic, 0)],
            require_stable=True,
        )
        return batch_committed(offsets, query_id, batch_id)

    # --- abort --------------------------------------------------------------------------------

    async def abort_with(
        self,
        admin: AdminCalls | Admin,
        run: RunToken | None,
        batch_id: int | None,
        results: Sequence[TaskResult | None],
    ) -> CommitReport:
        """:meth:`abort` with ``admin``."""
        runs = {r.run for r in results if r is not None and r.run is not None}
        run = run if run is not None else (next(iter(runs)) if len(runs) == 1 else None)
        store = DecisionStore(admin, self.prefix)
        stored = await store.latest()
        if stored is not None and stored.decision is not None and stored.decision.run == run:
            # The commit was decided (and failed part way): it can only go forward.
            log.warning("abort() after a decided commit: completing it", batch_id=batch_id)
            return await self._again(admin, store, stored)
        ours = await store.close_run(run)
        txns = [r.transaction for r in results if r is not None and r.transaction is not None]
        await self._abort_all(admin, txns)
        aborted = await self._leftovers(admin, ours, run)
        if ours or (run is not None and not self.streaming):
            scope = None if self.streaming else run
            if self.streaming or run is not None:
                await fence_attempts(admin, self.prefix, scope, results, self.fence_attempts)
        return CommitReport(aborted=tuple(t.transactional_id for t in txns) + aborted)

    async def _leftovers(
        self, admin: AdminCalls | Admin, ours: bool, run: RunToken | None
    ) -> tuple[str, ...]:
        """After closing a run: abort what is still open of it.

        Every open transaction of the prefix if the run was the prefix's open one; if another
        run took over, only a batch job's own ids (a streaming query's ids are shared).
        """
        if ours:
            return await fence_open(admin, self.prefix, run_tag=None)
        if run is not None and not self.streaming:
            return await fence_open(admin, self.prefix, run_tag=run.tag)
        return ()

    async def _abort_all(
        self, admin: AdminCalls | Admin, txns: Iterable[PreparedTransaction]
    ) -> None:
        """EndTxn(abort) for each; one that fails otherwise is fenced (which aborts it)."""
        failed: list[str] = []

        async def one(txn: PreparedTransaction) -> None:
            try:
                await admin.complete_transaction(txn, commit=False)
            except _GONE:
                pass  # not open any more: nothing to abort
            except KafkaError as exc:
                log.warning(
                    "EndTxn(abort) failed; fencing", id=txn.transactional_id, error=str(exc)
                )
                failed.append(txn.transactional_id)

        await bounded(one, list(txns))
        if failed:
            await admin.fence_producers(failed)

    # --- messages -----------------------------------------------------------------------------

    def _what(self, batch_id: int | None) -> str:
        return "the batch job" if batch_id is None else f"micro-batch {batch_id}"

    def _taken_over(self, batch_id: int | None) -> str:
        return (
            f"{self._what(batch_id)}: transactionalIdPrefix {self.prefix!r} was taken over by "
            "another job or query while this one wrote (a prefix is for one job or query at a "
            "time): nothing was committed and this write's transactions were aborted"
        )

    def _lost_message(
        self, batch_id: int | None, committed: Sequence[int], lost: Sequence[int]
    ) -> str:
        then = (
            "restart the query: the micro-batch runs again and writes those partitions, the "
            "committed ones are skipped"
            if self.streaming
            else "their rows are not in Kafka; the other partitions are committed"
        )
        return (
            f"{self._what(batch_id)}: the transactions of Spark partitions {list(lost)[:20]} were "
            f"aborted before the driver committed them (the driver stalled past its margin of "
            f"kafka.transaction.timeout.ms?); {len(committed)} partitions committed. {then}"
        )

    def _earlier_loss(self, lost: Sequence[int]) -> str:
        return (
            f"transactionalIdPrefix {self.prefix!r}: an earlier batch job's driver decided its "
            f"commit and stopped before finishing it; by now the transactions of Spark "
            f"partitions {list(lost)[:20]} had been aborted (transaction timeout), so those "
            "rows of that job are not in Kafka (its other partitions are). This is reported "
            "once: run this job again to go on"
        )
