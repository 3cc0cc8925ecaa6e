"""The simulated network: byte streams between the producer and simulated brokers, with faults.

:class:`SimTransport` implements :class:`aiokprod.net.transport.Transport`; each ``connect``
returns a :class:`ClientStream` (the producer's end, a
:class:`~aiokprod.net.transport.ByteStream`) wired to a :class:`ServerConnection` on the
broker listening at that address. Bytes travel with a small latency drawn from the seed and
stay in order per direction. The broker side reads request frames, answers them one at a time
(as Kafka does per connection) after a processing delay, and the fault schedule may drop,
delay, truncate or corrupt a response, change its correlation id or size prefix, cut or stall
the connection, lose a request, or refuse a connect.

Several clusters can listen at once (the cluster replaced behind the bootstrap address, issue
29): an address leads to the running broker there, and when a broker of an older cluster runs
again at an address a newer one also uses (a stale broker), either may answer a connect.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import struct
from collections.abc import Callable

from aiokprod.errors import ProtocolError
from aiokprod.protocol.api import BY_KEY
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.schema import Struct, decode_struct, encode_struct
from aiokprod.testing.sim.cluster import SimBroker, SimCluster
from aiokprod.testing.sim.faults import (
    CONNECT_FAULTS,
    REQUEST_FAULTS,
    RESPONSE_FAULTS,
    FaultSchedule,
)

_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
#: One nanosecond: successive deliveries on a connection are at strictly increasing times.
_NS = 1e-9

Trace = Callable[[str], None]


class SimNetwork:
    """Connections between the producer and a :class:`SimCluster`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        cluster: SimCluster,
        *,
        rng: random.Random,
        faults: FaultSchedule | None = None,
        trace: Trace | None = None,
        latency_ms: tuple[float, float] = (0.05, 2.0),
    ) -> None:
        self.loop = loop
        self.cluster = cluster
        #: Every cluster, oldest first (``cluster`` is the newest).
        self.clusters: list[SimCluster] = [cluster]
        self.rng = rng
        self.faults = faults or FaultSchedule()
        self.trace: Trace = trace or (lambda line: None)
        self.latency_ms = latency_ms
        self.connections: list[ServerConnection] = []
        self._next_conn_id = 0
        #: Encoded Metadata answers, by (answer, version): the simulated brokers answer a
        #: large cluster's Metadata with the same object until the view changes (the scale
        #: harness), and encoding 100,000 partitions takes the simulator seconds.
        self.encoded_metadata: dict[tuple[int, int], tuple[Struct, bytes]] = {}

    def now_ms(self) -> int:
        """Virtual milliseconds."""
        return int(self.loop.time() * 1000)

    def latency_s(self) -> float:
        """One trip's latency (seconds)."""
        return self.rng.uniform(*self.latency_ms) / 1000

    def transport(self) -> SimTransport:
        """A transport for one producer."""
        return SimTransport(self)

    def add_cluster(self, cluster: SimCluster) -> None:
        """A new cluster starts listening (it becomes :attr:`cluster`)."""
        self.clusters.append(cluster)
        self.cluster = cluster

    def endpoint(self, host: str, port: int) -> tuple[SimCluster, SimBroker] | None:
        """The running broker at ``host:port`` and its cluster (a stale one: maybe, see above)."""
        found = []
        for cluster in reversed(self.clusters):
            broker = cluster.endpoint(host, port)
            if broker is not None:
                found.append((cluster, broker))
        if len(found) > 1:
            return self.rng.choice(found)
        return found[0] if found else None

    def cut_broker(self, node_id: int, cluster: SimCluster | None = None) -> None:
        """Cut every connection of a stopped broker (the client sees a reset or EOF)."""
        cluster = cluster or self.cluster
        for conn in list(self.connections):
            if conn.cluster is cluster and conn.broker.node_id == node_id:
                conn.cut(reset=self.rng.random() < 0.5)


class SimTransport:
    """Opens :class:`ClientStream` s to simulated brokers."""

    def __init__(self, network: SimNetwork) -> None:
        self.network = network

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ClientStream:
        """Connect to the broker at ``host:port`` after a network round trip.

        Raises:
            ConnectionRefusedError: nothing listens there, or the fault schedule refuses.
        """
        net = self.network
        await asyncio.sleep(2 * net.latency_s())
        fault = net.faults.roll(CONNECT_FAULTS, net.now_ms())
        found = net.endpoint(host, port)
        if fault is not None and fault.kind == "connect_hang":
            net.trace(f"connect {host}:{port} hangs")
            await asyncio.sleep(3600)  # until the client's setup timeout gives up
        if found is None or (fault is not None and fault.kind == "refuse_connect"):
            net.trace(f"connect {host}:{port} refused")
            raise ConnectionRefusedError(111, f"connection refused ({host}:{port}, simulated)")
        cluster, broker = found
        conn_id = net._next_conn_id
        net._next_conn_id += 1
        client = ClientStream(net.loop, conn_id)
        server = ServerConnection(net, broker, client, conn_id, cluster)
        client.server = server
        net.connections.append(server)
        where = "" if len(net.clusters) == 1 else f" of {cluster.cluster_id}"
        net.trace(f"c{conn_id} connected to broker {broker.node_id}{where} {host}:{port}")
        return client


class ClientStream:
    """The producer's end of a simulated connection (a ``ByteStream``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn_id: int) -> None:
        self._loop = loop
        self.conn_id = conn_id
        self.server: ServerConnection | None = None
        self._inbox = bytearray()
        self._eof = False
        self._error: OSError | None = None
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[OSError | None], None] | None = None

    # --- ByteStream -------------------------------------------------------------------------

    async def read(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` at EOF; OSError when reset."""
        while not self._inbox:
            if self._error is not None:
                raise self._error
            if self._eof or self._closed:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = bytes(self._inbox[:max_bytes])
        del self._inbox[:max_bytes]
        return data

    def start_receiving(
        self, on_data: Callable[[bytes], None], on_end: Callable[[OSError | None], None]
    ) -> None:
        """Push mode, as the production stream: ``feed`` calls ``on_data`` at once."""
        self._on_data, self._on_end = on_data, on_end
        if self._inbox:
            data = bytes(self._inbox)
            self._inbox.clear()
            on_data(data)
        self._maybe_end()

    def write(self, data: bytes | bytearray) -> None:
        """Send ``data`` (copied) to the broker after the network latency."""
        if self._closed or self._error is not None or self.server is None:
            return
        self.server.receive_later(bytes(data))

    async def drain(self) -> None:
        """Nothing is ever buffered; fails like asyncio's once the connection is lost."""
        if self._closed or self._error is not None or self._eof:
            await asyncio.sleep(0)
            raise ConnectionResetError("Connection lost")

    def write_buffer_size(self) -> int:
        """Always 0: written bytes are handed to the network at once."""
        return 0

    def is_closing(self) -> bool:
        """Whether the stream was aborted or the peer closed or reset it."""
        return self._closed or self._eof or self._error is not None

    def abort(self) -> None:
        """Close now; a pending read returns ``b""``; the broker notices after a while."""
        if self._closed:
            return
        self._closed = True
        self._inbox.clear()
        self._wake()
        self._maybe_end()
        if self.server is not None:
            self.server.client_closed()

    # --- the network's side -----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes arrive from the broker."""
        if self._closed or self._eof or self._error is not None:
            return
        if self._on_data is not None:
            self._on_data(data)
            return
        self._inbox += data
        self._wake()

    def feed_eof(self) -> None:
        """The broker closed the connection."""
        if not self._closed:
            self._eof = True
            self._wake()
            self._maybe_end()

    def feed_reset(self) -> None:
        """The connection was reset."""
        if not self._closed and not self._eof:
            self._error = ConnectionResetError(104, "Connection reset by peer (simulated)")
            self._wake()
            self._maybe_end()

    def _maybe_end(self) -> None:
        on_end = self._on_end
        if on_end is not None and (self._closed or self._eof or self._error is not None):
            self._on_end = self._on_data = None
            on_end(self._error)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class ServerConnection:
    """The broker's end of one connection: reads requests, answers them in order, with faults."""

    def __init__(
        self,
        network: SimNetwork,
        broker: SimBroker,
        client: ClientStream,
        conn_id: int,
        cluster: SimCluster | None = None,
    ) -> None:
        self.net = network
        self.loop = network.loop
        self.cluster = cluster or network.cluster
        self.broker = broker
        self.incarnation = broker.incarnation
        self.client = client
        self.conn_id = conn_id
        self._buffer = bytearray()
        self._in_at = 0.0  # last delivery time towards the broker
        self._out_at = 0.0  # last delivery time towards the client
        self._busy_until = 0.0  # the broker handles one request of a connection at a time
        self.closed = False  # the broker's side is gone (cut, broker stopped)
        self.client_gone = False  # the client closed its end
        self.silent = False  # nothing more reaches the client
        self.deaf = False  # nothing more reaches the broker
        self._stall_until = 0.0

    def _trace(self, text: str) -> None:
        self.net.trace(f"c{self.conn_id} {text}")

    # --- client -> broker -------------------------------------------------------------------

    def receive_later(self, data: bytes) -> None:
        """Schedule ``data`` to reach the broker after the latency (in order)."""
        if self.closed:
            return
        at = max(self.loop.time() + self.net.latency_s(), self._in_at + _NS, self._stall_until)
        self._in_at = at
        self.loop.call_at(at, self._receive, data)

    def client_closed(self) -> None:
        """The client aborted: the broker sees the connection close after the latency."""
        self.client_gone = True
        self.loop.call_later(self.net.latency_s(), self._close_server_side)

    def _close_server_side(self) -> None:
        self.closed = True
        if self in self.net.connections:
            self.net.connections.remove(self)

    def _receive(self, data: bytes) -> None:
        if self.closed or self.deaf or not self._broker_running():
            return
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 4 and not self.closed:
            size = int(_INT32.unpack_from(buffer, 0)[0])
            if size < 8 or size > 100 * 1024 * 1024:
                self.cluster.violations.append(f"request frame size {size}")
                self.cut(reset=True)
                return
            if len(buffer) < 4 + size:
                break
            frame = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            self._on_request(frame)

    def _broker_running(self) -> bool:
        return self.broker.alive and self.broker.incarnation == self.incarnation

    def _on_request(self, frame: bytes) -> None:
        now_ms = self.net.now_ms()
        api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
        fault = self.net.faults.roll(REQUEST_FAULTS, now_ms)
        if fault is not None:
            if fault.kind == "drop_request":
                # TCP cannot lose one request and deliver the next: from here on the
                # connection is a black hole both ways (a network partition).
                self._trace(f"request {correlation_id} dropped, connection is a black hole")
                self.silent = True
                self.deaf = True
                return
            if fault.kind == "cut":
                self._trace(f"cut at request {correlation_id}")
                self.cut(reset=self.net.rng.random() < 0.5)
                return
            if fault.kind == "stall":
                forever = self.net.rng.random() < 0.25
                self._trace(f"stall {'forever' if forever else f'{fault.magnitude_ms} ms'}")
                if forever:
                    self.silent = True
                else:
                    self._stall_until = self.loop.time() + fault.magnitude_ms / 1000
        delay = self.net.rng.uniform(0.05, 3.0) / 1000
        at = max(self.loop.time(), self._busy_until, self._stall_until) + delay
        self._busy_until = at
        self.loop.call_at(at, self._process, api_key, version, correlation_id, frame)

    def _process(self, api_key: int, version: int, correlation_id: int, frame: bytes) -> None:
        if not self._broker_running():
            return  # the broker died with the request in its queue
        api = BY_KEY.get(api_key)
        try:
            if api is None:
                raise ProtocolError(f"unknown api key {api_key}")
            reader = Reader(frame, f"{api.name} request v{version}")
            reader.skip(8)
            client_id_len = reader.read_int16()
            if client_id_len > 0:
                reader.skip(client_id_len)
            flexible = api.is_flexible(version)
            if flexible:
                for _ in range(reader.read_unsigned_varint()):
                    reader.read_unsigned_varint()
                    reader.skip(reader.read_unsigned_varint())
            if api_key == 18 and version > 4:
                request: Struct | None = None
            else:
                request = decode_struct(api.request, reader, version, flexible)
                reader.expect_end()
        except ProtocolError as exc:
            self.cluster.violations.append(f"malformed request (api {api_key} v{version}): {exc}")
            self.cut(reset=True)
            return
        if api_key != 0:
            self._trace(f"{api.name} v{version} to broker {self.broker.node_id}")
        if request is None:  # ApiVersions above v4: v0 answer with UNSUPPORTED_VERSION
            body = _api_versions_unsupported()
            self._respond(api_key, 0, correlation_id, body, applied=False)
            return
        try:
            response = self.cluster.handle(self.broker, api_key, version, request)
        except ProtocolError as exc:
            self.cluster.violations.append(f"request the broker rejects: {exc}")
            self.cut(reset=True)
            return
        cost_s = self.cluster.last_request_cost_ms / 1000 if api_key == 0 else 0.0
        if cost_s > 0:
            # The broker works on this request for that long: the answer, and the next
            # request of the connection, wait (a real broker's first appends, issue 30).
            self._busy_until = max(self._busy_until, self.loop.time()) + cost_s
        if response is None:
            return
        self._respond(
            api_key, version, correlation_id, response, applied=api_key == 0, extra_s=cost_s
        )

    # --- broker -> client -------------------------------------------------------------------

    def _respond(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        body: Struct,
        *,
        applied: bool,
        extra_s: float = 0.0,
    ) -> None:
        api = BY_KEY[api_key]
        out = bytearray(4)
        out += _INT32.pack(correlation_id)
        if api.response_header_version(version) >= 1:
            out.append(0)
        out += self._encode_body(api_key, version, body)
        _INT32.pack_into(out, 0, len(out) - 4)
        frame = bytes(out)
        rng = self.net.rng
        fault = self.net.faults.roll(RESPONSE_FAULTS, self.net.now_ms())
        kind = fault.kind if fault is not None else None
        if kind is None:
            self._send(frame, extra_s=extra_s)
        elif kind == "drop_response":
            self._trace(f"response {correlation_id} ({api.name}) dropped")
        elif kind == "apply_drop":
            silent = rng.random() < 0.5
            self._trace(
                f"response {correlation_id} ({api.name}) applied={applied} then "
                + ("silence" if silent else "cut")
            )
            if silent:
                self.silent = True
            else:
                self.cut(reset=rng.random() < 0.5)
        elif kind == "delay_response":
            assert fault is not None
            self._trace(f"response {correlation_id} delayed {fault.magnitude_ms} ms")
            self._send(frame, extra_s=fault.magnitude_ms / 1000)
        elif kind == "truncate":
            cut = rng.randrange(4, len(frame) - 4) if len(frame) > 8 else 4
            body_part = frame[4 : 4 + cut]
            self._trace(f"response {correlation_id} truncated to {cut} of {len(frame) - 4}")
            self._send(_INT32.pack(len(body_part)) + body_part)
        elif kind == "corrupt":
            keep = 8 if rng.random() < 0.7 else 4
            noise = rng.randbytes(len(frame) - keep)
            self._trace(f"response {correlation_id} corrupted (kept {keep} bytes)")
            self._send(frame[:keep] + noise)
        elif kind == "wrong_correlation":
            # Never an id the client may be waiting for: after a dropped response, "id + 1 -> id"
            # would be a perfect forgery (same partitions, valid body) no client can detect.
            wrong = (correlation_id + (1 << 30) + rng.randrange(1 << 20)) & 0x7FFFFFFF
            self._trace(f"response {correlation_id} sent as {wrong}")
            self._send(frame[:4] + _INT32.pack(wrong) + frame[8:])
        elif kind == "bad_frame_size":
            size = rng.choice((2**31 - 1, -1, 0, 3, 2**30))
            self._trace(f"response {correlation_id} with frame size {size}")
            self._send(_INT32.pack(size) + frame[4:])
        elif kind == "cut_mid_read":
            part = rng.randrange(1, len(frame))
            self._trace(f"response {correlation_id} cut after {part} of {len(frame)} bytes")
            self._send(frame[:part])
            self.cut(reset=rng.random() < 0.5)

    def _encode_body(self, api_key: int, version: int, body: Struct) -> bytes | bytearray:
        api = BY_KEY[api_key]
        if api_key != 3:
            out = bytearray()
            encode_struct(body, version, api.is_flexible(version), out)
            return out
        cache = self.net.encoded_metadata
        cached = cache.get((id(body), version))
        if cached is None or cached[0] is not body:
            if len(cache) >= 8:
                cache.clear()
            out = bytearray()
            encode_struct(body, version, api.is_flexible(version), out)
            cached = cache[id(body), version] = (body, bytes(out))
        return cached[1]

    def _send(self, data: bytes, extra_s: float = 0.0) -> None:
        if self.silent or self.closed or self.client_gone:
            return
        at = max(
            self.loop.time() + self.net.latency_s() + extra_s, self._out_at + _NS, self._stall_until
        )
        self._out_at = at
        self.loop.call_at(at, self.client.feed, data)

    def cut(self, *, reset: bool) -> None:
        """Close the connection from the broker's side (after what was already sent)."""
        if self.closed:
            return
        self.closed = True
        if self in self.net.connections:
            self.net.connections.remove(self)
        at = max(self.loop.time() + self.net.latency_s(), self._out_at + _NS)
        self._out_at = at
        self.loop.call_at(at, self.client.feed_reset if reset else self.client.feed_eof)


def _api_versions_unsupported() -> Struct:
    from aiokprod.protocol.messages.api_versions import ApiVersionRange, ApiVersionsResponse

    return ApiVersionsResponse(
        error_code=35,
        api_keys=[ApiVersionRange(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0,
    )
