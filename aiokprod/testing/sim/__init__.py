"""Deterministic simulation of the producer's send path (issue 11; docs/simulation.md).

* :mod:`.loop` — a virtual-time asyncio event loop (deadlock and livelock detection,
  starvation clock jumps).
* :mod:`.log` — a partition log with Kafka's producer-state rules.
* :mod:`.cluster` — :class:`SimCluster`: brokers answering ApiVersions, Metadata,
  InitProducerId and Produce; elections, restarts (also on a new port).
* :mod:`.network` — :class:`SimTransport`: in-memory byte streams with injected faults.
* :mod:`.faults` — fault schedules drawn from a seed.
* :mod:`.runner` — one seeded run of a workload against the real Producer, and its invariants.

``python -m aiokprod.testing.sim --seeds N`` runs many seeds; a failing one prints a replay
command.
"""

from __future__ import annotations

from aiokprod.testing.sim.cluster import SimBroker, SimCluster
from aiokprod.testing.sim.faults import FaultSchedule, FaultWindow, draw_schedule
from aiokprod.testing.sim.log import PartitionLog
from aiokprod.testing.sim.loop import DeadlockError, LivelockError, SimulationError, VirtualLoop
from aiokprod.testing.sim.network import SimNetwork, SimTransport

__all__ = [
    "DeadlockError",
    "FaultSchedule",
    "FaultWindow",
    "LivelockError",
    "PartitionLog",
    "SimBroker",
    "SimCluster",
    "SimNetwork",
    "SimTransport",
    "SimulationError",
    "VirtualLoop",
    "draw_schedule",
]
