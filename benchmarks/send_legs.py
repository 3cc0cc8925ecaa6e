"""Where a ``send_and_wait`` spends its time: our code before the write, the broker, our code after.

Each call is timed in three legs: the call until its Produce request is written to the socket;
written until the response's bytes are received from the socket (the network, the broker, and
the event loop waking up); those bytes until the call returns. Percentiles per leg show whether
a latency tail is the client's or the broker's. Measurement only: for the run, sockets are made
from a subclass whose ``send`` and ``recv_into`` note the time (whichever stream the producer
uses, ours or asyncio's transport, reads and writes through them); nothing in the package
changes::

    .venv/bin/python -m aiokprod.testing run --topic bench:6:1
    .venv-mypyc/bin/python benchmarks/send_legs.py $BOOTSTRAP 5000 0 plain   # or idem, floor

Arguments: bootstrap, timed calls, ``linger_ms``, and the mode: ``idem`` (idempotent, the
producer's default), ``plain`` (what the benchmark suite runs for every client), ``floor`` or
``block``. 300 untimed calls come first.

``floor`` is the lowest a client on asyncio can go: the Produce request the producer writes for
one record is captured, then sent again and again (a new correlation id each time) over a bare
``asyncio.Protocol`` that only waits for the response's size; nothing is encoded, decoded or
completed. Its latency is the broker's round trip plus the event loop's own wake-up. ``block``
sends the same request over a blocking socket with no event loop at all: the broker's round
trip alone.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import struct
import sys
import time
from typing import Any

from aiokprod import Producer

#: A Produce request of one 100-byte record is larger than this; metadata requests are not.
PRODUCE_MIN_BYTES = 150
WARM_UP_CALLS = 300


class Marks:
    """The last Produce write and the last arrival, in ``perf_counter`` seconds."""

    written = 0.0
    received = 0.0
    #: The last Produce request written (its size prefix included).
    frame = b""


class _TimedSocket(socket.socket):
    """A socket that notes its Produce writes and its arrivals in :class:`Marks`."""

    def send(self, data: Any, flags: int = 0) -> int:
        if len(data) > PRODUCE_MIN_BYTES:
            Marks.written = time.perf_counter()
            Marks.frame = bytes(data)
        return super().send(data, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        received = super().recv_into(buffer, nbytes, flags)
        Marks.received = time.perf_counter()
        return received


def instrument() -> None:
    """Make every socket opened from now on a :class:`_TimedSocket`.

    (The streams are compiled classes in the compiled build, whose methods cannot be wrapped;
    the socket they are given can be.)
    """
    socket.socket = _TimedSocket  # type: ignore[misc]


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


class _Replay(asyncio.Protocol):
    """Completes ``waiter`` when a whole response (size prefix and body) has arrived."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if (
            len(self.buffer) >= 4
            and len(self.buffer) >= 4 + struct.unpack_from(">i", self.buffer)[0]
        ):
            self.buffer.clear()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)


async def floor(bootstrap: str, calls: int, linger_ms: int) -> None:
    """Time ``calls`` round trips of the producer's own Produce request over a bare protocol."""
    frame = await _capture(bootstrap, linger_ms)
    host, port = bootstrap.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    transport_, replay = await loop.create_connection(_Replay, host, int(port))
    times: list[float] = []
    try:
        for call in range(WARM_UP_CALLS + calls):
            # After the size (4 bytes), the api key (2) and the version (2): the correlation id.
            struct.pack_into(">i", frame, 8, call + 1)
            replay.waiter = loop.create_future()
            started = time.perf_counter()
            transport_.write(bytes(frame))
            await replay.waiter
            if call >= WARM_UP_CALLS:
                times.append(time.perf_counter() - started)
    finally:
        transport_.close()
    p50, p90, p99 = (percentile_us(times, q) for q in (0.5, 0.9, 0.99))
    print(f"{'floor':15s} p50 {p50:7.0f}  p90 {p90:7.0f}  p99 {p99:7.0f} µs")


async def _capture(bootstrap: str, linger_ms: int) -> bytearray:
    """The Produce request the producer writes for one record."""
    async with Producer(bootstrap, linger_ms=linger_ms, enable_idempotence=False) as p:
        await p.send_and_wait("bench", b"x" * 100, key=b"k")
    return bytearray(Marks.frame)


def block(bootstrap: str, calls: int, linger_ms: int) -> None:
    """Time ``calls`` round trips of the producer's Produce request over a blocking socket."""
    frame = asyncio.run(_capture(bootstrap, linger_ms))
    host, port = bootstrap.rsplit(":", 1)
    times: list[float] = []
    received = bytearray(65536)
    view = memoryview(received)
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for call in range(WARM_UP_CALLS + calls):
            struct.pack_into(">i", frame, 8, call + 1)
            started = time.perf_counter()
            sock.sendall(frame)
            got, size = 0, -1
            while size < 0 or got < size:
                got += sock.recv_into(view[got:])
                if size < 0 and got >= 4:
                    size = 4 + struct.unpack_from(">i", received)[0]
            if call >= WARM_UP_CALLS:
                times.append(time.perf_counter() - started)
    p50, p90, p99 = (percentile_us(times, q) for q in (0.5, 0.9, 0.99))
    print(f"{'block':15s} p50 {p50:7.0f}  p90 {p90:7.0f}  p99 {p99:7.0f} µs")


def main() -> None:
    bootstrap, calls, linger_ms, mode = sys.argv[1:5]
    if mode not in ("idem", "plain", "floor", "block"):
        raise SystemExit("the fourth argument is idem, plain, floor or block")
    instrument()
    if mode == "block":
        block(bootstrap, int(calls), int(linger_ms))
        return
    if mode == "floor":
        asyncio.run(floor(bootstrap, int(calls), int(linger_ms)))
        return
    asyncio.run(run(bootstrap, int(calls), int(linger_ms), mode == "idem"))


if __name__ == "__main__":
    main()
