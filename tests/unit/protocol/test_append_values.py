"""RecordBatchBuilder.append_values (the bulk path's inner loop) against try_append."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import NO_LEFTOVER, RecordBatchBuilder

values_st = st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=200)


def build_with_try_append(ts: int, values: list[bytes | None], limit: int) -> tuple[bytes, int]:
    builder = RecordBatchBuilder()
    count = 0
    for value in values:
        if builder.try_append(ts, None, value, None, limit) < 0:
            break
        count += 1
    return bytes(builder.close().data), count


@settings(max_examples=200, deadline=None)
@given(values=values_st, limit=st.integers(min_value=100, max_value=20_000))
def test_same_bytes_as_try_append(values: list[bytes | None], limit: int) -> None:
    ts = 1_700_000_000_000
    builder = RecordBatchBuilder()
    sizes = array("i")
    it = iter(values)
    leftover = builder.append_values(ts, it, limit, 10**9, sizes)
    appended = builder.record_count
    if not values:
        return
    expected, expected_count = build_with_try_append(ts, values, limit)
    assert appended == expected_count
    assert bytes(builder.close().data) == expected
    assert list(sizes) == [-1 if v is None else len(v) for v in values[:appended]]
    if appended == len(values):
        assert leftover is NO_LEFTOVER
        return
    assert builder.full
    if leftover is NO_LEFTOVER:  # filled up exactly: the next value is still in the iterator
        assert next(it) == values[appended]
    else:
        assert leftover == values[appended]


def test_continues_a_batch_started_by_try_append_and_reads_back() -> None:
    builder = RecordBatchBuilder()
    builder.try_append(1000, b"k", b"first", None, 16384)
    sizes = array("i")
    leftover = builder.append_values(1005, iter([b"a", None, b"ccc"]), 16384, 100, sizes)
    assert leftover is NO_LEFTOVER
    batch = read_record_batch(builder.close().data)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in batch.records] == [
        (0, b"k", b"first", 1000),
        (1, None, b"a", 1005),
        (2, None, None, 1005),
        (3, None, b"ccc", 1005),
    ]
    assert batch.max_timestamp == 1005
    assert list(sizes) == [1, -1, 3]


@pytest.mark.parametrize("bad", ["text", 7, bytearray(b"x")])
def test_hands_back_what_it_cannot_take(bad: object) -> None:
    builder = RecordBatchBuilder()
    sizes = array("i")
    it = iter([b"ok", bad, b"never"])
    assert builder.append_values(0, it, 16384, 100, sizes) is bad
    assert builder.record_count == 1
    assert next(it) == b"never"


def test_hands_back_a_value_larger_than_max_value_size() -> None:
    builder = RecordBatchBuilder()
    big = bytes(101)
    assert builder.append_values(0, iter([big]), 16384, 100, array("i")) is big
    assert builder.record_count == 0


pairs_st = st.lists(
    st.tuples(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=300))),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(pairs=pairs_st, limit=st.integers(min_value=100, max_value=20_000))
def test_append_keyed_same_bytes_as_try_append(
    pairs: list[tuple[bytes, bytes | None]], limit: int
) -> None:
    ts = 1_700_000_000_123
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    builder = RecordBatchBuilder()
    key_sizes, value_sizes, positions = array("i"), array("i"), array("i")
    order = list(range(len(pairs)))[::-1]  # any order of indexes is allowed
    it = iter(order)
    left = builder.append_keyed(ts, keys, values, it, limit, key_sizes, value_sizes, positions)
    appended = builder.record_count
    reference = RecordBatchBuilder()
    expected = 0
    for i in order:
        if reference.try_append(ts, keys[i], values[i], None, limit) < 0:
            break
        expected += 1
    assert appended == expected
    assert list(positions) == order[:appended]
    assert list(key_sizes) == [len(keys[i]) for i in order[:appended]]
    assert list(value_sizes) == [
        -1 if values[i] is None else len(values[i]) for i in order[:appended]
    ]
    if appended:
        assert bytes(builder.close().data) == bytes(reference.close().data)
    if appended < len(order):
        assert builder.full
        assert left == order[appended] or (left == -1 and next(it) == order[appended])
    else:
        assert left == -1
