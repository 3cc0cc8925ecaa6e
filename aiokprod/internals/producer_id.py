"""InitProducerId: getting a producer id and epoch from the cluster, with retries.

An idempotent producer needs an id before its first batch can be stamped. On every pass the
sender asks :class:`ProducerIdManager` to act on what the idempotence state requires: fetch
an id (at start, or when the epoch is exhausted) with :func:`init_producer_id` in the
producer's task group, or bump the epoch locally (KIP-360) when a batch's outcome is unknown.
Any broker can answer a non-transactional request, so the least loaded one is asked;
retriable failures (a broker going away, ``COORDINATOR_LOAD_IN_PROGRESS``, an answer that
makes no sense) are retried with backoff until the producer stops.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

from aiokprod.backoff import backoff_ms
from aiokprod.clock import Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import BrokerError, KafkaConnectionError, KafkaError, error_for_code
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.transactions import TransactionManager
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

log = get_logger("aiokprod.sender")

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


class ProducerIdManager:
    """Keeps an idempotent producer's id and epoch usable (see the module docstring).

    Args:
        idempotence: the sequence state that says when an id or a new epoch is needed.
        txn: the transaction manager of a transactional producer (its coordinator owns the
            id and epoch; a batch with an unknown outcome makes the transaction abortable).
        pool, config, clock, rng: what a fetch needs.
        spawn: starts the fetch in the producer's task group.
        wakeup: wakes the sender when the id or epoch changed.
        on_fatal: called with the error when the cluster refuses for good.
        stopped: true once the producer stops (a fetch then gives up).
    """

    def __init__(
        self,
        idempotence: IdempotenceState,
        txn: TransactionManager | None,
        pool: ConnectionPool,
        config: ProducerConfig,
        clock: Clock,
        rng: random.Random,
        *,
        spawn: Spawn,
        wakeup: Callable[[], None],
        on_fatal: Callable[[KafkaError], None],
        stopped: Callable[[], bool],
    ) -> None:
        self._idem = idempotence
        self._txn = txn
        self._pool = pool
        self._config = config
        self._clock = clock
        self._rng = rng
        self._spawn = spawn
        self._wakeup = wakeup
        self._on_fatal = on_fatal
        self._stopped = stopped
        self._fetch_running = False
        #: The cluster that replaced the producer's cluster, until it gave an id (issue 29).
        self._new_cluster: str | None = None

    def maybe_renew(self) -> None:
        """Fetch a producer id or bump the epoch when the idempotence state asks for it.

        Not for a transactional producer: its coordinator gives the id and epoch, and a
        sequence gap makes the transaction abortable instead (txn_requests, transactional).
        """
        idem = self._idem
        if self._txn is not None:
            if idem.epoch_bump_required:
                self._txn.on_batch_error(
                    KafkaError("a batch's outcome is unknown: the epoch must be bumped")
                )
            return
        if idem.producer_id_required:
            if not self._fetch_running:
                self._fetch_running = True
                self._spawn(self._fetch)
        elif idem.epoch_bump_required:
            if idem.bump_epoch():
                log.info(
                    "bumped producer epoch",
                    producer_id=idem.producer_id,
                    epoch=idem.producer_epoch,
                )
            self._wakeup()

    def cluster_changed(self, cluster_id: str) -> None:
        """The cluster was replaced: the next id comes from ``cluster_id`` (logged at INFO)."""
        self._new_cluster = cluster_id

    async def _fetch(self) -> None:
        config = self._config
        try:
            result = await init_producer_id(
                self._pool,
                self._clock,
                self._rng,
                request_timeout_ms=config.request_timeout_ms,
                retry_backoff_ms=config.retry_backoff_ms,
                retry_backoff_max_ms=config.retry_backoff_max_ms,
                stopped=self._stopped,
            )
            if result is not None:
                self._idem.set_producer_id(*result)
                if self._new_cluster is not None:
                    log.info(
                        "producer id from the new cluster",
                        producer_id=result[0],
                        epoch=result[1],
                        cluster_id=self._new_cluster,
                    )
                    self._new_cluster = None
                else:
                    log.debug("producer id", producer_id=result[0], epoch=result[1])
        except KafkaError as exc:
            self._on_fatal(exc)
        finally:
            self._fetch_running = False
            self._wakeup()


async def init_producer_id(
    pool: ConnectionPool,
    clock: Clock,
    rng: random.Random,
    *,
    request_timeout_ms: int,
    retry_backoff_ms: int,
    retry_backoff_max_ms: int,
    stopped: Callable[[], bool],
) -> tuple[int, int] | None:
    """The (producer id, epoch) from the first broker that gives one; None if stopped first.

    Raises:
        BrokerError: a non-retriable refusal (e.g. CLUSTER_AUTHORIZATION_FAILED): fatal for
            an idempotent producer.
    """
    timeout_s = request_timeout_ms / 1000
    attempts = 0
    while not stopped():
        node = pool.least_loaded_node(clock.monotonic_ms())
        error: KafkaError = KafkaConnectionError("no broker can be reached now")
        if node is not None:
            try:
                return await _ask(pool, node, timeout_s)
            except BrokerError as exc:
                if not exc.retriable:
                    raise  # the cluster's verdict on this producer
                error = exc
            except KafkaError as exc:  # no verdict (unreachable, timed out): ask again
                error = exc
        attempts += 1
        wait = backoff_ms(attempts, retry_backoff_ms, retry_backoff_max_ms, rng)
        log.debug("InitProducerId failed, retrying", error=str(error), wait_ms=wait)
        await asyncio.sleep(wait / 1000)
    return None


async def _ask(pool: ConnectionPool, node: int, timeout_s: float) -> tuple[int, int]:
    conn = await pool.connection(node, timeout_s)
    response = await conn.request(InitProducerIdRequest(transactional_id=None), timeout_s)
    if not isinstance(response, InitProducerIdResponse):  # pragma: no cover - table invariant
        raise KafkaConnectionError("InitProducerId answered with another message")
    if not pool.belongs_to_cluster(conn):
        # Only the cluster the producer writes to may give its id (a bootstrap address may
        # lead elsewhere, and the cluster may have been replaced meanwhile): issue 29.
        raise KafkaConnectionError(
            f"node {node} belongs to cluster {conn.cluster_id!r}, not {pool.cluster_id!r}: "
            "its producer id is not used"
        )
    if response.error_code:
        raise error_for_code(response.error_code)
    if response.producer_id < 0 or response.producer_epoch < 0:
        # A broken broker: ask again (maybe another one) rather than stamp nonsense.
        raise KafkaConnectionError(
            f"InitProducerId answered an invalid id {response.producer_id} "
            f"/ epoch {response.producer_epoch}"
        )
    return response.producer_id, response.producer_epoch
