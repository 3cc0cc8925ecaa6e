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

import asyncio
import random
import uuid
from collections.abc import Coroutine, Iterable, Sequence
from time import time as _time
from typing import Any, Unpack, cast

from aiokprod import __version__
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig, ProducerOptions
from aiokprod.errors import IllegalStateError
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.internals.bulk import BulkDelivery, bulk_columns, pairs
from aiokprod.internals.bulk_append import append_columns
from aiokprod.internals.metadata import TopicInfo
from aiokprod.internals.runtime import ProducerRuntime
from aiokprod.internals.send_path import MAX_TIMESTAMP_MS, bad_partition, bad_timestamp
from aiokprod.internals.serialization import Serializer, serialize_headers
from aiokprod.lifecycle import ProducerLifecycle
from aiokprod.logs import get_logger
from aiokprod.net.transport import Transport
from aiokprod.types import Header, RecordMetadata

log = get_logger("aiokprod.producer")


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
        self._config = ProducerConfig.resolve(bootstrap_servers, config, options)
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
        # send() without a frame of its own: the instance's ``send`` is the send path's bound
        # method (the same call as Producer.send below, which documents it), unless a
        # subclass overrides send(). Saves ~0.1 us per record (a Python call) on both builds.
        if type(self).send is Producer.send:
            self.__dict__["send"] = self._path.send
            # send_and_wait() likewise (it calls the send path's own send(), so only when
            # send() is not overridden either).
            if type(self).send_and_wait is Producer.send_and_wait:
                self.__dict__["send_and_wait"] = self._path.send_and_wait
        self._acc = rt.accumulator
        self._metadata = rt.metadata
        self._appender = rt.appender
        self._idempotence = rt.idempotence
        self._txn = rt.txn

    @property
    def config(self) -> ProducerConfig:
        """The validated options this producer runs with."""
        return self._config

    # --- sending ----------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> Coroutine[Any, Any, DeliveryFuture]:
        """Queue a record; returns a future that resolves when the broker acknowledges it.

        ``await producer.send(...)``: it returns a coroutine, as an ``async def`` would (a
        plain method handing over :class:`~aiokprod.internals.send_path.SendPath`'s coroutine
        saves a coroutine frame per record; the errors below are raised when it is awaited).

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
            InvalidArgumentError: a bad topic, partition or timestamp.

        Cancellation:
            If cancelled before it returns, the record was not queued. Once it has returned
            the record will be delivered or fail on its own; cancelling whoever awaits the
            returned future does not stop it.
        """
        return self._path.send(topic, value, key, partition, timestamp_ms, headers)

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
        path = self._path
        path.check_caller()
        keys, values = bulk_columns(keys, values)
        bulk = BulkDelivery()
        if partition is not None and (type(partition) is not int or partition < 0):
            raise bad_partition(partition)
        if not path.interceptors and path.key_plain and path.value_plain:
            if self._txn is not None:
                self._txn.check_send()  # in a transaction (its partitions enlist per run)
            info = self._metadata.snapshot.topics.get(topic)
            started = -1
            if info is None or (partition is not None and partition >= info.num_partitions):
                started = self._clock.monotonic_ms()
                info = await path.wait_for_topic(topic, partition)
            if timestamp_ms is None:
                timestamp_ms = int(_time() * 1000)
            elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
                raise bad_timestamp(timestamp_ms)
            if await append_columns(
                self._appender,
                bulk,
                topic,
                keys,
                values,
                partition=partition,
                timestamp_ms=timestamp_ms,
                header_bytes=serialize_headers(headers) if headers else None,
                info=info,
                started_ms=started,
                key_serializer=cast("Serializer | None", path.key_serializer),
                value_serializer=cast("Serializer | None", path.value_serializer),
                hasher=path.hasher if path.hash_keys else None,
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

    def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> Coroutine[Any, Any, RecordMetadata]:
        """Send one record and wait for its acknowledgement.

        ``await producer.send_and_wait(...)``: like :meth:`send`, it returns the send path's
        coroutine (the errors below are raised when it is awaited).

        The record's batch does not wait out ``linger_ms``: it is sent as soon as the
        sender runs, together with whatever other records joined it meanwhile (see
        docs/design.md, "send_and_wait and linger").

        Raises:
            KafkaError: as :meth:`send`, or the error the record failed with.

        Cancellation:
            As :meth:`send`: once queued, the record is delivered even if this call is
            cancelled while waiting for the acknowledgement.
        """
        if type(self).send is not Producer.send:  # a subclass's send(): through it
            return self._path.send_and_wait_via(
                lambda: self.send(
                    topic,
                    value,
                    key=key,
                    partition=partition,
                    timestamp_ms=timestamp_ms,
                    headers=headers,
                )
            )
        return self._path.send_and_wait(topic, value, key, partition, timestamp_ms, headers)

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
        if not self._path.open:
            raise self._not_running()
        info: TopicInfo | None = self._metadata.snapshot.topics.get(topic)
        if info is None:
            info = await self._path.wait_for_topic(topic, None)
        else:
            await asyncio.sleep(0)
        return list(range(info.num_partitions))

    def metrics(self) -> dict[str, float]:
        """Producer-wide metrics: the Java producer's names and meanings (docs/metrics.md).

        Rates are per second and averages and maxima cover the last 30-60 s (two 30 s
        samples, as Java's defaults); ``*-total`` counts since start; an average or maximum
        with nothing recorded in the window is NaN, as in Java. The names of earlier
        versions (``records_sent``, ...) are kept alongside.
        """
        return self._rt.producer_metrics()

    async def client_instance_id(self, timeout: float | None = None) -> uuid.UUID | None:
        """The id the cluster gave this producer for its pushed metrics (KIP-714).

        Java's ``clientInstanceId``: operators find the client's metrics under it. The first
        broker that takes telemetry assigns it; this waits for that (connecting to a broker
        if none is connected yet).

        Args:
            timeout: seconds to wait; None waits up to ``max_block_ms``.

        Returns:
            The id, or None if none was assigned in time (no broker of the cluster takes
            client telemetry: no ``metric.reporters`` receives it), as Java returns null.
            Kafka prints ids in URL-safe base64 without padding:
            ``base64.urlsafe_b64encode(id.bytes).rstrip(b"=")``.

        Raises:
            IllegalStateError: ``enable_metrics_push`` is off.
            ProducerClosedError: the producer is not running.
        """
        if not self._config.enable_metrics_push:
            raise IllegalStateError(
                "client telemetry is off: set enable_metrics_push=True to get an instance id"
            )
        if not self._running():
            raise self._not_running()
        telemetry = self._rt.telemetry
        if telemetry is None:  # pragma: no cover - running with enable_metrics_push
            return None
        wait = self._config.max_block_ms / 1000 if timeout is None else timeout
        return await telemetry.instance_id(wait)

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
