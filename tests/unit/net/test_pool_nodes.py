"""Which broker the pool asks for metadata when none is connected."""

from __future__ import annotations

import asyncio
import random

import pytest

from aiokprod.errors import KafkaConnectionError
from aiokprod.net.pool import ConnectionPool


def test_bootstrap_addresses_are_tried_when_no_broker_of_the_view_is_connected() -> None:
    """A view whose brokers all moved must not keep the producer asking only them.

    (Found by the simulator, seed 110404: metadata fetched while one broker was down named
    only the other, which then came back on a new port; the producer asked its old address
    forever instead of the bootstrap address of the broker that was back.)
    """
    pool = ConnectionPool(
        [("broker0", 9092), ("broker1", 9093)],
        spawn=lambda fn: None,
        client_id="t",
        software_version="0",
        max_in_flight=5,
        setup_timeout_ms=1000,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
        rng=random.Random(7),
    )
    pool.update_nodes({1: ("broker1", 9093)})  # the view names broker 1 only
    chosen = {pool.least_loaded_node(0) for _ in range(50)}
    broker1_from_the_view, broker0_from_bootstrap = 1, -1
    assert broker1_from_the_view in chosen
    assert broker0_from_bootstrap in chosen  # broker0:9092, known only from bootstrap
    assert chosen <= {1, -1, -2}


class _TickingClock:
    """Every reading is one millisecond later: no two attempts share a timestamp."""

    def __init__(self) -> None:
        self.now_ms = 0

    def monotonic_ms(self) -> int:
        self.now_ms += 1
        return self.now_ms


class _Refusing:
    """A transport where every broker refuses connections."""

    async def connect(
        self, host: str, port: int, *, ssl_context: object = None, server_hostname: object = None
    ) -> None:
        raise ConnectionRefusedError(111, f"refused ({host}:{port})")


async def test_each_address_is_tried_before_any_is_tried_again() -> None:
    """The address tried longest ago goes first (simulator seed 36220: a random pick kept
    choosing the two addresses of a broker that had moved, never the one that was back)."""
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    clock = _TickingClock()
    pool = ConnectionPool(
        [("broker0", 9092), ("broker1", 9093)],
        spawn=lambda fn: tasks.append(loop.create_task(fn())),
        client_id="t",
        software_version="0",
        max_in_flight=5,
        setup_timeout_ms=1000,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
        transport=_Refusing(),  # type: ignore[arg-type]
        clock=clock,
        rng=random.Random(7),
    )
    pool.update_nodes({1: ("broker1", 9093)})
    tried = []
    for _ in range(6):
        node = pool.least_loaded_node(clock.monotonic_ms())
        assert node is not None
        tried.append(node)
        with pytest.raises(KafkaConnectionError):
            await pool.connection(node, 5.0)
    # Three candidates (broker 1 from the view, both bootstrap addresses): each once per round.
    assert sorted(tried[:3]) == [-2, -1, 1]
    assert sorted(tried[3:]) == [-2, -1, 1]
    pool.close_all()
    await asyncio.gather(*tasks, return_exceptions=True)
