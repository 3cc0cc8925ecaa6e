"""A broker that cannot be reached is reported at WARNING, rate-limited, and its recovery too."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest

from aiokprod.logs import EVENT_ATTR, FIELDS_ATTR
from aiokprod.net.pool import WARN_EVERY_MS, ConnectionPool
from aiokprod.net.transport import ByteStream


class ManualClock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def monotonic_ms(self) -> int:
        return self.now_ms


class RefusingTransport:
    def __init__(self) -> None:
        self.attempts = 0

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ByteStream:
        self.attempts += 1
        raise ConnectionRefusedError(111, "Connection refused")


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "aiokprod.net" and r.levelno == logging.WARNING
    ]


async def test_refused_connects_warn_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiokprod.net")
    clock = ManualClock()
    transport = RefusingTransport()
    tasks: list[asyncio.Task[None]] = []
    pool = ConnectionPool(
        [("broker.invalid", 9092)],
        spawn=lambda fn: tasks.append(asyncio.get_running_loop().create_task(fn())),
        client_id="t",
        software_version="0",
        max_in_flight=5,
        setup_timeout_ms=1000,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
        transport=transport,
        clock=clock,
    )

    async def attempt() -> None:
        pool.ready_connection(-1, clock.monotonic_ms())
        await asyncio.gather(*tasks)
        tasks.clear()

    for _ in range(5):
        await attempt()
        clock.now_ms += 1_000
    assert transport.attempts == 5
    first = warnings_of(caplog)
    assert len(first) == 1
    # its only bootstrap address: the warning says no bootstrap server can be reached
    assert "cannot connect to any bootstrap server" in first[0]
    assert "broker.invalid:9092" in first[0]
    clock.now_ms += WARN_EVERY_MS
    await attempt()
    assert len(warnings_of(caplog)) == 2  # still down after the interval: said again
    pool.close_all()


def refusing_pool(
    addresses: list[tuple[str, int]], clock: ManualClock, tasks: list[asyncio.Task[None]]
) -> ConnectionPool:
    return ConnectionPool(
        addresses,
        spawn=lambda fn: tasks.append(asyncio.get_running_loop().create_task(fn())),
        client_id="t",
        software_version="0",
        max_in_flight=5,
        setup_timeout_ms=1000,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
        transport=RefusingTransport(),
        clock=clock,
    )


async def test_no_reachable_bootstrap_address_is_said_on_the_first_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # issue 39: a producer pointed at addresses where no Kafka listens waited max_block_ms
    # (60 s) before its first clear word; the round that tried every address says so.
    caplog.set_level(logging.WARNING, logger="aiokprod.net")
    clock = ManualClock()
    tasks: list[asyncio.Task[None]] = []
    pool = refusing_pool([("a.invalid", 9092), ("b.invalid", 9093)], clock, tasks)
    for node_id in (-1, -2):
        pool.ready_connection(node_id, clock.monotonic_ms())
        await asyncio.gather(*tasks)
        tasks.clear()
    said = [
        (getattr(r, EVENT_ATTR), getattr(r, FIELDS_ATTR))
        for r in caplog.records
        if getattr(r, EVENT_ATTR, "").startswith("cannot")
    ]
    assert [event for event, _ in said] == [
        "cannot connect to broker; retrying",  # the first address, on its own
        "cannot connect to any bootstrap server; retrying",
    ]
    assert said[1][1]["bootstrap_servers"] == "a.invalid:9092,b.invalid:9093"
    # the next round, soon after: nothing more at WARNING
    for node_id in (-1, -2):
        pool.ready_connection(node_id, clock.monotonic_ms() + 1_000)
        await asyncio.gather(*tasks)
        tasks.clear()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
    pool.close_all()
