"""The exactly-once protocol's names, records and decisions: no Spark, no broker."""

from __future__ import annotations

import dataclasses

import pytest

from aiokprod.errors import ConfigError
from aiokprod.spark.eos_records import (
    MAX_METADATA_BYTES,
    Decision,
    RunToken,
    TxnName,
    batch_committed,
    chunk_group,
    decision_group,
    latest_decision,
    marker,
    marker_group,
    next_sequence,
    parse_transactional_id,
    query_tag,
    run_register_id,
    transactional_id,
)
from aiokprod.spark.exactly_once import (
    BATCH_TRANSACTION_TIMEOUT_MS,
    STREAMING_TRANSACTION_TIMEOUT_MS,
    TaskAction,
    TaskResult,
    check_open,
    check_prefix,
    commit_margin_ms,
    decide_task,
    plan_commit,
    plan_recovery,
    transaction_options,
)
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

P = "orders-sink"
RUN = RunToken(4242, 7)


@dataclasses.dataclass(frozen=True)
class View:
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int = 60_000
    start_time_ms: int = 0


def txn(
    partition: int, pid: int = 1000, epoch: int = 3, run: RunToken | None = RUN
) -> PreparedTransaction:
    return PreparedTransaction(transactional_id(P, partition, 0, run), pid, epoch, 2)


# --- names --------------------------------------------------------------------------------


def test_names_of_a_run_and_its_attempts() -> None:
    assert run_register_id(P) == "orders-sink-run"
    assert RUN.tag == "r1092e7"
    assert transactional_id(P, 7, 0, RUN) == "orders-sink-r1092e7-7.0"  # a batch job's
    assert transactional_id(P, 7, 2, None) == "orders-sink-7.2"  # a streaming query's
    assert marker_group(P, "q-1", 7) == f"orders-sink-7.{query_tag('q-1')}.marker"
    assert marker_group(P, "q-2", 7) != marker_group(P, "q-1", 7)  # one group per query
    assert decision_group(P) == "orders-sink.commit"
    assert chunk_group(P, 123, 2) == "orders-sink.commit.123.2"
    assert RunToken.parse(str(RUN)) == RUN
    assert RunToken.parse("4242") is None


@pytest.mark.parametrize(
    ("txn_id", "expected"),
    [
        ("orders-sink-0.0", TxnName(None, 0, 0)),
        ("orders-sink-12.3", TxnName(None, 12, 3)),
        ("orders-sink-r1092e7-12.3", TxnName("r1092e7", 12, 3)),
        ("orders-sink-12", TxnName(None, 12, None)),  # format 1, before this version
        ("orders-sink", None),
        ("orders-sink-", None),
        ("orders-sink-run", None),  # the register
        ("orders-sink-01.0", None),  # never generated: not ours
        ("orders-sink-1.01", None),
        ("orders-sink-r1092e7-12", None),  # a run's ids always have an attempt
        ("orders-sink-3-1.0", None),  # partition 1 of prefix "orders-sink-3"
        ("orders-sink-\u0663.0", None),  # a non-ASCII digit
        ("other-3.0", None),
    ],
)
def test_only_this_prefixs_ids_are_recognised(txn_id: str, expected: TxnName | None) -> None:
    assert parse_transactional_id(P, txn_id) == expected


def test_a_longer_prefix_does_not_claim_the_shorter_ones_ids() -> None:
    assert parse_transactional_id("orders-sink-3", "orders-sink-3.0") is None
    assert parse_transactional_id("orders-sink-3", "orders-sink-3-1.0") == TxnName(None, 1, 0)


@pytest.mark.parametrize("bad", ["", "  ", " x", "x ", "a\nb", "x" * 250])
def test_bad_prefixes_are_refused_naming_the_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="transactionalIdPrefix"):
        check_prefix(bad)


def test_a_good_prefix_is_kept() -> None:
    assert check_prefix("team.orders_v2") == "team.orders_v2"


def test_the_transaction_timeout_is_sized_to_the_work_unless_set() -> None:
    assert transaction_options({}, streaming=True)["transaction_timeout_ms"] == 300_000
    assert STREAMING_TRANSACTION_TIMEOUT_MS < BATCH_TRANSACTION_TIMEOUT_MS == 900_000
    assert transaction_options({}, streaming=False)["transaction_timeout_ms"] == 900_000
    mine = transaction_options({"transaction_timeout_ms": 120_000, "linger_ms": 5}, True)
    assert mine == {"transaction_timeout_ms": 120_000, "linger_ms": 5}


def test_the_commit_margin_is_a_tenth_of_the_timeout_within_bounds() -> None:
    assert commit_margin_ms(300_000) == 30_000
    assert commit_margin_ms(900_000) == 60_000
    assert commit_margin_ms(10_000) == 5_000


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
    for batch, scope in ((None, RUN), (0, None), (123456, None)):
        ids = {
            p: dataclasses.replace(t, transactional_id=transactional_id(P, p, 0, scope))
            for p, t in txns.items()
        }
        for done in (False, True):
            decision = Decision(
                RUN, batch, ids, done, query=query_tag("q") if batch else "", partitions=9
            )
            if done:
                decision = decision.finished([3])
            texts = decision.encode()
            assert len(texts) == 1
            assert len(texts[0].encode()) <= MAX_METADATA_BYTES
            assert Decision.decode(P, texts[0]) == decision


def test_ten_thousand_partitions_are_spread_over_chunks_that_each_fit() -> None:
    txns = {p: txn(p, 8_000 + p, 1) for p in range(10_000)}
    decision = Decision(RUN, None, txns, partitions=10_000)
    header, *chunks = decision.encode()
    assert len(chunks) > 1
    assert Decision.chunks_of(header) == len(chunks)
    assert all(len(t.encode()) <= MAX_METADATA_BYTES for t in [header, *chunks])
    assert Decision.decode(P, header, chunks) == decision
    # a chunk missing, swapped or from another decision: not a decision
    assert Decision.decode(P, header, chunks[:-1]) is None
    assert Decision.decode(P, header, [chunks[1], chunks[0], *chunks[2:]]) is None
    other = Decision(RUN, None, {**txns, 0: txn(0, 1, 1)}).encode()
    assert Decision.decode(P, header, [other[1], *chunks[1:]]) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "aiokprod-spark/1 run=q batch=- state=commit tv=2 n=0 txns=",
        "aiokprod-spark/2 run=1.2 batch=- state=commit tv=2 n=1 lost=0:- q=- parts=0 "
        "crc=00000000 chunks=0 txns=AAAA",
    ],
)
def test_foreign_broken_or_older_metadata_is_not_a_decision(text: str) -> None:
    assert Decision.decode(P, text) is None
    assert Decision.chunks_of(text) is None or text.endswith("AAAA")


def test_the_newest_decision_is_the_highest_sequence() -> None:
    older = Decision(RUN, 1, {0: txn(0, run=None)}).encode()[0]
    newer = Decision(RUN, 2, {0: txn(0, run=None)}).encode()[0]
    offsets = {
        TopicPartition("a", 0): OffsetAndMetadata(100, older),
        TopicPartition("b", 0): OffsetAndMetadata(200, newer),
        TopicPartition("c", 0): OffsetAndMetadata(300, "not a decision"),
    }
    assert latest_decision(offsets) == (200, TopicPartition("b", 0), newer)
    assert latest_decision({}) is None


def test_sequences_always_increase() -> None:
    assert next_sequence(1000, None) == 1000
    assert next_sequence(1000, 999) == 1000
    assert next_sequence(1000, 1000) == 1001
    assert next_sequence(1000, 5000) == 5001  # the clock went back


# --- commit -------------------------------------------------------------------------------


def test_the_commit_plan_commits_the_written_partitions_only() -> None:
    plan = plan_commit(
        [
            TaskResult(0, TaskAction.WRITE, txn(0), "b", RUN),
            TaskResult(1, TaskAction.SKIP, None, "a", RUN),
            TaskResult(2, TaskAction.NOTHING),
            TaskResult(3, TaskAction.WRITE, txn(3), "a", RUN),
        ]
    )
    assert dict(plan.transactions) == {0: txn(0), 3: txn(3)}
    assert plan.skipped == (1,)
    assert plan.topic == "a"
    assert dict(plan.marker_topics) == {0: "b", 3: "a"}
    assert plan.run == RUN


def test_nothing_written_means_nothing_to_commit() -> None:
    plan = plan_commit([TaskResult(0, TaskAction.NOTHING), TaskResult(1, TaskAction.NOTHING)])
    assert plan.transactions == {}
    assert plan.run is None


@pytest.mark.parametrize(
    "results",
    [
        [None],
        [TaskResult(0, TaskAction.NOTHING), TaskResult(0, TaskAction.NOTHING)],
        [TaskResult(0, TaskAction.WRITE, None, "t", RUN)],
        [
            TaskResult(0, TaskAction.WRITE, txn(0), "t", RUN),
            TaskResult(1, TaskAction.WRITE, txn(1), "t", RunToken(4242, 8)),
        ],
    ],
)
def test_inconsistent_messages_are_refused(results: list[TaskResult | None]) -> None:
    with pytest.raises(ConfigError):
        plan_commit(results)


def test_tasks_of_another_run_than_the_drivers_are_refused() -> None:
    with pytest.raises(ConfigError, match="different runs"):
        plan_commit([TaskResult(0, TaskAction.WRITE, txn(0), "t", RUN)], RunToken(1, 1))


def test_a_transaction_is_safe_to_commit_only_open_unfenced_and_with_its_margin_left() -> None:
    txns = {p: txn(p, 1000 + p, 3) for p in range(6)}
    views = {
        txns[0].transactional_id: View("Ongoing", 1000, 3, 60_000, 50_000),  # 45 s left
        txns[1].transactional_id: View("CompleteAbort", 1001, 4),  # timed out
        txns[2].transactional_id: View("Ongoing", 1002, 5, 60_000, 50_000),  # fenced, reopened
        txns[4].transactional_id: View("Ongoing", 1004, 3, 60_000, 10_000),  # 5 s left
        txns[5].transactional_id: View("Ongoing", 1005, 3, 60_000, 50_000),
    }
    gone = check_open(txns, views, now_ms=65_000, margin_ms=10_000)
    assert gone == [
        (1, "CompleteAbort"),
        (2, "fenced"),
        (3, "unknown to the coordinator"),
        (4, "5000 ms of its timeout left"),
    ]
    assert check_open({0: txns[0]}, views, now_ms=109_000, margin_ms=10_000) == [
        (0, "1000 ms of its timeout left")
    ]


# --- recovery -----------------------------------------------------------------------------


def test_recovery_completes_the_decided_transactions_still_open() -> None:
    decision = Decision(RUN, None, {0: txn(0, 10, 4), 1: txn(1, 11, 4), 2: txn(2, 12, 4)})
    views = {
        txn(0).transactional_id: View("Ongoing", 10, 4),  # open: commit it
        txn(1).transactional_id: View("CompleteCommit", 11, 5),  # committed (TV2 bumped)
        txn(2).transactional_id: View("CompleteAbort", 12, 5),  # aborted by its timeout
    }
    plan = plan_recovery(P, decision, views)
    assert plan.complete == (txn(0, 10, 4),)
    assert plan.committed == (1,)
    assert plan.lost == (2,)


def test_an_open_transaction_with_another_epoch_is_not_the_decided_one() -> None:
    decision = Decision(RUN, None, {0: txn(0, 10, 4)})
    plan = plan_recovery(P, decision, {txn(0).transactional_id: View("Ongoing", 10, 6)})
    assert plan.complete == ()
    assert plan.lost == (0,)


def test_an_unknown_id_is_lost() -> None:
    assert plan_recovery(P, Decision(RUN, None, {0: txn(0)}), {}).lost == (0,)


def test_an_epoch_overflow_commits_under_a_new_producer_id() -> None:
    decision = Decision(RUN, None, {0: txn(0, 10, 32766)})
    plan = plan_recovery(P, decision, {txn(0).transactional_id: View("CompleteCommit", 99, 0)})
    assert plan.committed == (0,)


def test_a_done_decision_needs_nothing() -> None:
    decision = Decision(RUN, None, {0: txn(0)}, done=True)
    plan = plan_recovery(P, decision, {txn(0).transactional_id: View("Ongoing", 1000, 3)})
    assert plan == plan_recovery(P, None, {})


def test_recovery_fences_the_prefixs_other_open_transactions() -> None:
    decision = Decision(RUN, None, {0: txn(0, 10, 4)})
    views = {txn(0).transactional_id: View("Ongoing", 10, 4)}
    open_ids = [
        txn(0).transactional_id,  # decided: completed, not fenced
        transactional_id(P, 11, 0, None),
        transactional_id(P, 2, 1, RunToken(1, 1)),
        "orders-sink-run",  # the register: never
        "other-sink-1.0",
    ]
    plan = plan_recovery(P, decision, views, open_ids)
    assert plan.fence == ("orders-sink-11.0", "orders-sink-r1e1-2.1")
