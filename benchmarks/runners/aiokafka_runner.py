"""aiokafka's AIOKafkaProducer, used as its documentation shows.

* throughput: ``futures.append(await producer.send(topic, value, key=key))`` per record, then
  ``await producer.flush()``; errors are counted from the futures afterwards.
* latency: ``await producer.send_and_wait(topic, value)`` one at a time.

aiokafka has no max-in-flight option (it keeps one Produce request in flight per broker).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Any

from benchmarks.runners.common import (
    Outcome,
    Records,
    Spec,
    Window,
    run_main,
    throughput_callbacks,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import aiokafka
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError


def options(spec: Spec) -> dict[str, Any]:
    """The common settings in aiokafka's option names."""
    if spec.library_defaults:
        return {}
    acks = spec.setting("acks")
    codec = spec.setting("compression")
    return {
        "acks": "all" if acks == "all" else int(acks),
        "linger_ms": spec.setting("linger_ms"),
        "max_batch_size": spec.setting("batch_size"),
        "compression_type": None if codec == "none" else codec,
        "enable_idempotence": spec.setting("idempotence"),
    }


async def run(spec: Spec, outcome: Outcome) -> None:
    outcome.library = f"aiokafka {aiokafka.__version__}"
    records = Records(spec)
    producer = AIOKafkaProducer(bootstrap_servers=spec.bootstrap, **options(spec))
    await producer.start()
    try:
        await producer.partitions_for(spec.topic)  # metadata before the clock starts
        if spec.kind == "latency":
            await _latency(producer, spec, records, outcome)
        elif spec.mode == "callback":
            await throughput_callbacks(producer, spec, records, outcome)
        else:
            await _throughput(producer, spec, records, outcome)
    finally:
        await producer.stop()


async def _throughput(
    producer: AIOKafkaProducer, spec: Spec, records: Records, outcome: Outcome
) -> None:
    keys, values = records.lists(spec.records)
    topic = spec.topic
    futures: list[asyncio.Future[Any]] = []  # send()'s futures of RecordMetadata (untyped)
    append = futures.append
    send = producer.send
    window = Window()
    window.start()
    if keys is None:
        for value in values:
            append(await send(topic, value))
    else:
        for key, value in zip(keys, values, strict=True):
            append(await send(topic, value, key=key))
    await producer.flush()
    window.stop(outcome)
    outcome.sent = len(futures)
    for future in futures:
        exc = future.exception() if future.done() else RuntimeError("not done after flush")
        if exc is not None:
            outcome.error(exc)


async def _latency(
    producer: AIOKafkaProducer, spec: Spec, records: Records, outcome: Outcome
) -> None:
    _, values = records.lists(spec.warmup + spec.records)
    topic = spec.topic
    send_and_wait = producer.send_and_wait
    for value in values[: spec.warmup]:
        try:
            await send_and_wait(topic, value)
        except KafkaError as exc:
            outcome.error(exc)
    samples = outcome.latencies_ns
    clock = time.perf_counter_ns
    window = Window()
    window.start()
    for value in values[spec.warmup :]:
        began = clock()
        try:
            await send_and_wait(topic, value)
        except KafkaError as exc:
            outcome.error(exc)
        samples.append(clock() - began)
    window.stop(outcome)
    outcome.sent = spec.warmup + spec.records


def main() -> None:
    run_main(lambda spec, outcome: asyncio.run(run(spec, outcome)))


if __name__ == "__main__":
    main()
