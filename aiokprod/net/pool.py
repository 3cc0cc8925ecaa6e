"""ConnectionPool: at most one connection per broker, opened on demand, with reconnect backoff.

The sender asks for connections synchronously (:meth:`ConnectionPool.ready_connection`): a
broker that is not connected yet gets a connection attempt started in the background, and the
sender moves on to other brokers instead of waiting; the attempt's outcome wakes the sender.
Callers that must wait (metadata, InitProducerId) await :meth:`ConnectionPool.connection`.

Bootstrap addresses act as nodes with negative ids (-1, -2, ...) until metadata names the real
brokers, as in the Java client. Failed attempts back off exponentially between
``reconnect_backoff_ms`` and ``reconnect_backoff_max_ms``.

Each connection's task (open, then read until closed) runs in the producer's task group via
the ``spawn`` function the pool is given, so no connection outlives the producer.

Every connection asks its broker for the cluster id while it opens (issue 29). The first
answer names the cluster the producer writes to (a Metadata answer from another one later
means it was replaced: :meth:`ConnectionPool.set_cluster`); a broker of another cluster is
not used: a connection to a node that answers for another cluster fails
like a refused connect (the address now leads elsewhere: a stale broker of a replaced cluster,
or a cluster replaced in place), and a cluster the producer left is refused even on a
bootstrap address. Bootstrap addresses may lead to a new cluster: that is how the producer
finds the one that replaced its cluster.
"""

from __future__ import annotations

import asyncio
import copy
import random
import ssl
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from aiokprod.backoff import backoff_ms
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import AuthenticationError, KafkaConnectionError, KafkaError
from aiokprod.logs import LogEvery, get_logger
from aiokprod.net.connection import Authenticator, BrokerConnection
from aiokprod.net.transport import StreamTransport, Transport

log = get_logger("aiokprod.net")

#: A broker that keeps refusing connections is reported at most this often.
WARN_EVERY_MS = 30_000

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


class ConnectionPool:
    """Connections to the brokers of one cluster.

    Args:
        bootstrap: (host, port) pairs to start from.
        spawn: starts a background coroutine function in the owner's task group.
        client_id: request header client id.
        software_version: reported in ApiVersions.
        max_in_flight: unanswered requests per connection.
        setup_timeout_ms: connect + handshake bound.
        reconnect_backoff_ms: first wait after a failed attempt.
        reconnect_backoff_max_ms: the longest wait between attempts.
        on_change: called when a connection opens, fails or closes (wakes the sender).
        on_disconnect: called with the node id when an open connection closes or a connect
            attempt fails (the producer then refreshes metadata: the broker may have moved,
            as the Java client's NetworkClient does on a failed connect).
        on_connected: called with the node id when a connection opened (the producer counts
            them: Java's ``connection-creation`` metrics).
        ssl_context: TLS for every connection, or None.
        authenticate: runs on each new connection after ApiVersions (SASL).
        transport: opens byte streams (default: TCP through an asyncio protocol).
        clock: the producer's clock.
        rng: randomness for backoff jitter and node choice.
    """

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        spawn: Spawn,
        client_id: str,
        software_version: str,
        max_in_flight: int,
        setup_timeout_ms: int,
        reconnect_backoff_ms: int,
        reconnect_backoff_max_ms: int,
        on_change: Callable[[], None] = lambda: None,
        on_disconnect: Callable[[int], None] = lambda node_id: None,
        on_connected: Callable[[int], None] = lambda node_id: None,
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Authenticator | None = None,
        transport: Transport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self._spawn = spawn
        self._transport: Transport = transport or StreamTransport()
        self._clock = clock
        self._rng = rng or random.Random()
        self._client_id = client_id
        self._software_version = software_version
        self._max_in_flight = max_in_flight
        self._setup_timeout_s = setup_timeout_ms / 1000
        self._backoff_ms = reconnect_backoff_ms
        self._backoff_max_ms = reconnect_backoff_max_ms
        self._on_change = on_change
        self._on_disconnect = on_disconnect
        self._on_connected = on_connected
        self._ssl = ssl_context
        self._authenticate = authenticate
        self._bootstrap = {-(i + 1): addr for i, addr in enumerate(bootstrap)}
        self._nodes: dict[int, tuple[str, int]] = dict(self._bootstrap)
        self._connections: dict[int, BrokerConnection] = {}
        #: No unanswered request is due before this (a lower bound: answered requests are
        #: not taken out). None: no request was sent since the last look.
        self._deadline_floor_ms: int | None = None
        self._connecting: dict[int, asyncio.Future[BrokerConnection]] = {}
        self._failures: dict[int, int] = {}
        #: Nodes whose failures were reported at WARNING (their recovery is reported too).
        self._failures_logged: dict[int, int] = {}
        self._next_attempt_ms: dict[int, int] = {}
        #: When each node (or bootstrap address) was last tried, for least_loaded_node.
        self._last_attempt_ms: dict[int, int] = {}
        self.last_error: dict[int, BaseException] = {}
        #: The latest authentication failure (bad credentials, untrusted certificate), cleared
        #: by the next successful connection; metadata waiters fail fast with it.
        self.auth_error: AuthenticationError | None = None
        self._closed = False
        self._warn = LogEvery(WARN_EVERY_MS)
        #: Whether any connection ever opened (until then, failures are of the bootstrap).
        self._reached_a_broker = False
        #: The cluster the producer writes to (from metadata), and the ones it left.
        self._cluster_id: str | None = None
        self._retired_clusters: set[str] = set()

    # --- the cluster --------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str | None:
        """The id of the cluster the producer writes to (None until a broker named one)."""
        return self._cluster_id

    def is_retired(self, cluster_id: str) -> bool:
        """Whether ``cluster_id`` is a cluster this producer left for another one."""
        return cluster_id in self._retired_clusters

    def set_cluster(self, cluster_id: str) -> None:
        """Write to ``cluster_id`` from now on; the cluster before it is never used again.

        Open connections to brokers of any other cluster close (their requests fail with a
        retriable connection error); reconnect backoffs start afresh.
        """
        old = self._cluster_id
        if cluster_id == old:
            return
        if old is not None:
            self._retired_clusters.add(old)
            self._failures.clear()
            self._next_attempt_ms.clear()
        self._cluster_id = cluster_id
        for node_id, conn in list(self._connections.items()):
            if conn.cluster_id != cluster_id:
                conn.close(
                    KafkaConnectionError(
                        f"node {node_id} belongs to cluster {conn.cluster_id!r}; the producer "
                        f"writes to cluster {cluster_id!r} now"
                    )
                )

    def belongs_to_cluster(self, conn: BrokerConnection) -> bool:
        """Whether ``conn`` leads to the cluster the producer writes to (or either is unknown)."""
        current = self._cluster_id
        return conn.cluster_id is None or current is None or conn.cluster_id == current

    def _foreign_cluster_error(self, conn: BrokerConnection) -> KafkaConnectionError | None:
        """Why a freshly opened connection must not be used, if it must not (see the module)."""
        theirs, ours = conn.cluster_id, self._cluster_id
        if theirs is None or ours is None or theirs == ours:
            return None
        where = f"node {conn.node_id} at {conn.host}:{conn.port}"
        if theirs in self._retired_clusters:
            return KafkaConnectionError(
                f"{where} answers for cluster {theirs!r}, which this producer left for "
                f"cluster {ours!r}: not used"
            )
        if conn.node_id < 0:
            return None  # a bootstrap address may lead to the cluster that replaced ours
        return KafkaConnectionError(
            f"{where} belongs to cluster {theirs!r}, not to cluster {ours!r} that this "
            f"producer writes to: not used"
        )

    @classmethod
    def from_config(
        cls,
        config: ProducerConfig,
        *,
        spawn: Spawn,
        software_version: str,
        ssl_context: ssl.SSLContext | None,
        authenticate: Authenticator | None,
        transport: Transport | None,
        clock: Clock,
        rng: random.Random,
        on_change: Callable[[], None] = lambda: None,
        on_disconnect: Callable[[int], None] = lambda node_id: None,
        on_connected: Callable[[int], None] = lambda node_id: None,
    ) -> ConnectionPool:
        """A pool with the connection options of ``config`` (the producer's and the admin's)."""
        return cls(
            config.bootstrap_servers,
            spawn=spawn,
            client_id=config.client_id,
            software_version=software_version,
            max_in_flight=config.max_in_flight_requests_per_connection,
            setup_timeout_ms=config.socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            on_change=on_change,
            on_disconnect=on_disconnect,
            on_connected=on_connected,
            ssl_context=ssl_context,
            authenticate=authenticate,
            transport=transport,
            clock=clock,
            rng=rng,
        )

    # --- nodes ------------------------------------------------------------------------------

    def update_nodes(self, brokers: dict[int, tuple[str, int]]) -> None:
        """Adopt the brokers from metadata; connections to moved or removed brokers close.

        A broker that comes back (after a restart, possibly on a new port) is connected to
        afresh, without waiting out the backoff of its failed attempts while it was away.
        """
        for node_id, conn in list(self._connections.items()):
            if node_id >= 0 and brokers.get(node_id) != (conn.host, conn.port):
                conn.close(KafkaConnectionError(f"node {node_id} left the cluster or moved"))
        for node_id, address in brokers.items():
            if self._nodes.get(node_id) != address:
                self._failures.pop(node_id, None)
                self._next_attempt_ms.pop(node_id, None)
        self._nodes = dict(self._bootstrap)
        self._nodes.update(brokers)

    def learn_node(self, node_id: int, host: str, port: int) -> None:
        """Add a broker named by another answer (a coordinator) before metadata names it."""
        if node_id not in self._nodes:
            self._nodes[node_id] = (host, port)

    def knows(self, node_id: int) -> bool:
        """Whether the pool has an address for ``node_id``."""
        return node_id in self._nodes

    def known_nodes(self) -> list[int]:
        """Broker ids from metadata, or bootstrap ids before metadata arrived."""
        real = [n for n in self._nodes if n >= 0]
        return real or list(self._bootstrap)

    # --- getting connections ----------------------------------------------------------------

    def ready_connection(self, node_id: int, now_ms: int) -> BrokerConnection | None:
        """The node's open connection, or None (an attempt is started if allowed)."""
        conn = self._connections.get(node_id)
        if conn is not None and conn.ready:
            if not self._retire_if_expired(conn, now_ms):
                return conn
            return None
        self._maybe_connect(node_id, now_ms)
        return None

    def _retire_if_expired(self, conn: BrokerConnection, now_ms: int) -> bool:
        """Close a connection whose SASL session is due and that has nothing in flight.

        This is re-authentication by reconnecting: the pool opens a new connection, which
        authenticates afresh (new OAuth token). True if ``conn`` must not be used any more.
        """
        if not conn.needs_reauth(now_ms) or conn.in_flight:
            return False
        log.debug("re-authenticating: replacing connection", node=conn.node_id)
        conn.close(KafkaConnectionError(f"node {conn.node_id}: SASL session expiring"))
        return True

    def connection_delay_ms(self, node_id: int, now_ms: int) -> int:
        """How long until a new attempt to ``node_id`` may start (0 if now or connecting)."""
        if node_id in self._connecting:
            return 0
        return max(0, self._next_attempt_ms.get(node_id, 0) - now_ms)

    async def connection(self, node_id: int, timeout_s: float) -> BrokerConnection:
        """Await an open connection to ``node_id`` (waiting out backoff if needed).

        Raises:
            KafkaConnectionError: the attempt failed or the timeout passed.
        """
        clock = self._clock
        deadline_ms = clock.monotonic_ms() + int(timeout_s * 1000)
        while True:
            conn = self._connections.get(node_id)
            if conn is not None and conn.ready:
                if not self._retire_if_expired(conn, clock.monotonic_ms()):
                    return conn
                await asyncio.sleep(0)  # let its read task end before reconnecting
                continue
            if self._closed:
                raise KafkaConnectionError("connection pool is closed")
            now_ms = clock.monotonic_ms()
            wait_ms = self.connection_delay_ms(node_id, now_ms)
            if wait_ms:
                if now_ms + wait_ms > deadline_ms:
                    raise self._unreachable(node_id)
                await asyncio.sleep(wait_ms / 1000)
                continue
            future = self._maybe_connect(node_id, now_ms)
            if future is None:
                raise self._unreachable(node_id)
            remaining_ms = deadline_ms - now_ms
            if remaining_ms <= 0:
                raise self._unreachable(node_id)
            try:
                async with asyncio.timeout(remaining_ms / 1000):
                    return await asyncio.shield(future)
            except TimeoutError:
                raise self._unreachable(node_id) from None
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if future.cancelled() and task is not None and not task.cancelling():
                    # close_all() cancelled the attempt, not our caller: a closed pool.
                    raise KafkaConnectionError("connection pool is closed") from None
                raise

    def _unreachable(self, node_id: int) -> KafkaError:
        host, port = self._nodes.get(node_id, ("?", 0))
        last = self.last_error.get(node_id)
        if isinstance(last, AuthenticationError):
            # Retrying will not fix credentials: callers get the typed error itself.
            return copy.copy(last)
        reason = f": {last}" if last else ""
        return KafkaConnectionError(f"node {node_id} at {host}:{port} is unreachable{reason}")

    def least_loaded_node(self, now_ms: int) -> int | None:
        """A node for a metadata-type request, or None if every node is backing off.

        Prefers a connected node with the fewest requests in flight. With none connected,
        any node of the view or bootstrap address that may be tried now, at random: a view
        whose brokers all moved or left (one that came back on a new port, while the
        others were down when metadata was last fetched) must not keep the producer asking
        only them. This is the Java client's rebootstrap (KIP-899), without its wait.
        """
        best: int | None = None
        best_load = 2**31
        for node_id in self.known_nodes():
            conn = self._connections.get(node_id)
            if conn is not None and conn.ready and conn.in_flight < best_load:
                best, best_load = node_id, conn.in_flight
        if best is not None:
            return best
        nodes = self.known_nodes()
        nodes += [n for n in self._bootstrap if n not in nodes]
        candidates = [n for n in nodes if self.connection_delay_ms(n, now_ms) == 0]
        if not candidates:
            return None
        # The one tried longest ago (never tried first), at random among equals: a random
        # pick alone can keep choosing the addresses of a broker that moved while the one
        # broker that is back waits (simulator seed 36220).
        last = self._last_attempt_ms
        oldest = min(last.get(n, -1) for n in candidates)
        return self._rng.choice([n for n in candidates if last.get(n, -1) == oldest])

    def next_attempt_delay_ms(self, now_ms: int) -> int:
        """The shortest wait until some node may be tried again."""
        nodes = [*self.known_nodes(), *self._bootstrap]
        return min((self.connection_delay_ms(n, now_ms) for n in nodes), default=0)

    def _maybe_connect(self, node_id: int, now_ms: int) -> asyncio.Future[BrokerConnection] | None:
        if self._closed:
            return None
        future = self._connecting.get(node_id)
        if future is not None:
            return future
        if self._next_attempt_ms.get(node_id, 0) > now_ms:
            return None
        address = self._nodes.get(node_id)
        if address is None:
            return None
        future = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = future
        self._last_attempt_ms[node_id] = now_ms
        host, port = address
        conn = BrokerConnection(
            node_id,
            host,
            port,
            client_id=self._client_id,
            max_in_flight=self._max_in_flight,
            software_version=self._software_version,
            ssl_context=self._ssl,
            server_hostname=host,
            transport=self._transport,
            clock=self._clock,
            rng=self._rng,
        )
        conn.on_deadline = self._note_deadline

        async def connect_and_read() -> None:
            await self._run_connection(conn, future)

        self._spawn(connect_and_read)
        return future

    async def _run_connection(
        self, conn: BrokerConnection, future: asyncio.Future[BrokerConnection]
    ) -> None:
        node_id = conn.node_id
        try:
            await conn.open(self._setup_timeout_s, self._authenticate, identify_cluster=True)
            foreign = self._foreign_cluster_error(conn)
            if foreign is not None:
                conn.close(foreign)
                raise foreign
            if self._cluster_id is None and conn.cluster_id is not None:
                # The first broker heard from names the cluster: a producer id may be asked
                # for before any metadata (simulator seeds 3420, 5190, 9724, 9973).
                self.set_cluster(conn.cluster_id)
        except KafkaError as exc:
            self._connecting.pop(node_id, None)
            self._record_failure(node_id, exc)
            if isinstance(exc, AuthenticationError):
                self.auth_error = exc
                log.warning("authentication failed", node=node_id, error=str(exc))
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting on it
            if not self._closed:
                self._on_disconnect(node_id)
            self._on_change()
            return
        except BaseException:
            self._connecting.pop(node_id, None)
            if not future.done():
                future.cancel()
            raise
        self._connecting.pop(node_id, None)
        self._failures.pop(node_id, None)
        self._next_attempt_ms.pop(node_id, None)
        self.last_error.pop(node_id, None)
        self._reached_a_broker = True
        self.auth_error = None
        self._connections[node_id] = conn
        if not future.done():
            future.set_result(conn)
        if self._failures_logged.pop(node_id, None) is not None:
            log.info("broker reachable again", node=node_id, host=conn.host, port=conn.port)
        self._warn.reset(node_id)
        log.info("connected to broker", node=node_id, host=conn.host, port=conn.port)
        self._on_connected(node_id)
        self._on_change()
        try:
            await conn.run_reader()
        finally:
            if self._connections.get(node_id) is conn:
                del self._connections[node_id]
            # Reconnecting right away is fine, but not in a tight loop if it keeps dropping.
            self._next_attempt_ms[node_id] = self._clock.monotonic_ms() + self._backoff_ms
            if not self._closed:
                log.info(
                    "disconnected from broker; will reconnect when needed",
                    node=node_id,
                    reason=str(conn.closed_error),
                )
            if not self._closed:
                self._on_disconnect(node_id)
                self._on_change()

    def _record_failure(self, node_id: int, exc: BaseException) -> None:
        failures = self._failures.get(node_id, 0) + 1
        self._failures[node_id] = failures
        wait = backoff_ms(failures, self._backoff_ms, self._backoff_max_ms, self._rng)
        self._next_attempt_ms[node_id] = self._clock.monotonic_ms() + wait
        self.last_error[node_id] = exc
        host, port = self._nodes.get(node_id, ("?", 0))
        now_ms = self._clock.monotonic_ms()
        # No broker was ever reached and this ends a round in which every bootstrap address
        # failed: said for them all, at once, then at most every WARN_EVERY_MS.
        if (
            not self._reached_a_broker
            and all(n in self._failures for n in self._bootstrap)
            and self._warn.due(node_id, now_ms)
            and self._warn.due("bootstrap", now_ms)
        ):
            self._failures_logged[node_id] = failures
            log.warning(
                "cannot connect to any bootstrap server; retrying",
                bootstrap_servers=",".join(f"{h}:{p}" for h, p in self._bootstrap.values()),
                error=str(exc),
                retry_in_ms=wait,
            )
            return
        if self._warn.due(node_id, now_ms):
            self._failures_logged[node_id] = failures
            log.warning(
                "cannot connect to broker; retrying",
                node=node_id,
                host=host,
                port=port,
                error=str(exc),
                failures=failures,
                retry_in_ms=wait,
            )
        else:
            log.debug("connect failed", node=node_id, error=str(exc), failures=failures)

    # --- timeouts and closing ---------------------------------------------------------------

    def _note_deadline(self, deadline_ms: int) -> None:
        floor = self._deadline_floor_ms
        if floor is None or deadline_ms < floor:
            self._deadline_floor_ms = deadline_ms

    def check_request_timeouts(self, now_ms: int) -> int | None:
        """Close connections whose oldest request is overdue; the next deadline, if any.

        The connections are looked at only once the earliest deadline noted may have
        passed (the sender calls this on every pass; with 100 brokers connected, a look at
        each on every pass was about a tenth of the CPU per record). Until then that
        deadline is returned: a lower bound, so the sender may look once too early, never
        too late.
        """
        floor = self._deadline_floor_ms
        if floor is None or now_ms < floor:
            return floor
        next_deadline: int | None = None
        for conn in list(self._connections.values()):
            if conn.check_timeouts(now_ms):
                continue
            deadline = conn.oldest_deadline_ms
            if deadline is not None and (next_deadline is None or deadline < next_deadline):
                next_deadline = deadline
        self._deadline_floor_ms = next_deadline
        return next_deadline

    async def wait_written(self, timeout_s: float) -> None:
        """Wait until the brokers have read every request written (``close()``, acks=0).

        With acks=0 a record counts as sent once written, and ``flush()`` returns then; but
        closing aborts the connections, which drops what asyncio still holds, and a broker
        drops what it had not read of a connection that closed. So ``close()`` first asks
        each connection that wrote a request without an answer for one more answer
        (``confirm_written``: queued behind those bytes, answered after them), bounded by
        its timeout.
        """
        waits = [
            conn.confirm_written(timeout_s)
            for conn in self._connections.values()
            if conn.unanswered_writes and conn.ready
        ]
        if waits:
            # A broken connection loses what it had; the others still confirm.
            await asyncio.gather(*waits, return_exceptions=True)

    def open_connections(self) -> list[BrokerConnection]:
        """Every connection that is open now (in node id order)."""
        return [conn for _, conn in sorted(self._connections.items()) if conn.ready]

    def in_flight_requests(self) -> int:
        """Unanswered requests over all connections."""
        return sum(conn.in_flight for conn in self._connections.values())

    def close_all(self, error: BaseException | None = None) -> None:
        """Close every connection (their read tasks then end); no new ones open."""
        self._closed = True
        for conn in list(self._connections.values()):
            conn.close(error or KafkaConnectionError("producer closed the connection"))
        for future in self._connecting.values():
            if not future.done():
                future.cancel()
