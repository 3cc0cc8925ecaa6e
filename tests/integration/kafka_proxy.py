"""A fault-injecting TCP proxy in front of real Kafka brokers (test tooling, asyncio).

One listening port per broker. Clients bootstrap through the proxy; Metadata responses (and
the KIP-951 node endpoints in Produce responses) are rewritten so that every broker address
the client learns points back at the proxy. Faults are then applied per broker:

- ``stall(node)``: hold every response from that broker until ``resume(node)``;
- ``cut(node)``: close the open connections (mid-request, if requests are in flight);
- ``refuse(node)``: close new connections at once until ``accept(node)``;
- ``chunk(size, delay_s)``: deliver responses in tiny pieces with pauses in between.

The proxy parses frames with aiokprod's own protocol layer only to rewrite addresses; the
bytes of every other response pass through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct
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

    def __init__(self, brokers: dict[int, tuple[str, int]]) -> None:
        self._routes = {nid: _Route(nid, addr) for nid, addr in brokers.items()}
        self._chunk: tuple[int, float] | None = None
        self.rewritten_responses = 0

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
