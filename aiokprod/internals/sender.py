"""Sender: the one background loop that turns queued batches into Produce requests.

Each pass (:meth:`Sender.run_once`, synchronous, given the time) does what the Java client's
``Sender.sendProducerData`` does: start a metadata refresh if one is due, ask the accumulator
which leaders are ready, skip the ones whose connection is not open or is at its in-flight
limit, drain up to ``max_request_size`` per leader, stamp idempotent sequences, write one
Produce request per leader, expire what outlived ``delivery_timeout_ms``, and return how long
nothing can happen. :meth:`Sender.run` sleeps that long or until woken (a new or full batch, a
response, a connection change, a flush or close).

Responses are handled synchronously as they arrive (on the connection's read task): each
partition's batch completes, is retried after a backoff, or fails with a typed error.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Sequence

from aiokprod.backoff import backoff_ms
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    DeliveryTimeoutError,
    DuplicateSequenceNumberError,
    KafkaConnectionError,
    KafkaError,
    error_for_code,
)
from aiokprod.internals.accumulator import FOREVER_MS, RecordAccumulator
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.idempotence import IdempotenceState, Verdict
from aiokprod.internals.interceptors import on_acknowledgement
from aiokprod.internals.metadata import BrokerNode, MetadataState
from aiokprod.internals.metadata_fetcher import MetadataFetcher
from aiokprod.internals.offload import CompressionOffload
from aiokprod.internals.pass_timer import PassTimer
from aiokprod.internals.producer_id import ProducerIdManager
from aiokprod.internals.split import should_split, split_refused
from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.transactions import PRODUCE_MAX_VERSION_TV1, TransactionManager
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool, Spawn
from aiokprod.protocol.api import PRODUCE
from aiokprod.protocol.compression import offload_threshold_bytes
from aiokprod.protocol.messages.produce import (
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
)
from aiokprod.protocol.schema import Struct
from aiokprod.types import ProducerInterceptor, TopicPartition

log = get_logger("aiokprod.sender")

#: How often in-flight batches are checked against the delivery timeout.
IN_FLIGHT_EXPIRY_SCAN_MS = 50


class Sender:
    """Owns the send loop and everything it drives.

    Args:
        config: the producer's options.
        accumulator: where batches queue.
        metadata: the cluster view and refresh schedule.
        fetcher: runs metadata refreshes.
        pool: broker connections.
        idempotence: sequence state, or None when idempotence is off.
        spawn: starts background coroutines in the producer's task group.
        stats: counters behind ``Producer.metrics()``.
        clock: the producer's clock.
        rng: randomness for retry backoff jitter.
        txn: transaction state of a transactional producer (docs/transactions.md).
    """

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: MetadataState,
        fetcher: MetadataFetcher,
        pool: ConnectionPool,
        idempotence: IdempotenceState | None,
        spawn: Spawn,
        stats: ProducerStats,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        txn: TransactionManager | None = None,
    ) -> None:
        self._config = config
        self._txn = txn
        self._clock = clock
        self._rng = rng or random.Random()
        self._nodes_version = -1
        self._acc = accumulator
        self._metadata = metadata
        self._fetcher = fetcher
        self._pool = pool
        self._idem = idempotence
        self._spawn = spawn
        self._stats = stats
        self._interceptors: Sequence[ProducerInterceptor] = config.interceptors
        #: When the loop runs its next pass (wakeups, the timer).
        self.pass_timer = PassTimer(clock)
        #: Passes run so far, by the loop or by ``send_and_wait`` (for diagnostics and tests).
        self.passes = 0
        self._in_flight: dict[ProducerBatch, None] = {}
        self._next_in_flight_scan_ms = 0
        self._stopping = False
        #: Set by a forced stop: nothing is retried any more.
        self._force_error: KafkaError | None = None
        self._stopped = asyncio.Event()
        self._guarantee_order = config.max_in_flight_requests_per_connection == 1
        self._offload = CompressionOffload(
            offload_threshold_bytes(config.compression_type, config.compression_level),
            spawn,
            stats,
            on_done=self.wakeup,
            on_failure=self._abandon,
        )
        #: A fatal error (e.g. InitProducerId refused for good): every batch fails with it.
        self.fatal_error: KafkaError | None = None
        self._producer_id = (
            None
            if idempotence is None
            else ProducerIdManager(
                idempotence,
                txn,
                pool,
                config,
                clock,
                self._rng,
                spawn=spawn,
                wakeup=self.wakeup,
                on_fatal=self._set_fatal,
                stopped=self._stopped.is_set,
            )
        )

    # --- loop -------------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Make the loop run a pass soon (cheap if it is already awake)."""
        self.pass_timer.wakeup()

    async def run(self) -> None:
        """Run passes until stopped and nothing is left to send or await."""
        timer = self.pass_timer
        try:
            while True:
                timer.wake_requested = False
                now_ms = self._clock.monotonic_ms()
                delay_ms = self.run_once(now_ms)
                if self._stopping and not self._acc.has_incomplete():
                    return
                await timer.sleep(now_ms, delay_ms)
        finally:
            self._stopped.set()

    def run_once(self, now_ms: int) -> int:
        """One pass of the send loop; returns the ms until the next pass is needed."""
        self.passes += 1
        delay = FOREVER_MS
        idem = self._idem
        if idem is not None:
            idem.resolve_sequences()
            if self._producer_id is not None:
                self._producer_id.maybe_renew()
        delay = min(delay, self._fetcher.maybe_refresh(now_ms))
        acc = self._acc
        metadata = self._metadata
        cluster = metadata.snapshot
        if metadata.version != self._nodes_version:
            # Every change of the view (a refresh or a KIP-951 hint naming a broker that came
            # back, perhaps on a new port) reaches the pool, so it can connect there.
            self._nodes_version = metadata.version
            self._pool.update_nodes({n.node_id: (n.host, n.port) for n in cluster.brokers.values()})
        result = acc.ready(cluster, now_ms)
        if result.unknown_leader_topics:
            self._metadata.request_update()
            delay = min(delay, self._fetcher.maybe_refresh(now_ms))
        nodes: set[int] = set()
        pool = self._pool
        for node in result.ready_nodes:
            conn = pool.ready_connection(node, now_ms)
            if conn is None:
                wait = pool.connection_delay_ms(node, now_ms)
                if wait > 0:
                    delay = min(delay, wait)
            elif conn.can_send:
                nodes.add(node)
        if nodes:
            drained = acc.drain(
                cluster, nodes, self._config.max_request_size, now_ms, self._may_drain
            )
            for node, batches in drained.items():
                self._send_produce(node, batches, now_ms)
        expired = acc.expire(now_ms)
        if expired:
            for batch in expired:
                self._give_up(batch, self._delivery_timeout(batch, now_ms, None), now_ms)
        delay = min(delay, self._expire_in_flight(now_ms))
        next_deadline = pool.check_request_timeouts(now_ms)
        if next_deadline is not None:
            delay = min(delay, next_deadline - now_ms)
        delay = min(delay, result.next_ready_check_delay_ms, acc.next_expiry_delay_ms(now_ms))
        return max(delay, 0)

    # --- producing --------------------------------------------------------------------------

    def _send_produce(self, node: int, batches: list[ProducerBatch], now_ms: int) -> None:
        conn = self._pool.ready_connection(node, now_ms)
        idem = self._idem
        topics: dict[str, list[ProducePartitionData]] = {}
        by_tp: dict[TopicPartition, ProducerBatch] = {}
        size = 0
        for batch in batches:
            if idem is not None:
                idem.assign_sequence(batch)
            closed = batch.close()
            size += closed.size_in_bytes
            topics.setdefault(batch.tp.topic, []).append(
                ProducePartitionData(index=batch.tp.partition, records=closed.data)
            )
            by_tp[batch.tp] = batch
            batch.in_flight = True
            if self._guarantee_order:
                self._acc.muted.add(batch.tp)
        txn = self._txn
        version: int | None = None
        if txn is not None:
            txn.on_sent(by_tp)
            if not txn.tv2 and conn is not None:
                # Produce v12+ would tell the broker to add the partitions itself (KIP-890).
                version = min(conn.protocol.version_for(PRODUCE), PRODUCE_MAX_VERSION_TV1)
        request = ProduceRequest(
            transactional_id=None if txn is None else txn.transactional_id,
            acks=self._config.acks,
            timeout_ms=self._config.request_timeout_ms,
            topic_data=[ProduceTopicData(name=t, partition_data=p) for t, p in topics.items()],
        )
        self._stats.on_request(node, batches, size, now_ms)
        acks_zero = self._config.acks == 0
        handler = functools.partial(self._on_produce_response, by_tp, node, now_ms)
        try:
            if conn is None:
                raise KafkaConnectionError(f"node {node}: connection closed before sending")
            conn.send(
                request,
                None if acks_zero else handler,
                deadline_ms=now_ms + self._config.request_timeout_ms,
                expect_response=not acks_zero,
                version=version,
            )
        except KafkaError as exc:
            # Not written: retried like a connection failure (the connection is gone or
            # cannot take this request now).
            handler(None, exc if exc.retriable else KafkaConnectionError(str(exc)))
            return
        if acks_zero:
            # No answer will come: the records are done once written (offsets unknown).
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        for batch in batches:
            self._in_flight[batch] = None

    def _on_produce_response(
        self,
        by_tp: dict[TopicPartition, ProducerBatch],
        node: int,
        sent_ms: int,
        body: Struct | None,
        error: BaseException | None,
    ) -> None:
        now_ms = self._clock.monotonic_ms()
        if error is not None or not isinstance(body, ProduceResponse):
            # No answer (disconnect, request timeout, broken response): whether the batches
            # were written is unknown, so they are retried as they are.
            failure = error if error is not None else KafkaConnectionError("no Produce response")
            if not isinstance(failure, KafkaError) or not failure.retriable:
                failure = KafkaConnectionError(f"Produce request failed: {failure}")
            self._metadata.request_update()
            for batch in by_tp.values():
                self._on_batch_error(batch, failure, now_ms)
            self.wakeup()
            return
        self._stats.on_response(node, now_ms - sent_ms, body.throttle_time_ms, now_ms)
        endpoints = {
            e.node_id: BrokerNode(e.node_id, e.host, e.port, e.rack) for e in body.node_endpoints
        }
        failed = False
        for topic in body.responses:
            for part in topic.partition_responses:
                tp = TopicPartition(topic.name, part.index)
                if tp not in by_tp:
                    continue  # a partition we did not send (a broken broker): ignored
                batch = by_tp.pop(tp)
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
        if failed or self._stopping or self._acc.has_undrained():
            self.wakeup()

    def _on_batch_success(self, batch: ProducerBatch, base_offset: int, append_ms: int) -> None:
        if batch.final_state is not None:
            # It expired while its request was out, and was written after all.
            if self._idem is not None:
                self._idem.on_late_outcome(batch, appended=True)
            return
        self._complete(batch, base_offset, append_ms)

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
        forced = self._force_error is not None
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
            self._complete(batch, -1, -1)  # written before: success, offset unknown (as Java)
            return
        if verdict is Verdict.FAIL:
            self._fail(batch, exc, now_ms, record_errors)
            return
        if not self._can_retry(batch, now_ms):
            # Out of time or retries: an earlier attempt may have been written.
            self._give_up(batch, self._delivery_timeout(batch, now_ms, exc), now_ms)
            return
        if getattr(exc, "invalid_metadata", False):
            self._metadata.request_update()
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
        if self._stopping and self._force_error is not None:
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

    def _expire_in_flight(self, now_ms: int) -> int:
        """Fail in-flight batches past the delivery timeout; ms until the next scan.

        Their requests are still out: idempotence keeps them in view until answered.
        """
        if not self._in_flight:
            return FOREVER_MS
        if now_ms < self._next_in_flight_scan_ms:
            return self._next_in_flight_scan_ms - now_ms
        limit = self._config.delivery_timeout_ms
        oldest = FOREVER_MS
        for batch in list(self._in_flight):
            if now_ms - batch.created_ms >= limit:
                del self._in_flight[batch]
                self._give_up(
                    batch, self._delivery_timeout(batch, now_ms, None), now_ms, outstanding=True
                )
            else:
                oldest = min(oldest, batch.created_ms)
        self._next_in_flight_scan_ms = now_ms + IN_FLIGHT_EXPIRY_SCAN_MS
        if oldest == FOREVER_MS:
            return FOREVER_MS
        return max(oldest + limit - now_ms, IN_FLIGHT_EXPIRY_SCAN_MS)

    # --- outcomes ---------------------------------------------------------------------------

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        self._in_flight.pop(batch, None)
        self._acc.muted.discard(batch.tp)
        if not batch.complete(base_offset, log_append_time_ms):
            return
        self._acc.deallocate(batch)
        if self._idem is not None:
            self._idem.on_success(batch)
        self._stats.on_success(batch, self._clock.monotonic_ms())
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

    def _abandon(self, batch: ProducerBatch, exc: BaseException) -> None:
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
        on_acknowledgement(self._interceptors, batch)
        return True

    def fail_all(self, error: KafkaError) -> None:
        """Fail every incomplete batch, queued or in flight (force close, crash, fatal)."""
        for batch in self._acc.abort_undrained(error):
            if self._idem is not None:
                self._idem.on_abandoned(batch)
        for batch in self._acc.incomplete_batches():
            self._abandon(batch, error)

    # --- idempotence ------------------------------------------------------------------------

    def _may_drain(self, batch: ProducerBatch) -> bool:
        """Whether the accumulator may take ``batch`` now (see ``RecordAccumulator.drain``).

        Not while it is compressed off the loop (a large batch starts that here), nor while
        idempotence holds it back (no producer id yet, an earlier sequence still out).
        """
        if self._offload.holds(batch):
            return False
        txn = self._txn
        if txn is not None and not txn.is_added(batch.tp):
            return False  # protocol 1: AddPartitionsToTxn first
        idem = self._idem
        return idem is None or idem.can_drain(batch)

    def _set_fatal(self, error: KafkaError) -> None:
        self.fatal_error = error
        log.error("producer hit a fatal error", error=str(error))
        self.fail_all(error)

    def abort_queued(self, error: KafkaError) -> bool:
        """Fail every batch not yet sent (a transaction is aborted); True if one had a sequence.

        A batch with a sequence was sent before and is queued for a retry: dropping it leaves
        a gap in its partition's sequences, which a new epoch repairs.
        """
        stamped = False
        for batch in self._acc.abort_undrained(error):
            stamped = stamped or batch.has_sequence
            if self._idem is not None:
                self._idem.on_abandoned(batch)
        self.wakeup()
        return stamped

    # --- lifecycle --------------------------------------------------------------------------

    def stop(self, force_error: KafkaError | None = None) -> None:
        """Finish: deliver what is queued and in flight, then end :meth:`run`.

        With ``force_error`` every incomplete batch fails with it at once instead.
        """
        self._stopping = True
        self._acc.begin_close()
        if force_error is not None:
            self._force_error = force_error
            self.fail_all(force_error)
        self.wakeup()

    async def wait_stopped(self) -> None:
        """Wait until :meth:`run` has returned."""
        await self._stopped.wait()

    @property
    def in_flight_batches(self) -> int:
        """Batches written and not yet answered."""
        return len(self._in_flight)
