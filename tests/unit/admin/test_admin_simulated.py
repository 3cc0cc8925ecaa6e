"""The admin client against simulated coordinators on virtual time: retries, faults, bounds.

A real broker rarely moves its coordinator, loses an EndTxn answer after applying it, or
stays silent for a minute; the simulated network and :class:`CoordinatorModel` do that on
purpose, seeded and on virtual time (tests/integration/test_admin.py has the real broker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aiokprod import OffsetAndMetadata, PreparedTransaction, TopicPartition
from aiokprod.admin import Admin
from aiokprod.errors import (
    IllegalStateError,
    InvalidTxnStateError,
    KafkaTimeoutError,
    ProducerFencedError,
    UnstableOffsetCommitError,
    UnsupportedVersionError,
)
from aiokprod.testing.sim.faults import FaultSchedule, FaultWindow

from ._coordinator import (
    CONCURRENT_TRANSACTIONS,
    NOT_COORDINATOR,
    CoordinatorModel,
    world,
)

COORDINATOR_LOAD_IN_PROGRESS = 14
END_TXN, INIT_PRODUCER_ID, LIST_TRANSACTIONS, OFFSET_FETCH = 26, 22, 66, 9


def run(
    model: CoordinatorModel,
    body: Callable[[Admin], Coroutine[Any, Any, None]],
    seed: int = 0,
    **options: Any,
) -> None:
    """Run ``body(admin)`` on the model's world (virtual time), then close the admin."""

    async def main() -> None:
        async with model.admin(seed, **options) as admin:
            await body(admin)

    model.world.run(main())


def prepared_for(model: CoordinatorModel, tid: str, protocol: int = 2) -> PreparedTransaction:
    txn = model.add(tid)
    return PreparedTransaction(tid, txn.producer_id, txn.epoch, protocol)


@pytest.mark.parametrize("protocol", [2, 1])
def test_complete_retries_a_moving_loading_busy_coordinator(protocol: int) -> None:
    model = CoordinatorModel(world(1))
    prepared = prepared_for(model, "tx-a", protocol)
    model.script[END_TXN] = [NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS]

    async def body(admin: Admin) -> None:
        await admin.complete_transaction(prepared, commit=True)
        await admin.complete_transaction(prepared, commit=True)  # a retry: accepted
        with pytest.raises(InvalidTxnStateError):
            await admin.complete_transaction(prepared, commit=False)

    run(model, body)
    assert model.txns["tx-a"].ends == ["CompleteCommit"]
    versions = {v for key, v, _ in model.seen if key == END_TXN}
    assert versions == ({5} if protocol == 2 else {4})
    # NOT_COORDINATOR sent it back to FindCoordinator.
    assert model.count(10) >= 2


def test_complete_survives_lost_answers_and_cut_connections() -> None:
    # Answers lost after the coordinator applied the EndTxn, connections cut mid-answer,
    # requests lost: the retry at the same epoch must be accepted, nothing applied twice.
    retried = 0
    for seed in range(4):
        faults = FaultSchedule(
            windows=[
                FaultWindow("apply_drop", 0.15, 0, 10**9),
                FaultWindow("cut_mid_read", 0.1, 0, 10**9),
                FaultWindow("drop_request", 0.05, 0, 10**9),
            ]
        )
        model = CoordinatorModel(world(seed, faults))
        prepared = {f"tx-{i}": prepared_for(model, f"tx-{i}") for i in range(12)}

        async def body(admin: Admin, prepared: dict[str, PreparedTransaction] = prepared) -> None:
            for i, p in enumerate(prepared.values()):
                await admin.complete_transaction(p, commit=i % 3 != 0)

        run(model, body, seed, request_timeout_ms=1_000, max_block_ms=120_000)
        assert [txn.ends for txn in model.txns.values()] == [
            ["CompleteCommit" if i % 3 else "CompleteAbort"] for i in range(12)
        ], f"seed {seed}"
        retried += model.count(END_TXN) - len(prepared)
    # The faults did hit EndTxn itself: more EndTxn requests than transactions.
    assert retried >= 5, retried


def test_a_silent_coordinator_times_out_at_max_block_ms() -> None:
    faults = FaultSchedule(windows=[FaultWindow("drop_request", 1.0, 0, 10**9)])
    model = CoordinatorModel(world(2, faults))
    prepared = prepared_for(model, "tx-s")
    spent: list[float] = []

    async def body(admin: Admin) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(KafkaTimeoutError, match="max_block_ms=5000"):
            await admin.complete_transaction(prepared, commit=True)
        spent.append(loop.time() - started)

    run(model, body, max_block_ms=5_000, request_timeout_ms=30_000)
    # Bounded by the operation's deadline, not by request_timeout_ms (virtual seconds).
    assert 0 < spent[0] <= 5.0
    assert model.txns["tx-s"].ends == []


def test_typed_errors_are_not_retried() -> None:
    model = CoordinatorModel(world(3))
    prepared = prepared_for(model, "tx-f")
    stale = PreparedTransaction("tx-f", prepared.producer_id, prepared.producer_epoch - 1, 2)

    async def body(admin: Admin) -> None:
        with pytest.raises(ProducerFencedError):
            await admin.complete_transaction(stale, commit=True)

    run(model, body)
    assert model.count(END_TXN) == 1
    assert model.txns["tx-f"].ends == []


def test_protocol_2_needs_end_txn_v5() -> None:
    model = CoordinatorModel(world(4), end_txn_max=4)
    prepared = prepared_for(model, "tx-v")

    async def body(admin: Admin) -> None:
        with pytest.raises(UnsupportedVersionError, match="v5"):
            await admin.complete_transaction(prepared, commit=True)

    run(model, body)
    assert model.txns["tx-v"].ends == []


def test_fence_producers_waits_out_the_abort_and_fences_every_id() -> None:
    model = CoordinatorModel(world(5))
    ids = [f"tx-{i}" for i in range(40)]
    before = {tid: model.add(tid).epoch for tid in ids[:20]}  # 20 open, 20 never used
    model.script[INIT_PRODUCER_ID] = [NOT_COORDINATOR, CONCURRENT_TRANSACTIONS]

    async def body(admin: Admin) -> None:
        await admin.fence_producers(ids + ids[:3])  # repeated ids are fenced once

    run(model, body)
    for tid in ids[:20]:
        txn = model.txns[tid]
        assert txn.ends == ["CompleteAbort"], tid
        assert txn.epoch == before[tid] + 2  # the fence's abort, then the new epoch
    assert all(model.txns[tid].state == "Empty" for tid in ids[20:])


def test_list_transactions_asks_every_broker_and_merges() -> None:
    model = CoordinatorModel(world(6))
    for i in range(12):
        model.add(f"tx-{i}", state="Ongoing" if i % 3 else "CompleteCommit")
    owners = {model.owner(tid) for tid in model.txns}
    assert len(owners) == 3  # spread over the three brokers
    model.script[LIST_TRANSACTIONS] = [COORDINATOR_LOAD_IN_PROGRESS]
    got: list[Any] = []

    async def body(admin: Admin) -> None:
        got.append(await admin.list_transactions(states=["Ongoing"]))
        got.append(await admin.list_transactions(producer_ids=[model.txns["tx-4"].producer_id]))

    run(model, body)
    ongoing = sorted(tid for tid, txn in model.txns.items() if txn.state == "Ongoing")
    assert [t.transactional_id for t in got[0]] == ongoing
    assert all(t.state == "Ongoing" for t in got[0])
    assert [(t.transactional_id, t.state) for t in got[1]] == [("tx-4", "Ongoing")]
    asked = {node for key, _, node in model.seen if key == LIST_TRANSACTIONS}
    assert asked == {0, 1, 2}


def test_describe_transactions_leaves_unknown_ids_out() -> None:
    model = CoordinatorModel(world(7))
    txn = model.add("tx-d", partitions={("t", 0), ("t", 2)})
    got: list[Any] = []

    async def body(admin: Admin) -> None:
        got.append(await admin.describe_transactions(["tx-d", "never-used", "tx-d"]))

    run(model, body)
    (description,) = got[0].values()
    assert description.transactional_id == "tx-d"
    assert (description.state, description.producer_id, description.producer_epoch) == (
        "Ongoing",
        txn.producer_id,
        txn.epoch,
    )
    assert description.topic_partitions == {TopicPartition("t", 0), TopicPartition("t", 2)}


def test_require_stable_waits_for_the_transaction_then_returns_its_offset() -> None:
    model = CoordinatorModel(world(8))
    tp = TopicPartition("t", 1)
    model.pending["g"] = {tp: (7, "batch-7")}
    got: list[Any] = []

    def commit_pending() -> None:
        model.offsets["g"] = dict(model.pending.pop("g"))

    async def body(admin: Admin) -> None:
        asyncio.get_running_loop().call_later(2.0, commit_pending)
        got.append(await admin.list_consumer_group_offsets("g", [tp], require_stable=True))
        got.append(await admin.list_consumer_group_offsets("g"))

    run(model, body)
    assert got == [{tp: OffsetAndMetadata(7, "batch-7")}] * 2
    assert model.count(OFFSET_FETCH) > 3  # UNSTABLE_OFFSET_COMMIT was asked again


def test_require_stable_times_out_with_the_unstable_error_as_cause() -> None:
    model = CoordinatorModel(world(9))
    tp = TopicPartition("t", 0)
    model.offsets["g"] = {tp: (3, "old")}
    model.pending["g"] = {tp: (9, "new")}
    got: list[Any] = []

    async def body(admin: Admin) -> None:
        with pytest.raises(KafkaTimeoutError) as caught:
            await admin.list_consumer_group_offsets("g", [tp], require_stable=True)
        assert isinstance(caught.value.__cause__, UnstableOffsetCommitError)
        got.append(await admin.list_consumer_group_offsets("g", [tp]))  # the stable one

    run(model, body, max_block_ms=3_000)
    assert got == [{tp: OffsetAndMetadata(3, "old")}]


@pytest.mark.parametrize("delay_ms", [150, 250, 400, 700])
def test_require_stable_keeps_the_unstable_cause_when_the_deadline_cuts_the_last_try(
    delay_ms: int,
) -> None:
    # Every answer comes late: the last try starts with less time left than an answer
    # takes, and times out only because the deadline cut its request timeout short. The
    # cause stays the broker's UNSTABLE_OFFSET_COMMIT (seen on a busy machine: "node 1 did
    # not answer OffsetFetchRequest within 2 ms" was reported instead).
    faults = FaultSchedule(windows=[FaultWindow("delay_response", 1.0, 0, 10**9, delay_ms)])
    model = CoordinatorModel(world(9, faults))
    tp = TopicPartition("t", 0)
    model.pending["g"] = {tp: (9, "new")}
    causes: list[BaseException | None] = []

    async def body(admin: Admin) -> None:
        with pytest.raises(KafkaTimeoutError) as caught:
            await admin.list_consumer_group_offsets("g", [tp], require_stable=True)
        causes.append(caught.value.__cause__)

    run(model, body, max_block_ms=3_000)
    assert len(causes) == 1
    assert isinstance(causes[0], UnstableOffsetCommitError), causes[0]


def test_alter_then_list_offsets() -> None:
    model = CoordinatorModel(world(10))
    offsets: dict[TopicPartition, OffsetAndMetadata | int] = {
        TopicPartition("t", 0): OffsetAndMetadata(5, "m"),
        TopicPartition("t", 2): 8,
    }
    got: list[Any] = []

    async def body(admin: Admin) -> None:
        await admin.alter_consumer_group_offsets("g2", offsets)
        got.append(await admin.list_consumer_group_offsets("g2"))
        got.append(await admin.list_consumer_group_offsets("g2", [TopicPartition("t", 1)]))

    run(model, body)
    assert got == [
        {
            TopicPartition("t", 0): OffsetAndMetadata(5, "m"),
            TopicPartition("t", 2): OffsetAndMetadata(8),
        },
        {},
    ]


def test_close_fails_an_operation_under_way_at_once() -> None:
    faults = FaultSchedule(windows=[FaultWindow("drop_request", 1.0, 0, 10**9)])
    model = CoordinatorModel(world(11, faults))
    prepared = prepared_for(model, "tx-c")
    spent: list[float] = []

    async def main() -> None:
        admin = model.admin(11, max_block_ms=600_000, request_timeout_ms=2_000)
        await admin.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        call = asyncio.ensure_future(admin.complete_transaction(prepared, commit=True))
        await asyncio.sleep(5)
        await admin.close()
        with pytest.raises(IllegalStateError, match="closed"):
            await call
        spent.append(loop.time() - started)

    model.world.run(main())
    assert spent[0] < 60  # virtual seconds: not the 600 s of max_block_ms
