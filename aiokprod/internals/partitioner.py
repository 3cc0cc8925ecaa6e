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
that stopped taking requests; the decision is made at the switch, never per record.
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
    """Maps a serialized key to a partition, remembering recent keys' hashes."""

    __slots__ = ("_cache", "_hash")

    def __init__(self, hash_function: Callable[[bytes], int]) -> None:
        self._hash = hash_function
        self._cache: dict[bytes, int] = {}

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
    return KeyHasher(murmur2)


def murmur3_hasher() -> KeyHasher:
    """A murmur3 (mmh3, seed 0) key hasher; not the Java client's mapping."""

    def murmur3(data: bytes) -> int:
        return int(mmh3.hash(data, 0, signed=True))

    return KeyHasher(murmur3)


class StickyPartitionState:
    """KIP-794's uniform sticky choice for one topic's unkeyed records.

    The producer adds each append's bytes to ``produced_bytes`` and calls
    :meth:`maybe_switch` once they reach ``batch_size`` (a cheap check on the per-record
    path); :meth:`on_append` does both.

    Args:
        batch_size: bytes to send to one partition before switching (``batch_size``).
        rng: the random source (injected in tests).
        topic: the topic (for ``adaptive``).
        adaptive: weighs the partition to switch to (None: uniform).
    """

    __slots__ = ("_adaptive", "_rng", "batch_size", "current", "produced_bytes", "topic")

    def __init__(
        self,
        batch_size: int,
        rng: random.Random | None = None,
        topic: str = "",
        adaptive: AdaptivePartitioning | None = None,
    ) -> None:
        self.batch_size = max(batch_size, 1)
        self._rng = rng or random.Random()
        self.produced_bytes = 0
        self.current = -1
        self.topic = topic
        self._adaptive = adaptive

    def partition(self, num_partitions: int, available: Sequence[int]) -> int:
        """The partition for the next unkeyed record."""
        current = self.current
        if current < 0 or current >= num_partitions:
            current = self.current = self._pick(num_partitions, available, -1)
        return current

    def on_append(
        self,
        appended_bytes: int,
        last_batch_full: bool,
        num_partitions: int,
        available: Sequence[int],
    ) -> None:
        """Count bytes appended to the sticky partition; switch when a batch's worth went.

        Args:
            appended_bytes: bytes the append added (a new batch counts its header too).
            last_batch_full: whether the partition's newest batch is full, so switching now
                does not leave a half-empty batch behind.
            num_partitions: partitions of the topic.
            available: partitions with a known leader.
        """
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
            self.current = self._pick(num_partitions, available, self.current)

    def _pick(self, num_partitions: int, available: Sequence[int], previous: int) -> int:
        adaptive = self._adaptive
        if adaptive is not None:
            # Once per switch: weighted by queue length (None: queues even, uniform below).
            choice = adaptive.choose(self.topic, num_partitions, available, self._rng)
            if choice is not None:
                return choice
        choices: Sequence[int] = available if available else range(num_partitions)
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
    """

    def __init__(
        self,
        strategy: str | PartitionerFunction,
        batch_size: int,
        ignore_keys: bool = False,
        rng: random.Random | None = None,
        adaptive: AdaptivePartitioning | None = None,
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
                self._batch_size, self._rng, topic, self.adaptive
            )
        return sticky.partition(num_partitions, available), sticky
