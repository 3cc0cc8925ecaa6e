"""Produce responses: what becomes of each batch the sender wrote.

Responses are handled synchronously as they arrive (on the connection's read task), as the
Java client's ``Sender.handleProduceResponse`` does: each partition's batch completes, is
retried after a backoff, is split (refused as too large), or fails with a typed error. The
same outcomes end the batches the sender's pass gives up on (past the delivery timeout) or
abandons (the producer stops).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import cast

from aiokprod.backoff import backoff_ms
from aiokprod.clock import Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    DeliveryTimeoutError,
    DuplicateSequenceNumberError,
    KafkaConnectionError,
    KafkaError,
    error_for_code,
)
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.interceptors import on_acknowledgement
from aiokprod.internals.metadata import BrokerNode, MetadataState
from aiokprod.internals.sequences import Verdict
from aiokprod.internals.split import should_split, split_refused
from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.transactions import TransactionManager
from aiokprod.logs import get_logger
from aiokprod.protocol.messages.produce import ProduceResponse
from aiokprod.protocol.schema import Struct
from aiokprod.types import ProducerInterceptor, TopicPartition

log = get_logger("aiokprod.sender")


class ProduceResponseHandler:
    """Completes, retries, splits or fails the batches the sender wrote.

    Args:
        config: the producer's options.
        accumulator: where retried batches queue again.
        metadata: the cluster view (refreshed on errors, moved by KIP-951 leader hints).
        idempotence: sequence state, or None when idempotence is off.
        stats: counters behind ``Producer.metrics()``.
        clock: the producer's clock.
        rng: randomness for retry backoff jitter.
        txn: transaction state of a transactional producer (docs/transactions.md).
        in_flight: the sender's batches written and not yet answered (shared: the sender
            adds to it, an outcome removes the batch).
        wakeup: makes the sender's loop run a pass soon.
    """

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: MetadataState,
        idempotence: IdempotenceState | None,
        stats: ProducerStats,
        clock: Clock,
        rng: random.Random,
        txn: TransactionManager | None,
        in_flight: dict[ProducerBatch, None],
        wakeup: Callable[[], None],
    ) -> None:
        self._config = config
        self._acc = accumulator
        self._metadata = metadata
        self._idem = idempotence
        self._stats = stats
        self._clock = clock
        self._rng = rng
        self._txn = txn
        self._in_flight = in_flight
        self._wakeup = wakeup
        self._interceptors: Sequence[ProducerInterceptor] = config.interceptors
        #: Set by ``Sender.stop``: the producer is closing.
        self.stopping = False
        #: Set by a forced stop: nothing is retried any more.
        self.force_error: KafkaError | None = None

    # --- responses --------------------------------------------------------------------------

    def handle_produce_response(
        self,
        by_tp: dict[TopicPartition, ProducerBatch],
        node: int,
        sent_ms: int,
        body: Struct | None,
        error: BaseException | None,
    ) -> None:
        """The answer to one Produce request (``body``), or why none came (``error``)."""
        now_ms = self._clock.monotonic_ms()
        if error is not None or not isinstance(body, ProduceResponse):
            # No answer (disconnect, request timeout, broken response): whether the batches
            # were written is unknown, so they are retried as they are.
            failure = error if error is not None else KafkaConnectionError("no Produce response")
            if not isinstance(failure, KafkaError) or not failure.retriable:
                failure = KafkaConnectionError(f"Produce request failed: {failure}")
            # Their topics' leaders may have moved (a disconnect also asks for every topic:
            # the pool's on_disconnect).
            self._metadata.request_update_for({tp.topic for tp in by_tp})
            for lost in by_tp.values():
                self._on_batch_error(lost, failure, now_ms)
            self._wakeup()
            return
        self._stats.on_response(node, now_ms - sent_ms, body.throttle_time_ms, now_ms)
        failed = False
        endpoints: dict[int, BrokerNode] | None = None
        for topic in body.responses:
            name = topic.name
            for part in topic.partition_responses:
                # A plain tuple finds the TopicPartition key (a NamedTuple hashes and compares
                # as its tuple): no interpreted NamedTuple constructor per partition answered.
                key = cast(TopicPartition, (name, part.index))
                batch: ProducerBatch | None = by_tp.pop(key, None)
                if batch is None:
                    continue  # a partition we did not send (a broken broker): ignored
                if part.error_code == 0:
                    self._on_batch_success(batch, part.base_offset, part.log_append_time_ms)
                    continue
                exc = error_for_code(part.error_code, part.error_message)
                record_errors: dict[int, BaseException] | None = None
                if part.record_errors:
                    record_errors = {
                        e.batch_index: error_for_code(
                            part.error_code, e.batch_index_error_message or part.error_message
                        )
                        for e in part.record_errors
                    }
                hint = part.current_leader
                moved = False
                if hint is not None and hint.leader_id >= 0:
                    if endpoints is None:  # made only for a response that carries a hint
                        endpoints = {
                            e.node_id: BrokerNode(e.node_id, e.host, e.port, e.rack)
                            for e in body.node_endpoints
                        }
                    moved = self._metadata.apply_leader_hint(
                        batch.tp, hint.leader_id, hint.leader_epoch, endpoints.get(hint.leader_id)
                    )
                self._on_batch_error(batch, exc, now_ms, record_errors, leader_moved=moved)
                failed = True
        for batch in by_tp.values():
            self._on_batch_error(
                batch,
                KafkaConnectionError("the broker's response left out this partition"),
                now_ms,
            )
            failed = True
        # A pass is needed when something can go now (queued batches: an in-flight slot or a
        # muted partition was freed), after a failure (retries, idempotence), or to finish a
        # close. Otherwise (the answer to a lone send_and_wait) the loop sleeps on.
        if failed or self.stopping or self._acc.has_undrained():
            self._wakeup()

    def _on_batch_success(self, batch: ProducerBatch, base_offset: int, append_ms: int) -> None:
        if batch.final_state is not None:
            # It expired while its request was out, and was written after all.
            if self._idem is not None:
                self._idem.on_late_outcome(batch, appended=True)
            return
        self.complete_batch(batch, base_offset, append_ms)

    def _on_batch_error(
        self,
        batch: ProducerBatch,
        exc: BaseException,
        now_ms: int,
        record_errors: dict[int, BaseException] | None = None,
        *,
        leader_moved: bool = False,
    ) -> None:
        self._in_flight.pop(batch, None)
        batch.in_flight = False
        self._acc.muted.discard(batch.tp)
        idem = self._idem
        if batch.final_state is not None:
            # It expired while its request was out; a duplicate answer means written.
            if idem is not None:
                appended = isinstance(exc, DuplicateSequenceNumberError)
                idem.on_late_outcome(batch, appended=appended)
            return
        forced = self.force_error is not None
        if should_split(batch, exc, now_ms, self._config.delivery_timeout_ms, forced=forced):
            self._split(batch, exc, now_ms)
            return
        if idem is not None and batch.has_sequence:
            verdict = idem.on_error(batch, exc)
        elif isinstance(exc, DuplicateSequenceNumberError):
            verdict = Verdict.DUPLICATE
        else:
            verdict = Verdict.RETRY if getattr(exc, "retriable", False) else Verdict.FAIL
        if verdict is Verdict.DUPLICATE:
            self.complete_batch(batch, -1, -1)  # written before: success, offset unknown (as Java)
            return
        if verdict is Verdict.FAIL:
            self._fail(batch, exc, now_ms, record_errors)
            return
        if not self._can_retry(batch, now_ms):
            # Out of time or retries: an earlier attempt may have been written.
            self._give_up(batch, self._delivery_timeout(batch, now_ms, exc), now_ms)
            return
        if getattr(exc, "invalid_metadata", False):
            self._metadata.request_update_for(batch.tp.topic)
        # A KIP-951 hint named the new leader: resend there at once, as Java does.
        wait = (
            0
            if leader_moved
            else backoff_ms(
                batch.attempts + 1,
                self._config.retry_backoff_ms,
                self._config.retry_backoff_max_ms,
                self._rng,
            )
        )
        self._acc.reenqueue(batch, now_ms, wait)
        self._stats.on_retry(batch, now_ms)
        log.debug("retrying batch", tp=batch.tp, attempt=batch.attempts, error=str(exc))

    def _split(self, batch: ProducerBatch, exc: BaseException, now_ms: int) -> None:
        """Refused as too large: its records go back in smaller batches (internals/split.py)."""
        pieces = split_refused(batch, self._acc, self._idem, now_ms)
        if batch.handles and self._interceptors:
            # Its handles complete when the last piece does: the interceptors hear then.
            notify = functools.partial(on_acknowledgement, self._interceptors)
            batch.result.add_callback(notify, batch)
        self._stats.on_split(batch, now_ms)
        log.warning(
            "batch too large for the broker, split",
            tp=batch.tp,
            pieces=[p.record_count for p in pieces],
            error=str(exc),
        )

    def _can_retry(self, batch: ProducerBatch, now_ms: int) -> bool:
        if self.force_error is not None:  # set only by a forced stop
            return False
        return (
            batch.attempts < self._config.retries
            and now_ms - batch.created_ms < self._config.delivery_timeout_ms
        )

    def _delivery_timeout(
        self, batch: ProducerBatch, now_ms: int, last_error: BaseException | None
    ) -> KafkaError:
        waited = now_ms - batch.created_ms
        tail = f"; last error: {last_error}" if last_error is not None else ""
        if waited < self._config.delivery_timeout_ms and isinstance(last_error, KafkaError):
            return last_error  # out of retries rather than out of time: report the error
        error = DeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} not "
            f"acknowledged within delivery_timeout_ms={self._config.delivery_timeout_ms} "
            f"({waited} ms since send, {batch.attempts} retries){tail}"
        )
        if last_error is not None:
            error.__cause__ = last_error
        return error

    # --- outcomes ---------------------------------------------------------------------------

    def complete_batch(
        self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int
    ) -> None:
        """Complete a batch: it was appended (at ``base_offset``, or -1 when unknown)."""
        self._in_flight.pop(batch, None)
        self._acc.muted.discard(batch.tp)
        if not batch.complete(base_offset, log_append_time_ms):
            return
        self._acc.deallocate(batch)
        if self._idem is not None:
            self._idem.on_success(batch)
        self._stats.on_success(batch, self._clock.monotonic_ms())
        if self._interceptors:  # (an interpreted call per batch otherwise)
            on_acknowledgement(self._interceptors, batch)

    def _fail(
        self,
        batch: ProducerBatch,
        exc: BaseException,
        now_ms: int,
        record_errors: dict[int, BaseException] | None = None,
    ) -> None:
        """Fail a batch on a definite broker verdict (it was not appended)."""
        if not self._finish_failed(batch, exc, record_errors):
            return
        if self._txn is not None:
            self._txn.on_batch_error(exc)
        if self._idem is not None:
            may_retry = batch.attempts < self._config.retries
            self._idem.on_failure(batch, exc, may_retry=may_retry)

    def expire_batch(self, batch: ProducerBatch, now_ms: int, *, outstanding: bool = False) -> None:
        """Fail a batch past its delivery timeout (``outstanding``: its request is still out)."""
        self._give_up(
            batch, self._delivery_timeout(batch, now_ms, None), now_ms, outstanding=outstanding
        )

    def _give_up(
        self, batch: ProducerBatch, exc: BaseException, now_ms: int, *, outstanding: bool = False
    ) -> None:
        """Fail a batch whose fate is unknown: it may have been appended.

        That is a batch past its delivery timeout, or out of retries after a retriable error.
        """
        if not self._finish_failed(batch, exc, None):
            return
        if self._txn is not None:
            self._txn.on_batch_error(exc)
        if self._idem is not None:
            self._idem.on_expired(batch, outstanding=outstanding)

    def abandon_batch(self, batch: ProducerBatch, exc: BaseException) -> None:
        """Fail a batch because the producer stops (close timeout, crash, fatal error)."""
        if self._finish_failed(batch, exc, None) and self._idem is not None:
            self._idem.on_abandoned(batch)

    def _finish_failed(
        self,
        batch: ProducerBatch,
        exc: BaseException,
        record_errors: dict[int, BaseException] | None,
    ) -> bool:
        self._in_flight.pop(batch, None)
        self._acc.muted.discard(batch.tp)
        if not batch.fail(exc, record_errors):
            return False
        self._acc.deallocate(batch)
        self._stats.on_failure(batch, self._clock.monotonic_ms())
        log.debug("batch failed", tp=batch.tp, records=batch.record_count, error=str(exc))
        if self._interceptors:
            on_acknowledgement(self._interceptors, batch)
        return True
