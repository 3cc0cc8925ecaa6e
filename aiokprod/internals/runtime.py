"""ProducerRuntime: the background machinery of one producer, built and run in one task group.

:class:`~aiokprod.producer.Producer` is the public facade; this is what it stands on. The
runtime builds, from the validated config, the pieces the Java ``KafkaProducer`` builds in its
constructor — the accumulator, the metadata state, the appender, the idempotence and
transaction state — and, once an event loop runs, the ones that need it: the connection pool,
the metadata fetcher, the sender and the transaction coordinator. :meth:`run` is the body of
the producer's root task: every background task (the sender loop, one read task per broker
connection, the metadata fetches) is started in the task group it opens, so nothing outlives
it, and whatever ends it is reported to the caller, who decides whether it was a crash.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from aiokprod.clock import Clock
from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    ClusterChangedError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
)
from aiokprod.internals.accumulator import RecordAccumulator
from aiokprod.internals.adaptive import AdaptivePartitioning
from aiokprod.internals.appender import RecordAppender
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.metadata import MetadataState
from aiokprod.internals.metadata_fetcher import MetadataFetcher
from aiokprod.internals.partitioner import PartitionChooser
from aiokprod.internals.sender import Sender
from aiokprod.internals.stats import ProducerStats
from aiokprod.internals.telemetry import TelemetryState
from aiokprod.internals.telemetry_metrics import Groups, TelemetryMetrics, TopicRows
from aiokprod.internals.telemetry_task import TelemetrySender
from aiokprod.internals.transactions import TransactionManager
from aiokprod.internals.txn_requests import TransactionCoordinator
from aiokprod.net.pool import ConnectionPool
from aiokprod.net.sasl import sasl_authenticator
from aiokprod.net.security import build_ssl_context
from aiokprod.net.transport import Transport
from aiokprod.protocol.compression import codec_for_name


class ProducerRuntime:
    """The producer's state and background tasks (see the module docstring).

    Args:
        config: the validated options.
        software_version: sent to brokers in ApiVersions (KIP-511).
        check_running: raises if the producer stopped while a send awaited.
        transport, clock, rng: the seams (docs/simulation.md).
        force_transaction_v1: a private test switch (transaction protocol 1 even where the
            cluster offers 2).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        software_version: str,
        check_running: Callable[[], None],
        transport: Transport | None,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        cfg = self.config = config
        self.software_version = software_version
        #: When close() must be done (its timeout); None: no close yet, or no timeout.
        self._close_by_ms: int | None = None
        self.transport = transport
        self.clock = clock
        self.rng = rng
        self.force_transaction_v1 = False
        self.stats = ProducerStats()
        self.budget = ByteBudget(cfg.buffer_memory)
        # Batches fill by uncompressed bytes (like the Java client's conservative default);
        # the codec compresses each batch once, when it is closed (docs/compression.md).
        codec = codec_for_name(cfg.compression_type)
        # Adaptive partitioning only steers the sticky choice of the built-in partitioners.
        adaptive = (
            AdaptivePartitioning(cfg.partitioner_availability_timeout_ms)
            if cfg.partitioner_adaptive_partitioning and cfg.partitioner in ("builtin", "murmur3")
            else None
        )
        self.accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            budget=self.budget,
            compression=codec.id,
            compressor=codec.compressor(cfg.compression_level) if codec.id else None,
            keep_handles=bool(cfg.interceptors),
            transactional=cfg.transactional_id is not None,
            adaptive=adaptive,
        )
        self.metadata = MetadataState(
            cfg.metadata_max_age_ms,
            cfg.metadata_max_idle_ms,
            cfg.retry_backoff_ms,
            cfg.retry_backoff_max_ms,
        )
        # A topic with a new batch is in use; one with batches queued or in flight too.
        self.accumulator.on_new_batch = self.metadata.touch
        self.metadata.busy = self.accumulator.has_incomplete_for
        self.appender = RecordAppender(
            self.accumulator,
            self.budget,
            PartitionChooser(
                cfg.partitioner,
                cfg.batch_size,
                cfg.partitioner_ignore_keys,
                rng,
                adaptive,
                cfg.partitioner_working_set_size,
                cfg.partitioner_working_set_ms,
            ),
            record_limit=min(cfg.max_request_size, cfg.buffer_memory),
            max_block_ms=cfg.max_block_ms,
            max_request_size=cfg.max_request_size,
            clock=clock,
            check_running=check_running,
        )
        self.idempotence = IdempotenceState() if cfg.enable_idempotence else None
        self.txn = (
            None
            if cfg.transactional_id is None
            else TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms)
        )
        #: Client telemetry (KIP-714), with ``enable_metrics_push``.
        self.telemetry_state = TelemetryState(rng) if cfg.enable_metrics_push else None
        self.telemetry: TelemetrySender | None = None
        self.pool: ConnectionPool | None = None
        self.fetcher: MetadataFetcher | None = None
        self.sender: Sender | None = None
        self.coordinator: TransactionCoordinator | None = None

    async def run(self, ready: asyncio.Future[None]) -> None:
        """Build the I/O pieces, set ``ready``, and run until the sender stops.

        Raises whatever ended the task group (a bug in a background task, or the
        cancellation of the root task); the caller tells a crash from a close.
        """
        cfg = self.config
        # Built here, not in __init__: loading certificates is I/O. A bad file or key
        # password fails start() with a ConfigError.
        ssl_context = build_ssl_context(cfg)
        authenticate = sasl_authenticator(cfg)
        async with anyio.create_task_group() as tg:

            def spawn(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
                tg.start_soon(fn)

            pool = self.pool = ConnectionPool.from_config(
                cfg,
                spawn=spawn,
                software_version=self.software_version,
                ssl_context=ssl_context,
                authenticate=authenticate,
                transport=self.transport,
                clock=self.clock,
                rng=self.rng,
                on_change=self._on_connections_changed,
                on_disconnect=self._on_disconnect,
                on_connected=self._on_connected,
            )
            self.fetcher = MetadataFetcher(
                self.metadata,
                pool,
                spawn,
                request_timeout_ms=cfg.request_timeout_ms,
                allow_auto_create_topics=cfg.allow_auto_create_topics,
                on_update=self.wakeup,
                on_cluster_change=self._on_cluster_change,
                on_release=self.release_topics,
                clock=self.clock,
            )
            sender = self.sender = Sender(
                cfg,
                self.accumulator,
                self.metadata,
                self.fetcher,
                pool,
                self.idempotence,
                spawn,
                self.stats,
                clock=self.clock,
                rng=self.rng,
                txn=self.txn,
            )
            if self.txn is not None and self.idempotence is not None:
                self.coordinator = TransactionCoordinator(
                    self.txn,
                    self.idempotence,
                    pool,
                    cfg,
                    spawn,
                    sender.wakeup,
                    clock=self.clock,
                    rng=self.rng,
                    force_tv1=self.force_transaction_v1,
                )
            self.appender.wakeup = sender.pass_timer.wakeup
            self.appender.schedule = sender.pass_timer.reschedule
            tg.start_soon(sender.run)
            telemetry = self._start_telemetry(pool)
            if telemetry is not None:
                tg.start_soon(telemetry.run)
            ready.set_result(None)
            await sender.wait_stopped()
            if telemetry is not None:
                # One terminating push (KIP-714), within what is left of close()'s timeout.
                await telemetry.terminate(self._close_time_left_ms() / 1000)
            # acks=0 records count as sent once written: the brokers read them before the
            # connections are aborted (ConnectionPool.wait_written), within close()'s timeout.
            left_ms = self._close_time_left_ms()
            if left_ms > 0:
                with anyio.move_on_after(left_ms / 1000):
                    await pool.wait_written(left_ms / 1000)
            pool.close_all()
            tg.cancel_scope.cancel()

    def _close_time_left_ms(self) -> int:
        """What is left of close()'s timeout (``request_timeout_ms`` without one)."""
        by_ms = self._close_by_ms
        if by_ms is None:
            return self.config.request_timeout_ms
        return by_ms - self.clock.monotonic_ms()

    def _start_telemetry(self, pool: ConnectionPool) -> TelemetrySender | None:
        """The KIP-714 task, with ``enable_metrics_push`` (not started yet)."""
        state = self.telemetry_state
        if state is None:
            return None
        cfg = self.config
        resource = [
            ("client_id", cfg.client_id),
            ("client_software_name", "aiokprod"),
            ("client_software_version", self.software_version),
        ]
        if cfg.transactional_id is not None:
            resource.append(("transactional_id", cfg.transactional_id))
        builder = TelemetryMetrics(resource, self.software_version, time.time_ns())
        self.telemetry = TelemetrySender(
            state,
            builder,
            pool,
            self.stats,
            self.metric_groups,
            clock=self.clock,
            rng=self.rng,
            request_timeout_ms=cfg.request_timeout_ms,
        )
        return self.telemetry

    def metric_groups(self) -> Groups:
        """producer-metrics, producer-topic-metrics and producer-node-metrics, now.

        Topics are read one at a time, as a push is built in steps (:class:`TopicRows`).
        """
        stats = self.stats
        now_ms = self.clock.monotonic_ms()
        topics = TopicRows(stats.topic_names(), lambda topic: stats.topic_row(topic, now_ms))
        return self.producer_metrics(), topics, stats.node_metrics(now_ms)

    async def flush(self, timeout: float | None) -> None:
        """Make every queued batch ready now and wait until each ended (``Producer.flush``).

        Raises:
            KafkaTimeoutError: not done within ``timeout`` seconds.
        """
        acc = self.accumulator
        batches = acc.incomplete_batches()
        acc.begin_flush()
        self.wakeup()
        try:
            async with asyncio.timeout(timeout):
                for batch in batches:
                    await batch.result.wait()
                await asyncio.sleep(0)
        except TimeoutError:
            left = sum(b.record_count for b in batches if not b.result.done)
            raise KafkaTimeoutError(
                f"flush did not finish within {timeout} s ({left} record(s) outstanding)"
            ) from None
        finally:
            acc.end_flush()

    def wakeup(self) -> None:
        """Wake the sender (a connection changed or metadata arrived)."""
        if self.sender is not None:
            self.sender.wakeup()

    def release_topics(self, topics: list[str]) -> None:
        """Drop what the producer holds for topics that idled out of its view (issue 30).

        Their metadata is gone already (``MetadataState.attempt_started``); nothing of them
        is queued or in flight. The per-topic metrics go, the partitioner's and the
        appender's per-topic state, and the idempotence state of their partitions (not for a
        transactional producer: its epoch is the coordinator's to bump).
        """
        self.stats.release_topics(topics)
        self.appender.release_topics(topics)
        self.accumulator.release_topics(topics)
        if self.idempotence is not None and self.txn is None:
            self.idempotence.release_topics(topics)

    def _on_connections_changed(self) -> None:
        self.wakeup()
        if self.telemetry is not None:
            self.telemetry.wake()

    def _on_connected(self, node_id: int) -> None:
        self.stats.on_connection(self.clock.monotonic_ms())

    def _on_disconnect(self, node_id: int) -> None:
        self.metadata.request_update()

    def _on_cluster_change(self, old: str, new: str) -> None:
        """The cluster behind the bootstrap address was replaced (issue 29; see the sender)."""
        if self.sender is not None:
            self.sender.cluster_changed(old, new)
        if self.coordinator is not None:
            self.coordinator.cluster_changed(ClusterChangedError(old, new))

    def fail_waiting(self, error: KafkaError) -> None:
        """Fail the sends that wait for memory or metadata (nothing was queued for them)."""
        self.budget.fail_waiters(error)
        if self.fetcher is not None:
            self.fetcher.fail_waiters(error)

    def crash(self, error: KafkaError) -> None:
        """Fail every waiting send and every accepted record; drop every connection."""
        self.fail_waiting(error)
        if self.sender is not None:
            self.sender.fail_all(error)
        if self.pool is not None:
            self.pool.close_all(error)

    async def drain(self, timeout: float | None) -> None:
        """Deliver what was accepted within ``timeout`` seconds, fail the rest, stop the sender.

        None waits as long as it takes (each record is bounded by ``delivery_timeout_ms``); 0
        gives up at once. Records left fail with :class:`ProducerClosedError`. Call it shielded.
        """
        sender = self.sender
        if sender is None:
            return
        if timeout is not None:
            self._close_by_ms = self.clock.monotonic_ms() + int(timeout * 1000)
        sender.stop()
        if timeout is None or timeout > 0:
            with anyio.move_on_after(timeout):
                await sender.wait_stopped()
        pending = self.accumulator.incomplete_batches()
        if pending:
            records = sum(b.record_count for b in pending)
            sender.stop(
                ProducerClosedError(
                    f"the producer was closed before {records} record(s) were "
                    f"acknowledged (close timeout {timeout} s)"
                )
            )
        await sender.wait_stopped()

    @property
    def fatal_error(self) -> KafkaError | None:
        """The sender's fatal error, if it hit one (a fenced producer, ...)."""
        return None if self.sender is None else self.sender.fatal_error

    def producer_metrics(self) -> dict[str, float]:
        """The ``producer-metrics`` group (docs/metrics.md), with the names of earlier versions."""
        stats, budget, acc = self.stats, self.budget, self.accumulator
        sender, pool = self.sender, self.pool
        in_flight_requests = pool.in_flight_requests() if pool else 0
        in_flight_batches = sender.in_flight_batches if sender else 0
        queued = acc.queued_batches()
        out = stats.producer_metrics(self.clock.monotonic_ms())
        out.update(
            {
                "buffer-total-bytes": budget.total,
                "buffer-available-bytes": budget.available,
                "waiting-threads": budget.waiter_count,
                "requests-in-flight": in_flight_requests,
                "batches-queued": queued,
                "batches-in-flight": in_flight_batches,
                "batches-compressed-in-thread": stats.batches_compressed_in_thread,
                "metadata-version": self.metadata.version,
                # names of earlier versions
                "records_sent": stats.total("record-send"),
                "records_failed": stats.total("record-error"),
                "records_retried": stats.total("record-retry"),
                "batches_sent": stats.total("batch"),
                "requests_sent": stats.total("request"),
                "bytes_sent": stats.total("outgoing-byte"),
                "batches_compressed_in_thread": stats.batches_compressed_in_thread,
                "buffer_total_bytes": budget.total,
                "buffer_available_bytes": budget.available,
                "buffer_waiters": budget.waiter_count,
                "batches_queued": queued,
                "batches_in_flight": in_flight_batches,
                "requests_in_flight": in_flight_requests,
                "metadata_version": self.metadata.version,
            }
        )
        return out
