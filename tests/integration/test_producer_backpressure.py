"""Back-pressure and stalls, with a proxy between the producer and the real broker."""

from __future__ import annotations

import pytest
from kafka_proxy import KafkaProxy
from readback import consume_all

from aiokprod import BufferExhaustedError, Producer
from aiokprod.testing import LocalKafka


def proxy_for(kafka: LocalKafka) -> KafkaProxy:
    return KafkaProxy({n.node_id: (n.host, n.port) for n in kafka.nodes.values()})


async def test_send_blocks_then_fails_when_buffer_is_full_and_broker_stalls(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    buffer_memory = 256 * 1024
    async with (
        proxy_for(kafka) as proxy,
        Producer(
            proxy.bootstrap_servers, buffer_memory=buffer_memory, max_block_ms=1000
        ) as producer,
    ):
        await producer.send_and_wait(topic, b"warm-up")
        assert proxy.rewritten_responses > 0, "metadata points at the proxy"
        proxy.stall()
        futures = []

        async def fill_until_blocked() -> None:
            for _ in range(10_000):
                futures.append(await producer.send(topic, bytes(1000)))
                used = buffer_memory - producer.metrics()["buffer_available_bytes"]
                assert 0 <= used <= buffer_memory

        with pytest.raises(BufferExhaustedError, match="buffer_memory=262144"):
            await fill_until_blocked()
        accepted = len(futures)
        assert 100 < accepted < 1000, "it blocked once about buffer_memory was queued"
        assert not any(f.done() for f in futures)
        proxy.resume()
        await producer.flush()
        assert all(f.exception() is None for f in futures)
    consumed = consume_all(kafka.bootstrap_servers, topic, accepted + 1)
    assert len(consumed) == accepted + 1
