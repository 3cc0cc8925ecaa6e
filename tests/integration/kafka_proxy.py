"""A fault-injecting TCP proxy in front of real Kafka brokers (test tooling, asyncio).

One listening port per broker. Clients bootstrap through the proxy; Metadata responses (and
the KIP-951 node endpoints in Produce responses) are rewritten so that every broker address
the client learns points back at the proxy. Faults are then applied per broker:

- ``stall(node)``: hold every response from that broker until ``resume(node)``;
- ``cut(node)``: close the open connections (mid-request, if requests are in flight);
- ``refuse(node)``: close new connections at once until ``accept(node)``;
- ``chunk(size, delay_s)``: deliver responses in tiny pieces with pauses in between.

Produce-response faults (the request always reaches the broker, which writes the batch):

- ``corrupt_produce(count)``: the next ``count`` Produce responses keep their size prefix and
  correlation id, but the rest of the frame is replaced by random bytes of the same length;
- ``drop_produce_for(seconds)``: swallow every Produce response for a time window;
- ``bad_size_produce(prefix, count)``: send the next ``count`` Produce responses with an
  impossible frame-size prefix (``2**31 - 1``, ``-1``...) in front of the real frame;
- ``wrong_correlation_produce(count)``: the next ``count`` Produce responses carry a
  correlation id that matches no request on the connection.

Each counts what it did in ``faults_applied`` so that a test can check the fault happened.

The proxy parses frames with aiokprod's own protocol layer only to rewrite addresses; the
bytes of every other response pass through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from aiokprod.protocol.api import BY_KEY
from aiokprod.protocol.connection import decode_response_body
from aiokprod.protocol.messages.metadata import MetadataResponse
from aiokprod.protocol.messages.produce import ProduceResponse
from aiokprod.protocol.schema import encode_struct

_INT32 = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")
METADATA, PRODUCE = 3, 0


@dataclass
class _Route:
    node_id: int
    upstream: tuple[str, int]
    port: int = 0
    server: asyncio.Server | None = None
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    refusing: bool = False
    links: set[_Link] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.stalled.set()  # set = flowing


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: KafkaProxy, route: _Route) -> None:
        self.proxy = proxy
        self.route = route
        self.pending: dict[int, tuple[int, int]] = {}
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class KafkaProxy:
    """Proxy for a set of brokers: ``{node_id: (host, port)}``."""

    def __init__(self, brokers: dict[int, tuple[str, int]], seed: int = 0) -> None:
        self._routes = {nid: _Route(nid, addr) for nid, addr in brokers.items()}
        self._chunk: tuple[int, float] | None = None
        self.rewritten_responses = 0
        self._rng = random.Random(seed)
        # Produce-response faults: each a queue of the next responses it applies to.
        self._corrupt_left = 0
        self._bad_sizes: list[int] = []
        self._wrong_cid_left = 0
        self._drop_until = 0.0  # time.monotonic() deadline
        self.faults_applied: Counter[str] = Counter()
        self.produce_responses = 0

    @property
    def bootstrap_servers(self) -> str:
        """The proxy's addresses, to give the client instead of the brokers'."""
        return ",".join(f"127.0.0.1:{r.port}" for r in self._routes.values())

    def port_of(self, node_id: int) -> int:
        """The proxy port that stands for ``node_id``."""
        return self._routes[node_id].port

    async def start(self) -> KafkaProxy:
        """Listen on a free loopback port per broker."""
        for route in self._routes.values():
            route.server = await asyncio.start_server(
                functools.partial(self._accept, route), "127.0.0.1", 0
            )
            route.port = route.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Close listeners and every connection."""
        for route in self._routes.values():
            if route.server is not None:
                route.server.close()
            for link in list(route.links):
                link.close()
        for route in self._routes.values():
            if route.server is not None:
                with contextlib.suppress(Exception):
                    await route.server.wait_closed()

    async def __aenter__(self) -> KafkaProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- faults -----------------------------------------------------------------------------

    def _targets(self, node_id: int | None) -> list[_Route]:
        return list(self._routes.values()) if node_id is None else [self._routes[node_id]]

    def stall(self, node_id: int | None = None) -> None:
        """Hold responses from ``node_id`` (every broker when None)."""
        for route in self._targets(node_id):
            route.stalled.clear()

    def resume(self, node_id: int | None = None) -> None:
        """Let held responses through again."""
        for route in self._targets(node_id):
            route.stalled.set()

    def cut(self, node_id: int | None = None) -> int:
        """Close the open connections to ``node_id``; returns how many were cut."""
        count = 0
        for route in self._targets(node_id):
            for link in list(route.links):
                link.close()
                count += 1
        return count

    def refuse(self, node_id: int | None = None) -> None:
        """Close new connections at once."""
        for route in self._targets(node_id):
            route.refusing = True

    def accept(self, node_id: int | None = None) -> None:
        """Accept new connections again."""
        for route in self._targets(node_id):
            route.refusing = False

    def chunk(self, size: int | None, delay_s: float = 0.0) -> None:
        """Deliver responses ``size`` bytes at a time (None: whole)."""
        self._chunk = None if size is None else (size, delay_s)

    def corrupt_produce(self, count: int = 1) -> None:
        """Replace the next ``count`` Produce response bodies with random bytes (same length).

        The size prefix and the correlation id are kept, so the client matches the garbage
        to its request and has to decode it.
        """
        self._corrupt_left += count

    def drop_produce_for(self, seconds: float) -> None:
        """Swallow every Produce response for ``seconds`` (the requests still go through)."""
        self._drop_until = time.monotonic() + seconds

    def stop_dropping(self) -> None:
        """End a ``drop_produce_for`` window early."""
        self._drop_until = 0.0

    @property
    def dropping(self) -> bool:
        """Whether Produce responses are being swallowed now."""
        return time.monotonic() < self._drop_until

    def bad_size_produce(self, prefix: int, count: int = 1) -> None:
        """Send the next ``count`` Produce responses with the frame-size prefix ``prefix``.

        ``prefix`` is written as a big-endian int32 (unsigned if >= 2**31), followed by the
        real frame: e.g. ``2**31 - 1`` (2 GiB) or ``-1``.
        """
        self._bad_sizes.extend([prefix] * count)

    def wrong_correlation_produce(self, count: int = 1) -> None:
        """Give the next ``count`` Produce responses a correlation id no request has."""
        self._wrong_cid_left += count

    def _produce_fault(self, frame: bytes) -> bytes | None:
        """The bytes to send for one Produce response (None: send nothing)."""
        self.produce_responses += 1
        if self.dropping:
            self.faults_applied["dropped"] += 1
            return None
        if self._corrupt_left > 0:
            self._corrupt_left -= 1
            self.faults_applied["corrupted"] += 1
            frame = frame[:4] + self._rng.randbytes(len(frame) - 4)
            return _INT32.pack(len(frame)) + frame
        if self._bad_sizes:
            prefix = self._bad_sizes.pop(0)
            self.faults_applied[f"size prefix {prefix}"] += 1
            head = struct.pack(">I" if prefix >= 2**31 else ">i", prefix)
            return head + frame
        if self._wrong_cid_left > 0:
            self._wrong_cid_left -= 1
            self.faults_applied["wrong correlation id"] += 1
            (cid,) = _INT32.unpack_from(frame, 0)
            frame = _INT32.pack((cid + 0x10000000) & 0x7FFFFFFF) + frame[4:]
        return _INT32.pack(len(frame)) + frame

    # --- plumbing ---------------------------------------------------------------------------

    async def _accept(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if route.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*route.upstream)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(self, route)
        link.writers = [writer, up_writer]
        route.links.add(link)
        link.tasks = [
            asyncio.current_task(),  # type: ignore[list-item]
        ]
        upstream = asyncio.create_task(self._pump_requests(link, reader, up_writer))
        link.tasks.append(upstream)
        try:
            await self._pump_responses(link, up_reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            route.links.discard(link)
            upstream.cancel()
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pump_requests(
        self, link: _Link, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _INT32.unpack(head)
                body = await reader.readexactly(size)
                api_key, version, correlation_id = _REQUEST_HEAD.unpack_from(body, 0)
                link.pending[correlation_id] = (api_key, version)
                up_writer.write(head + body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            link.close()

    async def _pump_responses(
        self, link: _Link, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            head = await up_reader.readexactly(4)
            (size,) = _INT32.unpack(head)
            frame = await up_reader.readexactly(size)
            (correlation_id,) = _INT32.unpack_from(frame, 0)
            api = link.pending.pop(correlation_id, None)
            if api is not None and api[0] in (METADATA, PRODUCE):
                frame = self._rewrite(api[0], api[1], frame)
            if api is not None and api[0] == PRODUCE:
                faulty = self._produce_fault(frame)
                if faulty is None:
                    continue
                data = faulty
            else:
                data = _INT32.pack(len(frame)) + frame
            await link.route.stalled.wait()
            chunk = self._chunk
            if chunk is None:
                writer.write(data)
            else:
                step, delay = chunk
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    if delay:
                        await asyncio.sleep(delay)
            await writer.drain()

    def _rewrite(self, api_key: int, version: int, frame: bytes) -> bytes:
        api = BY_KEY[api_key]
        if api_key == PRODUCE and version < 10:
            return frame
        body = decode_response_body(api, version, frame)
        changed = False
        if isinstance(body, MetadataResponse):
            for broker in body.brokers:
                route = self._routes.get(broker.node_id)
                if route is not None:
                    broker.host, broker.port = "127.0.0.1", route.port
                    changed = True
        elif isinstance(body, ProduceResponse):
            for endpoint in body.node_endpoints:
                route = self._routes.get(endpoint.node_id)
                if route is not None:
                    endpoint.host, endpoint.port = "127.0.0.1", route.port
                    changed = True
        if not changed:
            return frame
        self.rewritten_responses += 1
        flexible = api.is_flexible(version)
        out = bytearray(frame[:4])
        if api.response_header_version(version) >= 1:
            out.append(0)
        encode_struct(body, version, flexible, out)
        return bytes(out)
