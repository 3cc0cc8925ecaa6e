"""confluent-kafka's classic Producer (librdkafka), used as its documentation shows.

* throughput: ``produce(topic, value, key=key, on_delivery=callback)`` then ``poll(0)`` per
  record (serving delivery callbacks as the docs ask); on ``BufferError`` (local queue full)
  ``poll(0.001)`` and retry; then ``flush()``.
* latency: ``produce(...)`` then ``flush()`` per record (flush does not wait out linger.ms).
"""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
from confluent_kafka import Producer

from benchmarks.runners.common import Outcome, Records, Spec, Window, run_main

FLUSH_TIMEOUT = 120.0


def config(spec: Spec) -> dict[str, Any]:
    """The common settings in librdkafka's names."""
    conf: dict[str, Any] = {"bootstrap.servers": spec.bootstrap}
    if spec.library_defaults:
        return conf
    conf.update(
        {
            "acks": "all" if spec.setting("acks") == "all" else str(spec.setting("acks")),
            "linger.ms": spec.setting("linger_ms"),
            "batch.size": spec.setting("batch_size"),
            "compression.type": spec.setting("compression"),
            "enable.idempotence": spec.setting("idempotence"),
            "max.in.flight.requests.per.connection": spec.setting("max_in_flight"),
        }
    )
    return conf


def library() -> str:
    versions = confluent_kafka.version()[0], confluent_kafka.libversion()[0]
    return "confluent-kafka {} (librdkafka {})".format(*versions)


def run(spec: Spec, outcome: Outcome) -> None:
    outcome.library = library()
    records = Records(spec)
    producer = Producer(config(spec))
    producer.list_topics(spec.topic, timeout=30)  # connect + metadata before the clock starts

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            outcome.error(str(err))

    if spec.kind == "latency":
        _latency(producer, spec, records, outcome, on_delivery)
    else:
        _throughput(producer, spec, records, outcome, on_delivery)


def _throughput(
    producer: Producer, spec: Spec, records: Records, outcome: Outcome, on_delivery: Any
) -> None:
    keys, values = records.lists(spec.records)
    topic = spec.topic
    produce = producer.produce
    poll = producer.poll
    window = Window()
    window.start()
    if keys is None:
        for value in values:
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            poll(0)
    else:
        for key, value in zip(keys, values, strict=True):
            while True:
                try:
                    produce(topic, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            poll(0)
    left = producer.flush(FLUSH_TIMEOUT)
    window.stop(outcome)
    outcome.sent = spec.records
    if left:
        outcome.error(f"{left} record(s) still queued after flush({FLUSH_TIMEOUT})")


def _latency(
    producer: Producer, spec: Spec, records: Records, outcome: Outcome, on_delivery: Any
) -> None:
    _, values = records.lists(spec.warmup + spec.records)
    topic = spec.topic
    produce = producer.produce
    flush = producer.flush
    for value in values[: spec.warmup]:
        produce(topic, value, on_delivery=on_delivery)
        flush(FLUSH_TIMEOUT)
    samples = outcome.latencies_ns
    clock = time.perf_counter_ns
    window = Window()
    window.start()
    for value in values[spec.warmup :]:
        began = clock()
        produce(topic, value, on_delivery=on_delivery)
        flush(FLUSH_TIMEOUT)
        samples.append(clock() - began)
    window.stop(outcome)
    outcome.sent = spec.warmup + spec.records


def main() -> None:
    run_main(run)


if __name__ == "__main__":
    main()
