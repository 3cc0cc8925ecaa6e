"""The seam between the producer and the network: a transport opens byte streams.

Everything above this module (connections, the pool, the sender) sees a broker connection as a
:class:`ByteStream`: read some bytes (or have every arrival handed over), write bytes, flow
control, abort. Production uses :class:`StreamTransport` (plaintext: our own socket stream,
:mod:`aiokprod.net.socket_stream`; TLS: a buffered asyncio protocol); the deterministic simulator
(:mod:`aiokprod.testing.sim`) passes its own transport whose streams lead to simulated brokers
in the same process, on virtual time. Like httpcore's network backends, the interface is
small on purpose: whatever a test can do to these calls is all a broker can do to us.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol, cast

from aiokprod.net.inbox import READ_CHUNK_BYTES, Inbox
from aiokprod.net.socket_stream import connect_socket

__all__ = ["READ_CHUNK_BYTES", "ByteStream", "StreamTransport", "Transport"]


class ByteStream(Protocol):
    """One open, bidirectional byte stream to a broker."""

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` when the peer closed.

        Raises:
            OSError: the connection broke.
        """
        ...

    def start_receiving(
        self, on_data: Callable[[bytes], None], on_end: Callable[[OSError | None], None]
    ) -> None:
        """From now on, hand every received chunk to ``on_data`` as it arrives.

        ``on_data`` runs in the event loop's own callback for the arrival (no task switch
        between the socket and the caller: one loop turn less per response than ``read()``).
        Bytes received before this call and not read come first. ``on_end(None)`` follows
        when the peer closes or the stream is aborted, ``on_end(error)`` when the connection
        breaks; once, and nothing after it. ``read()`` is not used after this call.
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


class _AsyncioStream(asyncio.BufferedProtocol):
    """A ByteStream as an asyncio protocol, for TLS and for loops with their own transports.

    Buffered: the socket is read into one buffer the stream keeps, and only the bytes
    received are copied out. (asyncio's plain protocols receive into a fresh 256 KiB ``bytes``
    per read and shrink it; depending on glibc's mmap threshold that was an mmap, mremap and
    munmap per response — see docs/compiled.md.) What arrives goes to an
    :class:`~aiokprod.net.inbox.Inbox`, as in :class:`~aiokprod.net.socket_stream.SocketStream`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._receive_buffer = memoryview(bytearray(READ_CHUNK_BYTES))
        self._transport: asyncio.Transport | None = None
        self._inbox = Inbox(loop, self._pause_reading, self._resume_reading)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receive_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._inbox.received(bytes(self._receive_buffer[:nbytes]))

    def eof_received(self) -> bool:
        self._inbox.end(None)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        error = exc if isinstance(exc, OSError) or exc is None else OSError(str(exc))
        self._inbox.end(error)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error or ConnectionResetError("Connection lost"))
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # --- ByteStream -------------------------------------------------------------------------

    async def read(self, max_bytes: int) -> bytes:
        return await self._inbox.read(max_bytes)

    def start_receiving(
        self, on_data: Callable[[bytes], None], on_end: Callable[[OSError | None], None]
    ) -> None:
        self._inbox.start_receiving(on_data, on_end)

    def write(self, data: bytes | bytearray) -> None:
        if self._transport is not None:
            self._transport.write(data)

    async def drain(self) -> None:
        inbox = self._inbox
        if inbox.ended or self._transport is None or self._transport.is_closing():
            await asyncio.sleep(0)
            raise inbox.error or ConnectionResetError("Connection lost")
        if self._write_paused:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def write_buffer_size(self) -> int:
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self._inbox.ended or self._transport is None or self._transport.is_closing()

    def abort(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.abort()
        self._inbox.end(None)

    # --- internals --------------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()


class StreamTransport:
    """The production transport: TCP, optionally TLS.

    Plaintext on a selector event loop (asyncio's default on Unix) gets a
    :class:`~aiokprod.net.socket_stream.SocketStream`, the socket read and written by our own
    compiled code; TLS, and loops without ``add_reader`` or with their own native transports
    (Windows' proactor, uvloop), get asyncio's transport through :class:`_AsyncioStream`.
    ``socket_streams=False`` asks for asyncio's transport everywhere (tests run both).
    """

    def __init__(self, *, socket_streams: bool = True) -> None:
        self._socket_streams = socket_streams

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ByteStream:
        """Open a TCP (or TLS) connection to ``host:port``."""
        loop = asyncio.get_running_loop()
        if (
            ssl_context is None
            and self._socket_streams
            and isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)
        ):
            return await connect_socket(loop, host, port)
        _, stream = await loop.create_connection(
            lambda: _AsyncioStream(loop),
            host,
            port,
            ssl=ssl_context,
            server_hostname=server_hostname if ssl_context else None,
        )
        return stream
