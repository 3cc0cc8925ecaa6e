"""Connections know their cluster; brokers of another cluster are not used (issue 29).

Two simulated clusters (``aiokprod.testing.sim``) answer on the network: the old one, and the
one that replaced it behind the same bootstrap address (``broker0.sim:9092``), its other
broker at the old address (replaced in place) or at a new one. The pool asks each broker its
cluster id when it connects, and the metadata fetcher follows the id of the answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aiokprod.clock import LoopClock
from aiokprod.errors import KafkaConnectionError
from aiokprod.internals.metadata import MetadataState
from aiokprod.internals.metadata_fetcher import MetadataFetcher
from aiokprod.internals.producer_id import init_producer_id
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.pool import ConnectionPool
from aiokprod.testing.sim.cluster import SimCluster
from aiokprod.testing.sim.loop import VirtualLoop
from aiokprod.testing.sim.network import SimNetwork

OLD, NEW = "cluster-old", "cluster-new"


class Clusters:
    """A virtual loop, the old and the new cluster (2 brokers each), and a pool."""

    def __init__(self, *, in_place: bool) -> None:
        self.loop = VirtualLoop()
        rng = random.Random(1)
        self.old = SimCluster(2, {"t": 2}, now_ms=self.loop.time_ms, rng=rng, cluster_id=OLD)
        ports = {0: 9092, 1: 9093 if in_place else 9501}
        self.new = SimCluster(
            2, {"t": 2}, now_ms=self.loop.time_ms, rng=rng, cluster_id=NEW, ports=ports
        )
        self.new.stop_all()  # not yet
        self.net = SimNetwork(self.loop, self.old, rng=rng, latency_ms=(0.1, 0.1))
        self.net.add_cluster(self.new)
        self.disconnects: list[int] = []
        self.tasks: list[asyncio.Task[None]] = []

    def replace(self) -> None:
        """The old cluster goes, the new one runs."""
        self.old.stop_all()
        for node in self.old.brokers:
            self.net.cut_broker(node, self.old)
        self.new.start_all()

    def pool(self) -> ConnectionPool:
        def spawn(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
            self.tasks.append(self.loop.create_task(fn()))

        return ConnectionPool(
            [("broker0.sim", 9092)],
            spawn=spawn,
            client_id="t",
            software_version="0",
            max_in_flight=5,
            setup_timeout_ms=1000,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=10,
            on_disconnect=self.disconnects.append,
            transport=self.net.transport(),
            clock=LoopClock(self.loop),
            rng=random.Random(2),
        )

    def fetcher(
        self,
        pool: ConnectionPool,
        on_cluster_change: Callable[[str, str], None] | None = None,
    ) -> tuple[MetadataState, MetadataFetcher]:
        """A metadata state and its fetcher on ``pool`` (refreshes are run by hand)."""
        state = MetadataState(300_000, 300_000, 10, 10)
        fetcher = MetadataFetcher(
            state,
            pool,
            pool._spawn,
            request_timeout_ms=200,
            allow_auto_create_topics=False,
            on_update=lambda: None,
            on_cluster_change=on_cluster_change,
            clock=LoopClock(self.loop),
        )
        return state, fetcher

    def run(self, main: Coroutine[Any, Any, None]) -> None:
        try:
            self.loop.run_until_complete(main)
        finally:
            for task in self.tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()


def current(pool: ConnectionPool) -> str | None:
    """Read through a call (mypy would narrow ``pool.cluster_id`` across calls)."""
    return pool.cluster_id


def is_ready(conn: BrokerConnection) -> bool:
    """Read through a call (mypy would narrow ``conn.ready`` across calls)."""
    return conn.ready


def test_a_connection_knows_its_cluster_and_set_cluster_closes_the_others() -> None:
    world = Clusters(in_place=False)

    async def main() -> None:
        pool = world.pool()
        assert current(pool) is None
        conn = await pool.connection(-1, 1.0)
        assert conn.cluster_id == OLD
        assert current(pool) == OLD  # the first broker heard from names the cluster
        pool.set_cluster(OLD)
        assert is_ready(conn)  # same cluster: kept
        pool.update_nodes({0: ("broker0.sim", 9092), 1: ("broker1.sim", 9093)})
        node1 = await pool.connection(1, 1.0)
        pool.set_cluster(NEW)
        assert not is_ready(node1)
        assert not is_ready(conn)
        assert "writes to cluster 'cluster-new' now" in str(node1.closed_error)
        assert pool.is_retired(OLD)
        assert not pool.is_retired(NEW)

    world.run(main())


@pytest.mark.parametrize("in_place", [True, False])
def test_a_node_of_another_cluster_is_not_used_but_a_bootstrap_address_finds_it(
    in_place: bool,
) -> None:
    world = Clusters(in_place=in_place)

    async def main() -> None:
        pool = world.pool()
        pool.set_cluster(OLD)
        pool.update_nodes({0: ("broker0.sim", 9092), 1: ("broker1.sim", 9093)})
        world.replace()
        # Node 1's address now leads to the new cluster (in place) or nowhere: either way no
        # connection there is usable for the old cluster's partitions.
        with pytest.raises(KafkaConnectionError) as raised:
            await pool.connection(1, 0.5)
        if in_place:
            assert "belongs to cluster 'cluster-new', not to cluster 'cluster-old'" in str(
                raised.value
            )
            assert 1 in world.disconnects  # so the producer asks for metadata again
        # The bootstrap address leads to the new cluster: usable, for its metadata.
        bootstrap = await pool.connection(-1, 1.0)
        assert bootstrap.cluster_id == NEW
        assert not pool.belongs_to_cluster(bootstrap)

    world.run(main())


def test_a_stale_broker_of_a_cluster_left_behind_is_refused_everywhere() -> None:
    world = Clusters(in_place=True)

    async def main() -> None:
        pool = world.pool()
        pool.set_cluster(OLD)
        world.replace()
        pool.set_cluster(NEW)
        pool.update_nodes({0: ("broker0.sim", 9092), 1: ("broker1.sim", 9093)})
        # The old cluster answers again on the shared addresses, the new one is down.
        world.new.stop_all()
        world.old.start_all()
        for node in (1, -1):  # a node address and the bootstrap address
            with pytest.raises(KafkaConnectionError) as raised:
                await pool.connection(node, 0.5)
            assert "which this producer left for cluster 'cluster-new'" in str(raised.value)

    world.run(main())


def test_the_fetcher_follows_a_new_cluster_once_and_refuses_the_old_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokprod.metadata")
    world = Clusters(in_place=False)
    changes: list[tuple[str, str]] = []

    async def main() -> None:
        pool = world.pool()
        state, fetcher = world.fetcher(
            pool, on_cluster_change=lambda old, new: changes.append((old, new))
        )
        refresh = fetcher._refresh  # one refresh, on the bootstrap address (node -1)
        await refresh(-1, ["t"])
        assert pool.cluster_id == OLD
        assert changes == []
        assert state.snapshot.cluster_id == OLD
        world.replace()
        await asyncio.sleep(0.05)  # the cut reaches the pool; the reconnect backoff passes
        await refresh(-1, ["t"])
        assert changes == [(OLD, NEW)]
        assert pool.cluster_id == NEW
        assert state.snapshot.cluster_id == NEW
        assert state.snapshot.brokers[1].port == 9501  # nothing of the old view is kept
        # The old cluster answers on the bootstrap address again: not followed back.
        world.new.stop_all()
        for node in world.new.brokers:
            world.net.cut_broker(node, world.new)
        world.old.start_all()
        await asyncio.sleep(0.05)
        await refresh(-1, ["t"])
        assert changes == [(OLD, NEW)]
        assert pool.cluster_id == NEW
        assert "left for cluster 'cluster-new'" in str(fetcher.last_error)

    world.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    changed = [w for w in warnings if "cluster behind bootstrap_servers changed" in w]
    assert len(changed) == 1
    assert f"old_cluster_id='{OLD}'" in changed[0]
    assert f"new_cluster_id='{NEW}'" in changed[0]


def test_a_producer_id_comes_only_from_the_cluster_the_producer_writes_to() -> None:
    world = Clusters(in_place=False)

    async def main() -> None:
        pool = world.pool()
        pool.set_cluster(OLD)
        world.replace()  # the bootstrap address (the only one known) leads to the new cluster
        got = asyncio.ensure_future(
            init_producer_id(
                pool,
                LoopClock(world.loop),
                random.Random(3),
                request_timeout_ms=500,
                retry_backoff_ms=10,
                retry_backoff_max_ms=10,
                stopped=lambda: False,
            )
        )
        await asyncio.sleep(1.0)
        assert not got.done()  # asked, answered, and refused: it keeps trying
        assert world.new.issued  # the new cluster did answer
        pool.set_cluster(NEW)
        assert await got == (world.new.issued[-1], 0)

    world.run(main())


def test_metadata_fetched_again_is_info_after_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A recovery reads as INFO next to the WARNING of the failure (as "broker reachable
    again" does for a connection)."""
    caplog.set_level(logging.DEBUG, logger="aiokprod.metadata")
    world = Clusters(in_place=False)

    async def main() -> None:
        pool = world.pool()
        state, fetcher = world.fetcher(pool)
        world.old.stop_all()
        for _ in range(3):
            await fetcher._refresh(-1, ["t"])
            await asyncio.sleep(0.05)
        world.old.start_all()
        await fetcher._refresh(-1, ["t"])
        assert state.snapshot.cluster_id == OLD

    world.run(main())
    levels = {r.getMessage().split("'")[1]: r.levelno for r in caplog.records if r.levelno >= 20}
    assert levels["metadata fetched again"] == logging.INFO
    failing = [event for event in levels if event.startswith("cannot fetch metadata")]
    assert [levels[event] for event in failing] == [logging.WARNING]
