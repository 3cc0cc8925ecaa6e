"""Overdue requests: the pool looks at its connections only once a noted deadline is due.

The sender asks ``check_request_timeouts`` on every pass; with 100 brokers connected a look at
every connection on every pass was most of a pass's cost (issue 30, ``benchmarks/scale.py``).
The pool keeps the earliest deadline of the requests sent since its last look (a lower bound)
and answers with it until it is reached. Run on the simulated cluster, on virtual time.
"""

from __future__ import annotations

from collections.abc import Callable

from aiokprod.errors import RequestTimeoutError
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.messages.metadata import MetadataRequest

from .test_pool_cluster import Clusters


def _counted(conn: BrokerConnection, looks: list[int]) -> Callable[[int], bool]:
    check = conn.check_timeouts

    def counted(now_ms: int) -> bool:
        looks.append(conn.node_id)
        return check(now_ms)

    return counted


def _count_looks(pool: ConnectionPool, looks: list[int]) -> None:
    """Count each connection's overdue check (a wrapper on the instances, not the class)."""
    for conn in pool._connections.values():
        conn.check_timeouts = _counted(conn, looks)  # type: ignore[method-assign,assignment]


def _send_unanswered(world: Clusters, conn: BrokerConnection, deadline_ms: int) -> list[object]:
    """A request the broker never answers; its handler's outcomes."""
    for server in world.net.connections:
        if server.broker.node_id == conn.node_id and not server.closed:
            server.silent = True
    outcomes: list[object] = []
    conn.send(
        MetadataRequest(topics=[], allow_auto_topic_creation=False),
        lambda body, error: outcomes.append(error if error is not None else body),
        deadline_ms=deadline_ms,
    )
    return outcomes


def test_connections_are_looked_at_only_once_a_deadline_is_due() -> None:
    world = Clusters(in_place=True)

    async def main() -> None:
        pool = world.pool()
        pool.update_nodes({0: ("broker0.sim", 9092), 1: ("broker1.sim", 9093)})
        await pool.connection(0, 1.0)
        conn1 = await pool.connection(1, 1.0)
        now = world.loop.time_ms()
        assert pool.check_request_timeouts(now) is None  # nothing sent: nothing to watch
        looks: list[int] = []
        _count_looks(pool, looks)
        outcomes = _send_unanswered(world, conn1, now + 500)
        # Before the deadline: the noted deadline comes back, no connection is looked at.
        for later in (0, 100, 499):
            assert pool.check_request_timeouts(now + later) == now + 500
        assert looks == []
        # At the deadline: every connection is looked at, the silent one is closed, and the
        # request's handler has its timeout.
        assert pool.check_request_timeouts(now + 500) is None
        assert sorted(looks) == [0, 1]
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], RequestTimeoutError)
        assert isinstance(conn1.closed_error, RequestTimeoutError)
        looks.clear()
        assert pool.check_request_timeouts(now + 600) is None
        assert looks == []  # nothing in flight since the last look

    world.run(main())


def test_an_answered_request_leaves_a_floor_that_is_looked_at_once() -> None:
    world = Clusters(in_place=True)

    async def main() -> None:
        pool = world.pool()
        pool.update_nodes({0: ("broker0.sim", 9092)})
        conn = await pool.connection(0, 1.0)
        now = world.loop.time_ms()
        await conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 0.3)
        # Answered: the floor (a lower bound) stays until reached, then one look clears it.
        assert pool.check_request_timeouts(world.loop.time_ms()) == now + 300
        looks: list[int] = []
        _count_looks(pool, looks)
        assert pool.check_request_timeouts(now + 300) is None
        assert looks == [0]
        assert conn.ready  # nothing was overdue: the connection stays

    world.run(main())
