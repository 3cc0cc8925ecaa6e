"""Counters behind ``Producer.metrics()``, updated per batch and per request (never per record)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ProducerStats:
    """Running totals since the producer started."""

    records_sent: int = 0
    records_failed: int = 0
    records_retried: int = 0
    batches_sent: int = 0
    requests_sent: int = 0
    bytes_sent: int = 0
    records_in_requests: int = 0
    batches_compressed_in_thread: int = 0

    def on_request(self, batches: int, records: int, size: int) -> None:
        """A Produce request was written (retries count again)."""
        self.requests_sent += 1
        self.batches_sent += batches
        self.records_in_requests += records
        self.bytes_sent += size

    def on_success(self, records: int) -> None:
        """Records were acknowledged."""
        self.records_sent += records

    def on_failure(self, records: int) -> None:
        """Records failed for good."""
        self.records_failed += records

    def on_retry(self, records: int) -> None:
        """Records go back to the queue for another attempt."""
        self.records_retried += records
