"""send()'s bad arguments get typed errors at the call site, in the pure and compiled builds.

``send()`` runs in :class:`aiokprod.internals.send_path.SendPath`, which the compiled build
(docs/compiled.md) compiles: there, an argument of the wrong annotated type would be a bare
``TypeError``. Every caller-supplied argument is typed ``object`` and checked by our code, so
these must hold under ``make test-compiled`` as well as here. The producer runs against the
simulated cluster; nothing that was refused may reach the log, and the good records after
the refused ones still land.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aiokprod import DeliveryFuture, Producer
from aiokprod.clock import LoopClock
from aiokprod.errors import (
    IllegalStateError,
    InvalidArgumentError,
    KafkaError,
    ProducerClosedError,
    SerializationError,
)
from aiokprod.testing.sim.world import SimWorld, Topology
from aiokprod.types import ProducerRecord, RecordMetadata

Body = Callable[[Producer], Coroutine[Any, Any, None]]


def run(body: Body, producer_type: type[Producer] = Producer, **options: Any) -> SimWorld:
    world = SimWorld(random.Random(5), Topology(1, {"t": 3}))

    async def main() -> None:
        producer = producer_type(
            world.cluster.bootstrap(),
            transport=world.transport(),
            clock=LoopClock(world.loop),
            rng=random.Random(6),
            **options,
        )
        await producer.start()
        try:
            await body(producer)
            await producer.flush()
        finally:
            await producer.close()

    world.run(main())
    return world


def logged_values(world: SimWorld) -> list[bytes | None]:
    return sorted(
        (r.value for p in range(3) for r in world.cluster.partitions["t", p].log.records()),
        key=lambda v: v or b"",
    )


BAD_CALLS: list[tuple[str, dict[str, Any], type[KafkaError]]] = [
    ("topic-list", {"topic": ["t"]}, InvalidArgumentError),
    ("topic-int", {"topic": 7}, InvalidArgumentError),
    ("topic-bytes", {"topic": b"t"}, InvalidArgumentError),
    ("topic-none", {"topic": None}, InvalidArgumentError),
    ("topic-empty", {"topic": ""}, InvalidArgumentError),
    ("partition-str", {"partition": "1"}, InvalidArgumentError),
    ("partition-bool", {"partition": True}, InvalidArgumentError),
    ("partition-negative", {"partition": -1}, InvalidArgumentError),
    ("partition-float", {"partition": 1.0}, InvalidArgumentError),
    ("timestamp-negative", {"timestamp_ms": -1}, InvalidArgumentError),
    ("timestamp-str", {"timestamp_ms": "now"}, InvalidArgumentError),
    ("timestamp-float", {"timestamp_ms": 1.5}, InvalidArgumentError),
    ("timestamp-too-big", {"timestamp_ms": 2**63}, InvalidArgumentError),
    ("value-object", {"value": object()}, SerializationError),
    ("key-object", {"key": object()}, SerializationError),
    ("headers-str", {"headers": "h"}, SerializationError),
    ("headers-bad-pair", {"headers": [("h", 5)]}, SerializationError),
]


class PassThrough:
    """An interceptor that changes nothing: send() then builds a ProducerRecord first."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        pass


@pytest.mark.parametrize("method", ["send", "send_and_wait"])
@pytest.mark.parametrize("interceptors", [False, True], ids=["plain", "intercepted"])
@pytest.mark.parametrize(("name", "bad", "error"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_a_bad_argument_is_a_typed_error_and_queues_nothing(
    name: str, bad: dict[str, Any], error: type[KafkaError], interceptors: bool, method: str
) -> None:
    caught: list[BaseException] = []

    async def body(producer: Producer) -> None:
        await (await producer.send("t", b"before"))
        args: dict[str, Any] = {"topic": "t", "value": b"refused", **bad}
        try:
            await getattr(producer, method)(**args)
        except BaseException as exc:  # noqa: BLE001 - the test inspects whatever is raised
            caught.append(exc)
        await (await producer.send("t", b"after"))

    world = run(body, interceptors=[PassThrough()] if interceptors else [])
    assert len(caught) == 1, name
    assert type(caught[0]) is error, (name, repr(caught[0]))
    assert logged_values(world) == [b"after", b"before"]


def test_a_serializer_returning_a_wrong_type_is_a_serialization_error() -> None:
    caught: list[BaseException] = []

    async def body(producer: Producer) -> None:
        try:
            await producer.send("t", "v")
        except BaseException as exc:  # noqa: BLE001
            caught.append(exc)

    world = run(body, value_serializer=lambda v: 12)
    assert [type(e) for e in caught] == [SerializationError]
    assert logged_values(world) == []


def test_send_before_start_and_after_close_is_producer_closed() -> None:
    world = SimWorld(random.Random(5), Topology(1, {"t": 1}))
    errors: list[type[BaseException]] = []

    async def main() -> None:
        producer = Producer(
            world.cluster.bootstrap(), transport=world.transport(), clock=LoopClock(world.loop)
        )
        for when in ("before", "after"):
            if when == "after":
                await producer.start()
                await producer.close()
            try:
                await producer.send("t", b"v")
            except BaseException as exc:  # noqa: BLE001
                errors.append(type(exc))

    world.run(main())
    assert errors == [ProducerClosedError, ProducerClosedError]


def test_send_from_another_thread_is_refused() -> None:
    caught: list[BaseException] = []

    async def body(producer: Producer) -> None:
        def other_thread() -> None:
            coro = producer.send("t", b"v")
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(coro)
            except BaseException as exc:  # noqa: BLE001
                caught.append(exc)
            finally:
                loop.close()

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()

    world = run(body)
    assert [type(e) for e in caught] == [IllegalStateError]
    assert logged_values(world) == []


def test_send_returns_a_coroutine_and_keywords_and_defaults_work() -> None:
    handles: list[DeliveryFuture] = []

    async def body(producer: Producer) -> None:
        coro = producer.send("t", b"a")
        assert asyncio.iscoroutine(coro)
        handles.append(await coro)
        handles.append(await producer.send(topic="t", value=b"b", key=b"k", partition=2))
        handles.append(await producer.send("t"))  # a tombstone: value None

    world = run(body)
    assert handles[1].tp.partition == 2
    assert [h.result().serialized_value_size for h in handles] == [1, 1, -1]
    assert logged_values(world) == [None, b"a", b"b"]


def test_send_and_wait_returns_a_coroutine_and_keywords_and_defaults_work() -> None:
    results: list[RecordMetadata] = []

    async def body(producer: Producer) -> None:
        coro = producer.send_and_wait("t", b"a")
        assert asyncio.iscoroutine(coro)
        results.append(await coro)
        results.append(await producer.send_and_wait(topic="t", value=b"b", key=b"k", partition=2))
        results.append(await producer.send_and_wait("t"))  # a tombstone: value None

    world = run(body)
    assert results[1].partition == 2
    assert [r.serialized_value_size for r in results] == [1, 1, -1]
    assert all(r.offset >= 0 for r in results)
    assert logged_values(world) == [None, b"a", b"b"]


def test_a_subclass_overriding_send_is_called() -> None:
    seen: list[object] = []

    class Tagging(Producer):
        async def send(self, topic: str, value: Any = None, **rest: Any) -> DeliveryFuture:  # type: ignore[override]
            seen.append(value)
            return await super().send(topic, b"tagged-" + value, **rest)

    async def body(producer: Producer) -> None:
        await (await producer.send("t", b"x"))
        metadata = await producer.send_and_wait("t", b"y")  # through the override too
        assert metadata.offset >= 0

    world = run(body, producer_type=Tagging)
    assert seen == [b"x", b"y"]
    assert logged_values(world) == [b"tagged-x", b"tagged-y"]
