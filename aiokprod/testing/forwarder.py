"""``TcpForwarder``: one loopback address whose target can be switched, like a load balancer.

A client that bootstraps through the forwarder reaches whatever it points at now. Switching
it to another cluster is what an operator does when a whole cluster is replaced behind one
DNS name or load balancer: clients find the new cluster only through that address, and its
brokers on addresses of their own (issue 29; docs/local-kafka.md, "A cluster replaced behind
one address")::

    async with TcpForwarder(old.bootstrap_address) as forwarder:
        producer = Producer(forwarder.bootstrap_servers)
        ...
        forwarder.switch_to(new.bootstrap_address)   # cuts the open connections

Bytes pass through untouched (no Kafka parsing): the brokers' metadata names their own
addresses, so only the bootstrap connections go through the forwarder. It runs on the event
loop it is started from.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self

_CHUNK_BYTES = 64 * 1024


class TcpForwarder:
    """Forwards every connection to its listening port on to ``target`` (switchable).

    Args:
        target: ``(host, port)`` or ``"host:port"`` to forward to.
        host: where to listen (loopback by default).
        port: the port to listen on (0: a free one).
    """

    def __init__(
        self, target: tuple[str, int] | str, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._target = _address(target)
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._refusing = False
        #: Connections accepted so far, per target they were forwarded to.
        self.connections: dict[tuple[str, int], int] = {}

    @property
    def target(self) -> tuple[str, int]:
        """Where new connections go."""
        return self._target

    @property
    def port(self) -> int:
        """The listening port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the forwarder is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the forwarder, for a client's ``bootstrap_servers``."""
        return f"{self._host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections being forwarded now."""
        return len(self._links)

    async def start(self) -> Self:
        """Listen (on the running event loop)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self._host, self._port)
        return self

    async def stop(self) -> None:
        """Stop listening and close every forwarded connection."""
        server, self._server = self._server, None
        self.cut()
        if server is not None:
            server.close()
            with contextlib.suppress(OSError):
                await server.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def switch_to(self, target: tuple[str, int] | str, *, cut: bool = True) -> None:
        """Send new connections to ``target``; with ``cut``, close the open ones (a failover)."""
        self._target = _address(target)
        if cut:
            self.cut()

    def cut(self) -> int:
        """Close every forwarded connection (both sides see a reset); returns how many."""
        links = list(self._links)
        for link in links:
            link.close()
        return len(links)

    def refuse(self, refusing: bool = True) -> None:
        """Close new connections at once (``False``: accept them again)."""
        self._refusing = refusing

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self._target
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.transport.abort()
            return
        self.connections[target] = self.connections.get(target, 0) + 1
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._links.discard(link)
            link.close()


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self._writers = (client, upstream)

    def close(self) -> None:
        for writer in self._writers:
            writer.transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK_BYTES):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort()


def _address(target: tuple[str, int] | str) -> tuple[str, int]:
    if isinstance(target, str):
        host, _, digits = target.rpartition(":")
        if not host or not digits.isdigit():
            raise ValueError(f"expected 'host:port', got {target!r}")
        return host, int(digits)
    host, port = target
    return str(host), int(port)
