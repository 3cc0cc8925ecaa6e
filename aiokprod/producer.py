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
import enum
import random
from collections.abc import Callable, Coroutine, Iterable, Sequence
from time import time as _time
from types import TracebackType
from typing import Any, Unpack

import anyio

from aiokprod import __version__
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig, ProducerOptions
from aiokprod.errors import (
    IllegalStateError,
    InvalidArgumentError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    ProducerCrashedError,
)
from aiokprod.internals.accumulator import RecordAccumulator, batch_of_one_size
from aiokprod.internals.appender import RecordAppender
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.internals.budget import ByteBudget
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.internals.idempotence import IdempotenceState
from aiokprod.internals.metadata import MetadataState, TopicInfo
from aiokprod.internals.metadata_fetcher import MetadataFetcher
from aiokprod.internals.partitioner import PartitionChooser, murmur2_hasher, murmur3_hasher
from aiokprod.internals.sender import Sender
from aiokprod.internals.serialization import (
    is_plain_serializer,
    serialize_headers,
    serialize_key,
    serialize_special,
    serialize_value,
)
from aiokprod.internals.stats import ProducerStats
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool
from aiokprod.net.sasl import sasl_authenticator
from aiokprod.net.security import build_ssl_context
from aiokprod.net.transport import Transport
from aiokprod.protocol.compression import codec_for_name
from aiokprod.types import Header, ProducerRecord, RecordMetadata, TopicPartition

log = get_logger("aiokprod.producer")

#: Record timestamps are int64 milliseconds on the wire.
MAX_TIMESTAMP_MS = 2**63 - 1


def _bad_timestamp(timestamp_ms: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"timestamp_ms must be an int from 0 to {MAX_TIMESTAMP_MS}, got {timestamp_ms!r}"
    )


def _no_wakeup() -> None:
    return None


def _pairs(keys: Iterable[Any] | None, values: Iterable[Any]) -> Iterable[tuple[Any, Any]]:
    if keys is None:
        return ((None, value) for value in values)
    return zip(keys, values, strict=True)


def _bulk_columns(
    keys: Iterable[Any] | None, values: Iterable[Any]
) -> tuple[list[Any] | None, Iterable[Any]]:
    """Check ``send_many``'s columns; keyed ones become lists of the same length."""
    for name, column in (("values", values), ("keys", keys)):
        if column is None and name == "keys":
            continue
        if isinstance(column, str | bytes | bytearray) or not isinstance(column, Iterable):
            raise InvalidArgumentError(
                f"{name} must be an iterable of record {name}, got {type(column).__name__}"
            )
    if keys is None:
        return None, values
    key_list, value_list = list(keys), list(values)
    if len(key_list) != len(value_list):
        raise InvalidArgumentError(
            f"send_many: {len(key_list)} keys for {len(value_list)} values (nothing queued)"
        )
    return key_list, value_list


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"
    CRASHED = "crashed"


class Producer:
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
        self._transport = transport
        self._clock: Clock = clock or SYSTEM_CLOCK
        self._rng = rng or random.Random()
        #: The thread whose event loop started the producer: sends from any other thread
        #: are refused. (A thread id, not the loop: asyncio.get_running_loop() costs a
        #: getpid() system call per call before Python 3.12, too much per record.)
        self._thread_id = -1
        self._state = _State.NEW
        self._stats = ProducerStats()
        self._budget = ByteBudget(cfg.buffer_memory)
        # Batches fill by uncompressed bytes (like the Java client's conservative default);
        # the codec compresses each batch once, when it is closed (docs/compression.md).
        codec = codec_for_name(cfg.compression_type)
        self._acc = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            budget=self._budget,
            compression=codec.id,
            compressor=codec.compressor(cfg.compression_level) if codec.id else None,
            keep_handles=bool(cfg.interceptors),
        )
        self._metadata = MetadataState(
            cfg.metadata_max_age_ms,
            cfg.metadata_max_idle_ms,
            cfg.retry_backoff_ms,
            cfg.retry_backoff_max_ms,
        )
        self._appender = RecordAppender(
            self._acc,
            self._budget,
            PartitionChooser(
                cfg.partitioner, cfg.batch_size, cfg.partitioner_ignore_keys, rng=self._rng
            ),
            record_limit=min(cfg.max_request_size, cfg.buffer_memory),
            max_block_ms=cfg.max_block_ms,
            max_request_size=cfg.max_request_size,
            clock=self._clock,
            check_running=self._check_running,
        )
        # Keyed records with a built-in partitioner skip the chooser (the per-record path).
        self._hash_keys = (
            isinstance(cfg.partitioner, str)
            and cfg.partitioner != "round_robin"
            and not cfg.partitioner_ignore_keys
        )
        self._hasher = murmur3_hasher() if cfg.partitioner == "murmur3" else murmur2_hasher()
        #: topic -> its TopicPartition objects (the appender's, cached here for send()).
        self._tps: dict[str, tuple[TopicPartition, ...]] = {}
        self._idempotence = IdempotenceState() if cfg.enable_idempotence else None
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        # Coroutine serializers and ones taking a context are awaited / given one; plain
        # functions (or none) stay on the fast path and allow send_many's column paths.
        self._key_plain = is_plain_serializer(cfg.key_serializer)
        self._value_plain = is_plain_serializer(cfg.value_serializer)
        self._interceptors = cfg.interceptors
        self._max_block_s = cfg.max_block_ms / 1000
        self._sender: Sender | None = None
        self._fetcher: MetadataFetcher | None = None
        self._pool: ConnectionPool | None = None
        self._runner: asyncio.Task[None] | None = None
        self._crash: ProducerCrashedError | None = None
        self._closed_error: KafkaError = ProducerClosedError("the producer is closed")

    @property
    def config(self) -> ProducerConfig:
        """The validated options this producer runs with."""
        return self._config

    # --- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the background sender. It does not wait for the cluster to be reachable.

        Brokers that are down at start are retried; ``send()`` waits up to
        ``max_block_ms`` for the metadata of its topic.

        Raises:
            IllegalStateError: already started, or closed.
        """
        if self._state is not _State.NEW:
            raise IllegalStateError(f"start() on a producer that is {self._state.value}")
        loop = asyncio.get_running_loop()
        self._thread_id = _thread.get_ident()
        ready: asyncio.Future[None] = loop.create_future()
        self._runner = loop.create_task(self._run(ready), name="aiokprod-producer")
        await ready
        self._state = _State.RUNNING

    async def _run(self, ready: asyncio.Future[None]) -> None:
        """The producer's root task: one task group holding every background task."""
        cfg = self._config
        try:
            # Built here, not in __init__: loading certificates is I/O. A bad file or key
            # password fails start() with a ConfigError.
            ssl_context = build_ssl_context(cfg)
            authenticate = sasl_authenticator(cfg)
            async with anyio.create_task_group() as tg:

                def spawn(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
                    tg.start_soon(fn)

                def wake() -> None:
                    if self._sender is not None:
                        self._sender.wakeup()

                def on_disconnect(node_id: int) -> None:
                    self._metadata.request_update()

                self._pool = ConnectionPool(
                    cfg.bootstrap_servers,
                    spawn=spawn,
                    client_id=cfg.client_id,
                    software_version=__version__,
                    max_in_flight=cfg.max_in_flight_requests_per_connection,
                    setup_timeout_ms=cfg.socket_connection_setup_timeout_ms,
                    reconnect_backoff_ms=cfg.reconnect_backoff_ms,
                    reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
                    on_change=wake,
                    on_disconnect=on_disconnect,
                    ssl_context=ssl_context,
                    authenticate=authenticate,
                    transport=self._transport,
                    clock=self._clock,
                    rng=self._rng,
                )
                self._fetcher = MetadataFetcher(
                    self._metadata,
                    self._pool,
                    spawn,
                    request_timeout_ms=cfg.request_timeout_ms,
                    allow_auto_create_topics=cfg.allow_auto_create_topics,
                    on_update=wake,
                    clock=self._clock,
                )
                self._sender = Sender(
                    cfg,
                    self._acc,
                    self._metadata,
                    self._fetcher,
                    self._pool,
                    self._idempotence,
                    spawn,
                    self._stats,
                    clock=self._clock,
                    rng=self._rng,
                )
                self._appender.wakeup = self._sender.wakeup
                tg.start_soon(self._sender.run)
                ready.set_result(None)
                await self._sender.wait_stopped()
                self._pool.close_all()
                tg.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - the root task: every ending is handled
            if not ready.done():
                ready.set_exception(exc)
                return
            if isinstance(exc, asyncio.CancelledError) and self._state is _State.CLOSED:
                return
            self._on_crash(exc)

    def _on_crash(self, exc: BaseException) -> None:
        if self._crash is not None:
            return  # already crashed (a sender pass in a caller's task, then the runner)
        error = ProducerCrashedError(f"the producer's background task stopped: {exc!r}")
        error.__cause__ = exc
        self._crash = error
        self._state = _State.CRASHED
        log.error("producer crashed", error=repr(exc))
        self._fail_waiting(error)
        if self._sender is not None:
            self._sender.fail_all(error)
        if self._pool is not None:
            self._pool.close_all(error)

    def _fail_waiting(self, error: KafkaError) -> None:
        self._budget.fail_waiters(error)
        if self._fetcher is not None:
            self._fetcher.fail_waiters(error)

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting records, deliver the ones accepted, and stop.

        Args:
            timeout: seconds to wait for delivery; None waits as long as it takes (each
                record is bounded by ``delivery_timeout_ms`` anyway); 0 gives up at once.
                Records still undelivered when it passes fail with ProducerClosedError.

        Raises:
            ProducerCrashedError: the background task had crashed (its records already
                failed with this error).

        Cancellation:
            Closing is shielded: a cancelled caller still leaves the producer closed, with
            every record delivered or failed.
        """
        if self._state in (_State.NEW, _State.CLOSED):
            self._state = _State.CLOSED
            return
        if self._state is _State.CLOSING:
            # Another close() is under way (or was cancelled half-way): finish it here.
            runner = self._runner
            if runner is not None:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([runner])
            self._state = _State.CLOSED
            return
        crashed = self._state is _State.CRASHED
        if not crashed:
            self._state = _State.CLOSING
        sender = self._sender
        self._fail_waiting(ProducerClosedError("the producer was closed while this send waited"))
        with anyio.CancelScope(shield=True):
            if sender is not None and not crashed:
                sender.stop()
                if timeout is None or timeout > 0:
                    with anyio.move_on_after(timeout):
                        await sender.wait_stopped()
                pending = self._acc.incomplete_batches()
                if pending:
                    records = sum(b.record_count for b in pending)
                    sender.stop(
                        ProducerClosedError(
                            f"the producer was closed before {records} record(s) were "
                            f"acknowledged (close timeout {timeout} s)"
                        )
                    )
                await sender.wait_stopped()
            runner = self._runner
            if runner is not None and not runner.done():
                self._state = _State.CLOSED
                if self._pool is not None:
                    self._pool.close_all()
                await asyncio.wait([runner])
        self._state = _State.CLOSED
        if crashed and self._crash is not None:
            raise self._crash

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
        if self._state is not _State.RUNNING:
            raise self._not_running()
        if _thread.get_ident() != self._thread_id:
            raise self._wrong_loop()
        if self._interceptors:
            topic, value, key, partition, timestamp_ms, headers = self._on_send(
                ProducerRecord(topic, value, key, partition, timestamp_ms, headers)
            )
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
        size = batch_of_one_size(key_size, value_size, len(header_bytes) if header_bytes else 0)
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
        if self._state is not _State.RUNNING:
            raise self._not_running()
        if _thread.get_ident() != self._thread_id:
            raise self._wrong_loop()
        keys, values = _bulk_columns(keys, values)
        bulk = BulkDelivery()
        if partition is not None and (type(partition) is not int or partition < 0):
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        if not self._interceptors and self._key_plain and self._value_plain:
            info = self._metadata.snapshot.topics.get(topic)
            started = -1
            if info is None or (partition is not None and partition >= info.num_partitions):
                started = self._clock.monotonic_ms()
                info = await self._wait_for_topic(topic, partition)
            header_bytes = serialize_headers(headers) if headers else None
            if timestamp_ms is None:
                timestamp_ms = int(_time() * 1000)
            elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
                raise _bad_timestamp(timestamp_ms)
            appender = self._appender
            if keys is not None:
                if partition is None and header_bytes is None and self._hash_keys:
                    key_list, value_list = list(keys), list(values)
                    partitions = appender.prepare_keyed(
                        key_list,
                        value_list,
                        self._key_serializer,
                        self._value_serializer,
                        self._hasher,
                        len(info.partitions),
                    )
                    if partitions is not None:
                        await appender.append_keyed(
                            bulk,
                            topic,
                            key_list,
                            value_list,
                            partitions,
                            timestamp_ms,
                            info,
                            started,
                        )
                        return bulk
            elif partition is not None or appender.partitions.is_sticky_for_unkeyed:
                await appender.append_values(
                    bulk,
                    topic,
                    values,
                    self._value_serializer,
                    partition,
                    timestamp_ms,
                    header_bytes,
                    info,
                    started,
                )
                return bulk
        # Everything else (interceptors, a custom or round-robin partitioner, keyed records
        # with headers, a fixed partition or None keys) takes send() record by record.
        for key, value in _pairs(keys, values):
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
        fetcher = self._fetcher
        if fetcher is None:  # pragma: no cover - set before RUNNING
            raise self._not_running()
        info = await fetcher.wait_for_topic(
            topic, partition, self._max_block_s, self._config.max_block_ms
        )
        if not self._running():
            raise self._not_running()
        return info

    def _on_send(
        self, record: ProducerRecord
    ) -> tuple[str, Any, Any, int | None, int | None, Sequence[Header] | None]:
        for interceptor in self._interceptors:
            try:
                changed = interceptor.on_send(record)
                if isinstance(changed, ProducerRecord):
                    record = changed
            except Exception:
                log.exception("interceptor on_send raised", interceptor=repr(interceptor))
        return (
            record.topic,
            record.value,
            record.key,
            record.partition,
            record.timestamp_ms,
            record.headers,
        )

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
        sender = self._sender
        if not delivery.done() and sender is not None:
            self._acc.expedite(delivery.tp)
            # Run a sender pass right here instead of waking the sender task and waiting
            # for it to be scheduled: the request is written one event-loop turn sooner.
            # run_once is synchronous, so it cannot interleave with the sender task's pass.
            try:
                sender.run_once(self._clock.monotonic_ms())
            except Exception as exc:
                # A bug in a pass is a crash of the producer, whichever task ran the pass.
                self._on_crash(exc)
                if self._runner is not None:
                    self._runner.cancel()
                raise self._not_running() from exc
            sender.wakeup()  # let the sender task recompute its next deadline
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
        acc = self._acc
        batches = acc.incomplete_batches()
        acc.begin_flush()
        if self._sender is not None:
            self._sender.wakeup()
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

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for metadata.

        Raises:
            MetadataTimeoutError: the topic is not known within ``max_block_ms``.
            ProducerClosedError: the producer is not running.
        """
        if self._state is not _State.RUNNING or self._fetcher is None:
            raise self._not_running()
        info: TopicInfo | None = self._metadata.snapshot.topics.get(topic)
        if info is None:
            info = await self._fetcher.wait_for_topic(
                topic, None, self._max_block_s, self._config.max_block_ms
            )
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
        stats = self._stats
        now_ms = self._clock.monotonic_ms()
        sender = self._sender
        pool = self._pool
        out = stats.producer_metrics(now_ms)
        out.update(
            {
                "buffer-total-bytes": self._budget.total,
                "buffer-available-bytes": self._budget.available,
                "waiting-threads": self._budget.waiter_count,
                "requests-in-flight": pool.in_flight_requests() if pool else 0,
                "batches-queued": self._acc.queued_batches(),
                "batches-in-flight": sender.in_flight_batches if sender else 0,
                "batches-compressed-in-thread": stats.batches_compressed_in_thread,
                "metadata-version": self._metadata.version,
                # names of earlier versions
                "records_sent": stats.total("record-send"),
                "records_failed": stats.total("record-error"),
                "records_retried": stats.total("record-retry"),
                "batches_sent": stats.total("batch"),
                "requests_sent": stats.total("request"),
                "bytes_sent": stats.total("outgoing-byte"),
                "batches_compressed_in_thread": stats.batches_compressed_in_thread,
                "buffer_total_bytes": self._budget.total,
                "buffer_available_bytes": self._budget.available,
                "buffer_waiters": self._budget.waiter_count,
                "batches_queued": self._acc.queued_batches(),
                "batches_in_flight": sender.in_flight_batches if sender else 0,
                "requests_in_flight": pool.in_flight_requests() if pool else 0,
                "metadata_version": self._metadata.version,
            }
        )
        return out

    def metric_groups(self) -> dict[str, Any]:
        """Every metric, by group.

        ``producer-metrics`` (as :meth:`metrics`), ``producer-topic-metrics`` (per topic),
        ``producer-node-metrics`` (per broker id) and ``latency-histograms`` (cumulative
        buckets, for exporters).
        """
        now_ms = self._clock.monotonic_ms()
        return {
            "producer-metrics": self.metrics(),
            "producer-topic-metrics": self._stats.topic_metrics(now_ms),
            "producer-node-metrics": self._stats.node_metrics(now_ms),
            "latency-histograms": self._stats.histograms(),
        }

    def _check_running(self) -> None:
        """Raise if the producer stopped (or hit a fatal error) while a send awaited."""
        if not self._running():
            raise self._not_running()
        if self._sender is not None and self._sender.fatal_error is not None:
            raise self._sender.fatal_error

    def _wrong_loop(self) -> KafkaError:
        return IllegalStateError(
            "this producer belongs to the event loop it was started on; it was called from "
            "another loop (another thread?): use one producer per loop, or aiokprod.sync"
        )

    def _running(self) -> bool:
        # A method, not an inline comparison: the state changes across awaits.
        return self._state is _State.RUNNING

    def _not_running(self) -> KafkaError:
        if self._state is _State.CRASHED and self._crash is not None:
            return self._crash
        if self._state is _State.NEW:
            return ProducerClosedError("the producer is not started: use 'async with' or start()")
        if self._sender is not None and self._sender.fatal_error is not None:
            return self._sender.fatal_error
        return self._closed_error
