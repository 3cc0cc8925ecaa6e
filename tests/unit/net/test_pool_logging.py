"""A broker that cannot be reached is reported at WARNING, rate-limited, and its recovery too."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest

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
    assert "cannot connect to broker" in first[0]
    assert "broker.invalid" in first[0]
    clock.now_ms += WARN_EVERY_MS
    await attempt()
    assert len(warnings_of(caplog)) == 2  # still down after the interval: said again
    pool.close_all()
