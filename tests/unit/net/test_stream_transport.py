"""The production ByteStreams (``StreamTransport``) against a real loopback socket.

Every test runs on both streams: our own socket stream (plaintext on a selector loop, the
default) and asyncio's transport (TLS, uvloop, Windows), which must behave alike.

Pull reads (the handshake), then push (``start_receiving``): bytes that arrived before the
switch come first, in order, then every arrival as it comes; the end is reported once, as
EOF (``None``), a reset (an ``OSError``) or an abort; a read before the switch never holds
more than its bound unread without pausing the socket.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from aiokprod.net.socket_stream import WRITE_HIGH_BYTES, SocketStream
from aiokprod.net.transport import READ_CHUNK_BYTES, ByteStream, StreamTransport, _AsyncioStream

Server = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


STREAMS = {"socket": SocketStream, "asyncio": _AsyncioStream}
#: Which stream the tests in this module run on (set by the autouse fixture below).
_current = ["socket"]


@pytest.fixture(autouse=True, params=sorted(STREAMS))
def stream_kind(request: pytest.FixtureRequest) -> str:
    _current[0] = request.param
    return str(request.param)


async def with_server(serve: Server, body: Callable[[ByteStream], Awaitable[None]]) -> None:
    done: list[asyncio.Task[None]] = []

    async def serve_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        done.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    server = await asyncio.start_server(serve_and_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kind = _current[0]
    stream = await StreamTransport(socket_streams=kind == "socket").connect("127.0.0.1", port)
    assert type(stream) is STREAMS[kind]
    try:
        await asyncio.wait_for(body(stream), 10)
    finally:
        stream.abort()
        server.close()
        await asyncio.gather(*done, return_exceptions=True)
        await server.wait_closed()


class Collector:
    def __init__(self) -> None:
        self.data = bytearray()
        self.ends: list[OSError | None] = []
        self.ended = asyncio.Event()

    def on_data(self, data: bytes) -> None:
        assert not self.ends, "data after the end"
        self.data += data

    def on_end(self, error: OSError | None) -> None:
        self.ends.append(error)
        self.ended.set()


def test_pull_then_push_keeps_every_byte_in_order_and_reports_eof_once() -> None:
    first, rest = b"hello-handshake", bytes(range(256)) * 4000  # ~1 MiB after the switch
    switched = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readexactly(4)
        writer.write(first + request)  # the handshake answer, and more that stays unread
        await writer.drain()
        await switched.wait()
        for i in range(0, len(rest), 65536):
            writer.write(rest[i : i + 65536])
            await writer.drain()
        writer.close()

    async def body(stream: ByteStream) -> None:
        stream.write(b"ping")
        await stream.drain()
        got = await stream.read(5)
        assert got == first[:5]
        await asyncio.sleep(0.05)  # the rest of the answer arrives, unread
        collector = Collector()
        stream.start_receiving(collector.on_data, collector.on_end)
        switched.set()
        await collector.ended.wait()
        await asyncio.sleep(0.05)
        assert bytes(collector.data) == first[5:] + b"ping" + rest
        assert collector.ends == [None]

    asyncio.run(with_server(serve, body))


def test_a_reset_is_an_os_error_and_an_abort_ends_once() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # RST

    async def body(stream: ByteStream) -> None:
        collector = Collector()
        stream.start_receiving(collector.on_data, collector.on_end)
        stream.write(b"x")
        await collector.ended.wait()
        stream.abort()
        assert len(collector.ends) == 1
        assert isinstance(collector.ends[0], ConnectionResetError), collector.ends
        assert stream.is_closing()
        with pytest.raises(ConnectionError):
            await stream.drain()

    asyncio.run(with_server(serve, body))


def test_abort_ends_a_receiving_stream_once_and_a_pull_read_returns_eof() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client goes

    async def pull(stream: ByteStream) -> None:
        reading = asyncio.ensure_future(stream.read(10))
        await asyncio.sleep(0.01)
        stream.abort()
        assert await reading == b""

    async def push(stream: ByteStream) -> None:
        collector = Collector()
        stream.start_receiving(collector.on_data, collector.on_end)
        stream.abort()
        stream.abort()
        assert collector.ends == [None]

    asyncio.run(with_server(serve, pull))
    asyncio.run(with_server(serve, push))


def test_unread_bytes_before_the_switch_pause_the_socket_rather_than_pile_up() -> None:
    flood = b"z" * (READ_CHUNK_BYTES * 16)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(flood)
        writer.close()
        # Until every byte is sent: with_server aborts the connection after serve, which
        # drops what is still buffered (drain() returns at the low-water mark, not at 0).
        await writer.wait_closed()

    async def body(stream: ByteStream) -> None:
        await asyncio.sleep(0.2)  # nobody reads: the stream must stop taking bytes
        held = len(getattr(stream, "_inbox")._buffer)  # noqa: B009 - what it holds unread
        assert held <= 2 * READ_CHUNK_BYTES
        got = bytearray()
        while data := await stream.read(READ_CHUNK_BYTES):
            got += data
        assert bytes(got) == flood

    asyncio.run(with_server(serve, body))


def test_a_write_larger_than_the_socket_takes_is_sent_whole_and_drain_waits_for_it() -> None:
    big = bytes(range(256)) * (WRITE_HIGH_BYTES * 64 // 256)  # 4 MiB: more than a socket buffer
    got = bytearray()
    reading = asyncio.Event()
    all_read = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.wait_for(reading.wait(), 10)  # bounded: the client may fail first
        while len(got) < 2 * len(big):
            chunk = await reader.read(65536)
            if not chunk:
                break
            got.extend(chunk)
        all_read.set()

    async def body(stream: ByteStream) -> None:
        stream.write(big)
        stream.write(big[:1000])  # queued behind what the socket has not taken
        stream.write(big[1000:])
        assert stream.write_buffer_size() > WRITE_HIGH_BYTES  # the server reads nothing yet
        draining = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0.05)
        assert not draining.done()
        reading.set()
        await draining
        await all_read.wait()
        assert bytes(got) == big + big
        assert stream.write_buffer_size() == 0

    asyncio.run(with_server(serve, body))


def test_a_write_after_the_end_is_dropped_and_the_end_is_reported_once() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def body(stream: ByteStream) -> None:
        collector = Collector()
        stream.start_receiving(collector.on_data, collector.on_end)
        await collector.ended.wait()
        stream.write(b"after the end")  # no exception at the caller
        await asyncio.sleep(0.05)
        assert collector.ends == [None]
        assert stream.is_closing()
        assert collector.data == b""

    asyncio.run(with_server(serve, body))


def test_connecting_where_nobody_listens_is_an_os_error() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def connect() -> None:
        await StreamTransport(socket_streams=_current[0] == "socket").connect("127.0.0.1", port)

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(connect())
