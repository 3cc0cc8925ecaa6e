"""The cluster view: brokers, topics and partition leaders, and how an answer updates it.

:class:`ClusterSnapshot` is immutable; each Metadata answer (or KIP-951 leader hint) makes a
new one, so the accumulator and sender always work on one consistent picture, and
``send()`` never sees half of an update. Per topic it keeps what the producer reads:
each partition's leader and leader epoch and the partitions that have a leader, in tuples
(:class:`TopicInfo`); there is no table over all partitions, so what an update costs
depends on the topics it changes, not on the size of the cluster (issue 30).

:class:`SnapshotUpdate` builds the next snapshot from an answer in steps: the caller gives
it decoded topics (:class:`~aiokprod.protocol.metadata_fast.TopicPartitions`) a few at a
time and may give the event loop back between steps; a topic whose partitions did not
change keeps its :class:`TopicInfo` object. Only :meth:`SnapshotUpdate.result` makes the
new snapshot, and its caller swaps it in with one assignment.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from aiokprod.errors import BrokerError, error_for_code
from aiokprod.protocol.messages.metadata import MetadataBroker, MetadataResponse
from aiokprod.protocol.metadata_fast import TopicPartitions, topics_of
from aiokprod.types import TopicPartition

NO_LEADER: Final = -1
ZERO_TOPIC_ID: Final = bytes(16)
#: Partitions of one topic checked per step of an update (issue 30: a few milliseconds).
MERGE_STEP_PARTITIONS: Final = 2000
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
LEADER_NOT_AVAILABLE: Final = 5

_RANGES: dict[int, tuple[int, ...]] = {}


def _all_partitions(count: int) -> tuple[int, ...]:
    """``tuple(range(count))``, one object per count (most topics have every leader)."""
    found = _RANGES.get(count)
    if found is None:
        if len(_RANGES) > 256:
            _RANGES.clear()
        found = _RANGES[count] = tuple(range(count))
    return found


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
    """A partition, its leader (-1 when it has none) and the leader's epoch."""

    partition: int
    leader: int
    leader_epoch: int


class TopicInfo:
    """A topic's partitions: per partition its leader and leader epoch, and those with a leader.

    Immutable once built (the snapshot that holds it is shared). Replica and ISR lists are
    not kept: the producer does not use them.
    """

    __slots__ = (
        "available",
        "epochs",
        "is_internal",
        "leaders",
        "name",
        "num_partitions",
        "topic_id",
    )

    def __init__(
        self,
        name: str,
        leaders: tuple[int, ...],
        epochs: tuple[int, ...] | None = None,
        available: tuple[int, ...] | None = None,
        is_internal: bool = False,
        topic_id: bytes = ZERO_TOPIC_ID,
    ) -> None:
        self.name = name
        #: Leader per partition, -1 for none.
        self.leaders = leaders
        #: Leader epoch per partition (-1: unknown).
        self.epochs = epochs if epochs is not None else (-1,) * len(leaders)
        #: The partitions that have a leader, in order.
        self.available = available if available is not None else available_of(leaders)
        self.is_internal = is_internal
        self.topic_id = topic_id
        self.num_partitions = len(leaders)

    @classmethod
    def of(
        cls, name: str, partitions: Sequence[PartitionInfo], is_internal: bool = False
    ) -> TopicInfo:
        """A topic from its partitions in partition order (tests, leader hints)."""
        return cls(
            name,
            tuple(p.leader for p in partitions),
            tuple(p.leader_epoch for p in partitions),
            is_internal=is_internal,
        )

    @property
    def partitions(self) -> tuple[PartitionInfo, ...]:
        """Every partition as a :class:`PartitionInfo` (built on each call: not hot-path)."""
        return tuple(
            PartitionInfo(i, leader, epoch)
            for i, (leader, epoch) in enumerate(zip(self.leaders, self.epochs, strict=True))
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicInfo):
            return NotImplemented
        return (
            self.name == other.name
            and self.leaders == other.leaders
            and self.epochs == other.epochs
            and self.is_internal == other.is_internal
            and self.topic_id == other.topic_id
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"TopicInfo({self.name!r}, {self.num_partitions} partitions, "
            f"{len(self.available)} with a leader)"
        )


def available_of(leaders: Sequence[int]) -> tuple[int, ...]:
    """The partitions of ``leaders`` that have a leader (a leader is >= 0)."""
    if min(leaders, default=0) >= 0:
        return _all_partitions(len(leaders))
    return tuple(i for i, leader in enumerate(leaders) if leader >= 0)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One consistent view of the cluster."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    #: Topic-level errors from the last response that mentioned the topic.
    topic_errors: Mapping[str, int] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader node of ``tp``, or -1 if unknown."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return NO_LEADER
        partition = tp.partition
        leaders = topic.leaders
        return leaders[partition] if 0 <= partition < len(leaders) else NO_LEADER

    def partition_info(self, tp: TopicPartition) -> PartitionInfo | None:
        """The partition's info, if the topic and partition are known."""
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.num_partitions:
            return None
        return PartitionInfo(tp.partition, topic.leaders[tp.partition], topic.epochs[tp.partition])

    @classmethod
    def build(
        cls,
        brokers: Mapping[int, BrokerNode],
        topics: Mapping[str, TopicInfo],
        topic_errors: Mapping[str, int] | None = None,
        cluster_id: str | None = None,
        controller_id: int = -1,
    ) -> ClusterSnapshot:
        """A snapshot of these brokers and topics (copied)."""
        return cls(dict(brokers), dict(topics), dict(topic_errors or {}), cluster_id, controller_id)

    def merged_with(
        self, response: MetadataResponse, requested: Collection[str]
    ) -> ClusterSnapshot:
        """A new snapshot with ``response`` applied in one go (see :class:`SnapshotUpdate`)."""
        update = SnapshotUpdate(
            self, response.brokers, response.cluster_id, response.controller_id, requested
        )
        for _ in update.add(topics_of(response)):
            pass
        return update.result()

    def with_leader(
        self, tp: TopicPartition, leader: int, leader_epoch: int, node: BrokerNode | None
    ) -> ClusterSnapshot | None:
        """Apply a KIP-951 hint; None when it is not newer than what we know."""
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.num_partitions:
            return None
        index = tp.partition
        if leader < 0 or leader_epoch < 0 or leader_epoch <= topic.epochs[index]:
            return None
        brokers = self.brokers
        if node is not None and is_valid_address(node.node_id, node.host, node.port):
            brokers = {**brokers, node.node_id: node}
        if leader not in brokers:
            return None
        info = _with_partition(topic, index, leader, leader_epoch)
        return ClusterSnapshot(
            brokers,
            {**self.topics, tp.topic: info},
            self.topic_errors,
            self.cluster_id,
            self.controller_id,
        )

    def without(self, topics: Collection[str]) -> ClusterSnapshot:
        """This view without ``topics`` (released: no longer used)."""
        return ClusterSnapshot(
            self.brokers,
            {n: t for n, t in self.topics.items() if n not in topics},
            {n: e for n, e in self.topic_errors.items() if n not in topics},
            self.cluster_id,
            self.controller_id,
        )

    def topic_error(self, topic: str) -> BrokerError | None:
        """The error the last metadata response gave for ``topic``, if any."""
        code = self.topic_errors.get(topic)
        return error_for_code(code) if code else None


class SnapshotUpdate:
    """The next :class:`ClusterSnapshot`, built from one Metadata answer in steps.

    Brokers, cluster id and controller come from the answer. Each answered topic replaces
    the base's (a topic with an error is dropped and its error kept; one with a gap in its
    partitions counts as LEADER_NOT_AVAILABLE), other topics are kept, and topics
    ``requested`` but not answered count as unknown. A partition whose
    answer carries an older leader epoch than the base's (a broker whose metadata lags) keeps
    the base's leader, as the Java client does; a new topic id starts afresh.

    Args:
        base: the view the answer updates.
        brokers: the answer's brokers.
        cluster_id: the answer's cluster id.
        controller_id: the answer's controller.
        requested: the topics the request asked for.
    """

    def __init__(
        self,
        base: ClusterSnapshot,
        brokers: Iterable[MetadataBroker],
        cluster_id: str | None,
        controller_id: int,
        requested: Collection[str],
    ) -> None:
        self._base = base
        self._brokers = {
            b.node_id: BrokerNode(b.node_id, b.host, b.port, b.rack)
            for b in brokers
            if is_valid_address(b.node_id, b.host, b.port)
        }
        self._broker_ids = frozenset(self._brokers)
        self._cluster_id = cluster_id
        self._controller_id = controller_id
        self._requested = requested
        self._topics = dict(base.topics)
        self._errors = dict(base.topic_errors)
        self._seen: set[str] = set()
        #: Topics whose view the answer changed.
        self.changed: set[str] = set()
        #: Answered topics with an error or a partition without a leader, and requested
        #: topics left unanswered: worth asking for again soon.
        self.incomplete: set[str] = set()
        #: Partitions looked at so far (a measure of the work done, for tests).
        self.partitions_merged = 0

    def add(self, topics: Iterable[TopicPartitions]) -> Iterator[None]:
        """Merge ``topics``; yields between steps of a topic with many partitions."""
        for topic in topics:
            name = topic.name
            if name is None:
                continue
            self._seen.add(name)
            if topic.error_code:
                self._topics.pop(name, None)
                self._errors[name] = topic.error_code
                self.changed.add(name)
                self.incomplete.add(name)
                continue
            yield from self._merge(name, topic)
            info = self._topics.get(name)
            if info is None or len(info.available) < info.num_partitions:
                self.incomplete.add(name)

    def _merge(self, name: str, topic: TopicPartitions) -> Iterator[None]:
        count = len(topic.indexes)
        step = MERGE_STEP_PARTITIONS
        ids, leaders, epochs = topic.indexes, topic.leaders, topic.epochs
        in_order = True
        for start in range(0, count, step):
            if start:
                yield
            stop = min(start + step, count)
            if ids[start:stop] != list(range(start, stop)):
                in_order = False
                break
        if not in_order:
            ordered = sorted(zip(ids, leaders, epochs, strict=True))
            if [i for i, _, _ in ordered] != list(range(count)):
                # A gap means an incomplete answer (partitions still being created).
                self._topics.pop(name, None)
                self._errors[name] = LEADER_NOT_AVAILABLE
                self.changed.add(name)
                return
            leaders = [leader for _, leader, _ in ordered]
            epochs = [epoch for _, _, epoch in ordered]
        self.partitions_merged += count
        self._errors.pop(name, None)
        new_leaders = tuple(leaders)
        new_epochs = tuple(epochs)
        named = set(new_leaders)
        named.discard(NO_LEADER)
        valid = named <= self._broker_ids
        old = self._base.topics.get(name)
        same_topic = old is not None and old.topic_id == topic.topic_id
        if (
            old is not None
            and same_topic
            and valid
            and old.leaders == new_leaders
            and old.epochs == new_epochs
            and old.is_internal == topic.is_internal
        ):
            return  # unchanged (what most refreshes find): the same object, nothing derived
        if not valid:
            brokers = self._broker_ids
            new_leaders = tuple(x if x in brokers else NO_LEADER for x in new_leaders)
        if old is not None and same_topic:
            # A lagging broker's older epochs do not undo what is known (as Java's Metadata).
            new_leaders, new_epochs = yield from _keep_newer(
                old, new_leaders, new_epochs, self._broker_ids
            )
        self._topics[name] = TopicInfo(
            name, new_leaders, new_epochs, None, topic.is_internal, topic.topic_id
        )
        self.changed.add(name)

    def result(
        self, current: ClusterSnapshot | None = None, hinted: Iterable[TopicPartition] = ()
    ) -> ClusterSnapshot:
        """The new snapshot (once every topic was added).

        ``hinted`` partitions were moved by leader hints in ``current`` (the view now) while
        the update was under way: their newer epochs win over the answer's.
        """
        for name in self._requested:
            if name not in self._seen:
                self._topics.pop(name, None)
                self._errors[name] = UNKNOWN_TOPIC_OR_PARTITION  # not mentioned at all
                self.incomplete.add(name)
        if current is not None:
            for tp in hinted:
                self._keep_hint(current, tp)
        return ClusterSnapshot(
            self._brokers, self._topics, self._errors, self._cluster_id, self._controller_id
        )

    def _keep_hint(self, current: ClusterSnapshot, tp: TopicPartition) -> None:
        """Keep ``tp``'s leader in ``current`` (a KIP-951 hint) if newer than the answer's."""
        built = self._topics.get(tp.topic)
        moved = current.topics.get(tp.topic)
        if built is None or moved is None or built.topic_id != moved.topic_id:
            return
        i = tp.partition
        if i >= built.num_partitions or i >= moved.num_partitions:
            return
        if moved.epochs[i] > built.epochs[i] and moved.leaders[i] in self._brokers:
            self._topics[tp.topic] = _with_partition(built, i, moved.leaders[i], moved.epochs[i])


def _with_partition(topic: TopicInfo, index: int, leader: int, epoch: int) -> TopicInfo:
    """``topic`` with partition ``index`` led by ``leader`` at ``epoch``."""
    leaders = list(topic.leaders)
    had_leader = leaders[index] >= 0
    leaders[index] = leader
    epochs = list(topic.epochs)
    epochs[index] = epoch
    new_leaders = tuple(leaders)
    return TopicInfo(
        topic.name,
        new_leaders,
        tuple(epochs),
        topic.available if had_leader and leader >= 0 else available_of(new_leaders),
        topic.is_internal,
        topic.topic_id,
    )


def _keep_newer(
    old: TopicInfo, leaders: tuple[int, ...], epochs: tuple[int, ...], brokers: Collection[int]
) -> Generator[None, None, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per partition, the answer's leader unless ``old`` has a newer epoch (in steps).

    Where ``old`` wins, its leader stays if it is still among ``brokers`` (else none).
    """
    count = min(len(leaders), old.num_partitions)
    old_epochs = old.epochs
    older: list[int] = []
    step = MERGE_STEP_PARTITIONS
    for start in range(0, count, step):
        if start:
            yield
        for i in range(start, min(start + step, count)):
            epoch = epochs[i]
            if 0 <= epoch < old_epochs[i]:
                older.append(i)
    if not older:
        return leaders, epochs
    new_leaders, new_epochs = list(leaders), list(epochs)
    for i in older:
        leader = old.leaders[i]
        new_leaders[i] = leader if leader in brokers else NO_LEADER
        new_epochs[i] = old_epochs[i]
    return tuple(new_leaders), tuple(new_epochs)
