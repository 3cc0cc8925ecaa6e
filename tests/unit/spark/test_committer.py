"""The driver's committer, branch by branch, against the model of Kafka's coordinator.

Every Kafka call of the committer is answered at once by ``aiokprod.testing.eos_model``'s
coordinator (Kafka 4.4's transaction-protocol-2 rules), so each test sets up exactly the
state a branch needs: transactions prepared, fenced, timed out, a register bumped by
someone else. The real broker runs the same code in tests/integration/test_spark_exactly_once.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from aiokprod.errors import ConfigError
from aiokprod.spark.committer import CommitReport, Committer, ExactlyOnceCommitError
from aiokprod.spark.decision_store import REGISTER_CLOSED_MS, REGISTER_OPEN_MS, DecisionStore
from aiokprod.spark.eos_records import (
    Decision,
    RunToken,
    marker,
    marker_group,
    query_tag,
    run_register_id,
    transactional_id,
)
from aiokprod.spark.exactly_once import TaskAction, TaskResult
from aiokprod.testing.eos_model.kafka import ONGOING, TICK_MS, ModelKafka
from aiokprod.testing.eos_model.scheduler import ModelAdmin, Scheduler
from aiokprod.types import PreparedTransaction, TopicPartition

P = "sink"
T = "t"
TIMEOUT_TICKS = 60  # the model's transactions time out after 60 s


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.scheduler.close()


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("aiokprod")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


class World:
    """The model's Kafka and a way to run the committer against it."""

    def __init__(self) -> None:
        self.kafka = ModelKafka()
        self.scheduler = Scheduler(self.kafka)
        self._actors = 0

    def admin(self) -> ModelAdmin:
        self._actors += 1
        return ModelAdmin(self.scheduler, f"driver{self._actors}", TIMEOUT_TICKS)

    def run(self, make: Any) -> Any:
        admin = self.admin()
        return self.scheduler.run_to_end(admin._actor, make(admin))

    def committer(self, streaming: bool = False, **extra: Any) -> Committer:
        return Committer(
            "model:9092",
            {"transaction_timeout_ms": TIMEOUT_TICKS * TICK_MS},
            P,
            streaming,
            clock=lambda: self.kafka.tick * TICK_MS,
            margin_ms=10 * TICK_MS,
            **{"in_use_wait_ms": 0, **extra},
        )

    def open_run(self, committer: Committer) -> RunToken:
        result: RunToken = self.run(committer.open_run_with)
        return result

    def prepare(
        self,
        run: RunToken,
        partition: int,
        attempt: int = 0,
        streaming: bool = False,
        query: str = "q",
        batch: int = 0,
    ) -> TaskResult:
        """What a task does: InitProducerId, a record, (a marker), left open."""
        tid = transactional_id(P, partition, attempt, None if streaming else run)
        pid, epoch = self.kafka.init_producer_id(tid, TIMEOUT_TICKS)
        label = ("batch" if streaming else "job", batch, partition)
        self.kafka.produce(tid, pid, epoch, label, f"task{partition}")
        if streaming:
            group = marker_group(P, query, partition)
            self.kafka.txn_offset_commit(
                tid, pid, epoch, group, TopicPartition(T, 0), marker(query, batch), "task"
            )
        return TaskResult(
            partition, TaskAction.WRITE, PreparedTransaction(tid, pid, epoch, 2), T, run
        )

    def visible(self) -> list[tuple[object, ...]]:
        return sorted(self.kafka.visible(), key=repr)

    def ongoing(self) -> list[str]:
        return [t for t, s in sorted(self.kafka.ids.items()) if s.state == ONGOING]

    def register_timeout(self) -> int:
        view = self.kafka.describe([run_register_id(P)])[run_register_id(P)]
        return view.timeout_ms


# --- planning -----------------------------------------------------------------------------


def test_planning_opens_a_run_and_the_next_planning_closes_it(w: World) -> None:
    c = w.committer()
    first = w.open_run(c)
    assert w.register_timeout() == REGISTER_OPEN_MS
    second = w.open_run(c)
    assert second != first
    assert second.producer_id == first.producer_id
    assert second.epoch > first.epoch


def test_planning_aborts_what_an_earlier_run_left_open(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    w.prepare(run, 0)
    w.prepare(run, 1)
    assert len(w.ongoing()) == 2
    w.open_run(c)  # the next job: the earlier one's driver died before committing
    assert w.ongoing() == []
    assert w.visible() == []


def test_planning_completes_a_decision_an_earlier_driver_left_undone(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(3)]
    txns = {r.partition: r.transaction for r in results if r.transaction is not None}
    store_admin = w.admin()
    store = DecisionStore(store_admin, P)
    w.scheduler.run_to_end(
        store_admin._actor, store.store(TopicPartition(T, 0), 1, Decision(run, None, txns))
    )  # the driver decided and died before any EndTxn
    w.open_run(c)
    assert w.visible() == [("job", 0, 0), ("job", 0, 1), ("job", 0, 2)]
    assert w.ongoing() == []


def test_a_batch_decision_that_lost_partitions_is_reported_once(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    txns = {r.partition: r.transaction for r in results if r.transaction is not None}
    store_admin = w.admin()
    w.scheduler.run_to_end(
        store_admin._actor,
        DecisionStore(store_admin, P).store(TopicPartition(T, 0), 1, Decision(run, None, txns)),
    )
    w.kafka.time_out(txns[1].transactional_id)  # the driver stayed away past the timeout
    with pytest.raises(ExactlyOnceCommitError, match="earlier batch job") as failure:
        w.open_run(c)
    assert failure.value.lost == (1,)
    assert failure.value.committed == (0,)
    assert w.visible() == [("job", 0, 0)]
    w.open_run(c)  # reported: the next one goes on


# --- commit -------------------------------------------------------------------------------


def test_a_commit_closes_the_run_commits_everything_and_aborts_the_stragglers(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(3)]
    loser = w.prepare(run, 1, attempt=1)  # a speculative copy that lost
    report: CommitReport = w.run(lambda a: c.commit_with(a, run, None, results))
    assert report.committed == (0, 1, 2)
    assert report.aborted == (loser.transaction.transactional_id,)  # type: ignore[union-attr]
    assert w.visible() == [("job", 0, 0), ("job", 0, 1), ("job", 0, 2)]
    assert w.ongoing() == []
    assert w.register_timeout() == REGISTER_CLOSED_MS


def test_a_commit_that_finds_a_transaction_gone_commits_nothing(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(3)]
    w.kafka.time_out(results[2].transaction.transactional_id)  # type: ignore[union-attr]
    with pytest.raises(ExactlyOnceCommitError, match="nothing was committed") as failure:
        w.run(lambda a: c.commit_with(a, run, None, results))
    assert failure.value.lost == (2,)
    assert w.visible() == []
    assert w.ongoing() == []


def test_a_commit_too_close_to_the_timeout_commits_nothing(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    w.kafka.tick = TIMEOUT_TICKS - 5  # 5 s left, the margin is 10 s
    with pytest.raises(ExactlyOnceCommitError, match="too close") as failure:
        w.run(lambda a: c.commit_with(a, run, None, results))
    assert failure.value.lost == (0, 1)
    assert w.visible() == []


def test_a_commit_whose_run_was_taken_over_commits_nothing(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    w.kafka.init_producer_id(run_register_id(P), -REGISTER_OPEN_MS)  # another job planned
    with pytest.raises(ExactlyOnceCommitError, match="taken over"):
        w.run(lambda a: c.commit_with(a, run, None, results))
    assert w.visible() == []
    assert w.ongoing() == []


def test_a_decided_transaction_lost_before_its_endtxn_is_reported(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    lost = results[1].transaction.transactional_id  # type: ignore[union-attr]
    original = w.kafka.end_txn

    def time_out_first(tid: str, pid: int, epoch: int, commit: bool) -> None:
        if tid == lost and w.kafka.ids[tid].state == ONGOING:
            w.kafka.time_out(tid)  # the driver stalled past its margin after deciding
        original(tid, pid, epoch, commit)

    w.kafka.end_txn = time_out_first  # type: ignore[method-assign]
    with pytest.raises(ExactlyOnceCommitError, match="aborted before") as failure:
        w.run(lambda a: c.commit_with(a, run, None, results))
    assert failure.value.lost == (1,)
    assert failure.value.committed == (0,)
    # Spark commits again (or aborts): the same loss, said again; nothing else changes
    with pytest.raises(ExactlyOnceCommitError) as again:
        w.run(lambda a: c.commit_with(a, run, None, results))
    assert again.value.lost == (1,)
    with pytest.raises(ExactlyOnceCommitError):
        w.run(lambda a: c.abort_with(a, run, None, results))
    assert w.visible() == [("job", 0, 0)]


def test_commit_again_after_success_changes_nothing(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    w.run(lambda a: c.commit_with(a, run, None, results))
    report = w.run(lambda a: c.commit_with(a, run, None, results))
    assert report.committed == (0, 1)
    assert w.visible() == [("job", 0, 0), ("job", 0, 1)]


def test_a_commit_with_nothing_written_still_closes_the_run(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    straggler = w.prepare(run, 0, attempt=1)
    report = w.run(lambda a: c.commit_with(a, run, None, [TaskResult(0, TaskAction.NOTHING)]))
    assert report.aborted == (straggler.transaction.transactional_id,)  # type: ignore[union-attr]
    assert w.register_timeout() == REGISTER_CLOSED_MS


def test_ten_thousand_partitions_are_decided_and_recovered(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(10_000)]
    original = w.kafka.end_txn
    calls = 0

    def die_after_100(tid: str, pid: int, epoch: int, commit: bool) -> None:
        nonlocal calls
        calls += 1
        if calls > 100:
            raise SystemExit("the driver died")
        original(tid, pid, epoch, commit)

    w.kafka.end_txn = die_after_100  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        w.run(lambda a: c.commit_with(a, run, None, results))
    w.kafka.end_txn = original  # type: ignore[method-assign]
    assert len(w.visible()) == 100
    w.open_run(c)  # the next job reads the decision from its chunks and completes it
    assert len(w.visible()) == 10_000
    assert w.ongoing() == []


# --- streaming ------------------------------------------------------------------------------


def test_a_replay_whose_decided_partition_was_lost_is_committed(w: World) -> None:
    """Issue 41's (1): micro-batch 0's decision lost partition 1 (its transaction timed out
    while the driver was away); the restarted query replays it, partition 0 skips (marker),
    partition 1 is written again - and committed."""
    c = w.committer(streaming=True)
    run = w.open_run(c)
    results = [w.prepare(run, p, streaming=True) for p in range(2)]
    original = w.kafka.end_txn

    def lose_partition_1(tid: str, pid: int, epoch: int, commit: bool) -> None:
        if tid == results[1].transaction.transactional_id:  # type: ignore[union-attr]
            w.kafka.time_out(tid)
        original(tid, pid, epoch, commit)

    w.kafka.end_txn = lose_partition_1  # type: ignore[method-assign]
    with pytest.raises(ExactlyOnceCommitError, match="restart the query"):
        w.run(lambda a: c.commit_with(a, None, 0, results, "q"))
    w.kafka.end_txn = original  # type: ignore[method-assign]
    replay = w.open_run(c)
    skip = TaskResult(0, TaskAction.SKIP, None, T, replay)
    again = w.prepare(replay, 1, streaming=True)
    report = w.run(lambda a: c.commit_with(a, None, 0, [skip, again], "q"))
    assert report.committed == (1,)
    assert report.skipped == (0,)
    assert w.visible() == [("batch", 0, 0), ("batch", 0, 1)]


def test_a_replay_with_another_partition_count_is_refused(w: World) -> None:
    c = w.committer(streaming=True)
    run = w.open_run(c)
    w.run(
        lambda a: c.commit_with(
            a, None, 4, [w.prepare(run, p, streaming=True, batch=4) for p in range(2)], "q"
        )
    )
    replay = w.open_run(c)
    results = [w.prepare(replay, p, streaming=True, batch=4) for p in range(3)]
    with pytest.raises(
        ConfigError, match="run again with 3 Spark partitions; it was committed with 2"
    ):
        w.run(lambda a: c.commit_with(a, None, 4, results, "q"))
    assert w.ongoing() == []
    # another query (a new checkpoint) on the prefix, same batch id: no conflict
    other = w.open_run(c)
    fresh = [w.prepare(other, p, streaming=True, query="q2", batch=4) for p in range(3)]
    w.run(lambda a: c.commit_with(a, None, 4, fresh, "q2"))
    assert query_tag("q2") != query_tag("q")


def test_a_streaming_abort_without_messages_closes_whatever_run_is_open(w: World) -> None:
    c = w.committer(streaming=True)
    run = w.open_run(c)
    w.prepare(run, 0, streaming=True)
    w.run(lambda a: c.abort_with(a, None, 0, [None, None]))  # no task succeeded
    assert w.register_timeout() == REGISTER_CLOSED_MS
    assert w.ongoing() == []


# --- abort --------------------------------------------------------------------------------


def test_an_abort_ends_the_tasks_transactions_and_the_stragglers(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    done = w.prepare(run, 0)
    w.prepare(run, 1)  # a task still writing when Spark gave up on the job
    report = w.run(lambda a: c.abort_with(a, run, None, [done, None]))
    assert len(report.aborted) == 2
    assert w.ongoing() == []
    assert w.visible() == []


def test_an_abort_after_another_run_took_over_leaves_that_run_alone(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    mine = w.prepare(run, 0)
    theirs_run = w.open_run(c)  # another job planned (and closed ours)
    theirs = w.prepare(theirs_run, 0)
    w.run(lambda a: c.abort_with(a, run, None, [mine]))
    assert w.ongoing() == [theirs.transaction.transactional_id]  # type: ignore[union-attr]


def test_an_abort_after_a_decided_commit_rolls_it_forward(w: World) -> None:
    c = w.committer()
    run = w.open_run(c)
    results = [w.prepare(run, p) for p in range(2)]
    original = w.kafka.end_txn
    calls = 0

    def fail_second(tid: str, pid: int, epoch: int, commit: bool) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            from aiokprod.errors import KafkaTimeoutError

            raise KafkaTimeoutError("EndTxn did not complete within max_block_ms")
        original(tid, pid, epoch, commit)

    w.kafka.end_txn = fail_second  # type: ignore[method-assign]
    with pytest.raises(Exception, match="max_block_ms"):
        w.run(lambda a: c.commit_with(a, run, None, results))
    w.kafka.end_txn = original  # type: ignore[method-assign]
    report = w.run(lambda a: c.abort_with(a, run, None, results))
    assert report.committed == (0, 1)
    assert w.visible() == [("job", 0, 0), ("job", 0, 1)]


# --- a prefix in use ------------------------------------------------------------------------


def test_planning_fails_fast_while_another_run_is_writing(w: World) -> None:
    busy = w.committer()
    run = w.open_run(busy)
    w.prepare(run, 0)
    second = w.committer(in_use_wait_ms=1_000)
    # the other job's next task begins its transaction while planning watches
    w.scheduler.loop.call_later(0.5, lambda: w.prepare(run, 1))
    with pytest.raises(ConfigError, match="transactionalIdPrefix 'sink' is in use"):
        w.open_run(second)
    assert len(w.ongoing()) == 2  # nothing of the other job was touched


def test_planning_takes_over_a_run_whose_driver_died(w: World) -> None:
    run = w.open_run(w.committer())
    w.prepare(run, 0)  # then the driver died: nothing begins any more
    w.open_run(w.committer(in_use_wait_ms=1_000))
    assert w.ongoing() == []
