"""Sender: the one background loop that turns queued batches into Produce requests.

Each pass (:meth:`Sender.run_once`, synchronous, given the time) does what the Java client's
``Sender.sendProducerData`` does: start a metadata refresh if one is due, ask the accumulator
which leaders are ready, skip the ones whose connection is not open or is at its in-flight
limit, drain up to ``max_request_size`` per leader, stamp idempotent sequences, write one
Produce request per leader, expire what outlived ``delivery_timeout_ms``, and return how long
nothing can happen. :meth:`Sender.run` sleeps that long or until woken (a new or full batch, a
response, a connection change, a flush or close).

Responses are handled synchronously as they arrive (on the connection's read task), by the
sender's :class:`~aiokprod.internals.produce_response.ProduceResponseHandler`: each
partition's batch completes, is retried after a backoff, or fails with a typed error.
"""

from __future__ import annotations

import asyncio
import functools
import random
from typing import Final

from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import ClusterChangedError, KafkaConnectionError, KafkaError
from aiokprod.internals.accumulator import FOREVER_MS, RecordAccumulator
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.metadata import ClusterSnapshot, MetadataState
from aiokprod.internals.metadata_fetcher import MetadataFetcher
from aiokprod.internals.offload import CompressionOffload
from aiokprod.internals.pass_timer import PassTimer
from aiokprod.internals.produce_response import ProduceResponseHandler
from aiokprod.internals.producer_id import ProducerIdManager
from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.transactions import PRODUCE_MAX_VERSION_TV1, TransactionManager
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool, Spawn
from aiokprod.protocol.api import PRODUCE
from aiokprod.protocol.compression import offload_threshold_bytes
from aiokprod.protocol.messages.produce import ProducePartitionData
from aiokprod.protocol.produce_fast import partition_data, produce_request
from aiokprod.types import TopicPartition

log = get_logger("aiokprod.sender")

#: How soon a pass looks again at a connection backed up in its socket buffer with no
#: request in flight (acks=0: no response will wake the sender).
BACKED_UP_RECHECK_MS: Final = 5
#: How often in-flight batches are checked against the delivery timeout.
IN_FLIGHT_EXPIRY_SCAN_MS: Final = 50


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
        #: When the loop runs its next pass (wakeups, the timer).
        self.pass_timer = PassTimer(clock)
        #: Passes run so far, by the loop or by ``send_and_wait`` (for diagnostics and tests).
        self.passes = 0
        self._in_flight: dict[ProducerBatch, None] = {}
        self._next_in_flight_scan_ms = 0
        #: What becomes of each written batch; it also holds the stopping state.
        self._responses = ProduceResponseHandler(
            config,
            accumulator,
            metadata,
            idempotence,
            stats,
            clock,
            self._rng,
            txn,
            self._in_flight,
            self.wakeup,
        )
        self._stopped = asyncio.Event()
        self._guarantee_order = config.max_in_flight_requests_per_connection == 1
        offload_threshold = offload_threshold_bytes(
            config.compression_type, config.compression_level
        )
        #: Whether a batch can be compressed off the loop at all (None: no compression, or
        #: none slow enough): without it the interpreted ``holds`` is not asked per batch.
        self._may_offload = offload_threshold is not None
        self._offload = CompressionOffload(
            offload_threshold,
            spawn,
            stats,
            on_done=self.wakeup,
            on_failure=self._responses.abandon_batch,
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
                if self._responses.stopping and not self._acc.has_incomplete():
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
            self._metadata.request_update_for(result.unknown_leader_topics)
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
            elif conn.in_flight == 0:
                # Backed up in the socket buffer with nothing in flight (acks=0): no answer
                # will wake the sender when the buffer drains, so it looks again soon.
                delay = min(delay, BACKED_UP_RECHECK_MS)
        if nodes and not self._drain_and_send(cluster, nodes, now_ms):
            delay = 0
        expired = acc.expire(now_ms)
        if expired:
            for batch in expired:
                self._responses.expire_batch(batch, now_ms)
        delay = min(delay, self._expire_in_flight(now_ms))
        next_deadline = pool.check_request_timeouts(now_ms)
        if next_deadline is not None:
            delay = min(delay, next_deadline - now_ms)
        delay = min(delay, result.next_ready_check_delay_ms, acc.next_expiry_delay_ms(now_ms))
        return max(delay, 0)

    # --- producing --------------------------------------------------------------------------

    def _drain_and_send(self, cluster: ClusterSnapshot, nodes: set[int], now_ms: int) -> bool:
        """Drain the ready ``nodes`` and send; False if the next pass must follow at once."""
        idem = self._idem
        acc = self._acc
        bump_asked = idem is not None and idem.epoch_bump_required
        drained = acc.drain(cluster, nodes, self._config.max_request_size, now_ms, self._may_drain)
        for node, batches in drained.items():
            self._send_produce(node, batches, now_ms)
        if drained and self._config.acks == 0:
            # No answer comes to wake the sender for a partition's next batch (a drain takes
            # one per partition): the next pass goes on at once.
            return False
        if not acc.drained_all:
            return False  # a pass takes a bounded number of batches: the next goes on
        # A batch held back for an epoch bump (a partition of a released topic, issue 30):
        # the next pass makes the bump, not the next timer.
        return not (idem is not None and idem.epoch_bump_required and not bump_asked)

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
                partition_data(batch.tp.partition, closed.data)
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
        request = produce_request(
            None if txn is None else txn.transactional_id,
            self._config.acks,
            self._config.request_timeout_ms,
            topics,
        )
        self._stats.on_request(node, batches, size, now_ms)
        acks_zero = self._config.acks == 0
        handler = functools.partial(self._responses.handle_produce_response, by_tp, node, now_ms)
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
                self._responses.complete_batch(batch, -1, -1)
            return
        for batch in batches:
            self._in_flight[batch] = None

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
                self._responses.expire_batch(batch, now_ms, outstanding=True)
            else:
                oldest = min(oldest, batch.created_ms)
        self._next_in_flight_scan_ms = now_ms + IN_FLIGHT_EXPIRY_SCAN_MS
        if oldest == FOREVER_MS:
            return FOREVER_MS
        return max(oldest + limit - now_ms, IN_FLIGHT_EXPIRY_SCAN_MS)

    def fail_all(self, error: KafkaError) -> None:
        """Fail every incomplete batch, queued or in flight (force close, crash, fatal)."""
        for batch in self._acc.abort_undrained(error):
            if self._idem is not None:
                self._idem.on_abandoned(batch)
        for batch in self._acc.incomplete_batches():
            self._responses.abandon_batch(batch, error)

    # --- idempotence ------------------------------------------------------------------------

    def _may_drain(self, batch: ProducerBatch) -> bool:
        """Whether the accumulator may take ``batch`` now (see ``RecordAccumulator.drain``).

        Not while it is compressed off the loop (a large batch starts that here), nor while
        idempotence holds it back (no producer id yet, an earlier sequence still out).
        """
        if self._may_offload and self._offload.holds(batch):
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

    def cluster_changed(self, old: str, new: str) -> None:
        """The cluster behind the bootstrap address was replaced (issue 29).

        The old cluster's connections close first, so every batch in flight there comes
        back to its queue (whether the old cluster wrote it is unknown; the new one has
        not got it). An idempotent producer then needs a producer id from the new cluster
        before anything is written there, and numbers every pending batch afresh under it
        (:meth:`IdempotenceState.reset_for_new_cluster`): the new cluster never issued the
        old id, and may have given it to another producer. A transaction open on the old
        cluster cannot complete on the new one: its records fail with
        :class:`ClusterChangedError` and the transaction must be aborted
        (``abort_transaction()`` starts afresh on the new cluster).
        """
        self._pool.set_cluster(new)
        idem = self._idem
        if idem is not None:
            idem.reset_for_new_cluster()
        if self._producer_id is not None:
            self._producer_id.cluster_changed(new)
        txn = self._txn
        if txn is not None:
            error = ClusterChangedError(old, new)
            txn.on_cluster_changed(error)
            self.abort_queued(error)
        self.wakeup()

    # --- lifecycle --------------------------------------------------------------------------

    def stop(self, force_error: KafkaError | None = None) -> None:
        """Finish: deliver what is queued and in flight, then end :meth:`run`.

        With ``force_error`` every incomplete batch fails with it at once instead.
        """
        self._responses.stopping = True
        self._acc.begin_close()
        if force_error is not None:
            self._responses.force_error = force_error
            self.fail_all(force_error)
        self.wakeup()

    async def wait_stopped(self) -> None:
        """Wait until :meth:`run` has returned."""
        await self._stopped.wait()

    @property
    def in_flight_batches(self) -> int:
        """Batches written and not yet answered."""
        return len(self._in_flight)
