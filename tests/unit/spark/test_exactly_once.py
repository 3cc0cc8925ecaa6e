"""The exactly-once protocol's decisions (aiokprod.spark.exactly_once): no Spark, no broker."""

from __future__ import annotations

import dataclasses

import pytest

from aiokprod.errors import ConfigError
from aiokprod.spark.eos_records import (
    MAX_METADATA_BYTES,
    Decision,
    DecisionTooLargeError,
    batch_committed,
    decision_group,
    latest_decision,
    marker,
    marker_group,
    next_sequence,
    partition_of,
    transactional_id,
)
from aiokprod.spark.exactly_once import (
    TaskAction,
    TaskResult,
    check_prefix,
    decide_task,
    plan_commit,
    plan_recovery,
)
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

P = "orders-sink"


@dataclasses.dataclass(frozen=True)
class View:
    state: str
    producer_id: int
    producer_epoch: int


def txn(partition: int, pid: int = 1000, epoch: int = 3, protocol: int = 2) -> PreparedTransaction:
    return PreparedTransaction(transactional_id(P, partition), pid, epoch, protocol)


# --- names --------------------------------------------------------------------------------


def test_names_of_a_partition() -> None:
    assert transactional_id(P, 7) == "orders-sink-7"
    assert marker_group(P, 7) == "orders-sink-7.marker"
    assert decision_group(P) == "orders-sink.commit"


@pytest.mark.parametrize(
    ("txn_id", "expected"),
    [
        ("orders-sink-0", 0),
        ("orders-sink-12", 12),
        ("orders-sink", None),
        ("orders-sink-", None),
        ("orders-sink-01", None),  # never generated: not ours
        ("orders-sink-3-1", None),  # partition 1 of prefix "orders-sink-3"
        ("orders-sink-x", None),
        ("orders-sink-\u0663", None),  # a non-ASCII digit
        ("other-3", None),
    ],
)
def test_partition_of_recognises_only_this_prefix(txn_id: str, expected: int | None) -> None:
    assert partition_of(P, txn_id) == expected


def test_a_longer_prefix_does_not_claim_the_shorter_ones_ids() -> None:
    assert partition_of("orders-sink-3", "orders-sink-3") is None
    assert partition_of("orders-sink-3", "orders-sink-3-1") == 1


@pytest.mark.parametrize("bad", ["", "  ", " x", "x ", "a\nb", "x" * 250])
def test_bad_prefixes_are_refused_naming_the_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="transactionalIdPrefix"):
        check_prefix(bad)


def test_a_good_prefix_is_kept() -> None:
    assert check_prefix("team.orders_v2") == "team.orders_v2"


# --- markers ------------------------------------------------------------------------------


def test_a_marker_says_which_batch_of_which_query_committed() -> None:
    offsets = {TopicPartition("t", 0): marker("q1", 5)}
    assert batch_committed(offsets, "q1", 5)
    assert not batch_committed(offsets, "q1", 6)
    assert not batch_committed(offsets, "q2", 5)  # a new checkpoint reusing the prefix
    assert not batch_committed({}, "q1", 5)


def test_any_entry_of_the_marker_group_counts() -> None:
    offsets = {TopicPartition("a", 0): marker("q", 3), TopicPartition("b", 0): marker("q", 4)}
    assert batch_committed(offsets, "q", 3)
    assert batch_committed(offsets, "q", 4)


def test_offsets_of_someone_else_never_count() -> None:
    offsets = {TopicPartition("t", 0): OffsetAndMetadata(5, "")}
    assert not batch_committed(offsets, "q", 5)


def test_what_a_task_does() -> None:
    done = {TopicPartition("t", 0): marker("q", 9)}
    assert decide_task(0, done, "q", 9) is TaskAction.NOTHING
    assert decide_task(10, done, "q", 9) is TaskAction.SKIP  # a replay of a committed batch
    assert decide_task(10, done, "q", 10) is TaskAction.WRITE
    assert decide_task(10, {}, "q", 9) is TaskAction.WRITE
    assert decide_task(10, None, None, None) is TaskAction.WRITE  # a batch job: no markers


# --- decisions ----------------------------------------------------------------------------


def test_a_decision_round_trips_through_offset_metadata() -> None:
    txns = {0: txn(0, 5_000_000_123, 0), 3: txn(3, 5_000_000_001, 32766), 4: txn(4, 17, 2)}
    for batch in (None, 0, 123456):
        for done in (False, True):
            decision = Decision("q-1", batch, txns, done)
            text = decision.encode(P)
            assert len(text.encode()) <= MAX_METADATA_BYTES
            assert Decision.parse(text, P) == decision


def test_the_decision_keeps_the_transaction_protocol() -> None:
    decision = Decision("r", None, {1: txn(1, protocol=1)})
    assert Decision.parse(decision.encode(P), P) == decision


def test_two_hundred_partitions_fit_comfortably() -> None:
    txns = {p: txn(p, 4_000_000 + 3 * p, p % 7) for p in range(200)}
    text = Decision("0f" * 16, 10**9, txns).encode(P)
    assert len(text.encode()) < MAX_METADATA_BYTES // 2


def test_a_decision_too_large_is_refused_before_anything_is_committed() -> None:
    txns = {p: txn(p, (p * 7919) << 30, 30000) for p in range(2000)}
    with pytest.raises(DecisionTooLargeError, match="fewer Spark partitions"):
        Decision("r", 1, txns).encode(P)


@pytest.mark.parametrize(
    "text",
    ["", "hello", "aiokprod-spark/1 run=x batch=1 state=maybe tv=2 n=0 txns=", "aiokprod-spark/1"],
)
def test_foreign_or_broken_metadata_is_not_a_decision(text: str) -> None:
    assert Decision.parse(text, P) is None


def test_a_decision_whose_count_disagrees_is_not_trusted() -> None:
    text = Decision("r", 1, {0: txn(0), 1: txn(1)}).encode(P).replace("n=2", "n=3")
    assert Decision.parse(text, P) is None


def test_the_newest_decision_is_the_highest_sequence() -> None:
    old = Decision("r", 1, {0: txn(0)}, done=True)
    new = Decision("r", 2, {0: txn(0, epoch=5)})
    offsets = {
        TopicPartition("a", 0): OffsetAndMetadata(2_000, new.encode(P)),
        TopicPartition("b", 0): OffsetAndMetadata(1_000, old.encode(P)),
        TopicPartition("c", 0): OffsetAndMetadata(9_000, "not ours"),
    }
    assert latest_decision(P, offsets) == (2_000, new)
    assert latest_decision(P, {}) is None


def test_sequences_always_increase() -> None:
    assert next_sequence(1_000, None) == 1_000
    assert next_sequence(1_000, 500) == 1_000
    assert next_sequence(1_000, 1_000) == 1_001  # the same millisecond
    assert next_sequence(1_000, 5_000) == 5_001  # the clock went back


# --- the driver's commit ------------------------------------------------------------------


def test_the_commit_plan_commits_the_written_partitions_only() -> None:
    plan = plan_commit(
        [
            TaskResult(0, TaskAction.WRITE, txn(0), "b-topic"),
            TaskResult(1, TaskAction.NOTHING),
            TaskResult(2, TaskAction.SKIP, None, "a-topic"),
            TaskResult(3, TaskAction.WRITE, txn(3), "c-topic"),
        ]
    )
    assert plan.transactions == {0: txn(0), 3: txn(3)}
    assert plan.skipped == (2,)
    assert plan.topic == "b-topic"  # of a written partition: the decision is stored there


def test_nothing_written_means_nothing_to_commit() -> None:
    plan = plan_commit([TaskResult(0, TaskAction.NOTHING), TaskResult(1, TaskAction.SKIP)])
    assert plan.transactions == {}
    assert plan.topic is None


@pytest.mark.parametrize(
    "results",
    [
        [TaskResult(0, TaskAction.WRITE, txn(0), "t"), None],
        [TaskResult(0, TaskAction.WRITE, txn(0), "t"), TaskResult(0, TaskAction.NOTHING)],
        [TaskResult(0, TaskAction.WRITE, None, "t")],
    ],
)
def test_inconsistent_messages_are_refused(results: list[TaskResult | None]) -> None:
    with pytest.raises(ConfigError, match="commit"):
        plan_commit(results)


# --- recovery -----------------------------------------------------------------------------


def test_recovery_completes_the_decided_transactions_still_open() -> None:
    decision = Decision("r", None, {0: txn(0, 10, 4), 1: txn(1, 11, 4), 2: txn(2, 12, 4)})
    views = {
        transactional_id(P, 0): View("Ongoing", 10, 4),  # open: commit it
        transactional_id(P, 1): View("CompleteCommit", 11, 5),  # committed (TV2 bumped)
        transactional_id(P, 2): View("CompleteAbort", 12, 5),  # aborted by its timeout
    }
    plan = plan_recovery(P, decision, views)
    assert plan.complete == (txn(0, 10, 4),)
    assert plan.committed == (1,)
    assert plan.lost == (2,)
    assert plan.fence == ()


def test_an_open_transaction_with_another_epoch_is_not_the_decided_one() -> None:
    # A zombie attempt fenced the decided transaction and opened its own: committing it would
    # publish the zombie's rows, which may be a part of the partition.
    decision = Decision("r", None, {0: txn(0, 10, 4)})
    plan = plan_recovery(P, decision, {transactional_id(P, 0): View("Ongoing", 10, 6)})
    assert plan.complete == ()
    assert plan.lost == (0,)


def test_an_unknown_id_is_lost() -> None:
    plan = plan_recovery(P, Decision("r", None, {5: txn(5)}), {})
    assert plan.lost == (5,)


def test_protocol_1_commits_keep_the_epoch() -> None:
    decision = Decision("r", None, {0: txn(0, 10, 4, protocol=1)})
    done = plan_recovery(P, decision, {transactional_id(P, 0): View("CompleteCommit", 10, 4)})
    assert done.committed == (0,)
    later = plan_recovery(P, decision, {transactional_id(P, 0): View("CompleteCommit", 10, 9)})
    assert later.lost == (0,)


def test_an_epoch_overflow_commits_under_a_new_producer_id() -> None:
    decision = Decision("r", None, {0: txn(0, 10, 32766)})
    plan = plan_recovery(P, decision, {transactional_id(P, 0): View("CompleteCommit", 99, 0)})
    assert plan.committed == (0,)


def test_a_done_decision_needs_nothing() -> None:
    decision = Decision("r", None, {0: txn(0)}, done=True)
    plan = plan_recovery(P, decision, {transactional_id(P, 0): View("Ongoing", 1000, 3)})
    assert plan.complete == ()
    assert plan.lost == ()
    assert plan.committed == ()


def test_recovery_fences_the_prefixs_other_open_transactions() -> None:
    decision = Decision("r", None, {0: txn(0, 10, 4)})
    views = {transactional_id(P, 0): View("Ongoing", 10, 4)}
    open_ids = [
        transactional_id(P, 0),  # decided: completed, not fenced
        transactional_id(P, 11),
        transactional_id(P, 2),
        "orders-sink-3-1",  # another sink's (prefix orders-sink-3)
        "someone-else",
    ]
    plan = plan_recovery(P, decision, views, open_ids)
    assert plan.complete == (txn(0, 10, 4),)
    assert plan.fence == (transactional_id(P, 2), transactional_id(P, 11))


def test_without_a_decision_recovery_only_fences() -> None:
    plan = plan_recovery(P, None, {}, [transactional_id(P, 1)])
    assert plan.fence == (transactional_id(P, 1),)
    assert plan.complete == ()
    assert plan.lost == ()
