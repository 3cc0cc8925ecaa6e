"""InitProducerId: getting a producer id and epoch from the cluster, with retries.

An idempotent producer needs an id before its first batch can be stamped; the sender starts
:func:`init_producer_id` in the producer's task group when the id is missing (at start, or
when the epoch is exhausted). Any broker can answer a non-transactional request, so the
least loaded one is asked; retriable failures (a broker going away, ``COORDINATOR_LOAD_IN_
PROGRESS``, an answer that makes no sense) are retried with backoff until the producer stops.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from aiokprod.backoff import backoff_ms
from aiokprod.clock import Clock
from aiokprod.errors import BrokerError, KafkaConnectionError, KafkaError, error_for_code
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

log = get_logger("aiokprod.sender")


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
    if response.error_code:
        raise error_for_code(response.error_code)
    if response.producer_id < 0 or response.producer_epoch < 0:
        # A broken broker: ask again (maybe another one) rather than stamp nonsense.
        raise KafkaConnectionError(
            f"InitProducerId answered an invalid id {response.producer_id} "
            f"/ epoch {response.producer_epoch}"
        )
    return response.producer_id, response.producer_epoch
