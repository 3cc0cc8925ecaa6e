"""Producer: the public, asyncio-native Kafka producer.

::

    async with Producer("127.0.0.1:9092") as producer:
        delivery = await producer.send("events", b"payload", key=b"user-1")
        metadata = await delivery        # RecordMetadata(topic, partition, offset, ...)

``send()`` returns once the record is in the producer's buffer; the returned
:class:`DeliveryFuture` resolves when the broker acknowledges it. The producer owns one root
task; inside it a task group runs the sender loop and one read task per broker connection, so
nothing outlives :meth:`Producer.close` and a crash of any of them fails every pending record
instead of leaving it hanging.
"""

from __future__ import annotations

import _thread
import asyncio
import random
from collections.abc import Iterable, Sequence
from time import time as _time
from typing import Any, Unpack

from aiokprod import __version__
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig, ProducerOptions
from aiokprod.errors import (
    IllegalStateError,
    InvalidArgumentError,
)
from aiokprod.internals.accumulator import batch_of_one_size
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.internals.bulk import BulkDelivery, bulk_columns, pairs
from aiokprod.internals.interceptors import on_send
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.partitioner import murmur2_hasher, murmur3_hasher
from aiokprod.internals.runtime import ProducerRuntime
from aiokprod.internals.serialization import (
    is_plain_serializer,
    serialize_headers,
    serialize_key,
    serialize_special,
    serialize_value,
)
from aiokprod.lifecycle import ProducerLifecycle
from aiokprod.logs import get_logger
from aiokprod.net.transport import Transport
from aiokprod.types import Header, ProducerRecord, RecordMetadata, TopicPartition

log = get_logger("aiokprod.producer")

#: Record timestamps are int64 milliseconds on the wire.
MAX_TIMESTAMP_MS = 2**63 - 1


def _bad_timestamp(timestamp_ms: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"timestamp_ms must be an int from 0 to {MAX_TIMESTAMP_MS}, got {timestamp_ms!r}"
    )


class Producer(ProducerLifecycle):
    """An asyncio Kafka producer with the Java client's guarantees and defaults.

    Args:
        bootstrap_servers: ``"host:port"``, a comma-separated list, or a list of them.
        config: a prepared :class:`ProducerConfig` instead of keyword options.
        **options: producer options (``linger_ms=5``, ``acks="all"``, ...); see
            docs/configuration.md. Unknown names, wrong types and impossible combinations
            raise :class:`~aiokprod.errors.ConfigError` here.

    Use it as ``async with Producer(...) as p:`` or call :meth:`start` and :meth:`close`.
    A producer belongs to the event loop it was started on.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        config: ProducerConfig | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        **options: Unpack[ProducerOptions],
    ) -> None:
        if config is not None:
            if bootstrap_servers is not None or options:
                raise IllegalStateError("pass either config= or options, not both")
            self._config = config
        else:
            self._config = ProducerConfig.from_options(bootstrap_servers, **options)
        cfg = self._config
        # The seams (docs/simulation.md): how connections are opened, what time it is, and
        # where randomness comes from. Production: TCP, time.monotonic, a fresh Random.
        self._clock: Clock = clock or SYSTEM_CLOCK
        rt = ProducerRuntime(
            cfg,
            software_version=__version__,
            check_running=self._check_running,
            transport=transport,
            clock=self._clock,
            rng=rng or random.Random(),
        )
        super().__init__(rt)
        # The pieces send() touches per record, as attributes of their own.
        self._acc = rt.accumulator
        self._metadata = rt.metadata
        self._appender = rt.appender
        self._idempotence = rt.idempotence
        self._txn = rt.txn
        # Keyed records with a built-in partitioner skip the chooser (the per-record path).
        self._hash_keys = (
            isinstance(cfg.partitioner, str)
            and cfg.partitioner != "round_robin"
            and not cfg.partitioner_ignore_keys
        )
        self._hasher = murmur3_hasher() if cfg.partitioner == "murmur3" else murmur2_hasher()
        #: topic -> its TopicPartition objects (the appender's, cached here for send()).
        self._tps: dict[str, tuple[TopicPartition, ...]] = {}
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        # Coroutine serializers and ones taking a context are awaited / given one; plain
        # functions (or none) stay on the fast path and allow send_many's column paths.
        self._key_plain = is_plain_serializer(cfg.key_serializer)
        self._value_plain = is_plain_serializer(cfg.value_serializer)
        self._interceptors = cfg.interceptors

    @property
    def config(self) -> ProducerConfig:
        """The validated options this producer runs with."""
        return self._config

    # --- sending ----------------------------------------------------------------------------

    async def send(  # noqa: C901 - the per-record hot path, kept in one frame on purpose
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> DeliveryFuture:
        """Queue a record; returns a future that resolves when the broker acknowledges it.

        Args:
            topic: the topic.
            value: the value (bytes/str by default; anything ``value_serializer`` takes).
            key: the key; keyed records go to the partition the Java client would pick.
            partition: a partition to use instead of the partitioner's choice.
            timestamp_ms: the record's create time (default: now).
            headers: ``(str, bytes | None)`` pairs.

        Returns:
            A :class:`DeliveryFuture`; await it for :class:`RecordMetadata`.

        Raises:
            ProducerClosedError: the producer is not started, closing or closed.
            MetadataTimeoutError: the topic (or partition) is not known within
                ``max_block_ms``.
            BufferExhaustedError: no room in ``buffer_memory`` within ``max_block_ms``.
            RecordTooLargeError: the record exceeds ``max_request_size`` or
                ``buffer_memory``.
            SerializationError: key, value or headers cannot be serialized.
            InvalidArgumentError: a bad partition or timestamp.

        Cancellation:
            If cancelled before it returns, the record was not queued. Once it has returned
            the record will be delivered or fail on its own; cancelling whoever awaits the
            returned future does not stop it.
        """
        if not self._open:
            raise self._not_running()
        if _thread.get_ident() != self._thread_id:
            raise self._wrong_loop()
        txn = self._txn
        if txn is not None:
            txn.check_send()
        if self._interceptors:
            record = on_send(
                self._interceptors,
                ProducerRecord(topic, value, key, partition, timestamp_ms, headers),
            )
            topic, value, key = record.topic, record.value, record.key
            partition, timestamp_ms, headers = record.partition, record.timestamp_ms, record.headers
        if partition is not None and (
            type(partition) is not int or partition < 0  # bool is not int here either
        ):
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        info = self._metadata.snapshot.topics.get(topic)
        started = -1
        if info is None or (partition is not None and partition >= info.num_partitions):
            started = self._clock.monotonic_ms()
            info = await self._wait_for_topic(topic, partition)
        # Inline guards for the common types (this runs once per record); anything else
        # goes through the shared serializers.
        ks = self._key_serializer
        if ks is not None or (key is not None and type(key) is not bytes):
            if self._key_plain or ks is None:
                key = serialize_key(ks, key)
            else:
                key = await serialize_special(ks, key, "key", topic, headers)
        vs = self._value_serializer
        if vs is not None or (value is not None and type(value) is not bytes):
            if self._value_plain or vs is None:
                value = serialize_value(vs, value)
            else:
                value = await serialize_special(vs, value, "value", topic, headers)
        header_bytes = serialize_headers(headers) if headers else None
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)
        appender = self._appender
        headers_size = len(header_bytes) if header_bytes else 0
        if key_size + value_size + headers_size > appender.fast_size_limit:
            size = batch_of_one_size(key_size, value_size, headers_size)
            if size > appender.record_limit:
                raise appender.too_large(size)
        if timestamp_ms is None:
            timestamp_ms = int(_time() * 1000)
        elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            raise _bad_timestamp(timestamp_ms)
        sticky = None
        num_partitions = len(info.partitions)
        if partition is None:
            if key is not None and self._hash_keys:
                partition = self._hasher.partition(key, num_partitions)
            else:
                partition, sticky = appender.partitions.choose(
                    topic, key, num_partitions, info.available
                )
        tps = self._tps.get(topic)
        if tps is None or len(tps) != num_partitions:
            tps = self._tps[topic] = appender.partitions_of(topic, num_partitions)
        tp = tps[partition]
        if txn is not None:
            self._enlist(tp)
        # RecordAppender.append, inlined (this runs per record).
        appended = self._acc.try_append(tp, timestamp_ms, key, value, header_bytes, sticky, info)
        if appended is None:
            batch, index = await appender.append_new_batch(
                tp, timestamp_ms, key, value, header_bytes, sticky, info, started
            )
        else:
            batch, index, _ = appended
            if batch.is_full:
                appender.wakeup()
        handle = DeliveryFuture(batch.result, index, tp, timestamp_ms, key_size, value_size)
        if batch.handles is not None:
            batch.handles.append(handle)
        return handle

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> BulkDelivery:
        """Queue many records for one topic in one call: the fast path for bulk loads.

        Each record goes exactly where ``send()`` would put it (keys hashed like the Java
        client, unkeyed records sticky), with the same checks and the same back-pressure,
        but without a future per record: the returned :class:`BulkDelivery` tracks the
        batches the records went into.

        Args:
            topic: the topic of every record.
            values: the values, in order.
            keys: the keys, one per value (same length), or None for unkeyed records.
            partition: put every record in this partition instead.
            timestamp_ms: the create time of every record (default: now, once per call).
            headers: headers added to every record.

        Returns:
            A :class:`BulkDelivery`; ``await`` it for every record's metadata.

        Raises:
            InvalidArgumentError: ``values`` (or ``keys``) is not an iterable, ``keys`` and
                ``values`` have different lengths, or a timestamp or partition is out of
                range (nothing is queued).
            KafkaError: as :meth:`send`. Keyed records are all serialized and checked before
                any is queued; unkeyed records are checked one by one, so those before the
                failing one are queued.

        Cancellation:
            Records are queued in order; if the call is cancelled (it awaits only when a new
            batch needs metadata or memory), the records before that point are queued and
            will be delivered, the rest are not. Do not cancel it if you need to know which.
        """
        if not self._open:
            raise self._not_running()
        if _thread.get_ident() != self._thread_id:
            raise self._wrong_loop()
        keys, values = bulk_columns(keys, values)
        bulk = BulkDelivery()
        if partition is not None and (type(partition) is not int or partition < 0):
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        if not self._interceptors and self._key_plain and self._value_plain and self._txn is None:
            info = self._metadata.snapshot.topics.get(topic)
            started = -1
            if info is None or (partition is not None and partition >= info.num_partitions):
                started = self._clock.monotonic_ms()
                info = await self._wait_for_topic(topic, partition)
            if timestamp_ms is None:
                timestamp_ms = int(_time() * 1000)
            elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
                raise _bad_timestamp(timestamp_ms)
            if await self._appender.append_columns(
                bulk,
                topic,
                keys,
                values,
                partition=partition,
                timestamp_ms=timestamp_ms,
                header_bytes=serialize_headers(headers) if headers else None,
                info=info,
                started_ms=started,
                key_serializer=self._key_serializer,
                value_serializer=self._value_serializer,
                hasher=self._hasher if self._hash_keys else None,
            ):
                return bulk
        # Everything else (interceptors, a custom or round-robin partitioner, keyed records
        # with headers, a fixed partition or None keys) takes send() record by record.
        for key, value in pairs(keys, values):
            handle = await self.send(topic, value, key, partition, timestamp_ms, headers)
            bulk._add(
                handle._result,
                handle.tp,
                handle._index,
                handle._key_size,
                handle._value_size,
                handle._timestamp_ms,
            )
        return bulk

    async def _wait_for_topic(self, topic: str, partition: int | None) -> TopicInfo:
        if type(topic) is not str or not topic:
            raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
        fetcher = self._rt.fetcher
        if fetcher is None:  # pragma: no cover - set before RUNNING
            raise self._not_running()
        max_block_ms = self._config.max_block_ms
        info = await fetcher.wait_for_topic(topic, partition, max_block_ms / 1000, max_block_ms)
        if not self._running():
            raise self._not_running()
        return info

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement.

        The record's batch does not wait out ``linger_ms``: it is sent as soon as the
        sender runs, together with whatever other records joined it meanwhile (see
        docs/design.md, "send_and_wait and linger").

        Raises:
            KafkaError: as :meth:`send`, or the error the record failed with.

        Cancellation:
            As :meth:`send`: once queued, the record is delivered even if this call is
            cancelled while waiting for the acknowledgement.
        """
        delivery = await self.send(topic, value, key, partition, timestamp_ms, headers)
        sender = self._rt.sender
        if not delivery.done() and sender is not None:
            self._acc.expedite(delivery.tp)
            # Run a sender pass right here instead of waking the sender task and waiting
            # for it to be scheduled: the request is written one event-loop turn sooner.
            # run_once is synchronous, so it cannot interleave with the sender task's pass.
            now_ms = self._clock.monotonic_ms()
            try:
                delay_ms = sender.run_once(now_ms)
            except Exception as exc:
                # A bug in a pass is a crash of the producer, whichever task ran the pass.
                self._on_crash(exc)
                if self._runner is not None:
                    self._runner.cancel()
                raise self._not_running() from exc
            sender.pass_timer.reschedule(now_ms, delay_ms)  # moves the sender task's timer
        return await delivery

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, and wait until all of it is acknowledged or failed.

        Records that fail do not make flush raise; their futures carry the errors.

        Raises:
            KafkaTimeoutError: not done within ``timeout`` seconds.
            ProducerClosedError: the producer is not running.

        Cancellation:
            Cancelling the wait does not cancel the records.
        """
        if not self._running():
            raise self._not_running()
        await self._rt.flush(timeout)

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for metadata.

        Raises:
            MetadataTimeoutError: the topic is not known within ``max_block_ms``.
            ProducerClosedError: the producer is not running.
        """
        if not self._open:
            raise self._not_running()
        info: TopicInfo | None = self._metadata.snapshot.topics.get(topic)
        if info is None:
            info = await self._wait_for_topic(topic, None)
        else:
            await asyncio.sleep(0)
        return [p.partition for p in info.partitions]

    def metrics(self) -> dict[str, float]:
        """Producer-wide metrics: the Java producer's names and meanings (docs/metrics.md).

        Rates are per second and averages and maxima cover the last 30-60 s (two 30 s
        samples, as Java's defaults); ``*-total`` counts since start; an average or maximum
        with nothing recorded in the window is NaN, as in Java. The names of earlier
        versions (``records_sent``, ...) are kept alongside.
        """
        return self._rt.producer_metrics()

    def metric_groups(self) -> dict[str, Any]:
        """Every metric, by group.

        ``producer-metrics`` (as :meth:`metrics`), ``producer-topic-metrics`` (per topic),
        ``producer-node-metrics`` (per broker id) and ``latency-histograms`` (cumulative
        buckets, for exporters).
        """
        now_ms = self._clock.monotonic_ms()
        stats = self._rt.stats
        return {
            "producer-metrics": self.metrics(),
            "producer-topic-metrics": stats.topic_metrics(now_ms),
            "producer-node-metrics": stats.node_metrics(now_ms),
            "latency-histograms": stats.histograms(),
        }
