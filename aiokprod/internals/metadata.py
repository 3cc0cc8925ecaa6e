"""The cluster view: brokers, topics, partitions, leaders, and when to refresh it.

:class:`ClusterSnapshot` is immutable; each metadata response (or KIP-951 leader hint) makes
a new one, so the accumulator and sender always work on one consistent picture. The snapshot
keeps the lookups the hot path needs precomputed: partition counts, partitions with a leader,
and partitions per leader node.

:class:`MetadataState` decides *when* to refresh (first use of a topic, ``metadata_max_age_ms``,
an explicit request after leader/topic errors or disconnects, with backoff after failures) and
which topics to ask for (those used within ``metadata_max_idle_ms``). It is synchronous and
takes the time as an argument; the async fetcher lives in ``internals.metadata_fetcher``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from aiokprod.errors import BrokerError, error_for_code
from aiokprod.protocol.messages.metadata import MetadataResponse
from aiokprod.types import TopicPartition

NO_LEADER: Final = -1


def is_valid_address(node_id: int, host: str | None, port: int) -> bool:
    """Whether a broker entry from a response can be connected to at all.

    A broken or hostile broker may name hosts and ports that cannot exist; such entries are
    left out of the view rather than handed to the connection layer.
    """
    return node_id >= 0 and bool(host) and "\x00" not in (host or "") and 0 < port < 65536


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A broker: its id and where to reach it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition and its leader (-1 when it has none)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's partitions, in partition order, and the ones that have a leader."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    available: tuple[int, ...]
    is_internal: bool = False

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One consistent view of the cluster."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    #: Topic-level errors from the last response that mentioned the topic.
    topic_errors: Mapping[str, int] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    #: node id -> partitions it leads (precomputed for drain()).
    by_leader: Mapping[int, tuple[TopicPartition, ...]] = field(default_factory=dict)
    _leaders: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: tp -> its index in ``by_leader[its leader]`` (drain's rotation order).
    _positions: Mapping[TopicPartition, int] = field(default_factory=dict)

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader node of ``tp``, or -1 if unknown."""
        return self._leaders.get(tp, NO_LEADER)

    def leader_position(self, tp: TopicPartition) -> int:
        """``tp``'s index among the partitions its leader leads (0 if unknown)."""
        return self._positions.get(tp, 0)

    def partition_info(self, tp: TopicPartition) -> PartitionInfo | None:
        """The partition's info, if the topic and partition are known."""
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        return topic.partitions[tp.partition]

    @classmethod
    def build(
        cls,
        brokers: Mapping[int, BrokerNode],
        topics: Mapping[str, TopicInfo],
        topic_errors: Mapping[str, int] | None = None,
        cluster_id: str | None = None,
        controller_id: int = -1,
    ) -> ClusterSnapshot:
        """A snapshot with its lookup tables computed."""
        leaders: dict[TopicPartition, int] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic in topics.values():
            for p in topic.partitions:
                if p.leader >= 0:
                    tp = TopicPartition(topic.name, p.partition)
                    leaders[tp] = p.leader
                    by_leader.setdefault(p.leader, []).append(tp)
        positions = {tp: i for tps in by_leader.values() for i, tp in enumerate(tps)}
        return cls(
            brokers=dict(brokers),
            topics=dict(topics),
            topic_errors=dict(topic_errors or {}),
            cluster_id=cluster_id,
            controller_id=controller_id,
            by_leader={node: tuple(tps) for node, tps in by_leader.items()},
            _leaders=leaders,
            _positions=positions,
        )

    def merged_with(self, response: MetadataResponse, requested: Iterable[str]) -> ClusterSnapshot:
        """A new snapshot: brokers from ``response``, topics from it, other topics kept.

        Topics that were asked for but came back with an error are dropped from ``topics``
        and their error code is kept in ``topic_errors``.
        """
        brokers = {
            b.node_id: BrokerNode(b.node_id, b.host, b.port, b.rack)
            for b in response.brokers
            if is_valid_address(b.node_id, b.host, b.port)
        }
        topics = dict(self.topics)
        errors = dict(self.topic_errors)
        seen = set()
        for t in response.topics:
            if t.name is None:
                continue
            seen.add(t.name)
            if t.error_code:
                topics.pop(t.name, None)
                errors[t.name] = t.error_code
                continue
            errors.pop(t.name, None)
            partitions = sorted(t.partitions, key=lambda p: p.partition_index)
            if [p.partition_index for p in partitions] != list(range(len(partitions))):
                # A gap means an incomplete answer (partitions still being created).
                topics.pop(t.name, None)
                errors[t.name] = 5  # LEADER_NOT_AVAILABLE: retry shortly
                continue
            infos = tuple(
                PartitionInfo(
                    p.partition_index,
                    p.leader_id if p.leader_id in brokers else NO_LEADER,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                )
                for p in partitions
            )
            available = tuple(i.partition for i in infos if i.leader >= 0)
            topics[t.name] = TopicInfo(t.name, infos, available, t.is_internal)
        for name in requested:
            if name not in seen:
                errors[name] = 3  # not mentioned at all: treat as unknown
        return ClusterSnapshot.build(
            brokers, topics, errors, response.cluster_id, response.controller_id
        )

    def with_leader(
        self, tp: TopicPartition, leader: int, leader_epoch: int, node: BrokerNode | None
    ) -> ClusterSnapshot | None:
        """Apply a KIP-951 leader hint; None when it is not newer than what we know."""
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        current = topic.partitions[tp.partition]
        if leader < 0 or leader_epoch < 0 or leader_epoch <= current.leader_epoch:
            return None
        brokers = dict(self.brokers)
        if node is not None and is_valid_address(node.node_id, node.host, node.port):
            brokers[node.node_id] = node
        if leader not in brokers:
            return None
        partitions = list(topic.partitions)
        partitions[tp.partition] = PartitionInfo(
            tp.partition, leader, leader_epoch, current.replicas, current.isr
        )
        available = tuple(p.partition for p in partitions if p.leader >= 0)
        topics = dict(self.topics)
        topics[tp.topic] = TopicInfo(tp.topic, tuple(partitions), available, topic.is_internal)
        return ClusterSnapshot.build(
            brokers, topics, self.topic_errors, self.cluster_id, self.controller_id
        )

    def topic_error(self, topic: str) -> BrokerError | None:
        """The error the last metadata response gave for ``topic``, if any."""
        code = self.topic_errors.get(topic)
        return error_for_code(code) if code else None


class MetadataState:
    """When to refresh metadata, and for which topics (no I/O).

    A refresh is due at once for a topic used for the first time; after an explicit request
    (leader or topic errors, disconnects) once ``retry_backoff_ms`` has passed since the last
    refresh, so a partition that stays leaderless is not polled in a tight loop; after a
    failed refresh with exponential backoff up to ``retry_backoff_max_ms``; and otherwise
    every ``metadata_max_age_ms``. A request made while a refresh is in flight is kept for
    the next one.

    Args:
        max_age_ms: refresh at least this often (``metadata_max_age_ms``).
        max_idle_ms: stop asking for a topic not used for this long (``metadata_max_idle_ms``).
        retry_backoff_ms: pause between refreshes asked for by errors, and after a failure.
        retry_backoff_max_ms: the longest pause after repeated failures.
    """

    def __init__(
        self,
        max_age_ms: int,
        max_idle_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int | None = None,
    ) -> None:
        self.snapshot = ClusterSnapshot()
        self.max_age_ms = max_age_ms
        self.max_idle_ms = max_idle_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms or retry_backoff_ms, retry_backoff_ms)
        self._topics_last_used: dict[str, int] = {}
        self._update_requested = True
        #: A new topic is waiting: refresh without the error backoff.
        self._urgent = True
        self._in_flight = False
        self._requested_during_attempt = False
        self._last_refresh_ms = -1
        self._backoff_until_ms = 0
        self._failures = 0
        self.version = 0

    @property
    def topics(self) -> list[str]:
        """Topics to ask for in the next refresh."""
        return list(self._topics_last_used)

    def add_topic(self, topic: str, now_ms: int) -> bool:
        """Note that ``topic`` is in use; True if it is new (a refresh is then needed)."""
        known = topic in self._topics_last_used
        self._topics_last_used[topic] = now_ms
        if not known:
            self._urgent = True
            self.request_update()
        return not known

    def touch(self, topic: str, now_ms: int) -> None:
        """Note a use of a known topic (keeps it in the refresh set)."""
        self._topics_last_used[topic] = now_ms

    def request_update(self) -> None:
        """Ask for a refresh at the next opportunity (after errors or disconnects)."""
        self._update_requested = True
        if self._in_flight:
            self._requested_during_attempt = True

    def time_to_next_update_ms(self, now_ms: int) -> int:
        """0 if a refresh is due now, else how long until it is."""
        backoff_left = max(self._backoff_until_ms - now_ms, 0)
        if self._failures:
            return backoff_left
        if self._update_requested:
            return 0 if self._urgent else backoff_left
        if self._last_refresh_ms < 0:
            return 0
        return max(self._last_refresh_ms + self.max_age_ms - now_ms, 0)

    def attempt_started(self, now_ms: int) -> list[str]:
        """A refresh starts now; returns the topics to ask for (idle ones dropped)."""
        self._in_flight = True
        self._requested_during_attempt = False
        self._urgent = False
        idle = [t for t, used in self._topics_last_used.items() if now_ms - used > self.max_idle_ms]
        for t in idle:
            del self._topics_last_used[t]
        return list(self._topics_last_used)

    def update(self, response: MetadataResponse, requested: list[str], now_ms: int) -> None:
        """Apply a successful response.

        A response from another cluster (a new cluster id: the cluster was replaced, issue
        29) starts a new view: nothing known of the old cluster's topics is kept.
        """
        base = self.snapshot
        if base.cluster_id is not None and response.cluster_id not in (None, base.cluster_id):
            base = ClusterSnapshot()
        self.snapshot = base.merged_with(response, requested)
        self._in_flight = False
        self._last_refresh_ms = now_ms
        self._failures = 0
        self._backoff_until_ms = now_ms + self.retry_backoff_ms
        # Keep refreshing (paced by the backoff) while a requested topic has an error or a
        # partition without a leader, as right after a topic is created.
        incomplete = any(
            t in self.snapshot.topic_errors or self._lacks_leaders(t) for t in requested
        )
        self._update_requested = self._requested_during_attempt or incomplete
        self._requested_during_attempt = False
        self.version += 1

    def _lacks_leaders(self, topic: str) -> bool:
        info = self.snapshot.topics.get(topic)
        return info is not None and len(info.available) < info.num_partitions

    def failed(self, now_ms: int) -> None:
        """A refresh attempt failed (no broker reachable, or an error)."""
        self._in_flight = False
        self._failures += 1
        self._update_requested = True
        exponent = min(self._failures - 1, 30)
        wait = min(self.retry_backoff_ms * 2**exponent, self.retry_backoff_max_ms)
        self._backoff_until_ms = now_ms + wait

    def apply_leader_hint(
        self, tp: TopicPartition, leader: int, leader_epoch: int, node: BrokerNode | None
    ) -> bool:
        """Apply a KIP-951 hint from a Produce response; True if the view changed."""
        snapshot = self.snapshot.with_leader(tp, leader, leader_epoch, node)
        if snapshot is None:
            return False
        self.snapshot = snapshot
        self.version += 1
        return True
