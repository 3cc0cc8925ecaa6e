"""RecordAccumulator: appending, ready(), drain(), expire(), reenqueue() and accounting."""

from __future__ import annotations

import asyncio

import pytest

from aiokprod.errors import ProducerClosedError
from aiokprod.internals.accumulator import (
    FOREVER_MS,
    MAX_BATCHES_PER_PASS,
    MAX_BATCHES_PER_REQUEST,
    RecordAccumulator,
    batch_of_one_size,
)
from aiokprod.internals.batch import FinalState, ProducerBatch
from aiokprod.types import TopicPartition

from ._helpers import accumulator, append, snapshot

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)


# --- appending ------------------------------------------------------------------------------


def test_first_append_creates_a_batch_and_reserves_its_bytes() -> None:
    acc = accumulator(batch_size=500)
    assert acc.try_append(T0, 1, None, b"x", None) is None
    batch, index, created = append(acc, T0, b"x" * 10)
    assert created
    assert index == 0
    assert batch.reserved_bytes == 500  # batch_size for records smaller than a batch
    assert acc.budget.used == 500
    assert acc.queued(T0) == [batch]
    assert acc.has_undrained()
    assert acc.has_incomplete()


def test_records_join_the_open_batch_until_batch_size() -> None:
    acc = accumulator(batch_size=300)
    first, index, created = append(acc, T0)
    assert (index, created) == (0, True)
    indexes = [0]
    while True:
        batch, index, created = append(acc, T0)
        if created:
            break
        assert batch is first
        indexes.append(index)
    assert indexes == list(range(len(indexes)))
    assert len(indexes) > 1
    assert first.is_full
    assert first.size_in_bytes <= 300
    # The record that did not fit starts the next batch; the budget holds both batches.
    assert index == 0
    assert acc.queued(T0) == [first, batch]
    assert acc.budget.used == 600
    assert first.record_count == len(indexes)


def test_batch_reaching_batch_size_exactly_is_full_at_once() -> None:
    probe = accumulator(batch_size=10_000)
    batch, _, _ = append(probe, T0, b"v" * 30)
    exact = batch.size_in_bytes
    acc = accumulator(batch_size=exact)
    batch, _, _ = append(acc, T0, b"v" * 30)
    assert batch.size_in_bytes == exact
    assert batch.is_full


def test_append_filling_the_batch_exactly_marks_it_full() -> None:
    probe = accumulator(batch_size=10_000)
    append(probe, T0)
    batch, _, _ = append(probe, T0)
    two_records = batch.size_in_bytes
    acc = accumulator(batch_size=two_records, linger_ms=1000)
    batch, _, _ = append(acc, T0)
    assert not batch.is_full
    same, index, created = append(acc, T0)
    assert (same, index, created) == (batch, 1, False)
    assert batch.is_full  # full now, before any further record arrives
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}


def test_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = accumulator(batch_size=200)
    small, _, _ = append(acc, T0, b"s" * 10)
    big_value = b"B" * 1000
    big, index, created = append(acc, T0, big_value)
    assert created
    assert big is not small
    assert index == 0
    assert small.is_full  # closed: the big record did not fit
    assert big.is_full
    assert big.record_count == 1
    assert big.size_in_bytes > 1000
    assert big.reserved_bytes == acc.new_batch_size(None, big_value, None)
    assert big.reserved_bytes >= big.size_in_bytes
    after, _, created = append(acc, T0, b"s" * 10)
    assert created  # nothing joins an oversized batch
    assert acc.queued(T0) == [small, big, after]


def test_new_batch_size_covers_the_record() -> None:
    acc = accumulator(batch_size=100)
    assert acc.new_batch_size(None, b"x", None) == 100
    size = acc.new_batch_size(b"k" * 50, b"v" * 500, b"h" * 20)
    assert size >= 61 + 50 + 500 + 20
    probe = accumulator(batch_size=1)
    batch, _, _ = append(probe, T0, b"v" * 500, key=b"k" * 50)
    assert size >= batch.size_in_bytes


def test_append_new_batch_uses_an_open_batch_that_appeared_meanwhile() -> None:
    """Two sends raced for a new batch: the second joins the first's batch, returns its bytes."""
    acc = accumulator(batch_size=1000)
    budget = acc.budget
    assert budget.try_reserve(1000)
    assert budget.try_reserve(1000)
    first, i0, _ = acc.append_new_batch(T0, 1, None, b"a", None, 0, 1000)
    second, i1, _ = acc.append_new_batch(T0, 1, None, b"b", None, 0, 1000)
    assert second is first
    assert (i0, i1) == (0, 1)
    assert budget.used == 1000
    assert acc.queued_batches() == 1


def test_partitions_have_separate_queues() -> None:
    acc = accumulator()
    b0, _, _ = append(acc, T0)
    b1, _, _ = append(acc, T1)
    assert b0 is not b1
    assert acc.queued(T0) == [b0]
    assert acc.queued(T1) == [b1]
    assert acc.queued_batches() == 2


def test_append_result_reports_the_bytes_each_append_added() -> None:
    """RecordAppendResult: a new batch counts its header, a join only the record's bytes."""
    acc = accumulator(batch_size=1000)
    assert acc.budget.try_reserve(1000)
    batch, index, added = acc.append_new_batch(T0, 1, None, b"x", None, 0, 1000)
    assert (index, added) == (0, batch.size_in_bytes)
    before = batch.size_in_bytes
    joined = acc.try_append(T0, 1, b"key", b"y" * 10, None)
    assert joined is not None
    same, index, added = joined
    assert same is batch
    assert index == 1
    assert added == batch.size_in_bytes - before
    assert added < batch_of_one_size(3, 10, 0)  # the bound holds the real size
    assert not batch.is_full
    full = acc.try_append(T0, 1, None, b"z" * 2000, None)
    assert full is None  # does not fit: a new batch is needed, the open one is closed
    assert batch.is_full


# --- ready ----------------------------------------------------------------------------------

CLUSTER = snapshot({"t": [1, 1, 2], "u": [2]})


def test_nothing_queued_nothing_ready() -> None:
    acc = accumulator()
    result = acc.ready(CLUSTER, 0)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay_ms == FOREVER_MS
    assert result.unknown_leader_topics == set()


def test_lingering_batch_becomes_ready_after_linger_ms() -> None:
    acc = accumulator(linger_ms=10)
    append(acc, T0, now_ms=100)
    result = acc.ready(CLUSTER, 104)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay_ms == 6
    assert acc.ready(CLUSTER, 109).ready_nodes == set()
    assert acc.ready(CLUSTER, 110).ready_nodes == {1}
    assert acc.ready(CLUSTER, 500).ready_nodes == {1}


def test_linger_zero_is_ready_at_once() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0, now_ms=7)
    assert acc.ready(CLUSTER, 7).ready_nodes == {1}


def test_next_ready_check_delay_is_the_soonest_linger() -> None:
    acc = accumulator(linger_ms=10)
    append(acc, T0, now_ms=0)
    append(acc, TopicPartition("u", 0), now_ms=4)
    assert acc.ready(CLUSTER, 2).next_ready_check_delay_ms == 8
    result = acc.ready(CLUSTER, 10)
    assert result.ready_nodes == {1}
    assert result.next_ready_check_delay_ms == 4  # "u" (node 2) still lingers


def test_full_batch_is_ready_before_linger() -> None:
    acc = accumulator(batch_size=100, linger_ms=1000)
    append(acc, T0, b"x" * 200)
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}


def test_more_than_one_batch_is_ready_before_linger() -> None:
    acc = accumulator(batch_size=150, linger_ms=1000)
    while len(acc.queued(T0)) < 2:
        append(acc, T0)
    assert not acc.queued(T0)[-1].is_full
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}


def test_drain_leaves_a_batch_it_has_no_room_for_open() -> None:
    """A drain that had no room for a partition leaves its batch open for more records."""
    size = batch_bytes()
    acc = accumulator(linger_ms=1000)
    append(acc, T0)
    append(acc, T1)
    acc.begin_flush()
    (taken,) = acc.drain(ONE_NODE, {1}, size, 0)[1]
    acc.end_flush()
    left = T1 if taken.tp == T0 else T0
    (open_batch,) = acc.queued(left)
    assert open_batch.builder is not None  # not closed: it was not taken
    assert acc.ready(ONE_NODE, 1).ready_nodes == set()  # still lingering
    _, _, created = append(acc, left)
    assert not created
    assert open_batch.record_count == 2


def test_expedited_batch_is_ready_before_linger() -> None:
    acc = accumulator(linger_ms=1000)
    append(acc, T0)
    assert acc.ready(CLUSTER, 0).ready_nodes == set()
    acc.expedite(T0)
    acc.expedite(T1)  # no batch: nothing happens
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}


def test_flush_makes_everything_ready_until_it_ends() -> None:
    acc = accumulator(linger_ms=1000)
    append(acc, T0)
    append(acc, T2)
    assert acc.ready(CLUSTER, 0).ready_nodes == set()  # lingering
    acc.begin_flush()
    acc.begin_flush()
    assert acc.ready(CLUSTER, 0).ready_nodes == {1, 2}
    acc.end_flush()
    assert acc.ready(CLUSTER, 0).ready_nodes == {1, 2}  # one flush still running
    acc.end_flush()
    acc.end_flush()  # extra end_flush is harmless
    assert acc.ready(CLUSTER, 0).ready_nodes == set()
    acc.begin_flush()
    assert acc.ready(CLUSTER, 0).ready_nodes == {1, 2}


def test_close_makes_everything_ready() -> None:
    acc = accumulator(linger_ms=1000)
    append(acc, T2)
    acc.begin_close()
    assert acc.ready(CLUSTER, 0).ready_nodes == {2}


async def test_memory_waiters_make_everything_ready() -> None:
    acc = accumulator(linger_ms=1000, buffer_memory=2000, batch_size=1000)
    append(acc, T0)
    append(acc, T2)
    assert acc.budget.available == 0
    assert acc.ready(CLUSTER, 0).ready_nodes == set()
    waiter = asyncio.create_task(acc.budget.reserve(1000, 3600))
    for _ in range(3):
        await asyncio.sleep(0)
    assert acc.budget.has_waiters
    assert acc.ready(CLUSTER, 0).ready_nodes == {1, 2}
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert acc.ready(CLUSTER, 0).ready_nodes == set()


def test_retry_backoff_holds_a_batch_back() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    (batch,) = acc.drain(CLUSTER, {1}, 10_000, 0)[1]
    acc.reenqueue(batch, now_ms=100, backoff_ms=50)
    assert batch.attempts == 1
    assert batch.retry_at_ms == 150
    result = acc.ready(CLUSTER, 120)
    assert result.ready_nodes == set()
    assert result.next_ready_check_delay_ms == 30
    acc.begin_flush()  # a flush does not skip the backoff
    assert acc.ready(CLUSTER, 149).ready_nodes == set()
    assert acc.drain(CLUSTER, {1}, 10_000, 149) == {}
    assert acc.ready(CLUSTER, 150).ready_nodes == {1}
    assert acc.drain(CLUSTER, {1}, 10_000, 150) == {1: [batch]}


def test_retry_after_backoff_is_ready_regardless_of_linger() -> None:
    acc = accumulator(linger_ms=10_000)
    append(acc, T0, now_ms=0)
    acc.begin_flush()
    (batch,) = acc.drain(CLUSTER, {1}, 10_000, 0)[1]
    acc.end_flush()
    acc.reenqueue(batch, now_ms=5, backoff_ms=5)
    assert acc.ready(CLUSTER, 10).ready_nodes == {1}


def test_muted_partition_is_not_ready_and_not_drained() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    acc.muted.add(T0)
    assert acc.ready(CLUSTER, 0).ready_nodes == set()
    assert acc.drain(CLUSTER, {1}, 10_000, 0) == {}
    append(acc, T1)  # another partition of the same leader still goes
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}
    assert [b.tp for b in acc.drain(CLUSTER, {1}, 10_000, 0)[1]] == [T1]
    acc.muted.discard(T0)
    assert acc.ready(CLUSTER, 0).ready_nodes == {1}


def test_unknown_leader_reports_the_topic() -> None:
    cluster = snapshot({"t": [1, -1, 2]})
    acc = accumulator(linger_ms=0)
    append(acc, T1)  # leaderless partition
    append(acc, TopicPartition("missing", 0))  # topic not in the view
    result = acc.ready(cluster, 0)
    assert result.ready_nodes == set()
    assert result.unknown_leader_topics == {"t", "missing"}
    append(acc, T0)
    result = acc.ready(cluster, 0)
    assert result.ready_nodes == {1}
    assert result.unknown_leader_topics == {"t", "missing"}


def test_a_leader_missing_from_the_brokers_list_counts_as_unknown() -> None:
    # A partial refresh of another topic named only broker 1; "t" kept leader 2 from before
    # (simulator seed 9793: the batch waited out delivery_timeout_ms, no refresh was asked).
    cluster = snapshot({"t": [1, 2, 1]}, brokers=(1,))
    acc = accumulator(linger_ms=0)
    append(acc, T1)
    result = acc.ready(cluster, 0)
    assert result.ready_nodes == set()
    assert result.unknown_leader_topics == {"t"}
    append(acc, T0)
    assert acc.ready(cluster, 0).ready_nodes == {1}


def test_ready_nodes_cover_every_leader() -> None:
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1, T2, TopicPartition("u", 0)):
        append(acc, tp)
    assert acc.ready(CLUSTER, 0).ready_nodes == {1, 2}


# --- drain ----------------------------------------------------------------------------------

ONE_NODE = snapshot({"t": [1, 1, 1]})


def batch_bytes() -> int:
    """The closed size of a one-record batch as ``append`` makes it."""
    acc = accumulator()
    batch, _, _ = append(acc, T0)
    return batch.close().size_in_bytes


def test_drain_takes_one_batch_per_partition() -> None:
    acc = accumulator(batch_size=100, linger_ms=0)
    for _ in range(3):
        append(acc, T0, b"x" * 200)  # three one-record batches
    append(acc, T1)
    drained = acc.drain(ONE_NODE, {1}, 1_000_000, 5)
    assert [b.tp for b in drained[1]] == [T0, T1]
    assert len(acc.queued(T0)) == 2
    assert acc.queued(T1) == []
    for batch in drained[1]:
        assert batch.drained_ms == 5
        assert batch.closed is not None  # closed for the wire
        assert batch.builder is None


def test_drain_respects_max_request_bytes() -> None:
    size = batch_bytes()
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1, T2):
        append(acc, tp)
    drained = acc.drain(ONE_NODE, {1}, 2 * size, 0)[1]
    assert len(drained) == 2
    assert sum(b.size_in_bytes for b in drained) <= 2 * size
    assert acc.queued_batches() == 1
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1, T2):
        append(acc, tp)
    assert len(acc.drain(ONE_NODE, {1}, 2 * size - 1, 0)[1]) == 1
    assert acc.queued_batches() == 2


def test_drain_always_takes_at_least_one_batch() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0, b"x" * 500)
    (batch,) = acc.drain(ONE_NODE, {1}, 10, 0)[1]
    assert batch.size_in_bytes > 10


def test_drain_only_for_the_given_nodes() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    append(acc, T2)
    drained = acc.drain(CLUSTER, {2}, 1_000_000, 0)
    assert list(drained) == [2]
    assert [b.tp for b in drained[2]] == [T2]
    assert acc.queued(T0) != []
    assert acc.queued(T2) == []
    assert acc.drain(CLUSTER, {3}, 1_000_000, 0) == {}  # leads nothing


def test_drain_rotates_start_partition_so_none_starves() -> None:
    """With room for one batch per request, successive drains serve every partition."""
    size = batch_bytes()
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1, T2):
        for _ in range(3):
            append(acc, tp, b"v" * 30)
            acc.queued(tp)[-1].is_full = True  # one record per batch
    order = []
    for _ in range(6):
        (batch,) = acc.drain(ONE_NODE, {1}, size, 0)[1]
        order.append(batch.tp.partition)
    assert order == [0, 1, 2, 0, 1, 2]


def test_drain_takes_one_batch_of_every_partition_when_everything_fits() -> None:
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1, T2):
        for _ in range(3):
            append(acc, tp)
            acc.queued(tp)[-1].is_full = True
    orders = [[b.tp.partition for b in acc.drain(ONE_NODE, {1}, 1_000_000, 0)[1]] for _ in range(3)]
    assert orders == [[0, 1, 2]] * 3
    assert not acc.has_undrained()


def test_drain_caps_the_batches_of_one_request() -> None:
    """Thousands of small batches queued: a request takes MAX_BATCHES_PER_REQUEST, in turn."""
    partitions = 3 * MAX_BATCHES_PER_REQUEST
    cluster = snapshot({"many": [1] * partitions}, brokers=[1])
    acc = accumulator(linger_ms=0)
    for p in range(partitions):
        append(acc, TopicPartition("many", p))
    served: list[int] = []
    for _ in range(3):
        batches = acc.drain(cluster, {1}, 100_000_000, 0)[1]
        assert len(batches) == MAX_BATCHES_PER_REQUEST
        served += [b.tp.partition for b in batches]
    assert sorted(served) == list(range(partitions))  # each partition once: none starves
    assert acc.drain(cluster, {1}, 100_000_000, 0) == {}


def test_one_drain_takes_a_bounded_number_of_batches_over_every_node() -> None:
    nodes = 4
    per_node = MAX_BATCHES_PER_REQUEST - 1
    cluster = snapshot({"wide": [p % nodes for p in range(nodes * per_node)]}, brokers=range(4))
    acc = accumulator(linger_ms=0)
    for p in range(nodes * per_node):
        append(acc, TopicPartition("wide", p))
    first = acc.drain(cluster, set(range(nodes)), 100_000_000, 0)
    assert sum(len(b) for b in first.values()) == MAX_BATCHES_PER_PASS
    assert not acc.drained_all  # the sender runs its next pass at once
    rest = acc.drain(cluster, set(range(nodes)), 100_000_000, 0)
    assert sum(len(b) for b in rest.values()) == nodes * per_node - MAX_BATCHES_PER_PASS
    assert acc.drained_all
    assert not acc.has_undrained()


def test_drain_serves_the_partition_that_did_not_fit_first_next_time() -> None:
    acc = accumulator(linger_ms=0)
    for tp in (T0, T1):
        append(acc, tp, b"v" * 30)
        acc.queued(tp)[-1].is_full = True
        append(acc, tp, b"v" * 30)
        acc.queued(tp)[-1].is_full = True
    size = batch_bytes()
    (first,) = acc.drain(ONE_NODE, {1}, size, 0)[1]
    assert first.tp == T0
    (second,) = acc.drain(ONE_NODE, {1}, size, 0)[1]
    assert second.tp == T1  # T0 was drained: it waits behind T1
    (third,) = acc.drain(ONE_NODE, {1}, size, 0)[1]
    assert third.tp == T0


def test_drain_honours_can_drain() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    append(acc, T1)
    asked: list[ProducerBatch] = []

    def can_drain(batch: ProducerBatch) -> bool:
        asked.append(batch)
        return batch.tp != T0

    drained = acc.drain(ONE_NODE, {1}, 1_000_000, 0, can_drain)
    assert [b.tp for b in drained[1]] == [T1]
    assert {b.tp for b in asked} == {T0, T1}
    held = acc.queued(T0)
    assert len(held) == 1
    assert held[0].drained_ms == -1
    assert acc.drain(ONE_NODE, {1}, 1_000_000, 0, lambda b: False) == {}
    assert acc.queued(T0) == held


def test_drained_batches_stay_incomplete_until_deallocated() -> None:
    acc = accumulator(linger_ms=0, batch_size=400)
    append(acc, T0)
    (batch,) = acc.drain(ONE_NODE, {1}, 1_000_000, 0)[1]
    assert not acc.has_undrained()
    assert acc.has_incomplete()
    assert acc.incomplete_batches() == [batch]
    assert acc.budget.used == 400
    batch.complete(0, -1)
    acc.deallocate(batch)
    assert not acc.has_incomplete()
    assert acc.budget.used == 0
    acc.deallocate(batch)  # a second deallocate returns nothing twice
    assert acc.budget.used == 0
    assert acc.budget.available == acc.budget.total


# --- expire ---------------------------------------------------------------------------------


def test_expire_by_delivery_timeout() -> None:
    acc = accumulator(delivery_timeout_ms=100, batch_size=100)
    old, _, _ = append(acc, T0, b"x" * 200, now_ms=0)
    young, _, _ = append(acc, T0, b"x" * 200, now_ms=50)
    other, _, _ = append(acc, T1, b"x" * 200, now_ms=60)
    assert acc.next_expiry_delay_ms(10) == 90
    assert acc.expire(99) == []
    assert acc.expire(100) == [old]
    assert acc.queued(T0) == [young]
    assert acc.next_expiry_delay_ms(100) == 50
    assert set(acc.expire(200)) == {young, other}
    assert not acc.has_undrained()
    assert acc.next_expiry_delay_ms(200) == FOREVER_MS
    assert acc.has_incomplete()  # expired, not yet failed


def test_expire_leaves_in_flight_batches_alone() -> None:
    acc = accumulator(delivery_timeout_ms=100, linger_ms=0)
    append(acc, T0, now_ms=0)
    (batch,) = acc.drain(ONE_NODE, {1}, 1_000_000, 0)[1]
    assert acc.expire(10_000) == []
    assert batch.final_state is None
    assert acc.incomplete_batches() == [batch]


# --- reenqueue ------------------------------------------------------------------------------


def drain_all(acc: RecordAccumulator, tp: TopicPartition) -> list[ProducerBatch]:
    batches = []
    while acc.queued(tp):
        batches.extend(acc.drain(ONE_NODE, {1}, 1_000_000, 0)[1])
    return batches


def test_reenqueue_keeps_sequence_order() -> None:
    acc = accumulator(linger_ms=0, batch_size=100)
    for _ in range(3):
        append(acc, T0, b"x" * 200)
    batches = drain_all(acc, T0)
    for seq, batch in zip((0, 1, 2), batches, strict=True):
        batch.stamp(7, 0, seq)
    newer, _, _ = append(acc, T0, b"x" * 200)  # a new batch without a sequence
    acc.reenqueue(batches[2], 10, 0)
    acc.reenqueue(batches[0], 10, 0)
    acc.reenqueue(batches[1], 10, 0)
    assert acc.queued(T0) == [batches[0], batches[1], batches[2], newer]
    assert [b.base_sequence for b in acc.queued(T0)[:3]] == [0, 1, 2]
    assert all(b.attempts == 1 for b in batches)


def test_reenqueue_into_an_empty_queue() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    (batch,) = drain_all(acc, T0)
    batch.stamp(1, 0, 5)
    batch.in_flight = True
    acc.reenqueue(batch, 20, 30)
    assert acc.queued(T0) == [batch]
    assert not batch.in_flight
    assert batch.retry_at_ms == 50


def test_reenqueue_without_sequence_goes_first() -> None:
    acc = accumulator(linger_ms=0, batch_size=100)
    append(acc, T0, b"x" * 200)
    (retried,) = drain_all(acc, T0)
    queued, _, _ = append(acc, T0, b"x" * 200)
    acc.reenqueue(retried, 0, 0)
    assert acc.queued(T0) == [retried, queued]


def test_reenqueued_batch_is_not_appended_to() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    (retried,) = drain_all(acc, T0)
    acc.reenqueue(retried, 0, 0)
    count = retried.record_count
    batch, index, created = append(acc, T0)
    assert created
    assert batch is not retried
    assert index == 0
    assert retried.record_count == count
    assert acc.queued(T0) == [retried, batch]


def test_attempts_count_every_reenqueue() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, T0)
    (batch,) = drain_all(acc, T0)
    now = 0
    for attempt in (1, 2, 3):
        acc.reenqueue(batch, now, 10)
        assert batch.attempts == attempt
        assert batch.retry_at_ms == now + 10
        assert acc.drain(ONE_NODE, {1}, 1_000_000, now + 9) == {}  # backing off
        now += 10
        assert acc.drain(ONE_NODE, {1}, 1_000_000, now) == {1: [batch]}
    assert batch.attempts == 3


# --- abort ----------------------------------------------------------------------------------


def test_abort_undrained_fails_queued_batches_only() -> None:
    acc = accumulator(linger_ms=0, batch_size=500)
    append(acc, T0)
    (in_flight,) = drain_all(acc, T0)
    queued_a, _, _ = append(acc, T1)
    queued_b, _, _ = append(acc, T2)
    error = ProducerClosedError("force close")
    aborted = acc.abort_undrained(error)
    assert set(aborted) == {queued_a, queued_b}
    for batch in aborted:
        assert batch.final_state is FinalState.ABORTED
        assert batch.result.error is error
    assert not acc.has_undrained()
    assert acc.incomplete_batches() == [in_flight]
    assert acc.budget.used == 500  # only the in-flight batch is still held


def test_reenqueued_batches_without_sequences_keep_creation_order() -> None:
    """Batches of failed requests come back one by one; the head must stay the oldest.

    (Found by the simulator, seed 109974: appended at the front in answer order, an older
    batch sat behind a newer one and expired 500 ms past its delivery timeout.)
    """
    acc = accumulator(batch_size=100, linger_ms=0, delivery_timeout_ms=1000)
    old, _, _ = append(acc, T0, b"x" * 200, now_ms=0)
    new, _, _ = append(acc, T0, b"y" * 200, now_ms=10)
    later, _, _ = append(acc, T0, b"z" * 200, now_ms=20)  # never sent
    drained = acc.drain(ONE_NODE, {1}, 1_000_000, 30)[1]
    assert drained == [old]
    drained = acc.drain(ONE_NODE, {1}, 1_000_000, 31)[1]
    assert drained == [new]
    acc.reenqueue(old, 40, 0)  # the answers fail the oldest first...
    acc.reenqueue(new, 40, 0)
    assert acc.queued(T0) == [old, new, later]
    assert acc.expire(1000) == [old]  # ... so the oldest expires on time
