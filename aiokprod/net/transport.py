"""The seam between the producer and the network: a transport opens byte streams.

Everything above this module (connections, the pool, the sender) sees a broker connection as a
:class:`ByteStream`: read some bytes, write bytes, flow control, abort. Production uses
:class:`StreamTransport` (asyncio streams over TCP or TLS); the deterministic simulator
(:mod:`aiokprod.testing.sim`) passes its own transport whose streams lead to simulated brokers
in the same process, on virtual time. Like httpcore's network backends, the interface is
small on purpose: whatever a test can do to these five calls is all a broker can do to us.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Protocol

#: The largest read asked for at once (also the asyncio StreamReader's buffer limit).
READ_CHUNK_BYTES = 256 * 1024


class ByteStream(Protocol):
    """One open, bidirectional byte stream to a broker."""

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` when the peer closed.

        Raises:
            OSError: the connection broke.
        """
        ...

    def write(self, data: bytes | bytearray) -> None:
        """Queue ``data`` for sending without waiting (the stream copies what it keeps)."""
        ...

    async def drain(self) -> None:
        """Wait until the queued bytes are below the stream's high-water mark."""
        ...

    def write_buffer_size(self) -> int:
        """Bytes written and not yet handed to the network."""
        ...

    def is_closing(self) -> bool:
        """Whether the stream was aborted or closed by the peer."""
        ...

    def abort(self) -> None:
        """Close at once, dropping unsent data (safe to call more than once)."""
        ...


class Transport(Protocol):
    """Opens byte streams to ``host:port``."""

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ByteStream:
        """Connect (and run the TLS handshake if ``ssl_context`` is given).

        Raises:
            OSError: the broker is unreachable.
            ssl.SSLError: the TLS handshake failed.
        """
        ...


class _AsyncioStream:
    __slots__ = ("_reader", "_transport", "_writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._transport = writer.transport

    async def read(self, max_bytes: int) -> bytes:
        return await self._reader.read(max_bytes)

    def write(self, data: bytes | bytearray) -> None:
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    def write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self._writer.is_closing()

    def abort(self) -> None:
        if not self._writer.is_closing():
            self._transport.abort()


class StreamTransport:
    """The production transport: asyncio streams over TCP, optionally TLS."""

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ByteStream:
        """Open a TCP (or TLS) connection to ``host:port``."""
        reader, writer = await asyncio.open_connection(
            host,
            port,
            ssl=ssl_context,
            server_hostname=server_hostname if ssl_context else None,
            limit=READ_CHUNK_BYTES,
        )
        return _AsyncioStream(reader, writer)
