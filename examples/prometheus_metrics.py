"""Expose the producer's metrics to Prometheus (prometheus_client's exposition).

A custom collector reads ``producer.metric_groups()`` when Prometheus scrapes (nothing is
recorded per record): the Java metric names become ``kafka_producer_<name>`` (dashes to
underscores), per-topic ones get a ``topic`` label, and the latency histograms are real
Prometheus histograms. The script sends some records, serves ``/metrics`` on a local port,
scrapes it once itself and prints a few lines. Run it with the project's local Kafka::

    python -m aiokprod.testing exec --topic metrics-demo:3 -- \\
        python examples/prometheus_metrics.py metrics-demo
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import urllib.request
from collections.abc import Iterator

from prometheus_client import start_http_server
from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from aiokprod import Producer


class ProducerCollector(Collector):
    """Prometheus metrics from one producer, read at scrape time."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def collect(self) -> Iterator[Metric]:
        groups = self.producer.metric_groups()
        for name, value in groups["producer-metrics"].items():
            if "-" not in name or (isinstance(value, float) and math.isnan(value)):
                continue  # the earlier underscore names, and empty windows
            metric = "kafka_producer_" + name.replace("-", "_")
            if name.endswith("-total"):
                yield CounterMetricFamily(metric.removesuffix("_total"), name, value=value)
            else:
                yield GaugeMetricFamily(metric, name, value=value)
        per_topic = CounterMetricFamily(
            "kafka_producer_topic_record_send", "records acknowledged", labels=["topic"]
        )
        for topic, values in groups["producer-topic-metrics"].items():
            per_topic.add_metric([topic], values["record-send-total"])
        yield per_topic
        for name, hist in groups["latency-histograms"].items():
            bounds = [float(b) for b in hist["bounds_ms"]]
            cumulative, running = [], 0
            for bound, count in zip([*bounds, math.inf], hist["counts"], strict=True):
                running += count
                cumulative.append((str(bound) if bound != math.inf else "+Inf", running))
            yield HistogramMetricFamily(
                "kafka_producer_" + name.replace("-", "_").removesuffix("_ms") + "_ms",
                name,
                buckets=cumulative,
                sum_value=hist["sum_ms"],
            )


async def main(bootstrap: str, topic: str, port: int) -> int:
    async with Producer(bootstrap) as producer:
        REGISTRY.register(ProducerCollector(producer))
        server, _ = start_http_server(port, addr="127.0.0.1")  # port 0: any free one
        port = server.server_port
        for i in range(5_000):
            await producer.send(topic, b"event %d" % i, key=str(i % 10))
        await producer.flush()
        scrape = await asyncio.to_thread(
            lambda: (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                .read()
                .decode()
            )
        )
    lines = [line for line in scrape.splitlines() if line.startswith("kafka_producer_")]
    for wanted in ("kafka_producer_record_send_total", "kafka_producer_send_to_ack_ms_count"):
        print(next(line for line in lines if line.startswith(wanted)))
    print(f"scraped {len(lines)} kafka_producer_* samples")
    return 0


if __name__ == "__main__":
    topic = sys.argv[1] if len(sys.argv) > 1 else "metrics-demo"
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    sys.exit(asyncio.run(main(servers, topic, int(os.environ.get("METRICS_PORT", "0")))))
