"""confluent-kafka's asyncio AIOProducer (2.12+), used as its documentation shows.

* throughput: ``futures.append(await producer.produce(topic, value, key=key))`` per record
  (it buffers 1,000 records in Python, its default, and hands them to librdkafka's
  ``produce_batch`` in a thread pool), then ``await producer.flush()``.
* latency: ``future = await producer.produce(...)``, ``await producer.flush()``,
  ``await future`` per record (without the flush a lone record waits for the 1,000-record
  buffer or its 1 s timeout).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka.aio import AIOProducer

from benchmarks.runners.common import Outcome, Records, Spec, Window, run_main
from benchmarks.runners.confluent_runner import config, library


async def run(spec: Spec, outcome: Outcome) -> None:
    outcome.library = library()
    records = Records(spec)
    producer = AIOProducer(config(spec))
    try:
        await producer.list_topics(spec.topic, timeout=30)  # metadata before the clock starts
        if spec.kind == "latency":
            await _latency(producer, spec, records, outcome)
        else:
            await _throughput(producer, spec, records, outcome)
    finally:
        await producer.close()


async def _throughput(
    producer: AIOProducer, spec: Spec, records: Records, outcome: Outcome
) -> None:
    keys, values = records.lists(spec.records)
    topic = spec.topic
    futures: list[asyncio.Future[Any]] = []
    append = futures.append
    produce = producer.produce
    window = Window()
    window.start()
    if keys is None:
        for value in values:
            append(await produce(topic, value))
    else:
        for key, value in zip(keys, values, strict=True):
            append(await produce(topic, value, key=key))
    await producer.flush()
    window.stop(outcome)
    outcome.sent = len(futures)
    pending = [f for f in futures if not f.done()]
    if pending:
        outcome.notes.append(f"{len(pending)} future(s) not yet resolved when flush() returned")
        await asyncio.wait(pending, timeout=30)
    for future in futures:
        exc = future.exception() if future.done() else RuntimeError("never resolved")
        if exc is not None:
            outcome.error(exc)


async def _latency(producer: AIOProducer, spec: Spec, records: Records, outcome: Outcome) -> None:
    _, values = records.lists(spec.warmup + spec.records)
    topic = spec.topic
    produce = producer.produce
    flush = producer.flush

    async def one(value: bytes) -> None:
        try:
            future = await produce(topic, value)
            await flush()
            await future
        except Exception as exc:  # noqa: BLE001 - counted as a failed record, the run goes on
            outcome.error(exc)

    for value in values[: spec.warmup]:
        await one(value)
    samples = outcome.latencies_ns
    clock = time.perf_counter_ns
    window = Window()
    window.start()
    for value in values[spec.warmup :]:
        began = clock()
        await one(value)
        samples.append(clock() - began)
    window.stop(outcome)
    outcome.sent = spec.warmup + spec.records


def main() -> None:
    run_main(lambda spec, outcome: asyncio.run(run(spec, outcome)))


if __name__ == "__main__":
    main()
