"""ArrowValues (aiokprod/spark/encoder.py): Arrow values encoded as v2 records in bulk.

Two claims, each checked against the existing builder as the reference:

- a plan's batches are byte for byte what ``RecordBatchBuilder.try_append`` writes for the
  same values from fresh batches (nulls, empty values, 1-3 byte varints, batch-size
  boundaries, a window cut, a value too large for the bulk path);
- the producer's append path queues exactly the same batches (bytes, partitions, sizes in
  the ``BulkDelivery``) when ``send_many``'s values are an ``ArrowValues`` column as when
  they are the same values in a list, whatever state the partitions' batches are in.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import RecordTooLargeError
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.appender import RecordAppender
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.bulk_append import append_columns
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import PartitionChooser
from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder
from aiokprod.types import TopicPartition

# pyarrow comes with the spark extra, which the compiled wheels' 3.12/3.13 test venvs do not
# install; with it present, the encoder must import (an import error fails, not skips).
pa = pytest.importorskip("pyarrow")

from aiokprod.spark import encoder  # noqa: E402

ArrowValues = encoder.ArrowValues

TS = 1_700_000_000_000

values_st = st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=300)


def reference_batches(
    values: list[bytes | None], start: int, limit: int
) -> list[tuple[int, bytes, bool]]:
    """``(first record, records section, full)`` of each fresh batch try_append fills."""
    batches = []
    i = start
    while i < len(values):
        builder = RecordBatchBuilder()
        first = i
        while i < len(values) and not builder.full:
            if builder.try_append(TS, None, values[i], None, limit) < 0:
                break
            i += 1
        batches.append((first, bytes(builder._buf[BATCH_HEADER_SIZE:]), builder.full))
    return batches


def check_plan(values: list[bytes | None], start: int, limit: int, max_value_size: int) -> Any:
    kind = pa.binary() if len(values) % 2 else pa.large_binary()  # both offset widths
    plan = ArrowValues(pa.array(values, kind)).encode_batches(start, limit, max_value_size)
    expected = reference_batches(values, start, limit)
    assert plan.firsts[0] == start
    for k, first in enumerate(plan.firsts[:-1]):
        ref_first, ref_bytes, ref_full = expected[k]
        assert first == ref_first
        got = bytes(plan.data[plan.positions[k] : plan.positions[k + 1]])
        ref_end = expected[k + 1][0] if k + 1 < len(expected) else len(values)
        if plan.firsts[k + 1] < ref_end:  # the plan stops inside this batch (window, limit)
            assert plan.next_sizes[k] == -1
            ref_bytes = ref_bytes[: len(got)]
        assert got == ref_bytes
        first_builder = RecordBatchBuilder()
        first_builder.try_append(TS, None, values[first], None, limit)
        assert plan.first_sizes[k] == first_builder.size_in_bytes - BATCH_HEADER_SIZE
        used = BATCH_HEADER_SIZE + len(got)
        nxt = plan.next_sizes[k]
        full = used >= limit or (nxt >= 0 and used + nxt > limit)
        if plan.firsts[k + 1] < len(values) and nxt >= 0:
            assert full == ref_full
            assert full  # a batch ends early only because it is full
    end = plan.firsts[-1]
    assert list(plan.value_sizes(start, end)) == [
        -1 if v is None else len(v) for v in values[start:end]
    ]
    return plan


@settings(max_examples=300, deadline=None)
@given(
    values=values_st,
    limit=st.integers(min_value=70, max_value=40_000),
    data=st.data(),
)
def test_planned_batches_are_what_the_builder_writes(
    values: list[bytes | None], limit: int, data: st.DataObject
) -> None:
    start = data.draw(st.integers(min_value=0, max_value=len(values) - 1))
    plan = check_plan(values, start, limit, 10**9)
    assert plan.firsts[-1] == len(values)  # no window cut, no value too large


@pytest.mark.parametrize(
    ("size", "count", "limit"),
    [
        (8191, 3, 100_000),  # value length varint: 2 bytes
        (8192, 3, 100_000),  # 3 bytes, and the framing is encoded, not taken from the table
        (70_000, 2, 1_000_000),
        (0, 9000, 200_000),  # empty values: a batch longer than a plan (8,192 records)
        (100, 200, 16_384),  # offset deltas past 64 in each batch
    ],
)
def test_varint_widths(size: int, count: int, limit: int) -> None:
    values: list[bytes | None] = [bytes([i % 251]) * size for i in range(count)]
    check_plan(values, 0, limit, 10**9)


def test_offset_deltas_past_8192(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 20_000)
    plan = check_plan([b""] * 9000, 0, 200_000, 10**9)
    assert plan.firsts == [0, 9000]


def test_a_window_ends_after_a_full_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 25)
    values: list[bytes | None] = [b"x" * 90] * 100
    plan = check_plan(values, 3, 1000, 10**9)
    assert 3 < plan.firsts[-1] <= 28
    assert plan.next_sizes[-1] > 0  # the last planned batch is full: the next did not fit
    one = check_plan(values, 3, 100_000, 10**9)  # a batch longer than the window
    assert one.firsts == [3, 28]
    assert one.next_sizes == [-1]


def test_the_plan_ends_before_a_value_too_large_for_the_bulk_path() -> None:
    values: list[bytes | None] = [b"a" * 10, b"b" * 10, b"c" * 500, b"d" * 10]
    plan = check_plan(values, 0, 16_384, 100)
    assert plan.firsts == [0, 2]
    assert plan.next_sizes == [-1]
    assert check_plan(values, 2, 16_384, 100).firsts[-1] == 4  # it may open a plan


def test_sliced_arrays_and_strings_viewed_as_binary() -> None:
    array_ = pa.array(["", None, "é", "xyz" * 40, None, "last"])[1:]
    column = ArrowValues(array_.view(pa.binary()))
    assert list(column) == [None, "é".encode(), b"xyz" * 40, None, b"last"]
    assert [column.value(i) for i in range(len(column))] == list(column)
    assert list(column.values_from(3)) == [None, b"last"]
    plan = column.encode_batches(0, 16_384, 10**9)
    builder = RecordBatchBuilder()
    for value in column:
        builder.try_append(TS, None, value, None, 16_384)
    assert bytes(plan.data[plan.positions[0] : plan.positions[1]]) == bytes(
        builder._buf[BATCH_HEADER_SIZE:]
    )
    with pytest.raises(TypeError):
        ArrowValues(array_)
    assert not ArrowValues.takes(pa.binary_view())  # the writer sends these as a list
    assert ArrowValues.takes(pa.large_binary())


# --- the append path ---------------------------------------------------------------------


class Clock:
    def monotonic_ms(self) -> int:
        return 1_000


def appender(batch_size: int, seed: int, record_limit: int = 1_000_000) -> RecordAppender:
    acc = RecordAccumulator(
        batch_size=batch_size, linger_ms=5, delivery_timeout_ms=120_000, budget=ByteBudget(1 << 30)
    )
    return RecordAppender(
        acc,
        acc.budget,
        PartitionChooser("builtin", batch_size, rng=random.Random(seed)),
        record_limit=record_limit,
        max_block_ms=1000,
        max_request_size=1_000_000,
        clock=Clock(),
        check_running=lambda: None,
    )


INFO = TopicInfo("t", (1,) * 6, (0,) * 6, tuple(range(6)))


async def send(
    app: RecordAppender, values: Any, partition: int | None, timestamp_ms: int = TS
) -> BulkDelivery:
    bulk = BulkDelivery()
    await append_columns(
        app,
        bulk,
        "t",
        None,
        values,
        partition=partition,
        timestamp_ms=timestamp_ms,
        header_bytes=None,
        info=INFO,
        started_ms=-1,
        key_serializer=None,
        value_serializer=None,
        hasher=None,
    )
    return bulk


def queued(app: RecordAppender) -> dict[int, list[tuple[int, bool, bytes]]]:
    acc = app._acc
    out = {}
    for p in range(6):
        batches = acc.queued(TopicPartition("t", p))
        out[p] = [(b.record_count, b.is_full, bytes(b.close().data)) for b in batches]
    return out


def bulk_state(bulk: BulkDelivery) -> tuple[Any, ...]:
    segments = [(s.tp, s.start, s.count) for s in bulk._segments]
    return segments, list(bulk._key_sizes), list(bulk._value_sizes), list(bulk._timestamps)


async def both(
    batch_size: int,
    seed: int,
    calls: list[tuple[list[bytes | None], int | None]],
    record_limit: int,
) -> None:
    """The same calls with lists and with columns: the same batches and deliveries."""
    plain, columnar = (
        appender(batch_size, seed, record_limit),
        appender(batch_size, seed, record_limit),
    )
    for n, (values, partition) in enumerate(calls):
        ts = TS + n  # later calls find batches based at an earlier time
        results: list[tuple[str, object]] = []
        for app, arg in (
            (plain, list(values)),
            (columnar, ArrowValues(pa.array(values, pa.binary()))),
        ):
            try:
                results.append(("ok", bulk_state(await send(app, arg, partition, ts))))
            except RecordTooLargeError as exc:
                results.append(("too large", str(exc)))
        assert results[0] == results[1]
    assert queued(plain) == queued(columnar)
    for batches in queued(columnar).values():
        for _, _, data in batches:
            read_record_batch(data)  # well-formed (CRC, lengths)


calls_st = st.lists(
    st.tuples(values_st, st.one_of(st.none(), st.integers(min_value=0, max_value=5))),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(
    calls=calls_st,
    batch_size=st.integers(min_value=80, max_value=20_000),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_the_append_path_queues_the_same_batches_for_a_column(
    calls: list[tuple[list[bytes | None], int | None]], batch_size: int, seed: int
) -> None:
    asyncio.run(both(batch_size, seed, calls, 1_000_000))


def test_a_value_too_large_fails_at_the_same_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 10)
    values: list[bytes | None] = [b"v" * 50] * 30
    values += [b"x" * 2000] + [b"w" * 50] * 5
    asyncio.run(both(1000, 7, [(values, None), (values[:25], 2)], 1500))


def test_long_runs_many_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 37)
    plans = []
    encode = ArrowValues.encode_batches

    def counted(self: Any, start: int, *args: Any) -> Any:
        plans.append(start)
        return encode(self, start, *args)

    monkeypatch.setattr(ArrowValues, "encode_batches", counted)
    rng = random.Random(5)
    values: list[bytes | None] = [
        None if rng.random() < 0.05 else bytes(rng.randrange(150)) for _ in range(3000)
    ]
    asyncio.run(both(2000, 3, [(values, None), (values, None), (values, 4)], 1_000_000))
    assert len(plans) > 3 * 3000 // 37 // 2  # the bulk copies, not the record-by-record path


def test_append_encoded_checks_the_state_it_was_encoded_for() -> None:
    first = RecordBatchBuilder()
    first.try_append(TS, None, b"one", None, 16_384)
    rest = RecordBatchBuilder()
    for value in (b"one", b"two", None):
        rest.try_append(TS, None, value, None, 16_384)
    records = bytes(rest._buf[first.size_in_bytes :])
    size = first.size_in_bytes

    def fresh(ts: int = TS) -> RecordBatchBuilder:
        builder = RecordBatchBuilder()
        builder.try_append(ts, None, b"one", None, 16_384)
        return builder

    assert not fresh().append_encoded(TS, records, 2, 2, size, 16_384, -1)  # count differs
    assert not fresh().append_encoded(TS, records, 2, 1, size + 1, 16_384, -1)  # size differs
    assert not fresh(TS - 1).append_encoded(TS, records, 2, 1, size, 16_384, -1)  # base time
    assert not fresh().append_encoded(TS, records, 2, 1, size, size + len(records) - 1, -1)
    nothing = fresh()
    assert nothing.append_encoded(TS, b"", 0, 1, size, size + 10, 11)  # the next cannot fit
    assert nothing.full
    assert nothing.record_count == 1
    builder = fresh()
    assert builder.append_encoded(TS, records, 2, 1, size, 16_384, -1)
    assert not builder.full
    assert builder.record_count == 3
    assert bytes(builder.close().data) == bytes(rest.close().data)
    full = fresh()
    limit = size + len(records) + 5
    assert full.append_encoded(TS, records, 2, 1, size, limit, 6)  # the next would not fit
    assert full.full
    assert not full.append_encoded(TS, records, 2, 3, full.size_in_bytes, 1 << 20, -1)
    exact = fresh()
    assert exact.append_encoded(TS, records, 2, 1, size, size + len(records), -1)
    assert exact.full
