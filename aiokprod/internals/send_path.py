"""SendPath: the per-record ``send()``, and the state it reads, in one class.

:meth:`aiokprod.Producer.send` delegates here. The body is the facade's old one, moved so
that the optional compiled build (docs/compiled.md) can compile it: what ``send()`` reads per
record (the accumulator, the metadata snapshot, the appender, the hasher, the serializers)
are then native attributes of a compiled class and the calls into the compiled accumulator
and batch builder native calls — most of what compiling the whole facade bought in an
experiment, without compiling the facade.

Compiled code checks its arguments' annotated types itself and answers a wrong one with a
bare ``TypeError``; the API promises typed aiokprod errors for bad input. So every argument
that comes from the caller is typed ``object`` here and checked by this code, which raises
the same errors the facade raised: :class:`~aiokprod.errors.InvalidArgumentError` for a bad
topic, partition or timestamp, :class:`~aiokprod.errors.SerializationError` for a value the
serializers refuse.

``open`` and ``thread_id`` are the producer's per-record gate, owned here because they are
read per record: the lifecycle (:mod:`aiokprod.lifecycle`) sets them.
"""

from __future__ import annotations

import _thread
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from aiokprod.errors import InvalidArgumentError, KafkaError
from aiokprod.internals.accumulator import batch_of_one_size
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.internals.interceptors import on_send
from aiokprod.internals.partitioner import murmur2_hasher, murmur3_hasher
from aiokprod.internals.serialization import (
    is_plain_serializer,
    serialize_headers,
    serialize_key,
    serialize_special,
    serialize_value,
)
from aiokprod.types import ProducerRecord, RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from aiokprod.internals.metadata import TopicInfo
    from aiokprod.internals.runtime import ProducerRuntime
    from aiokprod.internals.sender import Sender

# Module-level Final names are C statics in the compiled build; an imported function is a
# dict lookup in the module's globals per call.
_get_ident: Final = _thread.get_ident
_time_ns: Final = time.time_ns

#: Record timestamps are int64 milliseconds on the wire.
MAX_TIMESTAMP_MS: Final = 2**63 - 1


def bad_timestamp(timestamp_ms: object) -> InvalidArgumentError:
    """The error for a timestamp that is not an int from 0 to :data:`MAX_TIMESTAMP_MS`."""
    return InvalidArgumentError(
        f"timestamp_ms must be an int from 0 to {MAX_TIMESTAMP_MS}, got {timestamp_ms!r}"
    )


def bad_partition(partition: object) -> InvalidArgumentError:
    """The error for a partition that is not an int >= 0."""
    return InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")


class _Route:
    """What ``send()`` reads of a topic per record, from one metadata snapshot.

    One native object per topic in the compiled build: the snapshot's ``topics`` mapping,
    the interpreted ``TopicInfo`` and the TopicPartition tuple are looked up once per
    snapshot instead of once per record.
    """

    __slots__ = ("info", "num_partitions", "tps")

    def __init__(self, info: TopicInfo, tps: tuple[TopicPartition, ...]) -> None:
        self.info = info
        self.tps = tps
        self.num_partitions = len(tps)


class SendPath:
    """The producer's per-record send (see the module docstring).

    Args:
        runtime: the producer's machinery.
        not_running: the error for a send while the producer is not running.
        wrong_loop: the error for a send from another thread than the producer's loop's.
        pass_crashed: crashes the producer for a bug in a sender pass that
            ``send_and_wait`` ran, and returns the error to raise.
    """

    def __init__(
        self,
        runtime: ProducerRuntime,
        not_running: Callable[[], KafkaError],
        wrong_loop: Callable[[], KafkaError],
        pass_crashed: Callable[[Exception], KafkaError],
    ) -> None:
        cfg = runtime.config
        self._rt = runtime
        self._not_running = not_running
        self._wrong_loop = wrong_loop
        self._pass_crashed = pass_crashed
        #: The per-record gate: True while the producer is RUNNING (set by the lifecycle).
        self.open = False
        #: The thread of the loop that started the producer; sends from others are refused.
        self.thread_id = -1
        self._clock = runtime.clock
        self._acc = runtime.accumulator
        self._metadata = runtime.metadata
        self._appender = runtime.appender
        self._txn = runtime.txn
        if self._txn is not None:
            runtime.appender.enlist = self.enlist  # send_many's column paths enlist too
        self._max_block_ms: int = cfg.max_block_ms
        # Keyed records with a built-in partitioner skip the chooser (the per-record path).
        self.hash_keys: bool = (
            isinstance(cfg.partitioner, str)
            and cfg.partitioner != "round_robin"
            and not cfg.partitioner_ignore_keys
        )
        self.hasher = murmur3_hasher() if cfg.partitioner == "murmur3" else murmur2_hasher()
        #: topic -> what send() needs of it, from the metadata snapshot ``_routes_of``
        #: (cleared when the snapshot is replaced).
        self._routes: dict[str, _Route] = {}
        self._routes_of: object = None
        self._last_ts = -1
        self.key_serializer: object = cfg.key_serializer
        self.value_serializer: object = cfg.value_serializer
        # Coroutine serializers and ones taking a context are awaited / given one; plain
        # functions (or none) stay on the fast path and allow send_many's column paths.
        self.key_plain: bool = is_plain_serializer(cfg.key_serializer)
        self.value_plain: bool = is_plain_serializer(cfg.value_serializer)
        self.interceptors: Sequence[Any] = cfg.interceptors

    def check_caller(self) -> None:
        """Raise unless the producer runs and this is its loop's thread (per call)."""
        if not self.open:
            raise self._not_running()
        if _get_ident() != self.thread_id:
            raise self._wrong_loop()

    async def send(  # noqa: C901 - the per-record hot path, kept in one frame on purpose
        self,
        topic: object,
        value: object = None,
        key: object = None,
        partition: object = None,
        timestamp_ms: object = None,
        headers: object = None,
    ) -> DeliveryFuture:
        """:meth:`aiokprod.Producer.send` (its docstring is the contract)."""
        if not self.open:
            raise self._not_running()
        if _get_ident() != self.thread_id:
            raise self._wrong_loop()
        txn = self._txn
        if txn is not None:
            txn.check_send()
        if self.interceptors:
            # Through Any: a cast to the record's field types, or reading them back typed,
            # is a runtime check in the compiled build (a bare TypeError for a bad argument
            # before our checks below could name it).
            make_record: Any = ProducerRecord
            record: Any = on_send(
                self.interceptors,
                make_record(topic, value, key, partition, timestamp_ms, headers),
            )
            topic, value, key = record.topic, record.value, record.key
            partition, timestamp_ms, headers = record.partition, record.timestamp_ms, record.headers
        if not isinstance(topic, str):
            raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
        part = -1
        if partition is not None:
            if type(partition) is not int or partition < 0:  # bool is not int here either
                raise bad_partition(partition)
            part = partition
        snapshot = self._metadata.snapshot
        if snapshot is not self._routes_of:
            self._routes.clear()
            self._routes_of = snapshot
        route = self._routes.get(topic)
        if route is None:
            known = snapshot.topics.get(topic)
            if known is not None:
                route = self._routes[topic] = self._new_route(topic, known)
        started = -1
        if route is None or part >= route.num_partitions:
            started = self._clock.monotonic_ms()
            info = await self.wait_for_topic(topic, None if part < 0 else part)
            route = self._new_route(topic, info)
        info = route.info
        # Inline guards for the common types (this runs once per record); anything else
        # goes through the shared serializers.
        ks = self.key_serializer
        key_b: bytes | None
        if ks is None and (key is None or type(key) is bytes):
            key_b = key
        elif self.key_plain or ks is None:
            key_b = serialize_key(cast(Any, ks), key)
        else:
            key_b = await serialize_special(cast(Any, ks), key, "key", topic, cast(Any, headers))
        vs = self.value_serializer
        value_b: bytes | None
        if vs is None and (value is None or type(value) is bytes):
            value_b = value
        elif self.value_plain or vs is None:
            value_b = serialize_value(cast(Any, vs), value)
        else:
            value_b = await serialize_special(
                cast(Any, vs), value, "value", topic, cast(Any, headers)
            )
        header_bytes = serialize_headers(headers) if headers else None
        key_size = -1 if key_b is None else len(key_b)
        value_size = -1 if value_b is None else len(value_b)
        appender = self._appender
        headers_size = len(header_bytes) if header_bytes else 0
        if key_size + value_size + headers_size > appender.fast_size_limit:
            size = batch_of_one_size(key_size, value_size, headers_size)
            if size > appender.record_limit:
                raise appender.too_large(size)
        ts: int
        if timestamp_ms is None:
            ts = _time_ns() // 1_000_000
            # One int object per millisecond, shared by that millisecond's records: the
            # garbage collector visits what every kept handle holds, and a fresh int per
            # record is a cache miss per handle per collection (pure Python; the compiled
            # build keeps ints unboxed).
            if ts == self._last_ts:
                ts = self._last_ts
            else:
                self._last_ts = ts
        elif type(timestamp_ms) is int and 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            ts = timestamp_ms
        else:
            raise bad_timestamp(timestamp_ms)
        sticky = None
        num_partitions = route.num_partitions
        if part < 0:
            if key_b is not None and self.hash_keys:
                part = self.hasher.partition(key_b, num_partitions)
            else:
                part, sticky = appender.partitions.choose(
                    topic, key_b, num_partitions, info.available
                )
        tp = route.tps[part]
        if txn is not None:
            self.enlist(tp)
        # RecordAppender.append, inlined (this runs per record).
        appended = self._acc.try_append(tp, ts, key_b, value_b, header_bytes, sticky, info)
        if appended is None:
            batch, index = await appender.append_new_batch(
                tp,
                ts,
                key_b,
                value_b,
                header_bytes,
                sticky,
                info,
                started,
                appender.yield_threshold(num_partitions),
            )
        else:
            batch, index, _ = appended
            if batch.is_full:
                appender.wakeup()
        handle = DeliveryFuture(batch.result, index, tp, ts, key_size, value_size)
        if batch.handles is not None:
            batch.handles.append(handle)
        return handle

    async def send_and_wait(
        self,
        topic: object,
        value: object = None,
        key: object = None,
        partition: object = None,
        timestamp_ms: object = None,
        headers: object = None,
    ) -> RecordMetadata:
        """:meth:`aiokprod.Producer.send_and_wait` (its docstring is the contract)."""
        sender = self._rt.sender
        if sender is None:
            return await (await self.send(topic, value, key, partition, timestamp_ms, headers))
        # The pass below plans the sender task's next pass: the new batch's linger deadline
        # need not move its timer first (a loop turn per call; PassTimer.hold).
        timer = sender.pass_timer
        timer.hold()
        try:
            delivery = await self.send(topic, value, key, partition, timestamp_ms, headers)
            self._pass_now(sender, delivery)
        finally:
            timer.release()  # nothing to do after ran()
        return await delivery

    async def send_and_wait_via(
        self, send: Callable[[], Awaitable[DeliveryFuture]]
    ) -> RecordMetadata:
        """:meth:`send_and_wait` through another ``send()``: a subclass's override.

        ``send`` calls it with the record's arguments.
        """
        sender = self._rt.sender
        if sender is None:
            return await (await send())
        timer = sender.pass_timer
        timer.hold()
        try:
            delivery = await send()
            self._pass_now(sender, delivery)
        finally:
            timer.release()
        return await delivery

    def _pass_now(self, sender: Sender, delivery: DeliveryFuture) -> None:
        """Send ``delivery``'s batch now: a sender pass in the caller's task.

        Instead of waking the sender task and waiting for it to be scheduled, the request
        is written one event-loop turn sooner. ``run_once`` is synchronous, so it cannot
        interleave with the sender task's pass.
        """
        if delivery.done():
            return
        self._acc.expedite(delivery.tp)
        now_ms = self._clock.monotonic_ms()
        try:
            delay_ms = sender.run_once(now_ms)
        except Exception as exc:
            # A bug in a pass is a crash of the producer, whichever task ran it.
            raise self._pass_crashed(exc) from exc
        sender.pass_timer.ran(now_ms, delay_ms)  # re-plans the sender task's sleep

    def _new_route(self, topic: str, info: TopicInfo) -> _Route:
        return _Route(info, self._appender.partitions_of(topic, info.num_partitions))

    async def wait_for_topic(self, topic: object, partition: int | None) -> TopicInfo:
        """The topic's metadata, waiting up to ``max_block_ms`` (a typed error otherwise)."""
        if type(topic) is not str or not topic:
            raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
        fetcher = self._rt.fetcher
        if fetcher is None:  # pragma: no cover - set before RUNNING
            raise self._not_running()
        max_block_ms = self._max_block_ms
        info = await fetcher.wait_for_topic(topic, partition, max_block_ms / 1000, max_block_ms)
        if not self.open:
            raise self._not_running()
        return info

    def enlist(self, tp: TopicPartition) -> None:
        """A record for ``tp`` joins the transaction (protocol 1: AddPartitionsToTxn)."""
        txn, coordinator = self._txn, self._rt.coordinator
        if txn is None or coordinator is None:
            return
        txn.check_send()  # again: the state may have changed while send() awaited metadata
        if txn.add_partition(tp):
            coordinator.maybe_add_partitions()
