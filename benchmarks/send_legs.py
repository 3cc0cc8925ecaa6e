"""Where a ``send_and_wait`` spends its time: our code before the write, the broker, our code after.

Each call is timed in three legs: the call until its Produce request is written to the socket;
written until the response's bytes reach our transport's callback (the network, the broker, and
the event loop waking up); those bytes until the call returns. Percentiles per leg show whether
a latency tail is the client's or the broker's. Measurement only: it wraps the transport's
write and receive methods from outside for the run, nothing in the package changes::

    .venv/bin/python -m aiokprod.testing run --topic bench:6:1
    .venv-mypyc/bin/python benchmarks/send_legs.py $BOOTSTRAP 5000 0 plain   # or idem

Arguments: bootstrap, timed calls, ``linger_ms``, ``idem`` (idempotent, the producer's default)
or ``plain`` (what the benchmark suite runs for every client). 300 untimed calls come first.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import aiokprod.net.transport as transport
from aiokprod import Producer

#: A Produce request of one 100-byte record is larger than this; metadata requests are not.
PRODUCE_MIN_BYTES = 150
WARM_UP_CALLS = 300


class Marks:
    """The last Produce write and the last arrival, in ``perf_counter`` seconds."""

    written = 0.0
    received = 0.0


def instrument() -> None:
    """Wrap the stream's write and receive so that each notes its time in :class:`Marks`."""
    stream = transport._AsyncioStream
    write = stream.write
    received = stream._received

    def timed_write(self: transport._AsyncioStream, data: bytes | bytearray) -> None:
        if len(data) > PRODUCE_MIN_BYTES:
            Marks.written = time.perf_counter()
        write(self, data)

    def timed_received(self: transport._AsyncioStream, data: bytes) -> None:
        Marks.received = time.perf_counter()
        received(self, data)

    stream.write = timed_write  # type: ignore[method-assign]
    stream._received = timed_received  # type: ignore[method-assign]


def percentile_us(values: list[float], point: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(point * len(ordered)))] * 1e6


async def run(bootstrap: str, calls: int, linger_ms: int, idempotent: bool) -> None:
    legs: dict[str, list[float]] = {
        "total": [],
        "call->written": [],
        "written->bytes": [],
        "bytes->return": [],
    }
    async with Producer(bootstrap, linger_ms=linger_ms, enable_idempotence=idempotent) as p:
        for _ in range(WARM_UP_CALLS):
            await p.send_and_wait("bench", b"x" * 100, key=b"k")
        for _ in range(calls):
            started = time.perf_counter()
            await p.send_and_wait("bench", b"x" * 100, key=b"k")
            ended = time.perf_counter()
            legs["total"].append(ended - started)
            legs["call->written"].append(Marks.written - started)
            legs["written->bytes"].append(Marks.received - Marks.written)
            legs["bytes->return"].append(ended - Marks.received)
    for name, values in legs.items():
        p50, p90, p99 = (percentile_us(values, q) for q in (0.5, 0.9, 0.99))
        print(f"{name:15s} p50 {p50:7.0f}  p90 {p90:7.0f}  p99 {p99:7.0f} µs")
    slowest = sorted(range(calls), key=lambda i: legs["total"][i])[-max(1, calls // 100) :]
    for name in ("call->written", "written->bytes", "bytes->return"):
        mean = statistics.mean(legs[name][i] for i in slowest) * 1e6
        print(f"slowest 1 %: {name} {mean:.0f} µs on average")


def main() -> None:
    bootstrap, calls, linger_ms, mode = sys.argv[1:5]
    if mode not in ("idem", "plain"):
        raise SystemExit("the fourth argument is idem or plain")
    instrument()
    asyncio.run(run(bootstrap, int(calls), int(linger_ms), mode == "idem"))


if __name__ == "__main__":
    main()
