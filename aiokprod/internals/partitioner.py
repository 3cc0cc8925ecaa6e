"""Choosing a partition: keyed records by hash, unkeyed records by the uniform sticky rule.

Keyed records use murmur2 exactly as the Java client does (``toPositive(murmur2(key)) %
partitions``, over *all* partitions of the topic), so a key lands on the same partition
whichever of the two clients wrote it. ``murmur3`` (mmh3) is offered for users who want it;
it is not Java-compatible.

Unkeyed records follow KIP-794's uniform sticky partitioner: stay on one partition until about
a batch's worth of bytes went there and its batch is full (or twice that, whatever the batch),
then move to another partition picked at random among those with a leader. Batches fill up
instead of being cut short, and load spreads evenly. With adaptive partitioning (the default,
internals/adaptive.py) the move favours partitions with shorter queues, and may skip leaders
that stopped taking requests; the decision is made at the switch, never per record. On a
topic with more partitions than ``partitioner_working_set_size`` the move is among a few
partitions drawn for ``partitioner_working_set_ms`` at a time (:class:`StickyPartitionState`
says why): the one place where we depart from the Java client's choice, written down in
docs/design.md ("The partitioner's working set").
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Final

import mmh3

from aiokprod.errors import InvalidArgumentError
from aiokprod.internals.adaptive import AdaptivePartitioning

_M: Final = 0x5BD1E995
_SEED: Final = 0x9747B28C
_MASK: Final = 0xFFFFFFFF
#: Keys are often repeated (user ids, order ids): remember this many hashes.
_HASH_CACHE_LIMIT: Final = 65536


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (32-bit MurmurHash2, seed 0x9747b28c); returns a signed int32.

    Bit for bit the Java client's ``Utils.murmur2``.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length // 4
    if blocks:
        for k in struct.unpack_from(f"<{blocks}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        i = blocks * 4
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


class KeyHasher:
    """Maps a serialized key to a partition, remembering recent keys' hashes.

    ``java_compatible``: the hash is :func:`murmur2` (the Java client's partition of a
    key), so a column that computes murmur2 of its keys in bulk may be split by it.
    """

    __slots__ = ("_cache", "_hash", "java_compatible")

    def __init__(
        self, hash_function: Callable[[bytes], int], java_compatible: bool = False
    ) -> None:
        self._hash = hash_function
        self._cache: dict[bytes, int] = {}
        self.java_compatible = java_compatible

    def partitions(self, keys: Sequence[bytes], num_partitions: int) -> list[int]:
        """The partition of every key (the bulk path's loop)."""
        cache = self._cache
        get = cache.get
        out: list[int] = []
        append = out.append
        for key in keys:
            h = get(key)
            if h is None:
                h = to_positive(self._hash(key))
                if len(cache) >= _HASH_CACHE_LIMIT:
                    cache.clear()
                cache[bytes(key)] = h
            append(h % num_partitions)
        return out

    def partition(self, key: bytes, num_partitions: int) -> int:
        """The partition for ``key`` among ``num_partitions``."""
        cache = self._cache
        h = cache.get(key)
        if h is None:
            h = to_positive(self._hash(key))
            if len(cache) >= _HASH_CACHE_LIMIT:
                cache.clear()
            cache[bytes(key)] = h
        return h % num_partitions


def murmur2_hasher() -> KeyHasher:
    """The Java-compatible key hasher."""
    return KeyHasher(murmur2, java_compatible=True)


def murmur3_hasher() -> KeyHasher:
    """A murmur3 (mmh3, seed 0) key hasher; not the Java client's mapping."""

    def murmur3(data: bytes) -> int:
        return int(mmh3.hash(data, 0, signed=True))

    return KeyHasher(murmur3)


class StickyPartitionState:
    """KIP-794's uniform sticky choice for one topic's unkeyed records, in a working set.

    The producer adds each append's bytes to ``produced_bytes`` and calls
    :meth:`maybe_switch` once they reach ``batch_size`` (a cheap check on the per-record
    path); :meth:`on_append` does both, and also tells the time (once per new batch).

    **The working set** (``partitioner_working_set_size`` partitions, renewed after
    ``partitioner_working_set_ms``): the switch moves among a few partitions drawn at random
    (by the same adaptive or uniform rule as a switch), and draws a new set at the first
    switch after the set's time is up. Over time every partition gets its even share, as
    KIP-794 wants; within one window a large topic is written to a few partitions instead of
    hundreds. Why: on a topic of 1,000 partitions the switch after each batch touched ~800 of
    them in a second, and a broker's first append to each partition is slow (its index files
    are opened lazily): 53,182 rec/s against 440,720 on 6 partitions, and 454,595 with the
    working set (docs/benchmarks.md). librdkafka keeps to one partition for 10 ms for the
    same reason, but that puts one batch in each Produce request; moving among a few keeps
    the requests full. A topic with no more partitions available than the set size, or
    ``working_set_size=0``, gets exactly the Java client's rule.

    Args:
        batch_size: bytes to send to one partition before switching (``batch_size``).
        rng: the random source (injected in tests).
        topic: the topic (for ``adaptive``).
        adaptive: weighs the partition to switch to (None: uniform).
        working_set_size: partitions to move among (0: all, the Java client's rule).
        working_set_ms: how long a working set is kept (renewed at the next switch after).
    """

    __slots__ = (
        "_adaptive",
        "_available_ref",
        "_available_set",
        "_rng",
        "batch_size",
        "current",
        "now_ms",
        "produced_bytes",
        "set_drawn_ms",
        "topic",
        "working_set",
        "working_set_ms",
        "working_set_size",
    )

    def __init__(
        self,
        batch_size: int,
        rng: random.Random | None = None,
        topic: str = "",
        adaptive: AdaptivePartitioning | None = None,
        working_set_size: int = 0,
        working_set_ms: int = 0,
    ) -> None:
        self.batch_size = max(batch_size, 1)
        self._rng = rng or random.Random()
        self.produced_bytes = 0
        self.current = -1
        self.topic = topic
        self._adaptive = adaptive
        self.working_set_size = working_set_size
        self.working_set_ms = working_set_ms
        #: The partitions switched among now (empty: none drawn, or the topic is small).
        self.working_set: list[int] = []
        #: When the set was drawn; -1: before any time was told (then the first time told).
        self.set_drawn_ms = -1
        #: The last time told (:meth:`on_append`); switches on the per-record path use it.
        self.now_ms = -1
        self._available_ref: Sequence[int] | None = None
        self._available_set: frozenset[int] = frozenset()

    def partition(self, num_partitions: int, available: Sequence[int]) -> int:
        """The partition for the next unkeyed record."""
        current = self.current
        if current < 0 or current >= num_partitions:
            current = self.current = self._next(num_partitions, available, -1)
        return current

    def on_append(
        self,
        appended_bytes: int,
        last_batch_full: bool,
        num_partitions: int,
        available: Sequence[int],
        now_ms: int,
    ) -> None:
        """Count bytes appended to the sticky partition; switch when a batch's worth went.

        Args:
            appended_bytes: bytes the append added (a new batch counts its header too).
            last_batch_full: whether the partition's newest batch is full, so switching now
                does not leave a half-empty batch behind.
            num_partitions: partitions of the topic.
            available: partitions with a known leader.
            now_ms: the time (for the working set's age).
        """
        self.now_ms = now_ms
        if self.set_drawn_ms < 0:
            self.set_drawn_ms = now_ms  # the first set was drawn before the time was known
        self.produced_bytes += appended_bytes
        if self.produced_bytes >= self.batch_size:
            self.maybe_switch(last_batch_full, num_partitions, available)

    def maybe_switch(
        self, last_batch_full: bool, num_partitions: int, available: Sequence[int]
    ) -> None:
        """Switch partitions if a batch's worth went and the batch is full, or twice that."""
        produced = self.produced_bytes
        if (produced >= self.batch_size and last_batch_full) or produced >= 2 * self.batch_size:
            self.produced_bytes = 0
            self.current = self._next(num_partitions, available, self.current)

    def _next(self, num_partitions: int, available: Sequence[int], previous: int) -> int:
        """The partition to move to: within the working set, or among all."""
        size = self.working_set_size
        choices: Sequence[int] = available if available else range(num_partitions)
        if size <= 0 or len(choices) <= size:
            self.working_set = []
            return self._pick(num_partitions, choices, previous)
        members = self._usable_members(num_partitions, available)
        if len(members) < 2 or self.now_ms - self.set_drawn_ms >= self.working_set_ms:
            members = self.working_set = self._draw_set(num_partitions, choices, previous)
            self.set_drawn_ms = self.now_ms
            return members[0]
        return self._pick(num_partitions, members, previous)

    def _usable_members(self, num_partitions: int, available: Sequence[int]) -> list[int]:
        """The working set's partitions that still exist and have a leader."""
        members = self.working_set
        if not available or len(available) == num_partitions:
            return [p for p in members if p < num_partitions]
        if available is not self._available_ref:
            # A new metadata snapshot: membership tested in a set, built once per snapshot.
            self._available_ref = available
            self._available_set = frozenset(available)
        usable = self._available_set
        return [p for p in members if p in usable]

    def _draw_set(self, num_partitions: int, choices: Sequence[int], previous: int) -> list[int]:
        """``working_set_size`` distinct partitions, each drawn as a switch draws one.

        The first is the partition to move to (so it is never ``previous`` in the uniform
        case); the others are drawn from what is left (O(set size x partitions), once per
        window).
        """
        rest = list(choices)
        drawn: list[int] = []
        for _ in range(self.working_set_size):
            p = self._pick(num_partitions, rest, previous if not drawn else -1)
            drawn.append(p)
            rest.remove(p)
        return drawn

    def _pick(self, num_partitions: int, choices: Sequence[int], previous: int) -> int:
        """One partition of ``choices``: weighted by queue length, or uniform."""
        adaptive = self._adaptive
        if adaptive is not None:
            # Once per switch: weighted by queue length (None: queues even, uniform below).
            choice = adaptive.choose(self.topic, num_partitions, choices, self._rng)
            if choice is not None:
                return choice
        if len(choices) == 1:
            return choices[0]
        # Never pick the partition we are leaving (the Java client re-rolls the same way).
        while True:
            choice = choices[self._rng.randrange(len(choices))]
            if choice != previous:
                return choice


PartitionerFunction = Callable[[str, bytes | None, int, Sequence[int]], int]


class PartitionChooser:
    """Picks the partition of each record that was not given one explicitly.

    Args:
        strategy: ``"builtin"`` (murmur2 for keys, sticky otherwise), ``"murmur3"`` (mmh3
            for keys, sticky otherwise), ``"round_robin"``, or a function
            ``(topic, key, num_partitions, available_partitions) -> partition``.
        batch_size: the sticky switch threshold.
        ignore_keys: treat keyed records like unkeyed ones (``partitioner_ignore_keys``).
        rng: the random source.
        adaptive: adaptive partitioning for the sticky choice (None: uniform sticky).
        working_set_size: ``partitioner_working_set_size`` (0: the Java client's rule).
        working_set_ms: ``partitioner_working_set_ms``.
    """

    def __init__(
        self,
        strategy: str | PartitionerFunction,
        batch_size: int,
        ignore_keys: bool = False,
        rng: random.Random | None = None,
        adaptive: AdaptivePartitioning | None = None,
        working_set_size: int = 0,
        working_set_ms: int = 0,
    ) -> None:
        self._custom: PartitionerFunction | None = None if isinstance(strategy, str) else strategy
        self._round_robin = strategy == "round_robin"
        self._hasher = murmur3_hasher() if strategy == "murmur3" else murmur2_hasher()
        self._batch_size = batch_size
        self._ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        self._sticky: dict[str, StickyPartitionState] = {}
        self._counters: dict[str, int] = {}
        self.adaptive = adaptive
        self._working_set_size = working_set_size
        self._working_set_ms = working_set_ms

    def release_topics(self, topics: list[str]) -> None:
        """Forget topics' sticky and round-robin state (they idled out, issue 30)."""
        for topic in topics:
            self._sticky.pop(topic, None)
            self._counters.pop(topic, None)
        # A dict keeps its size when emptied: new ones, sized for what is left.
        self._sticky = dict(self._sticky)
        self._counters = dict(self._counters)

    @property
    def is_sticky_for_unkeyed(self) -> bool:
        """Whether unkeyed records use the sticky partitioner (not round robin or custom)."""
        return self._custom is None and not self._round_robin

    def choose(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int]
    ) -> tuple[int, StickyPartitionState | None]:
        """The partition, and the sticky state to update after the append (if sticky)."""
        # Typed to return object, not int: the compiled build (docs/compiled.md) would turn
        # a wrong return type into a bare TypeError before the check below could name it.
        custom: Callable[..., object] | None = self._custom
        if custom is not None:
            returned = custom(topic, key, num_partitions, available)
            if isinstance(returned, bool) or not isinstance(returned, int):
                raise InvalidArgumentError(f"partitioner returned {returned!r}, not an int")
            partition = returned
            if not 0 <= partition < num_partitions:
                raise InvalidArgumentError(
                    f"partitioner returned {partition} for topic {topic!r} with "
                    f"{num_partitions} partitions"
                )
            return partition, None
        if key is not None and not self._ignore_keys:
            return self._hasher.partition(key, num_partitions), None
        if self._round_robin:
            count = self._counters.get(topic, 0)
            self._counters[topic] = count + 1
            choices: Sequence[int] = available or range(num_partitions)
            return choices[count % len(choices)], None
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = StickyPartitionState(
                self._batch_size,
                self._rng,
                topic,
                self.adaptive,
                self._working_set_size,
                self._working_set_ms,
            )
        return sticky.partition(num_partitions, available), sticky
