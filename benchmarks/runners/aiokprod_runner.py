"""aiokprod through its public API, as a user would write it.

* throughput: ``futures.append(await producer.send(topic, value, key=key))`` per record, then
  ``await producer.flush()``; errors are counted from the futures afterwards.
* throughput, mode ``send_many``: the bulk API, when ``Producer`` has one (see
  :func:`_send_many`).
* throughput, mode ``callback``: ``add_done_callback`` on each returned future, none kept.
* latency: ``await producer.send_and_wait(topic, value)`` one at a time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiokprod
from aiokprod import DeliveryFuture, Producer
from aiokprod.compiled import compiled_modules
from benchmarks.runners.common import (
    Outcome,
    Records,
    Spec,
    Window,
    run_main,
    throughput_callbacks,
)

SEND_MANY_CHUNK = 10_000
"""Records per ``send_many`` call."""


def options(spec: Spec) -> dict[str, Any]:
    """The common settings in aiokprod's option names."""
    if spec.library_defaults:
        return {}
    acks = spec.setting("acks")
    return {
        "acks": "all" if acks == "all" else int(acks),
        "linger_ms": spec.setting("linger_ms"),
        "batch_size": spec.setting("batch_size"),
        "compression_type": spec.setting("compression"),
        "enable_idempotence": spec.setting("idempotence"),
        "max_in_flight_requests_per_connection": spec.setting("max_in_flight"),
    }


async def run(spec: Spec, outcome: Outcome) -> None:
    compiled = compiled_modules()
    outcome.library = f"aiokprod {aiokprod.__version__}" + (
        f" (mypyc: {len(compiled)} modules)" if compiled else ""
    )
    loop_module = type(asyncio.get_running_loop()).__module__.split(".")[0]
    if loop_module != spec.event_loop:
        raise RuntimeError(f"asked for {spec.event_loop}, running on {loop_module}")
    if loop_module != "asyncio":
        outcome.library += f" on {loop_module}"
    records = Records(spec)
    async with Producer(spec.bootstrap, **options(spec)) as producer:
        await producer.partitions_for(spec.topic)  # metadata before the clock starts
        if spec.kind == "latency":
            await _latency(producer, spec, records, outcome)
        elif spec.mode == "callback":
            await throughput_callbacks(producer, spec, records, outcome)
        elif spec.mode == "send_many":
            await _send_many(producer, spec, records, outcome)
        else:
            await _throughput(producer, spec, records, outcome)


async def _throughput(producer: Producer, spec: Spec, records: Records, outcome: Outcome) -> None:
    keys, values = records.lists(spec.records)
    topic = spec.topic
    futures: list[DeliveryFuture] = []
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
        exc = future.exception()
        if exc is not None:
            outcome.error(exc)


async def _send_many(producer: Producer, spec: Spec, records: Records, outcome: Outcome) -> None:
    """The bulk path: ``send_many(topic, values, keys=keys)`` per chunk of
    :data:`SEND_MANY_CHUNK` records (lists built before timing), then ``flush()``; failures
    are counted from each returned ``BulkDelivery`` afterwards."""
    keys, values = records.lists(spec.records)
    topic = spec.topic
    chunks = []
    for start in range(0, spec.records, SEND_MANY_CHUNK):
        chunk_keys = keys[start : start + SEND_MANY_CHUNK] if keys is not None else None
        chunks.append((chunk_keys, values[start : start + SEND_MANY_CHUNK]))
    send_many = producer.send_many
    results = []
    window = Window()
    window.start()
    for chunk_keys, chunk_values in chunks:
        if chunk_keys is None:
            results.append(await send_many(topic, chunk_values))
        else:
            results.append(await send_many(topic, chunk_values, keys=chunk_keys))
    await producer.flush()
    window.stop(outcome)
    outcome.sent = sum(len(result) for result in results)
    for result in results:
        if not result.done():
            outcome.error("a send_many() delivery was not done after flush()")
        for _index, exc in result.errors():
            outcome.error(exc)


async def _latency(producer: Producer, spec: Spec, records: Records, outcome: Outcome) -> None:
    _, values = records.lists(spec.warmup + spec.records)
    topic = spec.topic
    send_and_wait = producer.send_and_wait
    for value in values[: spec.warmup]:
        try:
            await send_and_wait(topic, value)
        except aiokprod.KafkaError as exc:
            outcome.error(exc)
    samples = outcome.latencies_ns
    clock = time.perf_counter_ns
    window = Window()
    window.start()
    for value in values[spec.warmup :]:
        began = clock()
        try:
            await send_and_wait(topic, value)
        except aiokprod.KafkaError as exc:
            outcome.error(exc)
        samples.append(clock() - began)
    window.stop(outcome)
    outcome.sent = spec.warmup + spec.records


def _run_on_its_loop(spec: Spec, outcome: Outcome) -> None:
    if spec.event_loop == "uvloop":
        import uvloop  # only this row needs it (a test dependency)

        uvloop.run(run(spec, outcome))
    else:
        asyncio.run(run(spec, outcome))


def main() -> None:
    run_main(_run_on_its_loop)


if __name__ == "__main__":
    main()
