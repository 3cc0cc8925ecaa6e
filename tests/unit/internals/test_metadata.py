"""ClusterSnapshot (built from Metadata responses, KIP-951 hints) and MetadataState timing."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aiokprod.errors import (
    LeaderNotAvailableError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokprod.internals.metadata import (
    NO_LEADER,
    BrokerNode,
    ClusterSnapshot,
    MetadataState,
    PartitionInfo,
)
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
)
from aiokprod.types import TopicPartition

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
TOPIC_AUTHORIZATION_FAILED = 29


def broker(node_id: int) -> MetadataBroker:
    return MetadataBroker(node_id=node_id, host=f"h{node_id}", port=9000 + node_id, rack="r1")


def partition(index: int, leader: int, epoch: int = 0) -> MetadataPartition:
    return MetadataPartition(
        error_code=0,
        partition_index=index,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=[1, 2],
        isr_nodes=[leader] if leader >= 0 else [],
    )


def topic(
    name: str, leaders: Sequence[int] = (), error_code: int = 0, internal: bool = False
) -> MetadataTopic:
    return MetadataTopic(
        error_code=error_code,
        name=name,
        is_internal=internal,
        partitions=[partition(i, leader) for i, leader in enumerate(leaders)],
    )


def response(topics: Sequence[MetadataTopic], brokers: Sequence[int] = (1, 2)) -> MetadataResponse:
    return MetadataResponse(
        brokers=[broker(b) for b in brokers],
        cluster_id="cluster-a",
        controller_id=brokers[0] if brokers else -1,
        topics=list(topics),
    )


# --- building snapshots ---------------------------------------------------------------------


def test_snapshot_from_response() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("t", [1, 2, 1])]), ["t"])
    assert snap.cluster_id == "cluster-a"
    assert snap.controller_id == 1
    assert snap.brokers == {
        1: BrokerNode(1, "h1", 9001, "r1"),
        2: BrokerNode(2, "h2", 9002, "r1"),
    }
    info = snap.topics["t"]
    assert info.num_partitions == 3
    assert info.available == (0, 1, 2)
    assert info.partitions[1] == PartitionInfo(1, 2, 0)
    assert info.leaders == (1, 2, 1)
    assert snap.leader_for(TopicPartition("t", 0)) == 1
    assert snap.leader_for(TopicPartition("t", 1)) == 2
    assert snap.leader_for(TopicPartition("t", 9)) == NO_LEADER
    assert snap.leader_for(TopicPartition("other", 0)) == NO_LEADER
    assert snap.partition_info(TopicPartition("t", 2)) == info.partitions[2]
    assert snap.partition_info(TopicPartition("t", 3)) is None
    assert snap.partition_info(TopicPartition("nope", 0)) is None
    assert snap.topic_error("t") is None


def test_partitions_are_sorted_by_index() -> None:
    unordered = MetadataTopic(
        error_code=0, name="t", partitions=[partition(2, 1), partition(0, 2), partition(1, 1)]
    )
    snap = ClusterSnapshot().merged_with(response([unordered]), ["t"])
    assert [p.partition for p in snap.topics["t"].partitions] == [0, 1, 2]
    assert snap.leader_for(TopicPartition("t", 0)) == 2


def test_leaderless_partitions_are_not_available() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("t", [1, -1, 2])]), ["t"])
    info = snap.topics["t"]
    assert info.num_partitions == 3
    assert info.available == (0, 2)
    assert snap.leader_for(TopicPartition("t", 1)) == NO_LEADER
    assert info.leaders == (1, NO_LEADER, 2)


def test_leader_not_among_brokers_counts_as_leaderless() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("t", [1, 7])]), ["t"])
    assert snap.topics["t"].available == (0,)
    assert snap.leader_for(TopicPartition("t", 1)) == NO_LEADER


def test_topic_error_drops_the_topic_and_keeps_the_code() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("t", [1])]), ["t"])
    snap = snap.merged_with(response([topic("t", error_code=TOPIC_AUTHORIZATION_FAILED)]), ["t"])
    assert "t" not in snap.topics
    assert snap.topic_errors == {"t": TOPIC_AUTHORIZATION_FAILED}
    error = snap.topic_error("t")
    assert isinstance(error, TopicAuthorizationFailedError)
    assert not error.retriable


def test_topic_error_clears_once_the_topic_is_fine() -> None:
    snap = ClusterSnapshot().merged_with(
        response([topic("t", error_code=LEADER_NOT_AVAILABLE)]), ["t"]
    )
    assert isinstance(snap.topic_error("t"), LeaderNotAvailableError)
    snap = snap.merged_with(response([topic("t", [1])]), ["t"])
    assert snap.topic_error("t") is None
    assert "t" in snap.topics


def test_requested_topic_missing_from_response_is_unknown() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("a", [1])]), ["a", "b"])
    assert "b" not in snap.topics
    assert isinstance(snap.topic_error("b"), UnknownTopicOrPartitionError)
    assert snap.topic_error("a") is None


def test_gap_in_partitions_is_treated_as_not_ready() -> None:
    gappy = MetadataTopic(error_code=0, name="t", partitions=[partition(0, 1), partition(2, 1)])
    snap = ClusterSnapshot().merged_with(response([gappy]), ["t"])
    assert "t" not in snap.topics
    assert snap.topic_errors["t"] == LEADER_NOT_AVAILABLE


def test_merge_keeps_other_topics() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("a", [1]), topic("b", [2])]), ["a", "b"])
    snap = snap.merged_with(response([topic("a", [2, 2])]), ["a"])
    assert snap.topics["a"].num_partitions == 2
    assert snap.topics["b"].num_partitions == 1
    assert snap.leader_for(TopicPartition("b", 0)) == 2
    assert snap.leader_for(TopicPartition("a", 1)) == 2


def test_merge_takes_brokers_from_the_response() -> None:
    snap = ClusterSnapshot().merged_with(response([topic("a", [1])], brokers=(1, 2)), ["a"])
    snap = snap.merged_with(response([], brokers=(2, 3)), [])
    assert set(snap.brokers) == {2, 3}


def test_null_topic_names_are_ignored() -> None:
    nameless = MetadataTopic(error_code=0, name=None, partitions=[partition(0, 1)])
    snap = ClusterSnapshot().merged_with(response([nameless, topic("t", [1])]), ["t"])
    assert set(snap.topics) == {"t"}


def test_internal_flag_is_kept() -> None:
    snap = ClusterSnapshot().merged_with(
        response([topic("__consumer_offsets", [1], internal=True)]), []
    )
    assert snap.topics["__consumer_offsets"].is_internal


def test_snapshots_are_independent() -> None:
    first = ClusterSnapshot().merged_with(response([topic("a", [1])]), ["a"])
    second = first.merged_with(response([topic("b", [1])]), ["b"])
    assert "b" not in first.topics
    assert "b" in second.topics


# --- KIP-951 leader hints -------------------------------------------------------------------

TP0 = TopicPartition("t", 0)


def hinted_snapshot() -> ClusterSnapshot:
    resp = response([MetadataTopic(error_code=0, name="t", partitions=[partition(0, 1, 5)])])
    return ClusterSnapshot().merged_with(resp, ["t"])


def test_leader_hint_with_newer_epoch_is_applied() -> None:
    snap = hinted_snapshot()
    new = snap.with_leader(TP0, 2, 6, None)
    assert new is not None
    assert new.leader_for(TP0) == 2
    assert new.topics["t"].partitions[0].leader_epoch == 6
    assert snap.leader_for(TP0) == 1  # the old snapshot is untouched


@pytest.mark.parametrize("epoch", [4, 5])
def test_leader_hint_with_older_or_same_epoch_is_ignored(epoch: int) -> None:
    assert hinted_snapshot().with_leader(TP0, 2, epoch, None) is None


@pytest.mark.parametrize(("leader", "epoch"), [(-1, 9), (2, -1)])
def test_leader_hint_without_leader_or_epoch_is_ignored(leader: int, epoch: int) -> None:
    assert hinted_snapshot().with_leader(TP0, leader, epoch, None) is None


def test_leader_hint_for_unknown_partition_is_ignored() -> None:
    snap = hinted_snapshot()
    assert snap.with_leader(TopicPartition("t", 1), 2, 9, None) is None
    assert snap.with_leader(TopicPartition("x", 0), 2, 9, None) is None


def test_leader_hint_to_unknown_node_needs_its_endpoint() -> None:
    snap = hinted_snapshot()
    assert snap.with_leader(TP0, 9, 6, None) is None
    node = BrokerNode(9, "h9", 9009)
    new = snap.with_leader(TP0, 9, 6, node)
    assert new is not None
    assert new.brokers[9] == node
    assert new.leader_for(TP0) == 9


def test_leader_hint_makes_a_leaderless_partition_available() -> None:
    resp = response([MetadataTopic(error_code=0, name="t", partitions=[partition(0, -1, 3)])])
    snap = ClusterSnapshot().merged_with(resp, ["t"])
    assert snap.topics["t"].available == ()
    new = snap.with_leader(TP0, 1, 4, None)
    assert new is not None
    assert new.topics["t"].available == (0,)


def test_metadata_state_applies_hint_only_when_newer() -> None:
    state = MetadataState(300_000, 300_000, 100)
    state.update(
        response([MetadataTopic(error_code=0, name="t", partitions=[partition(0, 1, 5)])]),
        ["t"],
        0,
    )
    version = state.version
    assert state.apply_leader_hint(TP0, 2, 5, None) is False
    assert state.version == version
    assert state.snapshot.leader_for(TP0) == 1
    assert state.apply_leader_hint(TP0, 2, 6, None) is True
    assert state.version == version + 1
    assert state.snapshot.leader_for(TP0) == 2


# --- MetadataState: when to refresh ---------------------------------------------------------

MAX_AGE = 10_000
MAX_IDLE = 60_000
BACKOFF = 100


def fresh_state() -> MetadataState:
    return MetadataState(MAX_AGE, MAX_IDLE, BACKOFF)


def refreshed(state: MetadataState, topics: Sequence[str], now_ms: int) -> None:
    requested = state.attempt_started(now_ms)
    state.update(response([topic(t, [1]) for t in topics]), requested, now_ms)


def test_first_use_needs_a_refresh_now() -> None:
    state = fresh_state()
    assert state.time_to_next_update_ms(0) == 0
    assert state.add_topic("t", 0) is True
    assert state.add_topic("t", 5) is False
    assert state.topics == ["t"]
    assert state.time_to_next_update_ms(5) == 0


def test_refresh_is_due_after_max_age() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    refreshed(state, ["t"], 1000)
    assert state.version == 1
    assert state.time_to_next_update_ms(1000) == MAX_AGE
    assert state.time_to_next_update_ms(6000) == MAX_AGE - 5000
    assert state.time_to_next_update_ms(1000 + MAX_AGE) == 0
    assert state.time_to_next_update_ms(1000 + MAX_AGE + 50) == 0


def test_new_topic_after_a_refresh_is_due_at_once() -> None:
    state = fresh_state()
    state.add_topic("a", 0)
    refreshed(state, ["a"], 0)
    assert state.time_to_next_update_ms(10) > 0
    assert state.add_topic("b", 10) is True
    assert state.time_to_next_update_ms(10) == 0
    assert state.attempt_started(10) == ["b"]  # the new topic only: a partial refresh


def test_requested_update_waits_only_the_backoff_since_the_last_refresh() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    refreshed(state, ["t"], 0)
    assert state.time_to_next_update_ms(10) == MAX_AGE - 10
    state.request_update()
    assert state.time_to_next_update_ms(10) == BACKOFF - 10
    assert state.time_to_next_update_ms(BACKOFF) == 0
    refreshed(state, ["t"], 1000)
    assert state.time_to_next_update_ms(1000) == MAX_AGE


def test_new_topic_skips_the_backoff() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    refreshed(state, ["t"], 0)
    state.add_topic("new", 10)
    assert state.time_to_next_update_ms(10) == 0


def test_request_made_during_a_refresh_is_kept_for_the_next() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    requested = state.attempt_started(0)
    state.request_update()  # e.g. a disconnect while the refresh is in flight
    state.update(response([topic("t", [1])]), requested, 5)
    assert state.time_to_next_update_ms(5 + BACKOFF) == 0


def test_backoff_after_a_failed_refresh() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    state.attempt_started(1000)
    state.failed(1000)
    assert state.time_to_next_update_ms(1000) == BACKOFF
    assert state.time_to_next_update_ms(1040) == BACKOFF - 40
    assert state.time_to_next_update_ms(1000 + BACKOFF) == 0
    # A request does not skip the backoff.
    state.request_update()
    assert state.time_to_next_update_ms(1050) == 50


def test_success_clears_the_failure_backoff() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    state.failed(1000)
    refreshed(state, ["t"], 1100)
    state.request_update()
    assert state.time_to_next_update_ms(1100 + BACKOFF) == 0


def test_refresh_stays_requested_while_a_topic_has_an_error_or_no_leader() -> None:
    state = fresh_state()
    state.add_topic("a", 0)
    state.add_topic("b", 0)
    requested = state.attempt_started(0)
    state.update(
        response([topic("a", error_code=LEADER_NOT_AVAILABLE), topic("b", [1])]), requested, 0
    )
    assert state.time_to_next_update_ms(0) == BACKOFF  # paced, not a tight loop
    requested = state.attempt_started(BACKOFF)
    state.update(response([topic("a", [1, -1]), topic("b", [1])]), requested, BACKOFF)
    assert state.time_to_next_update_ms(2 * BACKOFF) == 0  # "a" partition 1 has no leader
    requested = state.attempt_started(2 * BACKOFF)
    assert requested == ["a"]  # only the incomplete topic
    state.update(response([topic("a", [1, 2])]), requested, 2 * BACKOFF)
    # Partial refreshes do not move the periodic one: due max age after the first, full one.
    assert state.time_to_next_update_ms(2 * BACKOFF) == MAX_AGE - 2 * BACKOFF


def test_idle_topics_are_dropped_from_refreshes() -> None:
    state = fresh_state()
    state.add_topic("busy", 0)
    state.add_topic("idle", 0)
    state.touch("busy", MAX_IDLE)
    assert state.attempt_started(MAX_IDLE) == ["busy", "idle"]  # exactly max idle: kept
    assert state.attempt_started(MAX_IDLE + 1) == ["busy"]
    assert state.topics == ["busy"]
    assert state.add_topic("idle", MAX_IDLE + 2) is True  # comes back as new


def test_update_replaces_the_snapshot_and_counts_versions() -> None:
    state = fresh_state()
    state.add_topic("t", 0)
    before = state.snapshot
    refreshed(state, ["t"], 0)
    assert state.snapshot is not before
    assert state.snapshot.topics["t"].num_partitions == 1
    assert state.version == 1
    refreshed(state, ["t"], 1)
    assert state.version == 2
