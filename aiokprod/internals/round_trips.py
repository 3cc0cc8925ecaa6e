"""Request round trips that retry: to a coordinator (found with FindCoordinator) or a broker.

The loop the transactional producer (:mod:`aiokprod.internals.txn_requests`) and the admin
client (:mod:`aiokprod.admin`) share: send a request to a broker of the pool's cluster (an
answer from a broker of another cluster - one the producer left, issue 29 - is retried
elsewhere), hand the answer to a handler, and
when the handler (or the connection) says "retriable", wait with the producer's backoff
(``retry_backoff_ms`` doubling up to ``retry_backoff_max_ms``, with jitter) and try again,
finding the coordinator again when it moved, until the handler accepts the answer, an
error is not retriable, or the deadline (``max_block_ms`` from the start of the operation)
passes: then :class:`~aiokprod.errors.KafkaTimeoutError` with the last error as its cause.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokprod.backoff import backoff_ms
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    BrokerError,
    ConcurrentTransactionsError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_for_code,
)
from aiokprod.logs import get_logger
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.messages.coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiokprod.protocol.schema import Struct

log = get_logger("aiokprod.requests")

T = TypeVar("T")

#: Java retries CONCURRENT_TRANSACTIONS after 20 ms, not the usual backoff: it clears fast.
CONCURRENT_TRANSACTIONS_BACKOFF_MS = 20
#: Errors after which the coordinator is looked up again.
COORDINATOR_MOVED = (15, 16)  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR

#: Builds the request for a connection: (request, version or None for the negotiated one).
MakeRequest = Callable[[BrokerConnection], tuple[Struct, int | None]]


class Retry(Exception):
    """Raised by a response handler: try the round trip again.

    Args:
        error: what went wrong (the cause of the timeout if the deadline passes).
        refind: look the coordinator up again first.
        wait_ms: wait this long instead of the backoff.
    """

    def __init__(self, error: KafkaError, *, refind: bool = False, wait_ms: int | None = None):
        super().__init__(str(error))
        self.error = error
        self.refind = refind
        self.wait_ms = wait_ms


class GiveUp(Exception):
    """Raised by a response handler: fail with ``error`` now, even if its class is retriable.

    (UNKNOWN_TOPIC_OR_PARTITION is retriable for Produce, but committing an offset for a
    partition that does not exist will not get better.)
    """

    def __init__(self, error: KafkaError):
        super().__init__(str(error))
        self.error = error


def check_code(
    code: int,
    message: str | None = None,
    *,
    translate: Callable[[BrokerError], KafkaError] | None = None,
) -> None:
    """Raise :class:`Retry` for a retriable error code, the (translated) error otherwise."""
    if code == 0:
        return
    error = error_for_code(code, message)
    if isinstance(error, ConcurrentTransactionsError):
        raise Retry(error, wait_ms=CONCURRENT_TRANSACTIONS_BACKOFF_MS)
    if code in COORDINATOR_MOVED:
        raise Retry(error, refind=True)
    if error.retriable:
        raise Retry(error)
    raise error if translate is None else translate(error)


class RoundTrips:
    """Retrying request round trips over a connection pool (see the module docstring).

    Args:
        pool: broker connections.
        config: ``request_timeout_ms``, ``max_block_ms`` and the retry backoff.
        clock: the owner's clock.
        rng: randomness for backoff jitter.
        strict_deadline: also cut a request's own timeout at the deadline. Only for a pool
            of one's own: a request that times out closes its connection, and the
            producer's coordinator connection carries Produce requests too.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        config: ProducerConfig,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        *,
        strict_deadline: bool = False,
    ) -> None:
        self.pool = pool
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._strict = strict_deadline
        self._coordinators: dict[tuple[int, str], int] = {}
        self._closed_error: KafkaError | None = None

    def close(self, error: KafkaError) -> None:
        """Fail every round trip from its next attempt on with ``error`` (the owner closed)."""
        self._closed_error = error

    def deadline_ms(self) -> int:
        """``max_block_ms`` from now: the deadline of an operation starting now."""
        return self._clock.monotonic_ms() + self._config.max_block_ms

    # --- coordinators -------------------------------------------------------------------------

    def coordinator_node(self, key_type: int, key: str) -> int | None:
        """The node last found to coordinate ``key`` (None: not looked up, or forgotten)."""
        return self._coordinators.get((key_type, key))

    def forget_coordinator(self, key_type: int, key: str) -> None:
        """Look the coordinator of ``key`` up again before its next request."""
        self._coordinators.pop((key_type, key), None)

    def forget_coordinators(self) -> None:
        """Look every coordinator up again (the cluster was replaced, issue 29)."""
        self._coordinators.clear()

    def check_cluster(self, conn: BrokerConnection) -> None:
        """Retry elsewhere when ``conn`` leads to another cluster than the pool's (issue 29)."""
        if not self.pool.belongs_to_cluster(conn):
            raise Retry(
                KafkaConnectionError(
                    f"node {conn.node_id} belongs to cluster {conn.cluster_id!r}, not "
                    f"{self.pool.cluster_id!r}"
                ),
                refind=True,
            )

    async def coordinator(self, key_type: int, key: str, timeout_s: float) -> BrokerConnection:
        """A connection to the coordinator of ``key`` (FindCoordinator if not known)."""
        node = self._coordinators.get((key_type, key))
        if node is None:
            node = await self._find_coordinator(key_type, key, timeout_s)
            self._coordinators[(key_type, key)] = node
        return await self.pool.connection(node, timeout_s)

    async def _find_coordinator(self, key_type: int, key: str, timeout_s: float) -> int:
        conn = await self.any_node(timeout_s)
        request = FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])
        response = await conn.request(request, timeout_s)
        if not isinstance(response, FindCoordinatorResponse):  # pragma: no cover
            raise KafkaError("FindCoordinator answered with another message")
        self.check_cluster(conn)
        if response.coordinators:
            found = response.coordinators[0]
            code, message = found.error_code, found.error_message
            node_id, host, port = found.node_id, found.host, found.port
        else:
            code, message = response.error_code, response.error_message
            node_id, host, port = response.node_id, response.host, response.port
        if code:
            error = error_for_code(code, message)
            if error.retriable:
                raise Retry(error)
            raise error
        self.pool.learn_node(node_id, host, port)
        return node_id

    async def any_node(self, timeout_s: float) -> BrokerConnection:
        """A connection to the least loaded broker (for FindCoordinator, Metadata)."""
        node = self.pool.least_loaded_node(self._clock.monotonic_ms())
        if node is None:
            raise Retry(KafkaConnectionError("no broker to send the request to"))
        return await self.pool.connection(node, timeout_s)

    # --- round trips --------------------------------------------------------------------------

    async def to_coordinator(
        self,
        what: str,
        key_type: int,
        key: str,
        make: MakeRequest,
        handle: Callable[[Struct], T],
        *,
        deadline_ms: int | None = None,
    ) -> T:
        """Send ``make(conn)`` to the coordinator of ``key`` until ``handle`` accepts the answer.

        Raises:
            KafkaTimeoutError: not done by ``deadline_ms`` (default: ``max_block_ms`` from now).
            KafkaError: the answer's error when it is not retriable.
        """

        def connect(timeout_s: float) -> Awaitable[BrokerConnection]:
            return self.coordinator(key_type, key, timeout_s)

        def moved() -> None:
            self.forget_coordinator(key_type, key)

        return await self._retrying(what, connect, moved, make, handle, deadline_ms)

    async def to_node(
        self,
        what: str,
        node_id: int | None,
        make: MakeRequest,
        handle: Callable[[Struct], T],
        *,
        deadline_ms: int | None = None,
    ) -> T:
        """The same to broker ``node_id`` (None: the least loaded broker, chosen per attempt)."""

        def connect(timeout_s: float) -> Awaitable[BrokerConnection]:
            if node_id is None:
                return self.any_node(timeout_s)
            return self.pool.connection(node_id, timeout_s)

        return await self._retrying(what, connect, lambda: None, make, handle, deadline_ms)

    async def _retrying(
        self,
        what: str,
        connect: Callable[[float], Awaitable[BrokerConnection]],
        moved: Callable[[], None],
        make: MakeRequest,
        handle: Callable[[Struct], T],
        deadline_ms: int | None,
    ) -> T:
        cfg = self._config
        clock = self._clock
        if deadline_ms is None:
            deadline_ms = self.deadline_ms()
        attempts = 0
        error: KafkaError = KafkaTimeoutError("no attempt was made")
        while True:
            if self._closed_error is not None:
                raise self._closed_error
            timeout_ms = cfg.request_timeout_ms
            if self._strict:
                timeout_ms = min(timeout_ms, deadline_ms - clock.monotonic_ms())
            if timeout_ms <= 0:
                raise self._timeout(what, error)
            cut_short = timeout_ms < cfg.request_timeout_ms
            timeout_s = timeout_ms / 1000
            try:
                conn = await connect(timeout_s)
                request, version = make(conn)
                response = await conn.request(request, timeout_s, version=version)
                self.check_cluster(conn)
                return handle(response)
            except GiveUp as give_up:
                raise give_up.error from None
            except Retry as retry:
                error = retry.error
                if retry.refind:
                    moved()
                wait = retry.wait_ms
            except KafkaError as exc:
                if not exc.retriable and not isinstance(exc, KafkaConnectionError):
                    raise
                # An attempt that the deadline cut short and that timed out says nothing of
                # the broker: the cause reported stays what the broker said last (say
                # UNSTABLE_OFFSET_COMMIT), not "no answer within 2 ms".
                if not (cut_short and attempts and isinstance(exc, KafkaTimeoutError)):
                    error = exc
                moved()
                wait = None
            attempts += 1
            if wait is None:
                wait = backoff_ms(
                    attempts, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms, self._rng
                )
            if clock.monotonic_ms() + wait > deadline_ms:
                raise self._timeout(what, error)
            log.debug("request retry", request=what, error=str(error), wait_ms=wait)
            await asyncio.sleep(wait / 1000)

    def _timeout(self, what: str, error: KafkaError) -> KafkaTimeoutError:
        timeout = KafkaTimeoutError(
            f"{what} did not complete within max_block_ms={self._config.max_block_ms}: {error}"
        )
        timeout.__cause__ = error
        return timeout
