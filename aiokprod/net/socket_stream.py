"""A plaintext ByteStream straight on a non-blocking socket and the event loop's selector.

asyncio's socket transport and protocol are two layers of interpreted Python between the
socket and the connection: each response went through the loop's ``_read_ready``, the
transport's ``get_buffer``/``recv_into``/``buffer_updated`` dance and our protocol, and each
request through the transport's checks before its ``send``. Here one compiled class owns the
socket: the loop's selector calls :meth:`SocketStream._on_readable` when bytes arrive, which
receives them and hands them on; :meth:`SocketStream.write` sends at once and buffers only
what the socket does not take. The receiving side is the :class:`~aiokprod.net.inbox.Inbox`
that asyncio's stream uses too (the same tests run against both): pull reads for the
handshake, then push; the end reported once; a close during a read or a write raising
nothing at the caller.

Only for plaintext on a selector event loop (the default on Unix): TLS keeps asyncio's
transport (its TLS layer is what we would otherwise rewrite), and so do loops without
``add_reader`` (Windows' proactor) and uvloop (whose transport is already native).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from aiokprod.net.inbox import READ_CHUNK_BYTES, Inbox

#: ``drain()`` waits while more than this is written and not yet taken by the socket
#: (asyncio's default high-water mark), and resumes below :data:`WRITE_LOW_BYTES`.
WRITE_HIGH_BYTES = 64 * 1024
WRITE_LOW_BYTES = 16 * 1024


async def connect_socket(loop: asyncio.AbstractEventLoop, host: str, port: int) -> SocketStream:
    """Open a TCP connection to ``host:port``, trying each resolved address in turn.

    Raises:
        OSError: no address could be reached (the last error, or every one of them).
    """
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    errors: list[OSError] = []
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:  # cancelled: the socket is ours to close
            sock.close()
            raise
        return SocketStream(loop, sock)
    if len(errors) == 1:
        raise errors[0]
    if not errors:
        raise OSError(f"{host}:{port} resolved to no address")
    raise OSError(f"could not connect to {host}:{port}: " + "; ".join(map(str, errors)))


class SocketStream:
    """One connected, non-blocking TCP socket as a :class:`~aiokprod.net.transport.ByteStream`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._receive_buffer = bytearray(READ_CHUNK_BYTES)
        self._receive_view = memoryview(self._receive_buffer)
        self._inbox = Inbox(loop, self._stop_reading, self._start_reading)
        self._unsent = bytearray()  # written and not taken by the socket yet
        self._drain_waiters: list[asyncio.Future[None]] = []
        loop.add_reader(self._fd, self._on_readable)

    # --- the selector's callbacks -----------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            nbytes = self._sock.recv_into(self._receive_buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        if nbytes == 0:
            self._close(None)  # the broker closed the connection
            return
        self._inbox.received(bytes(self._receive_view[:nbytes]))

    def _on_writable(self) -> None:
        unsent = self._unsent
        try:
            sent = self._sock.send(unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        del unsent[:sent]
        if not unsent:
            self._loop.remove_writer(self._fd)
        if self._drain_waiters and len(unsent) <= WRITE_LOW_BYTES:
            self._wake_drainers(None)

    def _stop_reading(self) -> None:
        self._loop.remove_reader(self._fd)

    def _start_reading(self) -> None:
        self._loop.add_reader(self._fd, self._on_readable)

    # --- ByteStream -------------------------------------------------------------------------

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` once the peer closed."""
        return await self._inbox.read(max_bytes)

    def start_receiving(
        self, on_data: Callable[[bytes], None], on_end: Callable[[OSError | None], None]
    ) -> None:
        """From now on, hand each arrival to ``on_data``; ``on_end`` once at the end."""
        self._inbox.start_receiving(on_data, on_end)

    def write(self, data: bytes | bytearray) -> None:
        """Send now what the socket takes; keep the rest until it is writable.

        After the end, nothing is sent (as asyncio's transport, silently): the end is
        reported through ``on_end`` or ``read()``, not here.
        """
        if self._inbox.ended or not data:
            return
        unsent = self._unsent
        if unsent:
            unsent += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            # Reported from the loop, not from inside the caller's write.
            self._loop.call_soon(self._close, exc)
            return
        if sent < len(data):
            unsent += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    async def drain(self) -> None:
        """Wait until the unsent bytes are below the high-water mark."""
        inbox = self._inbox
        if inbox.ended:
            await asyncio.sleep(0)
            raise inbox.error or ConnectionResetError("Connection lost")
        if len(self._unsent) > WRITE_HIGH_BYTES:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def write_buffer_size(self) -> int:
        """Bytes written and not yet taken by the socket."""
        return len(self._unsent)

    def is_closing(self) -> bool:
        """Whether the stream was aborted or closed by the peer."""
        return self._inbox.ended

    def abort(self) -> None:
        """Close at once, dropping unsent data (safe to call more than once)."""
        self._close(None)

    # --- internals --------------------------------------------------------------------------

    def _close(self, error: OSError | None) -> None:
        inbox = self._inbox
        if inbox.ended:
            return
        loop = self._loop
        if not inbox.paused:
            loop.remove_reader(self._fd)
        if self._unsent:
            loop.remove_writer(self._fd)
            self._unsent.clear()
        self._sock.close()
        self._wake_drainers(error or ConnectionResetError("Connection lost"))
        inbox.end(error)

    def _wake_drainers(self, error: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)
