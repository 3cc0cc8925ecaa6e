"""TelemetrySender: the task that asks for the KIP-714 subscription and pushes the metrics.

One task in the producer's task group (started only with ``enable_metrics_push``). It waits
until the state (:class:`~aiokprod.internals.telemetry.TelemetryState`) says a request is due
and a connected broker advertises both telemetry APIs (a broker without a telemetry receiver
does not, and gets no telemetry request at all), then sends it and hands the answer to the
state. Requests go to one broker, chosen at random among the connected ones, until its
connection goes; then to another. It never opens a connection of its own, except when
:meth:`TelemetrySender.instance_id` is awaited with no broker connected.

Nothing here can fail a record: the producer's records never wait on this task, its errors
are the broker's answers (handled by the state) or lost connections (retried elsewhere), and
anything unexpected stops the pushing with a WARNING. Each request is logged at DEBUG.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable

import anyio

from aiokprod.clock import Clock
from aiokprod.errors import KafkaError
from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.telemetry import Outcome, Phase, TelemetryState
from aiokprod.internals.telemetry_metrics import Groups, Payload, TelemetryMetrics
from aiokprod.logs import get_logger
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.api import GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    kafka_uuid_text,
)

log = get_logger("aiokprod.telemetry")

#: While no connected broker takes telemetry, look again at least this often (a connection
#: that opens wakes the task sooner).
IDLE_CHECK_MS = 30_000


class TelemetrySender:
    """Runs the KIP-714 exchange (see the module docstring).

    Args:
        state: the decisions.
        builder: what a push holds.
        pool: the producer's connections.
        stats: the producer's metrics (the pushes are counted there).
        read_groups: the producer's metric groups, read at each push.
        clock: the producer's clock.
        rng: the choice of broker.
        request_timeout_ms: bound on one request.
        wall_ns: wall-clock time in ns (the metrics' timestamps).
    """

    def __init__(
        self,
        state: TelemetryState,
        builder: TelemetryMetrics,
        pool: ConnectionPool,
        stats: ProducerStats,
        read_groups: Callable[[], Groups],
        *,
        clock: Clock,
        rng: random.Random,
        request_timeout_ms: int,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.state = state
        self._builder = builder
        self._pool = pool
        self._stats = stats
        self._read_groups = read_groups
        self._clock = clock
        self._rng = rng
        self._timeout_s = request_timeout_ms / 1000
        self._wall_ns = wall_ns
        self._wake = asyncio.Event()
        self._assigned = asyncio.Event()
        self._stopped = asyncio.Event()
        self._scope: anyio.CancelScope | None = None
        self._node: int | None = None

    def wake(self) -> None:
        """Look again now (a connection opened or closed)."""
        self._wake.set()

    # --- the task ---------------------------------------------------------------------------

    async def run(self) -> None:
        """The task's body: until the state ends or :meth:`terminate` stops it."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if not self.state.active:
                    return
                await self._loop()
        except Exception as exc:  # noqa: BLE001 - telemetry never fails a record: stop pushing
            self.state.give_up(repr(exc))
            log.warning("client telemetry given up", reason=repr(exc))
        finally:
            self._stopped.set()

    async def _loop(self) -> None:
        state = self.state
        while True:
            self._wake.clear()
            due = state.due_in_ms(self._clock.monotonic_ms())
            if due is None:
                return
            if due > 0:
                await self._sleep(due)
                continue
            conn = self._connection()
            if conn is None:
                await self._sleep(IDLE_CHECK_MS)
            elif state.phase is Phase.SUBSCRIBE:
                await self._subscribe(conn)
            else:
                await self._push(conn, terminating=False)

    async def _sleep(self, ms: int) -> None:
        with anyio.move_on_after(ms / 1000):
            await self._wake.wait()

    def _connection(self) -> BrokerConnection | None:
        """The broker to talk to: the current one while it is connected, else another."""
        usable = [
            conn
            for conn in self._pool.open_connections()
            if conn.protocol.supports(GET_TELEMETRY_SUBSCRIPTIONS)
            and conn.protocol.supports(PUSH_TELEMETRY)
        ]
        for conn in usable:
            if conn.node_id == self._node:
                return conn
        if not usable:
            return None
        brokers = [conn for conn in usable if conn.node_id >= 0] or usable
        conn = self._rng.choice(brokers)
        if self._node is not None:
            log.debug("client telemetry moves to another broker", node=conn.node_id)
        self._node = conn.node_id
        return conn

    # --- requests ---------------------------------------------------------------------------

    async def _subscribe(self, conn: BrokerConnection) -> None:
        state = self.state
        try:
            response = await conn.request(state.subscription_request(), self._timeout_s)
        except KafkaError as exc:
            self._no_answer(conn, "GetTelemetrySubscriptions", exc)
            return
        if not isinstance(response, GetTelemetrySubscriptionsResponse):  # pragma: no cover
            raise KafkaError("GetTelemetrySubscriptions answered with another message")
        outcome = state.on_subscription(response, self._clock.monotonic_ms())
        sub = state.subscription
        if outcome.kind == "subscribed" and sub is not None:
            self._builder.set_instance_id(kafka_uuid_text(sub.instance_id))
            self._assigned.set()
            log.debug(
                "client telemetry subscription",
                node=conn.node_id,
                subscription_id=sub.subscription_id,
                metrics=list(sub.prefixes),
                interval_ms=sub.push_interval_ms,
                delta=sub.delta,
                max_bytes=sub.max_bytes,
                first_push_in_ms=outcome.wait_ms,
            )
        else:
            self._refused("GetTelemetrySubscriptions", conn, outcome)

    async def _push(self, conn: BrokerConnection, *, terminating: bool) -> None:
        sub = self.state.subscription
        if sub is None:  # pragma: no cover - PUSH has a subscription
            return
        steps = self._builder.build(self._read_groups(), sub, self._wall_ns())
        while True:
            try:
                next(steps)
            except StopIteration as done:
                payload: Payload = done.value
                break
            await asyncio.sleep(0)  # a large push is built in steps
        request = PushTelemetryRequest(
            client_instance_id=sub.instance_id,
            subscription_id=sub.subscription_id,
            terminating=terminating,
            compression_type=payload.compression,
            metrics=payload.data,
        )
        try:
            response = await conn.request(request, self._timeout_s)
        except KafkaError as exc:
            self._no_answer(conn, "PushTelemetry", exc)
            return
        if not isinstance(response, PushTelemetryResponse):  # pragma: no cover
            raise KafkaError("PushTelemetry answered with another message")
        now_ms = self._clock.monotonic_ms()
        outcome = self.state.on_push(response, now_ms)
        if response.error_code:
            self._refused("PushTelemetry", conn, outcome, response.error_code)
            return
        self._builder.commit(payload)
        self._stats.on_telemetry_push(len(payload.data), payload.dropped, now_ms)
        log.debug(
            "client telemetry pushed",
            node=conn.node_id,
            metrics=payload.metrics,
            points=payload.points,
            dropped=payload.dropped,
            bytes=len(payload.data),
            compression=payload.compression,
            terminating=terminating,
        )

    def _no_answer(self, conn: BrokerConnection, api: str, exc: KafkaError) -> None:
        now_ms = self._clock.monotonic_ms()
        self._stats.on_telemetry_error(now_ms)
        retry_ms = self.state.on_no_answer(now_ms)
        if not conn.ready:
            self._node = None  # the broker went away: another one next time
        log.debug(f"{api} got no answer", node=conn.node_id, error=str(exc), retry_in_ms=retry_ms)

    def _refused(
        self, api: str, conn: BrokerConnection, outcome: Outcome, code: int | None = None
    ) -> None:
        self._stats.on_telemetry_error(self._clock.monotonic_ms())
        if outcome.kind == "disabled":
            log.warning(
                "client telemetry given up",
                api=api,
                node=conn.node_id,
                reason=self.state.disabled_reason,
            )
        else:
            log.debug(
                f"{api} refused",
                node=conn.node_id,
                error_code=outcome.error_code or code,
                retry_in_ms=outcome.wait_ms,
            )

    # --- the producer's calls ---------------------------------------------------------------

    async def instance_id(self, timeout_s: float) -> uuid.UUID | None:
        """The client instance id the broker assigned, waiting up to ``timeout_s`` for it.

        None if no broker assigned one in that time (none takes telemetry), or pushing ended.
        With no broker connected, a connection is opened for it (as the Java client does).
        """
        state = self.state
        if state.instance_id is None and state.active:
            if not self._pool.open_connections():
                now_ms = self._clock.monotonic_ms()
                node = self._pool.least_loaded_node(now_ms)
                if node is not None:
                    self._pool.ready_connection(node, now_ms)
            with anyio.move_on_after(timeout_s):
                await self._assigned.wait()
        return state.instance_id

    async def terminate(self, timeout_s: float) -> None:
        """The producer closes: stop the task, then one terminating push within ``timeout_s``."""
        push = self.state.begin_terminating()
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()
        if not push or timeout_s <= 0:
            return
        conn = self._connection()
        if conn is None:
            return
        with anyio.move_on_after(timeout_s):
            await self._push(conn, terminating=True)
