"""SimCluster and SimBroker: brokers that answer our protocol layer's messages in process.

Each broker answers ApiVersions (the ranges a Kafka 4.3 broker advertises for the APIs the
producer uses), Metadata (alive brokers, topics, partitions, leaders, leader epochs — possibly
a little stale on some brokers, as a real broker's metadata cache is), InitProducerId, and
Produce with Kafka's producer-state rules (:mod:`aiokprod.testing.sim.log`),
NOT_LEADER_OR_FOLLOWER with KIP-951 current-leader hints and node endpoints (Produce v10+).
The cluster moves leaders (elections, bumping the leader epoch), stops and restarts brokers
(also on a new port, which metadata then reports) and, for acks=1, loses writes that had not
reached a follower when leadership moves. A topic may have a ``max.message.bytes``: larger
batches are refused with MESSAGE_TOO_LARGE.

A cluster has an id and remembers the producer ids it issued to the producer: a batch under
any other id is a violation (issue 29: the cluster that replaced another may have given the
old one's id to another producer, :meth:`SimCluster.phantom_producer`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokprod.errors import ProtocolError
from aiokprod.protocol.messages.api_versions import (
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from aiokprod.protocol.messages.produce import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from aiokprod.protocol.record_reader import Record, RecordBatch, read_record_batches
from aiokprod.protocol.schema import Struct
from aiokprod.testing.sim.faults import FaultSchedule
from aiokprod.testing.sim.log import NONE, PartitionLog
from aiokprod.testing.sim.telemetry import SimTelemetry

#: What an Apache Kafka 4.3 broker advertises for the APIs the producer uses (Produce's
#: minimum stays 0 although v0-v2 are rejected: KAFKA-18659; InitProducerId v6 is unstable).
BROKER_API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 13),  # Produce
    3: (0, 13),  # Metadata
    10: (0, 6),  # FindCoordinator
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 5),  # InitProducerId
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    36: (0, 2),  # SaslAuthenticate
}

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87

Trace = Callable[[str], None]
#: Values of the records :meth:`SimCluster.phantom_producer` writes.
PHANTOM_PREFIX = b"phantom:"
_REJECTIONS = ("not_leader", "not_enough_replicas", "unknown_producer_id")
_NO_LOG_START = (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, CORRUPT_MESSAGE)


@dataclass(slots=True)
class SimBroker:
    """One broker: where it listens and whether it runs."""

    node_id: int
    host: str
    port: int
    alive: bool = True
    #: Incremented on every restart: requests read by an earlier incarnation are lost.
    incarnation: int = 0
    #: How stale this broker's metadata view is (milliseconds).
    metadata_lag_ms: int = 0


@dataclass(slots=True)
class SimPartition:
    """A partition: replicas (the first is preferred), the leader and its epoch, the log."""

    topic: str
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    log: PartitionLog = field(default_factory=PartitionLog)


@dataclass(frozen=True, slots=True)
class _View:
    """Metadata as of one moment: endpoints of alive brokers and partition leadership."""

    brokers: tuple[tuple[int, str, int], ...]
    leaders: dict[tuple[str, int], tuple[int, int, tuple[int, ...]]]


class SimCluster:
    """A cluster of simulated brokers holding ``topics`` (name -> partition count).

    Args:
        now_ms: the virtual clock (milliseconds).
        rng: the broker's random stream (from the run's seed).
        faults: the run's fault schedule (broker-side faults are rolled here).
        trace: appends one event line to the run's trace.
        placement: per topic, the replicas of every partition (the first leads); other
            topics' partitions are spread over the brokers.
    """

    def __init__(
        self,
        node_count: int,
        topics: dict[str, int],
        *,
        now_ms: Callable[[], int],
        rng: random.Random,
        faults: FaultSchedule | None = None,
        trace: Trace | None = None,
        base_port: int = 9092,
        cluster_id: str = "sim-cluster",
        ports: dict[int, int] | None = None,
        first_producer_id: int | None = None,
        placement: dict[str, list[int]] | None = None,
    ) -> None:
        self.now_ms = now_ms
        self.rng = rng
        self.faults = faults or FaultSchedule()
        self.trace: Trace = trace or (lambda line: None)
        ports = ports or {}
        self.brokers: dict[int, SimBroker] = {
            i: SimBroker(i, f"broker{i}.sim", ports.get(i, base_port + i))
            for i in range(node_count)
        }
        self._next_port = base_port + 100
        self.cluster_id = cluster_id
        self.next_producer_id = (
            1000 + rng.randrange(1000) if first_producer_id is None else first_producer_id
        )
        #: Producer ids issued by InitProducerId (to the producer under test), in order.
        self.issued: list[int] = []
        #: Producer ids given to other producers (:meth:`phantom_producer`).
        self.phantom_ids: set[int] = set()
        self.partitions: dict[tuple[str, int], SimPartition] = {}
        ids = sorted(self.brokers)
        rf = min(3, node_count)
        placement = placement or {}
        for name, count in topics.items():
            placed = placement.get(name)
            for p in range(count):
                replicas = list(placed) if placed else [ids[(p + j) % len(ids)] for j in range(rf)]
                self.partitions[name, p] = SimPartition(name, p, replicas, replicas[0])
        self.topics = dict(topics)
        #: Per topic, the largest batch accepted (``max.message.bytes``); none: no limit.
        self.max_message_bytes: dict[str, int] = {}
        #: Protocol violations by the client (a malformed request, a corrupt batch).
        self.violations: list[str] = []
        self._views: list[tuple[int, _View]] = []
        #: Per Metadata request answered: how many topics it asked for (-1: every topic;
        #: 0: none, as a connection asks for the cluster id as it opens).
        self.metadata_requests: list[int] = []
        #: The last Metadata answers, by (view, topics asked): a large cluster's answer is
        #: built once per view (the scale harness asks for 100,000 partitions every second).
        self._metadata_cache: dict[
            tuple[int, tuple[str, ...] | None], tuple[_View, MetadataResponse]
        ] = {}
        #: Milliseconds a broker spends on a partition's first append (a real broker opens
        #: the partition's time index then: docs/benchmarks.md); 0 by default.
        self.first_append_ms = 0.0
        #: What the last Produce request cost the broker beyond its usual processing delay.
        self.last_request_cost_ms = 0.0
        #: Called with a partition after an acks=1 write (the world replicates it later).
        self.on_unreplicated: Callable[[tuple[str, int]], None] = lambda tp: None
        #: Client telemetry (KIP-714): with a receiver, brokers advertise and answer it.
        self.telemetry: SimTelemetry | None = None
        self._snapshot()

    # --- topology ---------------------------------------------------------------------------

    def bootstrap(self) -> list[str]:
        """``host:port`` of every broker, for ``bootstrap_servers``."""
        return [f"{b.host}:{b.port}" for b in self.brokers.values()]

    def endpoint(self, host: str, port: int) -> SimBroker | None:
        """The running broker listening at ``host:port``, if any."""
        for broker in self.brokers.values():
            if broker.alive and broker.host == host and broker.port == port:
                return broker
        return None

    def elect(self, tp: tuple[str, int], leader: int | None = None) -> None:
        """Move ``tp``'s leadership (to ``leader``, or to another alive replica)."""
        part = self.partitions[tp]
        if leader is None:
            candidates = [r for r in part.replicas if r != part.leader and self.brokers[r].alive]
            if not candidates:
                if part.leader >= 0 and self.brokers[part.leader].alive:
                    return
                leader = -1
            else:
                leader = self.rng.choice(candidates)
        if leader == part.leader:
            return
        lost = part.log.truncate_unreplicated()
        part.leader = leader
        part.leader_epoch += 1
        self.trace(f"elect {tp[0]}-{tp[1]} leader={leader} epoch={part.leader_epoch} lost={lost}")
        self._snapshot()

    def elect_random(self) -> None:
        """A leader election on one partition picked at random."""
        tp = self.rng.choice(sorted(self.partitions))
        self.elect(tp)

    def stop_broker(self, node_id: int) -> None:
        """Stop a broker (its connections are cut by the network); leaders move off it."""
        broker = self.brokers[node_id]
        if not broker.alive:
            return
        broker.alive = False
        self.trace(f"stop broker {node_id}")
        for tp, part in sorted(self.partitions.items()):
            if part.leader == node_id:
                self.elect(tp)
        self._snapshot()

    def start_broker(self, node_id: int, *, new_port: bool = False) -> None:
        """Restart a broker (on a new port if asked); leaderless partitions get it back."""
        broker = self.brokers[node_id]
        if broker.alive:
            return
        broker.alive = True
        broker.incarnation += 1
        if new_port:
            broker.port = self._next_port
            self._next_port += 1
        self.trace(f"start broker {node_id} port={broker.port}")
        for tp, part in sorted(self.partitions.items()):
            if part.leader == -1 and node_id in part.replicas:
                self.elect(tp, node_id)
        self._snapshot()

    def preferred_election(self) -> None:
        """Move every partition back to its preferred (first) replica, if that one runs."""
        for tp, part in sorted(self.partitions.items()):
            preferred = part.replicas[0]
            if part.leader != preferred and self.brokers[preferred].alive:
                self.elect(tp, preferred)

    def stop_all(self) -> None:
        """Every broker stops (the cluster is gone)."""
        for node_id in sorted(self.brokers):
            self.stop_broker(node_id)

    def start_all(self) -> None:
        """Every stopped broker starts again on its port (a stale cluster comes back)."""
        for node_id in sorted(self.brokers):
            self.start_broker(node_id)

    def phantom_producer(self, producer_id: int) -> None:
        """Another producer got ``producer_id`` and wrote a record to every partition.

        A new cluster's ids start from 0 again (issue 29); its values: :data:`PHANTOM_PREFIX`.
        """
        self.phantom_ids.add(producer_id)
        if self.next_producer_id == producer_id:
            self.next_producer_id += 1
        self.trace(f"phantom producer {producer_id} on {self.cluster_id}")
        for (topic, index), part in sorted(self.partitions.items()):
            value = PHANTOM_PREFIX + f"{self.cluster_id}:{topic}-{index}".encode()
            batch = RecordBatch(
                0, 0, 0, 0, 0, 0, 0, producer_id, 0, 0, (Record(0, 0, None, value, ()),)
            )
            part.log.append(batch)

    def replicate(self, tp: tuple[str, int]) -> None:
        """The followers caught up with ``tp``'s leader (acks=1 writes are now safe)."""
        self.partitions[tp].log.replicate()

    def _snapshot(self) -> None:
        view = _View(
            tuple((b.node_id, b.host, b.port) for b in self.brokers.values() if b.alive),
            {
                tp: (p.leader, p.leader_epoch, tuple(p.replicas))
                for tp, p in self.partitions.items()
            },
        )
        self._views.append((self.now_ms(), view))
        if len(self._views) > 64:
            del self._views[:-64]

    def _view(self, broker: SimBroker) -> _View:
        cutoff = self.now_ms() - broker.metadata_lag_ms
        chosen = self._views[0][1]
        for at_ms, view in self._views:
            if at_ms > cutoff:
                break
            chosen = view
        return chosen

    # --- requests ---------------------------------------------------------------------------

    def handle(
        self, broker: SimBroker, api_key: int, version: int, request: Struct
    ) -> Struct | None:
        """The response of ``broker`` to a decoded request (None: no response, acks=0).

        Raises:
            ProtocolError: the request is one a real broker would close the connection for.
        """
        if api_key == 18 and isinstance(request, ApiVersionsRequest):
            return self._api_versions(version)
        if api_key == 3 and isinstance(request, MetadataRequest):
            return self._metadata(broker, request)
        if api_key == 22 and isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request)
        if api_key == 0 and isinstance(request, ProduceRequest):
            return self._produce(broker, version, request)
        if api_key in (71, 72) and self.telemetry is not None:
            return self.telemetry.handle(broker.node_id, api_key, request)
        raise ProtocolError(f"the simulated broker does not answer api key {api_key}")

    def _api_versions(self, version: int) -> ApiVersionsResponse:
        ranges = dict(BROKER_API_VERSIONS)
        if self.telemetry is not None:
            ranges.update({71: (0, 0), 72: (0, 0)})
        return ApiVersionsResponse(
            error_code=0,
            api_keys=[
                ApiVersionRange(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in ranges.items()
            ],
            throttle_time_ms=0,
        )

    def _metadata(self, broker: SimBroker, request: MetadataRequest) -> MetadataResponse:
        view = self._view(broker)
        asked = None if request.topics is None else tuple(t.name or "" for t in request.topics)
        self.metadata_requests.append(-1 if asked is None else len(asked))
        key = (id(view), asked)
        cached = self._metadata_cache.get(key)
        if cached is None or cached[0] is not view:
            if len(self._metadata_cache) >= 8:
                self._metadata_cache.clear()
            cached = self._metadata_cache[key] = (view, self._metadata_answer(view, request))
        return cached[1]

    def _metadata_answer(self, view: _View, request: MetadataRequest) -> MetadataResponse:
        if request.topics is None:
            names: list[str] = sorted(self.topics)
        else:
            names = [t.name for t in request.topics if t.name is not None]
        alive = {b[0] for b in view.brokers}
        topics = []
        for name in names:
            count = self.topics.get(name)
            if count is None:
                topics.append(
                    MetadataTopic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, partitions=[])
                )
                continue
            partitions = []
            for p in range(count):
                leader, epoch, replicas = view.leaders[name, p]
                partitions.append(
                    MetadataPartition(
                        error_code=0 if leader >= 0 else LEADER_NOT_AVAILABLE,
                        partition_index=p,
                        leader_id=leader,
                        leader_epoch=epoch,
                        replica_nodes=list(replicas),
                        isr_nodes=[r for r in replicas if r in alive],
                        offline_replicas=[r for r in replicas if r not in alive],
                    )
                )
            topics.append(MetadataTopic(error_code=0, name=name, partitions=partitions))
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[
                MetadataBroker(node_id=i, host=h, port=port, rack=None)
                for i, h, port in view.brokers
            ],
            cluster_id=self.cluster_id,
            controller_id=min(alive, default=-1),
            topics=topics,
            error_code=0,
        )

    def _init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        pid = self.next_producer_id
        self.next_producer_id += 1
        while self.next_producer_id in self.phantom_ids:
            self.next_producer_id += 1
        self.issued.append(pid)
        self.trace(f"init_producer_id -> {pid}")
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0
        )

    def _produce(
        self, broker: SimBroker, version: int, request: ProduceRequest
    ) -> ProduceResponse | None:
        now = self.now_ms()
        endpoints: dict[int, SimBroker] = {}
        topics = []
        self.last_request_cost_ms = 0.0
        for topic in request.topic_data:
            results = []
            for data in topic.partition_data:
                if self.first_append_ms:
                    part = self.partitions.get((topic.name, data.index))
                    if part is not None and not part.log.batches:
                        self.last_request_cost_ms += self.first_append_ms
                result = self._produce_partition(
                    broker, version, request.acks, topic.name, data.index, data.records, now
                )
                hint = result.current_leader
                if hint is not None and hint.leader_id >= 0:
                    endpoints[hint.leader_id] = self.brokers[hint.leader_id]
                results.append(result)
            topics.append(ProduceTopicResponse(name=topic.name, partition_responses=results))
        if request.acks == 0:
            return None
        return ProduceResponse(
            responses=topics,
            throttle_time_ms=0,
            node_endpoints=[
                NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=None)
                for b in endpoints.values()
            ]
            if version >= 10
            else [],
        )

    def _produce_partition(
        self,
        broker: SimBroker,
        version: int,
        acks: int,
        topic: str,
        index: int,
        records: bytes | bytearray | memoryview | None,
        now_ms: int,
    ) -> ProducePartitionResponse:
        def answer(
            error: int, base_offset: int = -1, message: str | None = None
        ) -> ProducePartitionResponse:
            return ProducePartitionResponse(
                index=index,
                error_code=error,
                base_offset=base_offset,
                log_append_time_ms=-1,
                # Kafka reports the log start offset except for these errors
                # (ReplicaManager.appendToLocalLog); nothing is ever deleted here, so it is 0.
                log_start_offset=-1 if error in _NO_LOG_START else 0,
                record_errors=[],
                error_message=message,
            )

        part = self.partitions.get((topic, index))
        if part is None:
            return answer(UNKNOWN_TOPIC_OR_PARTITION)
        if acks not in (-1, 0, 1):
            self.violations.append(f"Produce with acks={acks}")
            return answer(INVALID_REQUIRED_ACKS)
        if part.leader != broker.node_id:
            response = answer(NOT_LEADER_OR_FOLLOWER)
            if version >= 10 and part.leader >= 0:
                response.current_leader = LeaderIdAndEpoch(
                    leader_id=part.leader, leader_epoch=part.leader_epoch
                )
            self.trace(f"produce {topic}-{index} on {broker.node_id}: not leader ({part.leader})")
            return response
        if records is None:
            self.violations.append(f"Produce {topic}-{index}: null records")
            return answer(INVALID_RECORD)
        try:
            batches = list(read_record_batches(records))
        except ProtocolError as exc:
            self.violations.append(f"Produce {topic}-{index}: unreadable batch: {exc}")
            return answer(CORRUPT_MESSAGE, message=str(exc))
        if len(batches) != 1 or batches[0].attributes & 0x30:
            self.violations.append(f"Produce {topic}-{index}: {len(batches)} batches or bad flags")
            return answer(INVALID_RECORD)
        batch = batches[0]
        pid = batch.producer_id
        if pid >= 0 and pid not in self.issued:
            whose = " (it belongs to another producer)" if pid in self.phantom_ids else ""
            self.violations.append(
                f"Produce to {topic}-{index} of cluster {self.cluster_id} under producer id "
                f"{pid}, which this cluster never issued to the producer{whose}"
            )
        if self._too_large(part, batch, len(records)):
            self.trace(f"produce {topic}-{index}: {len(records)} bytes, MESSAGE_TOO_LARGE")
            return answer(MESSAGE_TOO_LARGE, message="the batch is larger than max.message.bytes")
        rejection = self._injected_rejection(part, batch, version, answer, now_ms)
        if rejection is not None:
            return rejection
        result = part.log.append(batch, replicated=acks != 1)
        self.trace(
            f"produce {topic}-{index} pid={batch.producer_id} e={batch.producer_epoch} "
            f"seq={batch.base_sequence} n={len(batch.records)} -> err={result.error_code} "
            f"off={result.base_offset}{' dup' if result.duplicate else ''}"
        )
        if result.error_code == NONE and not result.duplicate:
            if acks == 1:
                self.on_unreplicated((topic, index))
            if acks == -1 and self.faults.roll(("apply_timeout",), now_ms):
                return answer(REQUEST_TIMED_OUT)
        return answer(result.error_code, result.base_offset, result.message)

    def _too_large(self, part: SimPartition, batch: RecordBatch, size: int) -> bool:
        """Whether the topic's ``max.message.bytes`` refuses this batch.

        Kafka checks the size before the producer state, so a new producer's first batch
        is refused too (a broker without state for it would take a later one with any
        sequence: the producer must not have one out, see docs/simulation.md).
        """
        limit = self.max_message_bytes.get(part.topic)
        return limit is not None and size > limit

    def _injected_rejection(
        self,
        part: SimPartition,
        batch: RecordBatch,
        version: int,
        answer: Callable[[int], ProducePartitionResponse],
        now_ms: int,
    ) -> ProducePartitionResponse | None:
        """An injected error answer for this batch (nothing appended), or None."""
        topic, index = part.topic, part.index
        fault = self.faults.roll(_REJECTIONS, now_ms)
        if fault is None:
            return None
        if fault.kind == "not_leader":
            self.trace(f"produce {topic}-{index}: injected stale NOT_LEADER_OR_FOLLOWER")
            response = answer(NOT_LEADER_OR_FOLLOWER)
            if version >= 10:
                response.current_leader = LeaderIdAndEpoch(
                    leader_id=part.leader, leader_epoch=part.leader_epoch
                )
            return response
        if fault.kind == "not_enough_replicas":
            self.trace(f"produce {topic}-{index}: injected NOT_ENOUGH_REPLICAS")
            return answer(NOT_ENOUGH_REPLICAS)
        # Only where the producer has state: a 4.x broker without it takes the batch.
        if batch.producer_id in part.log.producers and part.log.would_append(batch):
            self.trace(f"produce {topic}-{index}: injected UNKNOWN_PRODUCER_ID")
            return answer(UNKNOWN_PRODUCER_ID)
        return None
