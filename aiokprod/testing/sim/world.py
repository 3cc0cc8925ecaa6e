"""SimWorld: one simulated run's loop, cluster, network, faults and event trace, from a seed."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokprod.clock import LoopClock
from aiokprod.producer import Producer
from aiokprod.testing.sim.cluster import SimCluster
from aiokprod.testing.sim.faults import REPLACE_CLUSTER, ClusterEvent, FaultSchedule
from aiokprod.testing.sim.loop import VirtualLoop
from aiokprod.testing.sim.network import SimNetwork, SimTransport

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Topology:
    """Brokers and topics of a simulated cluster."""

    nodes: int
    topics: dict[str, int]
    #: Topics with a ``max.message.bytes`` (larger batches are refused MESSAGE_TOO_LARGE).
    max_message_bytes: dict[str, int] = field(default_factory=dict)


class SimWorld:
    """Everything outside the producer in one simulated run.

    Args:
        rng: the run's one random source (sub-streams are split off it in a fixed order).
        topology: brokers and topics.
        faults: the fault schedule (its own ``rng`` is replaced by a sub-stream of ``rng``).
    """

    def __init__(
        self, rng: random.Random, topology: Topology, faults: FaultSchedule | None = None
    ) -> None:
        self.loop = VirtualLoop()
        self.trace_lines: list[str] = []
        self.faults = faults or FaultSchedule()
        self.faults.rng = random.Random(rng.getrandbits(64))
        self.faults.origin_ms = self.loop.time_ms()
        self.cluster = SimCluster(
            topology.nodes,
            topology.topics,
            now_ms=self.loop.time_ms,
            rng=random.Random(rng.getrandbits(64)),
            faults=self.faults,
            trace=self.trace,
        )
        self.cluster.max_message_bytes.update(topology.max_message_bytes)
        self._topology = topology
        #: Every cluster of the run, oldest first; ``cluster`` is the newest (issue 29).
        self.clusters = [self.cluster]
        self.network = SimNetwork(
            self.loop,
            self.cluster,
            rng=random.Random(rng.getrandbits(64)),
            faults=self.faults,
            trace=self.trace,
        )
        self._rng = random.Random(rng.getrandbits(64))
        for broker in self.cluster.brokers.values():
            if topology.nodes > 1 and self._rng.random() < 0.3:
                broker.metadata_lag_ms = self._rng.randint(1, 300)
        self._watch_replication(self.cluster)
        self._first_base_port = 9092
        self.loop.starvation = self._starvation if "starve" in self.faults.kinds() else None
        self.max_jump_ms = 0
        self._schedule_events()

    def now_ms(self) -> int:
        """Virtual milliseconds since the run started."""
        return self.loop.time_ms() - self.faults.origin_ms

    def trace(self, line: str) -> None:
        """Append one event to the run's trace (stamped with virtual time)."""
        self.trace_lines.append(f"{self.now_ms():>7} {line}")

    def transport(self) -> SimTransport:
        """The transport the producer connects through."""
        return self.network.transport()

    def producer(self, rng: random.Random, **options: Any) -> Producer:
        """A Producer wired to this world: its bootstrap, transport and virtual clock.

        ``rng`` is the producer's own random source (tests pass a seeded one); ``options``
        are Producer's.
        """
        return Producer(
            self.cluster.bootstrap(),
            transport=self.transport(),
            clock=LoopClock(self.loop),
            rng=rng,
            **options,
        )

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` on this world's loop to its end, then close the loop."""
        try:
            return self.loop.run_until_complete(main)
        finally:
            self.loop.close()

    def digest(self) -> str:
        """A hash of the whole event trace (same seed -> same digest)."""
        return hashlib.sha256("\n".join(self.trace_lines).encode()).hexdigest()[:16]

    # --- scheduled faults -------------------------------------------------------------------

    def _starvation(self) -> float:
        window = self.faults.roll(("starve",), self.loop.time_ms())
        if window is None:
            return 0.0
        jump = self._rng.randint(1, max(1, window.magnitude_ms))
        self.max_jump_ms = max(self.max_jump_ms, jump)
        self.trace(f"starved {jump} ms")
        return float(jump)

    def _watch_replication(self, cluster: SimCluster) -> None:
        def replicate_later(tp: tuple[str, int]) -> None:
            self.loop.call_later(self._rng.uniform(0.005, 0.1), cluster.replicate, tp)

        cluster.on_unreplicated = replicate_later

    def _schedule_events(self) -> None:
        for event in self.faults.events:
            if event.kind == REPLACE_CLUSTER:
                self.loop.call_later(event.at_ms / 1000, self._replace_cluster, event)
            else:
                self.loop.call_later(event.at_ms / 1000, self._run_event, event.kind, event.down_ms)

    # --- the cluster replaced (issue 29) ----------------------------------------------------

    def _replace_cluster(self, event: ClusterEvent) -> None:
        """Every broker of the cluster stops; ``down_ms`` later another cluster runs."""
        old = self.cluster
        self.trace(f"cluster {old.cluster_id} goes away")
        self._stop_cluster(old)
        self.loop.call_later(event.down_ms / 1000, self._start_replacement, old, event)

    def _stop_cluster(self, cluster: SimCluster) -> None:
        cluster.stop_all()
        for node_id in sorted(cluster.brokers):
            self.network.cut_broker(node_id, cluster)

    def _start_replacement(self, old: SimCluster, event: ClusterEvent) -> None:
        """The new cluster: a new id, ids from 0, behind the bootstrap address (broker 0's)."""
        generation = len(self.clusters)
        base_port = self._first_base_port + 1000 * generation
        ports = {
            i: broker.port if event.in_place or i == 0 else base_port + i
            for i, broker in old.brokers.items()
        }
        new = SimCluster(
            len(old.brokers),
            dict(old.topics),
            now_ms=self.loop.time_ms,
            rng=random.Random(self._rng.getrandbits(64)),
            faults=self.faults,
            trace=self.trace,
            base_port=base_port,
            cluster_id=f"sim-cluster-{generation + 1}",
            ports=ports,
            first_producer_id=0,
        )
        new.max_message_bytes.update(old.max_message_bytes)
        for node_id, broker in new.brokers.items():
            broker.metadata_lag_ms = old.brokers[node_id].metadata_lag_ms
        self._watch_replication(new)
        # Another producer starts first and gets the id the producer under test holds.
        new.phantom_producer(old.issued[-1] if old.issued else 0)
        self.clusters.append(new)
        self.cluster = new
        self.network.add_cluster(new)
        self.trace(
            f"cluster {new.cluster_id} replaces {old.cluster_id} "
            + ("in place" if event.in_place else f"(ports {sorted(ports.values())})")
        )
        if event.stale_after_ms >= 0:
            self.loop.call_later(event.stale_after_ms / 1000, self._stale_back, old, event)

    def _stale_back(self, old: SimCluster, event: ClusterEvent) -> None:
        """The old cluster runs again on its addresses for a while (stale brokers)."""
        self.trace(f"stale cluster {old.cluster_id} runs again for {event.stale_ms} ms")
        old.start_all()
        self.loop.call_later(event.stale_ms / 1000, self._stale_gone, old)

    def _stale_gone(self, old: SimCluster) -> None:
        self.trace(f"stale cluster {old.cluster_id} gone again")
        self._stop_cluster(old)

    def _run_event(self, kind: str, down_ms: int) -> None:
        cluster = self.cluster
        if kind == "election":
            cluster.elect_random()
            return
        alive = [i for i, b in sorted(cluster.brokers.items()) if b.alive]
        if not alive:
            return
        new_port = kind == "restart_new_port"
        if new_port:
            # Broker 0 keeps its port: the bootstrap list must lead somewhere once it is up
            # (a producer cannot find a cluster whose every address it knows has moved).
            alive = [i for i in alive if i != 0] or alive
            new_port = alive != [0]
        node = self._rng.choice(alive)
        cluster.stop_broker(node)
        self.network.cut_broker(node)
        self.loop.call_later(down_ms / 1000, self._restart, node, new_port)

    def _restart(self, node: int, new_port: bool) -> None:
        self.cluster.start_broker(node, new_port=new_port)
        if self._rng.random() < 0.7:
            self.loop.call_later(self._rng.uniform(0.05, 1.0), self.cluster.preferred_election)
