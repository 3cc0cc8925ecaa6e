"""Slow compression runs in a worker thread: the loop keeps ticking, the data arrives intact."""

from __future__ import annotations

import asyncio
import random
import time

from readback import consume_all

from aiokprod import Producer
from aiokprod.testing import LocalKafka


def record(i: int, rng: random.Random) -> bytes:
    return f'{{"id": {i}, "user": "u{rng.randrange(10**6)}", "x": {rng.random()}}}'.encode()


async def test_zstd_22_batches_compress_off_the_loop(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    rng = random.Random(7)
    values = [record(i, rng) for i in range(20_000)]
    lateness: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            lateness.append(time.perf_counter() - before - 0.005)

    async with Producer(
        kafka.bootstrap_servers,
        compression_type="zstd",
        compression_level=22,
        batch_size=256 * 1024,
        linger_ms=50,
    ) as producer:
        ticking = asyncio.create_task(ticker())
        futures = [await producer.send(topic, v) for v in values]
        await producer.flush()
        stop.set()
        await ticking
        metrics = producer.metrics()
    assert all(f.exception() is None for f in futures)
    assert metrics["batches_compressed_in_thread"] > 0
    assert metrics["bytes_sent"] < sum(map(len, values)) / 2, "the batches were compressed"
    consumed = consume_all(kafka.bootstrap_servers, topic, len(values))
    assert sorted(r.value for r in consumed) == sorted(values)
    # Not a timing assertion on the client's speed: a sanity bound showing the loop was not
    # held for whole compressions (each ~50-100 ms here when done on the loop).
    lateness.sort()
    assert lateness[len(lateness) // 2] < 0.05
