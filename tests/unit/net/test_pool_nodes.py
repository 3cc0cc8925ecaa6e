"""Which broker the pool asks for metadata when none is connected."""

from __future__ import annotations

import random

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
