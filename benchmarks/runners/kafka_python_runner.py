"""kafka-python's KafkaProducer, used as its documentation shows.

* throughput: ``futures.append(producer.send(topic, value=value, key=key))`` per record, then
  ``producer.flush()``; errors are counted from the futures afterwards.
* latency: ``producer.send(topic, value).get()`` one at a time.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any

from benchmarks.runners.common import Outcome, Records, Spec, Window, run_main

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

if TYPE_CHECKING:
    from kafka.producer.future import FutureRecordMetadata  # no type information: Any

GET_TIMEOUT = 60.0


def options(spec: Spec) -> dict[str, Any]:
    """The common settings in kafka-python's option names."""
    if spec.library_defaults:
        return {}
    acks = spec.setting("acks")
    codec = spec.setting("compression")
    return {
        "acks": "all" if acks == "all" else int(acks),
        "linger_ms": spec.setting("linger_ms"),
        "batch_size": spec.setting("batch_size"),
        "compression_type": None if codec == "none" else codec,
        "enable_idempotence": spec.setting("idempotence"),
        "max_in_flight_requests_per_connection": spec.setting("max_in_flight"),
    }


def run(spec: Spec, outcome: Outcome) -> None:
    outcome.library = f"kafka-python {kafka.__version__}"
    records = Records(spec)
    producer = KafkaProducer(bootstrap_servers=spec.bootstrap, **options(spec))
    try:
        producer.partitions_for(spec.topic)  # metadata before the clock starts
        if spec.kind == "latency":
            _latency(producer, spec, records, outcome)
        else:
            _throughput(producer, spec, records, outcome)
    finally:
        producer.close()


def _throughput(producer: KafkaProducer, spec: Spec, records: Records, outcome: Outcome) -> None:
    keys, values = records.lists(spec.records)
    topic = spec.topic
    futures: list[FutureRecordMetadata] = []
    append = futures.append
    send = producer.send
    window = Window()
    window.start()
    if keys is None:
        for value in values:
            append(send(topic, value=value))
    else:
        for key, value in zip(keys, values, strict=True):
            append(send(topic, value=value, key=key))
    producer.flush()
    window.stop(outcome)
    outcome.sent = len(futures)
    for future in futures:
        if not future.is_done:
            outcome.error("not done after flush()")
        elif future.failed():
            outcome.error(future.exception)


def _latency(producer: KafkaProducer, spec: Spec, records: Records, outcome: Outcome) -> None:
    _, values = records.lists(spec.warmup + spec.records)
    topic = spec.topic
    send = producer.send
    for value in values[: spec.warmup]:
        try:
            send(topic, value=value).get(GET_TIMEOUT)
        except KafkaError as exc:
            outcome.error(exc)
    samples = outcome.latencies_ns
    clock = time.perf_counter_ns
    window = Window()
    window.start()
    for value in values[spec.warmup :]:
        began = clock()
        try:
            send(topic, value=value).get(GET_TIMEOUT)
        except KafkaError as exc:
            outcome.error(exc)
        samples.append(clock() - began)
    window.stop(outcome)
    outcome.sent = spec.warmup + spec.records


def main() -> None:
    run_main(run)


if __name__ == "__main__":
    main()
