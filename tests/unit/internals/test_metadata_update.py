"""Issue 30: answers applied in steps, partial refreshes, coalesced new topics, idle topics.

All on the pure decision code with the time passed in; nothing here measures time (the
scale benchmark does: benchmarks/scale.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from aiokprod.internals.cluster_view import MERGE_STEP_PARTITIONS, ClusterSnapshot
from aiokprod.internals.metadata import (
    DECODE_STEP_PARTITIONS,
    MAX_TOPICS_PER_REQUEST,
    NEW_TOPIC_BURST,
    MetadataState,
)
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
)
from aiokprod.protocol.metadata_fast import MetadataDecoder, TopicPartitions
from aiokprod.protocol.schema import encode_struct
from aiokprod.types import TopicPartition

MAX_AGE = 10_000
MAX_IDLE = 60_000
BACKOFF = 100
VERSION = 13


def state() -> MetadataState:
    return MetadataState(MAX_AGE, MAX_IDLE, BACKOFF)


def answer(
    topics: dict[str, int],
    *,
    brokers: int = 3,
    epoch: int = 0,
    leaders: dict[TopicPartition, tuple[int, int]] | None = None,
    topic_ids: dict[str, int] | None = None,
) -> MetadataResponse:
    """An answer: every topic's partitions led round-robin, overrides in ``leaders``."""
    leaders = leaders or {}
    ids = topic_ids or {}
    return MetadataResponse(
        brokers=[MetadataBroker(node_id=b, host=f"b{b}", port=9092) for b in range(brokers)],
        cluster_id="cluster",
        controller_id=0,
        topics=[
            MetadataTopic(
                error_code=0,
                name=name,
                topic_id=uuid.UUID(int=ids.get(name, 1)),
                partitions=[
                    MetadataPartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=leaders.get(TopicPartition(name, p), (p % brokers, 0))[0],
                        leader_epoch=leaders.get(TopicPartition(name, p), (0, epoch))[1],
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                    )
                    for p in range(count)
                ],
            )
            for name, count in topics.items()
        ],
    )


def wire(response: MetadataResponse) -> bytes:
    out = bytearray()
    encode_struct(response, VERSION, True, out)
    return bytes(out)


class CountingDecoder(MetadataDecoder):
    """Records how many partitions each step read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, VERSION)
        self.per_step: list[int] = []

    def step(self, max_partitions: int) -> list[TopicPartitions]:
        before = self.partitions_read
        topics = super().step(max_partitions)
        self.per_step.append(self.partitions_read - before)
        return topics


# --- a large answer is applied in steps, swapped in at once -------------------------------


@pytest.mark.parametrize(
    "layout", [{f"t{i}": 100 for i in range(1000)}, {"huge": 100_000}], ids=["1000x100", "1x100k"]
)
def test_a_100000_partition_answer_is_applied_in_many_steps(layout: dict[str, int]) -> None:
    """Fails if the update is one synchronous step: the caller must get the loop back."""
    meta = state()
    for name in layout:
        meta.add_topic(name, 0)
    asked = meta.attempt_started(0)
    before = meta.snapshot
    decoder = CountingDecoder(wire(answer(layout, brokers=100)))
    yields = 0
    for _ in meta.update_steps(decoder, asked, 0):
        yields += 1
        assert meta.snapshot is before  # send() never sees half of the update
    assert yields >= 100_000 // max(DECODE_STEP_PARTITIONS, MERGE_STEP_PARTITIONS) - 1
    assert max(decoder.per_step) <= DECODE_STEP_PARTITIONS
    assert meta.snapshot is not before
    assert sum(t.num_partitions for t in meta.snapshot.topics.values()) == 100_000
    assert meta.snapshot.leader_for(TopicPartition(next(iter(layout)), 99)) == 99 % 100


def test_a_small_answer_is_applied_without_giving_the_loop_back() -> None:
    meta = state()
    meta.add_topic("t", 0)
    asked = meta.attempt_started(0)
    steps = list(meta.update_steps(MetadataDecoder(wire(answer({"t": 6})), VERSION), asked, 0))
    assert steps == []
    assert meta.snapshot.topics["t"].num_partitions == 6


def test_an_unchanged_topic_keeps_its_view_object() -> None:
    meta = state()
    meta.add_topic("a", 0)
    meta.add_topic("b", 0)
    meta.update(answer({"a": 4, "b": 4}), meta.attempt_started(0), 0)
    a, b = meta.snapshot.topics["a"], meta.snapshot.topics["b"]
    moved = {TopicPartition("b", 1): (2, 1)}
    meta.update(answer({"a": 4, "b": 4}, leaders=moved), meta.attempt_started(MAX_AGE), MAX_AGE)
    assert meta.snapshot.topics["a"] is a  # nothing derived again for it
    assert meta.snapshot.topics["b"] is not b
    assert meta.snapshot.leader_for(TopicPartition("b", 1)) == 2


def test_a_lagging_broker_does_not_undo_a_newer_leader() -> None:
    view = ClusterSnapshot().merged_with(answer({"t": 2}, epoch=5), ["t"])
    tp = TopicPartition("t", 0)
    stale = answer({"t": 2}, leaders={tp: (2, 4), TopicPartition("t", 1): (2, 6)})
    new = view.merged_with(stale, ["t"])
    assert (new.leader_for(tp), new.topics["t"].epochs[0]) == (0, 5)  # epoch 4 < 5: kept
    assert new.leader_for(TopicPartition("t", 1)) == 2  # epoch 6 > 5: taken


def test_a_recreated_topic_starts_afresh() -> None:
    view = ClusterSnapshot().merged_with(answer({"t": 2}, epoch=5, topic_ids={"t": 1}), ["t"])
    tp = TopicPartition("t", 0)
    again = answer({"t": 2}, leaders={tp: (2, 0)}, topic_ids={"t": 2})
    assert view.merged_with(again, ["t"]).leader_for(tp) == 2


def test_a_leader_hint_during_an_update_is_kept() -> None:
    meta = state()
    meta.add_topic("t", 0)
    meta.update(answer({"t": 3000}), meta.attempt_started(0), 0)
    tp = TopicPartition("t", 2500)
    asked = meta.attempt_started(MAX_AGE)
    steps: Iterator[None] = meta.update_steps(
        MetadataDecoder(wire(answer({"t": 3000})), VERSION), asked, MAX_AGE
    )
    next(steps)  # the update is under way
    assert meta.apply_leader_hint(tp, 0, 1, None)
    for _ in steps:
        pass
    assert meta.snapshot.leader_for(tp) == 0
    assert meta.snapshot.topics["t"].epochs[2500] == 1


# --- what a refresh asks for -------------------------------------------------------------


def refreshed(meta: MetadataState, now_ms: int) -> list[str]:
    asked = meta.attempt_started(now_ms)
    meta.update(answer(dict.fromkeys(asked, 1)), asked, now_ms)
    return asked


def test_an_error_on_one_topic_refreshes_that_topic_only() -> None:
    meta = state()
    for name in ("a", "b", "c"):
        meta.add_topic(name, 0)
    assert refreshed(meta, 0) == ["a", "b", "c"]
    meta.request_update_for("b")  # NOT_LEADER_OR_FOLLOWER on b-0
    assert meta.time_to_next_update_ms(10) == BACKOFF - 10
    assert refreshed(meta, BACKOFF) == ["b"]
    meta.request_update_for({"a", "c"})
    assert sorted(refreshed(meta, 2 * BACKOFF)) == ["a", "c"]


def test_a_disconnect_and_the_periodic_refresh_ask_for_every_topic() -> None:
    meta = state()
    for name in ("a", "b"):
        meta.add_topic(name, 0)
    refreshed(meta, 0)
    meta.request_update()
    assert refreshed(meta, BACKOFF) == ["a", "b"]
    assert meta.time_to_next_update_ms(BACKOFF) == MAX_AGE  # a full one restarts the period
    meta.request_update_for("a")
    assert refreshed(meta, 2 * BACKOFF) == ["a"]
    assert meta.time_to_next_update_ms(2 * BACKOFF) == MAX_AGE - BACKOFF  # a partial does not
    meta.request_update_for("a")
    assert refreshed(meta, BACKOFF + MAX_AGE) == ["a", "b"]  # due anyway: the full one


def test_new_topics_of_one_turn_go_in_one_request() -> None:
    meta = state()
    meta.add_topic("old", 0)
    refreshed(meta, 0)
    for i in range(1000):
        meta.add_topic(f"new{i}", 5)
    assert meta.time_to_next_update_ms(5) == 0  # new topics do not wait out the backoff
    assert refreshed(meta, 5) == [f"new{i}" for i in range(1000)]


def test_new_topics_keep_coming_paced_refreshes() -> None:
    """10,000 first sends within a second, a refresh taking 2 ms: not one request each."""
    meta = state()
    requests = 0
    in_flight_until = -1
    pending: list[str] = []
    for now_ms in range(0, 3000):
        if now_ms < 1000:
            for i in range(10):
                meta.add_topic(f"t{now_ms}-{i}", now_ms)
        if now_ms == in_flight_until:
            meta.update(answer(dict.fromkeys(pending, 1)), pending, now_ms)
            in_flight_until = -1
        if in_flight_until < 0 and meta.time_to_next_update_ms(now_ms) == 0:
            pending = meta.attempt_started(now_ms)
            in_flight_until = now_ms + 2
            requests += 1
            if now_ms > 1100 and not pending:
                break
    assert all(f"t{ms}-{i}" in meta.snapshot.topics for ms in range(1000) for i in range(10))
    assert requests <= 20, requests
    # Back to back at first (a service sending to a few new topics is not held up) ...
    meta = state()
    starts = []
    for now_ms in range(0, 20):
        meta.add_topic(f"x{now_ms}", now_ms)
        if meta.time_to_next_update_ms(now_ms) == 0:
            refreshed(meta, now_ms)
            starts.append(now_ms)
    assert starts[:NEW_TOPIC_BURST] == list(range(NEW_TOPIC_BURST))
    assert len(starts) == NEW_TOPIC_BURST  # ... then paced by the backoff


def test_a_refresh_of_many_topics_goes_in_several_requests_one_after_the_other() -> None:
    meta = state()
    names = [f"t{i}" for i in range(2 * MAX_TOPICS_PER_REQUEST + 5)]
    for name in names:
        meta.add_topic(name, 0)
    asked: list[str] = []
    for _ in range(3):
        assert meta.time_to_next_update_ms(0) == 0  # the rest goes at once
        chunk = refreshed(meta, 0)
        assert len(chunk) <= MAX_TOPICS_PER_REQUEST
        asked += chunk
    assert asked == names
    assert meta.time_to_next_update_ms(0) == MAX_AGE


def test_a_failed_refresh_asks_again_for_what_it_asked() -> None:
    meta = state()
    for name in ("a", "b"):
        meta.add_topic(name, 0)
    refreshed(meta, 0)
    meta.request_update_for("a")
    assert meta.attempt_started(BACKOFF) == ["a"]
    meta.failed(BACKOFF)
    assert meta.time_to_next_update_ms(BACKOFF) == BACKOFF
    assert refreshed(meta, 2 * BACKOFF) == ["a"]


# --- idle topics leave ---------------------------------------------------------------------


def test_idle_topics_leave_the_view_unless_something_of_them_is_in_flight() -> None:
    meta = state()
    busy = {"queued"}
    meta.busy = busy.__contains__
    for name in ("used", "idle", "queued"):
        meta.add_topic(name, 0)
    refreshed(meta, 0)
    meta.touch("used", MAX_IDLE)
    version = meta.version
    asked = meta.attempt_started(MAX_IDLE + 1)
    assert asked == ["used", "queued"]
    assert meta.released == ["idle"]
    assert set(meta.snapshot.topics) == {"used", "queued"}  # gone at once, atomically
    assert meta.version == version + 1
    assert meta.add_topic("idle", MAX_IDLE + 2) is True  # it comes back as new
