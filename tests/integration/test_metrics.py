"""Java-named metrics against the real broker: totals match what was sent and read back."""

from __future__ import annotations

import math

from readback import consume_all

from aiokprod import Producer
from aiokprod.testing import LocalKafka

RECORDS = 20_000


async def test_metrics_count_what_the_broker_has(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    async with Producer(kafka.bootstrap_servers, linger_ms=5) as producer:
        futures = [
            await producer.send(topic, b"v" * 100, key=str(i % 50).encode()) for i in range(RECORDS)
        ]
        await producer.flush()
        errors = [repr(e) for f in futures if (e := f.exception()) is not None]
        assert errors == [], f"{len(errors)} failed, e.g. {errors[:3]}"
        metrics = producer.metrics()
        groups = producer.metric_groups()
    assert len(consume_all(kafka.bootstrap_servers, topic, RECORDS)) == RECORDS
    assert metrics["record-send-total"] == RECORDS
    assert metrics["records_sent"] == RECORDS  # the earlier name stays
    assert metrics["record-error-total"] == 0
    assert metrics["request-total"] == metrics["response-total"] > 0
    assert metrics["record-send-rate"] > 0
    assert 0 < metrics["request-latency-avg"] <= metrics["request-latency-max"]
    assert metrics["batch-size-max"] <= 16_384 + 200  # a batch of batch_size at most
    assert metrics["records-per-request-avg"] * metrics["request-total"] >= RECORDS * 0.99
    assert not math.isnan(metrics["record-queue-time-avg"])
    assert metrics["buffer-available-bytes"] == metrics["buffer-total-bytes"]
    per_topic = groups["producer-topic-metrics"][topic]
    assert per_topic["record-send-total"] == RECORDS
    assert per_topic["byte-total"] == metrics["outgoing-byte-total"]
    (node,) = groups["producer-node-metrics"].values()
    assert node["request-total"] == metrics["request-total"]
    histogram = groups["latency-histograms"]["send-to-ack-ms"]
    batches = histogram["count"]
    assert 0 < batches <= metrics["batches_sent"]
    assert sum(histogram["counts"]) == batches
    assert groups["latency-histograms"]["request-latency-ms"]["count"] == metrics["response-total"]
