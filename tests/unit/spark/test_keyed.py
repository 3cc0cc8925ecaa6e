"""Keyed Arrow columns (aiokprod/spark/keyed.py, encoder.py): hashed, split, encoded in bulk.

Each claim is checked against the per-record code it replaces:

- :func:`keyed.murmur2` of a column is :func:`partitioner.murmur2` of each key, bit for bit,
  and :func:`keyed.partitions` the built-in partitioner's choice for each key (the Java
  client's: ``tests/integration/test_java_partitioner.py`` checks that one against Kafka's
  jar);
- a keyed plan's batches are byte for byte what ``RecordBatchBuilder.try_append`` writes for
  the same keys and values;
- the producer's append path puts every record of a keyed column where it puts the same
  record given in lists (``to_pylist()``, hashed per key): the same partition, batch and
  offset, the same metadata for each input row, the same batches byte for byte, whatever
  state the partitions' batches are in; it refuses a record too large the same way, and
  appends the partitions' batches in turn (each Produce request can carry one batch of
  every partition).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import RecordTooLargeError
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.appender import RecordAppender
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.bulk import BulkDelivery, bulk_columns
from aiokprod.internals.bulk_append import append_columns
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import (
    KeyHasher,
    PartitionChooser,
    murmur2,
    murmur2_hasher,
    murmur3_hasher,
)
from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import BATCH_HEADER_SIZE, RecordBatchBuilder
from aiokprod.types import TopicPartition

pa = pytest.importorskip("pyarrow")

from aiokprod.spark import encoder, keyed  # noqa: E402

ArrowValues = encoder.ArrowValues
TS = 1_700_000_000_000

keys_st = st.binary(max_size=70)
values_st = st.one_of(st.none(), st.binary(max_size=300))


# --- murmur2 and the partitions ----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(keys_st, min_size=1, max_size=200), large=st.booleans(), cut=st.data())
def test_murmur2_of_a_column_is_murmur2_of_each_key(
    keys: list[bytes], large: bool, cut: st.DataObject
) -> None:
    array = pa.array(keys, pa.large_binary() if large else pa.binary())
    start = cut.draw(st.integers(min_value=0, max_value=len(keys) - 1))
    array = array.slice(start)  # an offset into the buffers, as Spark's batches may have
    assert keyed.murmur2(array).tolist() == [murmur2(k) for k in keys[start:]]


def test_murmur2_of_every_length_and_byte() -> None:
    rng = random.Random(37)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(0, 80) for _ in range(3)]
    keys += [b"\xff" * n for n in range(12)] + [b"\x00" * n for n in range(12)]
    keys += ["ключ-ü-🙂".encode(), b"k1234", b"k0"]
    hashes = keyed.murmur2(pa.array(keys, pa.binary())).tolist()
    assert hashes == [murmur2(k) for k in keys]
    assert len(set(hashes)) > len(keys) * 0.9  # not vacuous: they differ
    assert keyed.murmur2(pa.array([], pa.binary())).tolist() == []
    with pytest.raises(ValueError, match="null"):
        keyed.murmur2(pa.array([b"a", None], pa.binary()))


@pytest.mark.parametrize("count", [1, 2, 3, 6, 7, 12, 100, 1000])
def test_partitions_are_the_built_in_partitioners(count: int) -> None:
    rng = random.Random(count)
    keys = [f"k{i % 10_000}".encode() for i in range(3000)]
    keys += [rng.randbytes(rng.randrange(0, 40)) for _ in range(2000)]
    chooser = PartitionChooser("builtin", batch_size=16_384)
    expected = [chooser.choose("t", k, count, list(range(count)))[0] for k in keys]
    assert keyed.partitions(pa.array(keys, pa.binary()), count).tolist() == expected


def test_split_keeps_each_partitions_rows_in_order() -> None:
    keys = [f"user-{i % 50}".encode() for i in range(1000)]
    values = [f"v{i}".encode() for i in range(1000)]
    hasher = murmur2_hasher()
    split = ArrowValues(pa.array(values), pa.array(keys)).split_by_murmur2(6)
    assert split is not None
    order, column, runs = split
    assert column.keys is not None
    assert [p for p, _, _ in runs] == sorted({hasher.partition(k, 6) for k in keys})
    assert [start for _, start, _ in runs] == [0] + [stop for _, _, stop in runs[:-1]]
    assert runs[-1][2] == len(column) == len(keys)
    rows = list(zip(column.keys, column, strict=True))
    assert [(keys[i], values[i]) for i in order] == rows
    for p, start, stop in runs:
        expected = [
            (k, v) for k, v in zip(keys, values, strict=True) if hasher.partition(k, 6) == p
        ]
        assert rows[start:stop] == expected
    # its plans end a batch where a partition's records end
    plan = column.encode_batches(0, 1 << 20, 10**9)
    assert plan.firsts == [start for _, start, _ in runs] + [len(keys)]
    assert plan.next_sizes == [-1] * len(runs)
    one = keyed.split_by_partition(pa.array(values[:3]), pa.array([b"same"] * 3), 6)
    assert list(one[0]) == [0, 1, 2]
    assert list(one[1]) == values[:3]
    assert one[2] == [(hasher.partition(b"same", 6), 0, 3)]
    assert ArrowValues(pa.array(values)).split_by_murmur2(6) is None  # unkeyed


# --- keyed plans ---------------------------------------------------------------------------


def reference_batches(
    keys: list[bytes], values: list[bytes | None], start: int, limit: int
) -> list[tuple[int, bytes, bool]]:
    """``(first record, records section, full)`` of each fresh batch try_append fills."""
    batches = []
    i = start
    while i < len(values):
        builder = RecordBatchBuilder()
        first = i
        while i < len(values) and not builder.full:
            if builder.try_append(TS, keys[i], values[i], None, limit) < 0:
                break
            i += 1
        batches.append((first, bytes(builder._buf[BATCH_HEADER_SIZE:]), builder.full))
    return batches


def check_plan(
    keys: list[bytes], values: list[bytes | None], start: int, limit: int, largest: int
) -> Any:
    kind = pa.binary() if len(values) % 2 else pa.large_binary()  # both offset widths
    key_kind = pa.binary() if len(values) % 3 else pa.large_binary()  # cast to the values'
    column = ArrowValues(pa.array(values, kind), pa.array(keys, key_kind))
    plan = column.encode_batches(start, limit, largest)
    expected = reference_batches(keys, values, start, limit)
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
        first_builder.try_append(TS, keys[first], values[first], None, limit)
        assert plan.first_sizes[k] == first_builder.size_in_bytes - BATCH_HEADER_SIZE
        nxt = plan.next_sizes[k]
        used = BATCH_HEADER_SIZE + len(got)
        if plan.firsts[k + 1] < len(values) and nxt >= 0:
            assert ref_full
            assert used >= limit or used + nxt > limit
    end = plan.firsts[-1]
    assert list(plan.value_sizes(start, end)) == [
        -1 if v is None else len(v) for v in values[start:end]
    ]
    assert list(plan.key_sizes(start, end)) == [len(k) for k in keys[start:end]]
    return plan


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.tuples(keys_st, values_st), min_size=1, max_size=300),
    limit=st.integers(min_value=70, max_value=40_000),
    data=st.data(),
)
def test_keyed_plans_are_what_the_builder_writes(
    records: list[tuple[bytes, bytes | None]], limit: int, data: st.DataObject
) -> None:
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    start = data.draw(st.integers(min_value=0, max_value=len(values) - 1))
    plan = check_plan(keys, values, start, limit, 10**9)
    assert plan.firsts[-1] == len(values)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.tuples(keys_st, values_st), min_size=2, max_size=200),
    limit=st.integers(min_value=70, max_value=20_000),
    data=st.data(),
)
def test_plans_end_batches_at_the_breaks(
    records: list[tuple[bytes, bytes | None]], limit: int, data: st.DataObject
) -> None:
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    n = len(records)
    breaks = sorted(set(data.draw(st.lists(st.integers(min_value=1, max_value=n - 1)))))
    start = data.draw(st.integers(min_value=0, max_value=n - 1))
    column = ArrowValues(pa.array(values, pa.binary()), pa.array(keys), breaks)
    plan = column.encode_batches(start, limit, 10**9)
    bounds = [start, *(b for b in breaks if b > start), n]
    expected = []  # each partition's records from fresh batches, as try_append fills them
    for a, b in itertools.pairwise(bounds):
        for first, data_, full in reference_batches(keys[:b], values[:b], a, limit):
            expected.append((first, data_, full, b))
    assert plan.firsts == [first for first, _, _, _ in expected] + [n]
    for k, (_, data_, full, segment_end) in enumerate(expected):
        assert bytes(plan.data[plan.positions[k] : plan.positions[k + 1]]) == data_
        last = plan.firsts[k + 1] == segment_end
        assert (plan.next_sizes[k] == -1) == last  # nothing follows in its partition
        if not last:
            assert full


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.tuples(keys_st, values_st), min_size=1, max_size=200),
    already=st.lists(st.tuples(keys_st, values_st), min_size=1, max_size=30),
    limit=st.integers(min_value=70, max_value=20_000),
    delta=st.sampled_from([0, 1, 63, 64, 100_000, -5]),
    keyed_=st.booleans(),
)
def test_a_plan_continues_an_open_batch(
    records: list[tuple[bytes, bytes | None]],
    already: list[tuple[bytes, bytes | None]],
    limit: int,
    delta: int,
    keyed_: bool,
) -> None:
    """The records from an open batch on: what try_append adds to it, then fresh batches."""
    if not keyed_:
        records = [(b"", v) for _, v in records]
    builder = RecordBatchBuilder()
    for key, value in already:  # an open batch, based ``delta`` ms before the plan's time
        if (
            builder.full
            or builder.try_append(TS - delta, key if keyed_ else None, value, None, limit) < 0
        ):
            break
    if builder.full:
        return
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    column = ArrowValues(pa.array(values, pa.binary()), pa.array(keys) if keyed_ else None)
    opens = {0: (builder.record_count, builder.size_in_bytes, delta)}
    plan = column.encode_batches(0, limit, 10**9, -1, opens)
    assert plan.continuation_at(0) == 0
    assert plan.batch_at(0) == (-1 if plan.firsts[1] else 1)  # fresh from 0 if none fit
    assert plan.opened(0) == opens[0]
    reference = bytes(builder._buf)
    i = 0
    while i < len(records) and not builder.full:
        if builder.try_append(TS, keys[i] if keyed_ else None, values[i], None, limit) < 0:
            break
        i += 1
    assert plan.firsts[1] == i  # the records that fit the open batch
    assert bytes(plan.rest(0)) == bytes(builder._buf)[len(reference) :]
    if i < len(records):
        assert plan.next_sizes[0] > 0 or builder.full
    rest = [(keys[j], values[j]) for j in range(i, len(records))]
    if rest and len(plan.firsts) > 2:  # then fresh batches, as try_append fills them
        fresh = reference_batches(
            [k if keyed_ else None for k, _ in rest],  # type: ignore[misc]
            [v for _, v in rest],
            0,
            limit,
        )
        assert plan.firsts[1:-1] == [i + first for first, _, _ in fresh][: len(plan.firsts) - 2]


@pytest.mark.parametrize(
    ("key_size", "size", "count", "limit"),
    [
        (64, 100, 200, 16_384),  # key length varint: 2 bytes
        (8192, 10, 3, 100_000),  # 3 bytes: encoded, not from the table
        (5, 1024, 100, 16_384),
        (0, 0, 9000, 200_000),  # empty keys and values: a batch longer than a plan
    ],
)
def test_keyed_varint_widths(key_size: int, size: int, count: int, limit: int) -> None:
    keys = [bytes([i % 7]) * key_size for i in range(count)]
    values: list[bytes | None] = [bytes([i % 251]) * size for i in range(count)]
    check_plan(keys, values, 0, limit, 10**9)


def test_a_keyed_plan_ends_before_a_record_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [b"k" * 10, b"k" * 60, b"k" * 10, b"k"]
    values: list[bytes | None] = [b"a" * 10, b"b" * 50, None, b"d"]
    plan = check_plan(keys, values, 0, 16_384, 100)  # 60 + 50 bytes > 100
    assert plan.firsts == [0, 1]
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 2)
    assert check_plan(keys, values, 2, 16_384, 100).firsts == [2, 4]


def test_keyed_column_records() -> None:
    keys = pa.array(["a", "bb", "ccc", "", "e"]).view(pa.binary()).slice(1)
    values = pa.array([b"1", None, b"333", b"", b"5"]).slice(1)
    column = ArrowValues(values, keys)
    assert column.keys is not None
    assert list(column.keys) == [b"bb", b"ccc", b"", b"e"]
    assert [column.keys.key(i) for i in range(4)] == list(column.keys)
    assert column.first_larger_than(3) == 1
    assert column.first_larger_than(6) == -1
    with pytest.raises(ValueError, match="null key"):
        ArrowValues(values, pa.array([b"a", None, b"c", b"d"]))
    with pytest.raises(ValueError, match="3 keys for 4 values"):
        ArrowValues(values, keys.slice(1))
    with pytest.raises(TypeError):
        ArrowValues(values, pa.array([1, 2, 3, 4]))


# --- the append path -------------------------------------------------------------------------


class Clock:
    def monotonic_ms(self) -> int:
        return 1_000


PARTITIONS = 6
INFO = TopicInfo("t", (1,) * PARTITIONS, (0,) * PARTITIONS, tuple(range(PARTITIONS)))


def appender(batch_size: int, record_limit: int = 1_000_000) -> RecordAppender:
    acc = RecordAccumulator(
        batch_size=batch_size, linger_ms=5, delivery_timeout_ms=120_000, budget=ByteBudget(1 << 30)
    )
    return RecordAppender(
        acc,
        acc.budget,
        PartitionChooser("builtin", batch_size, rng=random.Random(0)),
        record_limit=record_limit,
        max_block_ms=1000,
        max_request_size=1_000_000,
        clock=Clock(),
        check_running=lambda: None,
    )


async def send(
    app: RecordAppender,
    keys: Any,
    values: Any,
    partition: int | None,
    timestamp_ms: int,
    hasher: KeyHasher | None = None,
) -> BulkDelivery:
    bulk = BulkDelivery()
    keys, values = bulk_columns(keys, values)  # as send_many does: a keyed column stays
    handled = await append_columns(
        app,
        bulk,
        "t",
        keys,
        values,
        partition=partition,
        timestamp_ms=timestamp_ms,
        header_bytes=None,
        info=INFO,
        started_ms=-1,
        key_serializer=None,
        value_serializer=None,
        hasher=murmur2_hasher() if hasher is None else hasher,
    )
    assert handled  # not sent down the per-record path
    return bulk


def queued(app: RecordAppender) -> dict[int, list[tuple[int, bool, bytes]]]:
    acc = app._acc
    out = {}
    for p in range(PARTITIONS):
        batches = acc.queued(TopicPartition("t", p))
        out[p] = [(b.record_count, b.is_full, bytes(b.close().data)) for b in batches]
    return out


def acknowledge(app: RecordAppender) -> None:
    """Every queued batch acknowledged: each partition's offsets from 0, batch after batch."""
    for p in range(PARTITIONS):
        offset = 0
        for batch in app._acc.queued(TopicPartition("t", p)):
            if batch.final_state is None:
                batch.complete(offset, -1)
            offset += batch.record_count


def metadata(bulk: BulkDelivery, app: RecordAppender) -> list[tuple[Any, ...]]:
    """Each input record's partition, offset, sizes and time (its batches acknowledged)."""
    acknowledge(app)
    return [
        (m.partition, m.offset, m.serialized_key_size, m.serialized_value_size, m.timestamp_ms)
        for m in bulk.metadata()
    ]


async def both(
    batch_size: int,
    calls: list[tuple[list[tuple[bytes, bytes | None]], int | None]],
    limit: int,
) -> None:
    """Keyed rows as lists (hashed per key) and as a keyed column: the same everything.

    A call with a partition also sends its rows to that partition, as a column and one by
    one the way ``send()`` would.
    """
    plain, columnar = appender(batch_size, limit), appender(batch_size, limit)
    for n, (rows, partition) in enumerate(calls):
        ts = TS + n  # later calls find half-full batches based at an earlier time
        keys = [k for k, _ in rows]
        values = [v for _, v in rows]
        column = ArrowValues(pa.array(values, pa.binary()), pa.array(keys, pa.binary()))
        results: list[Any] = []
        for app, call in (
            (plain, send(plain, keys, list(values), None, ts)),
            (columnar, send(columnar, column.keys, column, None, ts)),
        ):
            try:
                results.append(("ok", metadata(await call, app)))
            except RecordTooLargeError as exc:
                results.append(("too large", str(exc)))
        assert results[0] == results[1]
        if partition is None or results[0][0] != "ok":
            continue
        bulk = await send(columnar, column.keys, column, partition, ts)
        assert [(p, k, v) for p, _, k, v, _ in metadata(bulk, columnar)] == [
            (partition, len(k), -1 if v is None else len(v)) for k, v in rows
        ]
        tp = TopicPartition("t", partition)
        for key, value in rows:
            if plain.append(tp, ts, key, value, None, None, INFO) is None:
                await plain.append_new_batch(tp, ts, key, value, None, None, INFO, -1, 1)
        acknowledge(plain)
    assert queued(plain) == queued(columnar)
    for batches in queued(columnar).values():
        for _, _, data in batches:
            read_record_batch(data)  # well-formed (CRC, lengths)


rows_st = st.lists(
    st.tuples(st.sampled_from([b"a", b"bb", b"user-17", b"k" * 70, b""]) | keys_st, values_st),
    min_size=1,
    max_size=300,
)
calls_st = st.lists(
    st.tuples(rows_st, st.one_of(st.none(), st.integers(min_value=0, max_value=5))),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(calls=calls_st, batch_size=st.integers(min_value=80, max_value=20_000))
def test_the_append_path_puts_keyed_columns_where_it_puts_lists(
    calls: list[tuple[list[tuple[bytes, bytes | None]], int | None]], batch_size: int
) -> None:
    asyncio.run(both(batch_size, calls, 1_000_000))


def test_a_keyed_record_too_large_fails_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 10)
    rows: list[tuple[bytes, bytes | None]] = [(b"k%d" % (i % 9), b"v" * 50) for i in range(30)]
    big: list[tuple[bytes, bytes | None]] = [(b"k1", b"x" * 1400), (b"k" * 1400, b"x")]
    calls = [(rows, 1), (rows[:5] + big[:1] + rows, None), (rows[:7] + big[1:], 3), (rows, 0)]
    asyncio.run(both(1000, calls, 1500))


def test_long_keyed_runs_many_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder, "WINDOW_RECORDS", 37)
    plans = []
    encode = ArrowValues.encode_batches

    def counted(self: Any, start: int, *args: Any) -> Any:
        plans.append(start)
        return encode(self, start, *args)

    monkeypatch.setattr(ArrowValues, "encode_batches", counted)
    rng = random.Random(5)
    rows: list[tuple[bytes, bytes | None]] = [
        (b"user-%d" % rng.randrange(40), None if rng.random() < 0.05 else bytes(rng.randrange(150)))
        for _ in range(3000)
    ]
    asyncio.run(both(2000, [(rows, None), (rows[:1000], 2), (rows, None)], 1_000_000))
    assert len(plans) > 2 * 3000 // 37 // 2  # the bulk copies, not the record-by-record path


def test_the_partitions_batches_are_appended_in_turn() -> None:
    async def run() -> list[int]:
        app = appender(1000)
        rows = [(b"user-%d" % (i % 97), b"v" * 90) for i in range(3000)]
        column = ArrowValues(pa.array([v for _, v in rows]), pa.array([k for k, _ in rows]))
        bulk = await send(app, column.keys, column, None, TS)
        return [s.tp.partition for s in bulk._segments]

    partitions = asyncio.run(run())
    assert len(partitions) > 60  # ~ 3000 records of ~100 bytes in 1000-byte batches
    # a batch of each partition, then of each again, ... (while each has records left)
    count = {p: partitions.count(p) for p in range(6)}
    turns = [p for turn in range(max(count.values())) for p in range(6) if count[p] > turn]
    assert partitions == turns
    assert min(count.values()) >= 5


def test_other_partitioners_hash_key_by_key() -> None:
    async def run() -> None:
        rows = [(b"user-%d" % (i % 13), b"v%d" % i) for i in range(500)]
        keys = [k for k, _ in rows]
        values: list[bytes | None] = [v for _, v in rows]
        column = ArrowValues(pa.array(values, pa.binary()), pa.array(keys))
        for hasher in (murmur3_hasher(), KeyHasher(murmur2)):  # not marked Java-compatible
            plain, columnar = appender(16_384), appender(16_384)
            bulk = await send(plain, keys, values, None, TS, hasher)
            column_bulk = await send(columnar, column.keys, column, None, TS, hasher)
            assert queued(plain) == queued(columnar)
            assert metadata(bulk, plain) == metadata(column_bulk, columnar)
        unkeyed, reference = appender(16_384), appender(16_384)
        await send(unkeyed, None, column, 2, TS)  # a keyed column without its keys: values
        await send(reference, None, values, 2, TS)
        assert queued(unkeyed) == queued(reference)

    asyncio.run(run())
