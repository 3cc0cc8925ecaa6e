"""BrokerConnection: one TCP connection to one broker, over a :class:`ByteStream`.

The connection moves bytes; :class:`~aiokprod.protocol.connection.ClientConnection` decides
what they mean. Opening it connects, then asks ApiVersions so every later request goes out at
the highest version both sides speak. After that :meth:`run_reader` (run by the pool inside
the producer's task group) has the stream hand every arrival straight to the protocol state,
which gives each response to the handler given with its request, and waits for the end.

Requests are written without awaiting: :meth:`send` is synchronous, so the sender never waits
on one broker while another could take data. The in-flight limit is the connection's
semaphore in non-blocking form: :attr:`can_send` is false while
``max_in_flight_requests_per_connection`` requests are unanswered, and the sender skips the
node until a response frees a slot.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Awaitable, Callable

from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.errors import (
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from aiokprod.logs import get_logger
from aiokprod.net.security import SslAuthenticationError, SslCertificateError
from aiokprod.net.transport import READ_CHUNK_BYTES, ByteStream, StreamTransport, Transport
from aiokprod.protocol.api import API_VERSIONS
from aiokprod.protocol.connection import ClientConnection, api_versions_retry_version
from aiokprod.protocol.messages.api_versions import ApiVersionsResponse
from aiokprod.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiokprod.protocol.schema import Struct

log = get_logger("aiokprod.net")

ResponseHandler = Callable[[Struct | None, BaseException | None], None]
#: Runs after ApiVersions on a fresh connection (SASL authentication hooks in here).
Authenticator = Callable[["BrokerConnection"], Awaitable[None]]

#: Stop writing to a broker whose socket buffer holds this much unsent data.
WRITE_BUFFER_HIGH_BYTES = 8 * 1024 * 1024
SOFTWARE_NAME = "aiokprod"


class _Pending:
    __slots__ = ("deadline_ms", "handler")

    def __init__(self, handler: ResponseHandler | None, deadline_ms: int) -> None:
        self.handler = handler
        self.deadline_ms = deadline_ms


class BrokerConnection:
    """A connection to one broker.

    Args:
        node_id: the broker's id (negative for a bootstrap address).
        host: host to connect to.
        port: port to connect to.
        client_id: the client id in every request header.
        max_in_flight: unanswered requests allowed at once.
        software_version: reported in ApiVersions.
        ssl_context: TLS context, or None for plaintext.
        server_hostname: the name to verify the certificate against (default: host).
        transport: opens the byte stream (default: TCP through an asyncio protocol).
        clock: the producer's clock (request deadlines, re-authentication).
        rng: randomness for the re-authentication point.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str,
        max_in_flight: int,
        software_version: str,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        transport: Transport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.max_in_flight = max_in_flight
        self.protocol = ClientConnection(client_id)
        self._software_version = software_version
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._transport: Transport = transport or StreamTransport()
        self._clock = clock
        self._rng = rng or random.Random()
        self._stream: ByteStream | None = None
        #: Requests without a response (acks=0 Produce) were written since the last
        #: ``confirm_written``.
        self.unanswered_writes = False
        self._pending: dict[int, _Pending] = {}
        #: Told every request deadline as the request goes out: the pool keeps the earliest,
        #: so a pass need not look at every connection for overdue requests (issue 30).
        self.on_deadline: Callable[[int], None] | None = None
        self.closed_error: BaseException | None = None
        self.ready = False
        #: Monotonic ms after which no new request goes out (the SASL session is about to
        #: expire); the pool then replaces the connection once it is idle. None: never.
        self.reauth_at_ms: int | None = None
        #: The id of the cluster the broker belongs to, asked for when the connection opened
        #: (None: not asked, or a broker that does not say). The pool uses only connections
        #: of the cluster the producer writes to (issue 29).
        self.cluster_id: str | None = None

    def __repr__(self) -> str:
        state = "ready" if self.ready else ("closed" if self.closed_error else "opening")
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port} {state}>"

    # --- opening ----------------------------------------------------------------------------

    async def open(
        self,
        timeout_s: float,
        authenticate: Authenticator | None = None,
        *,
        identify_cluster: bool = False,
    ) -> None:
        """Connect and negotiate API versions (and authenticate, if asked).

        With ``identify_cluster`` the broker is then asked which cluster it belongs to (an
        empty Metadata request; :attr:`cluster_id`), within the same ``timeout_s``.

        Raises:
            KafkaConnectionError: the broker is unreachable, or the handshake failed or
                timed out.
            AuthenticationError: (from ``authenticate``) credentials were rejected.
        """
        try:
            async with asyncio.timeout(timeout_s):
                self._stream = await self._transport.connect(
                    self.host,
                    self.port,
                    ssl_context=self._ssl,
                    server_hostname=self._server_hostname if self._ssl else None,
                )
                await self._negotiate_versions()
                if authenticate is not None:
                    await authenticate(self)
                if identify_cluster:
                    await self._identify_cluster()
        except TimeoutError:
            self._abort()
            raise KafkaConnectionError(
                f"connecting to node {self.node_id} at {self.host}:{self.port} "
                f"timed out after {timeout_s * 1000:.0f} ms"
            ) from None
        except ssl.SSLCertVerificationError as exc:
            # Not retriable: the same certificate will not become trusted by retrying.
            self._abort()
            raise SslCertificateError(
                f"TLS to node {self.node_id} at {self.host}:{self.port}: the broker's "
                f"certificate was not accepted: {exc.verify_message or exc.reason}"
            ) from None
        except ssl.SSLError as exc:
            self._abort()
            raise SslAuthenticationError(
                f"TLS handshake with node {self.node_id} at {self.host}:{self.port} failed: "
                f"{exc.reason or exc}"
            ) from None
        except (
            OSError,
            EOFError,
            asyncio.IncompleteReadError,
            ProtocolError,
            ValueError,  # an impossible address from a broken broker (port 99999, NUL)
            OverflowError,
            UnicodeError,
        ) as exc:
            # A broken handshake answer is a broken connection, like a reset: retry later.
            self._abort()
            raise KafkaConnectionError(
                f"cannot connect to node {self.node_id} at {self.host}:{self.port}: {exc}"
            ) from exc
        except BaseException:
            self._abort()
            raise
        self.ready = True

    async def _negotiate_versions(self) -> None:
        version: int | None = None
        for _ in range(3):
            _, frame = self.protocol.api_versions_request(
                SOFTWARE_NAME, self._software_version, version
            )
            sent_version = API_VERSIONS.max_version if version is None else version
            response = await self.exchange_raw(frame)
            if not isinstance(response, ApiVersionsResponse):  # pragma: no cover
                raise ProtocolError("ApiVersions answered with another message")
            if response.error_code == 0:
                self.protocol.set_broker_versions(response)
                return
            retry = api_versions_retry_version(response, sent_version)
            if retry is None:
                raise UnsupportedVersionError(
                    f"node {self.node_id} refused ApiVersions (error {response.error_code})"
                )
            version = retry
        raise UnsupportedVersionError(f"node {self.node_id}: ApiVersions negotiation failed")

    async def _identify_cluster(self) -> None:
        """Ask the broker for its cluster id: Metadata for no topic (brokers and ids only)."""
        response = await self.handshake_request(
            MetadataRequest(topics=[], allow_auto_topic_creation=False)
        )
        if not isinstance(response, MetadataResponse):  # pragma: no cover - table invariant
            raise ProtocolError("Metadata answered with another message")
        self.cluster_id = response.cluster_id

    async def exchange_raw(self, frame: bytes | bytearray) -> Struct:
        """Write one framed request and read its response before the read loop runs.

        Used during the handshake (ApiVersions, SASL), when nothing else is in flight.
        """
        stream = self._stream
        if stream is None:
            raise KafkaConnectionError(f"node {self.node_id}: not connected")
        stream.write(frame)
        await stream.drain()
        while True:
            data = await stream.read(READ_CHUNK_BYTES)
            if not data:
                raise KafkaConnectionError(f"node {self.node_id} closed the connection")
            responses = self.protocol.receive_data(data)
            if responses:
                return responses[0].body

    async def handshake_request(self, request: Struct) -> Struct:
        """Send one request and await its response during the handshake."""
        _, frame = self.protocol.send(request)
        return await self.exchange_raw(frame)

    def set_session_lifetime(self, lifetime_ms: int) -> None:
        """Plan re-authentication for a SASL session that the broker ends after ``lifetime_ms``.

        Like the Java client, act at a random point between 85 % and 95 % of the lifetime:
        from then on :attr:`can_send` is false, and the pool replaces the connection (a new
        one authenticates afresh, e.g. with a new OAuth token) once its in-flight requests
        are answered. 0 means the session does not expire.
        """
        if lifetime_ms > 0:
            margin = self._rng.uniform(0.85, 0.95)
            self.reauth_at_ms = int(self._clock.monotonic_ms() + lifetime_ms * margin)
        else:
            self.reauth_at_ms = None

    def needs_reauth(self, now_ms: int) -> bool:
        """Whether the SASL session is due for re-authentication (see set_session_lifetime)."""
        return self.reauth_at_ms is not None and now_ms >= self.reauth_at_ms

    # --- requests ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests written and not answered yet."""
        return len(self._pending)

    @property
    def can_send(self) -> bool:
        """Open, under the in-flight limit, and not backed up in the socket buffer."""
        stream = self._stream
        if not self.ready or stream is None or len(self._pending) >= self.max_in_flight:
            return False
        if self.reauth_at_ms is not None and self._clock.monotonic_ms() >= self.reauth_at_ms:
            return False
        return stream.write_buffer_size() < WRITE_BUFFER_HIGH_BYTES

    @property
    def oldest_deadline_ms(self) -> int | None:
        """The earliest request deadline among unanswered requests."""
        for pending in self._pending.values():
            return pending.deadline_ms  # dicts keep insertion order: the first is oldest
        return None

    def send(
        self,
        request: Struct,
        handler: ResponseHandler | None,
        *,
        deadline_ms: int,
        expect_response: bool = True,
        version: int | None = None,
    ) -> None:
        """Write a request now; ``handler(body, None)`` or ``handler(None, error)`` follows.

        Raises:
            KafkaConnectionError: the connection is not open.
        """
        stream = self._stream
        if not self.ready or stream is None or stream.is_closing():
            reason = f" ({self.closed_error})" if self.closed_error is not None else ""
            raise KafkaConnectionError(f"node {self.node_id}: connection is not open{reason}")
        correlation_id, frame = self.protocol.send(
            request, version=version, expect_response=expect_response
        )
        if expect_response:
            self._pending[correlation_id] = _Pending(handler, deadline_ms)
            on_deadline = self.on_deadline
            if on_deadline is not None:
                on_deadline(deadline_ms)
        else:
            self.unanswered_writes = True
        stream.write(frame)

    async def confirm_written(self, timeout_s: float) -> None:
        """Wait until the broker has read every request written so far.

        A broker handles a connection's requests one at a time, in order, so the answer to
        a Metadata request for no topic follows every request written before it, acks=0
        Produce requests included (which have no answer of their own). ``close()`` asks for
        it: the connections' abort would otherwise drop what the broker had not read yet.
        """
        if not self.unanswered_writes:
            return
        await self.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), timeout_s)
        self.unanswered_writes = False

    async def request(
        self, request: Struct, timeout_s: float, *, version: int | None = None
    ) -> Struct:
        """Send a request and await its response body (at ``version``, default negotiated).

        Raises:
            KafkaConnectionError: the connection broke or was closed.
            RequestTimeoutError: no answer within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Struct] = loop.create_future()

        def on_response(body: Struct | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            elif body is not None:
                future.set_result(body)

        deadline_ms = self._clock.monotonic_ms() + int(timeout_s * 1000)
        self.send(request, on_response, deadline_ms=deadline_ms, version=version)
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            error = RequestTimeoutError(
                f"node {self.node_id} did not answer {type(request).__name__} "
                f"within {timeout_s * 1000:.0f} ms"
            )
            self.close(error)
            raise error from None

    # --- reading ----------------------------------------------------------------------------

    async def run_reader(self) -> None:
        """Read responses until the connection closes; then fail what is still pending.

        Responses are decoded and handed to their handlers in the event loop's callback for
        the bytes' arrival (:meth:`ByteStream.start_receiving`), not in this task: a handler
        resolves its futures one loop turn sooner than if this task had to be woken to read.
        This task waits for the end. It returns normally when the connection ends for a
        network or protocol reason (the pending requests get a retriable connection error);
        an exception raised by a response handler (a bug in this client) propagates.
        """
        stream = self._stream
        if stream is None:
            return
        protocol = self.protocol
        pending_requests = self._pending
        ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def on_data(data: bytes) -> None:
            if ended.done():
                return
            try:
                for response in protocol.receive_data(data):
                    pending = pending_requests.pop(response.correlation_id, None)
                    if pending is not None and pending.handler is not None:
                        pending.handler(response.body, None)
                if protocol.broken:
                    raise protocol.error or ProtocolError("broken response")
            except Exception as exc:  # noqa: BLE001 - ends the connection; run_reader sorts it out
                ended.set_result(exc)
                stream.abort()

        def on_end(error: OSError | None) -> None:  # None: closed by the broker or by us
            if not ended.done():
                ended.set_result(error)

        error: BaseException | None = None
        try:
            stream.start_receiving(on_data, on_end)
            outcome = await ended
            if isinstance(outcome, ProtocolError):
                error = KafkaConnectionError(
                    f"node {self.node_id} sent a broken response ({outcome}); disconnecting"
                )
                error.__cause__ = outcome
                log.warning("broken response, disconnecting", node=self.node_id, error=str(outcome))
            elif isinstance(outcome, OSError):
                error = KafkaConnectionError(f"node {self.node_id}: {outcome}")
            elif outcome is None:
                error = KafkaConnectionError(f"node {self.node_id} closed the connection")
            else:
                raise outcome
        finally:
            self.close(error or KafkaConnectionError(f"node {self.node_id}: connection closed"))

    # --- closing ----------------------------------------------------------------------------

    def check_timeouts(self, now_ms: int) -> bool:
        """Close the connection if its oldest request is past its deadline; True if closed.

        A broker that does not answer one request in time will not answer the ones behind it
        either (it answers in order), so the whole connection goes, as in the Java client.
        """
        oldest = self.oldest_deadline_ms
        if oldest is None or now_ms < oldest:
            return False
        self.close(
            RequestTimeoutError(
                f"node {self.node_id} did not answer a request in time "
                f"({len(self._pending)} request(s) in flight); disconnecting"
            )
        )
        return True

    def close(self, error: BaseException | None = None) -> None:
        """Close now; every unanswered request's handler gets ``error``."""
        if self.closed_error is not None:
            return
        self.closed_error = error or KafkaConnectionError(f"node {self.node_id}: closed")
        self.ready = False
        self._abort()
        pending = list(self._pending.values())
        self._pending.clear()
        self.protocol.fail_pending()
        failure = self.closed_error
        if not (isinstance(failure, KafkaError) and failure.retriable):
            # Whatever closed the connection, an unanswered request may or may not have been
            # written: to its caller that is a retriable connection failure, never a verdict.
            cause = failure
            failure = KafkaConnectionError(f"node {self.node_id}: {cause}")
            failure.__cause__ = cause
        for entry in pending:
            if entry.handler is not None:
                entry.handler(None, failure)

    def _abort(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.abort()
