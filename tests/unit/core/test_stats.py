"""ProducerStats: per-request and per-batch counters."""

from __future__ import annotations

from aiokprod.internals.stats import ProducerStats


def test_counters_accumulate() -> None:
    stats = ProducerStats()
    assert (stats.records_sent, stats.requests_sent, stats.bytes_sent) == (0, 0, 0)
    stats.on_request(batches=3, records=30, size=4096)
    stats.on_request(batches=1, records=5, size=100)
    stats.on_success(30)
    stats.on_failure(4)
    stats.on_retry(5)
    stats.on_retry(2)
    assert stats.requests_sent == 2
    assert stats.batches_sent == 4
    assert stats.bytes_sent == 4196
    assert stats.records_sent == 30
    assert stats.records_failed == 4
    assert stats.records_retried == 7
