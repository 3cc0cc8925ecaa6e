"""Overdue requests: the pool looks at its connections only once a noted deadline is due.

The sender asks ``check_request_timeouts`` on every pass; with 100 brokers connected a look at
every connection on every pass was about a tenth of the CPU per record (issue 30,
``benchmarks/scale.py``).
The pool keeps the earliest deadline of the requests sent since its last look (a lower bound)
and answers with it until it is reached. Run on the simulated cluster, on virtual time.
"""

from __future__ import annotations

from aiokprod.errors import RequestTimeoutError
from aiokprod.net.connection import BrokerConnection
from aiokprod.protocol.messages.metadata import MetadataRequest

from .test_pool_cluster import Clusters, is_ready


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
        conn0 = await pool.connection(0, 1.0)
        conn1 = await pool.connection(1, 1.0)
        now = world.loop.time_ms()
        assert pool.check_request_timeouts(now) is None  # nothing sent: nothing to watch
        # Node 1's request is noted (due at +500). Node 0's is hidden from the pool (its
        # report switched off), due at +100: a look at the connections would close node 0
        # at +200, so whether the pool looks before +500 shows.
        late = _send_unanswered(world, conn1, now + 500)
        conn0.on_deadline = None
        early = _send_unanswered(world, conn0, now + 100)
        for later in (0, 200, 499):
            assert pool.check_request_timeouts(now + later) == now + 500
        assert is_ready(conn0)  # not looked at
        assert early == []
        # At the noted deadline every connection is looked at: both are overdue, both close,
        # and each request's handler has its timeout.
        assert pool.check_request_timeouts(now + 500) is None
        for conn, outcomes in ((conn0, early), (conn1, late)):
            assert len(outcomes) == 1
            assert isinstance(outcomes[0], RequestTimeoutError)
            assert isinstance(conn.closed_error, RequestTimeoutError)

    world.run(main())


def test_an_answered_request_leaves_a_floor_that_is_looked_at_once() -> None:
    world = Clusters(in_place=True)

    async def main() -> None:
        pool = world.pool()
        pool.update_nodes({0: ("broker0.sim", 9092)})
        conn = await pool.connection(0, 1.0)
        now = world.loop.time_ms()
        await conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 0.3)
        # Answered: the floor (a lower bound) stays until reached; the look then finds
        # nothing in flight, keeps the connection and clears the floor.
        assert pool.check_request_timeouts(world.loop.time_ms()) == now + 300
        assert pool.check_request_timeouts(now + 300) is None
        assert is_ready(conn)
        assert pool.check_request_timeouts(now + 10_000) is None

    world.run(main())
