"""BatchResult, DeliveryFuture and ProducerBatch: one completion per batch, light handles."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from aiokprod.errors import DeliveryTimeoutError, InvalidRecordError, NotLeaderOrFollowerError
from aiokprod.internals.batch import (
    BatchResult,
    DeliveryFuture,
    FinalState,
    ProducerBatch,
    record_metadata,
)
from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.types import UNKNOWN_OFFSET, RecordMetadata, TopicPartition

TP = TopicPartition("events", 3)

#: A hang (a waiter never woken) fails fast instead of stalling the run.
pytestmark = pytest.mark.timeout(10)


def handles(result: BatchResult, count: int = 3) -> list[DeliveryFuture]:
    return [
        DeliveryFuture(result, i, TP, timestamp_ms=1000 + i, key_size=i, value_size=10 + i)
        for i in range(count)
    ]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --- DeliveryFuture results -----------------------------------------------------------------


def test_offsets_are_base_offset_plus_index() -> None:
    result = BatchResult()
    futures = handles(result)
    result.succeed(500, -1)
    metadata = [f.result() for f in futures]
    assert [m.offset for m in metadata] == [500, 501, 502]
    assert metadata[2] == RecordMetadata("events", 3, 502, 1002, 2, 12)
    assert all(m.has_offset for m in metadata)


def test_create_time_timestamps_are_per_record() -> None:
    result = BatchResult()
    futures = handles(result)
    result.succeed(0, -1)
    assert [f.result().timestamp_ms for f in futures] == [1000, 1001, 1002]


def test_log_append_time_replaces_every_timestamp() -> None:
    result = BatchResult()
    futures = handles(result)
    result.succeed(0, 77_777)
    assert [f.result().timestamp_ms for f in futures] == [77_777] * 3


def test_unknown_base_offset_gives_unknown_offsets() -> None:
    """acks=0: the broker does not answer, offsets are unknown for every record."""
    result = BatchResult()
    futures = handles(result)
    result.succeed(UNKNOWN_OFFSET, -1)
    for f in futures:
        assert f.result().offset == UNKNOWN_OFFSET
        assert not f.result().has_offset


def test_serialized_sizes_are_reported() -> None:
    result = BatchResult()
    future = DeliveryFuture(result, 0, TP, 5, key_size=-1, value_size=-1)
    result.succeed(1, -1)
    assert (future.result().serialized_key_size, future.result().serialized_value_size) == (
        -1,
        -1,
    )


def test_not_done_raises_invalid_state() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    assert not future.done()
    with pytest.raises(asyncio.InvalidStateError):
        future.result()
    with pytest.raises(asyncio.InvalidStateError):
        future.exception()
    assert "pending" in repr(future)


def test_failure_is_raised_by_every_record() -> None:
    result = BatchResult()
    futures = handles(result)
    error = DeliveryTimeoutError("too late")
    result.fail(error)
    for f in futures:
        assert f.done()
        assert f.exception() is error
        with pytest.raises(DeliveryTimeoutError):
            f.result()
    assert "failed" in repr(futures[0])


def test_per_record_errors_override_the_batch_error() -> None:
    result = BatchResult()
    futures = handles(result)
    batch_error = InvalidRecordError("batch")
    own = InvalidRecordError("record 1 is bad")
    result.fail(batch_error, {1: own})
    assert futures[0].exception() is batch_error
    assert futures[1].exception() is own
    assert futures[2].exception() is batch_error
    with pytest.raises(InvalidRecordError, match="record 1 is bad"):
        futures[1].result()


def test_second_completion_is_ignored() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    result.succeed(10, -1)
    result.fail(NotLeaderOrFollowerError())
    result.succeed(99, -1)
    assert future.exception() is None
    assert future.result().offset == 10
    assert "done" in repr(future)


def test_result_is_cached_metadata() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    result.succeed(3, -1)
    first = future.result()
    assert first.offset == 3
    assert future.result() is first  # made once: a second call returns the same object


def test_cancel_is_refused() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    assert future.cancel() is False
    assert future.cancelled() is False
    assert not future.done()
    result.succeed(0, -1)
    assert future.cancel() is False
    assert future.cancelled() is False
    assert future.result().offset == 0


# --- callbacks ------------------------------------------------------------------------------


def test_done_callback_runs_on_completion_with_the_handle() -> None:
    result = BatchResult()
    futures = handles(result)
    seen: list[tuple[DeliveryFuture, int]] = []
    for f in futures:
        f.add_done_callback(lambda done: seen.append((done, done.result().offset)))
    assert seen == []
    result.succeed(40, -1)
    assert seen == [(futures[0], 40), (futures[1], 41), (futures[2], 42)]
    result.succeed(50, -1)  # ignored: callbacks run once
    assert len(seen) == 3


def test_done_callback_after_completion_runs_at_once() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    result.fail(DeliveryTimeoutError("x"))
    seen: list[BaseException | None] = []
    future.add_done_callback(lambda done: seen.append(done.exception()))
    assert len(seen) == 1
    assert isinstance(seen[0], DeliveryTimeoutError)


def test_raising_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    result = BatchResult()
    calls: list[str] = []

    def bad(_: None) -> None:
        calls.append("bad")
        raise RuntimeError("user bug")

    result.add_callback(bad, None)
    result.add_callback(calls.append, "good")
    with caplog.at_level(logging.ERROR, logger="aiokprod.batch"):
        result.succeed(0, -1)
    assert calls == ["bad", "good"]
    assert result.done
    assert "delivery callback raised" in caplog.text


# --- awaiting -------------------------------------------------------------------------------


async def test_await_before_completion() -> None:
    result = BatchResult()
    futures = handles(result)

    async def wait(f: DeliveryFuture) -> RecordMetadata:
        return await f

    tasks = [asyncio.create_task(wait(f)) for f in futures]
    await settle()
    assert not any(t.done() for t in tasks)
    result.succeed(7, -1)
    offsets = [(await t).offset for t in tasks]
    assert offsets == [7, 8, 9]


async def test_await_after_completion() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    result.succeed(12, -1)
    metadata = await future
    assert metadata.offset == 12
    assert metadata.topic == "events"
    assert metadata.partition == 3


async def test_await_raises_the_failure() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    task = asyncio.create_task(_await(future))
    await settle()
    result.fail(NotLeaderOrFollowerError("moved"))
    with pytest.raises(NotLeaderOrFollowerError, match="moved"):
        await task


async def _await(future: DeliveryFuture) -> RecordMetadata:
    return await future


async def test_same_handle_awaited_by_several_tasks() -> None:
    result = BatchResult()
    (future,) = handles(result, 1)
    tasks = [asyncio.create_task(_await(future)) for _ in range(3)]
    await settle()
    result.succeed(5, -1)
    assert [(await t).offset for t in tasks] == [5, 5, 5]


async def test_cancelling_one_awaiter_does_not_affect_the_others() -> None:
    result = BatchResult()
    first, second = handles(result, 2)
    cancelled = asyncio.create_task(_await(first))
    other_same_handle = asyncio.create_task(_await(first))
    other_handle = asyncio.create_task(_await(second))
    await settle()
    cancelled.cancel()
    await settle()
    assert cancelled.cancelled()
    assert not first.done()  # the delivery goes on
    result.succeed(100, -1)
    assert (await other_same_handle).offset == 100
    assert (await other_handle).offset == 101
    assert first.result().offset == 100


async def test_batch_result_wait() -> None:
    result = BatchResult()
    waiter = asyncio.create_task(result.wait())
    await settle()
    assert not waiter.done()
    result.fail(DeliveryTimeoutError("x"))
    await waiter  # wait() does not raise the batch error
    await result.wait()  # returns at once when done
    assert result.error is not None


# --- ProducerBatch --------------------------------------------------------------------------


def make_batch(records: int = 2, now_ms: int = 0) -> ProducerBatch:
    builder = RecordBatchBuilder()
    batch = ProducerBatch(TP, builder, now_ms, reserved_bytes=1024)
    for i in range(records):
        assert builder.try_append(100 + i, b"k%d" % i, b"value-%d" % i) == i
    return batch


def test_new_batch_state() -> None:
    batch = make_batch(now_ms=42)
    assert batch.created_ms == 42
    assert batch.record_count == 2
    assert batch.size_in_bytes > 61
    assert batch.attempts == 0
    assert batch.final_state is None
    assert not batch.has_sequence
    assert batch.handles is None
    assert ProducerBatch(TP, RecordBatchBuilder(), 0, 1, keep_handles=True).handles == []


def test_close_is_idempotent_and_frees_the_builder() -> None:
    batch = make_batch()
    closed = batch.close()
    assert batch.builder is None
    assert batch.close() is closed
    assert batch.record_count == 2
    assert batch.size_in_bytes == len(closed.data)
    decoded = read_record_batch(closed.data)
    assert [r.value for r in decoded.records] == [b"value-0", b"value-1"]
    assert decoded.producer_id == -1
    assert decoded.base_sequence == -1


def test_stamp_writes_idempotence_fields_with_a_valid_crc() -> None:
    batch = make_batch()
    batch.stamp(1234, 5, 77)
    assert batch.has_sequence
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 77)
    decoded = read_record_batch(batch.close().data)  # checks the CRC
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (1234, 5, 77)
    batch.stamp(1234, 6, 0)  # re-stamped after an epoch bump
    decoded = read_record_batch(batch.close().data)
    assert (decoded.producer_epoch, decoded.base_sequence) == (6, 0)


def test_complete_once() -> None:
    batch = make_batch()
    handle = DeliveryFuture(batch.result, 1, TP, 101, 2, 7)
    assert batch.complete(900, -1) is True
    assert batch.final_state is FinalState.SUCCEEDED
    assert batch.complete(1, -1) is False
    assert batch.fail(DeliveryTimeoutError("late")) is False
    assert batch.final_state is FinalState.SUCCEEDED
    assert handle.result().offset == 901


def test_fail_and_abort_states() -> None:
    failed = make_batch()
    error = DeliveryTimeoutError("late")
    assert failed.fail(error) is True
    assert failed.final_state is FinalState.FAILED
    assert failed.result.error is error
    assert failed.complete(0, -1) is False

    aborted = make_batch()
    assert aborted.fail(error, aborted=True) is True
    assert aborted.final_state is FinalState.ABORTED
    assert aborted.result.done


def test_fail_passes_record_errors_to_handles() -> None:
    batch = make_batch()
    own = InvalidRecordError("bad record")
    h0 = DeliveryFuture(batch.result, 0, TP, 100, 2, 7)
    h1 = DeliveryFuture(batch.result, 1, TP, 101, 2, 7)
    batch.fail(InvalidRecordError("batch"), {0: own})
    assert h0.exception() is own
    assert h1.exception() is batch.result.error


def test_record_metadata_makes_what_the_constructor_makes() -> None:
    # Every field of the dataclass is set (a field added later and not set here would fail
    # this comparison), and the result is the same frozen, hashable object.
    made = record_metadata("t", 3, 42, 1_700_000_000_000, -1, 100)
    assert made == RecordMetadata("t", 3, 42, 1_700_000_000_000, -1, 100)
    assert [getattr(made, f.name) for f in dataclasses.fields(RecordMetadata)] == [
        "t",
        3,
        42,
        1_700_000_000_000,
        -1,
        100,
    ]
    assert hash(made) == hash(RecordMetadata("t", 3, 42, 1_700_000_000_000, -1, 100))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.offset = 1  # type: ignore[misc]
