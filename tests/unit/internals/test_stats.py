"""ProducerStats: Java-named metrics over 30 s samples, per batch and per request."""

from __future__ import annotations

import math

import pytest

from aiokprod.internals.stats import LATENCY_BUCKETS_MS, SAMPLES, WINDOW_MS, ProducerStats, Windowed
from aiokprod.types import TopicPartition

from ._helpers import new_batch


def test_windowed_rate_uses_javas_minimum_window() -> None:
    stat = Windowed()
    stat.record(300, 0)
    # One sample, younger than a window: Java divides by (samples - 1) full windows at least.
    assert stat.rate(1_000) == pytest.approx(300 / ((1_000 + WINDOW_MS * (SAMPLES - 1)) / 1000))
    assert stat.avg(1_000) == 300
    assert stat.max(1_000) == 300


def test_windowed_forgets_samples_older_than_the_window() -> None:
    stat = Windowed()
    stat.record(5, 0)
    stat.record(1, WINDOW_MS)  # a second sample
    assert stat.max(WINDOW_MS) == 5
    stat.record(2, 2 * WINDOW_MS)  # a third: the first is dropped
    assert stat.max(2 * WINDOW_MS) == 2
    assert stat.avg(10 * WINDOW_MS) is not None
    assert math.isnan(stat.avg(10 * WINDOW_MS))  # nothing recent: NaN, as Java reports
    assert stat.rate(10 * WINDOW_MS) == 0.0


def test_producer_topic_and_node_groups() -> None:
    stats = ProducerStats()
    a = new_batch(TopicPartition("a", 0), records=10, now_ms=0)
    b = new_batch(TopicPartition("b", 1), records=4, now_ms=0)
    a.close()
    b.close()
    stats.on_request(2, [a, b], a.size_in_bytes + b.size_in_bytes, 40)
    stats.on_response(2, 15, 3, 55)
    stats.on_success(a, 60)
    stats.on_failure(b, 60)
    stats.on_retry(b, 50)
    p = stats.producer_metrics(60)
    assert p["record-send-total"] == 10
    assert p["record-error-total"] == 4
    assert p["record-retry-total"] == 4
    assert p["request-total"] == 1
    assert p["response-total"] == 1
    assert p["request-latency-avg"] == 15
    assert p["produce-throttle-time-max"] == 3
    assert p["record-queue-time-max"] == 40  # created at 0, drained at 40
    assert p["records-per-request-avg"] == 14
    assert p["batch-size-max"] == max(a.size_in_bytes, b.size_in_bytes)
    assert p["outgoing-byte-total"] == a.size_in_bytes + b.size_in_bytes
    topics = stats.topic_metrics(60)
    assert topics["a"]["record-send-total"] == 10
    assert topics["b"]["record-error-total"] == 4
    assert topics["a"]["byte-total"] == a.size_in_bytes
    nodes = stats.node_metrics(60)
    assert nodes[2]["request-total"] == 1
    assert nodes[2]["request-latency-max"] == 15
    hist = stats.histograms()["send-to-ack-ms"]
    assert hist["count"] == 1
    assert hist["sum_ms"] == 60
    counts = hist["counts"]
    assert isinstance(counts, list)
    assert sum(counts) == 1
    assert counts[next(i for i, bound in enumerate(LATENCY_BUCKETS_MS) if bound >= 60)] == 1


def test_a_released_topic_holds_nothing_and_counts_afresh_when_used_again() -> None:
    stats = ProducerStats()
    first = new_batch(TopicPartition("a", 0), records=3, now_ms=0)
    first.close()
    stats.on_request(1, [first], first.size_in_bytes, 10)
    stats.on_success(first, 20)
    assert stats.topic_metrics(20)["a"]["byte-total"] == first.size_in_bytes
    stats.release_topics(["a"])
    assert "a" not in stats.topic_metrics(30)
    assert not stats._topic_stats  # the per-batch lookups of the topic are gone too
    again = new_batch(TopicPartition("a", 0), records=2, now_ms=40)
    again.close()
    stats.on_request(1, [again], again.size_in_bytes, 50)
    stats.on_success(again, 60)
    # Used again: reported, from zero (a released topic's recordings must not go astray).
    assert stats.topic_metrics(60)["a"]["byte-total"] == again.size_in_bytes
    assert stats.topic_metrics(60)["a"]["record-send-total"] == 2
