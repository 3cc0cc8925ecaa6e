"""Partition choice: Java-compatible murmur2, KIP-794 uniform sticky, round robin, custom."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokprod.errors import InvalidArgumentError
from aiokprod.internals.partitioner import (
    KeyHasher,
    PartitionChooser,
    StickyPartitionState,
    murmur2,
    murmur2_hasher,
    murmur3_hasher,
    to_positive,
)

# --- murmur2 --------------------------------------------------------------------------------

#: Java UtilsTest.testMurmur2 (protocol-facts.md section 8).
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS)
def test_murmur2_java_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def _murmur2_reference(data: bytes) -> int:
    """A literal transcription of Java's Utils.murmur2 (signed 32-bit arithmetic)."""

    def i32(x: int) -> int:
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x & 0x80000000 else x

    def ushr(x: int, n: int) -> int:
        return (x & 0xFFFFFFFF) >> n

    length = len(data)
    m = 0x5BD1E995
    h = i32(0x9747B28C ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = (
            (data[i4] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = i32(k * m)
        k = i32(k ^ ushr(k, 24))
        k = i32(k * m)
        h = i32(h * m)
        h = i32(h ^ k)
    rest = length % 4
    base = length & ~3
    if rest >= 3:
        h = i32(h ^ ((data[base + 2] & 0xFF) << 16))
    if rest >= 2:
        h = i32(h ^ ((data[base + 1] & 0xFF) << 8))
    if rest >= 1:
        h = i32(h ^ (data[base] & 0xFF))
        h = i32(h * m)
    h = i32(h ^ ushr(h, 13))
    h = i32(h * m)
    h = i32(h ^ ushr(h, 15))
    return h


@given(st.binary(max_size=64))
def test_murmur2_matches_java_transcription(data: bytes) -> None:
    result = murmur2(data)
    assert result == _murmur2_reference(data)
    assert -(2**31) <= result < 2**31


def test_murmur2_tail_bytes_are_unsigned() -> None:
    # High bytes in the tail must not be sign-extended.
    for data in (b"\xff", b"\xff\xfe", b"\x80\x81\x82", b"abcd\xff"):
        assert murmur2(data) == _murmur2_reference(data)


def test_murmur2_empty() -> None:
    assert murmur2(b"") == _murmur2_reference(b"")


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, 0),
        (5, 5),
        (-1, 2**31 - 1),
        (-(2**31), 0),
        (2**31 - 1, 2**31 - 1),
        (-973932308, -973932308 & 0x7FFFFFFF),
    ],
)
def test_to_positive_clears_the_sign_bit(n: int, expected: int) -> None:
    assert to_positive(n) == expected


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-5) != abs(-5)
    assert to_positive(-5) == 2**31 - 5


# --- keyed records --------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "hash_value"), JAVA_VECTORS)
@pytest.mark.parametrize("n", [1, 3, 7, 12, 100])
def test_keyed_partition_is_java_compatible(key: bytes, hash_value: int, n: int) -> None:
    expected = to_positive(hash_value) % n
    assert murmur2_hasher().partition(key, n) == expected
    chooser = PartitionChooser("builtin", 16384)
    assert chooser.choose("t", key, n, [0]) == (expected, None)


def test_keyed_partition_uses_all_partitions_not_only_available() -> None:
    key = b"foobar"
    expected = to_positive(murmur2(key)) % 12
    assert expected not in (0, 1)
    chooser = PartitionChooser("builtin", 16384)
    assert chooser.choose("t", key, 12, [0, 1]) == (expected, None)


def test_key_hasher_is_stable_across_repeats() -> None:
    hasher = murmur2_hasher()
    keys = [b"user-%d" % i for i in range(200)]
    first = [hasher.partition(k, 17) for k in keys]
    second = [hasher.partition(k, 17) for k in keys]
    assert first == second
    assert first == [to_positive(murmur2(k)) % 17 for k in keys]
    assert hasher.partition(b"user-1", 5) == to_positive(murmur2(b"user-1")) % 5


def test_key_hasher_uses_the_given_hash() -> None:
    hasher = KeyHasher(lambda data: -len(data))
    assert hasher.partition(b"abc", 10) == to_positive(-3) % 10


def test_murmur3_option() -> None:
    key = b"order-42"
    expected = to_positive(mmh3.hash(key, 0, signed=True)) % 9
    assert murmur3_hasher().partition(key, 9) == expected
    assert PartitionChooser("murmur3", 16384).choose("t", key, 9, [])[0] == expected


def test_ignore_keys_uses_sticky() -> None:
    chooser = PartitionChooser("builtin", 16384, ignore_keys=True, rng=random.Random(1))
    partition, sticky = chooser.choose("t", b"foobar", 12, list(range(12)))
    assert sticky is not None
    assert sticky.current == partition


def test_empty_key_is_hashed_not_sticky() -> None:
    chooser = PartitionChooser("builtin", 16384)
    assert chooser.choose("t", b"", 10, []) == (to_positive(murmur2(b"")) % 10, None)


# --- uniform sticky (KIP-794) ---------------------------------------------------------------

BATCH = 1000
ALL4 = [0, 1, 2, 3]


def sticky_at(partition: int = 0, seed: int = 0) -> StickyPartitionState:
    state = StickyPartitionState(BATCH, random.Random(seed))
    state.current = partition
    return state


def test_first_choice_is_among_available() -> None:
    for seed in range(50):
        state = StickyPartitionState(BATCH, random.Random(seed))
        assert state.partition(8, [2, 5]) in (2, 5)


def test_first_choice_without_available_is_among_all() -> None:
    seen = set()
    for seed in range(100):
        state = StickyPartitionState(BATCH, random.Random(seed))
        choice = state.partition(4, [])
        assert 0 <= choice < 4
        seen.add(choice)
    assert seen == {0, 1, 2, 3}


def test_partition_is_sticky_between_appends() -> None:
    state = StickyPartitionState(BATCH, random.Random(3))
    first = state.partition(4, ALL4)
    assert all(state.partition(4, ALL4) == first for _ in range(10))


def test_stays_below_batch_size() -> None:
    state = sticky_at(2)
    for _ in range(9):
        state.on_append(100, True, 4, ALL4, 0)  # 900 bytes < batch size
    assert state.partition(4, ALL4) == 2


def test_waits_for_the_last_batch_to_fill_after_batch_size() -> None:
    state = sticky_at(2)
    state.on_append(BATCH, False, 4, ALL4, 0)  # enough bytes, batch not full yet
    assert state.current == 2
    state.on_append(100, False, 4, ALL4, 0)
    assert state.current == 2
    state.on_append(100, True, 4, ALL4, 0)  # the deferred switch happens now
    assert state.current != 2


def test_switches_at_batch_size_when_last_batch_is_full() -> None:
    state = sticky_at(1)
    state.on_append(BATCH - 1, True, 4, ALL4, 0)
    assert state.current == 1
    state.on_append(1, True, 4, ALL4, 0)
    assert state.current != 1


def test_switches_at_twice_batch_size_regardless() -> None:
    state = sticky_at(1)
    state.on_append(2 * BATCH - 1, False, 4, ALL4, 0)
    assert state.current == 1
    state.on_append(1, False, 4, ALL4, 0)
    assert state.current != 1


def test_byte_count_restarts_after_a_switch() -> None:
    state = sticky_at(0)
    state.on_append(BATCH, True, 4, ALL4, 0)
    after = state.current
    assert after != 0
    state.on_append(BATCH - 1, True, 4, ALL4, 0)
    assert state.current == after  # the counter started again at 0


def test_never_picks_the_same_partition_twice_in_a_row() -> None:
    state = StickyPartitionState(BATCH, random.Random(7))
    previous = state.partition(3, [0, 1, 2])
    seen = Counter[int]()
    for _ in range(600):
        state.on_append(BATCH, True, 3, [0, 1, 2], 0)
        current = state.partition(3, [0, 1, 2])
        assert current != previous
        seen[current] += 1
        previous = current
    assert set(seen) == {0, 1, 2}
    assert min(seen.values()) > 100  # spread, not stuck on two partitions


def test_never_repeats_with_two_available() -> None:
    state = sticky_at(0, seed=11)
    sequence = []
    for _ in range(20):
        state.on_append(BATCH, True, 5, [0, 3], 0)
        sequence.append(state.current)
    assert sequence == [3, 0] * 10


def test_switch_picks_only_available_partitions() -> None:
    state = sticky_at(0, seed=5)
    for _ in range(200):
        state.on_append(2 * BATCH, False, 6, [1, 4, 5], 0)
        assert state.current in (1, 4, 5)


def test_single_available_partition_is_kept() -> None:
    state = sticky_at(2)
    state.on_append(2 * BATCH, True, 4, [2], 0)
    assert state.current == 2
    state.on_append(2 * BATCH, True, 4, [3], 0)
    assert state.current == 3


def test_sticky_repicks_when_partition_count_shrinks() -> None:
    state = sticky_at(7)
    assert state.partition(4, ALL4) in ALL4


def test_chooser_keeps_one_sticky_state_per_topic() -> None:
    chooser = PartitionChooser("builtin", BATCH, rng=random.Random(2))
    pa, sa = chooser.choose("a", None, 50, list(range(50)))
    pb, sb = chooser.choose("b", None, 50, list(range(50)))
    assert sa is not None
    assert sb is not None
    assert sa is not sb
    assert chooser.choose("a", None, 50, list(range(50))) == (pa, sa)
    sa.on_append(2 * BATCH, False, 50, list(range(50)), 0)
    pa2, _ = chooser.choose("a", None, 50, list(range(50)))
    assert pa2 != pa
    assert chooser.choose("b", None, 50, list(range(50)))[0] == pb


# --- the working set ------------------------------------------------------------------------

ALL20 = list(range(20))


def in_working_set(size: int = 3, ms: int = 50, seed: int = 0) -> StickyPartitionState:
    return StickyPartitionState(
        BATCH, random.Random(seed), working_set_size=size, working_set_ms=ms
    )


def switches(
    state: StickyPartitionState, count: int, now_ms: int, available: list[int]
) -> list[int]:
    """The partitions of ``count`` switches at ``now_ms``."""
    picks = []
    for _ in range(count):
        state.on_append(BATCH, True, 20, available, now_ms)
        picks.append(state.current)
    return picks


def test_within_a_window_moves_stay_in_the_working_set() -> None:
    for seed in range(20):
        state = in_working_set(seed=seed)
        first = state.partition(20, ALL20)
        picks = [first, *switches(state, 200, 10, ALL20)]
        assert len(set(picks)) == 3, picks
        assert set(picks) == set(state.working_set)
        assert all(a != b for a, b in itertools.pairwise(picks))  # still never the same twice


def test_a_new_set_is_drawn_at_the_first_switch_after_its_time() -> None:
    state = in_working_set(ms=50)
    state.partition(20, ALL20)
    switches(state, 5, 0, ALL20)
    first_set = list(state.working_set)
    switches(state, 5, 49, ALL20)
    assert state.working_set == first_set  # 49 ms: the same set
    (moved,) = switches(state, 1, 50, ALL20)
    assert state.working_set != first_set
    assert state.set_drawn_ms == 50
    assert moved == state.working_set[0]
    assert len(set(state.working_set)) == 3


def test_over_many_windows_every_partition_gets_its_share() -> None:
    state = in_working_set(size=4, ms=50, seed=3)
    state.partition(20, ALL20)
    seen = Counter[int]()
    for window in range(500):
        seen.update(switches(state, 10, window * 50, ALL20))
    assert set(seen) == set(ALL20)
    expected = 5000 / 20
    assert all(0.75 * expected < n < 1.25 * expected for n in seen.values()), seen


def test_the_java_rule_when_the_topic_has_no_more_partitions_than_the_set() -> None:
    # 8 partitions, a set of 8: draw for draw the KIP-794 rule (a set of 0).
    for seed in range(10):
        java = StickyPartitionState(BATCH, random.Random(seed))
        ours = in_working_set(size=8, seed=seed)
        picks = []
        for state in (java, ours):
            state.partition(8, list(range(8)))
            picks.append([state.current, *(s for s in switches_n(state, 100, 8))])
        assert picks[0] == picks[1]
        assert ours.working_set == []
        assert set(picks[1]) == set(range(8))


def switches_n(state: StickyPartitionState, count: int, partitions: int) -> list[int]:
    picks = []
    for i in range(count):
        state.on_append(BATCH, True, partitions, list(range(partitions)), i * 1000)
        picks.append(state.current)
    return picks


def test_members_that_lose_their_leader_are_left_out() -> None:
    state = in_working_set(size=4, seed=1)
    state.partition(20, ALL20)
    switches(state, 3, 0, ALL20)
    members = list(state.working_set)
    lost = members[0]
    available = [p for p in ALL20 if p != lost]
    picks = switches(state, 100, 0, available)
    assert lost not in picks
    assert set(picks) == set(members) - {lost}
    assert state.working_set == members  # still the same set (three members usable)


def test_a_set_with_fewer_than_two_usable_members_is_drawn_again_at_once() -> None:
    state = in_working_set(size=3, seed=2)
    state.partition(20, ALL20)
    switches(state, 3, 0, ALL20)
    members = list(state.working_set)
    available = [p for p in ALL20 if p not in members[1:]]  # only one member has a leader
    picks = switches(state, 50, 0, available)  # still within the window
    assert state.working_set != members
    assert all(p in available for p in picks)
    assert set(state.working_set) <= set(available)


def test_a_switch_on_the_per_record_path_uses_the_last_time_told() -> None:
    # The accumulator's fast path calls maybe_switch without a time: the set's age is
    # measured with the time of the last on_append (once per new batch).
    state = in_working_set(ms=50)
    state.partition(20, ALL20)
    switches(state, 2, 0, ALL20)
    first_set = list(state.working_set)
    state.on_append(1, False, 20, ALL20, 60)  # a new batch at 60 ms, no switch yet
    assert state.working_set == first_set
    state.produced_bytes = 2 * BATCH
    state.maybe_switch(True, 20, ALL20)
    assert state.working_set != first_set
    assert state.set_drawn_ms == 60


def test_the_chooser_passes_the_working_set_options_on() -> None:
    chooser = PartitionChooser(
        "builtin", BATCH, rng=random.Random(4), working_set_size=2, working_set_ms=50
    )
    _, sticky = chooser.choose("t", None, 30, list(range(30)))
    assert sticky is not None
    picks = set()
    for _ in range(50):
        sticky.on_append(BATCH, True, 30, list(range(30)), 0)
        picks.add(chooser.choose("t", None, 30, list(range(30)))[0])
    assert len(picks) == 2


# --- round robin ----------------------------------------------------------------------------


def test_round_robin_cycles_available_partitions_per_topic() -> None:
    chooser = PartitionChooser("round_robin", BATCH)
    got = [chooser.choose("t", None, 6, [1, 3, 5]) for _ in range(6)]
    assert got == [(1, None), (3, None), (5, None)] * 2
    assert [chooser.choose("u", None, 2, [])[0] for _ in range(3)] == [0, 1, 0]


def test_round_robin_hashes_keys() -> None:
    chooser = PartitionChooser("round_robin", BATCH)
    assert chooser.choose("t", b"foobar", 7, [0])[0] == to_positive(murmur2(b"foobar")) % 7


# --- custom ---------------------------------------------------------------------------------


def test_custom_partitioner_gets_topic_key_count_and_available() -> None:
    calls: list[tuple[str, bytes | None, int, Sequence[int]]] = []

    def custom(topic: str, key: bytes | None, n: int, available: Sequence[int]) -> int:
        calls.append((topic, key, n, available))
        return n - 1

    chooser = PartitionChooser(custom, BATCH)
    assert chooser.choose("t", b"k", 4, [0, 2]) == (3, None)
    assert chooser.choose("t", None, 4, [0, 2]) == (3, None)  # also for unkeyed records
    assert calls == [("t", b"k", 4, [0, 2]), ("t", None, 4, [0, 2])]


@pytest.mark.parametrize("bad", [4, -1, 100])
def test_custom_partitioner_out_of_range(bad: int) -> None:
    chooser = PartitionChooser(lambda t, k, n, a: bad, BATCH)
    with pytest.raises(
        InvalidArgumentError, match=rf"returned {bad} for topic 't' with 4 partitions"
    ):
        chooser.choose("t", b"k", 4, ALL4)


@pytest.mark.parametrize("bad", [None, "1", 1.0, True])
def test_custom_partitioner_must_return_an_int(bad: object) -> None:
    chooser = PartitionChooser(lambda t, k, n, a: bad, BATCH)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidArgumentError, match="not an int"):
        chooser.choose("t", b"k", 4, ALL4)
