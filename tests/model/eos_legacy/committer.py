"""The driver's side of exactly-once writes: commit, abort and recover (docs/spark.md).

The decisions are :mod:`aiokprod.spark.exactly_once`'s; this module does the round trips with
an :class:`~aiokprod.admin.Admin` client, one ``asyncio.run`` per call (the driver calls them
from Spark's synchronous ``commit()``/``abort()``/``writer()``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from aiokprod.errors import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)
from aiokprod.logs import get_logger
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition
from eos_legacy.eos_records import (
    Decision,
    batch_committed,
    decision_group,
    latest_decision,
    marker_group,
    next_sequence,
    partition_of,
)
from eos_legacy.exactly_once import RecoveryPlan, TaskResult, plan_commit, plan_recovery

if TYPE_CHECKING:
    from aiokprod.admin import Admin

__all__ = ["CommitReport", "Committer", "ExactlyOnceCommitError"]

log = get_logger("aiokprod.spark")

#: EndTxn and InitProducerId requests in flight at once (each to its id's coordinator).
_CONCURRENCY = 32
#: Errors that mean a transaction is no longer open under the producer id and epoch we hold.
_GONE = (
    ProducerFencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    InvalidProducerIdMappingError,
)

T = TypeVar("T")
A = TypeVar("A")


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
    """What a commit or a recovery did."""

    committed: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    aborted: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Committer:
    """Commits, aborts and recovers the transactions of one sink (one ``transactionalIdPrefix``).

    Attributes:
        bootstrap_servers: where to connect.
        options: producer options (connection, security, timeouts) for the admin client.
        prefix: the sink's ``transactionalIdPrefix``.
        streaming: micro-batches (markers tell replays what committed) or a batch job.
    """

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    prefix: str
    streaming: bool

    def __repr__(self) -> str:  # options may hold credentials
        return f"<aiokprod.spark committer prefix={self.prefix!r} streaming={self.streaming}>"

    # --- the synchronous entry points (Spark's driver) ------------------------------------

    def commit(
        self, run_id: str, batch_id: int | None, results: Sequence[TaskResult | None]
    ) -> CommitReport:
        """Commit every task's transaction, atomically as far as Kafka allows.

        Raises:
            ExactlyOnceCommitError: a transaction was gone before the decision (nothing was
                committed: every other one is aborted) or after it (the rest committed).
        """
        return asyncio.run(self._with_admin(lambda a: self._commit(a, run_id, batch_id, results)))

    def abort(
        self, run_id: str, batch_id: int | None, results: Sequence[TaskResult | None]
    ) -> CommitReport:
        """Abort the tasks' transactions - or, if this commit was decided, complete it."""
        return asyncio.run(self._with_admin(lambda a: self._abort(a, run_id, batch_id, results)))

    def recover(self, *, fence_open: bool) -> CommitReport:
        """Complete a decision left not done; with ``fence_open``, abort the others.

        ``fence_open`` aborts every other open transaction of the prefix: only where no task
        of this sink is running.
        """
        return asyncio.run(self._with_admin(lambda a: self._recover(a, fence_open=fence_open)))

    async def _with_admin(self, work: Callable[[Admin], Awaitable[T]]) -> T:
        from aiokprod.admin import Admin

        async with Admin(self.bootstrap_servers, **self.options) as admin:
            return await work(admin)

    # --- commit -------------------------------------------------------------------------------

    async def _commit(
        self,
        admin: Admin,
        run_id: str,
        batch_id: int | None,
        results: Sequence[TaskResult | None],
    ) -> CommitReport:
        plan = plan_commit(results)
        if not plan.transactions:
            return CommitReport(skipped=plan.skipped)
        seq, latest = await self._latest(admin)
        if latest is not None and (latest.run_id, latest.batch_id) == (run_id, batch_id):
            if latest.done:  # Spark called commit() again for a committed epoch
                return CommitReport(committed=tuple(sorted(latest.transactions)))
        else:
            await self._check_open(admin, plan.transactions)
        decision = Decision(run_id, batch_id, plan.transactions)
        topic = plan.topic
        if topic is None:  # a written partition always names its first row's topic
            raise ExactlyOnceCommitError("commit(): no topic to store the decision against")
        seq = next_sequence(int(time.time() * 1000), seq)
        await self._store(admin, topic, seq, decision)
        committed, lost = await self._complete(
            admin, run_id, batch_id, plan.transactions, plan.marker_topics
        )
        await self._store(admin, topic, seq, decision.finished())
        aborted = await self._fence_open(admin, keep=())
        report = CommitReport(tuple(committed), plan.skipped, tuple(lost), aborted)
        if lost:
            raise ExactlyOnceCommitError(
                self._lost_message(batch_id, committed, lost), committed, lost
            )
        return report

    async def _check_open(self, admin: Admin, txns: Mapping[int, PreparedTransaction]) -> None:
        """Before deciding: every transaction is still open, or nothing is committed."""
        views = await admin.describe_transactions([t.transactional_id for t in txns.values()])
        gone = []
        for partition, txn in sorted(txns.items()):
            view = views.get(txn.transactional_id)
            if (
                view is None
                or view.state != "Ongoing"
                or (view.producer_id, view.producer_epoch) != (txn.producer_id, txn.producer_epoch)
            ):
                gone.append((partition, "unknown" if view is None else view.state))
        if not gone:
            return
        await self._abort_all(admin, txns.values())
        shown = ", ".join(f"{p} ({state})" for p, state in gone[:20])
        raise ExactlyOnceCommitError(
            f"the transactions of Spark partitions {shown} are no longer open (aborted by "
            "the coordinator's transaction timeout - kafka.transaction.timeout.ms - or fenced "
            "by a newer attempt): nothing was committed and every other transaction was "
            "aborted"
            + (", the micro-batch runs again when the query restarts" if self.streaming else ""),
            lost=[p for p, _ in gone],
        )

    async def _complete(
        self,
        admin: Admin,
        run_id: str,
        batch_id: int | None,
        txns: Mapping[int, PreparedTransaction],
        topics: Mapping[int, str],
    ) -> tuple[list[int], list[int]]:
        """EndTxn(commit) for each; a transaction found gone is checked against its marker.

        The marker of partition p is on partition 0 of ``topics[p]``.
        """

        async def one(item: tuple[int, PreparedTransaction]) -> bool:
            partition, txn = item
            try:
                await admin.complete_transaction(txn, commit=True)
                return True
            except _GONE as exc:
                topic = topics.get(partition)
                if self.streaming and batch_id is not None and topic is not None:
                    offsets = await admin.list_consumer_group_offsets(
                        marker_group(self.prefix, partition),
                        [TopicPartition(topic, 0)],
                        require_stable=True,
                    )
                    if batch_committed(offsets, run_id, batch_id):
                        return True
                log.error(
                    "a decided transaction could not be committed",
                    transactional_id=txn.transactional_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return False

        done = await _bounded(one, sorted(txns.items()))
        ordered = sorted(txns)
        committed = [p for p, ok in zip(ordered, done, strict=True) if ok]
        lost = [p for p, ok in zip(ordered, done, strict=True) if not ok]
        return committed, lost

    # --- abort --------------------------------------------------------------------------------

    async def _abort(
        self,
        admin: Admin,
        run_id: str,
        batch_id: int | None,
        results: Sequence[TaskResult | None],
    ) -> CommitReport:
        _, latest = await self._latest(admin)
        if (
            latest is not None
            and not latest.done
            and (latest.run_id, latest.batch_id) == (run_id, batch_id)
        ):
            # The commit was decided (and failed part way): it can only go forward.
            log.warning("abort() after a decided commit: completing it", batch_id=batch_id)
            return await self._recover(admin, fence_open=True)
        txns = [r.transaction for r in results if r is not None and r.transaction is not None]
        await self._abort_all(admin, txns)
        aborted = await self._fence_open(admin, keep=())
        return CommitReport(aborted=tuple(t.transactional_id for t in txns) + aborted)

    async def _abort_all(self, admin: Admin, txns: Iterable[PreparedTransaction]) -> None:
        """EndTxn(abort) for each; one that fails is fenced (which aborts it) instead."""
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

        await _bounded(one, txns)
        if failed:
            await admin.fence_producers(failed)

    # --- recovery -----------------------------------------------------------------------------

    async def _recover(self, admin: Admin, *, fence_open: bool) -> CommitReport:
        offsets = await admin.list_consumer_group_offsets(decision_group(self.prefix))
        found = latest_decision(self.prefix, offsets)
        decision = None if found is None or found[1].done else found[1]
        views: Mapping[str, Any] = {}
        if decision is not None:
            ids = [t.transactional_id for t in decision.transactions.values()]
            views = await admin.describe_transactions(ids)
        open_ids: list[str] = []
        if fence_open:
            open_ids = await self._open_ids(admin)
        plan = plan_recovery(self.prefix, decision, views, open_ids)
        await self._apply(admin, plan)
        if decision is not None and found is not None:
            topic = next(iter(tp.topic for tp, v in offsets.items() if v.offset == found[0]))
            await self._store(admin, topic, found[0], decision.finished())
        return CommitReport(
            committed=tuple(
                sorted([_partition(self.prefix, t) for t in plan.complete] + list(plan.committed))
            ),
            lost=plan.lost,
            aborted=plan.fence,
        )

    async def _apply(self, admin: Admin, plan: RecoveryPlan) -> None:
        if plan.complete:
            log.warning(
                "completing the commit a driver had decided and not finished",
                prefix=self.prefix,
                partitions=[_partition(self.prefix, t) for t in plan.complete],
            )
            await _bounded(lambda t: admin.complete_transaction(t, commit=True), plan.complete)
        if plan.lost:
            log.error(
                "a decided commit lost partitions: their transactions were aborted before the "
                "commit completed (transaction timeout)",
                prefix=self.prefix,
                partitions=list(plan.lost),
            )
        if plan.fence:
            log.warning("aborting lingering transactions", prefix=self.prefix, ids=list(plan.fence))
            await admin.fence_producers(plan.fence)

    async def _fence_open(self, admin: Admin, keep: Iterable[str]) -> tuple[str, ...]:
        """Abort every open transaction of the prefix that nobody will commit."""
        kept = set(keep)
        ids = [i for i in await self._open_ids(admin) if i not in kept]
        if ids:
            log.info("aborting transactions no task will finish", prefix=self.prefix, ids=ids)
            await admin.fence_producers(ids)
        return tuple(ids)

    async def _open_ids(self, admin: Admin) -> list[str]:
        listed = await admin.list_transactions(states=["Ongoing"])
        return sorted(
            {
                t.transactional_id
                for t in listed
                if partition_of(self.prefix, t.transactional_id) is not None
            }
        )

    # --- the decision record ------------------------------------------------------------------

    async def _latest(self, admin: Admin) -> tuple[int | None, Decision | None]:
        offsets = await admin.list_consumer_group_offsets(decision_group(self.prefix))
        found = latest_decision(self.prefix, offsets)
        return (None, None) if found is None else found

    async def _store(self, admin: Admin, topic: str, seq: int, decision: Decision) -> None:
        value = OffsetAndMetadata(seq, decision.encode(self.prefix))
        await admin.alter_consumer_group_offsets(
            decision_group(self.prefix), {TopicPartition(topic, 0): value}
        )

    def _lost_message(
        self, batch_id: int | None, committed: Sequence[int], lost: Sequence[int]
    ) -> str:
        what = "the batch job" if batch_id is None else f"micro-batch {batch_id}"
        then = (
            "restart the query: the micro-batch runs again and writes those partitions, the "
            "committed ones are skipped"
            if self.streaming
            else "their rows are not in Kafka; the other partitions are committed"
        )
        return (
            f"{what}: the transactions of Spark partitions {list(lost)[:20]} were aborted before "
            f"the driver committed them (kafka.transaction.timeout.ms passed?); "
            f"{len(committed)} partitions committed. {then}"
        )


def _partition(prefix: str, txn: PreparedTransaction) -> int:
    found = partition_of(prefix, txn.transactional_id)
    return -1 if found is None else found


async def _bounded(call: Callable[[A], Awaitable[T]], items: Iterable[A]) -> list[T]:
    """``call(item)`` for every item, at most ``_CONCURRENCY`` at a time; results in order.

    Each call starts only once it holds the gate: when one fails, those not started never are.
    """
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def run(item: A) -> T:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(run(i) for i in items)))
