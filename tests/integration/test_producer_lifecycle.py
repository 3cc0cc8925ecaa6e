"""Lifecycle: a crash fails everything loudly, cancelling never corrupts, nothing outlives close."""

from __future__ import annotations

import asyncio

import pytest
from kafka_proxy import KafkaProxy
from readback import consume_all

from aiokprod import Producer, ProducerClosedError, ProducerCrashedError
from aiokprod.errors import IllegalStateError
from aiokprod.internals.sender import Sender
from aiokprod.testing import LocalKafka


def other_tasks() -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def test_sender_crash_fails_every_pending_and_later_send(
    kafka: LocalKafka, new_topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic()
    producer = Producer(kafka.bootstrap_servers, linger_ms=60_000, batch_size=1_000_000)
    await producer.start()
    await producer.send_and_wait(topic, b"before the crash")
    pending = [await producer.send(topic, f"p{i}".encode()) for i in range(1000)]

    original = Sender.run_once

    def exploding_run_once(self: Sender, now_ms: int) -> int:
        raise RuntimeError("simulated bug in the sender")

    monkeypatch.setattr(Sender, "run_once", exploding_run_once)
    producer._rt.sender.wakeup()  # type: ignore[union-attr]
    await asyncio.wait_for(pending[0]._result.wait(), timeout=10)
    monkeypatch.setattr(Sender, "run_once", original)

    assert all(f.done() for f in pending)
    for future in pending:
        error = future.exception()
        assert isinstance(error, ProducerCrashedError)
        assert "simulated bug" in repr(error.__cause__)
    with pytest.raises(ProducerCrashedError):
        await producer.send(topic, b"after the crash")
    with pytest.raises(ProducerCrashedError):
        await producer.close()
    assert not [t for t in other_tasks() if t.get_name() == "aiokprod-producer"]


async def test_cancelled_send_waiting_for_metadata_queues_nothing(kafka: LocalKafka) -> None:
    async with Producer(kafka.bootstrap_servers, allow_auto_create_topics=False) as producer:
        task = asyncio.create_task(producer.send("never-created-topic", b"x"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        metrics = producer.metrics()
        assert metrics["batches_queued"] == 0
        assert metrics["buffer_available_bytes"] == metrics["buffer_total_bytes"]


async def test_cancelled_send_waiting_for_memory_returns_nothing_reserved(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    proxy = KafkaProxy({n.node_id: (n.host, n.port) for n in kafka.nodes.values()})
    async with (
        proxy,
        Producer(proxy.bootstrap_servers, buffer_memory=64 * 1024, max_block_ms=30_000) as producer,
    ):
        await producer.send_and_wait(topic, b"warm-up")
        proxy.stall()  # nothing is acknowledged, so memory is not given back
        accepted = []
        waiting = None
        for _ in range(200):  # 4 batches of 16 KiB fill the 64 KiB buffer
            task = asyncio.create_task(producer.send(topic, bytes(4000), partition=0))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            if not done:
                waiting = task
                break
            accepted.append(task.result())
        assert waiting is not None, "a send must block once buffer_memory is used up"
        before = producer.metrics()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        after = producer.metrics()
        assert after["buffer_waiters"] == 0
        assert after["buffer_available_bytes"] == before["buffer_available_bytes"]
        proxy.resume()
        await producer.flush()
        assert all(f.exception() is None for f in accepted)
    assert len(consume_all(kafka.bootstrap_servers, topic, len(accepted) + 1)) == len(accepted) + 1


async def test_cancelling_send_and_wait_does_not_cancel_the_record(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    proxy = KafkaProxy({n.node_id: (n.host, n.port) for n in kafka.nodes.values()})
    async with proxy, Producer(proxy.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"first")
        proxy.stall()  # the acknowledgement cannot arrive before the cancellation
        waiter = asyncio.create_task(producer.send_and_wait(topic, b"second"))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        proxy.resume()
        await producer.flush()
    values = sorted(r.value for r in consume_all(kafka.bootstrap_servers, topic, 2))
    assert values == [b"first", b"second"]


async def test_state_errors_and_no_orphan_tasks(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic()
    before = other_tasks()
    producer = Producer(kafka.bootstrap_servers)
    with pytest.raises(ProducerClosedError, match="not started"):
        await producer.send(topic, b"x")
    await producer.start()
    with pytest.raises(IllegalStateError):
        await producer.start()
    await producer.send_and_wait(topic, b"x")
    await producer.close()
    await producer.close()  # closing twice is fine
    await asyncio.sleep(0)
    assert other_tasks() - before == set()
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"y")
