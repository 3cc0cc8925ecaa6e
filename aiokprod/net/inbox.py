"""What a byte stream received, on its way to the reader: pulled, then pushed.

Both production streams (:class:`~aiokprod.net.socket_stream.SocketStream` and asyncio's
transport behind :class:`~aiokprod.net.transport._AsyncioStream`) hand every arrival to an
:class:`Inbox`, which holds the :class:`~aiokprod.net.transport.ByteStream` contract on the
receiving side, written once: ``read()`` pulls buffered bytes during the handshake, and after
``start_receiving()`` each arrival goes straight to ``on_data``; the end is reported once,
to a pending ``read()`` and to ``on_end``. While nobody reads, at most about
:data:`READ_CHUNK_BYTES` are buffered: the stream is asked to stop reading its socket
(``pause``) and to start again once ``read()`` took the bytes (``resume``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: The largest read asked for at once (and the most buffered before the socket is paused).
READ_CHUNK_BYTES = 256 * 1024


class Inbox:
    """The receiving side of one stream; the stream calls :meth:`received` and :meth:`end`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pause: Callable[[], None],
        resume: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._pause = pause
        self._resume = resume
        self._buffer = bytearray()  # received and not yet read (before start_receiving)
        self._read_waiter: asyncio.Future[None] | None = None
        #: The stream was asked to stop reading (too much unread before start_receiving).
        self.paused = False
        self.ended = False
        self.error: OSError | None = None
        self._on_data: Callable[[bytes], None] | None = None  # set by start_receiving
        self._on_end: Callable[[OSError | None], None] | None = None

    def received(self, data: bytes) -> None:
        """Bytes arrived: to ``on_data`` once receiving, else kept for ``read()``."""
        on_data = self._on_data
        if on_data is not None:
            on_data(data)
            return
        self._buffer += data
        if len(self._buffer) > READ_CHUNK_BYTES and not self.paused:
            self.paused = True
            self._pause()  # resumed by read()
        self._wake_reader()

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` once ended without an error.

        Raises:
            OSError: the connection broke (nothing buffered is left to read).
        """
        while not self._buffer:
            if self.error is not None:
                raise self.error
            if self.ended:
                return b""
            self._read_waiter = self._loop.create_future()
            try:
                await self._read_waiter
            finally:
                self._read_waiter = None
        data = bytes(self._buffer[:max_bytes])
        del self._buffer[:max_bytes]
        self._maybe_resume()
        return data

    def start_receiving(
        self, on_data: Callable[[bytes], None], on_end: Callable[[OSError | None], None]
    ) -> None:
        """From now on, hand each arrival to ``on_data``: bytes not read yet go first."""
        self._on_data = on_data
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            self._maybe_resume()
            on_data(data)
        if self.ended:
            on_end(self.error)
        else:
            self._on_end = on_end

    def end(self, error: OSError | None) -> bool:
        """The stream ended (``None``: closed or aborted); False if it had already."""
        if self.ended:
            return False
        self.ended = True
        self.error = error
        self._wake_reader()
        on_end, self._on_end = self._on_end, None
        self._on_data = None
        if on_end is not None:
            on_end(error)
        return True

    def _maybe_resume(self) -> None:
        if self.paused and not self.ended and len(self._buffer) <= READ_CHUNK_BYTES:
            self.paused = False
            self._resume()

    def _wake_reader(self) -> None:
        waiter = self._read_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
